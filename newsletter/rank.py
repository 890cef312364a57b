"""Ranking: which new papers each topic wants, best first, each with a reason.

Topics are the operator's; subscribers pick among them. So a run scores every topic against every
new paper once (:class:`Ranker`), and a subscriber's digest is a cheap merge of the chosen topics'
lists minus what that subscriber was already sent.

The scorer itself is general: any number of *rows* (a row is one set of rules: a topic, or one
subscriber's keywords) against any number of papers, with sparse matrices, in blocks of rows so
memory stays bounded (:func:`compile_rules`, :class:`PaperIndex`, :func:`score_block`,
:func:`top_n`).

How a paper scores for a row (``docs/topics.md`` says the same for operators):

* **Relevance** is BM25F over two fields, title (weight 3) and abstract (weight 1), with the
  standard ``k1 = 1.2`` and ``b = 0.75``. Each keyword entry is one query term; its aliases
  (``[MoE, mixture of experts]``) count as one term (term frequencies add up, document frequency is
  that of any alias). Multi-word keywords match as phrases. Matching is on normalized tokens:
  case, accents, hyphens and possessives are ignored, words match whole (``NAS`` never matches
  "nasal") and a plural ``s`` is dropped (``GNN`` matches "GNNs"). A followed author adds 3, and a
  topic without keywords gives 1 to every paper in its categories.
* **Filters**: every ``all`` entry must occur, no ``exclude`` entry may occur, and the paper must
  be in one of the ``categories`` when the topic lists some (papers with no known category, such
  as blog posts, are not filtered out). Relevance below ``min_score`` drops the paper.
* **Trending** multiplies the relevance of papers that passed: ``1 + 0.2·ln(1+upvotes) +
  0.1·ln(1+comments) + 0.2·ln(1+upvotes per hour) + 0.1·(extra sources, at most 3)``, times a
  recency decay with a half-life of 3 days from the publication date (else first seen). A paper
  with zero relevance scores zero whatever its upvotes.

Pure: papers, rules and ``now`` in; scores and ranked items out.
"""

from __future__ import annotations

import heapq
import math
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from newsletter.config import TopicSettings
from newsletter.models import DigestItem, Paper, TopicSection

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# BM25F: the textbook constants, not fitted to any data set.
K1 = 1.2
B = 0.75
TITLE_WEIGHT = 3.0
ABSTRACT_WEIGHT = 1.0
AUTHOR_SCORE = 3.0
"""Relevance a followed author adds: about one strong title match."""
CATEGORY_SCORE = 1.0
"""Relevance of a paper in a keyword-less topic's categories."""
# Trending: a multiplier on relevance, so it lifts relevant papers and never rescues others.
UPVOTE_WEIGHT = 0.2
COMMENT_WEIGHT = 0.1
VELOCITY_WEIGHT = 0.2
SOURCE_WEIGHT = 0.1
MAX_EXTRA_SOURCES = 3
HALF_LIFE_HOURS = 72.0

DENSE_LIMIT = 8_000_000
"""Keep the papers × terms weight matrix dense for scoring while it has at most this many cells."""


# ---------------------------------------------------------------------------- text


_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b")
_TOKEN = re.compile(r"[^\W_]+")


@lru_cache(maxsize=65536)
def stem(token: str) -> str:
    """A conservative plural stemmer (Harman's S-stemmer, for lowercase tokens longer than 3)."""
    if len(token) <= 3 or not token.endswith("s") or not token[-2].isalpha():
        return token
    if token.endswith("ies") and not token.endswith(("eies", "aies")) and len(token) > 4:
        return token[:-3] + "y"
    if token.endswith("sses"):
        return token[:-2]
    if token.endswith(("ss", "is")) or (token.endswith("us") and len(token) > 4):
        return token  # class, analysis, status (but "gpus" is a plural)
    return token[:-1]


@lru_cache(maxsize=65536)
def _word(token: str) -> str:
    if len(token) >= 3 and token[-1] == "s" and token[:-1].isupper():
        return token[:-1].lower()  # an acronym's plural: GPUs, LLMs, CPUs
    return stem(token.casefold())


def _strip(text: str) -> str:
    if not text.isascii():
        text = "".join(
            c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)
        )
    return _POSSESSIVE.sub("", text)


def fold(text: str) -> str:
    """Lowercase, accents and possessives removed: the text every matcher sees."""
    return _strip(text).casefold()


