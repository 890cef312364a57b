"""What a subscriber would get today, without sending or recording anything.

``newsletter rank --to EMAIL`` shows the ranking (scores, reasons, and how each score was
made); ``newsletter preview --to EMAIL`` the rendered digest. Both read the store only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from newsletter.digest.render import RenderedDigest
from newsletter.edition import EditionBuilder, edition_date_for
from newsletter.edition.build import day_ranker, history_since
from newsletter.models import Digest, DigestItem, Subscriber, TopicSection
from newsletter.rank import Explanation, Ranker
from newsletter.services import Services


@dataclass(frozen=True)
class RankedPaper:
    """One paper of the ranking, with how its score was made."""

    item: DigestItem
    explanation: Explanation


@dataclass(frozen=True)
class RankedSection:
    """One section of the ranking: its papers, best first, and how many matches were left out."""

    name: str
    title: str
    papers: tuple[RankedPaper, ...]
    left_out: int
    """Matches not shown: a single passing mention, or far below the topic's best today."""
    sent_today: int = 0
    """Papers this section would show that today's edition already carried (never sent again)."""
    sent_before: int = 0
    """Papers this section would show that earlier editions already carried."""


@dataclass(frozen=True)
class RankPreview:
    """A subscriber's digest as it would be ranked now, and what it was ranked from."""

    subscriber: Subscriber
    papers: int
    """Papers first seen here within ``digest.lookback_days``: the ones ranked."""
    already_sent: int
    """Of those papers, the ones already sent to the subscriber (never sent again)."""
    votes: int
    """The subscriber's "more/less like this" votes (they reorder the topics they touch)."""
    missing_topics: tuple[str, ...]
    """The subscriber's topics that are no longer in the config (ignored)."""
    sections: tuple[RankedSection, ...]
    matching: str = ""
    """One line: whether ranking fuses meaning with keywords, or why it is lexical."""


def rank_preview(services: Services, subscriber: Subscriber, now: datetime) -> RankPreview:
    """The ranking ``subscriber`` would get at ``now``: sections, scores, reasons and
    explanations, with the papers already sent to them left out."""
    config, store = services.config, services.store
    settings = config.settings
    vectors = services.vectors
    papers, ranker = day_ranker(config, store, now, vectors)
    sent = store.sent_paper_ids([subscriber.id], since=history_since(papers))[subscriber.id]
    sent &= {p.id for p in papers}  # already sent among today's papers
    today = edition_date_for(subscriber, now, config.settings.schedule.timezone)
    sent_today = sent & store.sent_paper_ids([subscriber.id], since=today)[subscriber.id]
    votes = store.votes_of(subscriber.id)

    def sections(exclude: set[int]) -> tuple[TopicSection, ...]:
        return ranker.sections(
            subscriber.topics,
            exclude_ids=exclude,
            max_items=settings.digest.max_items,
            group_by_topic=settings.digest.group_by_topic,
            votes=votes,
        )

    # What each section would hold with nothing sent yet: an empty section whose papers went
    # out in today's edition says so, instead of "nothing strong".
    unsent = {s.name: {i.paper.id for i in s.items} for s in sections(set())} if sent else {}
    return RankPreview(
        subscriber=subscriber,
        papers=len(papers),
        already_sent=len(sent),
        votes=len(votes),
        missing_topics=tuple(t for t in subscriber.topics if t not in ranker.topics),
        sections=tuple(
            _ranked(section, ranker, unsent.get(section.name, set()), sent, sent_today)
            for section in sections(sent)
        ),
        matching=vectors.state,
    )


def _ranked(
    section: TopicSection, ranker: Ranker, unsent: set[int], sent: set[int], sent_today: set[int]
) -> RankedSection:
    return RankedSection(
        name=section.name,
        title=section.title,
        papers=tuple(RankedPaper(item, ranker.explain(item)) for item in section.items),
        left_out=ranker.left_out.get(section.name, 0),
        sent_today=len(unsent & sent_today),
        sent_before=len(unsent & (sent - sent_today)),
    )


@dataclass(frozen=True)
class RenderPreview:
    """A subscriber's digest as it would be rendered and sent now."""

    digest: Digest
    rendered: RenderedDigest
    """Exactly the parts ``newsletter send`` would send (the HTML with its CSS inlined)."""
    skipped: bool
    """Nothing new in the subscriber's topics and ``digest.empty: skip``: this edition would not
    be sent (``rendered`` holds the "nothing new" note ``digest.empty: send`` would send)."""


def render_preview(services: Services, subscriber: Subscriber, now: datetime) -> RenderPreview:
    """The digest ``subscriber`` would get at ``now`` (their local date's edition), rendered."""
    config, store = services.config, services.store
    builder = EditionBuilder(services, now)
    sent = store.sent_paper_ids([subscriber.id], since=builder.history_since)[subscriber.id]
    digest = builder.digest(
        subscriber,
        edition_date_for(subscriber, now, config.settings.schedule.timezone),
        sent,
        votes=store.votes_of(subscriber.id),
    )
    rendered, _ = builder.render(digest)
    return RenderPreview(
        digest=digest,
        rendered=rendered,
        skipped=digest.is_empty and config.settings.digest.empty == "skip",
    )
