"""Readers' own topics with semantic ranking: blocks of rows ranked, only their lists kept.

:func:`~newsletter.rank.score.rank_rows` gives every topics × papers array a topic has (its
keyword relevance, filters, what meaning adds, the candidates), dense, which suits the
operator's tens of topics. A run may also hold tens of thousands of readers' own topics
(issue 45), each a sentence's content words as keywords and its vector as the query, with no
``all``, ``exclude``, categories or authors, each read by one reader, once.

For those, :func:`rank_own_block` makes the same fusion as ``rank_rows`` for readers' own
topics (no pseudo-relevance feedback), in float32 and with fewer passes over memory: keyword
sums as one small dense matrix product, each row's median and spread by one selection each
(:func:`robust_centre`), the strong matches on meaning from one comparison, and what meaning
adds folded into the keyword units in place. It keeps only what a digest reads: each row's
list (its positive scores) and what meaning adds to those papers, as sparse rows, plus each
row's scale, best and ``left_out``. A reader's votes, or an explanation of a paper outside the
list, ask for the whole row, which the same function makes again for that row (``full``,
:class:`OwnDetail`). ``tests/rank/test_own_rows.py`` holds them to each other and to
``rank_rows``.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from newsletter.rank.index import PaperIndex
from newsletter.rank.rows import Rows
from newsletter.rank.rules import Queries
from newsletter.rank.score import MIN_EVIDENCE, RELATIVE_CUT, Fusion, RankedRows
from newsletter.semantic.space import MIN_PAPERS, MeaningSpace

IntArray = npt.NDArray[np.int64]
DETAIL_CACHE = 64
"""Own topics' whole rows kept once made again (a reader's topics, a few at a time)."""


def plain_rows(queries: Queries, sl: slice) -> bool:
    """Whether rows ``sl`` only have keywords (and ``min_score``): no ``all``, ``exclude``,
    category or author, so every paper passes their filters (what :func:`rank_own_block`
    handles)."""
    return not (
        queries.exclude[sl].nnz
        or queries.required[sl].nnz
        or queries.categories[sl].nnz
        or queries.authors[sl].nnz
    )


def _strong(
    similarity: npt.NDArray[np.float32],
    median: npt.NDArray[np.float32],
    spread: npt.NDArray[np.float32],
    anchors: npt.NDArray[np.float64],
    fusion: Fusion,
) -> tuple[IntArray, IntArray]:
    """The (row, paper) pairs ``meaning_parts`` admits on meaning: ``strong_z`` robust
    deviations above the row's median, at least its anchor, and among its ``dense_k`` most
    similar (ties included). Strong papers are the most similar of their row, so the
    ``dense_k`` most similar strong ones are the row's ``dense_k`` most similar, as there."""
    m, n = similarity.shape
    live = (spread[:, 0] > 1e-9) & (anchors < np.inf)
    bar = median + np.float32(fusion.strong_z * 0.999) * spread  # a little below, then exactly
    bar[~live] = np.inf
    flat = np.flatnonzero(similarity >= bar)
    rows, cols = flat // n, flat % n
    s = similarity.ravel()[flat]
    deviations = (s - median[rows, 0]) / np.maximum(spread[rows, 0], 1e-9)
    keep = (deviations >= fusion.strong_z) & (s >= anchors[rows])
    rows, cols, s = rows[keep], cols[keep], s[keep]
    order = np.lexsort((-s, rows))
    rows, cols, s = rows[order], cols[order], s[order]
    starts = np.searchsorted(rows, np.arange(m))
    k = min(fusion.dense_k, n)
    counts = np.bincount(rows, minlength=m)
    kth = np.full(m, -np.inf, dtype=np.float32)
    full = counts > k
    kth[full] = s[starts[full] + k - 1]
    take = s >= kth[rows]
    return rows[take], cols[take]