def tokenize(text: str) -> list[str]:
    """Normalized, plural-stemmed word tokens; punctuation and hyphens separate words."""
    return [_word(t) for t in _TOKEN.findall(_strip(text))]


def phrase_terms(phrase: str) -> tuple[tuple[str, ...], ...]:
    """The token sequences a keyword matches: itself, and for a hyphenated word its closed form.

    ``pre-training`` matches "pre-training", "pre training" and "pretraining".
    """
    words = tuple(tokenize(phrase))
    if not words:
        return ()
    out = [words]
    if "-" in phrase:
        closed = tuple(tokenize(re.sub(r"(?<=\w)-(?=\w)", "", phrase)))
        if closed and closed != words:
            out.append(closed)
    return tuple(out)


def author_key(name: str) -> str:
    return " ".join(_TOKEN.findall(fold(name)))


def category_key(name: str) -> str:
    return name.strip().casefold()


# ---------------------------------------------------------------------------- rules


Group = tuple[str, ...]
"""One keyword entry: its aliases as the operator wrote them."""


def _groups(entries: Iterable[str | list[str]]) -> tuple[Group, ...]:
    return tuple((e,) if isinstance(e, str) else tuple(e) for e in entries)


SECTIONS_CACHE = 8192
"""Distinct (topics, relevant exclusions) whose sections a ranker keeps (see ``sections``)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the scorer: what a topic (or one subscriber's keyword set) asks for."""

    keywords: tuple[Group, ...] = ()
    required: tuple[Group, ...] = ()
    exclude: tuple[Group, ...] = ()
    categories: tuple[str, ...] = ()
    authors: tuple[str, ...] = ()
    min_score: float = 0.0

    @classmethod
    def from_topic(cls, topic: TopicSettings) -> Rule:
        return cls(
            keywords=_groups(topic.keywords),
            required=_groups(topic.all),
            exclude=_groups(topic.exclude),
            categories=tuple(topic.categories),
            authors=tuple(topic.authors),
            min_score=topic.min_score,
        )


class Vocabulary:
    """Terms (token sequences), groups (alias sets of terms), categories and authors seen in rows."""

    def __init__(self) -> None:
        self.terms: dict[tuple[str, ...], int] = {}
        self.groups: dict[tuple[int, ...], int] = {}
        self.categories: dict[str, int] = {}
        self.authors: dict[str, int] = {}
        self._by_text: dict[Group, int] = {}
        self._alias_terms: dict[str, tuple[int, ...]] = {}

    def alias_terms(self, alias: str) -> tuple[int, ...]:
        """Term ids of one alias (adding them)."""
        found = self._alias_terms.get(alias)
        if found is None:
            found = tuple(self.terms.setdefault(t, len(self.terms)) for t in phrase_terms(alias))
            self._alias_terms[alias] = found
        return found

    def group(self, aliases: Group) -> int:
        """The id of an alias set; the same set of terms is one group however it was written."""
        gid = self._by_text.get(aliases)
        if gid is None:
            term_ids = tuple(sorted({t for a in aliases for t in self.alias_terms(a)}))
            gid = self.groups.setdefault(term_ids, len(self.groups))
            self._by_text[aliases] = gid
        return gid

    def category(self, name: str) -> int:
        return self.categories.setdefault(category_key(name), len(self.categories))

    def author(self, name: str) -> int:
        return self.authors.setdefault(author_key(name), len(self.authors))

    def term_group_matrix(self) -> sp.csr_matrix:
        rows: list[int] = []
        cols: list[int] = []
        for term_ids, gid in self.groups.items():
            rows.extend(term_ids)
            cols.extend([gid] * len(term_ids))
        data = np.ones(len(rows))
        return sp.csr_matrix((data, (rows, cols)), shape=(len(self.terms), len(self.groups)))


def _csr(rows: list[int], cols: list[int], shape: tuple[int, int]) -> sp.csr_matrix:
    m = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=shape)
    m.sum_duplicates()
    m.data[:] = 1.0
    return m


