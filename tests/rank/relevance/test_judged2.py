"""The second hand-judged set (judged2.yaml, papers.yaml): its validity, its metrics, a quality floor.

Uses only ``Ranker(topics, papers, now).ranked[topic]`` (via evaluate.py), so it holds across
rewrites of the ranker's internals.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
import yaml

from newsletter.models import Paper
from tests.rank.relevance import evaluate as ev

DATA: dict[str, Any] = ev.judged_data()
GRADES = ev.load_grades(DATA)
TRAPS: dict[str, dict[str, list[str]]] = DATA["traps"]


@pytest.fixture(scope="module")
def pool() -> list[Paper]:
    return ev.load_pool()


@pytest.fixture(scope="module")
def by_key(pool: list[Paper]) -> dict[str, Paper]:
    return {p.key: p for p in pool}


# ---------------------------------------------------------------------------- the set


def test_the_pool_holds_the_fixtures_and_the_written_papers(pool: list[Paper]) -> None:
    written = yaml.safe_load(ev.PAPERS_FILE.read_text())["papers"]
    assert len(pool) == 46 + len(written) >= 230
    assert len({p.key for p in pool}) == len({p.id for p in pool}) == len(pool)
    for p in written:
        ev.check_written_paper(p, words=(80, 180))


def test_every_topic_parses_and_is_judged() -> None:
    topics = ev.load_topics(DATA)
    names = [t.name for t in topics]
    assert len(names) >= 8 and len(set(names)) == len(names)
    assert set(GRADES) == set(names) == set(TRAPS)
    assert not {"llm-serving", "gpu-kernels", "neural-rendering"} & set(names)  # the demo's
    for t in topics:
        assert t.keywords, t.name
        assert "inference" not in [k for k in t.keywords if isinstance(k, str)], t.name


def test_every_judged_key_is_in_the_pool(by_key: dict[str, Paper]) -> None:
    ev.check_judged_keys_in_pool(GRADES, TRAPS, by_key, min_top=3)


def test_every_topic_has_traps_consistent_with_their_grades(by_key: dict[str, Paper]) -> None:
    for topic, kinds in TRAPS.items():
        ev.check_traps(topic, kinds, GRADES[topic], by_key)
        assert {"generic-word", "zero-upvote"} <= set(kinds), topic
        assert {"acronym", "vocabulary"} & set(kinds), topic
    assert sum("upvoted-weak" in kinds for kinds in TRAPS.values()) >= 8


def test_the_set_has_heavily_upvoted_papers_judged_irrelevant_somewhere(
    by_key: dict[str, Paper],
) -> None:
    hyped = [k for k, p in by_key.items() if (p.upvotes or 0) >= 300]
    assert len(hyped) >= 5
    for key in hyped:
        assert any(grades.get(key, 0) == 0 for grades in GRADES.values()), key


# ---------------------------------------------------------------------------- the metrics


def test_ndcg_of_a_perfect_ranking_is_one() -> None:
    grades = {"a": 2, "b": 1, "c": 1}
    assert ev.ndcg(["a", "b", "c"], grades) == pytest.approx(1.0)
    assert ev.ndcg(["a", "c", "b", "x"], grades) == pytest.approx(1.0)  # equal grades swap freely


def test_ndcg_of_a_reversed_ranking_by_hand() -> None:
    # gains 2^g - 1: grade 2 -> 3, grade 1 -> 1. Ideal [2, 1, 0]: 3/1 + 1/log2(3) = 3.63093.
    # Reversed [0, 1, 2]: 0 + 1/log2(3) + 3/log2(4) = 0.63093 + 1.5 = 2.13093. Ratio 0.58688.
    grades = {"a": 2, "b": 1}
    assert ev.ndcg(["c", "b", "a"], grades) == pytest.approx(0.58688, abs=1e-5)
    assert ev.dcg([2, 1, 0]) == pytest.approx(3 + 1 / math.log2(3))


def test_ndcg_uses_every_judged_paper_for_the_ideal_and_cuts_at_ten() -> None:
    grades = {f"p{i}": 2 for i in range(12)}
    # Only one relevant paper shown, at rank 1: 3 / (3 * sum of 1/log2(i+2) for i < 10).
    ideal = sum(3 / math.log2(i + 2) for i in range(10))
    assert ev.ndcg(["p0"], grades) == pytest.approx(3 / ideal)
    # The 11th paper does not count.
    assert ev.ndcg([f"x{i}" for i in range(10)] + ["p0"], grades) == 0.0
    assert ev.ndcg(["p0"], {}) == 0.0


def test_precision_counts_missing_slots_as_not_relevant() -> None:
    grades = {"a": 2, "b": 1}
    assert ev.precision(["a", "b", "c"], grades) == pytest.approx(0.2)
    assert ev.precision(["a", "b", "c"], grades, minimum=2) == pytest.approx(0.1)
    assert ev.precision_shown(["a", "b", "c"], grades) == pytest.approx(2 / 3)
    assert ev.precision_shown([], grades) is None
    assert ev.off_topic(["c", "a", "d", "b", "e", "f"], grades) == 3  # c, d, e in the top 5


def test_bm25_baseline_by_hand() -> None:
    assert ev.bm25_tokens("Quantized LLMs, GPUs and a loss") == [
        "quantized",
        "llm",
        "gpu",
        "and",
        "a",
        "loss",
    ]
    # A paper mentioning the query word twice beats one mentioning it once; non-matches are absent.
    pool = ev.load_pool()[:3]
    docs = [
        replace(pool[0], key="x1", title="Mamba", abstract="We study Mamba layers."),
        replace(pool[1], key="x2", title="Other", abstract="Mamba once, and other words here."),
        replace(pool[2], key="x3", title="Nothing", abstract="Unrelated words only here."),
    ]
    topics = ev.load_topics(
        {"topics": [{"name": "ssm", "keywords": ["Mamba"]}], "judgments": {}, "traps": {}}
    )
    assert ev.bm25_rankings(topics, docs) == {"ssm": ["x1", "x2"]}


# ---------------------------------------------------------------------------- the floor

# Mean nDCG@10 of the ranker as of 2026-11-25 (commit baf277a's newsletter/rank.py) on the
# 236-paper pool with the near-misses and reworded papers: 0.789 (BM25 baseline 0.774; on the
# earlier, easier 176-paper pool both scored about 0.91). The floor is that minus 0.02; raise it
# when the ranker improves.
NDCG_FLOOR = 0.769


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return ev.evaluate()


def test_the_ranker_keeps_its_measured_quality(report: dict[str, Any]) -> None:
    mean = report["runs"]["ranker"]["mean"]
    assert mean["ndcg10"] >= NDCG_FLOOR, ev.table(report)


def test_the_report_covers_every_topic_for_both_runs(report: dict[str, Any]) -> None:
    for run in ("ranker", "bm25"):
        topics = report["runs"][run]["topics"]
        assert [t["topic"] for t in topics] == list(GRADES)
        for t in topics:
            assert 0.0 <= t["ndcg10"] <= 1.0 and len(t["top"]) <= ev.K
    assert "mean" in ev.table(report)
