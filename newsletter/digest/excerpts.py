"""The digest's excerpt: the sentence that says what the paper did, and its headline result.

An abstract usually opens with background ("Neural Radiance Fields have recently transformed
3D scene representation..."); a reader deciding in 30 seconds wants the contribution ("we
propose X") and, when there is one, the number that says how well it works ("10x faster").
:func:`excerpt` picks both extractively and deterministically, in the abstract's order, within
``limit`` characters; an abstract with no contribution sentence falls back to its first
sentences (:func:`lead_excerpt`). Sentences are never split inside parentheses or after an
abbreviation such as "e.g.", and a cut never falls inside parentheses or right after one.
The reader never sees the sentences left out, so the excerpt starts at the claim ("To address
this challenge, we propose X" shows "We propose X": :func:`claim_first`), and a sentence shown
without the one before it loses the connective pointing back to it (:func:`standalone`).
``tests/excerpts`` measures the choice against a judged sample (docs/digest.md has the figures).
"""

from __future__ import annotations

import re

from newsletter.models import MAX_TEXT_CHARS

LIMIT = 320
"""Excerpts are at most this many characters (about two lines of a phone screen, three of a
desktop card), ellipsis included."""

_ABBREVIATIONS = frozenset(
    [
        "e.g",
        "i.e",
        "cf",
        "vs",
        "al",
        "etc",
        "fig",
        "figs",
        "eq",
        "eqs",
        "sec",
        "ref",
        "refs",
        "approx",
        "resp",
        "no",
        "dr",
        "mr",
        "ms",
        "prof",
        "st",
    ]
)
"""Words after which a period does not end a sentence (lower-case, without the final period)."""

_SUBJECT = re.compile(
    r"(?:^|(?<=\s))(?:we|our|it(?= (?:then|also|further|next)\b)"
    r"|this (?:paper|work|study|article|dissertation|thesis|report))\b",
    re.IGNORECASE,
)
"""Who does something in a contribution sentence: "we", "our ...", "this paper", "It then ..."
(a bare "It was introduced by ..." is about someone else's work)."""
_NEAR = r",?(?:\s{1,3}[\w'-]{1,64},?){0,3}?\s{1,3}"
"""Up to three words between the subject and its verb ("we then present", "our paper proposes").
Bounded (words of at most 64 characters, a few spaces): a subject is matched against the next
few words only, whatever follows them."""
_CONTRIBUTES = re.compile(
    _NEAR + r"(?:propos|present|introduc|develop|design|describ|buil[dt]|creat|releas|offer)"
    r"(?:e|es|ed|s|t)?\b",
    re.IGNORECASE,
)
_BY_DOING = re.compile(
    r"\bby (?:propos|present|introduc|develop|design|build|creat)ing\b", re.IGNORECASE
)
"""The verbs that announce the contribution, right after the subject ("we propose", "It then
proposes", :data:`_CONTRIBUTES`) or anywhere after it as "by introducing" (:data:`_BY_DOING`):
the first such sentence wins. "presents" far from "we" is not one ("we find that the
heterogeneity of GPUs presents an opportunity")."""
_CLAIMS = re.compile(
    _NEAR + r"(?:show|demonstrat|find|prov|report)(?:e|es|ed|s|n)?\b", re.IGNORECASE
)
"""Weaker: "we show that ...", used only when no sentence announces a contribution."""
_RESULT = re.compile(
    r"(?<!\d)\d(?:[\d,]{0,24}\d)?(?:\.\d{1,12})?\s?"
    r"(?:[x×](?![\d\w])|times(?!\w)|-?fold\b|\\?%|percent\b"
    r"|(?:percentage )?points?\b|pp\b|dB\b|FPS\b|fps\b)"
    r"|(?<![\w.])[x×]\d"
    r"|\bspeed-?ups? (?:of|by) (?:up to |over |about )?\d",
)
"""A headline number: ``10x``, ``×3``, ``3.93x``, ``77%``, ``32-fold``, ``+2.1 points``, ``46 FPS``.
``1024x1024`` (a size) is not one. A number is tried from its first digit only, and its digits
are bounded: a run of a million digits costs one pass, not one per digit."""


_MARKS = re.compile(r"[.?!()\[\]{}]")
"""What :func:`sentences` looks at: sentence ends and brackets (every other character is passed
over by the regex engine, not one by one in Python: an abstract has a few dozen of these among
its 1,500 characters)."""
_OPENING = frozenset("([{")
_CLOSING_QUOTES = "\"'”’"


