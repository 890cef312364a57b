"""What callers may ask of the Store, as :class:`typing.Protocol` classes, one per domain.

New code depends on these, not on :class:`~newsletter.store.db.Store`: a function that plans a
send takes a :class:`SendStore`, a page that shows bounces a :class:`Bounces`, and a test may
hand it anything with those methods. :class:`StoreProtocol` is all of them; the concrete
``Store`` satisfies it (checked by mypy in :mod:`.db` and by ``tests/store/test_protocol.py``,
which also checks that every public method of ``Store`` is named here, with the same signature).
No signature here names SQLAlchemy: the sender's ledger writer holds a :class:`LedgerSession`,
not a connection, so :class:`~newsletter.store.memory.MemoryStore` is a :class:`SendStore` too.

Each protocol mirrors one mixin of the Store (:mod:`.papers`, :mod:`.subscribers`, …); the
smaller ``PaperReads``, ``SubscriberReads`` and ``LedgerState`` are the parts of their domain a
send reads. Every method raises database failures as :class:`~newsletter.errors.StoreError`
(:mod:`.guard`). The module passes 500 lines because it lists the whole public interface of
the Store, one signature and one line of documentation per method; splitting it by domain
would only scatter the one place a caller looks this up. Bounces and readers' own topics,
each with protocols of its own, stand in :mod:`.protocol_bounces` and :mod:`.protocol_own_topics`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any, Literal, Protocol

from newsletter.errors import StoreError
from newsletter.models import (
    EditionClaim,
    EditionRecord,
    EditionStatus,
    Frequency,
    LedgerOp,
    NewSubscriber,
    Paper,
    PaperWrite,
    RunRecord,
    SourceState,
    Subscriber,
    SubscriberStatus,
    Vote,
)
from newsletter.store.protocol_bounces import Bounces
from newsletter.store.protocol_own_topics import OwnTopicReads, OwnTopics


class PaperReads(Protocol):
    """What a send reads about papers: candidates, what each reader was sent and voted."""

    def papers_by_keys(self, keys: Iterable[str]) -> dict[str, Paper]:
        """The stored papers with these keys, with their sources; unknown keys are left out."""
        ...

    def recent_papers(self, since: datetime) -> list[Paper]:
        """Papers first seen at or after ``since``, oldest first, with their sources."""
        ...

    def sent_paper_ids(
        self, subscriber_ids: Sequence[int], *, since: date | None = None
    ) -> dict[int, set[int]]:
        """For each subscriber, the ids of the papers their delivered editions dated ``since``
        or later carried (all of them without ``since``)."""
        ...

    def votes_for(self, subscriber_ids: Sequence[int]) -> dict[int, tuple[Vote, ...]]:
        """Votes of many readers (newest first), one query per 500 of them; readers without votes
        are left out of the mapping."""
        ...

    def voted_papers(self, since: datetime, limit: int = 20_000) -> list[Paper]:
        """Papers readers voted on since ``since``, most recently voted first, at most ``limit``:
        the examples a run's reader profiles can use."""
        ...


class Vectors(Protocol):
    """Embedding vectors by model and text hash (:mod:`.vectors`), for semantic ranking."""

    def vectors(self, model: str, hashes: Collection[str]) -> dict[str, bytes]:
        """The stored vectors of ``model`` for these text hashes; unknown hashes are left out."""
        ...

    def put_vectors(self, model: str, vectors: Mapping[str, bytes], now: datetime) -> int:
        """Keep ``vectors`` (text hash → bytes) of ``model``; returns how many were new."""
        ...

    def prune_vectors(self, before: datetime) -> int:
        """Delete vectors stored before ``before``; returns how many."""
        ...


