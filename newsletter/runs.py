"""Run steps as the scheduler, the CLI, the admin endpoint and the workers' enqueuer perform them.

Each wraps one pipeline step with what operations needs around it: a row in ``runs`` (counts,
errors, duration), one structured log line with the counts, and an operator alert when the
step failed or found nothing on a day it should have.

A run holds a lease while it works: its process (``host:pid:incarnation``, as the ledger names
owners) and a heartbeat renewed every :data:`HEARTBEAT` seconds. A run still recorded as
``running`` whose process is gone, or whose heartbeat is older than :data:`STALE_AFTER`, was
killed: ``status`` shows it as ``interrupted``, with what the ledger says it did, and the next
run records it so (:func:`settle_interrupted`).

:class:`SendRun` is the one send-run wrapper: ``newsletter send`` in this process and the
workers' enqueuer both record, log and alert through it, from one serialized
:class:`~newsletter.edition.SendReport`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from newsletter.alerts import alert
from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.deliver import MailerFactory
from newsletter.edition import SendReport, run_send
from newsletter.ingest import FetchReport, run_fetch
from newsletter.logs import step
from newsletter.models import Subscriber
from newsletter.schedule import ARXIV_TZ, announces_on
from newsletter.sending import owner_gone, run_owner
from newsletter.store import Store
from newsletter.store.db import RunRecord

log = logging.getLogger(__name__)

HEARTBEAT = 10.0
"""Seconds between a running run's heartbeats."""
STALE_AFTER = 90.0
"""A run whose heartbeat is older than this is taken as interrupted (its host may be another)."""


def _lease(run: RunRecord) -> tuple[str | None, datetime | None]:
    lease = run.counts.get("lease") if isinstance(run.counts, dict) else None
    if not isinstance(lease, dict):
        return None, None
    owner, beat = lease.get("owner"), lease.get("heartbeat")
    try:
        heartbeat = datetime.fromisoformat(beat) if isinstance(beat, str) else None
    except ValueError:
        heartbeat = None
    return (owner if isinstance(owner, str) else None), heartbeat


def is_interrupted(run: RunRecord, now: datetime) -> bool:
    """True when ``run`` is recorded as ``running`` but its process is gone or silent."""
    if run.status != "running":
        return False
    owner, heartbeat = _lease(run)
    if owner is not None and owner_gone(owner):
        return True
    last = heartbeat or run.started
    return now - last > timedelta(seconds=STALE_AFTER)


def interrupted_record(store: Store, run: RunRecord, now: datetime) -> RunRecord:
    """``run`` as an interrupted run: when it was last alive, the ledger's count of what its
    process did since it started, and the errors it met."""
    owner, heartbeat = _lease(run)
    counts: dict[str, Any] = {}
    errors: list[str] = []
    if owner is not None:
        # the ledger names each send by its process and a run suffix: host:pid:incarnation.run
        by_status, errors = store.ledger_of(owner.split(".", 1)[0] + ".", run.started)
        counts = {k: by_status[k] for k in sorted(by_status)}
    where = f" ({owner.rsplit('.', 1)[0]})" if owner else ""
    error = f"interrupted: its process{where} stopped without recording the run"
    if errors:
        error += "; errors met: " + "; ".join(errors)
    finished = heartbeat or run.started
    return replace(
        run,
        status="interrupted",
        finished=finished,
        counts=counts,
        error=error,
    )


def runs_as_seen(store: Store, runs: Sequence[RunRecord], now: datetime) -> list[RunRecord]:
    """``runs`` with every interrupted one shown as such (for ``status``; writes nothing)."""
    return [interrupted_record(store, r, now) if is_interrupted(r, now) else r for r in runs]


def count_interrupted(store: Store, now: datetime) -> int:
    """Runs recorded as ``running`` whose process is gone or silent (for /metrics)."""
    return sum(1 for run in store.running_runs() if is_interrupted(run, now))


def settle_interrupted(store: Store, now: datetime) -> int:
    """Record every interrupted run as ``interrupted``; returns how many there were."""
    settled = 0
    for run in store.running_runs():
        if is_interrupted(run, now):
            seen = interrupted_record(store, run, now)
            assert seen.finished is not None
            if store.settle_run(run.id, "interrupted", seen.finished, seen.counts, seen.error):
                settled += 1
                log.warning("run %d (%s) was %s", run.id, run.kind, seen.error)
    return settled