def sentences(text: str) -> list[str]:
    """``text`` (whitespace already collapsed) cut into sentences.

    A sentence ends at ``.``, ``?`` or ``!`` (and a closing quote) followed by a space and a
    capital letter, a digit or an opening quote, outside parentheses and brackets, and not after
    an abbreviation ("e.g.", "et al.", "Fig.") or a single initial ("J. Smith").
    """
    out: list[str] = []
    depth = 0
    start = 0
    n = len(text)
    for m in _MARKS.finditer(text):
        i = m.start()
        c = text[i]
        if c in _OPENING:
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and (end := sentence_end(text, i)) is not None:
            out.append(text[start:end])
            start = end + 1
    if start < n:
        out.append(text[start:])
    return [s for s in out if s.strip()]


def sentence_end(text: str, i: int) -> int | None:
    """Where the sentence ends (after its closing quotes) when the ``.``, ``?`` or ``!`` at
    ``i`` (outside brackets) ends one: a space and a capital letter, a digit or an opening quote
    follow, and it is not the period of an abbreviation; else ``None``."""
    n = len(text)
    end = i + 1
    while end < n and text[end] in _CLOSING_QUOTES:
        end += 1
    if (
        end + 1 < n
        and text[end] == " "
        and (text[end + 1].isupper() or text[end + 1].isdigit() or text[end + 1] in '"“')
        and not (text[i] == "." and _abbreviation(text, i))
    ):
        return end
    return None


def _abbreviation(text: str, dot: int) -> bool:
    """Whether the period at ``dot`` closes an abbreviation or an initial, not a sentence."""
    begin = dot
    while begin > 0 and not text[begin - 1].isspace() and text[begin - 1] not in "([{":
        begin -= 1
    word = text[begin:dot].lower()
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())


def lead_excerpt(text: str, limit: int = LIMIT) -> str:
    """The first sentences of ``text`` that fit in ``limit`` characters, or its start cut at a
    safe word boundary with an ellipsis (the excerpt of an abstract with no contribution)."""
    text = " ".join(text[:MAX_TEXT_CHARS].split())
    if len(text) <= limit:
        return text
    kept: list[str] = []
    length = -1
    for s in sentences(text):
        if length + 1 + len(s) > limit:
            break
        kept.append(s)
        length += 1 + len(s)
    if kept and length >= limit * 0.6:
        return " ".join(kept)
    return cut(text, limit)


def cut(text: str, limit: int = LIMIT) -> str:
    """``text`` cut at the last word boundary that fits ``limit`` with "…": never inside
    parentheses or brackets, never right after an abbreviation such as "e.g."."""
    if len(text) <= limit:
        return text
    depth = 0
    best = -1
    for i, c in enumerate(text[:limit]):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == " " and depth == 0 and not _after_abbreviation(text, i):
            best = i
    if best <= 0:  # one long parenthesis: fall back to any word boundary
        best = text.rfind(" ", 0, limit)
    body = text[:best] if best > 0 else text[: limit - 1]
    return body.rstrip(" ,;:-–—") + "…"


def _after_abbreviation(text: str, space: int) -> bool:
    """Whether the word before ``space`` is an abbreviation ("e.g.", "e.g.,", "i.e.:")."""
    end = space
    while end > 0 and text[end - 1] in ",;:":
        end -= 1
    return end > 0 and text[end - 1] == "." and _abbreviation(text, end - 1)


def _contribution(parts: list[str]) -> int | None:
    """The index of the sentence that says what the paper did, if one does."""
    found = _claim(parts)
    return None if found is None else found[0]


def _claim(parts: list[str]) -> tuple[int, int] | None:
    """The index of the sentence that says what the paper did, if one does, and where its
    subject starts ("we propose" in "To address this challenge, we propose ...").

    Linear in the text: each subject is matched where it stands (no copy of the rest) against
    the few words after it, and "by introducing" is looked for once per sentence: a subject
    before its last occurrence announces a contribution."""
    weak = None
    for i, s in enumerate(parts):
        by_doing = -1
        for by_doing_found in _BY_DOING.finditer(s):
            by_doing = by_doing_found.start()
        for subject in _SUBJECT.finditer(s):
            end = subject.end()
            if end <= by_doing or _CONTRIBUTES.match(s, end):
                return i, subject.start()
            if weak is None and _CLAIMS.match(s, end):
                weak = i, subject.start()
    return weak


