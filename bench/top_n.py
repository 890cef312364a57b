"""Top ``n`` papers for each of many rows (100,000 subscribers' keyword sets), for ``bench_rank``.

The service ranks the operator's topics (:class:`newsletter.rank.Ranker`); ranking each
subscriber's own keywords against the day's papers is what ``bench/bench_rank.py`` measures
to show the general scorer (:mod:`newsletter.rank.score`) scales: :func:`top_n` runs it in
blocks of rows on a few threads and keeps each row's best ``n`` without sorting every column
(:func:`_top_rows`), with a float32 first pass for rows of keywords only
(:func:`_keyword_top`). ``tests/rank/test_rank_fast.py`` checks it gives exactly the plain
scorer's result.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from newsletter.rank.index import PaperIndex
from newsletter.rank.profiles import ProfileRows
from newsletter.rank.rules import Queries
from newsletter.rank.score import MIN_EVIDENCE, as_dense, score_rows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TopN:
    """Per row, the best ``n`` papers (index into the run's papers; -1 = none) and their scores."""

    ids: npt.NDArray[np.int64]
    scores: FloatArray


RANGES_PER_PICK = 8
""":func:`_top_rows` cuts each row into this many column ranges per wanted paper."""


def _top_rows(
    scores: npt.NDArray[np.floating[Any]],
    n: int,
    *,
    exact: Any = None,
    slack: float = 0.0,
) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Each row's ``n`` best columns with a positive score, ordered by (score desc, column asc).

    Exact, without a per-row partition of every column (the slow part at 2,000 papers): each row
    is cut into up to ``8n`` column ranges, and the ``n``-th largest of the ranges' maxima is a
    lower bound of the row's ``n``-th largest score (``n`` different ranges each hold a value at
    least that large). Every score at or above the bound is a candidate, so the top ``n``, ties
    included, are among them; the candidates (a few dozen per row) are then sorted exactly.

    ``scores`` may be an approximation within a relative ``slack`` of the true scores (all
    non-negative, and zero exactly where the true score is): then the bound is lowered by the
    slack, so every true top-``n`` entry stays a candidate, and ``exact(rows, cols)`` gives the
    true float64 scores the candidates are sorted by.
    """
    rows, cols = scores.shape
    tiny = float(np.finfo(scores.dtype).smallest_subnormal)
    k = min(RANGES_PER_PICK * n, cols // 4)
    if k >= n:
        # Range ``i`` is every ``k``-th column from column ``i``: the maxima are then an
        # elementwise maximum of contiguous slices (fast), not ``k`` short reductions per row.
        maxima = scores[:, : k * (cols // k)].reshape(rows, cols // k, k).max(axis=1)
        bound = -np.partition(-maxima, n - 1, axis=1)[:, n - 1].astype(np.float64)
        bound = np.maximum(bound * (1.0 - 3.0 * slack), tiny)  # only positive scores match
        limit = bound.astype(scores.dtype)[:, None]
    else:
        limit = np.asarray(tiny, dtype=scores.dtype)
    # One comparison per cell and one scan of the mask: the candidates come out by row, then
    # column (cheaper than gathering the ranges that reach the bound).
    flat = np.flatnonzero(scores >= limit)
    r = flat // cols
    c = flat - r * cols
    v = np.asarray(scores.ravel()[flat], dtype=np.float64) if exact is None else exact(r, c)
    if exact is not None:
        keep = v > 0
        r, c, v = r[keep], c[keep], v[keep]
    # Each row's candidates side by side (a row × most-candidates table, ``-inf`` padded),
    # sorted by score descending per row; a stable sort keeps ties in column order.
    counts = np.bincount(r, minlength=rows)
    width = max(n, int(counts.max()) if rows else 0)
    pos = np.arange(len(r)) - np.repeat(np.cumsum(counts) - counts, counts)
    key = np.full((rows, width), np.inf)
    key[r, pos] = -v
    col = np.full((rows, width), -1, dtype=np.int64)
    col[r, pos] = c
    order = np.argsort(key, axis=1, kind="stable")[:, :n]
    vals = -np.take_along_axis(key, order, axis=1)
    ids = np.take_along_axis(col, order, axis=1)
    empty = np.isinf(vals)
    vals[empty] = 0.0
    return ids, vals


F32_ERROR = 2.0**-23
"""Twice float32's unit roundoff: the relative error bound per term of the float32 pass."""


