"""Readers' own topics ranked by blocks (issue 45, newsletter/rank/own_rows.py): their lists as
the whole rows have them, the same on one thread or two, close to the general scorer, and the
whole row made again when votes or an explanation need it. Hand-made vectors, no model."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from newsletter.config import TopicSettings
from newsletter.models import DigestItem, OwnTopic, Paper
from newsletter.rank import Ranker
from newsletter.rank import ranker as ranker_module
from newsletter.rank.own_rows import CENTRE_SAMPLE, plain_rows, rank_own_block, robust_centre
from newsletter.rank.profiles import Preference
from newsletter.rank.score import rank_rows
from newsletter.semantic.vectors import Semantic
from newsletter.subscribe.own_topics import own_topic_settings

NOW = datetime(2026, 11, 17, 20, 0, tzinfo=UTC)
DIM = 24
WORDS = tuple(
    [
        "sparse",
        "attention",
        "kernels",
        "quantization",
        "decoding",
        "speculative",
        "diffusion",
        "video",
        "graph",
        "molecule",
        "federated",
        "privacy",
        "retrieval",
        "agents",
        "code",
        "protein",
        "design",
        "quantum",
        "error",
        "correction",
        "decoders",
        "robots",
        "planning",
        "memory",
        "compression",
        "pruning",
        "distillation",
        "benchmark",
        "latency",
    ]
)


def _paper(i: int, rng: random.Random) -> Paper:
    title = " ".join(rng.sample(WORDS, 4)).capitalize()
    abstract = " ".join(rng.choice(WORDS) for _ in range(25)) + "."
    return Paper(
        id=i,
        key=f"2611.{i:05d}",
        title=title,
        abstract=abstract,
        authors=("A. Author",),
        categories=("cs.LG",),
        url=f"https://arxiv.org/abs/2611.{i:05d}",
        pdf_url=None,
        code_url=None,
        version=1,
        published=NOW - timedelta(hours=10 + i % 30),
        first_seen=NOW - timedelta(hours=5),
        updated=NOW - timedelta(hours=5),
        sources=("arxiv",),
        upvotes=i % 7 or None,
        comments=None,
    )


def _unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


class Day:
    """A day of papers and readers' own topics, with vectors that follow their words."""

    def __init__(self, n_papers: int = 301, n_own: int = 120, seed: int = 45) -> None:
        rng = random.Random(seed)
        gen = np.random.default_rng(seed)
        word_vec = {w: gen.normal(size=DIM) for w in WORDS}
        self.papers = [_paper(i + 1, rng) for i in range(n_papers)]

        def vec(text: str) -> np.ndarray:
            words = [w for w in text.lower().replace(".", "").split() if w in word_vec]
            return _unit(sum(word_vec[w] for w in words) + gen.normal(size=DIM) * 0.5)

        self.operator = [
            TopicSettings(name="kernels", keywords=[["sparse attention"], ["kernels"]]),
            TopicSettings(name="proteins", keywords=[["protein design"]]),
        ]
        sentences = [f"papers on {' '.join(rng.sample(WORDS, 3))}" for _ in range(n_own)]
        self.own = [
            own_topic_settings(OwnTopic(k + 1, k + 1, 1, text, "", (), NOW, NOW))
            for k, text in enumerate(sentences)
        ]
        self.semantic = Semantic(
            "test@128",
            np.stack([vec(f"{p.title} {p.abstract}") for p in self.papers]),
            np.stack(
                [vec(" ".join(w for entry in t.keywords for w in entry)) for t in self.operator]
                + [vec(t.title or "") for t in self.own]
            ),
            {},
            (),
        )

    def ranker(self) -> Ranker:
        return Ranker([*self.operator, *self.own], self.papers, NOW, semantic=self.semantic)


@pytest.fixture(scope="module")
def day() -> Day:
    return Day()


def _list(items: tuple[DigestItem, ...]) -> list[tuple[str, float]]:
    return [(i.paper.key, i.score) for i in items]


def test_each_own_topics_list_is_its_whole_rows_positive_scores(day: Day) -> None:
    r = day.ranker()
    assert r.meaning is not None
    checked = 0
    for topic in day.own:
        i = r._order[topic.name]
        whole = rank_own_block(
            r.queries, r.index, [topic], slice(i, i + 1), r.meaning, r.fusion, full=True
        )
        scores = whole.arrays["scores"][0]
        keys = [p.key for p in r.index.papers]
        expected = {keys[j]: float(scores[j]) for j in np.flatnonzero(scores > 0)}
        listed = _list(r.ranked[topic.name])
        # The same papers with the same scores (the row made again multiplies one query by the
        # papers rather than a block of them: the last bit of float32 may differ) ...
        assert {k for k, _ in listed} == set(expected)
        for key, score in listed:
            assert score == pytest.approx(expected[key], abs=2e-6)
        # ... best first.
        assert all(a[1] >= b[1] for a, b in itertools.pairwise(listed))
        assert r.best[topic.name] == pytest.approx(whole.best[0])
        assert r.left_out[topic.name] == whole.left_out[0]
        checked += bool(listed)
    assert checked > len(day.own) // 2  # most sentences find papers: the test reads real lists