def excerpt(text: str, limit: int = LIMIT) -> str:
    """What the paper did (and its headline result) in at most ``limit`` characters.

    The contribution sentence, from its claim (:func:`claim_first`), then the first other
    sentence with a headline number if both fit (in the abstract's order; one before the
    contribution only if it speaks of "we", "our ...": before the claim, numbers are usually
    the background's), else the first such sentence cut with "…" after the clause that holds
    its number (:func:`_result_clause`), if that fits; without a result, the sentences that
    follow the contribution while they fit. A sentence shown without the one before it loses
    the connective that points back to it (:func:`standalone`). No contribution sentence: the
    first sentences (:func:`lead_excerpt`). A contribution sentence longer than ``limit`` is cut
    (:func:`cut`). Reads at most :data:`~newsletter.models.MAX_TEXT_CHARS` of ``text``.
    """
    text = " ".join(text[:MAX_TEXT_CHARS].split())
    parts = sentences(text)
    claim = _claim(parts)
    if claim is None:
        return lead_excerpt(text, limit)
    found, subject = claim
    main = claim_first(parts[found], subject)
    if len(main) > limit:
        return cut(main, limit)
    chosen = [found]
    shown = list(parts)
    shown[found] = main
    room = limit - len(main) - 1
    results = [
        i
        for i, s in enumerate(parts)
        if i != found and _RESULT.search(s) and (i > found or _SUBJECT.search(s))
    ]
    fits = [i for i in results if len(parts[i]) <= room]
    if fits:
        chosen.append(fits[0])
    else:  # the first result whose clause with the number fits, cut after that clause
        for i in results:
            clause = _result_clause(parts[i], room)
            if clause:
                shown[i] = clause
                chosen.append(i)
                break
    if len(chosen) == 1:  # no result that fits: the context right after the contribution
        length = len(main)
        for i in range(found + 1, len(parts)):
            if length + 1 + len(parts[i]) > limit:
                break
            chosen.append(i)
            length += 1 + len(parts[i])
    order = sorted(set(chosen))
    return " ".join(
        shown[i] if i == found or i - 1 in order else standalone(shown[i]) for i in order
    )


def _result_clause(sentence: str, room: int) -> str | None:
    """``sentence`` cut with "…" at the last clause boundary (", " or "; " outside parentheses,
    not after "e.g.,") that keeps its first headline number and fits in ``room``; or ``None``."""
    found = _RESULT.search(sentence)
    if found is None:
        return None
    depth = 0
    best = -1
    for i, c in enumerate(sentence[: room - 1]):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif (
            c in ",;"
            and depth == 0
            and i >= found.end()
            and sentence[i + 1 : i + 2] == " "
            and not (i > 0 and sentence[i - 1] == "." and _abbreviation(sentence, i - 1))
        ):
            best = i
    if best < 0:
        return None
    return sentence[:best] + "…"


# ---------------------------------------------------------------- connectives that point back

