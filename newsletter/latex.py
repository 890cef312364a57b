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
"""

from __future__ import annotations

import functools
import logging
import re

from pylatexenc.latex2text import LatexNodes2Text

log = logging.getLogger(__name__)

_LATEX_SIGN = re.compile(r"[\\$~{}^]|--|``")
"""Text without any of these is not LaTeX: shown as it is (most titles and abstracts)."""
_URL = re.compile(r"(?:https?://|www\.)\S+", re.IGNORECASE)
_BARE = re.compile(r"(?<!\\)([%&#])")
_DOLLAR = re.compile(r"(?<!\\)\$")
_CONVERTER = LatexNodes2Text(math_mode="text", strict_latex_spaces=False)


@functools.lru_cache(maxsize=8192)
def to_text(text: str) -> str:
    """``text`` with its LaTeX turned into Unicode text, on one line; the raw text on failure."""
    if not text or not _LATEX_SIGN.search(text):
        return text
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
        return text
    if text.strip() and not converted:
        return text
    return converted


def _convert(part: str) -> str:
    if not _LATEX_SIGN.search(part):
        return part
    lead = " " if part[:1].isspace() else ""
    tail = " " if part[-1:].isspace() else ""
    part = _BARE.sub(r"\\\1", part)
    if len(_DOLLAR.findall(part)) % 2:  # "costs $5": dollar signs, not math
        part = _DOLLAR.sub(r"\\$", part)
    return lead + str(_CONVERTER.latex_to_text(part)).replace("\xa0", " ") + tail