class RunLease:
    """A ``running`` row in ``runs`` with a heartbeat, renewed on a thread until closed."""

    def __init__(self, store: Store, kind: str, now: datetime) -> None:
        self.store = store
        self.owner = run_owner()
        self.id = store.start_run(kind, now, owner=self.owner)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"run-{self.id}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            try:
                self.store.beat_run(self.id, self.owner, utcnow())
            except Exception as e:  # the database is away: the run itself will say so
                log.warning("could not renew the lease of run %d: %s", self.id, e)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class SendRun:
    """One recorded send run, in this process or through the workers (the send-run wrapper).

    ``with SendRun(...) as run:`` settles interrupted runs, records this one as ``running``
    with a lease, and :meth:`finish` records the report's counts, logs them and raises the
    operator alert when the relay could not be used. A run left by an exception is recorded
    ``failed`` with that error, when the database still answers.
    """

    def __init__(
        self,
        config: Config,
        store: Store,
        now: datetime,
        kind: str = "send",
        *,
        mailer_factory: MailerFactory | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.now = now
        self.kind = kind
        self.mailer_factory = mailer_factory
        self.lease: RunLease | None = None
        self.done = False

    @property
    def id(self) -> int:
        assert self.lease is not None
        return self.lease.id

    def __enter__(self) -> SendRun:
        settle_interrupted(self.store, self.now)
        self.lease = RunLease(self.store, self.kind, self.now)
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
            self.store.finish_run(self.id, status, utcnow(), counts, error)
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
                mailer_factory=self.mailer_factory,
                relay_broken=True,
            )
        return report


def fetch_step(
    config: Config,
    store: Store,
    now: datetime,
    *,
    only: Sequence[str] = (),
    progress: Callable[..., None] | None = None,
    mailer_factory: MailerFactory | None = None,
) -> FetchReport:
    """Fetch every configured source (or those in ``only``); record, log and alert on it."""
    settle_interrupted(store, now)
    lease = RunLease(store, "fetch", now)
    run_id = lease.id
    try:
        report = run_fetch(config, store, now, only=only, progress=progress)
    finally:
        lease.close()
    failed = [s.source for s in report.failed]
    counts = {
        "sources": len(report.sources),
        "entries": report.entries,
        "new": report.new,
        "updated": report.updated,
        "unannounced": report.unannounced,
        "skipped": report.skipped,
        "failed_sources": len(failed),
    }
    error = "; ".join(f"{s.source}: {'; '.join(s.errors)}" for s in report.failed) or None
    status = "failed" if report.sources and len(failed) == len(report.sources) else "ok"
    store.finish_run(run_id, status, utcnow(), counts, error)
    step("fetch done", **counts)
    # arXiv announces on Sunday to Thursday evenings (US Eastern): a fetch after such an
    # announcement that finds nothing new at all means a source is broken, not a quiet day.
    eastern = now.astimezone(ARXIV_TZ)
    announced_today = announces_on(eastern.date()) and eastern.hour >= 20
    if (
        config.settings.alerts.on_empty_weekday_fetch
        and announced_today
        and report.sources
        and report.new == 0
        and not only
    ):
        alert(
            config,
            f"fetch after the arXiv announcement found no new papers ({eastern:%A %Y-%m-%d})",
            "Every source answered, but nothing new was stored.\n\n"
            + "\n".join(
                f"- {s.source}: {s.entries} entries, {s.new} new"
                + (f", errors: {'; '.join(s.errors)}" if s.errors else "")
                for s in report.sources
            ),
            now,
            mailer_factory=mailer_factory,
        )
    if status == "failed":
        alert(
            config, "every source failed to fetch", error or "", now, mailer_factory=mailer_factory
        )
    return report


def send_step(
    config: Config,
    store: Store,
    now: datetime,
    *,
    kind: str = "send",
    to: str | None = None,
    topic: str | None = None,
    due: Callable[[Subscriber], bool] | None = None,
    force: bool = False,
    dry_run: bool = False,
    keep_rendered: int = 0,
    stop: threading.Event | None = None,
    progress: Callable[[SendReport], None] | None = None,
    mailer_factory: MailerFactory | None = None,
) -> SendReport:
    """Send (or dry-run) editions; record the run unless it is a dry run."""

    def send() -> SendReport:
        return run_send(
            config,
            store,
            now,
            mailer_factory=mailer_factory,
            to=to,
            topic=topic,
            due=due,
            force=force,
            dry_run=dry_run,
            keep_rendered=keep_rendered,
            progress=progress,
            stop=stop,
        )

    if dry_run:
        return send()
    with SendRun(config, store, now, kind, mailer_factory=mailer_factory) as run:
        return run.finish(send())