_CONNECTIVES = frozenset(
    [
        "also",
        "additionally",
        "in addition",
        "besides",
        "further",
        "furthermore",
        "moreover",
        "however",
        "nevertheless",
        "nonetheless",
        "still",
        "yet",
        "meanwhile",
        "therefore",
        "thus",
        "hence",
        "consequently",
        "accordingly",
        "as a result",
        "as such",
        "in turn",
        "instead",
        "in contrast",
        "by contrast",
        "conversely",
        "on the other hand",
        "on the contrary",
        "similarly",
        "likewise",
        "specifically",
        "in particular",
        "notably",
        "especially",
        "importantly",
        "more importantly",
        "crucially",
        "first",
        "firstly",
        "second",
        "secondly",
        "third",
        "thirdly",
        "next",
        "then",
        "subsequently",
        "finally",
        "lastly",
        "ultimately",
        "overall",
        "in summary",
        "in conclusion",
        "to summarize",
        "to conclude",
        "in short",
        "for example",
        "for instance",
        "that is",
        "in other words",
        "namely",
        "indeed",
        "in fact",
        "to this end",
        "to that end",
        "in response",
    ]
)
"""Words that join a sentence to the one before it: "However, ...", "Furthermore, ..."."""
_POINTS_BACK = re.compile(
    r"\b(?:these|those|such|above|aforementioned|former|latter|both|its|their|them|they|it"
    r"|this(?! (?:paper|work|study|article|dissertation|thesis|report|research|letter|chapter"
    r"|survey|note|manuscript|submission)\b)"
    r"|that (?:end|goal|purpose|aim|problem|challenge|issue|gap)|do so|two worlds)\b"
    r"|\bthe (?:[\w-]{1,64} ){0,2}?(?:problems?|issues?|challenges?|limitations?|gaps?"
    r"|drawbacks?|bottlenecks?|shortcomings?|difficult(?:y|ies)|obstacles?|dilemmas?"
    r"|concerns?)$",
    re.IGNORECASE,
)
"""What makes a lead-in lean on what came before: "this challenge", "these issues", "the
above limitations", "To do so", "the best of two worlds" ("In this paper" does not)."""
_LEADS = frozenset(
    ["to", "in", "on", "for", "with", "by", "from", "at", "under", "over", "after", "before",
     "during", "through", "toward", "towards", "given", "unlike", "beyond", "despite", "due",
     "thanks", "according", "against", "among", "across", "within", "without", "upon", "into",
     "regarding", "as", "along", "apart", "built"]
)  # fmt: skip
"""How a lead-in (a phrase before the sentence's subject) starts: a preposition or "to"; a
word in -ing or -ed starts one too ("Observing this, ...")."""
MAX_LEAD_WORDS = 15
"""A longer phrase before a comma is content, not a lead-in: kept."""


def _lead_in(piece: str) -> bool:
    """Whether ``piece`` (a phrase that ended with a comma) points back: a connective, or a
    short lead-in phrase with a word that refers to earlier sentences (or it is no phrase at
    all: a stray comma)."""
    words = piece.split()
    if not words:
        return True
    if len(words) > MAX_LEAD_WORDS:
        return False
    if " ".join(words).lower() in _CONNECTIVES:
        return True
    first = words[0].lower()
    return (first in _LEADS or first.endswith(("ing", "ed"))) and bool(_POINTS_BACK.search(piece))


def _pieces(text: str, stop: int) -> list[tuple[int, int]]:
    """(start, end) of each phrase of ``text[:stop]`` that ends with a comma outside brackets,
    from the start (end is the comma's position); at most a few, read once."""
    out: list[tuple[int, int]] = []
    depth = 0
    start = 0
    for i in range(min(stop, len(text))):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            out.append((start, i))
            start = i + 1
            if len(out) > 3:
                break
    return out


def _capitalized(text: str) -> str:
    """``text`` with its first word capitalized when it is a plain lower-case word ("we",
    "the"), not a name written in lower case ("im2win", "iPhone", "k-means")."""
    first = text.split(" ", 1)[0]
    return text[:1].upper() + text[1:] if first.isalpha() and first.islower() else text


def claim_first(sentence: str, subject: int) -> str:
    """The contribution ``sentence`` from its claim: the phrases before its subject (which
    starts at ``subject``) that point back are left out ("To address this challenge, we
    propose X" → "We propose X"; "Furthermore, in this paper, we present" → "In this paper, we
    present"); the others stay."""
    if subject <= 0:
        return sentence
    pieces = _pieces(sentence, subject)
    if not pieces or sentence[pieces[-1][1] + 1 : subject].strip():
        return sentence  # something other than a phrase with its comma before the subject
    # Each piece from its first word to the next one (its comma and a space): the words and
    # the marks between the pieces kept stay as they were.
    kept: list[str] = []
    for a, b in pieces:
        if _lead_in(sentence[a:b]):
            continue
        end = b + 1
        while end < subject and sentence[end] == " ":
            end += 1
        kept.append(sentence[a:end].lstrip())
    if len(kept) == len(pieces):
        return sentence
    return _capitalized("".join([*kept, sentence[subject:]]).lstrip())


def standalone(sentence: str) -> str:
    """``sentence`` as it reads without the sentence before it: the connective or lead-in
    phrases it opens with are left out ("However, ...", "Meanwhile, the kernels ..." → "The
    kernels ..."), as long as at least three words remain."""
    rest = 0
    for a, b in _pieces(sentence, len(sentence)):
        if not _lead_in(sentence[a:b]):
            break
        rest = b + 1
    if not rest:
        return sentence
    remainder = sentence[rest:].lstrip()
    if len(remainder.split()) < 3 or not remainder[:1].isalnum():
        return sentence
    return _capitalized(remainder)
