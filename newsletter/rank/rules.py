"""Rules and their compiled queries: what each row of the scorer asks for, as sparse matrices.

A *row* is one set of rules: a topic, or one subscriber's keywords. :class:`Rule` is a row as the
operator wrote it; :class:`Vocabulary` numbers the terms (token sequences), keyword groups (alias
sets), categories and authors the rows name, widening each alias with its acronym variants
(:class:`Acronyms`: the shipped pairs and those the run's papers define); :func:`compile_rules`
turns the rows into :class:`Queries`, rows × groups matrices the scorer multiplies with the
paper index (:mod:`newsletter.rank.index`). Many subscribers' plain keyword rows take the
column-list path of :mod:`newsletter.rank.keyword_rows`, with the same numbering.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from dataclasses import field as dc_field

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from newsletter.config import TopicSettings
from newsletter.rank.keyword_rows import compile_keywords, csr_rows
from newsletter.text import (
    KNOWN_ACRONYMS,
    WORD_PATTERN,
    author_key,
    category_key,
    phrase_terms,
    word_key,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

Group = tuple[str, ...]
"""One keyword entry: its aliases as the operator wrote them."""


def _groups(entries: Iterable[str | list[str]]) -> tuple[Group, ...]:
    if not entries:
        return ()
    return tuple([(e,) if type(e) is str else tuple(e) for e in entries])


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
        words = WORD_PATTERN.findall(alias)
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

    # Per group: its acronym variants' terms and its own aliases' terms (both fixed for a run).
    variants: dict[Group, tuple[frozenset[int], frozenset[int]]] = {}

    def variants_of(g: Group) -> tuple[frozenset[int], frozenset[int]]:
        found = variants.get(g)
        if found is None:
            found = variants[g] = (
                frozenset(t for a in g for t in v.variant_terms(a)),
                frozenset(t for a in g for t in v.alias_terms(a)),
            )
        return found

    for rule in rules:
        group = plain
        if expanding and any(variants_of(g)[0] for g in (*rule.keywords, *rule.required)):
            # Terms the rule's entries name themselves: an acronym variant never adds them twice.
            own = frozenset().union(*(variants_of(g)[1] for g in (*rule.keywords, *rule.required)))

            def group(g: Group, own: frozenset[int] = own) -> int:
                extra, mine = variants_of(g)
                clash = (extra & own) - mine  # variants another entry of the rule names itself
                if not clash:
                    return plain(g)  # the group with all its variants, as in any other rule
                return v.group(g, taken=clash)

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
