"""Reader profiles: "more/less like this" votes and topics' ``like:`` papers as Rocchio vectors.

The ranker (:mod:`newsletter.rank.ranker`) adds a profile's cosine to a topic's keyword relevance;
this module owns the vectors: tf-idf of the run's papers and of the example papers readers
voted on (:class:`ProfileSpace`), one reader's profile (:meth:`ProfileSpace.rocchio`) and many
readers' at once for the general scorer (:class:`ProfileRows`). See docs/topics.md, "How votes
and example papers rank", for the method and why Rocchio.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from newsletter.models import MAX_TEXT_CHARS, Paper
from newsletter.rank.tiled_matmul import Tiles, column_tiles, dense_product, times_tiles
from newsletter.semantic.space import ROCCHIO_BETA, ROCCHIO_GAMMA
from newsletter.text import read_defined

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class ReadPapers(Protocol):
    """The run's papers as the ranker tokenized them (``rank.Documents`` is one)."""

    @property
    def papers(self) -> tuple[Paper, ...]:
        """The run's papers, in index order."""
        ...

    @property
    def titles(self) -> tuple[list[str], ...]:
        """Each paper's title as words."""
        ...

    @property
    def abstracts(self) -> tuple[list[str], ...]:
        """Each paper's abstract as words."""
        ...


MAX_VOTES = 50
"""A reader's profile uses at most their latest this many votes (votes come newest first)."""

STOPWORDS = frozenset(
    (
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "here",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "paper",
        "propose",
        "show",
        "result",
        "method",
        "approach",
        "use",
        "using",
        "based",
        "new",
        "via",
    )
)
"""Words that say nothing about a paper's subject, left out of the profile vectors."""


class Vote(Protocol):
    """What the ranker reads of a vote (``models.Vote`` from the store is one)."""

    @property
    def paper_key(self) -> str:
        """The voted paper's key (its versionless arXiv id or stored key)."""
        ...

    @property
    def value(self) -> int:
        """+1 for "more like this", -1 for "less like this"."""
        ...

    @property
    def topic(self) -> str | None:
        """The digest section (topic name) the paper was in when the reader voted, if known."""
        ...


@dataclass(frozen=True, slots=True)
class Preference:
    """One "more like this" (+1) or "less like this" (-1) for a paper, in a topic or in all."""

    paper_key: str
    value: int
    topic: str | None = None


def _kept(word: str) -> bool:
    """Whether a word can carry a paper's subject in the profile vectors."""
    return word not in STOPWORDS and len(word) > 1