@dataclass(frozen=True)
class Queries:
    """Rows compiled to sparse matrices over a :class:`Vocabulary` (one row per rule)."""

    vocab: Vocabulary
    scoring: sp.csr_matrix
    """rows × groups: keywords and ``all`` entries, the terms relevance sums over."""
    required: sp.csr_matrix
    n_required: IntArray
    exclude: sp.csr_matrix
    categories: sp.csr_matrix
    authors: sp.csr_matrix
    min_score: FloatArray
    category_only: npt.NDArray[np.bool_]
    """Rows without keywords: being in one of their categories is the match."""

    @property
    def n_rows(self) -> int:
        return int(self.scoring.shape[0])


def compile_rules(rules: Sequence[Rule], vocab: Vocabulary | None = None) -> Queries:
    """Turn rules into sparse row matrices; terms, categories and authors go into ``vocab``."""
    v = vocab or Vocabulary()
    sr: list[int] = []
    sc: list[int] = []
    rr: list[int] = []
    rc: list[int] = []
    er: list[int] = []
    ec: list[int] = []
    cr: list[int] = []
    cc: list[int] = []
    ar: list[int] = []
    ac: list[int] = []
    n = len(rules)
    n_required = np.zeros(n, dtype=np.int64)
    min_score = np.zeros(n)
    category_only = np.zeros(n, dtype=bool)
    group = v.group
    for i, rule in enumerate(rules):
        for g in rule.keywords:
            sr.append(i)
            sc.append(group(g))
        if rule.required:
            req = {group(g) for g in rule.required}
            n_required[i] = len(req)
            for gid in req:
                rr.append(i)
                rc.append(gid)
                sr.append(i)
                sc.append(gid)
        for g in rule.exclude:
            er.append(i)
            ec.append(group(g))
        for c in rule.categories:
            cr.append(i)
            cc.append(v.category(c))
        for a in rule.authors:
            ar.append(i)
            ac.append(v.author(a))
        min_score[i] = rule.min_score
        category_only[i] = not rule.keywords and not rule.required and bool(rule.categories)
    g_n = len(v.groups)
    return Queries(
        vocab=v,
        scoring=_csr(sr, sc, (n, g_n)),
        required=_csr(rr, rc, (n, g_n)),
        n_required=n_required,
        exclude=_csr(er, ec, (n, g_n)),
        categories=_csr(cr, cc, (n, len(v.categories))),
        authors=_csr(ar, ac, (n, len(v.authors))),
        min_score=min_score,
        category_only=category_only,
    )


# ---------------------------------------------------------------------------- papers


def trend_factor(paper: Paper) -> float:
    """The trending multiplier (≥ 1) from upvotes, comments, upvote velocity and sources."""
    extra_sources = min(MAX_EXTRA_SOURCES, max(0, len(set(paper.sources)) - 1))
    return (
        1.0
        + UPVOTE_WEIGHT * math.log1p(max(0, paper.upvotes or 0))
        + COMMENT_WEIGHT * math.log1p(max(0, paper.comments or 0))
        + VELOCITY_WEIGHT * math.log1p(max(0.0, paper.upvote_velocity or 0.0))
        + SOURCE_WEIGHT * extra_sources
    )


def age_hours(paper: Paper, now: datetime) -> float:
    when = paper.published or paper.first_seen
    return max(0.0, (now - when).total_seconds() / 3600.0)


def recency_factor(paper: Paper, now: datetime) -> float:
    """``0.5 ** (age / 3 days)``: today's paper 1, three days old 0.5."""
    return float(0.5 ** (age_hours(paper, now) / HALF_LIFE_HOURS))


