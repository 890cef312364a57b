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

Pure: papers, rules and ``now`` in; scores and ranked items out. Reader profiles (votes and
``like:`` papers) live in :mod:`newsletter.profiles`, words in :mod:`newsletter.text`.

Why still over 800 lines: the general scorer (rules, paper index, block scoring) and the run's
``Ranker`` (cut, reasons, explanations, per-reader sections) share the same matrices and
constants, and the explanation must mirror the scorer term by term; keeping them side by side
is what keeps them equal (a property test checks it against the obvious loop).
"""

from __future__ import annotations

import heapq
import math
import os
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field as dc_field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from newsletter.config import TopicSettings
from newsletter.keyword_rows import compile_keywords, csr_rows
from newsletter.models import DigestItem, Paper, TopicSection
from newsletter.profiles import MAX_VOTES, ProfileRows, ProfileSpace, Vote
from newsletter.semantic.space import MeaningSpace
from newsletter.text import _TOKEN as _WORD_RE
from newsletter.text import (
    KNOWN_ACRONYMS,
    author_key,
    category_key,
    compound_parts,
    fold,
    phrase_terms,
    read_defined,
    stem,
    tokenize,
)
from newsletter.text import _word as word_key

if TYPE_CHECKING:
    from newsletter.semantic.vectors import Semantic

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
BAG_TF = 0.5
"""A title with every word of a phrase keyword, out of order, counts this many mentions."""
MIN_EVIDENCE = 2
"""A match needs more than one passing mention (see ``PaperIndex.evidence_t``)."""
RELATIVE_CUT = 0.15
"""A topic shows papers whose relevance is at least this share of its best paper's today."""
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


# ---------------------------------------------------------------------------- text


# The text functions live in newsletter/text.py (config validation uses them too); these names
# stay importable from here.
__all__ = [
    "Ranker",
    "author_key",
    "category_key",
    "fold",
    "phrase_terms",
    "stem",
    "tokenize",
]


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
        """The rule a configured topic ranks by (keywords, required and excluded groups)."""
        return cls(
            keywords=_groups(topic.keywords),
            required=_groups(topic.all),
            exclude=_groups(topic.exclude),
            categories=tuple(topic.categories),
            authors=tuple(topic.authors),
            min_score=topic.min_score,
        )


Tokens = tuple[str, ...]


@dataclass(frozen=True)
class Acronyms:
    """Acronym ↔ long-form pairs a run matches keywords with.

    ``known`` (the shipped list) works both ways: ``MoE`` finds "mixture of experts" and the
    other way round. ``learned`` (definitions found in the run's papers) only widens an acronym
    the operator wrote (``SD`` finds "speculative decoding" when papers define it so): an
    acronym in a paper that does not define it can mean anything, so a long-form keyword is not
    widened to a learned acronym. Papers that define an acronym are read with its long form in
    place of each later use (:class:`Documents`), so they match the long form anyway.
    """

    forward: dict[str, tuple[tuple[Tokens, str], ...]] = dc_field(default_factory=dict)
    """acronym key → (long-form tokens, display) it expands to."""
    backward: dict[Tokens, tuple[str, str]] = dc_field(default_factory=dict)
    """long-form tokens → (acronym key, display) it contracts to (shipped pairs only)."""

    @classmethod
    def build(cls, learned: dict[str, Counter[tuple[Tokens, str]]] | None = None) -> Acronyms:
        """The shipped acronym pairs plus those ``learned`` from the run's papers."""
        forward: dict[str, dict[Tokens, str]] = {}
        backward: dict[Tokens, tuple[str, str]] = {}
        for short, longs in KNOWN_ACRONYMS.items():
            key = word_key(short)
            for long in longs:
                for toks in phrase_terms(long):
                    forward.setdefault(key, {}).setdefault(toks, long)
                    backward.setdefault(toks, (key, short))
        for key, counts in (learned or {}).items():
            by_tokens: Counter[Tokens] = Counter()
            for (toks, _), n in counts.items():
                by_tokens[toks] += n
            for toks, _ in by_tokens.most_common(LEARNED_SENSES):
                display = max((d for t, d in counts if t == toks), key=lambda d: counts[toks, d])
                forward.setdefault(key, {}).setdefault(toks, display)
        return cls({k: tuple(v.items()) for k, v in forward.items()}, backward)

    def variants(self, alias: str) -> list[tuple[Tokens, str]]:
        """Other ways papers write ``alias``: (tokens, display), one substitution each."""
        words = _WORD_RE.findall(alias)
        keys = [word_key(w) for w in words]
        out: list[tuple[Tokens, str]] = []
        for i, key in enumerate(keys):
            for toks, display in self.forward.get(key, ()):
                new = (*keys[:i], *toks, *keys[i + 1 :])
                out.append((tuple(new), " ".join([*words[:i], display, *words[i + 1 :]])))
        for toks, (key, short) in self.backward.items():
            n = len(toks)
            for i in range(len(keys) - n + 1):
                if tuple(keys[i : i + n]) == toks:
                    new = (*keys[:i], key, *keys[i + n :])
                    out.append((tuple(new), " ".join([*words[:i], short, *words[i + n :]])))
        return out


