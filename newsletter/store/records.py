"""The records the Store reads and writes: paper writes, ledger claims and operations, editions,
source states and runs (plain frozen dataclasses, no SQL)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Literal

from newsletter.models import (
    EditionStatus,
    PaperData,
)


@dataclass(frozen=True, slots=True)
class PaperWrite:
    """One row to insert or update, decided by :mod:`newsletter.ingest`."""

    data: PaperData
    paper_id: int | None
    """``None`` inserts a new paper; otherwise the stored paper to update."""
    metadata_changed: bool
    signals_changed: bool
    announced: bool = True
    """For inserts: False when the paper is only an update or backfill and must not count as new."""
    new_link: bool = True
    """The paper is not yet linked to this source (always true for inserts)."""
    promote: bool = False
    """For updates: a paper stored unannounced (a backfill) that a listing now announces."""


@dataclass(frozen=True, slots=True)
class EditionClaim:
    """A subscriber's edition this run has claimed (or taken over) and may send."""

    id: int
    subscriber_id: int
    edition_date: date
    message_id: str
    resumed: bool
    """True when this run took over a claim that an earlier, interrupted run made."""
    earlier: EditionStatus | None = None
    """The row's status when this run took it over: ``sending`` (in flight when its run was
    interrupted), ``unknown`` or ``resend`` (a re-send of a message that may have arrived)."""

    @property
    def may_have_arrived(self) -> bool:
        """An earlier attempt with this Message-ID may have reached the reader."""
        return self.earlier in _MAY_HAVE_ARRIVED


@dataclass(frozen=True, slots=True)
class LedgerOp:
    """One write a sender makes to the ledger; see :meth:`Store.apply_ledger`."""

    kind: Literal["begin", "mark", "release", "permanent_failure"]
    edition_id: int = 0
    subscriber_id: int = 0
    owner: str = ""
    status: EditionStatus | None = None
    error: str | None = None
    paper_ids: tuple[int, ...] = ()
    limit: int = 0


@dataclass(frozen=True, slots=True)
class EditionRecord:
    """One row of the edition ledger, with the subscriber's address."""

    id: int
    subscriber_id: int
    email: str
    edition_date: date
    status: EditionStatus
    message_id: str
    attempts: int
    item_count: int
    last_error: str | None
    claimed: datetime
    finished: datetime | None


@dataclass(frozen=True, slots=True)
class SourceState:
    """What newsletter remembers about fetching one source."""

    source: str
    etag: str | None = None
    last_modified: str | None = None
    last_fetch: datetime | None = None
    last_success: datetime | None = None
    last_error: str | None = None
    last_count: int | None = None
    consecutive_failures: int = 0


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One ingest or send run: when, how it ended, its counts."""

    id: int
    kind: str
    started: datetime
    finished: datetime | None
    status: str
    counts: dict[str, Any]
    error: str | None


_MAY_HAVE_ARRIVED = frozenset({EditionStatus.SENDING, EditionStatus.UNKNOWN, EditionStatus.RESEND})