def test_own_blocks_agree_with_the_general_scorer(day: Day) -> None:
    """With an odd number of papers under the sample size, the block's median and spread are
    those of ``meaning_parts``: the same candidates and, up to float32, the same relevance."""
    r = day.ranker()
    assert r.meaning is not None
    sl = slice(r.n_shared, r.n_shared + 40)
    rows = [*day.operator, *day.own][sl]
    assert plain_rows(r.queries, sl)
    block = rank_own_block(r.queries, r.index, rows, sl, r.meaning, r.fusion, full=True)
    general = rank_rows(r.queries, r.index, rows, sl, r.meaning, r.fusion, None, {})
    assert np.array_equal(block.arrays["admitted"], general.arrays["admitted"])
    assert np.allclose(block.arrays["relevance"], general.arrays["relevance"], rtol=1e-5, atol=1e-6)
    assert np.allclose(block.arrays["meant"], general.arrays["meant"], rtol=1e-5, atol=1e-6)
    assert block.left_out == general.left_out
    assert general.arrays["admitted"].any(axis=1).sum() > 20


def test_the_lists_are_the_same_on_one_thread_or_two_and_in_any_block_size(
    day: Day, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("threadpoolctl", reason="the semantic extra's threadpoolctl is absent")
    one = day.ranker()
    monkeypatch.setattr(ranker_module, "OWN_THREADS", 2)
    monkeypatch.setattr(ranker_module, "OWN_BLOCK_CELLS", 7 * len(day.papers))  # 17 blocks
    two = day.ranker()
    for topic in day.own:
        mine, theirs = dict(_list(two.ranked[topic.name])), dict(_list(one.ranked[topic.name]))
        assert mine.keys() == theirs.keys()  # the same papers; scores up to float32's last bit
        assert all(abs(mine[k] - theirs[k]) <= 2e-6 for k in mine)
        assert two.left_out[topic.name] == one.left_out[topic.name]


def test_a_readers_votes_on_their_own_topic_rerank_it_from_the_whole_row(day: Day) -> None:
    r = day.ranker()
    topic = next(t for t in day.own if len(r.ranked[t.name]) >= 8)
    shown = r.ranked[topic.name]
    plain = r.sections([topic.name], max_items=10)[0]
    # The reader wants more like the list's last paper and less like its first.
    votes = [
        Preference(shown[-1].paper.key, 1, topic.name),
        Preference(shown[0].paper.key, -1, topic.name),
    ]
    voted = r.sections([topic.name], max_items=10, votes=votes)[0]
    assert [i.paper.key for i in voted.items] != [i.paper.key for i in plain.items]
    first = [i.paper.key for i in plain.items].index(shown[0].paper.key)
    assert shown[0].paper.key not in [i.paper.key for i in voted.items[: first + 1]]


def test_an_explanation_outside_the_list_reads_the_whole_row(day: Day) -> None:
    r = day.ranker()
    topic = next(t for t in day.own if r.left_out[t.name])
    listed = {i.paper.key for i in r.ranked[topic.name]}
    i = r._order[topic.name]
    whole = rank_own_block(
        r.queries, r.index, [topic], slice(i, i + 1), r.meaning, r.fusion, full=True
    )  # type: ignore[arg-type]
    relevance = whole.arrays["relevance"][0]
    outside = [
        j
        for j, p in enumerate(r.index.papers)
        if p.key not in listed and relevance[j] > 0  # a candidate under the relative cut
    ]
    assert outside
    ex = r.explanation(topic.name, outside[0])
    assert ex.relevance == pytest.approx(float(relevance[outside[0]]), rel=1e-4)
    assert "below 15% of the topic's best" in "\n".join(ex.lines())
    inside = r.ranked[topic.name][0]
    listed_ex = r.explain(inside)
    assert listed_ex.relevance * listed_ex.trend * listed_ex.recency == pytest.approx(
        inside.score, rel=1e-5
    )


def test_an_own_topic_with_filters_is_ranked_by_the_general_scorer(day: Day) -> None:
    filtered = day.own[0].model_copy(update={"exclude": [day.own[0].keywords[0]]})
    r = Ranker(
        [*day.operator, filtered],
        day.papers,
        NOW,
        semantic=replace(day.semantic, topics=day.semantic.topics[: len(day.operator) + 1]),
    )
    word = day.own[0].keywords[0]
    assert r.ranked[filtered.name]
    for item in r.ranked[filtered.name]:
        assert word not in f"{item.paper.title} {item.paper.abstract}".lower()


def test_robust_centre_is_the_median_and_mad_of_an_odd_sample() -> None:
    gen = np.random.default_rng(3)
    s = gen.normal(0.1, 0.05, size=(5, CENTRE_SAMPLE)).astype(np.float32)
    median, spread = robust_centre(s)
    assert np.allclose(median[:, 0], np.median(s, axis=1))
    assert np.allclose(spread[:, 0], 1.4826 * np.median(np.abs(s - median), axis=1), rtol=1e-6)
    wide = gen.normal(0.1, 0.05, size=(2, 4000)).astype(np.float32)
    m2, _ = robust_centre(wide)
    step = -(-4000 // CENTRE_SAMPLE)
    sample = np.sort(wide[:, ::step], axis=1)  # an even sample: its lower median
    assert sample.shape[1] % 2 == 0
    assert np.array_equal(m2[:, 0], sample[:, sample.shape[1] // 2 - 1])


def test_own_topic_settings_have_fresh_defaults_and_say_what_was_set() -> None:
    a, b = (
        own_topic_settings(
            OwnTopic(k, k, 1, "decoders for quantum error correction", "", (), NOW, NOW)
        )
        for k in (1, 2)
    )
    assert a.exclude == [] and a.exclude is not b.exclude
    assert a.model_fields_set == {"name", "title", "keywords", "like"}
    assert a.keywords == ["decoders", "quantum", "error", "correction"]
