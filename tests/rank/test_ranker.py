"""The ranker: topic language, BM25F relevance, trending, digests, and the vectorized scorer."""

from __future__ import annotations

import functools
import math
from collections import Counter
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bench.top_n import _top_rows, top_n
from newsletter.config import TopicSettings
from newsletter.models import Paper
from newsletter.rank import (
    ABSTRACT_WEIGHT,
    AGE_DROP,
    AUTHOR_SCORE,
    K1,
    TITLE_WEIGHT,
    TREND_LIFT,
    TREND_SCALE,
    B,
    PaperIndex,
    Ranker,
    Rule,
    compile_rules,
    recency_factor,
    score_all,
    tokenize,
    trend_factor,
)
from tests.rank.relevance.corpus import NOW, load_papers

FILLER = "We study a problem and report results on standard benchmarks with careful ablations."


def paper(
    i: int,
    title: str,
    abstract: str = FILLER,
    *,
    upvotes: int | None = None,
    categories: tuple[str, ...] = ("cs.LG",),
    authors: tuple[str, ...] = ("A. Author",),
    age: timedelta = timedelta(hours=1),
    sources: tuple[str, ...] = ("arxiv-cs-lg",),
    **kw: Any,
) -> Paper:
    when = NOW - age
    return Paper(
        id=i,
        key=f"2611.{i:05d}",
        title=title,
        abstract=abstract,
        authors=authors,
        categories=categories,
        url=f"https://arxiv.org/abs/2611.{i:05d}",
        pdf_url=None,
        code_url=None,
        version=1,
        published=when,
        first_seen=when,
        updated=when,
        sources=sources,
        upvotes=upvotes,
        **kw,
    )


def topic(name: str = "t", **kw: Any) -> TopicSettings:
    return TopicSettings(name=name, **kw)


def keys(ranker: Ranker, name: str = "t") -> list[str]:
    return [i.paper.key for i in ranker.ranked[name]]


def rank(papers: list[Paper], *topics: TopicSettings) -> Ranker:
    return Ranker(list(topics) or [topic(keywords=["x"])], papers, NOW)


# ---------------------------------------------------------------------------- matching


@pytest.mark.parametrize(
    ("keyword", "text", "matches"),
    [
        ("NAS", "Nasal airflow simulation", False),
        ("NAS", "Efficient NAS for edge devices", True),
        ("NAS", "neural architecture search (NAS).", True),
        ("GNN", "Scaling GNNs to billions of edges", True),
        ("GNNs", "A GNN for molecules", True),
        ("mixture of experts", "Sparse Mixture-of-Experts layers", True),
        ("mixture-of-experts", "a mixture of experts model", True),
        ("mixture of experts", "experts: a mixture of", True),  # scattered in a title: half
        ("quantization", "Quantized transformers", True),
        ("distributed training", "Training on a distribution shift", False),
        ("KV cache", "compressing the kv-cache", True),
        ("pre-training", "better pretraining data", True),
        ("pre-training", "pre training at scale", True),
        ("LLM", "NVIDIA's LLM stack", True),
        ("NVIDIA", "NVIDIA's LLM stack", True),
        ("Melange", "Mélange: cost efficient serving", True),
        ("CUDA", "CUDA-L1: improving CUDA", True),
        ("RL", "we release the URL", False),
        ("libraries", "a new library for kernels", True),
        ("process", "processes and threads", True),
    ],
)
def test_keyword_matching(keyword: str, text: str, matches: bool) -> None:
    ranker = rank([paper(1, text)], topic(keywords=[keyword]))
    assert bool(ranker.ranked["t"]) is matches


def test_tokenize_is_case_accent_hyphen_and_plural_insensitive() -> None:
    assert tokenize("Mixture-of-Experts MoEs, NVIDIA’s GPUs") == tokenize(
        "mixture of experts moe nvidia gpu"
    )
    assert tokenize("analysis status process") == ["analysis", "status", "process"]


def test_aliases_count_as_one_keyword_and_the_reason_names_the_alias_found() -> None:
    papers = [
        paper(1, "Scaling MoE models", "A mixture of experts with a MoE router."),
        paper(2, "Scaling dense models", "Mixture of experts baselines are compared."),
        paper(3, "Unrelated"),
    ]
    ranker = rank(papers, topic(keywords=[["MoE", "mixture of experts"]]))
    assert keys(ranker) == ["2611.00001", "2611.00002"]
    assert ranker.ranked["t"][0].reason == "title: MoE"
    assert ranker.ranked["t"][1].reason == "abstract: mixture of experts"
    # one group: its IDF is the document frequency of "any alias"
    df = 2
    assert ranker.index.idf[0] == pytest.approx(math.log(1 + (3 - df + 0.5) / (df + 0.5)))


