"""The one way the service builds a :class:`~newsletter.rank.ranker.Ranker`: what to rank with.

The send, ``rank``, ``preview`` and the archive pages (a sent edition, the papers of a day) all
rank through :func:`build_ranker`, so each ranks with the same topics, the same example papers
(those readers voted on and topics' ``like:`` lists name) and, when semantic matching is on, the
same vectors: the archive shows a reader's edition as the send ranked it. This is the edge of
the ranking package: the rest of it is pure, this module reads the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from newsletter.config import Config, TopicSettings
from newsletter.models import Paper
from newsletter.rank.example_papers import profile_examples
from newsletter.rank.ranker import Ranker
from newsletter.semantic.vectors import VectorSource
from newsletter.store.protocol import PaperReads, Vectors


class RankingReads(PaperReads, Vectors, Protocol):
    """What building a ranker reads: the papers readers voted on, topics' ``like:`` papers and
    the stored embedding vectors."""


def build_ranker(
    config: Config,
    store: RankingReads,
    papers: Sequence[Paper],
    now: datetime,
    *,
    vectors: VectorSource | None = None,
    extra_topics: Sequence[TopicSettings] = (),
) -> Ranker:
    """The ranker over ``papers`` at ``now``: the configured topics, the examples reader
    profiles use (:func:`~newsletter.rank.example_papers.profile_examples`) and the embedding vectors of
    semantic ranking from ``vectors`` (stored ones, else the model's; default: a source over
    ``store``). When semantic matching is off, ranking is lexical. ``extra_topics``: rows ranked
    after the configured topics (readers' own topics, for the send only), their ``like:``
    papers read from the store."""
    examples = profile_examples(config, store, papers, now)
    vectors = vectors or VectorSource(config, store, lambda: now)
    topics = [*config.settings.topics, *extra_topics]
    have = {p.key for p in papers} | {p.key for p in examples}
    wanted = {k for t in extra_topics for k in t.like if k not in have}
    if wanted:
        examples = [*examples, *store.papers_by_keys(sorted(wanted)).values()]
    semantic = vectors.semantic(papers, topics, examples) if papers and topics else None
    return Ranker(topics, papers, now, examples=examples, semantic=semantic)