class PaperIndex:
    """The run's papers as matrices over a vocabulary: BM25F weights, presence, boosts."""

    def __init__(self, papers: Sequence[Paper], vocab: Vocabulary, now: datetime) -> None:
        self.papers = tuple(papers)
        n_papers = len(self.papers)
        n_terms = len(vocab.terms)
        terms = vocab.terms
        starts: dict[str, list[int]] = {}
        for seq in terms:
            if len(seq) > 1:
                starts.setdefault(seq[0], [])
                if len(seq) not in starts[seq[0]]:
                    starts[seq[0]].append(len(seq))
        singles = {seq[0]: tid for seq, tid in terms.items() if len(seq) == 1}
        fields: list[list[tuple[int, int, int]]] = [[], []]  # (paper, term, tf) per field
        lengths = np.zeros((2, n_papers))
        for p, paper in enumerate(self.papers):
            for f, text in enumerate((paper.title, paper.abstract)):
                toks = tokenize(text)
                lengths[f, p] = len(toks)
                counts: Counter[int] = Counter()
                for tok, k in Counter(toks).items():  # single words: count once per distinct word
                    tid = singles.get(tok)
                    if tid is not None:
                        counts[tid] += k
                for i in [i for i, tok in enumerate(toks) if tok in starts]:  # phrases
                    for size in starts[toks[i]]:
                        if i + size > len(toks):
                            continue  # a cut-off slice would match a shorter phrase
                        tid = terms.get(tuple(toks[i : i + size]))
                        if tid is not None:
                            counts[tid] += 1
                fields[f].extend((p, t, c) for t, c in counts.items())

        def tf(entries: list[tuple[int, int, int]]) -> sp.csr_matrix:
            if not entries:
                return sp.csr_matrix((n_papers, n_terms))
            arr = np.asarray(entries, dtype=np.int64)
            return sp.csr_matrix(
                (arr[:, 2].astype(np.float64), (arr[:, 0], arr[:, 1])), shape=(n_papers, n_terms)
            )

        self.title_tf = tf(fields[0])
        self.abstract_tf = tf(fields[1])
        to_groups = vocab.term_group_matrix()
        avg = np.maximum(lengths.mean(axis=1) if n_papers else np.ones(2), 1.0)
        norm_t = TITLE_WEIGHT / (1 - B + B * lengths[0] / avg[0]) if n_papers else np.zeros(0)
        norm_a = ABSTRACT_WEIGHT / (1 - B + B * lengths[1] / avg[1]) if n_papers else np.zeros(0)
        title_g = sp.diags(norm_t) @ (self.title_tf @ to_groups)
        abstract_g = sp.diags(norm_a) @ (self.abstract_tf @ to_groups)
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
        self.trend: FloatArray = np.array([trend_factor(p) for p in self.papers])
        self.recency: FloatArray = np.array([recency_factor(p, now) for p in self.papers])
        self.boost: FloatArray = self.trend * self.recency
        boosted = sp.diags(self.boost) @ weights
        self.boosted_t: Any = (
            boosted.T.toarray()
            if n_groups * n_papers <= DENSE_LIMIT
            else sp.csr_matrix(boosted.T.tocsr())
        )
        """groups × papers, relevance × boost: dense while small (faster), else sparse."""
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
            for a in paper.authors
            if author_key(a) in vocab.authors
        ]
        self.authors_t = _csr(
            [a for _, a in author_rows], [p for p, _ in author_rows], (len(vocab.authors), n_papers)
        )

    @property
    def n_papers(self) -> int:
        return len(self.papers)


# ---------------------------------------------------------------------------- scoring


def _dense(m: Any) -> FloatArray:
    return np.asarray(m.toarray() if sp.issparse(m) else m, dtype=np.float64)


def score_block(q: Queries, index: PaperIndex, start: int, stop: int) -> FloatArray:
    """Final scores (relevance × trending × recency, 0 = no match) for rows ``start:stop``."""
    scores = _dense(q.scoring[start:stop] @ index.boosted_t)
    authors = q.authors[start:stop]
    if authors.nnz:
        hits = _dense(authors @ index.authors_t)
        scores += AUTHOR_SCORE * hits * index.boost
    cats = q.categories[start:stop]
    if cats.nnz:
        rows = np.flatnonzero(np.diff(cats.indptr))
        in_cat = _dense(cats[rows] @ index.categories_t) > 0
        only = q.category_only[start:stop][rows]
        if only.any():
            scores[rows[only]] += CATEGORY_SCORE * in_cat[only] * index.boost
        scores[rows] *= in_cat | ~index.known_category
    required = q.n_required[start:stop]
    if required.any():
        rows = np.flatnonzero(required)
        found = _dense(q.required[start:stop][rows] @ index.presence_t)
        scores[rows] *= found >= required[rows, None]
    exclude = q.exclude[start:stop]
    if exclude.nnz:
        rows = np.flatnonzero(np.diff(exclude.indptr))
        scores[rows] *= _dense(exclude[rows] @ index.presence_t) == 0
    floor = q.min_score[start:stop]
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


@dataclass(frozen=True)
class TopN:
    """Per row, the best ``n`` papers (index into the run's papers; -1 = none) and their scores."""

    ids: npt.NDArray[np.int64]
    scores: FloatArray


