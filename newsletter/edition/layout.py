"""What a mailed digest showed besides its papers, recorded with its ledger row.

A digest's sections, their order, each item's reason and the signals its card showed are
known when the message is built and cannot be had again later: ranking the same papers
another day, with other signals, other topics and other votes, gives another digest
(issue 43). :class:`Layouts` writes them, when the message is built, as a short JSON text
that the sent mark stores in ``editions.layout``, in the same statement as the papers
(``editions.paper_ids``); :func:`read_layout` reads it back and :meth:`Layout.digest` makes
the digest to render again, with the papers as stored.

The text holds ids and short strings, never HTML::

    {"v":1,"t":["GPU kernels","LLM serving"],
     "s":[["gpu-kernels","GPU kernels",[[412,"title: *CUDA*",31,2],[87,"abstract: *GEMM*"]],
           2,[93,105,7]],
          ["llm-serving","LLM serving",[],10]]}

``v`` the format, ``t`` the header's topic titles, ``s`` the sections (an empty one is a
topic that was quiet that day) as name, title and items, then the section's limit and the ids
of the good papers that limit alone left out (issue 44: "a quiet day", "3 more in the
archive"), each left out from the end when empty (0, none). An item is the paper's id, the
reason, then the upvotes, comments and code stars its card showed and the item's topic, each
left out from the end when empty (the topic when it is the section's). ``"g":0`` marks a
merged digest (``digest.group_by_topic: false`` at the send).

Per reader the cost is a join of cached pieces: readers of the same topics share their
sections' objects (:meth:`~newsletter.rank.Ranker.sections`), and each section is written once
per run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from newsletter.models import Digest, DigestItem, Later, Paper, Subscriber, TopicSection

log = logging.getLogger(__name__)

VERSION = 1
"""The format :class:`Layouts` writes; :func:`read_layout` reads only it."""

CACHED_SECTIONS = 4096
"""Sections a run keeps written (a few hundred bytes each); the cache starts over when full."""


@dataclass(frozen=True, slots=True)
class LaidItem:
    """One paper of a mailed digest as its card and its reason showed it."""

    paper_id: int
    topic: str
    reason: str
    upvotes: int | None = None
    comments: int | None = None
    code_stars: int | None = None


@dataclass(frozen=True, slots=True)
class LaidSection:
    """One section of a mailed digest: its topic's name and title, its items in order (none:
    the topic was quiet that day), how many it could show (0: not recorded) and the papers
    that limit left out (their ids)."""

    name: str
    title: str
    items: tuple[LaidItem, ...]
    limit: int = 0
    later: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Layout:
    """A mailed digest as :func:`read_layout` reads it back."""

    topic_titles: tuple[str, ...]
    sections: tuple[LaidSection, ...]
    grouped: bool = True
    """Whether the digest was grouped by topic (``digest.group_by_topic`` at the send)."""
    note: str = ""
    """The footer's note, when the mail had one (own topics matched by words only)."""

    @property
    def paper_ids(self) -> list[int]:
        """Every paper of the digest, in digest order (``editions.paper_ids``)."""
        return [i.paper_id for s in self.sections for i in s.items]

    def digest(
        self, subscriber: Subscriber, edition_date: date, papers: Mapping[int, Paper]
    ) -> Digest:
        """The digest as mailed, its papers as stored now (``papers`` by id) with the signals
        the mail showed; a paper no longer stored is left out."""
        sections = []
        for s in self.sections:
            items = tuple(
                DigestItem(
                    replace(
                        papers[i.paper_id],
                        upvotes=i.upvotes,
                        comments=i.comments,
                        code_stars=i.code_stars,
                    ),
                    i.topic,
                    0.0,
                    i.reason,
                )
                for i in s.items
                if i.paper_id in papers
            )
            later = Later.of(s.later) if s.later else None
            sections.append(TopicSection(s.name, s.title, items, s.limit, len(s.later), later))
        return Digest(subscriber, edition_date, tuple(sections), self.topic_titles, self.note)


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _item(item: DigestItem, section: str) -> list[Any]:
    p = item.paper
    out: list[Any] = [
        p.id,
        item.reason,
        p.upvotes,
        p.comments,
        p.code_stars if p.code_url else None,  # the card shows stars beside a code link only
        None if item.topic == section else item.topic,
    ]
    while len(out) > 2 and out[-1] is None:
        out.pop()
    return out