def test_title_counts_more_than_abstract() -> None:
    papers = [
        paper(1, "Speculative decoding for everyone", FILLER),
        paper(2, "A study of everyone", "Speculative decoding. " + FILLER),
    ]
    assert keys(rank(papers, topic(keywords=["speculative decoding"]))) == [
        "2611.00001",
        "2611.00002",
    ]


def test_relevance_is_bm25f_with_textbook_constants() -> None:
    papers = [
        paper(1, "Routing tokens", "routing routing experts"),
        paper(2, "Dense models", "experts"),
        paper(3, "Other", "nothing here at all"),
    ]
    ranker = rank(papers, topic(keywords=["routing"]))
    lt = [len(tokenize(p.title)) for p in papers]
    la = [len(tokenize(p.abstract)) for p in papers]
    avg_t, avg_a = sum(lt) / 3, sum(la) / 3
    tf = TITLE_WEIGHT * 1 / (1 - B + B * lt[0] / avg_t) + ABSTRACT_WEIGHT * 2 / (
        1 - B + B * la[0] / avg_a
    )
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    expected = idf * tf * (K1 + 1) / (tf + K1)
    assert ranker.explain(ranker.ranked["t"][0]).relevance == pytest.approx(expected)
    assert ranker.ranked["t"][0].score == pytest.approx(
        expected * recency_factor(papers[0], NOW), abs=1e-6
    )


# ---------------------------------------------------------------------------- topic rules


def test_all_requires_each_entry_and_exclude_removes() -> None:
    papers = [
        paper(1, "MoE inference on GPUs"),
        paper(2, "MoE training"),
        paper(3, "MoE inference: a survey"),
        paper(4, "Mixture of experts inference overview", "A Survey of methods."),
    ]
    t = topic(keywords=[["MoE", "mixture of experts"]], all=["inference"], exclude=["survey"])
    assert keys(rank(papers, t)) == ["2611.00001"]


def test_exclude_takes_aliases() -> None:
    papers = [paper(1, "LLM serving"), paper(2, "LLM serving review", "A literature review.")]
    t = topic(keywords=["LLM serving"], exclude=[["survey", "literature review"]])
    assert keys(rank(papers, t)) == ["2611.00001"]


def test_categories_filter_and_cross_lists_count() -> None:
    papers = [
        paper(1, "LLM serving at scale", categories=("cs.LG", "cs.DC")),  # cross-listed
        paper(2, "LLM serving on phones", categories=("cs.CL",)),
        paper(3, "LLM serving blog post", categories=()),  # unknown categories: kept
    ]
    t = topic(keywords=["LLM serving"], categories=["cs.DC"])
    ranker = rank(papers, t)
    assert sorted(keys(ranker)) == ["2611.00001", "2611.00003"]
    assert "cs.DC" in {i.paper.key: i.reason for i in ranker.ranked["t"]}["2611.00001"]


def test_a_topic_of_categories_only_takes_everything_in_them_by_trend() -> None:
    papers = [
        paper(1, "Anything", categories=("cs.DC",), upvotes=3),
        paper(2, "Something else", categories=("cs.LG", "cs.DC"), upvotes=40),
        paper(3, "Not here", categories=("cs.CV",), upvotes=500),
        paper(4, "Unknown", categories=(), upvotes=500),
    ]
    ranker = rank(papers, topic(categories=["cs.DC"]))
    assert keys(ranker) == ["2611.00002", "2611.00001"]
    assert ranker.ranked["t"][0].reason == "cs.DC · 40 upvotes"


def test_followed_authors_match_without_keywords_and_ignore_case_and_accents() -> None:
    papers = [
        paper(1, "On something", authors=("Jürgen Müller", "Li Ming")),
        paper(2, "On caches", authors=("B. Other",)),
    ]
    ranker = rank(papers, topic(authors=["jurgen muller"]))
    assert keys(ranker) == ["2611.00001"]
    assert ranker.ranked["t"][0].reason == "by Jürgen Müller"
    assert ranker.explain(ranker.ranked["t"][0]).relevance == AUTHOR_SCORE


