"""Ranking quality on a hand-judged set of real papers (see judged.yaml for how it was judged)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from newsletter.config import TopicSettings, parse_config
from newsletter.models import Paper
from newsletter.rank import Ranker
from tests.rank.relevance.corpus import NOW, load_papers

HERE = Path(__file__).resolve().parent
DATA: dict[str, Any] = yaml.safe_load((HERE / "judged.yaml").read_text())
JUDGMENTS: dict[str, dict[str, Any]] = DATA["judgments"]


def topics() -> list[TopicSettings]:
    settings, _ = parse_config(yaml.safe_dump({"topics": DATA["topics"]}), "judged.yaml")
    return settings.topics


def ranked_keys(ranker: Ranker, topic: str) -> list[str]:
    return [item.paper.key for item in ranker.ranked[topic]]


@pytest.fixture(scope="module")
def papers() -> list[Paper]:
    return load_papers()


@pytest.fixture(scope="module")
def ranker(papers: list[Paper]) -> Ranker:
    return Ranker(topics(), papers, NOW)


def test_the_set_is_the_real_fixture_papers(papers: list[Paper]) -> None:
    keys = {p.key for p in papers}
    assert len(papers) == 46  # SOURCES.md: 47 across arXiv and HF, one of them only in the API page
    for j in JUDGMENTS.values():
        assert set(j["relevant"]) <= keys and set(j["off_topic"]) <= keys
    assert set(JUDGMENTS) == {t.name for t in topics()}


@pytest.mark.parametrize("topic", sorted(JUDGMENTS))
def test_precision_of_the_top_items(ranker: Ranker, topic: str) -> None:
    judged = JUDGMENTS[topic]
    relevant = set(judged["relevant"])
    keys = ranked_keys(ranker, topic)
    assert keys, topic
    for k, minimum in judged["precision_at"].items():
        # A digest may show fewer than k papers (weak matches are left out): precision is over
        # what it shows, and the must_appear_top checks keep recall honest.
        top = keys[:k]
        precision = sum(key in relevant for key in top) / len(top)
        assert precision >= minimum, (topic, k, top)


@pytest.mark.parametrize("topic", sorted(JUDGMENTS))
def test_off_topic_papers_stay_out_of_the_top(ranker: Ranker, topic: str) -> None:
    judged = JUDGMENTS[topic]
    keys = ranked_keys(ranker, topic)
    depth = max(judged["precision_at"])
    assert not set(judged["off_topic"]) & set(keys[:depth]), keys[:depth]
    assert not set(judged["must_not_appear"]) & set(keys)


@pytest.mark.parametrize("topic", sorted(JUDGMENTS))
def test_relevant_papers_appear_where_a_reader_expects(ranker: Ranker, topic: str) -> None:
    keys = ranked_keys(ranker, topic)
    for key, within in JUDGMENTS[topic]["must_appear_top"].items():
        assert key in keys[:within], (key, keys[:within])


def test_zero_upvote_papers_are_ranked_on_relevance(ranker: Ranker, papers: list[Paper]) -> None:
    by_key = {p.key: p for p in papers}
    assert not by_key["2611.00019"].upvotes and not by_key["2611.00029"].upvotes
    assert {"2611.00019", "2611.00029"} <= set(ranked_keys(ranker, "llm-serving")[:4])


def test_relevance_alone_already_ranks_well(papers: list[Paper]) -> None:
    """Without any trending signal, the judged precision holds: relevance does the work."""
    plain = Ranker(topics(), load_papers(keep_upvotes=False), NOW)
    for topic, judged in JUDGMENTS.items():
        keys = ranked_keys(plain, topic)
        k, minimum = max(judged["precision_at"].items())
        top = keys[:k]
        assert sum(key in set(judged["relevant"]) for key in top) / len(top) >= minimum, topic


def test_a_hugely_upvoted_off_topic_paper_is_never_rescued(papers: list[Paper]) -> None:
    hyped = [
        replace(p, upvotes=100_000, comments=5_000, upvote_velocity=900.0)
        if p.key in ("2611.00004", "2611.00035")
        else p
        for p in papers
    ]
    ranker = Ranker(topics(), hyped, NOW)
    for topic in ("llm-serving", "neural-rendering", "moe", "gnn"):
        assert "2611.00004" not in ranked_keys(ranker, topic)
    assert "2611.00035" not in ranked_keys(ranker, "gpu-kernels")  # excluded: "unlearnable"


def test_reasons_name_the_match_and_the_signals(ranker: Ranker) -> None:
    reasons = {i.paper.key: i.reason for i in ranker.ranked["moe"]}
    assert reasons["2609.11873"] == "title: mixture of experts · abstract: router"
    reasons = {i.paper.key: i.reason for i in ranker.ranked["gpu-kernels"]}
    assert reasons["2611.00017"].startswith("title: ")
    assert reasons["2611.00017"].endswith("· 84 upvotes · 3 sources")
    reasons = {i.paper.key: i.reason for i in ranker.ranked["gnn"]}
    # The abstract defines "graph neural networks (GNNs)": the long form is what it matched.
    assert reasons["2611.00021"].startswith("abstract: graph neural network")