def _top_rows(scores: FloatArray, n: int) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """Each row's ``n`` best columns with a positive score, ordered by (score desc, column asc).

    Exact, without a per-row partition of every column (the slow part at 2,000 papers): each row
    is cut into ``2n`` column ranges, and the ``n``-th largest of the ranges' maxima is a lower
    bound of the row's ``n``-th largest score (``n`` different ranges each hold a value at least
    that large). Every score at or above the bound is a candidate, so the top ``n``, ties
    included, are among them; the candidates (a few dozen per row) are then sorted exactly.
    """
    rows, cols = scores.shape
    k = 2 * n
    if cols >= 4 * k:
        bounds = np.linspace(0, cols, k + 1).astype(np.intp)[:-1]
        maxima = np.maximum.reduceat(scores, bounds, axis=1)
        bound = -np.partition(-maxima, n - 1, axis=1)[:, n - 1]
    else:
        bound = np.zeros(rows)
    bound = np.maximum(bound, np.finfo(np.float64).tiny)  # only positive scores are matches
    r, c = np.nonzero(scores >= bound[:, None])  # row-major: columns ascend within a row
    v = scores[r, c]
    # Two stable sorts: by score descending, then by row (radix sort on small ints), so within a
    # row the order is score descending, then column ascending.
    order = np.argsort(-v, kind="stable")
    row_keys = r[order].astype(np.int16 if rows <= np.iinfo(np.int16).max else np.int64)
    order = order[np.argsort(row_keys, kind="stable")]
    r, c, v = r[order], c[order], v[order]
    counts = np.bincount(r, minlength=rows)
    pos = np.arange(len(r)) - np.repeat(np.cumsum(counts) - counts, counts)
    keep = pos < n
    ids = np.full((rows, n), -1, dtype=np.int64)
    vals = np.zeros((rows, n))
    ids[r[keep], pos[keep]] = c[keep]
    vals[r[keep], pos[keep]] = v[keep]
    return ids, vals


def top_n(
    q: Queries,
    index: PaperIndex,
    n: int,
    *,
    block: int = 1000,
    exclude: sp.csr_matrix | None = None,
    threads: int | None = None,
) -> TopN:
    """Each row's best ``n`` papers, computed ``block`` rows at a time (bounded memory).

    ``exclude`` (rows × papers, nonzero = already sent) removes papers per row. Ties break by
    paper order, so the result is deterministic. Blocks run on ``threads`` threads (default: one
    per core, at most 4): the sparse products and sorts release the GIL, and each block writes
    its own rows, so the result does not depend on the thread count.
    """
    ids = np.full((q.n_rows, n), -1, dtype=np.int64)
    vals = np.zeros((q.n_rows, n))

    def run(start: int) -> None:
        stop = min(q.n_rows, start + block)
        scores = score_block(q, index, start, stop)
        if exclude is not None:
            sent = exclude[start:stop].tocoo()
            scores[sent.row, sent.col] = 0.0
        ids[start:stop], vals[start:stop] = _top_rows(scores, n)

    starts = range(0, q.n_rows, block)
    workers = min(threads or min(4, os.cpu_count() or 1), len(starts))
    if workers <= 1:
        for start in starts:
            run(start)
    else:
        with ThreadPoolExecutor(workers) as pool:
            for _ in pool.map(run, starts):
                pass  # re-raises a block's error here
    return TopN(ids, vals)