def test_min_score_applies_to_relevance_not_to_hype() -> None:
    papers = [
        paper(1, "KV cache compression", "KV cache KV cache."),
        paper(2, "Serving", "We mention the KV cache once.", upvotes=5000),
        paper(3, "Other"),
    ]
    loose = rank(papers, topic(keywords=["KV cache"]))
    assert set(keys(loose)) == {"2611.00001", "2611.00002"}
    rel = [loose.explain(i).relevance for i in loose.ranked["t"]]
    floor = (max(rel) + min(rel)) / 2
    strict = rank(papers, topic(keywords=["KV cache"], min_score=floor))
    assert keys(strict) == ["2611.00001"]


# ---------------------------------------------------------------------------- trending


def test_trending_lifts_relevant_papers_and_never_rescues_others() -> None:
    papers = [
        paper(1, "Speculative decoding with drafts"),
        paper(2, "Speculative decoding with trees", upvotes=120, comments=9),
        paper(3, "Protein folding", upvotes=100_000, upvote_velocity=500.0),
    ]
    ranker = rank(papers, topic(keywords=["speculative decoding"]))
    assert keys(ranker) == ["2611.00002", "2611.00001"]
    assert ranker.ranked["t"][0].reason.endswith("120 upvotes")


def test_upvote_velocity_and_sources_count() -> None:
    base = paper(1, "x")
    assert trend_factor(base) == 1.0
    assert trend_factor(paper(1, "x", upvote_velocity=12.0)) > 1.0
    # Two extra sources give a signal of 1: TREND_LIFT · (1 - e^(-1/TREND_SCALE)).
    assert trend_factor(paper(1, "x", sources=("a", "b", "c"))) == pytest.approx(
        1 + TREND_LIFT * (1 - math.exp(-1 / TREND_SCALE))
    )
    # However hyped, the lift saturates below 1 + TREND_LIFT.
    hyped = paper(1, "x", upvotes=10**6, comments=10**5, upvote_velocity=10**4.0)
    assert 1 + TREND_LIFT * 0.99 < trend_factor(hyped) < 1 + TREND_LIFT
    fast = paper(2, "Speculative decoding", upvotes=10, upvote_velocity=30.0)
    ranker = rank([fast], topic(keywords=["speculative decoding"]))
    assert ranker.ranked["t"][0].reason == "title: speculative decoding · 10 upvotes · +30/h"


def test_recency_decays_with_a_three_day_half_life() -> None:
    assert recency_factor(paper(1, "x", age=timedelta(0)), NOW) == 1.0
    half = 1 - AGE_DROP / 2
    assert recency_factor(paper(1, "x", age=timedelta(days=3)), NOW) == pytest.approx(half)
    assert recency_factor(paper(1, "x", age=timedelta(days=300)), NOW) == pytest.approx(
        1 - AGE_DROP
    )
    assert recency_factor(paper(1, "x", age=-timedelta(days=1)), NOW) == 1.0  # future: not > 1
    papers = [
        paper(1, "Speculative decoding", age=timedelta(days=4)),
        paper(2, "Speculative decoding", age=timedelta(hours=2)),
    ]
    assert keys(rank(papers, topic(keywords=["speculative decoding"]))) == [
        "2611.00002",
        "2611.00001",
    ]


def test_equal_scores_break_ties_by_paper_key() -> None:
    papers = [paper(i, "Speculative decoding") for i in (5, 3, 4)]
    assert keys(rank(papers, topic(keywords=["speculative decoding"]))) == [
        "2611.00003",
        "2611.00004",
        "2611.00005",
    ]


# ---------------------------------------------------------------------------- digests


def two_topics() -> Ranker:
    papers = [
        paper(1, "MoE inference kernels"),
        paper(2, "MoE routing", upvotes=10),
        paper(3, "CUDA kernels for attention"),
        paper(4, "CUDA kernels and MoE kernels", "MoE MoE"),
    ]
    return Ranker(
        [topic("moe", keywords=["MoE"]), topic("kernels", keywords=["CUDA", "kernels"])],
        papers,
        NOW,
    )