class Papers(PaperReads, Protocol):
    """Papers, their sources and signals, and votes (:mod:`.papers`)."""

    def write_papers(
        self, source: str, writes: Sequence[PaperWrite], now: datetime
    ) -> dict[str, int]:
        """Apply ingest decisions in one transaction, batched: inserts, updates, links, signals."""
        ...

    def count_papers(self) -> int:
        """How many papers the store holds."""
        ...

    def set_vote(
        self, subscriber_id: int, paper_id: int, value: int, topic: str | None, now: datetime
    ) -> None:
        """Record ``value`` (+1 more, -1 less) for the paper; replaces any earlier vote on it."""
        ...

    def clear_vote(self, subscriber_id: int, paper_id: int) -> bool:
        """Withdraw the reader's vote on the paper; True when there was one."""
        ...

    def votes_of(self, subscriber_id: int) -> list[Vote]:
        """The reader's votes, newest first."""
        ...

    def paper_by_key(self, key: str) -> Paper | None:
        """One stored paper by its key (a versionless arXiv id, ``doi:...``, ``url:...``)."""
        ...

    def edition_papers(self, edition_id: int) -> list[Paper]:
        """The papers a sent edition carried, in digest order, with their sources."""
        ...

    def papers_by_ids(self, ids: Iterable[int]) -> dict[int, Paper]:
        """The stored papers with these ids, with their sources; unknown ids are left out."""
        ...

    def edition_layout(self, edition_id: int) -> str | None:
        """What a sent edition showed besides its papers (``editions.layout``), or ``None``
        (not sent, or sent before layouts were recorded)."""
        ...

    def papers_first_seen_between(self, start: datetime, end: datetime) -> list[Paper]:
        """Announced papers first seen in ``[start, end)``, oldest first."""
        ...


class SubscriberReads(Protocol):
    """What a send reads about subscribers: the list, in batches, its size, and the one a send
    to one address names."""

    def get_subscriber(self, email: str) -> Subscriber | None:
        """The subscriber with exactly this address, with their topics, or ``None``."""
        ...

    def iter_subscribers(
        self,
        status: SubscriberStatus | None = None,
        *,
        batch: int = 1000,
        email: str | None = None,
        ids: Sequence[int] | None = None,
    ) -> Iterator[list[Subscriber]]:
        """Subscribers in id order, in batches (memory stays flat however many there are)."""
        ...

    def count_subscribers(self, status: SubscriberStatus | None = None) -> int:
        """How many subscribers there are (only ``status`` when given)."""
        ...


class Subscribers(SubscriberReads, Protocol):
    """Subscribers, topics, forgotten addresses and imports (:mod:`.subscribers`)."""

    def add_subscriber(
        self,
        email: str,
        *,
        name: str = "",
        topics: Sequence[str] = (),
        timezone: str = "UTC",
        status: SubscriberStatus = SubscriberStatus.ACTIVE,
        now: datetime,
        consent: dict[str, Any] | None = None,
    ) -> tuple[Subscriber, bool]:
        """Insert a subscriber, or return the existing one. The bool says whether it was created."""
        ...

    def set_topics(self, subscriber_id: int, topics: Sequence[str]) -> None:
        """Replace a subscriber's topics with ``topics`` (repeats dropped)."""
        ...

    def set_status(self, email: str, status: SubscriberStatus, now: datetime) -> bool:
        """Set the status of the subscriber with exactly this address; False if there is none."""
        ...

    def remove_subscriber(
        self, email: str, *, forgotten: tuple[str, datetime] | None = None
    ) -> bool:
        """Delete a subscriber and everything recorded about them."""
        ...

    def forgotten_at(self, key: str) -> datetime | None:
        """When the address with this keyed hash was erased, or ``None``."""
        ...

    def any_forgotten(self) -> bool:
        """Whether any address was ever erased (and not confirmed again since)."""
        ...

    def unforget(self, key: str) -> None:
        """Drop an erased address's hash: it confirmed again, and is a subscriber once more."""
        ...

    def said_no(self, email: str) -> list[Subscriber]:
        """The unsubscribed or suppressed subscribers whose address is ``email`` but for letter case
        (any letters: compared on :func:`~newsletter.addresses.address_key`, indexed)."""
        ...

    def import_lookup(
        self, emails: Sequence[str]
    ) -> tuple[
        dict[str, SubscriberStatus], dict[str, tuple[str, SubscriberStatus, datetime | None]]
    ]:
        """For a batch of addresses being imported: the status of each one present (exact address),
        and for each one that said no in any letter case (keyed by its
        :func:`~newsletter.addresses.address_key`) that row's address, status and since when. Two
        statements per batch."""
        ...

    def forgotten_among(self, keys: Sequence[str]) -> dict[str, datetime]:
        """Which of these erased-address hashes the store holds, and when each was erased."""
        ...

    def add_subscribers(self, rows: Sequence[NewSubscriber], now: datetime) -> int:
        """Insert subscribers that are not in the store yet, with their topics, in one transaction
        (a bulk import: no row may exist already). Returns how many were added."""
        ...

    def subscriber_by_id(self, subscriber_id: int) -> Subscriber | None:
        """The subscriber with this id, with their topics, or ``None``."""
        ...