def _keyword_top(
    q: Queries,
    index: PaperIndex,
    rows: IntArray,
    n: int,
    sent: sp.csr_matrix | None,
) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """The top ``n`` of rows that only have keywords (and exclusions): :func:`score_rows`
    followed by :func:`_top_rows`, with the same result, computed faster.

    The scores are first summed in float32 (half the bandwidth), where a row of ``k`` terms is
    within a relative ``(k + 1)·2⁻²⁴`` of its float64 sum (all terms are positive); the evidence
    points in int8. Filters zero entries exactly in both. Only the candidates of that pass are
    summed again in float64, term by term in the order the sparse product adds them, so their
    scores are bitwise those of the float64 path.
    """
    assert index.boosted32_t is not None and index.points8_t is not None
    scoring = q.scoring[rows]
    lengths = np.diff(scoring.indptr)
    most = int(lengths.max()) if len(lengths) else 0
    scores = np.asarray(scoring.astype(np.float32) @ index.boosted32_t, dtype=np.float32)
    if scoring.nnz:
        if 2 * most <= np.iinfo(np.int8).max:
            points = np.asarray(scoring.astype(np.int8) @ index.points8_t)
        else:
            points = as_dense(scoring.astype(np.float32) @ index.points_t)
        np.multiply(scores, points >= MIN_EVIDENCE, out=scores)
    exclude = q.exclude[rows]
    if exclude.nnz:
        hit = np.flatnonzero(np.diff(exclude.indptr))
        scores[hit] *= as_dense(exclude[hit] @ index.presence_t) == 0
    if sent is not None:
        gone = sent.tocoo()
        scores[gone.row, gone.col] = 0.0
    indptr, indices, data = scoring.indptr, scoring.indices, scoring.data
    weights = index.boosted_t.ravel()  # C order: cell (g, p) is at g * n_papers + p
    n_papers = index.n_papers

    def exact(r: IntArray, c: IntArray) -> FloatArray:
        # One (candidate, term) pair per term of the candidate's row, candidate by candidate
        # and in the row's term order; bincount adds its weights in that order, from 0.0.
        counts = lengths[r]
        owner = np.repeat(np.arange(len(r)), counts)
        offset = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
        jj = indptr[r][owner] + offset
        parts = data[jj] * weights[indices[jj] * n_papers + c[owner]]
        return np.bincount(owner, weights=parts, minlength=len(r)).astype(np.float64)

    return _top_rows(scores, n, exact=exact, slack=(most + 1) * F32_ERROR)


def top_n(
    q: Queries,
    index: PaperIndex,
    n: int,
    *,
    block: int = 1000,
    exclude: sp.csr_matrix | None = None,
    threads: int | None = None,
    profiles: ProfileRows | None = None,
) -> TopN:
    """Each row's best ``n`` papers, computed ``block`` rows at a time (bounded memory).

    ``exclude`` (rows × papers, nonzero = already sent) removes papers per row. Ties break by
    paper order, so the result is deterministic. Blocks run on ``threads`` threads (default: one
    per core, at most 4): the sparse products and sorts release the GIL, and each block writes
    its own rows, so the result does not depend on the thread count. ``profiles`` adds each
    row's Rocchio profile (readers' votes) to its relevance.

    Rows with only keywords (and exclusions) take a float32 pass whose candidates are re-summed
    in float64 (:func:`_keyword_top`); rows with votes, authors, categories, ``all`` entries or
    ``min_score`` take the float64 scorer. The result is the same either way (a property test
    compares them).
    """
    ids = np.full((q.n_rows, n), -1, dtype=np.int64)
    vals = np.zeros((q.n_rows, n))

    if profiles is not None:
        profiles.prepare()  # shared matrices, started now; the blocks with votes come last
    # Rows with only keywords (and exclusions) take the float32 pass; the rest (votes, authors,
    # categories, ``all`` entries, ``min_score``) the float64 scorer. Both give the same
    # result (``_keyword_top``). Each kind goes in blocks of its own, so a block of readers
    # with votes shares its products with the examples' cosines.
    if index.boosted32_t is None:
        special = np.ones(q.n_rows, dtype=bool)
    else:
        special = np.diff(q.authors.indptr) > 0
        special |= np.diff(q.categories.indptr) > 0
        special |= q.n_required > 0
        special |= q.min_score != 0
        if profiles is not None:
            special |= profiles.voters()
    tasks: list[tuple[IntArray, bool]] = []
    # The float64 scorer holds a few rows × papers float64 arrays per block: half as many rows.
    for rows, kind, size in (
        (np.flatnonzero(~special), True, block),
        (np.flatnonzero(special), False, max(1, block // 2)),
    ):
        tasks.extend((rows[i : i + size], kind) for i in range(0, len(rows), size))

    def run(task: tuple[IntArray, bool]) -> None:
        rows, plain = task
        if plain:
            sent = exclude[rows] if exclude is not None else None
            ids[rows], vals[rows] = _keyword_top(q, index, rows, n, sent)
            return
        extra = profiles.relevance_of(rows) if profiles is not None else None
        scores = score_rows(q, index, rows, extra)
        if exclude is not None:
            sent_coo = exclude[rows].tocoo()
            scores[sent_coo.row, sent_coo.col] = 0.0
        ids[rows], vals[rows] = _top_rows(scores, n)

    workers = min(threads or min(4, os.cpu_count() or 1), len(tasks))
    if workers <= 1:
        for task in tasks:
            run(task)
    else:
        with ThreadPoolExecutor(workers) as pool:
            for _ in pool.map(run, tasks):
                pass  # re-raises a block's error here
    return TopN(ids, vals)
