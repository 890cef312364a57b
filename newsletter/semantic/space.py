"""Topics, readers and papers in one embedding space: similarities and what counts as strong.

Pure NumPy over unit vectors (:class:`~newsletter.semantic.vectors.Semantic`): no model here.

* A topic's query is the centroid of its keyword entries' vectors (or its text's vector)
  moved towards its ``like:`` papers (Rocchio's ``q = α·q0 + β·mean(liked)``); a reader's
  votes move it further for that reader (``+ β·mean(more) − γ·mean(less)``), with the
  textbook α = 1, β = 0.75, γ = 0.15 (Manning, Raghavan & Schütze, *Introduction to
  Information Retrieval*, §9.1.1).
* Cosine similarities of a day's papers with a query sit around a typical value (most papers
  are about something else) with a few far above it. :func:`evidence` measures how far above:
  the median is the typical paper, 1.4826 × the median absolute deviation its spread (a robust
  standard deviation: Leys et al. 2013, "Detecting outliers: do not use standard deviation
  around the mean, use absolute deviation around the median"). A paper at least
  ``STRONG_Z`` such deviations above the median is a strong match on meaning alone; the
  similarity's share of the way from the median to 1 is what it adds to relevance
  (:func:`newsletter.rank.score.meaning_parts` does the same for many rows at once).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]

STRONG_Z = 2.5
"""Robust deviations above the day's median similarity that make a paper a match on meaning
alone (Leys et al. 2013: 3 is "very conservative", 2.5 "moderately conservative")."""
ROCCHIO_BETA = 0.75
"""Weight of the papers a reader (or a topic's ``like:``) asks for more of (Rocchio's β). The
tf-idf profiles (:mod:`newsletter.rank.profiles`) use the same weights."""
ROCCHIO_GAMMA = 0.15
"""Weight of the papers a reader asks for less of (Rocchio's γ)."""
MIN_PAPERS = 20
"""Below this many papers a day's median and spread say too little: meaning then reorders
keyword matches but admits no paper on its own."""


def unit(v: FloatArray) -> FloatArray:
    """``v`` scaled to length 1 (a zero vector stays zero)."""
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 1e-12 else v


@dataclass(frozen=True)
class Evidence:
    """One query against the day's papers."""

    similarity: FloatArray
    """Cosine per paper."""
    part: npt.NDArray[np.float64]
    """Per paper, ``(s − median) / (1 − median)`` clipped to 0..1: the share of relevance that
    meaning adds (times the topic's scale)."""
    strong: BoolArray
    """Per paper: similar enough to be shown without a keyword match."""


def evidence(similarity: FloatArray) -> Evidence:
    """How strongly each of the day's papers matches a query on meaning (see the module)."""
    s = similarity.astype(np.float64)
    if not s.size:
        return Evidence(similarity, s, np.zeros(0, dtype=bool))
    median = float(np.median(s))
    spread = 1.4826 * float(np.median(np.abs(s - median)))
    part = np.clip((s - median) / max(1.0 - median, 1e-6), 0.0, 1.0)
    if s.size < MIN_PAPERS or spread <= 1e-9:
        strong = np.zeros(s.size, dtype=bool)
    else:
        strong = (s - median) >= STRONG_Z * spread
    return Evidence(similarity, part, strong)


class MeaningSpace:
    """The run's papers, topics and example papers as unit vectors (see the module)."""

    def __init__(
        self,
        papers: FloatArray,
        topics: FloatArray,
        likes: Sequence[Sequence[str]],
        examples: Mapping[str, FloatArray],
        labels: Mapping[str, str],
        keywords: Sequence[Mapping[str, FloatArray]] = (),
        *,
        query: str = "keywords",
        own: Sequence[bool] = (),
        dense_rows: int | None = None,
    ) -> None:
        """``likes[i]``: topic ``i``'s ``like:`` keys; ``examples``: vectors of example papers
        by key (the run's own papers among them when liked or voted on); ``labels``: titles of
        examples; ``keywords[i]``: topic ``i``'s keyword entries' vectors by label.

        ``query``: what a topic's query vector starts from (before its ``like:`` papers):
        ``"keywords"``, the centroid of its keyword entries' vectors (a topic without any, or a
        reader's own topic, uses its whole text's vector), or ``"text"``, the vector of its
        title and keywords written as one text (:func:`~newsletter.semantic.vectors.topic_text`).
        ``own[i]``: topic ``i`` is a reader's own, written as a sentence: its text's vector is
        its query whatever ``query`` says (its "keywords" are the sentence's words).
        ``dense_rows``: only the first this many topics get a row of :attr:`similarity` (the
        operator's topics); the others (readers' own topics, thousands) are computed a block
        at a time (:meth:`rows_similarity`) and a row on demand (:meth:`row_similarity`).
        """
        self.papers = papers
        self.examples = dict(examples)
        self.labels = dict(labels)
        self.likes = [tuple(k for k in keys if k in self.examples) for keys in likes]
        self.keywords = list(keywords) or [{} for _ in range(len(topics))]
        # A query is its start moved towards its like: papers, made unit; thousands of rows
        # (readers' own topics) start from their text's vector and have none: one operation.
        self.queries = np.array(topics, dtype=np.float32).reshape(len(topics), papers.shape[1])
        plain = np.ones(len(topics), dtype=bool)
        for i in range(len(topics)):
            centroid = query == "keywords" and self.keywords[i] and not (i < len(own) and own[i])
            if centroid or self.likes[i]:
                start = (
                    unit(np.mean(list(self.keywords[i].values()), axis=0).astype(np.float32))
                    if centroid
                    else topics[i]
                )
                self.queries[i] = self._rocchio(start, self.likes[i], ())
                plain[i] = False
        if plain.any():
            norms = np.sqrt(np.einsum("ij,ij->i", self.queries, self.queries))[:, None]
            norms = np.where(norms > 1e-12, norms, 1.0).astype(np.float32)
            np.divide(self.queries, norms, out=self.queries, where=plain[:, None])
        self.dense_rows = len(self.queries) if dense_rows is None else dense_rows
        self.initial = self.queries[: self.dense_rows].copy()
        """The dense rows' queries before pseudo-relevance feedback (:meth:`feedback`); the
        other rows get none."""
        self.similarity: FloatArray = self.queries[: self.dense_rows] @ papers.T
        """The first ``dense_rows`` topics × papers cosines (after :meth:`feedback`, with the
        expanded queries)."""

    def _rocchio(self, q0: FloatArray, more: Sequence[str], less: Sequence[str]) -> FloatArray:
        q = q0.astype(np.float32).copy()
        pos = [self.examples[k] for k in dict.fromkeys(more) if k in self.examples]
        neg = [self.examples[k] for k in dict.fromkeys(less) if k in self.examples]
        if pos:
            q += ROCCHIO_BETA * np.mean(pos, axis=0)
        if neg:
            q -= ROCCHIO_GAMMA * np.mean(neg, axis=0)
        return unit(q)

    def rows_similarity(self, rows: slice) -> FloatArray:
        """Cosines of the topics ``rows`` with the papers (a view of :attr:`similarity` for
        the dense rows)."""
        if rows.stop is not None and rows.stop <= self.dense_rows:
            return self.similarity[rows]
        found: FloatArray = self.queries[rows] @ self.papers.T
        return found

    def row_similarity(self, i: int) -> FloatArray:
        """Topic ``i``'s cosines with the papers."""
        found: FloatArray = (
            self.similarity[i] if i < self.dense_rows else self.papers @ self.queries[i]
        )
        return found

    def similarity_of(self, i: int, j: int) -> float:
        """Topic ``i``'s cosine with paper ``j``."""
        if i < self.dense_rows:
            return float(self.similarity[i, j])
        return float(self.papers[j] @ self.queries[i])

    def feedback(
        self, top: npt.NDArray[np.int64], beta: float, rows: slice | None = None
    ) -> FloatArray:
        """Pseudo-relevance feedback: each topic's query (of ``rows``, default the dense
        ones) moves towards the mean of its papers ``top[i]`` (indices, -1 for none),
        ``q = q + β·mean(top)``; returns their similarities computed again."""
        rows = slice(0, self.dense_rows) if rows is None else rows
        if not len(self.queries[rows]) or not top.size:
            return self.rows_similarity(rows)
        valid = top >= 0
        picked = self.papers[np.where(valid, top, 0)] * valid[..., None]
        count = np.maximum(valid.sum(axis=1, keepdims=True), 1)
        moved = self.queries[rows] + beta * (picked.sum(axis=1) / count).astype(np.float32)
        norms = np.linalg.norm(moved, axis=1, keepdims=True)
        self.queries[rows] = (moved / np.maximum(norms, 1e-12)).astype(np.float32)
        found: FloatArray = self.queries[rows] @ self.papers.T
        if rows.stop is not None and rows.stop <= self.dense_rows:
            self.similarity[rows] = found
        return found

    def like_similarity(self, i: int) -> FloatArray:
        """Cosines of topic ``i``'s ``like:`` papers with its query (empty without any)."""
        vecs = [self.examples[k] for k in self.likes[i]]
        if not vecs:
            return np.zeros(0, dtype=np.float32)
        found: FloatArray = np.stack(vecs) @ self.queries[i]
        return found

    def reader_query(self, i: int, more: Sequence[str], less: Sequence[str]) -> FloatArray | None:
        """Topic ``i``'s query moved by a reader's votes (Rocchio: ``q + β·mean(more) −
        γ·mean(less)``); None when none of the votes is on a known paper."""
        if not any(k in self.examples for k in (*more, *less)):
            return None
        start = self.initial[i] if i < len(self.initial) else self.queries[i]
        return self._rocchio(start, more, less)

    def closest(self, keys: Sequence[str], j: int) -> str | None:
        """Of ``keys`` (example papers), the one most similar to paper ``j``."""
        found = [k for k in dict.fromkeys(keys) if k in self.examples]
        if not found:
            return None
        sims = np.stack([self.examples[k] for k in found]) @ self.papers[j]
        return found[int(np.argmax(sims))]

    def nearest(self, i: int, j: int) -> tuple[str, float] | None:
        """What of topic ``i`` paper ``j`` is closest to in meaning: a keyword entry or a
        liked paper (its title), with the cosine."""
        p = self.papers[j]
        best: tuple[float, str] | None = None
        for label, vec in self.keywords[i].items():
            c = float(vec @ p)
            if best is None or c > best[0]:
                best = (c, label)
        for key in self.likes[i]:
            example = self.examples.get(key)
            if example is not None:
                c = float(example @ p)
                if best is None or c > best[0]:
                    best = (c, self.labels.get(key, key))
        return None if best is None else (best[1], best[0])
