"""What every parser returns."""

from __future__ import annotations

import re
from calendar import timegm
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import struct_time

from newsletter.models import PaperData


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


_WS = re.compile(r"\s+")


def clean_text(text: str | None) -> str:
    """Collapse whitespace (including CR/LF) to single spaces."""
    return _WS.sub(" ", text or "").strip()


def struct_to_datetime(value: struct_time | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(timegm(value), UTC)


def split_authors(text: str) -> tuple[str, ...]:
    """arXiv's ``dc:creator`` is one comma-joined string ("A, B, and C")."""
    parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", clean_text(text))
    return tuple(p for p in (s.strip() for s in parts) if p)