class Consent(Protocol):
    """Confirmation, preferences, unsubscribing and rate limits (:mod:`.consent`)."""

    def confirm_subscriber(
        self,
        email: str,
        *,
        topics: Sequence[str],
        timezone: str,
        send_hour: int | None,
        frequency: Frequency,
        now: datetime,
        consent: dict[str, Any],
        name: str = "",
        status: SubscriberStatus = SubscriberStatus.ACTIVE,
    ) -> tuple[Subscriber, bool]:
        """Make ``email`` an active, confirmed subscriber with these choices (insert or update)."""
        ...

    def update_preferences(
        self,
        subscriber_id: int,
        *,
        topics: Sequence[str],
        send_hour: int | None,
        frequency: Frequency,
        paused: bool,
        now: datetime,
        timezone: str | None = None,
        name: str | None = None,
    ) -> Subscriber | None:
        """Save a subscriber's choices (manage page, API, ``subscribers set``); pausing keeps
        everything else. ``timezone`` and ``name`` are left as they are when ``None``."""
        ...

    def unsubscribe_id(self, subscriber_id: int, now: datetime) -> bool:
        """Mark a subscriber unsubscribed (idempotent). True when the status changed just now."""
        ...

    def consent_record(self, subscriber_id: int) -> dict[str, Any] | None:
        """The subscriber's consent record (how, when and where, with its history), or ``None``."""
        ...

    def hit_rate(self, key: str, now: datetime, *, window: timedelta, limit: int) -> bool:
        """Count one request for ``key`` unless ``limit`` were already made within ``window``."""
        ...

    def take_rate(
        self, key: str, now: datetime, *, window: timedelta, limit: int
    ) -> tuple[int, int] | None:
        """:meth:`hit_rate`, with the counted event's id and how many are counted with it."""
        ...

    def drop_rate_event(self, event_id: int) -> None:
        """Take back one counted request (an id from :meth:`take_rate`)."""
        ...

    def forget_rate(self, key: str) -> None:
        """Drop every request counted for ``key`` (an erased address leaves none)."""
        ...

    def prune_rate_events(self, before: datetime) -> int:
        """Delete the requests counted before ``before``, for every key; returns how many."""
        ...


class LedgerSession(Protocol):
    """One ledger writer's hold on the ledger (:meth:`Ledger.ledger_session`): its group
    commits, applied in order from one thread. What it holds (connections, on the SQL store)
    stays inside it."""

    def apply(self, ops: Sequence[LedgerOp], now: datetime) -> list[str | bool | None]:
        """``ops`` as one group commit (all or nothing); one result per op, as
        :meth:`Ledger.apply_ledger` gives them. After a failure the next call starts afresh."""
        ...

    def close(self) -> None:
        """Let go of what the session holds."""
        ...


