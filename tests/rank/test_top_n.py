"""The fast paths of ``top_n`` (issue 17, "speed stays") give exactly the slow path's result.

Keyword-only rows are summed in float32 first and only that pass's candidates again in float64
(``_keyword_top``); ``_top_rows`` scans only the column ranges that can hold a winner, and with an
approximate matrix widens its bound by the approximation's slack. Each test compares against
the plain float64 scorer (``score_block``, with the readers' profiles) followed by a full sort,
on random rules, votes, already-sent papers and block sizes: same papers, bitwise the same
scores.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.top_n import _top_rows, top_n
from newsletter.models import Paper
from newsletter.rank import Documents, PaperIndex, Rule, compile_rules, score_block
from newsletter.rank.profiles import Preference, ProfileRows, ProfileSpace
from tests.rank.relevance.corpus import NOW, load_papers
from tests.rank.test_ranker import rule_st

# Keyword-only rules (the float32 pass) are the common case; rule_st mixes in the others.
plain_rule_st = st.builds(
    Rule,
    keywords=rule_st.map(lambda r: r.keywords),
    exclude=rule_st.map(lambda r: r.exclude),
)


@pytest.fixture(scope="module")
def corpus() -> tuple[list[Paper], list[Paper]]:
    papers = load_papers()
    # Earlier papers readers voted on: the same texts under other keys, half of them.
    examples = [
        replace(p, id=10_000 + p.id, key="old-" + p.key) for p in papers[: len(papers) // 2]
    ]
    return papers, examples


def full_sort(scores: np.ndarray, n: int) -> tuple[list[list[int]], list[list[float]]]:
    ids: list[list[int]] = []
    vals: list[list[float]] = []
    for row in scores:
        order = [int(j) for j in np.lexsort((np.arange(len(row)), -row)) if row[j] > 0][:n]
        ids.append(order)
        vals.append(row[order].tolist())
    return ids, vals


def slow_top(
    rules: list[Rule],
    papers: list[Paper],
    n: int,
    block: int,
    sent: sp.csr_matrix,
    profiles_of: dict[int, list[Preference]],
    examples: list[Paper],
) -> tuple[list[list[int]], list[list[float]]]:
    """The float64 scorer on every row, then a full sort: what ``top_n`` must equal."""
    q = compile_rules(rules)
    docs = Documents.read(papers)
    index = PaperIndex(papers, q.vocab, NOW, docs)
    rows = ProfileRows.build(ProfileSpace(docs, examples), len(rules), profiles_of, 2.0)
    scores = np.zeros((len(rules), len(papers)))
    for start in range(0, len(rules), block):
        stop = min(len(rules), start + block)
        scores[start:stop] = score_block(q, index, start, stop, rows.relevance(start, stop))
    scores[sent.nonzero()] = 0.0
    return full_sort(scores, n)


@settings(max_examples=30, deadline=None)
@given(
    rules=st.lists(st.one_of(plain_rule_st, plain_rule_st, rule_st), min_size=1, max_size=24),
    n=st.sampled_from([1, 3, 10]),
    block=st.sampled_from([1, 5, 64]),
    seed=st.integers(0, 2**32 - 1),
    voting=st.floats(0.0, 0.5),
)
def test_top_n_equals_the_float64_scorer_and_a_full_sort(
    corpus: tuple[list[Paper], list[Paper]],
    rules: list[Rule],
    n: int,
    block: int,
    seed: int,
    voting: float,
) -> None:
    papers, examples = corpus
    rng = np.random.default_rng(seed)
    profiles_of = {
        r: [
            Preference(examples[int(e)].key, int(rng.choice([1, 1, 1, -1])))
            for e in rng.choice(len(examples), size=int(rng.integers(1, 6)), replace=False)
        ]
        for r in range(len(rules))
        if rng.random() < voting
    }
    sent = sp.random(
        len(rules), len(papers), density=0.05, random_state=int(seed % 2**31), format="csr"
    )
    expected = slow_top(rules, papers, n, block, sent, profiles_of, examples)

    q = compile_rules(rules)
    docs = Documents.read(papers)
    index = PaperIndex(papers, q.vocab, NOW, docs)
    profiles = ProfileRows.build(ProfileSpace(docs, examples), len(rules), profiles_of, 2.0)
    got = top_n(q, index, n, block=block, exclude=sent, profiles=profiles, threads=2)
    ids = [[int(j) for j in row if j >= 0] for row in got.ids]
    vals = [got.scores[r][: len(ids[r])].tolist() for r in range(len(rules))]
    assert (ids, vals) == expected  # the same papers and bitwise the same scores


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    cols=st.sampled_from([5, 40, 81, 333, 2000]),
    levels=st.sampled_from([2, 5, 1000]),
    n=st.sampled_from([1, 3, 10]),
    terms=st.integers(1, 60),
)
def test_top_rows_on_an_approximation_within_its_slack_is_exact(
    seed: int, cols: int, levels: int, n: int, terms: int
) -> None:
    """The float32 pass's guarantee, adversarially: every score off by up to the slack, in the
    direction that hurts most, with many ties at the cut."""
    rng = np.random.default_rng(seed)
    true = rng.integers(0, levels, size=(23, cols)) * rng.integers(0, 2, size=(23, cols)) / 7
    true[0] = 0.0
    slack = (terms + 1) * 2.0**-23
    # Off by up to half the slack before rounding to float32 (which adds at most 2⁻²⁴).
    error = rng.choice([-1.0, 1.0, 0.0], size=true.shape) * slack / 2
    approx = (true * (1 + error)).astype(np.float32)

    def exact(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.asarray(true[r, c], dtype=np.float64)

    ids, vals = _top_rows(approx, n, exact=exact, slack=slack)
    expected = full_sort(true, n)
    assert [[int(j) for j in row if j >= 0] for row in ids] == expected[0]
    assert [vals[r][: len(expected[1][r])].tolist() for r in range(23)] == expected[1]
