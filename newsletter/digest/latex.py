"""LaTeX in feed text (``Sub-$O(n^2)$``, ``\\textit{...}``, ``~``, ``M\\'elange``) as Unicode text.

Titles and abstracts come from arXiv as their authors typed them. The store keeps that raw form
(search and ranking read it, and a better converter later can redo the work); the digest (HTML
and text parts) and the web pages show :func:`to_text` of it, memoized per string, so a paper is
converted once per process however many readers get it. Why at render time and not at ingest:
the raw form stays the only stored one, with no new column and no migration.

pylatexenc's ``latex2text`` does the conversion, with guards for text that is not LaTeX at all:
a bare ``%`` (which LaTeX reads as a comment and would drop the rest of the abstract) and a bare
``&`` are escaped first, an odd number of ``$`` is taken as dollar signs, URLs are left alone,
and text without any LaTeX sign is returned as it is. Whatever goes wrong, the raw text is shown:
a malformed string never stops a digest or a page.

Only the LaTeX is parsed (:func:`_islands`): pylatexenc reads a string a character at a time in
Python (about 3 ms for an abstract), so the plain words between the LaTeX are passed through and
each island of LaTeX (a word with a LaTeX sign, with the words an open brace or ``$`` carries
on to; from a command outside braces, the rest of the string) is converted alone. A string
whose LaTeX could reach further (``\\begin``, ``$$``, ``\\[``, a comment) is converted whole,
as before; the tests hold both ways equal.

Math a source already flattened (its backslashes dropped: ``15times sim 24times``, ``179times``)
is repaired by :func:`tidy_math` into the characters pylatexenc gives the LaTeX it came from
("15×∼24×", "179×"), and simple exponents become superscripts ("O(n^2)" → "O(n²)"); only next
to a number, where the remnant cannot be a word ("10 times faster" and "sometimes" stay).
"""

from __future__ import annotations

import functools
import logging
import re

from pylatexenc.latex2text import LatexNodes2Text

from newsletter.models import MAX_TEXT_CHARS, clip

log = logging.getLogger(__name__)

_LATEX_SIGN = re.compile(r"[\\$~{}^]|--|``")
"""Text without any of these is not LaTeX: shown as it is (most titles and abstracts)."""
_URL = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_BARE = re.compile(r"(?<!\\)([%&#])")
_DOLLAR = re.compile(r"(?<!\\)\$")
_CONVERTER = LatexNodes2Text(math_mode="text", strict_latex_spaces=False)


@functools.lru_cache(maxsize=8192)
def to_text(text: str) -> str:
    """``text`` with its LaTeX turned into Unicode text, on one line; the raw text on failure.
    Either way the remnants of math a source flattened are repaired (:func:`tidy_math`).

    At most :data:`~newsletter.models.MAX_TEXT_CHARS` of ``text`` are read (and shown)."""
    text = clip(text, MAX_TEXT_CHARS)
    if not text or not _LATEX_SIGN.search(text):
        return tidy_math(text)
    try:
        out: list[str] = []
        at = 0
        for m in _URL.finditer(text):
            out.append(_convert(text[at : m.start()]))
            out.append(m.group())
            at = m.end()
        out.append(_convert(text[at:]))
        converted = " ".join("".join(out).split())
    except Exception as e:
        log.debug("LaTeX not converted (%s: %s); showing it raw: %.80r", type(e).__name__, e, text)
        return tidy_math(text)
    if text.strip() and not converted:
        return tidy_math(text)
    return tidy_math(converted)


def _convert(part: str) -> str:
    if not _LATEX_SIGN.search(part):
        return part
    lead = " " if part[:1].isspace() else ""
    tail = " " if part[-1:].isspace() else ""
    return (
        lead + " ".join(_latex(i) if latex else i for i, latex in _islands(_prepared(part))) + tail
    )


def _prepared(part: str) -> str:
    """``part`` as LaTeX: a bare ``%``, ``&`` or ``#`` escaped, and an odd number of ``$`` read
    as dollar signs ("costs $5")."""
    part = _BARE.sub(r"\\\1", part)
    if len(_DOLLAR.findall(part)) % 2:
        part = _DOLLAR.sub(r"\\$", part)
    return part