class ProfileSpace:
    """tf-idf vectors of the run's papers and of example papers (the ones readers voted on and
    topics' ``like:`` lists name): sublinear tf, smoothed idf over the run's papers, unit rows.

    Built once per run, only when a topic has ``like:`` papers or a reader has votes. Both sets
    stay sparse (a few dozen weights per paper), so memory grows with the examples' text, not
    with examples × papers; a reader's profile costs one sparse product with the run's papers.
    """

    def __init__(self, docs: ReadPapers, examples: Sequence[Paper]) -> None:
        # A paper as the profile space sees it: its title counted twice and its abstract, stop
        # words out. The vocabulary: the words kept, in order of first use, numbered.
        run = list(zip(docs.titles, docs.abstracts, strict=True))
        words = dict.fromkeys(chain.from_iterable(chain.from_iterable(run)))
        vocab = {t: i for i, t in enumerate(filter(_kept, words))}
        self.vocab = vocab
        n = len(run)
        counts = self._counts(run)
        df = np.bincount(counts.indices, minlength=len(vocab)).astype(np.float64)
        self.idf: FloatArray = np.log((1 + n) / (1 + df)) + 1.0
        self.keys: dict[str, int] = {}
        rows: list[tuple[list[str], list[str]]] = []
        known = {p.key: (docs.titles[i], docs.abstracts[i]) for i, p in enumerate(docs.papers)}
        for paper in examples:
            if paper.key not in self.keys:
                if paper.key in known:
                    title, abstract = known[paper.key]
                else:
                    (title, abstract), _ = read_defined(
                        paper.title[:MAX_TEXT_CHARS], paper.abstract[:MAX_TEXT_CHARS]
                    )
                self.keys[paper.key] = len(rows)
                rows.append((title, abstract))
        self.titles = {p.key: p.title for p in examples}
        self._pending: dict[str, Future[Any]] = {}
        x = self._weigh(counts)
        self.run_vectors: sp.csr_matrix = x
        """run papers × vocabulary, unit rows."""
        self.examples: sp.csr_matrix = self._weigh(self._counts(rows))
        """examples × vocabulary, unit rows."""

    def _counts(self, docs: list[tuple[list[str], list[str]]]) -> sp.csr_matrix:
        """docs × vocabulary term counts, titles twice (words outside the vocabulary, stop
        words among them, are left out)."""
        lengths = [2 * len(title) + len(abstract) for title, abstract in docs]
        words = chain.from_iterable(chain.from_iterable((t, t, a) for t, a in docs))
        # -1: not in the vocabulary
        found = np.fromiter(
            map(self.vocab.get, words, repeat(-1)), dtype=np.int64, count=sum(lengths)
        )
        doc = np.repeat(np.arange(len(docs)), lengths)
        known = found >= 0
        indptr = np.zeros(len(docs) + 1, dtype=np.int64)
        np.cumsum(np.bincount(doc[known], minlength=len(docs)), out=indptr[1:])
        cols = found[known]
        m = sp.csr_matrix(
            (np.ones(len(cols)), cols, indptr),
            shape=(len(docs), len(self.vocab)),
        )
        m.sum_duplicates()
        return m

    def _weigh(self, counts: sp.csr_matrix) -> sp.csr_matrix:
        """Sublinear tf × idf, rows scaled to unit length."""
        m = counts.copy()
        m.data = (1.0 + np.log(m.data)) * self.idf[m.indices]
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        return sp.csr_matrix(sp.diags(1.0 / np.maximum(norms, 1e-12)) @ m)

    def rocchio(
        self, more: Sequence[str], less: Sequence[str]
    ) -> tuple[FloatArray, FloatArray] | None:
        """Each run paper's cosine with the Rocchio profile ``q = β·c(more) − γ·c(less)``.

        ``c`` is the centroid of the examples' unit vectors. Returns (the cosine per run paper,
        the ``more`` part of ``q`` over ``|q|``, for :meth:`liked`); papers not among the
        examples are ignored; None when nothing is left.
        """
        pos = [self.keys[k] for k in dict.fromkeys(more) if k in self.keys]
        neg = [self.keys[k] for k in dict.fromkeys(less) if k in self.keys]
        if not pos and not neg:
            return None
        e = self.examples
        n = e.shape[1]

        def centroid(members: list[int], weight: float) -> FloatArray:
            if not members:
                return np.zeros(n)
            spans = [np.arange(e.indptr[r], e.indptr[r + 1]) for r in members]
            at = np.concatenate(spans)
            return np.bincount(e.indices[at], weights=weight * e.data[at], minlength=n).astype(
                np.float64
            )

        q_more = centroid(pos, ROCCHIO_BETA / max(1, len(pos)))
        q = q_more + centroid(neg, -ROCCHIO_GAMMA / max(1, len(neg)))
        norm = math.sqrt(max(float(q @ q), 1e-12))
        total = np.asarray(self.run_vectors @ q).ravel() / norm
        return total, q_more / norm

    @property
    def similarity(self) -> Tiles:
        """examples × run papers cosines, as column tiles (:mod:`.tiled_matmul`), computed once
        on first use (for many profiles at once, :class:`ProfileRows`; a single reader's profile
        needs only one product)."""
        found: Tiles = self._shared("_similarity")
        return found

    @property
    def gram(self) -> FloatArray:
        """examples × examples cosines, computed once on first use."""
        found: FloatArray = self._shared("_gram")
        return found

    def _shared(self, name: str) -> Any:
        cached = self.__dict__.get(name)
        if cached is None:
            pending = self._pending.get(name)
            cached = pending.result() if pending is not None else self._compute(name)
            self.__dict__[name] = cached
        return cached

    def _compute(self, name: str) -> Any:
        if name == "_similarity":
            return column_tiles(dense_product(self.examples, self.run_vectors.T))
        return dense_product(self.examples, self.examples.T)

    def precompute(self) -> None:
        """Start computing :attr:`similarity` and :attr:`gram` on two background threads now
        (sparse products: they release the GIL), so a caller that needs them later (many
        profiles at once) can build its other structures meanwhile; using them waits."""
        if self._pending or "_similarity" in self.__dict__:
            return
        pool = ThreadPoolExecutor(2, thread_name_prefix="profile-space")
        self._pending = {
            name: pool.submit(self._compute, name) for name in ("_similarity", "_gram")
        }
        pool.shutdown(wait=False)

    def liked(self, more_part: FloatArray, paper_index: int) -> float:
        """The share of a run paper's cosine that comes from the papers voted "more"."""
        x = self.run_vectors
        lo, hi = x.indptr[paper_index], x.indptr[paper_index + 1]
        return float(more_part[x.indices[lo:hi]] @ x.data[lo:hi])

    def closest(self, candidates: Sequence[str], paper_index: int) -> str | None:
        """Of ``candidates`` (example keys), the one most similar to a run paper."""
        found = [k for k in dict.fromkeys(candidates) if k in self.keys]
        if not found:
            return None
        x = self.run_vectors
        lo, hi = x.indptr[paper_index], x.indptr[paper_index + 1]
        paper = np.zeros(x.shape[1])
        paper[x.indices[lo:hi]] = x.data[lo:hi]
        sims = np.asarray(self.examples[[self.keys[k] for k in found]] @ paper).ravel()
        return max(zip(sims.tolist(), found, strict=True))[1]