def test_grouped_digest_never_lists_a_paper_twice_and_puts_it_where_it_fits_best() -> None:
    ranker = two_topics()
    sections = ranker.sections(["moe", "kernels"], max_items=10)
    listed = [i.paper.id for s in sections for i in s.items]
    assert len(listed) == len(set(listed)) == 4
    by_topic = {s.name: [i.paper.id for i in s.items] for s in sections}
    scores = {(i.topic, i.paper.id): i.score for n in ("moe", "kernels") for i in ranker.ranked[n]}
    for name, ids in by_topic.items():
        for pid in ids:
            other = "kernels" if name == "moe" else "moe"
            assert scores[(name, pid)] >= scores.get((other, pid), 0.0)


def test_merged_digest_and_limits_and_already_sent() -> None:
    ranker = two_topics()
    merged = ranker.sections(["moe", "kernels"], max_items=3, group_by_topic=False)
    assert len(merged) == 1 and len(merged[0].items) == 3
    assert [i.score for i in merged[0].items] == sorted(
        (i.score for i in merged[0].items), reverse=True
    )
    sent = {merged[0].items[0].paper.id}
    again = ranker.sections(["moe", "kernels"], exclude_ids=sent, max_items=10)
    assert sent.isdisjoint(i.paper.id for s in again for i in s.items)
    capped = ranker.sections(["kernels"], max_items=1)
    assert len(capped[0].items) == 1
    assert ranker.sections(["nope"], max_items=5) == ()


def test_topic_max_items_caps_its_section() -> None:
    papers = [paper(i, f"MoE paper {i}") for i in range(1, 6)]
    ranker = Ranker([topic("moe", keywords=["MoE"], max_items=2)], papers, NOW)
    assert len(ranker.sections(["moe"], max_items=10)[0].items) == 2
    merged = ranker.sections(["moe"], max_items=10, group_by_topic=False)
    assert len(merged[0].items) == 2


# ---------------------------------------------------------------------------- vectorized scorer


def reference_scores(rules: list[Rule], papers: list[Paper]) -> np.ndarray:
    """The scores computed the slow, obvious way: per row, per paper, per keyword."""
    from newsletter.rank import BAG_TF, author_key, phrase_terms, recency_factor, trend_factor
    from newsletter.text import read_defined

    toks = [tuple(read_defined(p.title, p.abstract)[0]) for p in papers]

    def count(seq: list[str], phrase: tuple[str, ...], *, title: bool = False) -> float:
        n = len(phrase)
        found = sum(tuple(seq[i : i + n]) == phrase for i in range(len(seq) - n + 1))
        if not found and title and n > 1 and set(phrase) <= set(seq):
            return BAG_TF  # every word of the phrase in the title, out of order
        return found

    def group_tf(aliases: tuple[str, ...], j: int) -> tuple[float, float]:
        terms = {t for a in aliases for t in phrase_terms(a)}
        return (
            sum(count(toks[j][0], t, title=True) for t in terms),
            sum(count(toks[j][1], t) for t in terms),
        )

    def evidence(aliases: tuple[str, ...], j: int) -> int:
        """1 for a passing mention (one word once, in the abstract only), 2 for more."""
        tt, ta = group_tf(aliases, j)
        if not tt and not ta:
            return 0
        terms = {t for a in aliases for t in phrase_terms(a)}
        phrase = any(len(t) > 1 and count(toks[j][1], t) for t in terms)
        return 2 if tt or ta >= 2 or phrase else 1

    n = len(papers)
    avg_t = max(1.0, sum(len(t) for t, _ in toks) / n)
    avg_a = max(1.0, sum(len(a) for _, a in toks) / n)

    def bm25(aliases: tuple[str, ...], j: int) -> float:
        df = sum(1 for k in range(n) if any(group_tf(aliases, k)))
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        tt, ta = group_tf(aliases, j)
        tf = TITLE_WEIGHT * tt / (1 - B + B * len(toks[j][0]) / avg_t) + ABSTRACT_WEIGHT * ta / (
            1 - B + B * len(toks[j][1]) / avg_a
        )
        return idf * tf * (K1 + 1) / (tf + K1) if tf else 0.0

    out = np.zeros((len(rules), n))
    for r, rule in enumerate(rules):
        for j, p in enumerate(papers):
            # One group per distinct set of terms, however the aliases were written or ordered.
            groups = {
                frozenset(t for a in g for t in phrase_terms(a)): g
                for g in (*rule.keywords, *rule.required)
            }
            rel = sum(bm25(g, j) for g in groups.values())
            if sum(evidence(g, j) for g in groups.values()) < 2:
                rel = 0.0  # a single passing mention is no match
            rel += AUTHOR_SCORE * sum(
                author_key(a) in {author_key(x) for x in rule.authors} for a in p.authors
            )
            cats = {c.casefold() for c in p.categories}
            in_cat = any(c.casefold() in cats for c in rule.categories)
            if not rule.keywords and not rule.required and in_cat:
                rel += 1.0
            if rule.categories and p.categories and not in_cat:
                continue
            if any(not any(group_tf(g, j)) for g in rule.required):
                continue
            if any(any(group_tf(g, j)) for g in rule.exclude):
                continue
            if rel <= 0 or rel < rule.min_score - 1e-9:
                continue
            out[r, j] = rel * trend_factor(p) * recency_factor(p, NOW)
    return out


