"""The run's papers as matrices: BM25F weights, evidence, trending and age, per keyword group.

:class:`Documents` reads each paper's title and abstract into words once (each paper's own
acronyms read as their long forms); :class:`PaperIndex` turns them into papers × groups matrices
over a :class:`~newsletter.rank.rules.Vocabulary`: BM25F over two fields, title (weight 3) and
abstract (weight 1) with the textbook ``k1 = 1.2`` and ``b = 0.75``, the evidence of each
mention (a passing one or a real one), and each paper's trending and recency multiplier
(:func:`trend_factor`, :func:`recency_factor`). The scorer (:mod:`newsletter.rank.score`)
multiplies these with the compiled rules.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from newsletter.models import MAX_AUTHORS, MAX_TEXT_CHARS, Paper
from newsletter.rank.rules import Tokens, Vocabulary
from newsletter.text import author_key, category_key, compound_parts, read_defined, tokenize

FloatArray = npt.NDArray[np.float64]

# BM25F: the textbook constants, not fitted to any data set.
K1 = 1.2
B = 0.75
TITLE_WEIGHT = 3.0
ABSTRACT_WEIGHT = 1.0
BAG_TF = 0.5
"""A title with every word of a phrase keyword, out of order, counts this many mentions."""
# Trending and age: a bounded multiplier on relevance, so they order papers that are about
# equally relevant and never lift a clearly weaker match above a clearly stronger one: the
# largest possible ratio is (1 + TREND_LIFT) / (1 - AGE_DROP) = 1.39.
TREND_LIFT = 0.25
TREND_SCALE = 4.0
"""The trend signal (log upvotes + ...) at which 63% of TREND_LIFT is reached."""
AGE_DROP = 0.1
MAX_EXTRA_SOURCES = 3
HALF_LIFE_HOURS = 72.0

DENSE_LIMIT = 8_000_000
"""Keep the papers × terms weight matrix dense for scoring while it has at most this many cells."""


def trend_signal(paper: Paper) -> float:
    """How much attention a paper has: log upvotes, comments, upvotes/hour, extra sources."""
    extra_sources = min(MAX_EXTRA_SOURCES, max(0, len(set(paper.sources)) - 1))
    return (
        math.log1p(max(0, paper.upvotes or 0))
        + 0.5 * math.log1p(max(0, paper.comments or 0))
        + math.log1p(max(0.0, paper.upvote_velocity or 0.0))
        + 0.5 * extra_sources
    )


def trend_factor(paper: Paper) -> float:
    """The trending multiplier, from 1 (no signal) up to ``1 + TREND_LIFT``, saturating."""
    return 1.0 + TREND_LIFT * (1.0 - math.exp(-trend_signal(paper) / TREND_SCALE))


def age_hours(paper: Paper, now: datetime) -> float:
    """Hours since the paper was published (or first seen), never negative."""
    when = paper.published or paper.first_seen
    return max(0.0, (now - when).total_seconds() / 3600.0)


def recency_factor(paper: Paper, now: datetime) -> float:
    """From 1 (new) down to ``1 - AGE_DROP`` (old), halfway after ``HALF_LIFE_HOURS``."""
    return 1.0 - AGE_DROP * (1.0 - float(0.5 ** (age_hours(paper, now) / HALF_LIFE_HOURS)))


@dataclass(frozen=True)
class Documents:
    """The run's papers as token lists, each paper's own acronyms read as their long forms."""

    papers: tuple[Paper, ...]
    titles: tuple[list[str], ...]
    abstracts: tuple[list[str], ...]
    learned: dict[str, Counter[tuple[Tokens, str]]]
    """acronym key → how often papers defined it as each long form (tokens, as written)."""
    title_parts: tuple[list[str], ...] = ()
    """Per paper, the words inside its title's CamelCase compounds (``text.compound_parts``):
    "BirdNeRF" holds "nerf". Empty when not read (a title then matches whole words only)."""

    @classmethod
    def read(cls, papers: Sequence[Paper]) -> Documents:
        """The papers' titles and abstracts as words, with the acronym pairs they define."""
        titles: list[list[str]] = []
        abstracts: list[list[str]] = []
        parts: list[list[str]] = []
        learned: dict[str, Counter[tuple[Tokens, str]]] = {}
        for paper in papers:
            # Whatever is stored, the tokenizer reads a bounded text (issue 42).
            title_text = paper.title[:MAX_TEXT_CHARS]
            (title, abstract), found = read_defined(title_text, paper.abstract[:MAX_TEXT_CHARS])
            titles.append(title)
            abstracts.append(abstract)
            parts.append(compound_parts(title_text))
            for key, (_, long) in found.items():
                toks = tuple(tokenize(long))
                learned.setdefault(key, Counter())[(toks, " ".join(long.split()))] += 1
        return cls(tuple(papers), tuple(titles), tuple(abstracts), learned, tuple(parts))