class Ledger(Protocol):
    """The edition ledger's writes: claims, begins, marks, releases (:mod:`.ledger`)."""

    def ledger_session(self) -> LedgerSession:
        """A session of the sender's ledger writer's own, for its group commits (on the SQL
        store: the fastest statements each database has, on connections it keeps)."""
        ...

    def record_permanent_failure(self, subscriber_id: int, limit: int, now: datetime) -> bool:
        """Count a permanent failure; suppress the address at ``limit``. True when suppressed."""
        ...

    def claim_edition(
        self,
        subscriber_id: int,
        edition_date: date,
        message_id: str,
        now: datetime,
        *,
        owner: str,
        lease: timedelta = timedelta(minutes=10),
        owner_gone: Callable[[str], bool] | None = None,
    ) -> EditionClaim | None:
        """Claim ``(subscriber, edition_date)`` before sending. ``None``: someone else has it."""
        ...

    def claim_editions(
        self,
        wanted: Sequence[tuple[int, date, str]],
        now: datetime,
        *,
        owner: str,
        lease: timedelta = timedelta(minutes=10),
        owner_gone: Callable[[str], bool] | None = None,
        resend_unknown: bool = False,
    ) -> list[EditionClaim | None]:
        """:meth:`claim_edition` for several ``(subscriber_id, edition_date, message_id)`` in one
        transaction (one multi-row INSERT); results in the same order."""
        ...

    def mark_edition(
        self,
        edition_id: int,
        status: EditionStatus,
        now: datetime,
        *,
        error: str | None = None,
        paper_ids: Sequence[int] = (),
        attempts: int | None = None,
        layout: str | None = None,
    ) -> None:
        """Record an edition's outcome; a ``sent`` edition records its papers and its
        ``layout`` (what the mail showed besides them) in the same commit."""
        ...

    def release_edition(self, edition_id: int, *, error: str | None = None) -> None:
        """Give back a claim whose message did not go out in this run (relay down, stop)."""
        ...

    def begin_send(self, edition_id: int, subscriber_id: int, owner: str, now: datetime) -> str:
        """Mark a claimed edition ``sending`` just before it goes to the relay."""
        ...

    def apply_ledger(self, ops: Sequence[LedgerOp], now: datetime) -> list[str | bool | None]:
        """Several senders' ledger writes in one transaction (group commit); one result per op."""
        ...


class LedgerState(Protocol):
    """What a send reads of the ledger: forced editions, last sends, statuses, the hourly count."""

    def force_edition(
        self, subscriber_id: int, edition_date: date, message_id: str, now: datetime, *, owner: str
    ) -> tuple[EditionClaim, list[int]]:
        """Re-open today's edition for a forced re-send, marked ``forced``."""
        ...

    def last_sent(self, subscriber_ids: Sequence[int]) -> dict[int, datetime]:
        """When each subscriber's most recent digest went out (absent: never)."""
        ...

    def count_sent_since(self, since: datetime) -> int:
        """Editions handed to the relay since ``since`` (for the per-hour rate limit)."""
        ...

    def edition_statuses(
        self, subscriber_ids: Sequence[int], edition_dates: Iterable[date]
    ) -> dict[tuple[int, date], EditionStatus]:
        """The ledger status of each ``(subscriber, edition_date)`` that has a row."""
        ...


class Operations(LedgerState, Protocol):
    """The ledger as operators read and settle it (:mod:`.ops`)."""

    def sent_edition_dates(self, limit: int = 30) -> list[date]:
        """The most recent edition dates on which at least one digest was sent, newest first."""
        ...

    def ops_snapshot(self, today: date, sources: Collection[str] | None = None) -> dict[str, Any]:
        """Counts for /metrics and `newsletter status`, in a handful of grouped queries."""
        ...

    def delivery_failures(self, subscriber_ids: Sequence[int]) -> dict[int, tuple[int, str | None]]:
        """``{subscriber id: (permanent failures, the relay's last answer)}``."""
        ...

    def editions_on(
        self, edition_date: date, status: EditionStatus | None = None
    ) -> list[EditionRecord]:
        """The ledger rows of one edition date (only ``status`` when given), in claim order."""
        ...

    def edition_for(self, subscriber_id: int, edition_date: date) -> EditionRecord | None:
        """The ledger row of one subscriber's edition on ``edition_date``, or ``None``."""
        ...

    def unsettled_editions(self, limit: int = 1000) -> list[EditionRecord]:
        """Editions whose delivery is unknown (``unknown``, ``held``, ``resend``), oldest first."""
        ...

    def settle_unknown(self, action: Literal["resend", "drop"], now: datetime) -> int:
        """Settle every ``unknown`` or ``held`` edition by hand; returns how many."""
        ...