WORDS = [
    "GPU", "CUDA", "kernels", "NeRF", "LLM", "inference", "serving", "training", "MoE",
    "mixture of experts", "pipeline parallelism", "neural radiance fields", "GEMM", "sparsity",
    "quantization", "GNN", "large language models", "novel view synthesis", "reinforcement learning",
    "cuBLAS", "throughput", "memory", "rendering", "super-resolution", "nonexistent term",
]  # fmt: skip

group_st = st.lists(st.sampled_from(WORDS), min_size=1, max_size=2, unique=True).map(tuple)
rule_st = st.builds(
    Rule,
    keywords=st.lists(group_st, max_size=4).map(tuple),
    required=st.lists(group_st, max_size=1).map(tuple),
    exclude=st.lists(group_st, max_size=1).map(tuple),
    categories=st.lists(st.sampled_from(["cs.DC", "cs.LG", "stat.ML"]), max_size=1).map(tuple),
    min_score=st.sampled_from([0.0, 0.0, 1.5]),
)


@pytest.fixture(scope="module")
def real_papers() -> list[Paper]:
    return load_papers()


@settings(max_examples=25, deadline=None)
@given(rules=st.lists(rule_st, min_size=1, max_size=6))
# The same alias set written in two orders, as a keyword and as a required term, is one group.
@example(rules=[Rule(keywords=(("GPU", "CUDA"),), required=(("CUDA", "GPU"),))])
def test_vectorized_scores_equal_the_obvious_loop(rules: list[Rule]) -> None:
    papers = load_papers()[:20]
    q = compile_rules(rules)
    index = PaperIndex(papers, q.vocab, NOW)
    np.testing.assert_allclose(score_all(q, index, block=4), reference_scores(rules, papers))


def test_top_n_in_blocks_matches_a_full_sort(real_papers: list[Paper]) -> None:
    rng = np.random.default_rng(7)
    rules = [
        Rule(
            keywords=tuple((w,) for w in rng.choice(WORDS, size=rng.integers(3, 8), replace=False))
        )
        for _ in range(57)
    ]
    q = compile_rules(rules)
    index = PaperIndex(real_papers, q.vocab, NOW)
    full = score_all(q, index)
    sent = sp.random(57, len(real_papers), density=0.05, random_state=3, format="csr")
    full[sent.nonzero()] = 0
    got = top_n(q, index, 10, block=8, exclude=sent, threads=3)
    serial = top_n(q, index, 10, block=8, exclude=sent, threads=1)
    assert np.array_equal(got.ids, serial.ids) and np.array_equal(got.scores, serial.scores)
    for r in range(57):
        expected = [j for j in np.lexsort((np.arange(full.shape[1]), -full[r])) if full[r, j] > 0]
        ids = [int(j) for j in got.ids[r] if j >= 0]
        assert ids == expected[:10]
        np.testing.assert_allclose(got.scores[r][: len(ids)], full[r, ids])


def test_top_n_breaks_ties_at_the_cut_by_paper_order() -> None:
    papers = [paper(i, "Speculative decoding") for i in range(1, 8)]
    q = compile_rules([Rule(keywords=(("speculative decoding",),))])
    result = top_n(q, PaperIndex(papers, q.vocab, NOW), 3)
    assert result.ids.tolist() == [[0, 1, 2]]


def test_scoring_with_no_papers_or_no_keywords_is_empty() -> None:
    empty = Ranker([topic(keywords=["MoE"])], [], NOW)
    assert empty.ranked["t"] == () and empty.sections(["t"]) == (
        empty.sections(["t"])[0].__class__("t", "T", (), 10),
    )
    counts = Counter(tokenize("a b a"))
    assert counts["a"] == 2


