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
* **Meaning** (semantic ranking, :func:`fuse_all`): the similarity of sentence embeddings adds to a
  topic's keyword relevance and admits strong matches on meaning alone.

:func:`score_block` is the general scorer (any rows, in blocks); :func:`filter_masks`,
:func:`fuse_all` and :func:`reader_scores` are the parts the run's ranker
(:class:`~newsletter.rank.ranker.Ranker`) adds around it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from newsletter.models import is_own_topic
from newsletter.rank.index import PaperIndex
from newsletter.rank.rules import Queries
from newsletter.semantic.space import MIN_PAPERS, STRONG_Z, MeaningSpace

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


def filter_masks(q: Queries, index: PaperIndex, sel: slice | None = None) -> BoolArray:
    """rows × papers (of the rows ``sel``, default all): passes the row's ``all``,
    ``exclude`` and ``categories`` filters.

    What a profile or meaning adds to a paper's relevance obeys the same filters as keywords.
    """
    sel = slice(0, q.n_rows) if sel is None else sel
    exclude, required, categories = q.exclude[sel], q.required[sel], q.categories[sel]
    n_required = q.n_required[sel]
    ok = np.ones((exclude.shape[0], index.n_papers), dtype=bool)
    if not index.n_papers:
        return ok
    if exclude.nnz:
        ok &= as_dense(exclude @ index.presence_t) == 0
    if required.nnz:
        ok &= as_dense(required @ index.presence_t) >= n_required[:, None]
    if categories.nnz:
        rows = np.flatnonzero(np.diff(categories.indptr))
        in_cat = as_dense(categories[rows] @ index.categories_t) > 0
        ok[rows] &= in_cat | ~index.known_category
    return ok


@dataclass(frozen=True)
class Fusion:
    """How keyword relevance and meaning make one score (semantic ranking, :func:`fuse_all`).

    The defaults were chosen by cross-validation over the judged sets (tune on all sets but
    one, report on the one left out: ``python -m tests.rank.relevance.fusion``), never on one
    set alone; ``docs/design.md`` records the choice."""

    alpha: float = 0.1
    """Weight of the keyword part; meaning gets ``1 − alpha`` (Bruch et al. 2023's convex
    combination of normalized scores)."""
    query: str = "keywords"
    """What a topic's query vector is made of (:class:`~newsletter.semantic.space.MeaningSpace`)."""
    dense_k: int = 30
    """Each topic's candidates: every keyword match, and its ``dense_k`` papers most similar in
    meaning (those ``strong_z`` robust deviations above the day, see below)."""
    strong_z: float = STRONG_Z
    """A paper without a keyword match is a candidate only this many robust deviations above
    the day's median similarity (:func:`~newsletter.semantic.space.evidence`)."""
    feedback_docs: int = 5
    """Pseudo-relevance feedback: the query moves towards the mean of the topic's first this
    many papers, then everything is scored again (0: off)."""
    feedback_beta: float = 0.5
    """How far the query moves (Rocchio's β for pseudo-relevance feedback)."""
    anchored: bool = True
    """On a day without any keyword match for a topic, a paper comes in on meaning alone only
    when it is as similar as the topic's typical ``like:`` paper; without those, none does:
    a quiet topic stays quiet (:func:`anchors_of`)."""


DEFAULT_FUSION = Fusion()

_MEDIAN_SAMPLE = 1024
"""Above this many papers the day's median similarity per topic is taken over an even sample
of them (a median of 1,024 values is within a hundredth of the whole day's)."""


@dataclass
class Fused:
    """What :func:`fuse_all` gives the ranker: rows × papers."""

    relevance: FloatArray
    """The fused relevance, in units of each topic's best keyword relevance today."""
    meant: FloatArray
    """The meaning part of it."""
    admitted: BoolArray
    """The candidates: keyword matches and strong matches on meaning (each passing filters)."""


