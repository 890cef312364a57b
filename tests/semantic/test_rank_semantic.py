"""The ranker with vectors (pure: hand-made unit vectors, no model): what meaning may and may not
do to a topic's list, and how it explains itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import yaml

from newsletter.config import TopicSettings, parse_config
from newsletter.models import Paper
from newsletter.rank import RELATIVE_CUT, Ranker
from newsletter.rank.profiles import Preference
from newsletter.semantic.space import MIN_PAPERS, evidence
from newsletter.semantic.vectors import Semantic

NOW = datetime(2026, 11, 17, 20, 0, tzinfo=UTC)
DIM = 16


def paper(
    i: int, title: str, abstract: str = "", categories: tuple[str, ...] = ("cs.DC",)
) -> Paper:
    return Paper(
        id=i,
        key=f"2611.{i:05d}",
        title=title,
        abstract=abstract or "We study a problem and report results on benchmarks.",
        authors=("A. Author",),
        categories=categories,
        url=f"https://arxiv.org/abs/2611.{i:05d}",
        pdf_url=None,
        code_url=None,
        version=1,
        published=NOW - timedelta(hours=10),
        first_seen=NOW - timedelta(hours=5),
        updated=NOW - timedelta(hours=5),
        sources=("arxiv",),
        upvotes=None,
        comments=None,
    )


def topics(*specs: dict[str, object]) -> list[TopicSettings]:
    settings, _ = parse_config(yaml.safe_dump({"topics": list(specs)}), "test.yaml")
    return settings.topics


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def axis(k: int, noise: np.ndarray | None = None, weight: float = 1.0) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[k] = weight
    return unit(v + (noise if noise is not None else 0))


RNG = np.random.default_rng(7)


def background(n: int) -> tuple[list[Paper], list[np.ndarray]]:
    """``n`` papers about other things: vectors spread over the other axes."""
    papers = [paper(100 + i, f"Unrelated study number {i} of databases") for i in range(n)]
    vecs = [unit(np.abs(RNG.normal(size=DIM)) * np.r_[0.3, np.ones(DIM - 1)]) for _ in range(n)]
    return papers, vecs


def semantic(papers_vecs: list[np.ndarray], topic_vecs: list[np.ndarray], **kw: object) -> Semantic:
    return Semantic(
        "test@128",
        np.stack(papers_vecs),
        np.stack(topic_vecs),
        kw.get("examples", {}),
        kw.get("keywords", ()),  # type: ignore[arg-type]
    )


GNN = {
    "name": "gnn-systems",
    "title": "GNN systems",
    "keywords": [["GNN", "graph neural network"], "distributed training"],
}


def test_a_paper_with_no_keyword_but_a_strong_meaning_is_shown_and_says_why() -> None:
    others, other_vecs = background(40)
    match = paper(1, "Distributed GNN training on a billion edges")
    gap = paper(2, "Training graph convolutional networks at web scale on 64 machines")
    weak = paper(3, "A mild cousin of the topic")
    papers = [match, gap, weak, *others]
    vecs = [
        axis(0, axis(1), 1.5),  # the keyword match: close in meaning, not the closest
        axis(0, RNG.normal(scale=0.05, size=DIM)),
        axis(0, np.abs(RNG.normal(size=DIM)), 0.3),
        *other_vecs,
    ]
    t = topics(GNN)
    keywords = ({"GNN": axis(0), "distributed training": axis(1)},)
    ranker = Ranker(t, papers, NOW, semantic=semantic(vecs, [axis(0)], keywords=keywords))
    shown = [i.paper.key for i in ranker.ranked["gnn-systems"]]
    assert shown[:2] == [match.key, gap.key]  # the keyword match first, then the meaning-only one
    assert weak.key not in shown  # neither a keyword nor a strong similarity
    assert not any(p.key in shown for p in others)
    reason = ranker.ranked["gnn-systems"][1].reason
    # The similarity is the one the score used: with the query after pseudo-relevance feedback.
    sim = float(ranker.meaning.similarity[0][papers.index(gap)])  # type: ignore[union-attr]
    assert reason.startswith(f"close in meaning to GNN systems (GNN, {sim:.2f})")
    lines = ranker.explain(ranker.ranked["gnn-systems"][1]).lines()
    assert any(f"similarity {sim:.2f} to GNN systems; nearest: GNN" in line for line in lines)
    assert any(
        line.startswith("relevance ") and "= words 0.000 + meaning" in line for line in lines
    )
    # The lexical ranker alone does not show it.
    assert gap.key not in [i.paper.key for i in Ranker(t, papers, NOW).ranked["gnn-systems"]]


def test_exclude_still_vetoes_and_all_still_requires() -> None:
    others, other_vecs = background(40)
    survey = paper(1, "A survey of graph learning systems")
    inference = paper(2, "Serving graph convolutional networks for inference")
    training = paper(3, "Graph convolutional network training at scale")
    papers = [survey, inference, training, *others]
    vecs = [axis(0), axis(0), axis(0), *other_vecs]
    t = topics(
        {**GNN, "exclude": ["survey"]}, {**GNN, "name": "gnn-inference", "all": ["inference"]}
    )
    ranker = Ranker(t, papers, NOW, semantic=semantic(vecs, [axis(0), axis(0)]))
    assert survey.key not in [i.paper.key for i in ranker.ranked["gnn-systems"]]
    assert {i.paper.key for i in ranker.ranked["gnn-inference"]} == {inference.key}


def test_categories_still_filter_meaning_only_papers() -> None:
    others, other_vecs = background(40)
    bio = paper(1, "Graph networks for protein folding", categories=("q-bio.BM",))
    papers = [bio, *others]
    t = topics({**GNN, "categories": ["cs.DC"]})
    ranker = Ranker(t, papers, NOW, semantic=semantic([axis(0), *other_vecs], [axis(0)]))
    assert ranker.ranked["gnn-systems"] == ()


def test_a_small_day_admits_nothing_on_meaning_alone() -> None:
    """Under MIN_PAPERS the day's median and spread say too little: meaning only reorders."""
    others, other_vecs = background(MIN_PAPERS - 5)
    gap = paper(2, "Training graph convolutional networks at web scale")
    ranker = Ranker(
        topics(GNN), [gap, *others], NOW, semantic=semantic([axis(0), *other_vecs], [axis(0)])
    )
    assert ranker.ranked["gnn-systems"] == ()
    assert not evidence(np.ones(MIN_PAPERS - 1, dtype=np.float32)).strong.any()


