"""The faster reading of papers (issue 17, "speed stays") reads exactly as the plain code did.

``read_defined`` splices each acronym use's long form into the already keyed words, and
``definitions`` looks only at the last words before a parenthesis; the profile space counts a
paper's words (title twice, stop words out) without building its token list. Each is compared
with the straightforward version on random text or on the judged corpus.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from newsletter.rank import Documents
from newsletter.rank.profiles import STOPWORDS, ProfileSpace
from newsletter.text import (
    WORD_PATTERN,
    _best_long_form,
    _short_form,
    _strip,
    read_defined,
    tokenize,
    word_key,
)
from newsletter.text import definitions as fast_definitions
from tests.rank.relevance.corpus import load_papers

_PAREN = re.compile(r"\(([^()]{1,24})\)")


def plain_definitions(text: str) -> list[tuple[str, str, int, int]]:
    out = []
    for m in _PAREN.finditer(text):
        sf = _short_form(m.group(1))
        if sf is None:
            continue
        before = re.findall(r"\S+", text[max(0, m.start() - 400) : m.start()])
        n = min(len(sf) + 5, 2 * len(sf))
        candidates = before[-n:]
        for i in range(len(candidates) - 1, -1, -1):
            if candidates[i].endswith((".", ";", ":", ")")) and i < len(candidates) - 1:
                candidates = candidates[i + 1 :]
                break
        lf = _best_long_form(sf, candidates)
        if lf:
            out.append((sf, lf, m.start(), m.end()))
    return out


def plain_read(*texts: str) -> tuple[list[list[str]], dict[str, tuple[str, str]]]:
    found: dict[str, tuple[str, str]] = {}
    spans = []
    for text in texts:
        mine = []
        for sf, lf, start, end in plain_definitions(text):
            keys = tokenize(sf)
            if len(keys) == 1 and keys[0] not in tokenize(lf):
                found.setdefault(keys[0], (sf, lf))
                mine.append((start, end))
        spans.append(mine)
    by_form = {sf: tuple(tokenize(lf)) for sf, lf in found.values()}
    uses = {**{sf + "s": long for sf, long in by_form.items()}, **by_form}
    out = []
    for text, mine in zip(texts, spans, strict=True):
        for start, end in reversed(mine):
            text = text[:start] + " " + text[end:]
        toks: list[str] = []
        for raw in WORD_PATTERN.findall(_strip(text)):
            long = uses.get(raw)
            if long:
                toks.extend(long)
            else:
                toks.append(word_key(raw))
        out.append(toks)
    return out, found


PIECES = [
    "speculative", "decoding", "(SD)", "SD", "SDs", "large", "language", "models", "(LLMs)",
    "LLM", "LLMs", "key-value", "(KV)", "KV", "cache", "(e.g.)", "(see", "below)", "we", "use",
    "mixture", "of", "experts", "(MoE)", "MoE", ".", ";", "\u2003", "\t", "\n", "Ab", "(AB)",
    "(A B)", "x", "it", "(IT)", "information", "technology", "snake_case", "_", "(S_D)", "é",
]  # fmt: skip
text_st = st.lists(st.sampled_from(PIECES), max_size=60).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(title=text_st, abstract=text_st)
def test_reading_a_paper_is_the_plain_reading(title: str, abstract: str) -> None:
    assert list(fast_definitions(abstract)) == plain_definitions(abstract)
    assert read_defined(title, abstract) == plain_read(title, abstract)


def test_reading_the_corpus_is_the_plain_reading() -> None:
    for p in load_papers():
        assert read_defined(p.title, p.abstract) == plain_read(p.title, p.abstract)


def test_profile_vectors_are_the_plain_tf_idf() -> None:
    papers = load_papers()
    examples = [replace(p, id=10_000 + p.id, key="old-" + p.key) for p in papers[:30]]
    docs = Documents.read(papers)
    space = ProfileSpace(docs, examples)

    def words(title: list[str], abstract: list[str]) -> list[str]:
        kept = [t for t in title if t not in STOPWORDS and len(t) > 1]
        return kept + kept + [t for t in abstract if t not in STOPWORDS and len(t) > 1]

    run = [words(t, a) for t, a in zip(docs.titles, docs.abstracts, strict=True)]
    vocab = list(dict.fromkeys(w for doc in run for w in doc))
    assert list(space.vocab) == vocab  # numbered in order of first use
    df = Counter(w for doc in run for w in set(doc))
    idf = {w: math.log((1 + len(run)) / (1 + df[w])) + 1.0 for w in vocab}

    def vector(doc: list[str]) -> np.ndarray:
        v = np.zeros(len(vocab))
        for w, k in Counter(w for w in doc if w in idf).items():
            v[space.vocab[w]] = (1.0 + math.log(k)) * idf[w]
        return v / max(float(np.linalg.norm(v)), 1e-12)

    for i, doc in enumerate(run):
        assert np.allclose(space.run_vectors[i].toarray().ravel(), vector(doc), rtol=1e-12)
    for p in examples:
        (title, abstract), _ = read_defined(p.title, p.abstract)
        got = space.examples[space.keys[p.key]].toarray().ravel()
        assert np.allclose(got, vector(words(title, abstract)), rtol=1e-12)