def _keyword_parts(
    scoring: sp.csr_matrix, index: PaperIndex
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Each row's BM25F keyword relevance and evidence points per paper, in float32: a sparse
    × dense product (a row names a few groups; a dense product over all the block's groups,
    BLAS, did 10 to 100 times the work and was slower from 60 groups on). With many groups
    the index keeps them sparse, and the block takes the rows of the groups it uses."""
    weights, points = index.groups_t
    rows = scoring.astype(np.float32)
    if sp.issparse(weights):
        used, local = np.unique(rows.indices, return_inverse=True)
        rows = sp.csr_matrix(
            (rows.data, local.reshape(-1), rows.indptr), shape=(rows.shape[0], len(used))
        )
        weights, points = weights[used].toarray(), points[used].toarray()
    return np.asarray(rows @ weights, dtype=np.float32), np.asarray(rows @ points, np.float32)


def rank_own_block(
    queries: Queries,
    index: PaperIndex,
    rows: Sequence[Any],
    sl: slice,
    meaning: MeaningSpace,
    fusion: Fusion,
    *,
    full: bool = False,
) -> RankedRows:
    """:func:`~newsletter.rank.score.rank_rows` for plain rows (:func:`plain_rows`) with
    semantic ranking, in float32 and without pseudo-relevance feedback. It keeps ``scores``
    and ``meant`` on the papers each row shows (sparse), or with ``full`` every array of
    ``rank_rows`` (dense: one reader's row, made again)."""
    n = index.n_papers
    m = len(rows)
    boost = np.maximum(index.boost, 1e-12)
    # Keyword relevance (BM25F, in float32) of the groups these rows use, with the evidence
    # rule: score_rows for rows without filters, in relevance units.
    keyword, points = _keyword_parts(queries.scoring[sl], index)
    passing = np.count_nonzero(points == 1, axis=1)
    keyword *= points >= MIN_EVIDENCE
    del points
    floors = queries.min_score[sl].astype(np.float32)[:, None]
    if floors.any():
        keyword *= keyword >= floors - 1e-9
    admitted = keyword > 0  # keyword matches (every paper passes these rows' filters)
    best = keyword.max(axis=1, keepdims=True) if n else keyword[:, :1]
    scale = np.where(best > 0, best, 1.0).astype(np.float32)
    lexical = keyword.copy() if full else None
    # Meaning: the day's median and spread per row, and the strong matches (meaning_parts).
    similarity = meaning.rows_similarity(sl)
    if similarity.base is not None:  # a view of the space's own rows: not to be changed
        similarity = similarity.copy()
    median, spread = robust_centre(similarity)
    if n >= MIN_PAPERS and fusion.dense_k > 0:
        anchors = np.full(m, -np.inf)
        if fusion.anchored:
            for r in np.flatnonzero(best[:, 0] <= 0):
                liked = meaning.like_similarity((sl.start or 0) + int(r))
                anchors[r] = float(np.median(liked)) if len(liked) else np.inf
        s_rows, s_cols = _strong(similarity, median, spread, anchors, fusion)
        admitted[s_rows, s_cols] = True
    # fuse_all, one round: alpha · keyword / best + (1 − alpha) · share, in keyword units.
    a = fusion.alpha
    meant = similarity  # (1 − alpha) · share · scale, in place
    meant -= median
    meant *= ((1.0 - a) * scale / np.maximum(1.0 - median, 1e-6)).astype(np.float32)
    np.maximum(meant, 0.0, out=meant)
    np.minimum(meant, ((1.0 - a) * scale).astype(np.float32), out=meant)
    relevance = keyword  # in place
    relevance *= np.float32(a)
    relevance += meant
    relevance *= admitted
    if floors.any():
        keep = relevance >= floors - 1e-9
        relevance *= keep
        admitted &= keep
    # rank_rows: the relative cut against each row's best, then trending and age.
    top = relevance.max(axis=1) if n else np.zeros(m, dtype=np.float32)
    cut = np.where(top > 0, RELATIVE_CUT * top - 1e-9, np.inf).astype(np.float32)
    shown = relevance >= cut[:, None]
    n_shown = np.count_nonzero(shown, axis=1)
    left_out = np.count_nonzero(relevance, axis=1) - n_shown + passing
    scale_out = [float(b) for b in scale[:, 0]]
    best_out = top.astype(np.float64).tolist()
    if full:
        arrays = {
            "scores": relevance * shown * boost,
            "relevance": relevance,
            "lexical": lexical,
            "passes": np.ones((m, n), dtype=bool),
            "meant": meant * admitted,
            "admitted": admitted,
        }
        return RankedRows(arrays, scale_out, best_out, left_out.tolist(), {})
    flat = np.flatnonzero(shown)
    out_cols = flat % n
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(n_shown, out=indptr[1:])
    cols32 = out_cols.astype(np.int32)
    arrays = {
        "scores": sp.csr_matrix(
            (relevance.ravel()[flat] * boost[out_cols], cols32, indptr), shape=(m, n)
        ),
        "meant": sp.csr_matrix((meant.ravel()[flat], cols32, indptr), shape=(m, n)),
    }
    return RankedRows(arrays, scale_out, best_out, left_out.tolist(), {})


CENTRE_SAMPLE = 511
"""At most this many papers (an even sample of the day's) give an own topic's median
similarity and spread: an odd number, so each is one selection (``np.partition`` at one
place, several times faster than at the two middle places ``np.median`` of an even count
needs)."""


def robust_centre(
    similarity: npt.NDArray[np.float32],
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Each row's median similarity and robust spread (1.4826 × the median absolute
    deviation, Leys et al. 2013) in float32: the statistics of
    :func:`~newsletter.rank.score.meaning_parts`, for thousands of rows. Over an even sample
    of ``CENTRE_SAMPLE`` papers; of an even number of papers, the lower median."""
    n = similarity.shape[1]
    sample = similarity if n <= CENTRE_SAMPLE else similarity[:, :: -(-n // CENTRE_SAMPLE)]
    k = (sample.shape[1] - 1) // 2
    median = np.partition(sample, k, axis=1)[:, k : k + 1]
    deviation = np.abs(sample - median)
    spread = np.float32(1.4826) * np.partition(deviation, k, axis=1)[:, k : k + 1]
    return median.astype(np.float32), spread.astype(np.float32)


class OwnDetail:
    """Readers' own topics' whole rows (every array :func:`rank_rows` gives), made again one
    row at a time by ``make`` when asked (a reader's votes, an explanation of a paper outside
    the topic's list), the last ``DETAIL_CACHE`` kept."""

    def __init__(self, make: Callable[[int], dict[str, Any]]) -> None:
        self._make = make
        self._made: dict[int, dict[str, Any]] = {}

    def __call__(self, i: int, name: str) -> npt.NDArray[Any]:
        found = self._made.get(i)
        if found is None:
            if len(self._made) >= DETAIL_CACHE:
                self._made.pop(next(iter(self._made)))
            found = self._made[i] = self._make(i)
        row: npt.NDArray[Any] = found[name][0]
        return row


P = ParamSpec("P")
T = TypeVar("T")


def collection_paused(f: Callable[P, T]) -> Callable[P, T]:
    """``f`` with Python's cyclic garbage collector paused: building a ranker for tens of
    thousands of readers' own topics makes hundreds of thousands of objects that live as long
    as it does, and a full collection in the middle (every object of the process scanned) cost
    0.4 s of a 3 s build for nothing; a ranker makes no reference cycles of its own."""

    @functools.wraps(f)
    def paused(*args: P.args, **kwargs: P.kwargs) -> T:
        was = gc.isenabled()
        gc.disable()
        try:
            return f(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return paused


def _blas_limits() -> Any:
    """threadpoolctl's ``threadpool_limits`` (the ``semantic`` extra installs it), or None."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return threadpool_limits


def ranked_blocks(
    slices: Sequence[slice],
    rank: Callable[[slice], RankedRows],
    record: Callable[[slice, RankedRows], dict[str, Any]],
    *,
    threads: int,
) -> tuple[Iterator[dict[str, Any]], Callable[[], None] | None]:
    """Each block ``rank``-ed, then ``record``-ed in order, and what stops early the threads
    that rank them (None: nothing to stop).

    With ``threads`` above 1 (at most one per core; readers' own topics' plain rows, whose
    ranking needs nothing the caller builds meanwhile), the blocks are started at once on a
    pool, with BLAS on one thread per call (OpenBLAS's threads spin for a while after each call
    and would take the core another block needs); without threadpoolctl, or with one thread,
    each block is ranked when the iterator reaches it."""
    threads = min(threads, os.cpu_count() or 1, len(slices))
    limits = _blas_limits() if threads > 1 else None
    if limits is None:
        return (record(sl, rank(sl)) for sl in slices), None
    held = limits(limits=1, user_api="blas")
    pool = ThreadPoolExecutor(threads)
    futures = [pool.submit(rank, sl) for sl in slices]

    def stop() -> None:
        pool.shutdown(cancel_futures=True)
        held.restore_original_limits()

    def recorded() -> Iterator[dict[str, Any]]:
        try:
            for sl, future in zip(slices, futures, strict=True):
                yield record(sl, future.result())
        finally:
            stop()

    return recorded(), stop


def add_block(block: dict[str, Any], scores: Rows, *rest: Rows) -> None:
    """A block's arrays added to the ranker's rows: ``scores``, then relevance, lexical,
    passes, meant and admitted. A block of :func:`rank_own_block` holds only each row's list
    and what meaning adds to it: the others are partial, made again when asked."""
    relevance, lexical, passes, meant, admitted = rest
    scores.add(block["scores"])
    if "lexical" in block:
        for rows, name in zip(
            rest, ("relevance", "lexical", "passes", "meant", "admitted"), strict=True
        ):
            rows.add(block[name])
        return
    listed = block["scores"]
    meant.add(block["meant"], partial=True)
    shown = np.ones(listed.nnz, dtype=bool)
    admitted.add(
        sp.csr_matrix((shown, listed.indices, listed.indptr), shape=listed.shape), partial=True
    )
    nothing = sp.csr_matrix(listed.shape, dtype=np.float32)
    for rows in (relevance, lexical, passes):
        rows.add(nothing, partial=True)