def test_meaning_reorders_keyword_matches_and_the_cut_still_applies() -> None:
    """Two papers with the same keyword evidence: the one that means the topic ranks first; the
    one whose meaning is far from the topic's is left out by the relative cut (its keyword
    part alone, ``alpha`` of the best, is under it) and counted in ``left_out``."""
    others, other_vecs = background(40)
    near = paper(1, "GNN training systems", "We build a distributed GNN training system.")
    far = paper(2, "GNN training systems", "We build a distributed GNN training system!")
    papers = [far, near, *others]
    vecs = [axis(5), axis(0), *other_vecs]
    ranker = Ranker(topics(GNN), papers, NOW, semantic=semantic(vecs, [axis(0)]))
    ranked = [i.paper.key for i in ranker.ranked["gnn-systems"]]
    assert ranked[0] == near.key
    assert far.key not in ranked
    assert ranker.left_out["gnn-systems"] >= 1
    words_only = ranker.explanation("gnn-systems", papers.index(far))
    assert not words_only.shown and words_only.relevance < RELATIVE_CUT * words_only.best


def test_a_readers_votes_lift_papers_like_the_ones_they_want() -> None:
    others, other_vecs = background(40)
    a = paper(1, "GNN training on CPUs", "We train a GNN with distributed training on CPUs.")
    b = paper(2, "GNN training on GPUs", "We train a GNN with distributed training on GPUs.")
    liked = paper(3, "An earlier paper on CPU graph training", "Old work.")
    papers = [a, b, *others]
    vecs = [axis(0, axis(3), 1.0), axis(0, axis(4), 1.0), *other_vecs]
    sem = semantic(vecs, [axis(0)], examples={liked.key: axis(3)})
    ranker = Ranker(topics(GNN), papers, NOW, examples=[liked], semantic=sem)
    shared = [i.paper.key for s in ranker.sections(["gnn-systems"]) for i in s.items]
    votes = [Preference(liked.key, 1)]
    mine = [i.paper.key for s in ranker.sections(["gnn-systems"], votes=votes) for i in s.items]
    assert set(shared[:2]) == set(mine[:2]) == {a.key, b.key}
    assert mine[0] == a.key
    first = next(i for s in ranker.sections(["gnn-systems"], votes=votes) for i in s.items)
    assert first.reason.startswith("like: An earlier paper on CPU graph training")
    against = [Preference(liked.key, -1)]
    lowered = [
        i.paper.key for s in ranker.sections(["gnn-systems"], votes=against) for i in s.items
    ]
    assert lowered.index(b.key) < lowered.index(a.key)


def test_like_papers_move_the_topics_query() -> None:
    others, other_vecs = background(40)
    example = paper(9, "The example paper", "Example.")
    gap = paper(1, "Node embeddings for trillion-edge graphs", "Bucketed embedding tables.")
    papers = [gap, *others]
    t = topics({**GNN, "like": [example.key]})
    sem = semantic([axis(6), *other_vecs], [axis(0)], examples={example.key: axis(6)})
    plain = Ranker(topics(GNN), papers, NOW, semantic=sem)
    liked = Ranker(t, papers, NOW, examples=[example], semantic=sem)
    assert plain.ranked["gnn-systems"] == ()
    assert [i.paper.key for i in liked.ranked["gnn-systems"]] == [gap.key]
    assert "The example paper" in liked.ranked["gnn-systems"][0].reason