NO_ACRONYMS = Acronyms()
LEARNED_SENSES = 4
"""An acronym the operator wrote also matches up to this many long forms papers define it as."""


class Vocabulary:
    """Terms (token sequences), groups (alias sets of terms), categories and authors seen in rows.

    With ``acronyms``, an alias also brings in the terms of its acronym variants
    (``LLM inference`` → "large language model inference"); ``expanded`` remembers which terms
    came that way, for explanations.
    """

    def __init__(self, acronyms: Acronyms = NO_ACRONYMS) -> None:
        self.terms: dict[tuple[str, ...], int] = {}
        self.groups: dict[tuple[int, ...], int] = {}
        self.categories: dict[str, int] = {}
        self.authors: dict[str, int] = {}
        self.acronyms = acronyms
        self.expanded: dict[int, tuple[str, str]] = {}
        """term id → (the alias it widens, how papers write it)."""
        self._by_text: dict[tuple[Group, frozenset[int]], int] = {}
        self._alias_terms: dict[str, tuple[int, ...]] = {}
        self._variant_terms: dict[str, tuple[int, ...]] = {}

    def _term(self, toks: tuple[str, ...]) -> int:
        return self.terms.setdefault(toks, len(self.terms))

    def alias_terms(self, alias: str) -> tuple[int, ...]:
        """Term ids of one alias as written (adding them)."""
        found = self._alias_terms.get(alias)
        if found is None:
            found = tuple(self._term(t) for t in phrase_terms(alias))
            self._alias_terms[alias] = found
        return found

    def variant_terms(self, alias: str) -> tuple[int, ...]:
        """Term ids of an alias's acronym variants that it does not already match."""
        found = self._variant_terms.get(alias)
        if found is None:
            own = set(self.alias_terms(alias))
            ids: list[int] = []
            for toks, display in self.acronyms.variants(alias):
                tid = self._term(toks)
                if tid not in own and tid not in ids:
                    ids.append(tid)
                    self.expanded.setdefault(tid, (alias, display))
            found = self._variant_terms[alias] = tuple(ids)
        return found

    def group(self, aliases: Group, *, taken: frozenset[int] = frozenset()) -> int:
        """The id of an alias set; the same set of terms is one group however it was written.

        Acronym variants join the group unless they are in ``taken`` (terms another entry of
        the same rule names itself, which would otherwise count twice).
        """
        key = (aliases, taken)
        gid = self._by_text.get(key)
        if gid is None:
            own = {t for a in aliases for t in self.alias_terms(a)}
            extra = {t for a in aliases for t in self.variant_terms(a)} - taken
            term_ids = tuple(sorted(own | extra))
            gid = self.groups.setdefault(term_ids, len(self.groups))
            self._by_text[key] = gid
        return gid

    def category(self, name: str) -> int:
        """The column of an arXiv category (added on first sight)."""
        return self.categories.setdefault(category_key(name), len(self.categories))

    def author(self, name: str) -> int:
        """The column of an author (added on first sight)."""
        return self.authors.setdefault(author_key(name), len(self.authors))

    def term_group_matrix(self) -> sp.csr_matrix:
        """Which term belongs to which keyword group, as a sparse 0/1 matrix."""
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
    row_groups: Sequence[tuple[int, ...]] = ()
    """Per row, the group of each keyword and ``all`` entry, in the rule's order."""

    @property
    def n_rows(self) -> int:
        """How many query rows (topics, or readers' keyword sets) there are."""
        return int(self.scoring.shape[0])


def compile_rules(rules: Sequence[Rule], vocab: Vocabulary | None = None) -> Queries:
    """Turn rules into sparse row matrices; terms, categories and authors go into ``vocab``."""
    v = vocab or Vocabulary()
    if not (v.acronyms.forward or v.acronyms.backward) and not any(r.required for r in rules):
        m = compile_keywords(rules, v)
        return Queries(
            vocab=v,
            scoring=m.scoring,
            required=m.required,
            n_required=m.n_required,
            exclude=m.exclude,
            categories=m.categories,
            authors=m.authors,
            min_score=m.min_score,
            category_only=m.category_only,
            row_groups=m.row_groups,
        )
    return _compile_each(rules, v)


