"""The archive: a sent edition's digest rebuilt from the ledger, and the papers of a day.

Nothing is stored as HTML: a sent edition is its ledger row, which lists the papers it carried
(``editions.paper_ids``) and what the mail showed besides them (``editions.layout``: sections,
order, reasons, the cards' signals; :mod:`newsletter.edition.layout`), so :func:`sent_digest`
gives back the digest as it was mailed. Ranking the papers again would not: another day's
signals, topics and votes, and a ranker over just these papers, give another digest (issue
43); only editions sent before layouts were recorded are ranked again, and say so. The web app
renders what these functions return (``/archive/view/…`` and ``/archive/YYYY-MM-DD``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from newsletter.config import Config
from newsletter.edition.layout import read_layout
from newsletter.models import Digest, DigestItem, EditionRecord, Paper, Subscriber, TopicSection
from newsletter.rank.builder import build_ranker
from newsletter.semantic.vectors import VectorSource
from newsletter.store.protocol import StoreProtocol


@dataclass(frozen=True, slots=True)
class SentEdition:
    """A sent edition's digest, to render again, and what the page must say about it."""

    digest: Digest
    as_mailed: bool
    """True when the digest is the one mailed (its recorded layout); False when the edition
    was sent before layouts were recorded and its papers were ranked again (see
    :func:`sent_digest`)."""
    grouped: bool
    """Whether the mail grouped its papers by topic (``digest.group_by_topic`` at the send)."""
    revised: int = 0
    """How many of its papers were revised (title, abstract, authors, links) after the send:
    their cards show the stored, revised text."""

    @property
    def note(self) -> str | None:
        """What the page says beside the digest, or ``None`` when it is the mail as it was."""
        notes = []
        if not self.as_mailed:
            notes.append(
                "This digest was sent before the archive kept digests as they were mailed: "
                "its papers are all here, ranked again today, so the sections, their order "
                "and the reasons may differ from the email."
            )
        if self.revised:
            noun = "paper was" if self.revised == 1 else "papers were"
            notes.append(
                f"{self.revised} {noun} revised since this digest was mailed; "
                "the cards show the revised text."
            )
        return " ".join(notes) or None


def sent_digest(
    config: Config,
    store: StoreProtocol,
    subscriber_id: int,
    edition_date: date,
    *,
    vectors: VectorSource | None = None,
) -> SentEdition | None:
    """The digest a subscriber was sent for ``edition_date``, or ``None`` when no such edition
    was delivered.

    As mailed: the sections, order, counts, reasons and cards' signals recorded with the
    edition (:mod:`newsletter.edition.layout`), the papers' text as stored. An edition sent
    before layouts were recorded has only its papers: they are ranked again
    (:func:`ranked_again`) and :attr:`SentEdition.as_mailed` says so.
    """
    sub = store.subscriber_by_id(subscriber_id)
    record = store.edition_for(subscriber_id, edition_date)
    if sub is None or record is None or not record.status.delivered:
        return None
    papers = store.edition_papers(record.id)
    # The run loaded its papers before it began this message: a revision after that is newer.
    revised = sum(1 for p in papers if p.updated > record.claimed)
    layout = read_layout(store.edition_layout(record.id))
    stored = {p.id: p for p in papers}
    # The layout must describe the papers the row lists, in their order (papers are never
    # deleted, but one missing would only be left out).
    if layout is not None and [i for i in layout.paper_ids if i in stored] == list(stored):
        digest = layout.digest(sub, edition_date, stored)
        return SentEdition(digest, True, layout.grouped, revised)
    digest = ranked_again(config, store, sub, record, papers, vectors=vectors)
    return SentEdition(digest, False, config.settings.digest.group_by_topic, revised)