def _quadratic(w: sp.csr_matrix, gram: FloatArray) -> FloatArray:
    """Per row of ``w``, ``wᵀ·gram·w`` over the row's few nonzeros only (a gather of their
    pairs, not a product with all of ``gram``); summed in the order ``w @ gram`` would."""
    lengths = np.diff(w.indptr)
    most = int(lengths.max()) if len(lengths) else 0
    slot = np.arange(most)
    filled = slot[None, :] < lengths[:, None]
    at = np.where(filled, w.indptr[:-1, None] + slot[None, :], 0)
    cols = np.where(filled, w.indices[at] if w.nnz else 0, 0)
    vals = np.where(filled, w.data[at] if w.nnz else 0.0, 0.0)  # padding weighs 0
    pairs = gram[cols[:, :, None], cols[:, None, :]]
    inner = np.zeros(vals.shape)
    for i in range(most):
        inner += vals[:, i, None] * pairs[:, i, :]
    terms = vals * inner
    out = np.zeros(len(vals))
    for j in range(most):
        out += terms[:, j]
    return out


@dataclass(frozen=True)
class ProfileRows:
    """Rocchio profiles for the rows of the general scorer (:func:`~newsletter.rank.score_block`,
    ``bench/top_n.py``), as weights over a space's examples.

    Row ``r``'s profile relevance for paper ``p`` is ``scale[r] · cos(p, q_r)`` with
    ``q_r = Σ weights[r, e] · example_e``: the same formula as :meth:`Ranker.reader_items`,
    for many readers at once (a sparse rows × examples product with the examples × papers
    similarities, a block of rows at a time).
    """

    space: ProfileSpace
    weights: sp.csr_matrix
    scale: FloatArray

    @classmethod
    def build(
        cls,
        space: ProfileSpace,
        rows: int,
        prefs: dict[int, Sequence[Vote]],
        scale: FloatArray | float = 1.0,
    ) -> ProfileRows:
        """Profiles from each row's preferences (latest ``MAX_VOTES``); rows without are zero."""
        r_idx: list[int] = []
        c_idx: list[int] = []
        vals: list[float] = []
        known = space.keys
        for row, mine in prefs.items():
            pos: dict[int, None] = {}  # example numbers, in order of first vote
            neg: dict[int, None] = {}
            for v in list(mine)[:MAX_VOTES]:
                e = known.get(v.paper_key)
                if e is not None and v.value:
                    (pos if v.value > 0 else neg)[e] = None
            for examples, weight in ((pos, ROCCHIO_BETA), (neg, -ROCCHIO_GAMMA)):
                if examples:
                    r_idx.extend([row] * len(examples))
                    c_idx.extend(examples)
                    vals.extend([weight / len(examples)] * len(examples))
        weights = sp.csr_matrix((vals, (r_idx, c_idx)), shape=(rows, len(space.keys)))
        weights.sum_duplicates()
        scales = np.broadcast_to(np.asarray(scale, dtype=np.float64), (rows,)).copy()
        return cls(space, weights, scales)

    def prepare(self) -> None:
        """Start the space's shared matrices (once, not in every thread that needs them) on
        background threads, unless started already; :meth:`relevance` waits for them."""
        if self.weights.nnz:
            self.space.precompute()

    def relevance(self, start: int, stop: int) -> tuple[IntArray, FloatArray] | None:
        """The rows of ``start:stop`` that have a profile (relative to ``start``) and their
        share of relevance per paper; None when none has."""
        return self._relevance(self.weights[start:stop], self.scale[start:stop])

    def relevance_of(self, rows: IntArray) -> tuple[IntArray, FloatArray] | None:
        """:meth:`relevance` for the rows numbered ``rows`` (positions within ``rows``)."""
        return self._relevance(self.weights[rows], self.scale[rows])

    def _relevance(self, w: sp.csr_matrix, scale: FloatArray) -> tuple[IntArray, FloatArray] | None:
        if not w.nnz:
            return None
        space = self.space
        rows = np.flatnonzero(np.diff(w.indptr))
        wr = w[rows]
        # |q|² = wᵀ·(examples' cosines)·w, and q·paper from the examples' cosines with papers:
        # a few votes per row against dense matrices, never a profile vector.
        norm = np.sqrt(np.maximum(_quadratic(wr, space.gram), 1e-12))
        dots = times_tiles(wr, space.similarity)
        dots *= (scale[rows] / norm)[:, None]
        return rows, dots

    def voters(self) -> npt.NDArray[np.bool_]:
        """Per row, whether it has a profile."""
        has: npt.NDArray[np.bool_] = np.diff(self.weights.indptr) > 0
        return has