def _compile_each(rules: Sequence[Rule], v: Vocabulary) -> Queries:
    """:func:`compile_rules` rule by rule (any rules, any vocabulary)."""
    # Column lists and per-row lengths of each matrix: one pass, few Python operations per row
    # (100,000 subscribers' rules compile in a fraction of a second).
    sc: list[int] = []
    sl: list[int] = []
    rc: list[int] = []
    rl: list[int] = []
    ec: list[int] = []
    el: list[int] = []
    cc: list[int] = []
    cl: list[int] = []
    ac: list[int] = []
    al: list[int] = []
    n = len(rules)
    row_groups: list[tuple[int, ...]] = []
    expanding = bool(v.acronyms.forward or v.acronyms.backward)
    known: dict[Group, int] = {}

    def plain(g: Group) -> int:
        gid = known.get(g)
        if gid is None:
            gid = known[g] = v.group(g)
        return gid

    for rule in rules:
        group = plain
        if expanding:
            # Terms the rule's entries name themselves: an acronym variant never adds them twice.
            own = frozenset(
                t for g in (*rule.keywords, *rule.required) for a in g for t in v.alias_terms(a)
            )

            def group(g: Group, own: frozenset[int] = own) -> int:
                if not any(v.variant_terms(a) for a in g):
                    return plain(g)  # no acronym variants: nothing can count twice
                return v.group(g, taken=own - {t for a in g for t in v.alias_terms(a)})

        kw_groups = [group(g) for g in rule.keywords]
        if rule.required:
            req_groups = [group(g) for g in rule.required]
            row_groups.append((*kw_groups, *req_groups))
            req = set(req_groups)
            rc.extend(req)
            rl.append(len(req))
            sc.extend(kw_groups)
            sc.extend(req)
            sl.append(len(kw_groups) + len(req))
        else:
            row_groups.append(tuple(kw_groups))
            rl.append(0)
            sc.extend(kw_groups)
            sl.append(len(kw_groups))
        if rule.exclude:
            ec.extend(plain(g) for g in rule.exclude)
        el.append(len(rule.exclude))
        if rule.categories:
            cc.extend(v.category(c) for c in rule.categories)
        cl.append(len(rule.categories))
        if rule.authors:
            ac.extend(v.author(a) for a in rule.authors)
        al.append(len(rule.authors))
    g_n = len(v.groups)
    required = csr_rows(rc, rl, g_n)
    return Queries(
        vocab=v,
        scoring=csr_rows(sc, sl, g_n),
        required=required,
        n_required=np.diff(required.indptr).astype(np.int64),
        exclude=csr_rows(ec, el, g_n),
        categories=csr_rows(cc, cl, len(v.categories)),
        authors=csr_rows(ac, al, len(v.authors)),
        min_score=np.array([r.min_score for r in rules], dtype=np.float64).reshape(n),
        category_only=np.array(
            [not r.keywords and not r.required and bool(r.categories) for r in rules], dtype=bool
        ).reshape(n),
        row_groups=tuple(row_groups),
    )


# ---------------------------------------------------------------------------- papers


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
            (title, abstract), found = read_defined(paper.title, paper.abstract)
            titles.append(title)
            abstracts.append(abstract)
            parts.append(compound_parts(paper.title))
            for key, (_, long) in found.items():
                toks = tuple(tokenize(long))
                learned.setdefault(key, Counter())[(toks, " ".join(long.split()))] += 1
        return cls(tuple(papers), tuple(titles), tuple(abstracts), learned, tuple(parts))


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
        # anything more (in the title, twice or more, or a phrase). See MIN_EVIDENCE.
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
        """papers × groups: the same, by paper."""
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
        """``boosted_t`` rounded to float32, for :func:`top_n`'s first pass (dense case only)."""
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
            for a in paper.authors
            if author_key(a) in vocab.authors
        ]
        self.authors_t = _csr(
            [a for _, a in author_rows], [p for p, _ in author_rows], (len(vocab.authors), n_papers)
        )

    @property
    def n_papers(self) -> int:
        """How many papers the index holds."""
        return len(self.papers)


# ---------------------------------------------------------------------------- scoring


def _dense(m: Any) -> FloatArray:
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
    return _score_rows(q, index, slice(start, stop), extra)


