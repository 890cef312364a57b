"""The send-run wrapper: a send recorded in ``runs``, logged, and alerted on.

:class:`SendRun` is the same for a send in this process and for the workers' enqueuer: both
record, log and alert from one :class:`~newsletter.edition.report.SendReport`.
"""

from __future__ import annotations

import logging
from datetime import datetime
from types import TracebackType
from typing import Any

from newsletter.edition.report import SendReport
from newsletter.logs import step
from newsletter.runs.alerts import alert
from newsletter.runs.leases import RunLease, settle_interrupted
from newsletter.services import Services
from newsletter.store.protocol import SendStore

log = logging.getLogger(__name__)


class SendRun:
    """One recorded send run, in this process or through the workers (the send-run wrapper).

    ``with SendRun(...) as run:`` settles interrupted runs, records this one as ``running``
    with a lease, and :meth:`finish` records the report's counts, logs them and raises the
    operator alert when the relay could not be used. A run left by an exception is recorded
    ``failed`` with that error, when the database still answers.
    """

    def __init__(self, services: Services[SendStore], now: datetime, kind: str = "send") -> None:
        self.services = services
        self.config = services.config
        self.store = services.store
        self.now = now
        self.kind = kind
        self.lease: RunLease | None = None
        self.done = False

    @property
    def owner(self) -> str:
        """The run's name in ``runs`` and in the ledger rows it claims (once entered)."""
        assert self.lease is not None
        return self.lease.owner

    @property
    def id(self) -> int:
        """The run's id in ``runs`` (once entered)."""
        assert self.lease is not None
        return self.lease.id

    def __enter__(self) -> SendRun:
        settle_interrupted(self.store, self.now)
        self.lease = RunLease(self.store, self.kind, self.now, clock=self.services.clock)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self.lease is not None
        self.lease.close()
        if exc is not None and not self.done:
            self.end("failed", {}, f"{exc}" or type(exc).__name__)

    def end(self, status: str, counts: dict[str, Any], error: str | None) -> None:
        """Record the run as ended (best effort when the database is what failed)."""
        self.done = True
        try:
            self.store.finish_run(self.id, status, self.services.clock(), counts, error)
        except Exception as e:  # the database is away: the run shows as interrupted later
            log.warning("could not record the end of run %d: %s", self.id, e)

    def finish(self, report: SendReport, **extra: Any) -> SendReport:
        """Record, log and (relay unusable) alert on ``report``; returns it."""
        counts = report.as_dict() | extra
        status = "failed" if report.relay_error else ("stopped" if report.stopped else "ok")
        error = report.relay_error or ("; ".join(report.errors[:20]) or None)
        if report.no_listing_reason and not error:
            error = f"{report.no_listing} skipped: {report.no_listing_reason}"
        self.end(status, counts, error)
        if report.considered or report.relay_error:
            step(f"{self.kind} done", **{k: v for k, v in counts.items() if v})
        if report.relay_error:
            alert(
                self.config,
                "sending stopped: the relay cannot be used",
                f"{report.relay_error}\n\nNothing more was sent in this run; editions not sent "
                "are retried by the next run.",
                self.now,
                services=self.services,
                relay_broken=True,
            )
        return report