def _sample(a: npt.NDArray[Any], size: int) -> npt.NDArray[Any]:
    n = a.shape[1]
    return a if n <= size else a[:, :: -(-n // size)]


def meaning_parts(
    similarity: npt.NDArray[np.float32],
    passes: BoolArray,
    matched: BoolArray,
    fusion: Fusion,
    anchors: FloatArray | None = None,
    *,
    light: bool = False,
) -> tuple[FloatArray, BoolArray]:
    """(share, admitted) for rows of similarities: the share of the way from the day's median
    to 1, and the candidates (``matched`` keyword matches, plus the ``dense_k`` most similar
    papers that are ``strong_z`` robust deviations above the day's median, and at least the
    row's ``anchors`` similarity when given), within ``passes``. ``light``: in float32
    (readers' own topics, by the thousand; a sample of 256 papers for the median cost 0.01
    nDCG on judged3's own topics, so the sample stays)."""
    n = similarity.shape[1]
    sample = _sample(similarity, _MEDIAN_SAMPLE)
    median = np.median(sample, axis=1, keepdims=True).astype(np.float64)
    deviation = np.abs(sample.astype(np.float64) - median).astype(np.float32)
    spread = 1.4826 * np.median(deviation, axis=1, keepdims=True).astype(np.float64)
    s: npt.NDArray[Any] = similarity if light else similarity.astype(np.float64)
    if light:
        median, spread = median.astype(np.float32), spread.astype(np.float32)
    share = np.clip((s - median) / np.maximum(1.0 - median, 1e-6), 0.0, 1.0)
    admitted = matched & passes
    if n >= MIN_PAPERS and fusion.dense_k > 0:
        deviations = (s - median) / np.maximum(spread, 1e-9)
        strong = (deviations >= fusion.strong_z) & (spread > 1e-9)
        masked = np.where(passes, s, -np.inf)
        k = min(fusion.dense_k, n)
        kth = -np.partition(-masked, k - 1, axis=1)[:, k - 1 : k]
        if anchors is not None:
            strong &= s >= anchors
        admitted |= passes & strong & (masked >= kth)
    return share, admitted


def anchors_of(
    similarity: npt.NDArray[np.float32], matched: BoolArray, meaning: MeaningSpace, first: int = 0
) -> FloatArray:
    """Per row (a column), how similar a paper must be to come in on meaning alone: no bar
    (-inf) when the row has keyword matches today, else the median similarity of its
    ``like:`` papers, else +inf (nothing: a quiet topic stays quiet)."""
    out = np.full((similarity.shape[0], 1), np.inf)
    out[matched.any(axis=1)] = -np.inf
    for i in np.flatnonzero(~matched.any(axis=1)):
        liked = meaning.like_similarity(first + int(i))
        if len(liked):
            out[i, 0] = float(np.median(liked))
    return out


def fuse_all(
    relevance: FloatArray,
    passes: BoolArray,
    meaning: MeaningSpace,
    min_scores: FloatArray,
    fusion: Fusion = DEFAULT_FUSION,
    rows: slice | None = None,
    *,
    light: bool = False,
) -> Fused:
    """Semantic ranking for every row at once: keyword ``relevance`` (rows × papers) fused
    with the similarity of the papers' and topics' vectors.

    Candidates come from both retrievers: every keyword match, and the papers a topic's
    query finds strongly similar in meaning (:func:`meaning_parts`). Each candidate scores a
    convex combination of the two scores, each normalized by its maximum (Bruch, Gai & Ingber
    2023, *An analysis of fusion functions for hybrid retrieval*): ``alpha`` × its keyword
    relevance over the topic's best today, plus ``1 − alpha`` × its similarity's share of the
    way from the day's median to 1. Then, when ``feedback_docs``, the query moves towards its
    first papers (pseudo-relevance feedback) and the scores are made again. The result is
    multiplied by the topic's best keyword relevance today (1 without any), the units that
    ``min_score``, the relative cut and trending already use. ``rows``: which of the meaning
    space's topics the rows of ``relevance`` are (default: its dense rows, from the first).
    """
    if light:  # thousands of readers' own topics: float32 halves the memory traffic
        relevance = relevance.astype(np.float32)
    matched = relevance > 0
    best = relevance.max(axis=1, keepdims=True) if relevance.size else relevance[:, :1]
    scale = np.where(best > 0, best, 1.0).astype(relevance.dtype)
    lexical = relevance / scale
    a = fusion.alpha
    rounds = 2 if fusion.feedback_docs > 0 else 1
    rows = slice(0, len(relevance)) if rows is None else rows
    similarity = meaning.rows_similarity(rows)
    for round_ in range(rounds):
        anchors = (
            anchors_of(similarity, matched & passes, meaning, rows.start or 0)
            if fusion.anchored
            else None
        )
        share, admitted = meaning_parts(similarity, passes, matched, fusion, anchors, light=light)
        fused = (a * lexical + (1.0 - a) * share) * admitted
        if round_ + 1 < rounds:
            m = min(fusion.feedback_docs, fused.shape[1])
            top = np.argpartition(-fused, m - 1, axis=1)[:, :m]
            picked = np.take_along_axis(fused, top, axis=1)
            top = np.where(picked > 0, top, -1)
            similarity = meaning.feedback(top, fusion.feedback_beta, rows)
    keep = (fused * scale) >= min_scores[:, None] - 1e-9
    admitted &= keep
    return Fused(
        relevance=fused * scale * keep,
        meant=(1.0 - a) * share * scale * admitted,
        admitted=admitted,
    )


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


@dataclass
class RankedRows:
    """What :func:`rank_rows` gives for a block of rows."""

    arrays: dict[str, Any]
    """rows × papers: ``scores``, ``relevance``, ``lexical``, ``passes``, ``meant``,
    ``admitted`` (dense)."""
    scale: list[float]
    """Per row: the day's best keyword relevance (1 without any): the fusion's units."""
    best: list[float]
    """Per row: the best relevance today (what the relative cut is a share of)."""
    left_out: list[int]
    """Per row: matches not shown (passing mentions, or under the relative cut)."""
    liked: dict[str, FloatArray]
    """Lexical ranking: what ``like:`` papers added, per topic that has some."""


def rank_rows(
    queries: Queries,
    index: PaperIndex,
    rows: Sequence[Any],
    sl: slice,
    meaning: MeaningSpace | None,
    fusion: Fusion,
    space: Any,
    likes: dict[str, tuple[str, ...]],
) -> RankedRows:
    """The topics ``rows`` (rows ``sl`` of ``queries``) against every paper: keyword scores,
    the filters, the fusion with meaning (or, without vectors, the ``like:`` papers' tf-idf
    profile from ``space``), the relative cut, trending."""
    n = index.n_papers
    boost = np.maximum(index.boost, 1e-12)
    relevance = score_rows(queries, index, sl) / boost if n and rows else np.zeros((len(rows), n))
    lexical = relevance.copy()
    passes = filter_masks(queries, index, sl)
    best_lex = relevance.max(axis=1) if n and rows else np.zeros(len(rows))
    scale = [float(b) if b > 0 else 1.0 for b in best_lex]
    meant = np.zeros((len(rows), n))
    admitted = np.zeros((len(rows), n), dtype=bool)
    liked: dict[str, FloatArray] = {}
    if meaning is not None and rows:
        floors = np.array([t.min_score for t in rows], dtype=np.float64)
        own = all(is_own_topic(t.name) for t in rows)
        if own:
            # A reader's sentence is already a focused query: pseudo-relevance feedback on it
            # moved the judged sets' own topics by ±0.01 (tests/rank/relevance/own.py), and
            # skipping it halves what thousands of them cost.
            fusion = replace(fusion, feedback_docs=0)
        fused = fuse_all(relevance, passes, meaning, floors, fusion, sl, light=own)
        relevance, meant, admitted = fused.relevance, fused.meant, fused.admitted
    elif space is not None:
        for i, topic in enumerate(rows):
            found = space.rocchio(likes[topic.name], ()) if topic.name in likes else None
            if found is None:
                continue
            # A profile's cosine (0..1) is worth up to the day's best keyword match.
            part = scale[i] * found[0] * passes[i]  # only "more" papers: all of it is likeness
            relevance[i] += part
            liked[topic.name] = part
            relevance[i] *= relevance[i] >= topic.min_score - 1e-9
    scores = relevance * boost
    best = [0.0] * len(rows)
    out = [0] * len(rows)
    if n and rows:
        top = relevance.max(axis=1)
        below = (relevance > 0) & (relevance < RELATIVE_CUT * top[:, None] - 1e-9)
        scores[below] = 0.0
        passing = as_dense(queries.scoring[sl] @ index.evidence_t) == 1
        best = top.tolist()
        out = (below.sum(axis=1) + passing.sum(axis=1)).tolist()
    arrays = {
        "scores": scores,
        "relevance": relevance.copy(),
        "lexical": lexical,
        "passes": passes,
        "meant": meant,
        "admitted": admitted,
    }
    return RankedRows(arrays, scale, best, out, liked)