def _csr(rows: list[int], cols: list[int], shape: tuple[int, int]) -> sp.csr_matrix:
    m = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=shape)
    m.sum_duplicates()
    m.data[:] = 1.0
    return m


class PaperIndex:
    """The run's papers as matrices over a vocabulary: BM25F weights, evidence, boosts."""

    def __init__(
        self,
        papers: Sequence[Paper],
        vocab: Vocabulary,
        now: datetime,
        docs: Documents | None = None,
    ) -> None:
        self.papers = tuple(papers)
        docs = docs or Documents.read(self.papers)
        n_papers = len(self.papers)
        n_terms = len(vocab.terms)
        terms = vocab.terms
        starts: dict[str, list[int]] = {}
        bags: dict[str, list[tuple[int, frozenset[str]]]] = {}
        for seq, tid in terms.items():
            if len(seq) > 1:
                starts.setdefault(seq[0], [])
                if len(seq) not in starts[seq[0]]:
                    starts[seq[0]].append(len(seq))
                bags.setdefault(seq[0], []).append((tid, frozenset(seq)))
        singles = {seq[0]: tid for seq, tid in terms.items() if len(seq) == 1}
        # (paper, term, tf) per field, as three flat lists (cheaper than a list of tuples)
        fields: list[tuple[list[int], list[int], list[float]]] = [([], [], []), ([], [], [])]
        lengths = np.zeros((2, n_papers))
        for p in range(n_papers):
            for f, toks in enumerate((docs.titles[p], docs.abstracts[p])):
                lengths[f, p] = len(toks)
                seen = Counter(toks)
                # Single words: once per distinct word (distinct words are distinct terms).
                counts = {singles[tok]: float(k) for tok, k in seen.items() if tok in singles}
                phrases = [] if starts.keys().isdisjoint(seen) else toks
                for i in [i for i, tok in enumerate(phrases) if tok in starts]:  # phrases
                    for size in starts[toks[i]]:
                        if i + size > len(toks):
                            continue  # a cut-off slice would match a shorter phrase
                        found = terms.get(tuple(toks[i : i + size]))
                        if found is not None:
                            counts[found] = counts.get(found, 0.0) + 1
                if f == 0 and docs.title_parts:
                    # A one-word keyword inside a compound of the title ("NeRF" in "BirdNeRF")
                    # counts as a mention of it in the title, once; the title's length is as
                    # written (the parts add no words to it).
                    for tok in docs.title_parts[p]:
                        part = singles.get(tok)
                        if part is not None and part not in counts:
                            counts[part] = 1.0
                if f == 0 and bags:
                    # A title that has every word of a phrase, not in order ("serving LLMs"
                    # for "LLM serving"), counts half a mention: scattered words count less.
                    have = set(toks)
                    for tok in have & bags.keys():
                        for tid, words in bags[tok]:
                            if tid not in counts and words <= have:
                                counts[tid] = BAG_TF
                at, term, tf_ = fields[f]
                at.extend([p] * len(counts))
                term.extend(counts)
                tf_.extend(counts.values())

        def tf(entries: tuple[list[int], list[int], list[float]]) -> sp.csr_matrix:
            at, term, values = entries
            if not at:
                return sp.csr_matrix((n_papers, n_terms))
            return sp.csr_matrix(
                (
                    np.asarray(values, dtype=np.float64),
                    (np.asarray(at, dtype=np.int64), np.asarray(term, dtype=np.int64)),
                ),
                shape=(n_papers, n_terms),
            )

        self.title_tf = tf(fields[0])
        self.abstract_tf = tf(fields[1])
        to_groups = vocab.term_group_matrix()
        avg = np.maximum(lengths.mean(axis=1) if n_papers else np.ones(2), 1.0)
        norm_t = TITLE_WEIGHT / (1 - B + B * lengths[0] / avg[0]) if n_papers else np.zeros(0)
        norm_a = ABSTRACT_WEIGHT / (1 - B + B * lengths[1] / avg[1]) if n_papers else np.zeros(0)
        title_raw = sp.csr_matrix(self.title_tf @ to_groups)
        abstract_raw = sp.csr_matrix(self.abstract_tf @ to_groups)
        title_g = sp.diags(norm_t) @ title_raw
        abstract_g = sp.diags(norm_a) @ abstract_raw
        pseudo = sp.csr_matrix(title_g + abstract_g)
        pseudo.eliminate_zeros()
        n_groups = len(vocab.groups)
        df = np.bincount(pseudo.indices, minlength=n_groups).astype(np.float64)
        self.idf: FloatArray = np.log(1.0 + (n_papers - df + 0.5) / (df + 0.5))
        weights = pseudo.copy()
        weights.data = weights.data * (K1 + 1) / (weights.data + K1) * self.idf[weights.indices]
        self.weights: sp.csr_matrix = weights
        """papers × groups: each group's BM25F contribution to relevance."""
        presence = weights.copy()
        presence.data[:] = 1.0
        self.presence_t: sp.csr_matrix = presence.T.tocsr()
        # Evidence: 1 for a passing mention (one single word, once, in the abstract only), 2 for
        # anything more (in the title, twice or more, or a phrase). See score.MIN_EVIDENCE.
        multi = np.array([len(t) > 1 for t in terms], dtype=np.float64)
        phrase_in_abstract = sp.csr_matrix(self.abstract_tf @ sp.diags(multi) @ to_groups)
        strong = sp.csr_matrix(
            (title_raw > 0).astype(np.float64)
            + (abstract_raw >= 2).astype(np.float64)
            + (phrase_in_abstract > 0).astype(np.float64)
        )
        strong.data[:] = 1.0
        self.evidence: sp.csr_matrix = sp.csr_matrix(presence + strong.multiply(presence))
        """papers × groups: 1 for a passing mention of the group, 2 for a real one."""
        self.evidence_t: sp.csr_matrix = sp.csr_matrix(self.evidence.T)
        """groups × papers: 1 for a passing mention of the group, 2 for a real one."""
        self.trend: FloatArray = np.array([trend_factor(p) for p in self.papers])
        self.recency: FloatArray = np.array([recency_factor(p, now) for p in self.papers])
        self.boost: FloatArray = self.trend * self.recency
        boosted = sp.diags(self.boost) @ weights
        dense = n_groups * n_papers <= DENSE_LIMIT
        # C order: a sparse × dense product copies an F-ordered operand on every call.
        self.boosted_t: Any = (
            np.ascontiguousarray(boosted.T.toarray()) if dense else sp.csr_matrix(boosted.T)
        )
        """groups × papers, relevance × boost: dense while small (faster), else sparse."""
        self.points_t: Any = (
            np.ascontiguousarray(self.evidence.T.toarray(), dtype=np.float32)
            if dense
            else sp.csr_matrix(self.evidence.T, dtype=np.float32)
        )
        """groups × papers evidence points in float32 (small integers are exact; half the
        bandwidth of the scoring product)."""
        self.boosted32_t: npt.NDArray[np.float32] | None = (
            self.boosted_t.astype(np.float32) if dense else None
        )
        """``boosted_t`` rounded to float32, for the first pass of ``bench/top_n.py`` (dense
        case only)."""
        self.points8_t: npt.NDArray[np.int8] | None = (
            self.points_t.astype(np.int8) if dense else None
        )
        """``points_t`` as int8 (exact: points are 0, 1 or 2), a quarter of the bandwidth."""
        cat_rows = [
            (p, vocab.categories[category_key(c)])
            for p, paper in enumerate(self.papers)
            for c in set(paper.categories)
            if category_key(c) in vocab.categories
        ]
        self.categories_t = _csr(
            [c for _, c in cat_rows], [p for p, _ in cat_rows], (len(vocab.categories), n_papers)
        )
        self.known_category = np.array([bool(p.categories) for p in self.papers], dtype=bool)
        author_rows = [
            (p, vocab.authors[author_key(a)])
            for p, paper in enumerate(self.papers)
            for a in paper.authors[:MAX_AUTHORS]
            if author_key(a) in vocab.authors
        ]
        self.authors_t = _csr(
            [a for _, a in author_rows], [p for p, _ in author_rows], (len(vocab.authors), n_papers)
        )

    @property
    def n_papers(self) -> int:
        """How many papers the index holds."""
        return len(self.papers)

    @functools.cached_property
    def groups_t(self) -> tuple[Any, Any]:
        """groups × papers in float32: each group's BM25F relevance, and its evidence points
        (readers' own topics' keyword sums, :mod:`newsletter.rank.own_rows`): dense arrays
        while small (as ``boosted_t``), else CSR."""
        if isinstance(self.points_t, np.ndarray):
            return (
                np.ascontiguousarray(self.weights.T.toarray(), dtype=np.float32),
                self.points_t,
            )
        return (
            sp.csr_matrix(self.weights.T, dtype=np.float32),
            sp.csr_matrix(self.evidence.T, dtype=np.float32),
        )
