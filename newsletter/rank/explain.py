"""Why a paper scored what it did: the parts of a topic × paper score, and the one-line reason.

:class:`Explanation` is what ``newsletter rank --explain`` prints; the :class:`Explainer`
rebuilds it from the same matrices the scorer used, term by term (BM25F weight per keyword
entry, authors, categories, what ``like:`` papers and meaning added, trending and age), so an
explanation always sums to the score it explains (a property test checks it against the obvious
loop). The reason under each paper of a digest ("title: mixture of experts · cs.LG · 42
upvotes") is the explanation's strongest parts, deterministic.

A reason names a match as the paper writes it: the ranker reads a paper with the acronyms it
defines as their long forms (so "LLM Serving" in Tilus's title, whose abstract defines LLMs,
matches "large language model serving" too), but the label is traced back to the words the
paper used (:func:`newsletter.text.written`): the keyword alias those words are ("title: LLM
serving"), else the long form when the paper wrote it ("title: large language model
inference", with ``acronym: 'LLM inference' matched as ...`` under ``--explain``), else the
paper's own words.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from newsletter.config import TopicSettings
from newsletter.digest.latex import to_text
from newsletter.models import MAX_TEXT_CHARS, is_own_topic
from newsletter.rank.index import PaperIndex, age_hours
from newsletter.rank.profiles import ProfileSpace
from newsletter.rank.rules import Group, Queries, Rule
from newsletter.rank.score import AUTHOR_SCORE, CATEGORY_SCORE, MIN_EVIDENCE, RELATIVE_CUT
from newsletter.semantic.space import MeaningSpace
from newsletter.text import (
    Word,
    author_key,
    category_key,
    defined_words,
    phrase_terms,
    tokenize,
    written,
)

FloatArray = npt.NDArray[np.float64]

REASONS_CACHE = 100_000
"""(topic, paper) reasons an explainer keeps (see :meth:`Explainer.cached_reason`)."""
WORDS_CACHE = 4096
"""Papers whose words (for labels, :meth:`Explainer.words`) an explainer keeps."""


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
    alias the paper's words are, or for an acronym match the words the paper used."""
    authors: tuple[str, ...]
    categories: tuple[str, ...]
    expansions: tuple[tuple[str, str], ...] = ()
    """(keyword as written, as the paper wrote it) for each match through an acronym, where the
    paper's words are not one of the keyword's aliases."""
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
    words_weight: float | None = None
    """Semantic ranking: the weight of the keyword part in the fusion (``Fusion.alpha``); the
    terms above are the keyword relevance before it."""

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
        if self.words_weight is not None:
            words = self.relevance - (self.meaning[3] if self.meaning else 0.0)
            meant = self.meaning[3] if self.meaning else 0.0
            keyword = words / max(self.words_weight, 1e-9)
            out[0] += f" = words {words:.3f} + meaning {meant:.3f}"
            out.append(f"  words: {self.words_weight:g} × keyword relevance {keyword:.3f}:")
        for field, label, value in self.terms:
            out.append(f"  {value:6.3f}  {field}: {label}")
        for alias, wrote in self.expansions:
            out.append(f"          acronym: {alias!r} matched as {wrote!r}")
        if self.like:
            out.append(f"  {self.like[1]:6.3f}  like: {self.like[0]}")
        if self.meaning:
            topic, near, sim, part = self.meaning
            nearest = f"; nearest: {near}" if near else ""
            out.append(f"  meaning: {part:.3f}, similarity {sim:.2f} to {topic}{nearest}")
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


_PLAIN_WORDS = re.compile(r"[\w'’./+-]+(?: [\w'’./+-]+){0,15}")
"""Words a reason can quote as they are: letters, digits, hyphens, apostrophes, no markup."""


def _at(rows: Mapping[str, Any], name: str, j: int) -> float:
    """``rows[name][j]``, without making the whole row when ``rows`` can say one value."""
    at = getattr(rows, "at", None)
    return float(at(name, j)) if at is not None else float(rows[name][j])


@functools.lru_cache(maxsize=4096)
def _tokens(label: str) -> tuple[str, ...]:
    """A term's label as tokens (labels repeat: a topic's keywords, over many papers)."""
    return tuple(tokenize(label))


def _within(small: tuple[str, ...], big: tuple[str, ...]) -> bool:
    n = len(small)
    return any(big[i : i + n] == small for i in range(len(big) - n + 1))


def _short(title: str, limit: int = 60) -> str:
    """A liked paper's title as the digest shows titles (LaTeX as text), cut to ``limit``."""
    title = to_text(title)
    return title if len(title) <= limit else title[: limit - 1].rstrip() + "…"


def _fmt_count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def with_like(title: str, reason: str) -> str:
    """A reason led by the liked paper a reader's or topic's example resembles most."""
    like = f"like: {_short(title)}"
    return f"{like} · {reason}" if reason else like


