"""Scores: rows (topics, readers' keyword sets) against the paper index, the semantic fusion, and
a reader's relevance turned into scores.

How a paper scores for a row (``docs/topics.md`` says the same for operators):

* **Relevance** is BM25F (:mod:`newsletter.rank.index`) over two fields, title (weight 3) and
  abstract (weight 1), with the standard ``k1 = 1.2`` and ``b = 0.75``. Each keyword entry is one query term; its aliases
  (``[MoE, mixture of experts]``) count as one term (term frequencies add up, document frequency is
  that of any alias). Multi-word keywords match as phrases. Matching is on normalized tokens:
  case, accents, hyphens and possessives are ignored, words match whole (``NAS`` never matches
  "nasal"), inflections are joined by a light stemmer, acronyms match their long forms (a shipped
  list, and what the papers define). A title with every word of a phrase out of order counts
  half a mention. A followed author adds 3, and a topic without keywords gives 1 to every paper
  in its categories.
* **Evidence**: a match made of one single-word keyword, once, in the abstract only, is no
  match (``MIN_EVIDENCE``); for a topic, papers under ``RELATIVE_CUT`` (15 %) of its best
  relevance today are left out.
* **Filters**: every ``all`` entry must occur, no ``exclude`` entry may occur, and the paper must
  be in one of the ``categories`` when the topic lists some (papers with no known category, such
  as blog posts, are not filtered out). Relevance below ``min_score`` drops the paper.
* **Trending and age** multiply the relevance of papers that passed by at most ``1.25`` (upvotes,
  comments, upvotes per hour, extra sources, saturating) and at least ``0.9`` (age, half of it
  after 3 days), so a paper with 39 % more relevance always ranks first. A paper with zero
  relevance scores zero whatever its upvotes.
* **Meaning** (semantic ranking, :func:`fuse`): the similarity of sentence embeddings adds to a
  topic's keyword relevance and admits strong matches on meaning alone.

:func:`score_block` is the general scorer (any rows, in blocks); :func:`filter_masks`,
:func:`fuse` and :func:`reader_scores` are the parts the run's ranker
(:class:`~newsletter.rank.ranker.Ranker`) adds around it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from newsletter.rank.index import PaperIndex
from newsletter.rank.rules import Queries
from newsletter.semantic.space import MeaningSpace

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

AUTHOR_SCORE = 3.0
"""Relevance a followed author adds: about one strong title match."""
CATEGORY_SCORE = 1.0
"""Relevance of a paper in a keyword-less topic's categories."""
MIN_EVIDENCE = 2
"""A match needs more than one passing mention (see ``PaperIndex.evidence_t``)."""
RELATIVE_CUT = 0.15
"""A topic shows papers whose relevance is at least this share of its best paper's today."""


def as_dense(m: Any) -> FloatArray:
    """A sparse or dense product as a float64 array."""
    return np.asarray(m.toarray() if sp.issparse(m) else m, dtype=np.float64)


def score_block(
    q: Queries,
    index: PaperIndex,
    start: int,
    stop: int,
    extra: tuple[IntArray, FloatArray] | None = None,
) -> FloatArray:
    """Final scores (relevance × trending × recency, 0 = no match) for rows ``start:stop``.

    A keyword match counts only with enough evidence (``MIN_EVIDENCE``): one single word
    mentioned once in an abstract, and nothing else, is not a match. ``extra`` (some rows of
    the block, and their relevance per paper) is relevance from elsewhere (readers' profiles),
    added before the filters apply.
    """
    return score_rows(q, index, slice(start, stop), extra)


def score_rows(
    q: Queries,
    index: PaperIndex,
    sel: slice | IntArray,
    extra: tuple[IntArray, FloatArray] | None = None,
) -> FloatArray:
    """:func:`score_block` for the rows ``sel`` (a slice or row numbers); ``extra``'s rows
    count within the selection."""
    scoring = q.scoring[sel]
    scores = as_dense(scoring @ index.boosted_t)
    if scoring.nnz:
        points = scoring.astype(np.float32) @ index.points_t
        points = points.toarray() if sp.issparse(points) else points
        scores *= points >= MIN_EVIDENCE  # one passing mention and nothing else: no match
    if extra is not None:
        rows, values = extra
        if len(rows) == len(scores):  # every row (a block of readers with votes): in place
            scores += values * index.boost
        else:
            scores[rows] += values * index.boost
    authors = q.authors[sel]
    if authors.nnz:
        hits = as_dense(authors @ index.authors_t)
        scores += AUTHOR_SCORE * hits * index.boost
    cats = q.categories[sel]
    if cats.nnz:
        rows = np.flatnonzero(np.diff(cats.indptr))
        in_cat = as_dense(cats[rows] @ index.categories_t) > 0
        only = q.category_only[sel][rows]
        if only.any():
            scores[rows[only]] += CATEGORY_SCORE * in_cat[only] * index.boost
        scores[rows] *= in_cat | ~index.known_category
    required = q.n_required[sel]
    if required.any():
        rows = np.flatnonzero(required)
        found = as_dense(q.required[sel][rows] @ index.presence_t)
        scores[rows] *= found >= required[rows, None]
    exclude = q.exclude[sel]
    if exclude.nnz:
        rows = np.flatnonzero(np.diff(exclude.indptr))
        scores[rows] *= as_dense(exclude[rows] @ index.presence_t) == 0
    floor = q.min_score[sel]
    if floor.any():
        rows = np.flatnonzero(floor)
        relevance = scores[rows] / index.boost
        scores[rows] *= relevance >= floor[rows, None] - 1e-9
    return scores