# ---------------------------------------------------------------------------- the run's ranker


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why one paper scored what it did for one topic (``newsletter rank --explain``)."""

    topic: str
    relevance: float
    trend: float
    recency: float
    age_hours: float
    terms: tuple[tuple[str, str, float], ...]
    """(field, label, contribution) per matched keyword entry, best first."""
    authors: tuple[str, ...]
    categories: tuple[str, ...]

    def lines(self) -> list[str]:
        out = [f"relevance {self.relevance:.3f}"]
        for field, label, value in self.terms:
            out.append(f"  {value:6.3f}  {field}: {label}")
        if self.authors:
            out.append(f"  {AUTHOR_SCORE:6.3f}  by {', '.join(self.authors)}")
        if self.categories:
            out.append(f"          in {', '.join(self.categories)}")
        out.append(
            f"× trending {self.trend:.3f} × recency {self.recency:.3f} "
            f"({self.age_hours / 24:.1f} days old)"
        )
        return out


def _within(small: tuple[str, ...], big: tuple[str, ...]) -> bool:
    n = len(small)
    return any(big[i : i + n] == small for i in range(len(big) - n + 1))


def _fmt_count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Ranker:
    """Scores every topic against a run's papers once; then builds digests per subscriber."""

    def __init__(
        self, topics: Sequence[TopicSettings], papers: Sequence[Paper], now: datetime
    ) -> None:
        self.now = now
        self.topics: dict[str, TopicSettings] = {t.name: t for t in topics}
        self._order = {t.name: i for i, t in enumerate(topics)}
        self._rules = [Rule.from_topic(t) for t in topics]
        self.vocab = Vocabulary()
        self.queries = compile_rules(self._rules, self.vocab)
        self.index = PaperIndex(papers, self.vocab, now)
        self.scores = score_all(self.queries, self.index)
        self.ranked: dict[str, tuple[DigestItem, ...]] = {}
        papers_t = self.index.papers
        for i, topic in enumerate(topics):
            row = self.scores[i]
            hits = np.flatnonzero(row > 0)
            order = sorted(hits, key=lambda j: (-round(float(row[j]), 9), papers_t[j].key))
            self.ranked[topic.name] = tuple(
                DigestItem(
                    papers_t[j],
                    topic.name,
                    round(float(row[j]), 6),
                    self.reason(topic.name, int(j)),
                )
                for j in order
            )

        # The order sections() merges in: the stored (6-digit) score, then the paper key.
        self._pool_order: dict[str, tuple[DigestItem, ...]] = {
            name: tuple(sorted(items, key=lambda i: (-i.score, i.paper.key)))
            for name, items in self.ranked.items()
        }
        self._pool_ids = {
            name: frozenset(i.paper.id for i in items) for name, items in self.ranked.items()
        }
        # Readers with the same topics (and the same already-sent papers among them) get the
        # same sections: picked once, then reused. Bounded; entries are a few references each.
        self._sections: dict[tuple[object, ...], tuple[TopicSection, ...]] = {}

    def _position(self, paper: Paper) -> int:
        for j, p in enumerate(self.index.papers):
            if p.id == paper.id:
                return j
        raise KeyError(paper.id)

    def explanation(self, topic_name: str, paper_index: int) -> Explanation:
        """The parts of a topic × paper score, for reasons and ``--explain``."""
        i = self._order[topic_name]
        rule = self._rules[i]
        j = paper_index
        paper = self.index.papers[j]
        vocab = self.vocab
        w = self.index.weights
        lo, hi = w.indptr[j], w.indptr[j + 1]
        row_w = dict(zip(w.indices[lo:hi].tolist(), w.data[lo:hi].tolist(), strict=True))
        title_tf = self.index.title_tf
        in_title = set(title_tf.indices[title_tf.indptr[j] : title_tf.indptr[j + 1]])
        abstract_tf = self.index.abstract_tf
        in_abstract = set(abstract_tf.indices[abstract_tf.indptr[j] : abstract_tf.indptr[j + 1]])
        terms: list[tuple[str, str, float, int]] = []
        seen: set[int] = set()
        for pos, g in enumerate((*rule.keywords, *rule.required)):
            gid = vocab.group(g)
            if gid in seen or gid not in row_w:
                continue
            seen.add(gid)
            field, label = "abstract", g[0]
            for alias in g:
                ids = set(vocab.alias_terms(alias))
                if ids & in_title:
                    field, label = "title", alias
                    break
            else:
                for alias in g:
                    if set(vocab.alias_terms(alias)) & in_abstract:
                        label = alias
                        break
            terms.append((field, label, float(row_w[gid]), pos))
        terms.sort(key=lambda t: (-round(t[2], 9), t[3]))
        wanted = {author_key(a) for a in rule.authors}
        authors = tuple(a for a in paper.authors if author_key(a) in wanted)
        paper_cats = {category_key(c) for c in paper.categories}
        cats = tuple(c for c in rule.categories if category_key(c) in paper_cats)
        relevance = sum(t[2] for t in terms) + AUTHOR_SCORE * len(authors)
        if self.queries.category_only[i] and cats:
            relevance += CATEGORY_SCORE
        return Explanation(
            topic=topic_name,
            relevance=relevance,
            trend=float(self.index.trend[j]),
            recency=float(self.index.recency[j]),
            age_hours=age_hours(paper, self.now),
            terms=tuple((f, label, v) for f, label, v, _ in terms),
            authors=authors,
            categories=cats,
        )

    def reason(self, topic_name: str, paper_index: int) -> str:
        """A short, deterministic 'why': "title: mixture of experts · cs.LG · 42 upvotes"."""
        ex = self.explanation(topic_name, paper_index)
        paper = self.index.papers[paper_index]
        parts: list[str] = []
        shown: list[tuple[str, str]] = []
        for field, label, _ in ex.terms:
            words = tuple(tokenize(label))
            if any(_within(words, tuple(tokenize(other))) for _, other in shown):
                continue  # "serving" says nothing more than "LLM serving" already did
            shown.append((field, label))
            if len(shown) == 3:
                break
        for field in ("title", "abstract"):
            labels = [label for f, label in shown if f == field]
            if labels:
                parts.append(f"{field}: {', '.join(labels)}")
        if ex.authors:
            parts.append("by " + ", ".join(ex.authors))
        parts.extend(ex.categories)
        if paper.upvotes:
            parts.append(_fmt_count(paper.upvotes, "upvote"))
        if paper.upvote_velocity and paper.upvote_velocity >= 1:
            parts.append(f"+{paper.upvote_velocity:.0f}/h")
        n_sources = len(set(paper.sources))
        if n_sources > 1:
            parts.append(f"{n_sources} sources")
        return " · ".join(parts)

    def explain(self, item: DigestItem) -> Explanation:
        return self.explanation(item.topic, self._position(item.paper))

    def sections(
        self,
        topic_names: Sequence[str],
        *,
        exclude_ids: Collection[int] = (),
        max_items: int = 10,
        group_by_topic: bool = True,
    ) -> tuple[TopicSection, ...]:
        """A subscriber's digest: their topics' best papers, none twice, none already sent.

        Grouped: a paper wanted by several topics goes to the one where it scores best (while that
        topic has room); each topic shows up to its ``max_items`` (else ``max_items``). Merged: one
        list of at most ``max_items``, still honouring each topic's own ``max_items``.
        """
        names = tuple(n for n in dict.fromkeys(topic_names) if n in self.topics)
        excluded = exclude_ids if isinstance(exclude_ids, (set, frozenset)) else set(exclude_ids)
        # The result depends on the exclusions only through the papers these topics can offer.
        pools = [self._pool_ids[n] for n in names]
        relevant = frozenset(p for p in excluded if any(p in pool for pool in pools))
        key = (names, relevant, max_items, group_by_topic)
        hit = self._sections.get(key)
        if hit is None:
            if len(self._sections) >= SECTIONS_CACHE:
                self._sections.clear()
            hit = self._sections[key] = self._pick(names, relevant, max_items, group_by_topic)
        return hit

    def _pick(
        self,
        names: tuple[str, ...],
        excluded: frozenset[int],
        max_items: int,
        group_by_topic: bool,
    ) -> tuple[TopicSection, ...]:
        # Each topic's list is already in pool order (score, then key), so a lazy k-way merge
        # yields the same sequence as sorting the whole pool, and stops as soon as every topic
        # is full: a subscriber costs a few dozen items, not every paper their topics match.
        pool = heapq.merge(
            *(
                ((item.score, item.paper.key, k, item) for item in self._pool_order[name])
                for k, name in enumerate(names)
            ),
            key=lambda e: (-e[0], e[1], e[2]),
        )
        limits = {n: self.topics[n].max_items or max_items for n in names}
        chosen: dict[str, list[DigestItem]] = {n: [] for n in names}
        open_topics = sum(1 for n in names if limits[n] > 0)
        taken: set[int] = set()
        total = 0
        for _, _, _, item in pool:
            if open_topics == 0 or (not group_by_topic and total >= max_items):
                break
            pid = item.paper.id
            if pid in excluded or pid in taken:
                continue
            mine = chosen[item.topic]
            if len(mine) >= limits[item.topic]:
                continue
            taken.add(pid)
            mine.append(item)
            total += 1
            if len(mine) == limits[item.topic]:
                open_topics -= 1
        if group_by_topic:
            return tuple(TopicSection(n, self.topics[n].label, tuple(chosen[n])) for n in names)
        merged = sorted(
            (i for n in names for i in chosen[n]), key=lambda i: (-i.score, i.paper.key)
        )
        return (TopicSection("all", "Your topics", tuple(merged)),)