@dataclass(frozen=True, slots=True)
class _Hit:
    """The most specific term of a keyword group a field holds (:meth:`Explainer._found`)."""

    size: int
    """Its number of words."""
    alias: str
    """The alias it belongs to, as the operator wrote it."""
    label: str
    """The alias, or for an acronym variant its long form as shown ("large language model")."""
    expansion: tuple[str, str] | None
    """(alias, long form) for an acronym variant."""
    term: int


def _as_written(
    aliases: Group, hit: _Hit, term: tuple[str, ...], text: tuple[str, list[Word]]
) -> tuple[str, tuple[str, str] | None]:
    """The label of a match of ``term`` (``hit``'s tokens) as the paper writes it, and (alias,
    label) when that is an acronym's other form.

    The alias (or the acronym's long form) itself when the paper wrote it; else another alias
    of the group when the paper's words for the term are one (Tilus's "LLM Serving" is ``LLM
    serving``, though the ranker reads it as "large language model serving", the paper
    defining LLMs); else the paper's words, lower case where they were only capitalized. A match the words cannot show (a title's words out
    of order, a part of a compound) keeps the alias or long form, but is the alias when the
    field holds the alias's words.
    """
    spans = written(text[0], text[1], term)
    read = [tuple(tokenize(span)) for span in spans]
    if term in read:
        return hit.label, hit.expansion  # the paper wrote the alias, or the long form, itself
    as_alias = {toks: a for a in aliases for toks in phrase_terms(a)}
    for toks in read:
        if toks in as_alias:
            return as_alias[toks], None
    if not spans:
        plain = set(tokenize(text[0]))  # "Serving LLMs ..." for LLM serving, LLM defined
        if hit.expansion and any(set(toks) <= plain for toks in phrase_terms(hit.alias)):
            return hit.alias, None
        return hit.label, hit.expansion
    first = " ".join(spans[0].split())
    if not _PLAIN_WORDS.fullmatch(first):
        return hit.label, hit.expansion  # LaTeX or marks among the words: the alias reads better
    shown = " ".join(w.lower() if w[:1].isupper() and w[1:].islower() else w for w in first.split())
    return shown, (hit.alias, shown)