def score_all(q: Queries, index: PaperIndex, *, block: int = 1000) -> FloatArray:
    """Every row's scores (rows × papers); for a few rows, such as the operator's topics."""
    out = np.zeros((q.n_rows, index.n_papers))
    for start in range(0, q.n_rows, block):
        stop = min(q.n_rows, start + block)
        out[start:stop] = score_block(q, index, start, stop)
    return out


def filter_masks(q: Queries, index: PaperIndex) -> BoolArray:
    """rows × papers: passes the row's ``all``, ``exclude`` and ``categories`` filters.

    What a profile or meaning adds to a paper's relevance obeys the same filters as keywords.
    """
    ok = np.ones((q.n_rows, index.n_papers), dtype=bool)
    if not index.n_papers:
        return ok
    if q.exclude.nnz:
        ok &= as_dense(q.exclude @ index.presence_t) == 0
    if q.required.nnz:
        ok &= as_dense(q.required @ index.presence_t) >= q.n_required[:, None]
    if q.categories.nnz:
        rows = np.flatnonzero(np.diff(q.categories.indptr))
        in_cat = as_dense(q.categories[rows] @ index.categories_t) > 0
        ok[rows] &= in_cat | ~index.known_category
    return ok


def fuse(
    relevance: FloatArray,
    passes: BoolArray,
    meaning: MeaningSpace,
    i: int,
    scale: float,
    min_score: float,
) -> tuple[FloatArray, FloatArray, BoolArray]:
    """Semantic ranking: topic ``i``'s keyword ``relevance`` (one row) plus what meaning adds,
    for the papers that match a keyword or are strong matches on meaning alone
    (:mod:`newsletter.semantic.space`); ``passes``: the topic's filters (:func:`filter_masks`).
    Returns (the fused relevance, what meaning adds, the papers admitted).

    What meaning adds is the paper's similarity's share of the way from the day's median
    to 1, times ``scale`` (the topic's best keyword relevance today): a convex combination
    (α = ½) of the two scores each normalised by its theoretical maximum (Bruch et al., "An
    analysis of fusion functions for hybrid retrieval", 2023), in the units the relative cut,
    ``min_score`` and trending already use.

    A paper without a keyword match is shown only when its similarity is an outlier of the
    day (:func:`~newsletter.semantic.space.evidence`) and at least that of the topic's
    typical keyword match today (the median over them), or without any, of its typical
    ``like:`` paper: "as close in meaning as what the keywords or examples found". A day
    without either admits nothing on meaning alone, so a quiet topic stays quiet.
    """
    ev = meaning.topic(i)
    matched = (relevance > 0) & passes
    known = ev.similarity[matched] if matched.any() else meaning.like_similarity(i)
    floor = float(np.median(known)) if len(known) else np.inf
    admitted = matched | (passes & ev.strong & (ev.similarity >= floor))
    part = scale * ev.part * admitted
    fused = (relevance + part) * admitted
    fused *= fused >= min_score - 1e-9
    return fused, part, admitted


def reader_scores(rel: FloatArray, min_score: float, boost: FloatArray) -> FloatArray | None:
    """A reader's relevance row (changed in place) as scores: ``min_score``, the relative
    cut against the reader's own best, then trending and age (``boost``), as the shared lists
    have them; None when nothing is left."""
    rel[rel < min_score - 1e-9] = 0.0
    best = float(rel.max()) if rel.size else 0.0
    if best <= 0:
        return None
    rel[rel < RELATIVE_CUT * best - 1e-9] = 0.0
    scores: FloatArray = np.round(rel * boost, 6)
    return scores
