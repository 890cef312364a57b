"""What every parser returns."""

from __future__ import annotations

import re
from calendar import timegm
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from time import struct_time
from typing import Any

import feedparser

from newsletter.models import PaperData
from newsletter.text import collapse_spaces, one_line_text, strip_controls


@dataclass(frozen=True, slots=True)
class Skipped:
    """An entry that was not stored, and why (nothing is dropped silently)."""

    what: str
    reason: str


@dataclass(frozen=True, slots=True)
class ParseResult:
    papers: tuple[PaperData, ...]
    skipped: tuple[Skipped, ...] = ()
    problems: tuple[str, ...] = field(default=())
    """Feed-level trouble (malformed XML, wrong encoding): what parsed is kept, this is reported."""
    entries: int = 0
    """How many entries the source listed."""
    total: int | None = None
    """For paginated sources: how many results the whole query has."""


def clean_text(text: str | None) -> str:
    """Collapse whitespace (including CR/LF) to single spaces."""
    return collapse_spaces(text or "")


def clean_paper(paper: PaperData) -> PaperData:
    """A paper as it may be stored: no control character or escape sequence in any text field."""
    return replace(
        paper,
        key=one_line_text(paper.key),
        title=one_line_text(paper.title),
        abstract=one_line_text(paper.abstract),
        authors=tuple(a for a in map(one_line_text, paper.authors) if a),
        categories=tuple(c for c in map(one_line_text, paper.categories) if c),
        url=one_line_text(paper.url),
        pdf_url=one_line_text(paper.pdf_url) if paper.pdf_url else paper.pdf_url,
        code_url=one_line_text(paper.code_url) if paper.code_url else paper.code_url,
    )


def clean_result(result: ParseResult) -> ParseResult:
    """A parse result with :func:`clean_paper` papers and control-free skip reasons and problems.

    The one place feed text is normalised before ingest stores, logs or prints it.
    """
    return replace(
        result,
        papers=tuple(map(clean_paper, result.papers)),
        skipped=tuple(
            Skipped(one_line_text(s.what), one_line_text(s.reason)) for s in result.skipped
        ),
        problems=tuple(map(strip_controls, result.problems)),
    )


EXCERPT_CHARS = 80


def is_remote(url: str) -> bool:
    """Whether a body came over http(s), as opposed to a local file or path."""
    return url.lower().startswith(("http://", "https://"))


def response_excerpt(body: bytes, url: str) -> str:
    """``; the response began '...'`` for a remote answer, else nothing.

    A local file's bytes are never quoted (a source pointed at ``/proc/self/environ`` would put
    secrets into errors, the database, logs and alert mails); a remote answer is quoted at most
    80 characters, with control characters removed.
    """
    if not is_remote(url):
        return ""
    text = body[: EXCERPT_CHARS * 4].decode("utf-8", "replace")
    text = clean_text("".join(ch if ch.isprintable() else " " for ch in text))
    text = text[:EXCERPT_CHARS]
    return f"; the response began {text!r}" if text else ""


def struct_to_datetime(value: struct_time | None) -> datetime | None:
    """A feedparser time (UTC) as an aware datetime, or ``None``."""
    if value is None:
        return None
    return datetime.fromtimestamp(timegm(value), UTC)


def split_authors(text: str) -> tuple[str, ...]:
    """arXiv's ``dc:creator`` is one comma-joined string ("A, B, and C")."""
    parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", clean_text(text))
    return tuple(p for p in (s.strip() for s in parts) if p)


def parse_xml_feed(body: bytes, *, generic: bool = False) -> Any:
    """feedparser on downloaded bytes only: never a URL or a path it would open itself.

    feedparser treats a ``str`` as a URL or file name to fetch; sources must not let it.
    ``generic`` feeds (any RSS/Atom) get feedparser's HTML sanitizing and ``xml:base``
    resolution of relative links; arXiv's own formats need neither and parse faster without.
    External entities are never resolved.
    """
    if not isinstance(body, bytes):
        raise TypeError("parsers take the bytes the fetcher downloaded, not a URL or path")
    return feedparser.parse(body, sanitize_html=generic, resolve_relative_uris=generic)
