"""Domain types: frozen dataclasses with tuples and timezone-aware UTC datetimes.

``PaperData`` is a paper as one source gives it; ``Paper`` is the merged, stored record. The
Store's records (``PaperWrite``, ``EditionClaim``, ``LedgerOp``, ``EditionRecord``, ``RunRecord``,
``SourceState``) are here too, so callers need not import the store package for them.
ORM rows never leave ``newsletter.store``; these types are what the rest of the code sees.

One module past 500 lines: the design's module map keeps every domain type in one place, and
most of the length is their fields' docstrings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Literal


class AnnounceType(StrEnum):
    """How a listing announced a paper (arXiv's ``arxiv:announce_type``)."""

    NEW = "new"
    CROSS = "cross"
    REPLACE = "replace"
    REPLACE_CROSS = "replace-cross"

    @property
    def is_update(self) -> bool:
        """A replacement updates a known paper; it never announces it as new."""
        return self in (AnnounceType.REPLACE, AnnounceType.REPLACE_CROSS)


@dataclass(frozen=True, slots=True)
class PaperData:
    """One paper as one source announced it."""

    key: str
    """Source-independent identity: a versionless arXiv id, ``doi:...`` or ``url:...``."""
    title: str
    abstract: str = ""
    authors: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    url: str = ""
    pdf_url: str | None = None
    code_url: str | None = None
    version: int | None = None
    announce_type: AnnounceType | None = None
    published: datetime | None = None
    upvotes: int | None = None
    comments: int | None = None
    code_stars: int | None = None
    """The code repository's stars, when the source gives them (never fetched from GitHub)."""


# What a source may store per paper (issue 42): any feed can carry megabytes in one field, and
# every per-paper stage (LaTeX, excerpt, ranking's tokenizer, embedding) pays for its length,
# once per paper and again per digest part. Ingest cuts each field to these caps and logs one
# line per cut field; the stages cut again (rows stored before the caps came).
MAX_TITLE_CHARS = 500
"""A title's characters (arXiv's longest run to about 300)."""
MAX_ABSTRACT_CHARS = 5_000
"""An abstract's characters: arXiv's stop at 1,920; a blog's summary may be longer."""
MAX_AUTHORS = 1_000
"""Names in an author list (the largest collaborations list a few thousand: the first
thousand are kept, and "+ N more" then counts from them)."""
MAX_AUTHOR_CHARS = 200
"""One author name's characters."""
MAX_TEXT_CHARS = MAX_ABSTRACT_CHARS
"""What a per-paper stage reads of any one text (title or abstract), whatever is stored."""


def clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: cut at the last space in its final tenth when
    there is one, else at ``limit``, and ended with "…"; unchanged when it fits."""
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ", limit - 1 - max(1, limit // 10))
    if space > 0:
        head = head[:space]
    return head.rstrip() + "…"


def capped(paper: PaperData) -> tuple[PaperData, tuple[str, ...]]:
    """``paper`` within the caps above, and one note per field that was cut (empty: unchanged).

    A note reads "abstract cut to 5,000 of 1,048,576 characters"."""
    notes: list[str] = []
    title, abstract, authors = paper.title, paper.abstract, paper.authors
    if len(title) > MAX_TITLE_CHARS:
        notes.append(f"title cut to {MAX_TITLE_CHARS:,} of {len(title):,} characters")
        title = clip(title, MAX_TITLE_CHARS)
    if len(abstract) > MAX_ABSTRACT_CHARS:
        notes.append(f"abstract cut to {MAX_ABSTRACT_CHARS:,} of {len(abstract):,} characters")
        abstract = clip(abstract, MAX_ABSTRACT_CHARS)
    long_names = sum(1 for a in authors[:MAX_AUTHORS] if len(a) > MAX_AUTHOR_CHARS)
    if len(authors) > MAX_AUTHORS or long_names:
        kept = f"kept {min(len(authors), MAX_AUTHORS):,} of {len(authors):,} names"
        cut = f", {long_names:,} cut to {MAX_AUTHOR_CHARS} characters" if long_names else ""
        notes.append(f"authors: {kept}{cut}")
        authors = tuple(clip(a, MAX_AUTHOR_CHARS) for a in authors[:MAX_AUTHORS])
    if not notes:
        return paper, ()
    return replace(paper, title=title, abstract=abstract, authors=authors), tuple(notes)


def _init_values(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj) if f.init}


def _remade(cls: type, values: dict[str, Any]) -> Any:
    """Unpickling makes the object anew: a hash kept from another process (string hashes are
    salted per process) would break every dictionary it is looked up in."""
    return cls(**values)


@dataclass(frozen=True, slots=True)
class Paper:
    """A paper as stored: merged from every source that announced it."""

    id: int
    key: str
    title: str
    abstract: str
    authors: tuple[str, ...]
    categories: tuple[str, ...]
    url: str
    pdf_url: str | None
    code_url: str | None
    version: int | None
    published: datetime | None
    first_seen: datetime
    updated: datetime
    sources: tuple[str, ...]
    upvotes: int | None = None
    comments: int | None = None
    upvote_velocity: float | None = None
    """Upvotes gained per hour over the recent signal history, when there is one."""
    announced: bool = True
    """False while the paper is known only from a backfill or a replacement (never offered)."""
    code_stars: int | None = None
    """The code repository's stars as the source last gave them (Hugging Face Daily Papers)."""
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        # Papers key the renderer's caches for every subscriber: hash the fields once.
        head = (self.id, self.key, self.title, self.abstract, self.authors, self.categories)
        rest = (self.url, self.pdf_url, self.code_url, self.version, self.published)
        more = (self.first_seen, self.updated, self.sources, self.upvotes, self.comments)
        last = (self.upvote_velocity, self.announced, self.code_stars)
        object.__setattr__(self, "_hash", hash((head, rest, more, last)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return _remade, (type(self), _init_values(self))


class SubscriberStatus(StrEnum):
    PENDING = "pending"
    ACTIVE = "active"
    PAUSED = "paused"
    UNSUBSCRIBED = "unsubscribed"
    SUPPRESSED = "suppressed"


class Frequency(StrEnum):
    DAILY = "daily"
    WEEKLY = "weekly"


@dataclass(frozen=True, slots=True)
class Subscriber:
    id: int
    email: str
    name: str
    status: SubscriberStatus
    topics: tuple[str, ...]
    timezone: str
    created: datetime
    send_hour: int | None = None
    """Preferred local hour for the digest; ``None`` means the operator's ``schedule.send_hour``."""
    frequency: Frequency = Frequency.DAILY
    confirmed: datetime | None = None
    """When the person confirmed (double opt-in); ``None`` for operator-added subscribers."""
    status_changed: datetime | None = None
    """When ``status`` last changed (subscribed, paused, unsubscribed, suppressed)."""


OWN_PREFIX = "own."
"""What a reader's own topic's name starts with: a dot, which an operator's topic name (lowercase
letters, digits, ``-`` and ``_``) never holds, so the two never clash."""


@dataclass(frozen=True, slots=True)
class OwnTopic:
    """A topic a reader wrote themselves (issue 45): their sentence and example papers."""

    id: int
    subscriber_id: int
    position: int  # 1, 2, 3 … in the reader's order (``topic remove: <n>`` names it)
    text: str  # the reader's sentence as saved (one line, no HTML or links)
    text_hash: str  # SHA-256 of what its vector embeds (newsletter.subscribe.own_topics.own_texts)
    examples: tuple[str, ...]  # versionless arXiv ids of papers "like" the topic
    created: datetime
    updated: datetime

    @property
    def name(self) -> str:
        """The topic's name in the ranker, the layout and vote links (``own.<id>``)."""
        return f"{OWN_PREFIX}{self.id}"


def is_own_topic(name: str | None) -> bool:
    """Whether a topic name is a reader's own topic (:attr:`OwnTopic.name`)."""
    return bool(name) and str(name).startswith(OWN_PREFIX)


@dataclass(frozen=True, slots=True)
class NewSubscriber:
    """A subscriber to add in bulk (an import): the choices are already validated."""

    email: str
    name: str
    status: SubscriberStatus
    topics: tuple[str, ...]
    timezone: str
    send_hour: int | None
    frequency: Frequency
    consent: dict[str, Any]
    """How they agreed: recorded as the first event of their consent history."""


@dataclass(frozen=True, slots=True)
class DigestItem:
    """One paper placed in one digest, with why it was picked."""

    paper: Paper
    topic: str
    score: float
    reason: str
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        # Sections of items key the renderer's caches, once per reader: hash the fields once.
        object.__setattr__(self, "_hash", hash((self.paper, self.topic, self.score, self.reason)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return _remade, (type(self), _init_values(self))


class Later:
    """The ids of the good papers a section's limit alone left out, in their list's order,
    worked out only when first asked (:attr:`ids`): counting them is cheap, listing them reads
    the rest of the topic's list, which most uses never need (issue 44).

    Two are equal when they are the same object or list the same ids; a copy (pickled, or
    :meth:`of`) holds the ids themselves.
    """

    __slots__ = ("_ids", "_make")

    def __init__(self, make: Callable[[], tuple[int, ...]]) -> None:
        self._make: Callable[[], tuple[int, ...]] | None = make
        self._ids: tuple[int, ...] | None = None

    @classmethod
    def of(cls, ids: tuple[int, ...]) -> Later:
        """Ids known already (read back from an edition's layout)."""
        later = cls(tuple)
        later._ids, later._make = tuple(ids), None
        return later

    @property
    def ids(self) -> tuple[int, ...]:
        """The papers' ids, best first."""
        if self._ids is None:
            assert self._make is not None
            self._ids, self._make = tuple(self._make()), None
        return self._ids

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, Later) and self.ids == other.ids

    def __hash__(self) -> int:
        return hash(self.ids)

    def __repr__(self) -> str:
        return f"Later({self.ids!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return Later.of, (self.ids,)


@dataclass(frozen=True, slots=True)
class TopicSection:
    """The items of one topic in a digest (one section per topic, or one merged section).

    ``limit`` is how many it could show (the topic's ``max_items``, else the digest's; 0: not
    known, as for a section built by hand or an edition recorded before it was kept) and
    ``more`` how many good papers of its topic it left out only because of that limit: in the
    topic's list, not sent to this reader before, not in another of their sections; ``later``
    lists them (``None`` when ``more`` is 0). What the digest says of them: :attr:`quiet`, and
    "``more`` more in the archive".
    """

    name: str
    title: str
    items: tuple[DigestItem, ...]
    limit: int = 0
    more: int = 0
    later: Later | None = None
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        # The key of a section's cached rendering (``once(section, ...)``): hashed once. Not
        # ``later``: its ids are listed only when two sections alike in all else meet.
        key = (self.name, self.title, self.items, self.limit, self.more)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    @property
    def quiet(self) -> bool:
        """A thin day for this topic: some papers, fewer than the section could show, and
        none left out ("3 papers today in GPU kernels: a quiet day")."""
        return 0 < len(self.items) < self.limit and not self.more

    def __reduce__(self) -> tuple[Any, ...]:
        return _remade, (type(self), _init_values(self))


@dataclass(frozen=True, slots=True)
class Digest:
    """One edition for one subscriber and date: what will be rendered and sent."""

    subscriber: Subscriber
    edition_date: date
    sections: tuple[TopicSection, ...]
    topic_titles: tuple[str, ...] = field(default=())
    note: str = ""
    """A line for the footer (own topics matched by their words only), or empty."""

    @property
    def items(self) -> tuple[DigestItem, ...]:
        """Every item of the digest, section after section."""
        return tuple(item for section in self.sections for item in section.items)

    @property
    def is_empty(self) -> bool:
        """True when no section has any item."""
        return not any(section.items for section in self.sections)


@dataclass(frozen=True, slots=True)
class Vote:
    """A reader's "more like this" (``value`` +1) or "less like this" (-1) on one stored paper."""

    paper_key: str
    paper_id: int
    title: str
    value: int
    topic: str | None
    """The digest section (topic name) the paper was in when the reader voted, if known."""
    created_at: datetime

    @property
    def more(self) -> bool:
        """True for "more like this", False for "less like this"."""
        return self.value > 0


class EditionStatus(StrEnum):
    """States of a ledger row ``(subscriber, edition_date)``.

    ``claimed`` rows hold a Message-ID and are resumed with it after a crash; ``sending`` means the
    message was being handed to the relay; ``unknown`` means the relay dropped the line after the
    final dot, so it may or may not have been accepted (with ``delivery.on_unknown: resend`` the
    next run re-sends it once, same Message-ID); ``deferred`` means the relay answered with a
    temporary failure: a later run retries it with the same Message-ID.

    Settling unknown editions: ``held`` is still unknown after its one re-send (or when the
    relay was unusable), waiting for ``newsletter send --settle-unknown``; ``resend`` was settled
    by hand for one more re-send by the next run; ``dropped`` was given up by hand. An edition
    whose first attempt may have reached the reader (its answer was lost to a crash or a dropped
    line) and whose re-send was then refused is ``resend_refused``: counted as delivered, with
    the refusal kept in ``last_error``.
    """

    CLAIMED = "claimed"
    SENDING = "sending"
    SENT = "sent"
    DEFERRED = "deferred"
    FAILED = "failed"
    UNKNOWN = "unknown"
    SKIPPED = "skipped"
    HELD = "held"
    RESEND = "resend"
    DROPPED = "dropped"
    RESEND_REFUSED = "resend_refused"

    @property
    def delivered(self) -> bool:
        """Counted as delivered: sent, or a refused re-send of a digest that may have arrived."""
        return self in (EditionStatus.SENT, EditionStatus.RESEND_REFUSED)


# ---------------------------------------------------------------- store records
# What the Store reads and writes besides the domain types above: paper writes, ledger claims
# and operations, editions, source states and runs (re-exported by newsletter.store.db).


class Outcome(StrEnum):
    """What happened to one subscriber's edition in a run (or to one try of it): each is counted
    by :meth:`newsletter.edition.report.SendReport.count`."""

    SENT = "sent"
    FAILED = "failed"
    SUPPRESSED = "suppressed"
    """Failed, and the address is now suppressed (counted as failed too)."""
    UNKNOWN = "unknown"
    """The line dropped after the final dot: the relay may have it (not re-sent now)."""
    RESENT = "resent"
    """An ``unknown`` edition re-sent once with the same Message-ID (a try, not an end)."""
    RESEND_REFUSED = "resend_refused"
    """A re-send of a message that may have arrived was refused: counted as delivered."""
    RETRIED = "retried"
    """A temporary failure, tried again after a backoff (a try, not an end)."""
    THROTTLED = "throttled"
    """The relay asked to slow down (a try, not an end)."""
    UNSUBSCRIBED = "unsubscribed"
    """Not sent: the subscriber was no longer active at send time."""
    ALREADY = "already"
    """Sent, skipped or in progress elsewhere (the claim was refused or lost)."""
    RELEASED = "released"
    """Given back to the ledger unsent (the run stopped or the relay failed)."""
    EMPTY = "empty"
    """Nothing new in the subscriber's topics (``digest.empty: skip``)."""
    NO_LISTING = "no_listing"
    """Skipped: no new listing since the last edition (``schedule.no_listing: skip``)."""
    DRY_RUN = "dry_run"
    """Rendered for a dry run, not sent."""


@dataclass(frozen=True, slots=True)
class PaperWrite:
    """One row to insert or update, decided by :mod:`newsletter.sources.ingest`."""

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
    """The row's status when this run took it over: ``claimed`` or ``sending`` (in flight when
    its run was interrupted), ``deferred`` (tried and given back: the relay refused it for now,
    or could not be used), ``unknown`` or ``resend`` (a re-send of a message that may have
    arrived)."""

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
    layout: str | None = None
    """What the digest showed besides its papers (``editions.layout``, written with them;
    :mod:`newsletter.edition.layout`)."""


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


class Slot:
    """Where a reader's value goes in a message shared by several readers (their address, a
    link): ``code`` names it among their values (:mod:`newsletter.digest.shared_render`,
    :mod:`newsletter.deliver.wire`)."""

    __slots__ = ("code",)

    def __init__(self, code: str) -> None:
        self.code = code

    def __repr__(self) -> str:
        return f"Slot({self.code!r})"
