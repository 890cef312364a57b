"""The papers reader profiles use besides the run's own: those readers voted on, and those
topics' ``like:`` lists name (shared by the edition builder and the fetch that embeds them)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from newsletter.config import Config
from newsletter.models import Paper
from newsletter.store.protocol import PaperReads

log = logging.getLogger(__name__)

VOTES_SINCE = timedelta(days=365)
"""Votes older than this no longer shape a reader's digest (feedback links last a year)."""


def profile_examples(
    config: Config, store: PaperReads, papers: Sequence[Paper], now: datetime
) -> list[Paper]:
    """The papers reader profiles can use this run, besides the run's own: those readers voted
    on (within ``VOTES_SINCE``) and those topics' ``like:`` lists name; a ``like:`` paper that
    is not stored is logged, naming the topic and what to do."""
    examples = store.voted_papers(now - VOTES_SINCE)
    have = {p.key for p in papers} | {p.key for p in examples}
    wanted = {k: t.name for t in config.settings.topics for k in t.like if k not in have}
    found = store.papers_by_keys(wanted) if wanted else {}
    for key, topic in wanted.items():
        if key not in found:
            log.warning(
                "topic %s: like: %s is not a stored paper, so it shapes nothing yet; fetch it "
                "(an arxiv_api source) or remove it from the topic",
                topic,
                key,
            )
    return [*examples, *found.values()]  # the Ranker adds the run's own like: papers