def test_a_phrase_at_the_end_of_a_text_counts_once() -> None:
    """Regression: a longer phrase's slice, cut off at the end, matched a shorter phrase again."""
    rules = [Rule(keywords=(("high performance",), ("high performance computing",)))]
    q = compile_rules(rules)
    index = PaperIndex([paper(1, "Fast", "We need high performance")], q.vocab, NOW)
    assert index.abstract_tf.sum() == 1


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    cols=st.sampled_from([5, 79, 80, 81, 333, 2000]),
    levels=st.sampled_from([2, 5, 1000]),
    n=st.sampled_from([1, 3, 10]),
)
def test_top_rows_equals_a_full_sort_with_ties_and_zeros(
    seed: int, cols: int, levels: int, n: int
) -> None:
    """The bounded candidate pick is exact: same ids and scores as sorting every column."""
    rng = np.random.default_rng(seed)
    # Few distinct levels make ties at the cut common; about half the scores are 0 (no match).
    scores = rng.integers(0, levels, size=(37, cols)) * rng.integers(0, 2, size=(37, cols)) / 7
    scores[0] = 0.0  # a row with no match at all
    ids, vals = _top_rows(scores, n)
    for r in range(scores.shape[0]):
        order = [j for j in np.lexsort((np.arange(cols), -scores[r])) if scores[r, j] > 0][:n]
        assert [int(j) for j in ids[r] if j >= 0] == order
        assert vals[r][: len(order)].tolist() == scores[r, order].tolist()
        assert (ids[r][len(order) :] == -1).all()


def sections_by_full_sort(
    ranker: Ranker, names: list[str], exclude: set[int], max_items: int, grouped: bool
) -> list[tuple[str, list[str]]]:
    """The obvious way: sort every matching item of every topic, then fill the topics."""
    names = [n for n in dict.fromkeys(names) if n in ranker.topics]
    pool = sorted(
        (
            (item, k)
            for k, n in enumerate(names)
            for item in ranker.ranked[n]
            if item.paper.id not in exclude
        ),
        key=lambda e: (-e[0].score, e[0].paper.key, e[1]),
    )
    limits = {n: ranker.topics[n].max_items or max_items for n in names}
    chosen: dict[str, list[Any]] = {n: [] for n in names}
    taken: set[int] = set()
    total = 0
    for item, _ in pool:
        if item.paper.id in taken or len(chosen[item.topic]) >= limits[item.topic]:
            continue
        if not grouped and total >= max_items:
            break
        taken.add(item.paper.id)
        chosen[item.topic].append(item)
        total += 1
    if grouped:
        return [(n, [i.paper.key for i in chosen[n]]) for n in names]
    merged = sorted((i for n in names for i in chosen[n]), key=lambda i: (-i.score, i.paper.key))
    return [("all", [i.paper.key for i in merged])]


@settings(max_examples=40, deadline=None)
@given(
    picks=st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4),
    exclude_every=st.sampled_from([0, 2, 3, 7]),
    max_items=st.integers(1, 12),
    grouped=st.booleans(),
)
def test_sections_merge_equals_a_full_sort(
    picks: list[str], exclude_every: int, max_items: int, grouped: bool
) -> None:
    # One ranker for every example: its sections cache is hit by earlier picks with other
    # exclusions and limits, and must still give what a full sort gives.
    ranker, real_papers = _shared_ranker()
    exclude = {p.id for p in real_papers[::exclude_every]} if exclude_every else set()
    exclude |= {10**9, -1}  # ids no topic can offer change nothing
    for _ in range(2):  # the second call is served from the cache
        got = ranker.sections(
            picks, exclude_ids=exclude, max_items=max_items, group_by_topic=grouped
        )
        assert [(s.name, [i.paper.key for i in s.items]) for s in got] == sections_by_full_sort(
            ranker, picks, exclude, max_items, grouped
        )


@functools.lru_cache(maxsize=1)
def _shared_ranker() -> tuple[Ranker, list[Any]]:
    real_papers = load_papers()
    topics = [
        topic("a", keywords=["GPU", "inference"]),
        topic("b", keywords=["language model", "serving"], max_items=3),
        topic("c", keywords=["training", "GPU"]),
        topic("d", categories=["cs.LG"]),
    ]
    return Ranker(topics, real_papers, NOW), real_papers