class Explainer:
    """The explanations and reasons of one ranker's scores, from the ranker's own matrices.

    ``meant``, ``liked`` and ``best`` are the ranker's per-topic parts (what meaning and
    ``like:`` papers add to each paper's relevance, the topic's best relevance today).
    """

    def __init__(
        self,
        *,
        topics: Mapping[str, TopicSettings],
        order: Mapping[str, int],
        rules: Sequence[Rule],
        queries: Queries,
        index: PaperIndex,
        now: datetime,
        meaning: MeaningSpace | None,
        space: ProfileSpace | None,
        meant: Mapping[str, FloatArray],
        liked: Mapping[str, FloatArray],
        best: Mapping[str, float],
        admitted: Mapping[str, npt.NDArray[np.bool_]] | None = None,
        words_weight: float = 1.0,
    ) -> None:
        self.topics = topics
        self._admitted = admitted or {}
        self.words_weight = words_weight
        self._order = order
        self._rules = rules
        self.queries = queries
        self.vocab = queries.vocab
        self.index = index
        self.now = now
        self.meaning = meaning
        self.space = space
        self._meant = meant
        self._liked = liked
        self._best = best
        self._group_terms = {gid: set(terms) for terms, gid in self.vocab.groups.items()}
        self._term_words = {tid: words for words, tid in self.vocab.terms.items()}
        self._reasons: dict[tuple[str, int], str] = {}
        self._words: dict[int, tuple[tuple[str, list[Word]], ...]] = {}

    def cached_reason(self, topic_name: str, j: int) -> str:
        """:meth:`reason`, kept (readers' lists ask for the same papers' reasons again)."""
        key = (topic_name, j)
        found = self._reasons.get(key)
        if found is None:
            if len(self._reasons) > REASONS_CACHE:
                self._reasons.clear()
            found = self._reasons[key] = self.reason(topic_name, j)
        return found

    def words(self, j: int) -> tuple[tuple[str, list[Word]], ...]:
        """Paper ``j``'s title and abstract, each with its words as the ranker read them
        (:func:`newsletter.text.defined_words`), kept for the next reasons."""
        found = self._words.get(j)
        if found is None:
            if len(self._words) >= WORDS_CACHE:
                self._words.clear()
            paper = self.index.papers[j]
            texts = (paper.title[:MAX_TEXT_CHARS], paper.abstract[:MAX_TEXT_CHARS])
            found = self._words[j] = tuple(zip(texts, defined_words(*texts), strict=True))
        return found

    def _found(
        self, aliases: Group, gid: int, present: set[int], text: tuple[str, list[Word]]
    ) -> tuple[str, tuple[str, str] | None] | None:
        """How the paper writes its match of a group among the ``present`` terms of a field
        (``text``: the field and its words): the label, and (alias, label) when that is the
        acronym's other form.

        The most specific term found names the match ("large language model serving" better
        than "model serving"); :func:`_as_written` turns it into the paper's words.
        """
        vocab = self.vocab
        mine = self._group_terms.get(gid, set())
        best: _Hit | None = None
        for alias in aliases:
            for tid in vocab.alias_terms(alias):
                size = len(self._term_words[tid])
                if tid in present and (best is None or size > best.size):
                    best = _Hit(size, alias, alias, None, tid)
            for tid in vocab.variant_terms(alias):
                size = len(self._term_words[tid])
                if tid in present and tid in mine and (best is None or size > best.size):
                    shown = vocab.expanded[tid][1]
                    best = _Hit(size, alias, shown, (alias, shown), tid)
        if best is None:
            return None
        return _as_written(aliases, best, self._term_words[best.term], text)

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
        # A reader's own topic (one reader reads it, once): its words as the reader wrote them,
        # not as the paper did, so no paper is read word by word for it.
        quick = is_own_topic(topic_name)
        texts = () if quick else self.words(j)
        for pos, (g, gid) in enumerate(zip(entries, self.queries.row_groups[i], strict=True)):
            if gid in seen or gid not in row_w:
                continue
            seen.add(gid)
            evidence += row_ev.get(gid, 0.0)
            field, label = "abstract", g[0]
            if quick:
                if self._group_terms.get(gid, set()) & in_title:
                    field = "title"
                terms.append((field, label, float(row_w[gid]), pos))
                continue
            for (name, present), text in zip(
                (("title", in_title), ("abstract", in_abstract)), texts, strict=True
            ):
                found = self._found(g, gid, present, text)
                if found:
                    field, label = name, found[0]
                    if found[1]:
                        expansions.append(found[1])
                    break
            terms.append((field, label, float(row_w[gid]), pos))
        terms.sort(key=lambda t: (-round(t[2], 9), t[3]))
        authors: tuple[str, ...] = ()
        if rule.authors:
            wanted = {author_key(a) for a in rule.authors}
            authors = tuple(a for a in paper.authors if author_key(a) in wanted)
        cats: tuple[str, ...] = ()
        if rule.categories:
            paper_cats = {category_key(c) for c in paper.categories}
            cats = tuple(c for c in rule.categories if category_key(c) in paper_cats)
        weak = bool(terms) and 0 < evidence < MIN_EVIDENCE
        relevance = (0.0 if weak else sum(t[2] for t in terms)) + AUTHOR_SCORE * len(authors)
        if self.queries.category_only[i] and cats:
            relevance += CATEGORY_SCORE
        meaning: tuple[str, str, float, float] | None = None
        words_weight: float | None = None
        if self.meaning is not None and topic_name in self._meant:
            meant = _at(self._meant, topic_name, j)
            words_weight = self.words_weight
            if topic_name in self._admitted and not _at(self._admitted, topic_name, j):
                meant, relevance = 0.0, 0.0  # not a candidate: neither part counts
            near = self.meaning.nearest(i, j)
            sim = self.meaning.similarity_of(i, j)
            meaning = (self.topics[topic_name].label, near[0] if near else "", sim, meant)
            relevance = words_weight * relevance + meant
            if meant > 1e-9:
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
            best=self._best.get(topic_name, 0.0),
            like=like,
            meaning=meaning,
            words_weight=words_weight,
        )

    def reason(self, topic_name: str, paper_index: int) -> str:
        """A short, deterministic 'why': "title: mixture of experts · cs.LG · 42 upvotes"."""
        ex = self.explanation(topic_name, paper_index)
        paper = self.index.papers[paper_index]
        parts: list[str] = []
        shown: list[tuple[str, str]] = []
        for field, label, _ in ex.terms:
            words = _tokens(label)
            if any(_within(words, _tokens(other)) for _, other in shown):
                continue  # "serving" says nothing more than "LLM serving" already did
            shown.append((field, label))
            if len(shown) == 3:
                break
        lexical = (
            ex.relevance - (ex.like[1] if ex.like else 0.0) - (ex.meaning[3] if ex.meaning else 0.0)
        )
        if ex.like and ex.like[1] >= lexical:
            parts.append(f"like: {ex.like[0]}")  # there because it resembles the topic's examples
        if ex.meaning and is_own_topic(topic_name):
            parts.append(self._own_meaning(topic_name, ex.meaning[0], ex.meaning[1]))
        elif ex.meaning and lexical <= 1e-9:
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

    def _own_meaning(self, topic_name: str, sentence: str, near: str) -> str:
        """A reader's own topic's reason: "close in meaning to your topic “…”", and "; like
        <arXiv id>" when one of its example papers is what the paper is nearest to."""
        out = f"close in meaning to your topic “{sentence}”"
        labels = self.meaning.labels if self.meaning is not None else {}
        for key in getattr(self.topics[topic_name], "like", ()) or ():
            if near and labels.get(key, key) == near:
                return f"{out}; like {key}"
        return out