def _latex(part: str) -> str:
    """pylatexenc's text for ``part``; ``part`` itself when it is too tangled to parse."""
    if _tangled(part):
        log.debug("LaTeX too deeply nested or left open; showing it raw: %.80r", part)
        return part
    return str(_CONVERTER.latex_to_text(part)).replace("\xa0", " ")


_GROUPS = re.compile(r"\\[A-Za-z@]+\*?\s*\[|\\.|[{}\]]", re.DOTALL)
"""What :func:`_tangled` counts: an optional argument opened (``\\sqrt[``), an escaped character
(skipped: ``\\{`` is no brace), a brace, a closing bracket."""
MAX_DEPTH = 10
"""Braces nested deeper than this are not parsed (an abstract's formulas nest a few levels)."""
MAX_OPEN = 2
"""Groups (braces, optional arguments) left open at the end of a part: more are not parsed."""


def _tangled(part: str) -> bool:
    """Whether pylatexenc would take exponential time on ``part`` (issue 42): its lenient parser
    retries each way to read a group left open, so each open brace or optional argument doubles
    the work (``\\frac{`` seven times before a 5,000-character text took 2 s, 40 times: hours).
    Too deep braces, an optional argument inside another (LaTeX closes both at the first
    ``]``), or more than :data:`MAX_OPEN` groups open at the end."""
    braces = deepest = optional = 0
    for m in _GROUPS.finditer(part):
        sign = m.group()
        if sign == "{":
            braces += 1
            deepest = max(deepest, braces)
        elif sign == "}":
            braces = max(0, braces - 1)
        elif sign == "]":
            optional = max(0, optional - 1)
        elif sign.endswith("["):
            optional += 1
            if optional > 1:
                return True
    return deepest > MAX_DEPTH or braces + optional > MAX_OPEN


_WORD = re.compile(r"\S+")
_SIGN = re.compile(r"[\\$~{}^_&#%`]|''|--")
"""A word with none of these reads the same after pylatexenc (its specials are ``~``, ``&``,
``--``, ``---``, ````````, ``''``, ``!```` and ``?````)."""
_WHOLE = re.compile(r"\$\$|\\(?:begin|end|verb|if|[][()\s]|$)")
"""LaTeX that can reach past a word in ways :func:`_islands` does not follow: convert it whole."""
_TOKEN = re.compile(r"\\(?:[A-Za-z@]+|.?)|[{}$%]", re.DOTALL)
_CLOSED_SYMBOLS = frozenset("%&#$_{},;!@ ")
"""Control symbols that take no argument: a word may end with one (``43.8\\%``)."""
_ACCENTS = frozenset("'\"^~=.`")
"""Accents: one argument, the character after them (``M\\'elange``)."""


def _islands(part: str) -> list[tuple[str, bool]]:
    """``part`` (prepared LaTeX) as pieces to join with a space: (text, is LaTeX to convert).

    A piece is a word without any LaTeX sign (shown as it is) or an island of LaTeX: a word with
    a sign, and the words after it for as long as a brace or a ``$`` is open or the next word
    opens with ``{``, ``[`` or ``*`` (more arguments). A command outside braces and math (which
    may take the next words as its arguments: ``\\frac- a``) makes the rest of the part one
    island, and the whole part is one island when its LaTeX could reach further
    (:data:`_WHOLE`, a comment, an unmatched ``}``).
    """
    if _WHOLE.search(part):
        return [(part, True)]
    words = list(_WORD.finditer(part))
    pieces: list[tuple[str, bool]] = []
    depth, math = 0, False
    start = -1  # where the open island starts in ``part``
    for at, m in enumerate(words):
        word = m.group()
        if start < 0 and not _SIGN.search(word):
            pieces.append((word, False))
            continue
        if start < 0:
            start = m.start()
        reaches = False  # a command outside braces and math: its arguments may follow
        for tok in _TOKEN.finditer(word):
            sign = tok.group()
            if sign == "{":
                depth += 1
            elif sign == "}":
                depth -= 1
                if depth < 0:
                    return [(part, True)]
            elif sign == "$":
                math = not math
            elif sign == "%":
                return [(part, True)]  # a comment: it runs to the end of the line
            elif not (depth or math or sign[1:] in _CLOSED_SYMBOLS):
                reaches = reaches or not (sign[1:] in _ACCENTS and tok.end() < len(word))
        if reaches:
            pieces.append((part[start:], True))
            return pieces
        if depth or math:
            continue
        if at + 1 < len(words) and words[at + 1].group()[:1] in "{[*":
            continue
        pieces.append((part[start : m.end()], True))
        start = -1
    if start >= 0:
        pieces.append((part[start:], True))
    return pieces


