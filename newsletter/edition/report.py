"""What a send did: :class:`SendReport`, the one record of a run's counts.

In-process runs fill it as outcomes arrive; each worker chunk returns :meth:`SendReport.as_dict`
and the enqueuer adds the chunks up with :meth:`SendReport.merge`, so both modes record, log
and alert from the same counts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import ClassVar

from newsletter.digest.render import RenderedDigest
from newsletter.models import Outcome

log = logging.getLogger(__name__)

MAX_ERRORS = 100
"""Error lines kept in a report (the ledger keeps every one)."""


@dataclass
class SendReport:
    dates: set[date] = field(default_factory=set)
    considered: int = 0
    total: int | None = None
    """Active subscribers this run may consider (for 'remaining'); None when unknown."""
    sent: int = 0
    already: int = 0
    """Subscribers whose edition for the date was already sent, skipped or in progress elsewhere."""
    empty: int = 0
    failed: int = 0
    suppressed: int = 0
    """Addresses suppressed in this run (their failure is counted in ``failed`` too)."""
    unknown: int = 0
    """Editions left ``unknown``: the line dropped after the final dot (and not re-sent)."""
    resent: int = 0
    """``unknown`` editions re-sent once with the same Message-ID."""
    resend_refused: int = 0
    """Re-sends refused for editions whose first attempt may have arrived (counted delivered)."""
    retried: int = 0
    """Retries after temporary failures (4xx, drops)."""
    throttled: int = 0
    """Throttling replies that slowed the sender down."""
    unsubscribed: int = 0
    """Not sent: the subscriber left after the digest was rendered (checked at send time)."""
    released: int = 0
    """Claims given back unsent (the relay failed or the run was stopped); the next run does them."""
    resumed: int = 0
    """Editions an interrupted run left in flight (killed, stopped at once, its lease run out),
    taken over by this run with their Message-ID."""
    retried_later: int = 0
    """Editions an earlier run tried and gave back (the relay refused them for now, or could
    not be used), tried again by this run with their Message-ID."""
    dry_run: bool = False
    errors: list[str] = field(default_factory=list)
    more_errors: int = 0
    relay_error: str | None = None
    not_due: int = 0
    """Subscribers skipped because their edition is not due now (scheduled runs)."""
    other_topics: int = 0
    """Subscribers left out because they do not follow the run's ``topic``."""
    no_listing: int = 0
    no_listing_reason: str | None = None
    stopped: bool = False
    """The run was asked to stop (SIGTERM, SIGINT) and finished the messages in flight first."""
    stopped_at_once: bool = False
    """A second signal: the run stopped without waiting for the relay's answers (the messages
    in flight stay ``sending``; the next run resumes them with their Message-ID)."""
    rendered: list[tuple[str, RenderedDigest]] = field(default_factory=list)
    """(address, digest) for dry runs and for the demo's 'open this in a browser'."""
    started: float = field(default_factory=time.monotonic)
    duration: float = 0.0
    """Seconds the run took (set when it ends)."""

    @property
    def remaining(self) -> int | None:
        """Subscribers the run did not get to, or ``None`` when the total is unknown."""
        if self.total is None:
            return None
        return max(0, self.total - self.considered - self.not_due - self.other_topics)

    @property
    def in_flight(self) -> int:
        """Editions handed to the senders whose outcome is not known yet (queued or being sent)."""
        if self.dry_run:
            return 0
        settled = (
            self.sent
            + self.resend_refused
            + self.failed
            + self.unknown
            + self.unsubscribed
            + self.released
            + self.already
            + self.empty
            + self.no_listing
        )
        return max(0, self.considered - settled)

    @property
    def rate(self) -> float:
        """Messages sent per second so far."""
        elapsed = (self.duration or (time.monotonic() - self.started)) or 1e-9
        return self.sent / elapsed

    def error(self, line: str) -> None:
        """Note one error line (the first :data:`MAX_ERRORS`; past that only counted)."""
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(line)
        else:
            self.more_errors += 1

    FIELD: ClassVar[dict[Outcome, str]] = {
        Outcome.SENT: "sent",
        Outcome.FAILED: "failed",
        Outcome.SUPPRESSED: "failed",
        Outcome.UNKNOWN: "unknown",
        Outcome.RESENT: "resent",
        Outcome.RESEND_REFUSED: "resend_refused",
        Outcome.RETRIED: "retried",
        Outcome.THROTTLED: "throttled",
        Outcome.UNSUBSCRIBED: "unsubscribed",
        Outcome.ALREADY: "already",
        Outcome.RELEASED: "released",
        Outcome.EMPTY: "empty",
        Outcome.NO_LISTING: "no_listing",
    }
    """The count each outcome adds one to (a dry run's rendered digests are kept, not counted)."""

    ERRORS: ClassVar[frozenset[Outcome]] = frozenset(
        {Outcome.FAILED, Outcome.SUPPRESSED, Outcome.UNKNOWN, Outcome.RESEND_REFUSED}
    )
    """The outcomes whose error line the report keeps."""

    def count(
        self,
        outcome: Outcome,
        *,
        address: str = "",
        error: str | None = None,
        rendered: object = None,
        keep: int = 0,
    ) -> None:
        """Count one ``outcome`` for ``address``: its count, its error line, and (sent, or a dry
        run) its rendered digest while fewer than ``keep`` are kept (a dry run keeps every one)."""
        if outcome is Outcome.DRY_RUN:
            if isinstance(rendered, RenderedDigest):
                self.rendered.append((address, rendered))
            return
        name = self.FIELD[outcome]
        setattr(self, name, getattr(self, name) + 1)
        if outcome is Outcome.SUPPRESSED:
            self.suppressed += 1
        if outcome in self.ERRORS:
            self.error(error or address)
            if outcome in (Outcome.FAILED, Outcome.SUPPRESSED):
                log.warning("edition for %s failed: %s", address, error)
        if (
            outcome is Outcome.SENT
            and isinstance(rendered, RenderedDigest)
            and len(self.rendered) < keep
        ):
            self.rendered.append((address, rendered))

    COUNTS: ClassVar[tuple[str, ...]] = (
        "considered",
        "sent",
        "already",
        "empty",
        "failed",
        "suppressed",
        "unknown",
        "resent",
        "resend_refused",
        "retried",
        "throttled",
        "unsubscribed",
        "released",
        "resumed",
        "retried_later",
        "not_due",
        "no_listing",
    )
    """Every count of :meth:`as_dict`, each adding up across the parts of a run (worker
    chunks); the rest are flags and the duration."""

    def add_counts(self, counts: Mapping[str, object]) -> None:
        """Add the :data:`COUNTS` of another part's :meth:`as_dict` (a worker chunk's) to these."""
        for key in self.COUNTS:
            value = counts.get(key, 0)
            setattr(self, key, getattr(self, key) + (value if isinstance(value, int) else 0))

    def as_dict(self) -> dict[str, object]:
        """The report as JSON: what the run record, the log line and a worker chunk carry."""
        return {
            "considered": self.considered,
            "sent": self.sent,
            "already": self.already,
            "empty": self.empty,
            "failed": self.failed,
            "suppressed": self.suppressed,
            "unknown": self.unknown,
            "resent": self.resent,
            "resend_refused": self.resend_refused,
            "retried": self.retried,
            "throttled": self.throttled,
            "unsubscribed": self.unsubscribed,
            "released": self.released,
            "resumed": self.resumed,
            "retried_later": self.retried_later,
            "not_due": self.not_due,
            "no_listing": self.no_listing,
            "stopped": self.stopped,
            "dry_run": self.dry_run,
            "duration": round(self.duration, 3),
        }

    CHUNK_ERRORS: ClassVar[int] = 20
    """Error lines a chunk's report carries back (the ledger keeps every one)."""

    def as_chunk(self) -> dict[str, object]:
        """:meth:`as_dict` plus what the enqueuer needs from a worker chunk: the edition dates,
        the first errors, the relay error and why quiet days were skipped (JSON)."""
        out = self.as_dict()
        out["dates"] = sorted(d.isoformat() for d in self.dates)
        out["errors"] = self.errors[: self.CHUNK_ERRORS]
        out["relay_error"] = self.relay_error
        if self.no_listing_reason:
            out["no_listing_reason"] = self.no_listing_reason
        return out

    @classmethod
    def empty_chunk(cls) -> dict[str, object]:
        """A chunk report with nothing in it yet (what a worker task starts adding to)."""
        return cls().as_chunk() | {"duration": 0.0}

    def merge(self, chunk: Mapping[str, object]) -> None:
        """Add a chunk's :meth:`as_chunk` (or several added up) to this report."""
        self.add_counts(chunk)
        dates = chunk.get("dates") or []
        assert isinstance(dates, list)
        self.dates.update(date.fromisoformat(d) for d in dates)
        errors = chunk.get("errors") or []
        assert isinstance(errors, list)
        self.errors.extend(str(e) for e in errors)
        if isinstance(reason := chunk.get("no_listing_reason"), str):
            self.no_listing_reason = reason
        if isinstance(relay := chunk.get("relay_error"), str):
            self.relay_error = relay


ProgressFn = Callable[[SendReport], None]