def _score_rows(
    q: Queries,
    index: PaperIndex,
    sel: slice | IntArray,
    extra: tuple[IntArray, FloatArray] | None = None,
) -> FloatArray:
    """:func:`score_block` for the rows ``sel`` (a slice or row numbers); ``extra``'s rows
    count within the selection."""
    scoring = q.scoring[sel]
    scores = _dense(scoring @ index.boosted_t)
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
        hits = _dense(authors @ index.authors_t)
        scores += AUTHOR_SCORE * hits * index.boost
    cats = q.categories[sel]
    if cats.nnz:
        rows = np.flatnonzero(np.diff(cats.indptr))
        in_cat = _dense(cats[rows] @ index.categories_t) > 0
        only = q.category_only[sel][rows]
        if only.any():
            scores[rows[only]] += CATEGORY_SCORE * in_cat[only] * index.boost
        scores[rows] *= in_cat | ~index.known_category
    required = q.n_required[sel]
    if required.any():
        rows = np.flatnonzero(required)
        found = _dense(q.required[sel][rows] @ index.presence_t)
        scores[rows] *= found >= required[rows, None]
    exclude = q.exclude[sel]
    if exclude.nnz:
        rows = np.flatnonzero(np.diff(exclude.indptr))
        scores[rows] *= _dense(exclude[rows] @ index.presence_t) == 0
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
    """The top ``n`` of rows that only have keywords (and exclusions): :func:`_score_rows`
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
            points = _dense(scoring.astype(np.float32) @ index.points_t)
        np.multiply(scores, points >= MIN_EVIDENCE, out=scores)
    exclude = q.exclude[rows]
    if exclude.nnz:
        hit = np.flatnonzero(np.diff(exclude.indptr))
        scores[hit] *= _dense(exclude[hit] @ index.presence_t) == 0
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
        scores = _score_rows(q, index, rows, extra)
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


# ---------------------------------------------------------------------------- the run's ranker


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why one paper scored what it did for one topic (``newsletter rank --explain``)."""

    topic: str
    relevance: float
    trend: float
    recency: float
    age_hours: float
    """Hours since the paper was published (or first seen here, when no date was given)."""
    terms: tuple[tuple[str, str, float], ...]
    """(field, label, contribution) per matched keyword entry, best first; the label is the
    alias found, or for an acronym match the words the paper used."""
    authors: tuple[str, ...]
    categories: tuple[str, ...]
    expansions: tuple[tuple[str, str], ...] = ()
    """(keyword as written, as the paper wrote it) for each acronym match."""
    age_from: str = "published"
    """What ``age_hours`` counts from: ``published``, or ``first seen`` without a date."""
    weak: bool = False
    """Only one passing mention: not enough evidence to show the paper."""
    best: float = 0.0
    """The topic's best relevance today; below ``RELATIVE_CUT`` of it a paper is not shown."""
    like: tuple[str, float] | None = None
    """(title of the closest ``like:`` example, what likeness to the examples adds)."""
    meaning: tuple[str, str, float, float] | None = None
    """Semantic ranking: (the topic's title, the keyword or liked paper nearest in meaning,
    the cosine similarity with the topic's query, what meaning adds to relevance)."""

    @property
    def shown(self) -> bool:
        """Whether the paper makes the digest (relevant, strong enough, not cut)."""
        return (
            self.relevance > 0
            and not self.weak
            and self.relevance >= RELATIVE_CUT * self.best - 1e-9
        )

    def lines(self) -> list[str]:
        """The explanation as ``rank --explain`` prints it, one line per contribution."""
        out = [f"relevance {self.relevance:.3f}"]
        for field, label, value in self.terms:
            out.append(f"  {value:6.3f}  {field}: {label}")
        for alias, written in self.expansions:
            out.append(f"          acronym: {alias!r} matched as {written!r}")
        if self.like:
            out.append(f"  {self.like[1]:6.3f}  like: {self.like[0]}")
        if self.meaning:
            topic, near, sim, part = self.meaning
            nearest = f"; nearest: {near}" if near else ""
            out.append(f"  {part:6.3f}  meaning: similarity {sim:.2f} to {topic}{nearest}")
        if self.authors:
            out.append(f"  {AUTHOR_SCORE:6.3f}  by {', '.join(self.authors)}")
        if self.categories:
            out.append(f"          in {', '.join(self.categories)}")
        if self.weak:
            out.append("          left out: one passing mention in the abstract is too weak")
        elif self.relevance <= 0:
            out.append("          left out: nothing the topic asks for matched")
        elif self.best and self.relevance < RELATIVE_CUT * self.best - 1e-9:
            out.append(
                f"          left out: below {RELATIVE_CUT:.0%} of the topic's best "
                f"relevance today ({self.best:.3f})"
            )
        out.append(
            f"× trending {self.trend:.3f} × recency {self.recency:.3f} "
            f"({self.age_from} {self.age_hours / 24:.1f} days ago)"
        )
        return out


def _within(small: tuple[str, ...], big: tuple[str, ...]) -> bool:
    n = len(small)
    return any(big[i : i + n] == small for i in range(len(big) - n + 1))


def _short(title: str, limit: int = 60) -> str:
    title = " ".join(title.split())
    return title if len(title) <= limit else title[: limit - 1].rstrip() + "…"


