"""The archive: a sent edition's digest rebuilt from the ledger, and the papers of a day.

Nothing is stored as HTML: a sent edition is its ledger row, which lists the papers it carried
(``editions.paper_ids``); re-ranking just those papers gives back the sections and the reasons
(:func:`sent_digest`). The web app renders what these functions return
(``/archive/view/…`` and ``/archive/YYYY-MM-DD``); it does not rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from newsletter.config import Config
from newsletter.models import Digest, DigestItem, Paper, TopicSection
from newsletter.rank.builder import build_ranker
from newsletter.semantic.vectors import VectorSource
from newsletter.store.protocol import StoreProtocol


def sent_digest(
    config: Config,
    store: StoreProtocol,
    subscriber_id: int,
    edition_date: date,
    *,
    vectors: VectorSource | None = None,
) -> Digest | None:
    """The digest a subscriber was sent for ``edition_date``, with every paper it carried, or
    ``None`` when no such edition was delivered. Ranked as the send ranked it
    (:func:`~newsletter.rank.builder.build_ranker`, ``vectors`` as there), with the votes the
    reader had cast by then."""
    settings = config.settings
    sub = store.subscriber_by_id(subscriber_id)
    record = store.edition_for(subscriber_id, edition_date)
    if sub is None or record is None or not record.status.delivered:
        return None
    papers = store.edition_papers(record.id)
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
    return Digest(sub, edition_date, tuple(s for s in sections if s.items), titles)


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
