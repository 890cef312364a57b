"""Semantic ranking against lexical ranking on both judged sets, and the two-day simulation.

No per-topic settings, no fitted constants: the ranker's own defaults. The assertions compare
runs made in the same process (the hybrid must beat the lexical ranker it extends; votes in
the shared space must do at least as well as the tf-idf profiles), not fixed figures.
"""

from __future__ import annotations

import pytest

from tests.rank.relevance import hybrid
from tests.rank.relevance.simulate import simulate

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _model() -> None:
    problem = hybrid.unavailable()
    if problem:
        pytest.skip(problem)


@pytest.mark.parametrize("name", ["judged2", "judged3"])
def test_the_hybrid_beats_the_lexical_ranker(name: str) -> None:
    report = hybrid.evaluate(name)
    runs = report["runs"]
    lexical, fused = runs["lexical"]["mean"], runs["hybrid"]["mean"]
    assert fused["ndcg10"] > lexical["ndcg10"] + 0.02, hybrid.table(report)
    assert fused["p10"] >= lexical["p10"], hybrid.table(report)
    assert fused["off5"] <= lexical["off5"], hybrid.table(report)


@pytest.mark.parametrize("name", ["judged2", "judged3"])
def test_votes_in_the_shared_space_do_at_least_as_well_as_tf_idf_profiles(name: str) -> None:
    words = simulate(name)
    meaning = simulate(name, semantic=True)
    n = len(words)
    with_words = sum(r.ndcg_with for r in words) / n
    with_meaning = sum(r.ndcg_with for r in meaning) / n
    assert with_meaning >= with_words
    assert sum(r.gain for r in meaning) > 0  # votes still help on day two