# ---------------------------------------------------------------- math a source flattened

_SYMBOLS = {
    "times": "×",
    "sim": "∼",
    "approx": "≈",
    "simeq": "≃",
    "leq": "≤",
    "geq": "≥",
    "lesssim": "≲",
    "gtrsim": "≳",
    "neq": "≠",
    "pm": "±",
    "mp": "∓",
    "cdot": "·",
    "propto": "∝",
}
"""The commands whose names a flattened formula leaves behind, as pylatexenc writes them."""
_NUMBER_AFTER = r"(?=[-+−]?\d)(?![-+−]?\d{1,24}(?:\.\d{1,24})?[A-Za-wyz])"
"""A number follows (not a word that starts with digits: "2real" of "sim2real", "4B")."""


def _names(without: set[str]) -> str:
    """The names of :data:`_SYMBOLS` but ``without``, longest first, as a regex alternation;
    ``approx.`` is the abbreviation, and ``pm``/``mp`` only name a sign before a number ("at
    3pm" is a time)."""
    names = sorted(set(_SYMBOLS) - without, key=len, reverse=True)
    guard = {"approx": r"(?!\.)", "pm": f"(?= ?{_NUMBER_AFTER})", "mp": f"(?= ?{_NUMBER_AFTER})"}
    return "|".join(name + guard.get(name, "") for name in names)


_GLUED = re.compile(
    # glued to the number before it, not to a word: "179times", "15times", "1008times756",
    # "0.3pm0.1" (a space before the next number goes too: "2leq 3" is "2≤3")
    rf"(?<=\d)(?P<name>{_names(set())})(?![A-Za-z])(?![-+−]?\d{{1,24}}(?:\.\d{{1,24}})?"
    rf"[A-Za-wyz])(?: {_NUMBER_AFTER})?"
    # a word of its own, never an English one: "L_infty"
    r"|(?<![A-Za-z])(?P<infty>infty)(?![A-Za-z])"
)
_BETWEEN = re.compile(
    # between two numbers, spaced: "15× sim 24×", "0.5 pm 0.1" (never "times": "3 times 4")
    rf"(?<=[\d×%]) ?\b(?P<name>{_names({'times'})}) ?{_NUMBER_AFTER}"
)
_SUPERSCRIPT = re.compile(r"(?<=[\w)\]])\^(?P<sign>[-+−]?)(?P<power>\d{1,3}(?!\d)|n(?![A-Za-z]))")
"""A simple exponent left as ``^``: a number of up to three digits, signed, or ``n``."""
_SUPERSCRIPTS = str.maketrans("0123456789-+−n", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺⁻ⁿ")


def tidy_math(text: str) -> str:
    """``text`` with the remnants of flattened math next to a number as their symbols.

    ``179times`` → "179×", ``15times sim 24times`` → "15×∼24×", ``0.5 pm 0.1`` → "0.5±0.1",
    ``L_infty`` → "L_∞", and a simple exponent as a superscript: ``O(n^2)`` → "O(n²)",
    ``10^-3`` → "10⁻³". A remnant is repaired only glued to a number or between two numbers,
    so words are never touched ("sometimes", "sim2real", "10 times faster", "at 3pm"); URLs
    are left alone. A pass of each pattern: linear in the text.
    """
    if not (_GLUED.search(text) or _BETWEEN.search(text) or "^" in text):
        return text
    out: list[str] = []
    at = 0
    for m in _URL.finditer(text):
        out.append(_tidy(text[at : m.start()]))
        out.append(m.group())
        at = m.end()
    out.append(_tidy(text[at:]))
    return "".join(out)


def _tidy(part: str) -> str:
    part = _GLUED.sub(lambda m: "∞" if m["infty"] else _SYMBOLS[m["name"]], part)
    part = _BETWEEN.sub(lambda m: _SYMBOLS[m["name"]], part)
    if "^" in part:
        part = _SUPERSCRIPT.sub(lambda m: (m["sign"] + m["power"]).translate(_SUPERSCRIPTS), part)
    return part