def _section(section: TopicSection) -> str:
    items = [_item(i, section.name) for i in section.items]
    out: list[Any] = [section.name, section.title, items]
    if section.limit or section.later is not None:
        out.append(section.limit)
    if section.later is not None:
        out.append(list(section.later.ids))
    return _dumps(out)


class Layouts:
    """Writes digests' layouts for one run, each section once (see the module docstring)."""

    def __init__(self, *, grouped: bool = True, max_sections: int = CACHED_SECTIONS) -> None:
        self._head = f'{{"v":{VERSION},' + ("" if grouped else '"g":0,')
        self._max = max_sections
        self._sections: dict[TopicSection, str] = {}
        self._titles: dict[tuple[str, ...], str] = {}

    def layout(self, digest: Digest) -> str:
        """``digest`` as ``editions.layout`` holds it."""
        pieces = []
        cache = self._sections
        for s in digest.sections:
            piece = cache.get(s)
            if piece is None:
                if len(cache) >= self._max:
                    cache.clear()
                piece = cache[s] = _section(s)
            pieces.append(piece)
        titles = self._titles.get(digest.topic_titles)
        if titles is None:
            if len(self._titles) >= self._max:
                self._titles.clear()
            titles = self._titles[digest.topic_titles] = _dumps(list(digest.topic_titles))
        note = f'"n":{_dumps(digest.note)},' if digest.note else ""
        return f'{self._head}{note}"t":{titles},"s":[{",".join(pieces)}]}}'


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not a string: {value!r}")
    return value


def _count(value: object) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError(f"not a count: {value!r}")


def _read_item(raw: object, section: str) -> LaidItem:
    if not isinstance(raw, list) or not 2 <= len(raw) <= 6:
        raise ValueError(f"not an item: {raw!r}")
    pid = _count(raw[0])
    if pid is None:
        raise ValueError("an item without a paper")
    rest = [*raw[2:], None, None, None, None][:4]
    topic = section if rest[3] is None else _str(rest[3])
    return LaidItem(pid, topic, _str(raw[1]), _count(rest[0]), _count(rest[1]), _count(rest[2]))


def _read_section(raw: object) -> LaidSection:
    if not isinstance(raw, list) or not 3 <= len(raw) <= 5 or not isinstance(raw[2], list):
        raise ValueError(f"not a section: {raw!r}")
    name = _str(raw[0])
    items = tuple(_read_item(i, name) for i in raw[2])
    limit = _count(raw[3]) if len(raw) > 3 else 0
    later = raw[4] if len(raw) > 4 else []
    if not isinstance(later, list):
        raise ValueError(f"not a list of papers: {later!r}")
    ids = tuple(_count(p) for p in later)
    if None in ids:
        raise ValueError("a paper left out without an id")
    return LaidSection(name, _str(raw[1]), items, limit or 0, ids)  # type: ignore[arg-type]


def read_layout(text: str | None) -> Layout | None:
    """The layout ``editions.layout`` holds; ``None`` for an edition without one (sent before
    they were recorded) or one this code cannot read (logged)."""
    if not text:
        return None
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or raw.get("v") != VERSION:
            raise ValueError(f"not format {VERSION}")
        titles = raw.get("t")
        sections = raw.get("s")
        if not isinstance(titles, list) or not isinstance(sections, list):
            raise ValueError("no titles or sections")
        return Layout(
            tuple(_str(t) for t in titles),
            tuple(_read_section(s) for s in sections),
            grouped=raw.get("g", 1) != 0,
            note=_str(raw.get("n", "")),
        )
    except ValueError as e:  # json's errors, and what Layouts does not write
        log.warning("an edition's recorded layout cannot be read (%s): ranking it again", e)
        return None