def _fmt_count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class Ranker:
    """Scores every topic against a run's papers once; then builds digests per subscriber.

    A topic's list holds the papers with enough evidence (``MIN_EVIDENCE``) whose relevance is
    at least ``RELATIVE_CUT`` of the topic's best today, ordered by relevance × trending ×
    recency; ``left_out`` counts the matches that did not make it.
    """

    def __init__(
        self,
        topics: Sequence[TopicSettings],
        papers: Sequence[Paper],
        now: datetime,
        *,
        examples: Sequence[Paper] = (),
        semantic: Semantic | None = None,
    ) -> None:
        """``examples``: papers that topics' ``like:`` lists and readers' votes name (they may
        be older than the run's papers); only they can shape a profile. ``semantic``: the
        papers', topics' and examples' vectors (in the order given); without it ranking is
        lexical and profiles are tf-idf."""
        self.now = now
        self.topics: dict[str, TopicSettings] = {t.name: t for t in topics}
        self._order = {t.name: i for i, t in enumerate(topics)}
        self._rules = [Rule.from_topic(t) for t in topics]
        docs = Documents.read(papers)
        self.acronyms = Acronyms.build(docs.learned)
        self.vocab = Vocabulary(self.acronyms)
        self.queries = compile_rules(self._rules, self.vocab)
        self.index = PaperIndex(papers, self.vocab, now, docs)
        self._group_terms = {gid: set(terms) for terms, gid in self.vocab.groups.items()}
        self._term_words = {tid: words for words, tid in self.vocab.terms.items()}
        scores = score_all(self.queries, self.index)
        boost = np.maximum(self.index.boost, 1e-12)
        relevance = scores / boost
        self._lexical = relevance.copy()
        """topics × papers: keyword, author and category relevance (passing mentions at 0)."""
        self._passes = self._filter_masks()
        likes = {t.name: tuple(getattr(t, "like", ()) or ()) for t in topics}
        likes = {name: keys for name, keys in likes.items() if keys}
        wanted = set().union(*likes.values()) if likes else set()
        self.space: ProfileSpace | None = None
        self.meaning: MeaningSpace | None = None
        """Papers, topics and examples as embedding vectors (semantic ranking), or None."""
        self._meant: dict[str, FloatArray] = {}
        """Per topic (semantic ranking): what meaning adds to each paper's relevance."""
        self._admitted: dict[str, npt.NDArray[np.bool_]] = {}
        """Per topic (semantic ranking): the papers a keyword or meaning lets in."""
        if semantic is not None and self.index.n_papers and len(topics):
            vectors = {p.key: semantic.papers[j] for j, p in enumerate(self.index.papers)}
            vectors.update(semantic.examples)
            self.meaning = MeaningSpace(
                semantic.papers,
                semantic.topics,
                [likes.get(t.name, ()) for t in topics],
                vectors,
                {p.key: p.title for p in (*examples, *self.index.papers)},
                semantic.keywords,
            )
        if likes or examples:
            self.space = ProfileSpace(
                docs, [*examples, *(p for p in self.index.papers if p.key in wanted)]
            )
        self._scale: dict[str, float] = {}
        self._liked: dict[str, FloatArray] = {}
        for i, topic in enumerate(topics):
            best = float(relevance[i].max()) if self.index.n_papers else 0.0
            # A profile's cosine (0..1) is worth up to the day's best keyword match.
            self._scale[topic.name] = best if best > 0 else 1.0
            if self.meaning is not None:
                self._fuse(i, topic, relevance)
                continue
            found = (
                self.space.rocchio(likes[topic.name], ())
                if self.space is not None and topic.name in likes
                else None
            )
            if found is not None:
                liked = found[0]  # only "more" papers: the whole cosine is likeness
                part = self._scale[topic.name] * liked * self._passes[i]
                relevance[i] += part
                self._liked[topic.name] = part
                floor = topic.min_score
                relevance[i] *= relevance[i] >= floor - 1e-9
        self._relevance = relevance.copy()
        scores = relevance * boost
        self.best: dict[str, float] = {}
        self.left_out: dict[str, int] = {}
        """Per topic, matches not shown: passing mentions, or far below the day's best."""
        if len(topics) and self.index.n_papers:
            passing = _dense(self.queries.scoring @ self.index.evidence_t) == 1
        for i, topic in enumerate(topics):
            best = float(relevance[i].max()) if self.index.n_papers else 0.0
            self.best[topic.name] = best
            below = (relevance[i] > 0) & (relevance[i] < RELATIVE_CUT * best - 1e-9)
            scores[i, below] = 0.0
            weak = int(passing[i].sum()) if self.index.n_papers else 0
            self.left_out[topic.name] = int(below.sum()) + weak
        self.scores = scores
        self.ranked: dict[str, tuple[DigestItem, ...]] = {}
        papers_t = self.index.papers
        self._key_rank = np.argsort(np.argsort([p.key for p in papers_t], kind="stable"))
        self._reasons: dict[tuple[str, int], str] = {}
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

    def _fuse(self, i: int, topic: TopicSettings, relevance: FloatArray) -> None:
        """Semantic ranking: topic ``i``'s relevance (a row of ``relevance``, changed in place)
        becomes its keyword relevance plus what meaning adds, for the papers that match a
        keyword or are strong matches on meaning alone (:mod:`newsletter.semantic.space`).

        What meaning adds is the paper's similarity's share of the way from the day's median
        to 1, times the topic's best keyword relevance today: a convex combination (α = ½) of
        the two scores each normalised by its theoretical maximum (Bruch et al., "An analysis
        of fusion functions for hybrid retrieval", 2023), in the units the relative cut,
        ``min_score`` and trending already use.

        A paper without a keyword match is shown only when its similarity is an outlier of the
        day (:func:`~newsletter.semantic.space.evidence`) and at least that of the topic's
        typical keyword match today (the median over them), or without any, of its typical
        ``like:`` paper: "as close in meaning as what the keywords or examples found". A day
        without either admits nothing on meaning alone, so a quiet topic stays quiet.
        """
        assert self.meaning is not None
        ev = self.meaning.topic(i)
        passes = self._passes[i]
        matched = (relevance[i] > 0) & passes
        known = ev.similarity[matched] if matched.any() else self.meaning.like_similarity(i)
        floor = float(np.median(known)) if len(known) else np.inf
        admitted = matched | (passes & ev.strong & (ev.similarity >= floor))
        part = self._scale[topic.name] * ev.part * admitted
        relevance[i] = (relevance[i] + part) * admitted
        self._meant[topic.name] = part
        self._admitted[topic.name] = admitted
        relevance[i] *= relevance[i] >= topic.min_score - 1e-9

    def _filter_masks(self) -> npt.NDArray[np.bool_]:
        """topics × papers: passes the topic's ``all``, ``exclude`` and ``categories`` filters.

        What a profile adds to a paper's relevance obeys the same filters as keywords.
        """
        q, index = self.queries, self.index
        ok = np.ones((q.n_rows, index.n_papers), dtype=bool)
        if not index.n_papers:
            return ok
        if q.exclude.nnz:
            ok &= _dense(q.exclude @ index.presence_t) == 0
        if q.required.nnz:
            ok &= _dense(q.required @ index.presence_t) >= q.n_required[:, None]
        if q.categories.nnz:
            rows = np.flatnonzero(np.diff(q.categories.indptr))
            in_cat = _dense(q.categories[rows] @ index.categories_t) > 0
            ok[rows] &= in_cat | ~index.known_category
        return ok

    def reader_items(
        self,
        topic_name: str,
        prefs: Sequence[Vote],
        memo: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] | None = None,
    ) -> Iterator[DigestItem]:
        """A topic's list for one reader whose votes touch it, best first (lazily).

        Rocchio: the topic's relevance plus the paper's cosine with the reader's profile
        ``β·c(more) − γ·c(less)``, in units of the topic's best keyword match today; then the
        same filters, cut and trending as the shared list. ``memo`` shares profiles between the
        reader's topics.
        """
        mine = [v for v in prefs if v.topic in (None, topic_name)][:MAX_VOTES]
        more = tuple(v.paper_key for v in mine if v.value > 0)
        less = tuple(v.paper_key for v in mine if v.value < 0)
        if self.meaning is not None:
            yield from self._reader_meaning(topic_name, more, less)
            return
        if self.space is None:
            yield from self._pool_order[topic_name]
            return
        memo = {} if memo is None else memo
        if (more, less) not in memo:
            memo[more, less] = self.space.rocchio(more, less)
        found = memo[more, less]
        if found is None:
            yield from self._pool_order[topic_name]
            return
        i = self._order[topic_name]
        total, more_part = found
        scale = self._scale[topic_name]
        rel = self._relevance[i] + scale * total * self._passes[i]
        score = self._reader_scores(rel, self.topics[topic_name])
        if score is None:
            return
        papers_t = self.index.papers
        lexical = self._lexical[i]
        for j in self._best_first(score):
            reason = self._reason(topic_name, j)
            if more:
                like_part = scale * self.space.liked(more_part, j)
                if like_part > 0 and like_part >= float(lexical[j]):
                    key = self.space.closest(more, j)
                    if key is not None:
                        like = f"like: {_short(self.space.titles[key])}"
                        reason = f"{like} · {reason}" if reason else like
            yield DigestItem(papers_t[j], topic_name, float(score[j]), reason)

    def _reader_scores(self, rel: FloatArray, topic: TopicSettings) -> FloatArray | None:
        """A reader's relevance row (changed in place) as scores: ``min_score``, the relative
        cut against the reader's own best, then trending and age, as the shared lists have
        them; None when nothing is left."""
        rel[rel < topic.min_score - 1e-9] = 0.0
        best = float(rel.max()) if rel.size else 0.0
        if best <= 0:
            return None
        rel[rel < RELATIVE_CUT * best - 1e-9] = 0.0
        scores: FloatArray = np.round(rel * self.index.boost, 6)
        return scores

    def _reader_meaning(
        self, topic_name: str, more: tuple[str, ...], less: tuple[str, ...]
    ) -> Iterator[DigestItem]:
        """:meth:`reader_items` with semantic ranking: what meaning adds for the topic, plus
        the paper's likeness to the reader's votes in both spaces (their Rocchio profile over
        the vectors, :meth:`MeaningSpace.reader`, and over tf-idf, :class:`ProfileSpace`), all
        in units of the topic's best keyword match; a paper strongly like the votes is shown
        even without a keyword match."""
        assert self.meaning is not None
        i = self._order[topic_name]
        ev = self.meaning.reader(more, less)
        if ev is None:
            yield from self._pool_order[topic_name]
            return
        shared = self.meaning.topic(i)
        topic = self.topics[topic_name]
        lexical = self._lexical[i] * self._passes[i]
        admitted = self._admitted[topic_name] | (self._passes[i] & ev.strong)
        words = self.space.rocchio(more, less) if self.space is not None else None
        profile = np.maximum(words[0], 0.0) if words is not None else 0.0
        part = self._scale[topic_name] * (shared.part + ev.part + profile) * admitted
        score = self._reader_scores((lexical + part) * admitted, topic)
        if score is None:
            return
        papers_t = self.index.papers
        voted = self._scale[topic_name] * (ev.part + profile) * admitted  # the votes' share
        for j in self._best_first(score):
            reason = self._reason(topic_name, j)
            if more and voted[j] > 0 and voted[j] >= lexical[j]:
                key = self.meaning.closest(more, j)
                if key is not None:
                    like = f"like: {_short(self.meaning.labels.get(key, key))}"
                    reason = f"{like} · {reason}" if reason else like
            yield DigestItem(papers_t[j], topic_name, float(score[j]), reason)

    def _best_first(self, score: FloatArray, first: int = 48) -> Iterator[int]:
        """Indices of positive scores, by score then paper key; the best ``first`` (ties
        included) are sorted before the rest, which are sorted only if someone reads on."""
        hits = np.flatnonzero(score > 0)
        if len(hits) > first:
            kth = -np.partition(-score[hits], first - 1)[first - 1]
            head, tail = hits[score[hits] >= kth], hits[score[hits] < kth]
        else:
            head, tail = hits, hits[:0]
        keys = self._key_rank
        for part in (head, tail):
            yield from part[np.lexsort((keys[part], -score[part]))].tolist()

    def _reason(self, topic_name: str, j: int) -> str:
        key = (topic_name, j)
        found = self._reasons.get(key)
        if found is None:
            if len(self._reasons) > 100_000:
                self._reasons.clear()
            found = self._reasons[key] = self.reason(topic_name, j)
        return found

    def _position(self, paper: Paper) -> int:
        for j, p in enumerate(self.index.papers):
            if p.id == paper.id:
                return j
        raise KeyError(paper.id)

    def _found(
        self, aliases: Group, gid: int, present: set[int]
    ) -> tuple[str, tuple[str, str] | None] | None:
        """The most specific alias of a group found among ``present`` terms, or acronym variant.

        "large language model serving" names a match better than "model serving" does.
        """
        vocab = self.vocab
        mine = self._group_terms.get(gid, set())
        best: tuple[int, str, tuple[str, str] | None] | None = None
        for alias in aliases:
            hit = [t for t in vocab.alias_terms(alias) if t in present]
            if hit:
                size = max(len(self._term_words[t]) for t in hit)
                if best is None or size > best[0]:
                    best = (size, alias, None)
            for tid in vocab.variant_terms(alias):
                if tid in present and tid in mine:
                    size = len(self._term_words[tid])
                    if best is None or size > best[0]:
                        written = vocab.expanded[tid][1]
                        best = (size, written, (alias, written))
        return None if best is None else (best[1], best[2])

    def explanation(self, topic_name: str, paper_index: int) -> Explanation:
        """The parts of a topic × paper score, for reasons and ``--explain``."""
        i = self._order[topic_name]
        rule = self._rules[i]
        j = paper_index
        paper = self.index.papers[j]
        w = self.index.weights
        lo, hi = w.indptr[j], w.indptr[j + 1]
        row_w = dict(zip(w.indices[lo:hi].tolist(), w.data[lo:hi].tolist(), strict=True))
        title_tf = self.index.title_tf
        in_title = set(title_tf.indices[title_tf.indptr[j] : title_tf.indptr[j + 1]].tolist())
        abstract_tf = self.index.abstract_tf
        in_abstract = set(
            abstract_tf.indices[abstract_tf.indptr[j] : abstract_tf.indptr[j + 1]].tolist()
        )
        terms: list[tuple[str, str, float, int]] = []
        expansions: list[tuple[str, str]] = []
        seen: set[int] = set()
        entries = (*rule.keywords, *rule.required)
        evidence = 0.0
        ev = self.index.evidence
        lo_e, hi_e = ev.indptr[j], ev.indptr[j + 1]
        row_ev = dict(zip(ev.indices[lo_e:hi_e].tolist(), ev.data[lo_e:hi_e].tolist(), strict=True))
        for pos, (g, gid) in enumerate(zip(entries, self.queries.row_groups[i], strict=True)):
            if gid in seen or gid not in row_w:
                continue
            seen.add(gid)
            evidence += row_ev.get(gid, 0.0)
            field, label = "abstract", g[0]
            for name, present in (("title", in_title), ("abstract", in_abstract)):
                found = self._found(g, gid, present)
                if found:
                    field, label = name, found[0]
                    if found[1]:
                        expansions.append(found[1])
                    break
            terms.append((field, label, float(row_w[gid]), pos))
        terms.sort(key=lambda t: (-round(t[2], 9), t[3]))
        wanted = {author_key(a) for a in rule.authors}
        authors = tuple(a for a in paper.authors if author_key(a) in wanted)
        paper_cats = {category_key(c) for c in paper.categories}
        cats = tuple(c for c in rule.categories if category_key(c) in paper_cats)
        weak = bool(terms) and 0 < evidence < MIN_EVIDENCE
        relevance = (0.0 if weak else sum(t[2] for t in terms)) + AUTHOR_SCORE * len(authors)
        if self.queries.category_only[i] and cats:
            relevance += CATEGORY_SCORE
        meaning: tuple[str, str, float, float] | None = None
        meant = float(self._meant[topic_name][j]) if topic_name in self._meant else 0.0
        if meant > 1e-9 and self.meaning is not None:
            near = self.meaning.nearest(i, j)
            sim = float(self.meaning.similarity[i, j])
            meaning = (self.topics[topic_name].label, near[0] if near else "", sim, meant)
            relevance += meant
            weak = False
        like: tuple[str, float] | None = None
        part = float(self._liked[topic_name][j]) if topic_name in self._liked else 0.0
        if part > 1e-9 and self.space is not None:
            key = self.space.closest(tuple(getattr(self.topics[topic_name], "like", ())), j)
            like = (_short(self.space.titles.get(key or "", "")), part)
            relevance += part
            weak = False
        return Explanation(
            topic=topic_name,
            relevance=relevance,
            trend=float(self.index.trend[j]),
            recency=float(self.index.recency[j]),
            age_hours=age_hours(paper, self.now),
            age_from="published" if paper.published else "first seen",
            terms=tuple((f, label, v) for f, label, v, _ in terms),
            authors=authors,
            categories=cats,
            expansions=tuple(expansions),
            weak=weak and not authors,
            best=self.best.get(topic_name, 0.0),
            like=like,
            meaning=meaning,
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
        lexical = (
            ex.relevance - (ex.like[1] if ex.like else 0.0) - (ex.meaning[3] if ex.meaning else 0.0)
        )
        if ex.like and ex.like[1] >= lexical:
            parts.append(f"like: {ex.like[0]}")  # there because it resembles the topic's examples
        if ex.meaning and lexical <= 1e-9:
            topic, near, sim, _ = ex.meaning  # there for its meaning alone
            nearest = f" ({near}, {sim:.2f})" if near else f" ({sim:.2f})"
            parts.append(f"close in meaning to {topic}{nearest}")
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
        """How a digest item's score was made (``rank --explain``)."""
        return self.explanation(item.topic, self._position(item.paper))

    def sections(
        self,
        topic_names: Sequence[str],
        *,
        exclude_ids: Collection[int] = (),
        max_items: int = 10,
        group_by_topic: bool = True,
        votes: Sequence[Vote] = (),
    ) -> tuple[TopicSection, ...]:
        """A subscriber's digest: their topics' best papers, none twice, none already sent.

        Grouped: a paper wanted by several topics goes to the one where it scores best (while that
        topic has room); each topic shows up to its ``max_items`` (else ``max_items``). Merged: one
        list of at most ``max_items``, still honouring each topic's own ``max_items``. ``votes``
        (the reader's "more/less like this") reorder the topics they touch for this reader
        alone; without votes a reader gets exactly the shared lists.
        """
        names = tuple(n for n in dict.fromkeys(topic_names) if n in self.topics)
        excluded = exclude_ids if isinstance(exclude_ids, (set, frozenset)) else set(exclude_ids)
        if votes and (self.space is not None or self.meaning is not None):
            touched = {n for n in names if any(v.topic in (None, n) for v in votes)}
            if touched:
                memo: dict[tuple[tuple[str, ...], tuple[str, ...]], Any] = {}
                mine = {n: self.reader_items(n, votes, memo) for n in touched}
                return self._pick(names, frozenset(excluded), max_items, group_by_topic, mine)
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
        readers: dict[str, Iterator[DigestItem]] | None = None,
    ) -> tuple[TopicSection, ...]:
        # Each topic's list is already in pool order (score, then key), so a lazy k-way merge
        # yields the same sequence as sorting the whole pool, and stops as soon as every topic
        # is full: a subscriber costs a few dozen items, not every paper their topics match. A
        # topic that is full is not read further (its later items could only be skipped).
        sources = readers or {}
        limits = {n: self.topics[n].max_items or max_items for n in names}
        chosen: dict[str, list[DigestItem]] = {n: [] for n in names}
        heap: list[tuple[float, str, int, DigestItem]] = []
        lists: list[Iterator[DigestItem]] = []
        for k, name in enumerate(names):
            it = iter(sources.get(name, self._pool_order[name]))
            lists.append(it)
            first = next(it, None)
            if first is not None and limits[name] > 0:
                heap.append((-first.score, first.paper.key, k, first))
        heapq.heapify(heap)
        open_topics = sum(1 for n in names if limits[n] > 0)
        taken: set[int] = set()
        total = 0
        while heap:
            if open_topics == 0 or (not group_by_topic and total >= max_items):
                break
            _, _, k, item = heapq.heappop(heap)
            mine = chosen[names[k]]
            limit = limits[names[k]]
            pid = item.paper.id
            if pid not in excluded and pid not in taken:
                taken.add(pid)
                mine.append(item)
                total += 1
                if len(mine) == limit:
                    open_topics -= 1
            if len(mine) < limit:
                following = next(lists[k], None)
                if following is not None:
                    heapq.heappush(heap, (-following.score, following.paper.key, k, following))
        if group_by_topic:
            return tuple(TopicSection(n, self.topics[n].label, tuple(chosen[n])) for n in names)
        merged = sorted(
            (i for n in names for i in chosen[n]), key=lambda i: (-i.score, i.paper.key)
        )
        return (TopicSection("all", "Your topics", tuple(merged)),)