class Runs(Protocol):
    """Run records and their leases (:mod:`.runs`)."""

    def start_run(self, kind: str, now: datetime, *, owner: str | None = None) -> int:
        """Record a run as ``running``; ``owner`` (its process) goes into the run's lease, which
        :meth:`beat_run` renews while it is alive."""
        ...

    def beat_run(self, run_id: int, owner: str, now: datetime) -> None:
        """Renew a running run's lease: its process is alive at ``now``."""
        ...

    def running_runs(self) -> list[RunRecord]:
        """Runs recorded as ``running`` (alive, or killed before they could say otherwise)."""
        ...

    def ledger_of(self, owner_prefix: str, since: datetime) -> tuple[dict[str, int], list[str]]:
        """What runs whose ledger owner starts with ``owner_prefix`` did to editions since
        ``since``: a count per status, and their distinct errors (at most 20)."""
        ...

    def settle_run(
        self, run_id: int, status: str, at: datetime, counts: dict[str, Any], error: str | None
    ) -> bool:
        """End a run still recorded as ``running`` (one whose process is gone); False if it had
        ended meanwhile."""
        ...

    def finish_run(
        self,
        run_id: int,
        status: str,
        now: datetime,
        counts: dict[str, Any],
        error: str | None = None,
    ) -> None:
        """Record a run's end: its status, counts, error and duration."""
        ...

    def last_runs(self, limit: int = 10, kind: str | None = None) -> list[RunRecord]:
        """The most recent runs (of ``kind`` when given), newest first."""
        ...


class Sources(Protocol):
    """Each source's fetch state (:mod:`.sources`)."""

    def source_state(self, source: str) -> SourceState:
        """A source's fetch state; a blank one for a source never fetched."""
        ...

    def all_source_states(self) -> list[SourceState]:
        """The fetch state of every source that has one, by source name."""
        ...

    def save_source_state(self, state: SourceState) -> None:
        """Store a source's fetch state, replacing the one it had."""
        ...


class Schema(Protocol):
    """The connection, the schema and the error mapping (:mod:`.base`)."""

    @property
    def dialect(self) -> str:
        """The database's SQLAlchemy dialect name: ``sqlite`` or ``postgresql``."""
        ...

    def close(self) -> None:
        """Close the pooled connections (dispose of the engine)."""
        ...

    def error(self, error: BaseException) -> StoreError:
        """A database error as one line naming this database and what to do."""
        ...

    def check_connection(self) -> None:
        """Open one connection; raise :class:`DatabaseUnavailable` (one line) when it fails."""
        ...

    def upgrade(self, revision: str = "head") -> None:
        """Migrate the schema to ``revision`` (Alembic)."""
        ...

    def current_revision(self) -> str | None:
        """The schema revision the database is at (``None``: never migrated)."""
        ...

    def head_revision(self) -> str | None:
        """The revision this code's migrations lead to."""
        ...

    def check_schema(self) -> None:
        """Raise :class:`StoreError` with the fix when the database is not migrated."""
        ...


class SendStore(
    PaperReads, Vectors, SubscriberReads, OwnTopicReads, Ledger, LedgerState, Runs, Protocol
):
    """What the send path uses: the edition builder (papers, votes, what was sent), the
    planner and run loop (subscribers, claims, runs) and the sender's ledger writer."""


class StoreProtocol(
    Papers,
    Vectors,
    Subscribers,
    OwnTopics,
    Consent,
    Ledger,
    Operations,
    Runs,
    Sources,
    Bounces,
    Schema,
    Protocol,
):
    """Everything the Store offers: what a caller that needs more than one domain takes."""