def ranked_again(
    config: Config,
    store: StoreProtocol,
    sub: Subscriber,
    record: EditionRecord,
    papers: list[Paper],
    *,
    vectors: VectorSource | None = None,
) -> Digest:
    """An edition's ``papers`` ranked again, as well as can be done without its layout: by
    :func:`~newsletter.rank.builder.build_ranker` over just these papers (``vectors`` as in
    the send), with the votes the reader had cast by then, their topics first; a paper no
    topic takes now goes to "Also in this edition". Sections, order and reasons can differ
    from the mail's (other signals, other topics, a ranker over other papers)."""
    settings = config.settings
    sent_at = record.finished or record.claimed
    ranker = build_ranker(config, store, papers, sent_at, vectors=vectors)
    votes = [v for v in store.votes_for([sub.id]).get(sub.id, ()) if v.created_at <= sent_at]
    most = max(len(papers), 1)
    # The reader's topics pick first, as in the send; the others (the reader's topics changed
    # since) only take what is left, then "Also in this edition" the rest.
    sections = list(
        ranker.sections(
            sub.topics, max_items=most, group_by_topic=settings.digest.group_by_topic, votes=votes
        )
    )
    placed = {i.paper.id for s in sections for i in s.items}
    others = [t.name for t in settings.topics if t.name not in sub.topics]
    if others and len(placed) < len(papers):
        sections.extend(ranker.sections(others, exclude_ids=placed, max_items=most))
        placed = {i.paper.id for s in sections for i in s.items}
    rest = [p for p in papers if p.id not in placed]
    if rest:  # the topics changed since: keep every paper the mail carried
        items = tuple(DigestItem(p, "", 0.0, "in this edition") for p in rest)
        sections.append(TopicSection("more", "Also in this edition", items))
    titles = tuple(settings.topic(t).label for t in sub.topics if t in ranker.topics)
    # No notes: the mail's limits and what they left out are not known again (issue 44).
    kept = tuple(TopicSection(s.name, s.title, s.items) for s in sections if s.items)
    return Digest(sub, record.edition_date, kept, titles)


@dataclass(frozen=True, slots=True)
class LeftOut:
    """What a sent edition's limits left out, per section: the page its "3 more in the
    archive" notes link (issue 44). Papers as stored now, in the order their topic's list
    had them when the digest was made."""

    subscriber: Subscriber
    edition_date: date
    sections: tuple[tuple[TopicSection, tuple[Paper, ...]], ...]


def left_out(store: StoreProtocol, subscriber_id: int, edition_date: date) -> LeftOut | None:
    """The papers the edition's sections left out because of their limits, as its layout
    recorded them, or ``None`` when no such edition was delivered. An edition sent before
    the layouts kept them has none to show (its mail said nothing of them)."""
    sub = store.subscriber_by_id(subscriber_id)
    record = store.edition_for(subscriber_id, edition_date)
    if sub is None or record is None or not record.status.delivered:
        return None
    layout = read_layout(store.edition_layout(record.id))
    laid = [s for s in layout.sections if s.later] if layout is not None else []
    papers = store.papers_by_ids(p for s in laid for p in s.later)
    sections = tuple(
        (
            TopicSection(s.name, s.title, (), s.limit, len(s.later)),
            tuple(papers[p] for p in s.later if p in papers),
        )
        for s in laid
    )
    return LeftOut(sub, edition_date, sections)


@dataclass(frozen=True, slots=True)
class DayPage:
    """The papers first seen on one day, ranked per topic (the public archive page)."""

    day: date
    timezone: str
    sections: tuple[TopicSection, ...]
    paper_count: int


FIRST_DAY = date(1990, 1, 1)


def archivable(day: date, now: datetime) -> bool:
    """Days with a page: from 1990 (arXiv's start) to tomorrow (timezones run ahead of UTC)."""
    return FIRST_DAY <= day <= (now + timedelta(days=1)).date()


def day_bounds(day: date, timezone: str) -> tuple[datetime, datetime]:
    """The first instant of ``day`` and of the day after, in ``timezone``."""
    tz = ZoneInfo(timezone)
    start = datetime.combine(day, time(0), tz)
    end = datetime.combine(day + timedelta(days=1), time(0), tz)
    return start, end


def trending_on(
    config: Config,
    store: StoreProtocol,
    day: date,
    *,
    per_topic: int = 10,
    vectors: VectorSource | None = None,
) -> DayPage:
    """The papers first seen on ``day`` (in ``schedule.timezone``), ranked per topic as every
    reader without votes would get them (:func:`~newsletter.rank.builder.build_ranker`)."""
    settings = config.settings
    tz = settings.schedule.timezone
    start, end = day_bounds(day, tz)
    papers: list[Paper] = store.papers_first_seen_between(start, end)
    ranker = build_ranker(config, store, papers, end, vectors=vectors)
    sections = ranker.sections(
        [t.name for t in settings.topics], max_items=per_topic, group_by_topic=True
    )
    return DayPage(day, tz, tuple(s for s in sections if s.items), len(papers))
