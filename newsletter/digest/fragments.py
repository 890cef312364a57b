"""The per-run caches of :mod:`newsletter.digest.render` and the holes that keep them per reader.

:class:`Fragments` renders a template block (a topic section, a paper's card) once per key and
keeps it with *holes* where each reader's "more/less like this" links go. A hole is
:data:`HOLE_MARK` (random per process, so feed text cannot forge one) and a short code. When a
link's end is the same for every reader (one token per digest: ``{prefix}{topic}/{paper}/more``,
the prefix holding the reader's token), the section is kept with that end written in and only the
prefix left out, so a reader's copy of a section is one ``prefix.join(pieces)``. Per-reader
tokens (links mailed before) leave a hole per link, filled by the reader's callback.
``tests/digest/test_shared_render.py`` holds a section shared by many readers byte-equal to each
reader's digest rendered alone.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import markupsafe

from newsletter.models import DigestItem

CACHE_SIZE = 4096
"""Entries kept per cache (bounded: the web app's renderer lives long)."""

FRAGMENT_CHARS = 8_000_000
"""Characters of rendered sections and cards kept per template environment (the HTML is ASCII:
one byte each), so a run's memory stays flat however many different sections it renders."""

HOLE_MARK = f"fbk{secrets.token_hex(6)}x"
"""Feedback links inside a cached fragment are written as ``HOLE_MARK + paper id + m|l``, filled
in per reader; random per process, so no feed text can pass for one."""
_HOLE = re.compile(rf"{HOLE_MARK}(\d+)([ml])")
PREFIX_HOLE = f"{HOLE_MARK}P"
"""Where a reader's link prefix goes, before a link end written into the fragment."""
CACHING: ContextVar[int] = ContextVar("newsletter_render_caching", default=0)
"""How many fragments are being rendered for the cache (in this thread) right now."""


class Reader:
    """The message being rendered: its link ``prefix`` (as the part writes it: escaped for HTML)
    and ``link(paper id, "m" or "l")``, the whole feedback link."""

    __slots__ = ("link", "prefix")

    def __init__(self, prefix: str, link: Callable[[int, str], str]) -> None:
        self.prefix = prefix
        self.link = link


READER: ContextVar[Reader | None] = ContextVar("newsletter_render_reader", default=None)
"""The message being rendered (:class:`Reader`), or ``None``: no feedback links."""
ENDS: ContextVar[Callable[[DigestItem, int], str] | None] = ContextVar(
    "newsletter_render_link_ends", default=None
)
"""When set: a feedback link's end after the prefix, the same for every reader (the digest's
token is in the prefix); fragments are then cached with it written in."""


class _Holes:
    """A cached fragment with the reader's feedback links left out: text, hole, text, ..."""

    __slots__ = ("body", "joinable", "markup", "parts")

    def __init__(self, body: str) -> None:
        self.body = body
        self.markup = isinstance(body, markupsafe.Markup)
        """Rendered with autoescape: the joined copy is markup too (links come escaped)."""
        self.joinable: list[str] | None = None
        """Only prefix holes: the pieces a reader's prefix joins."""
        self.parts: tuple[str | tuple[int, str], ...] = ()
        if _HOLE.search(body) is None:
            self.joinable = str(body).split(PREFIX_HOLE)
            return
        pieces = _HOLE.split(body)  # text, id, kind, text, id, kind, ..., text
        self.parts = tuple(
            pieces[i] if i % 3 == 0 else (int(pieces[i]), pieces[i + 1])
            for i in range(0, len(pieces))
            if i % 3 != 2
        )

    def fill(self) -> str:
        if CACHING.get():  # inside a fragment being cached: keep the holes
            return self.body
        reader = READER.get()
        if self.joinable is not None:
            joined = ("" if reader is None else reader.prefix).join(self.joinable)
        else:
            link = _no_link if reader is None else reader.link
            joined = "".join(
                (p.replace(PREFIX_HOLE, reader.prefix if reader else "") if PREFIX_HOLE in p else p)
                if type(p) is str
                else link(*p)
                for p in self.parts
            )
        return markupsafe.Markup(joined) if self.markup else joined  # noqa: S704 - escaped parts


def _no_link(pid: int, kind: str) -> str:
    return ""


class Fragments:
    """``{% call once(key...) %}body{% endcall %}``: the body rendered once per key, then reused.

    The digest templates wrap each topic section in it (keyed by the ``TopicSection``, items and
    reasons included, so a different section is a different key: most readers of a topic get
    the same one) and, inside, each paper's card (keyed by the ``Paper`` itself, so a changed
    paper is a new key). Only what depends on the key may be inside, except the reader's
    feedback links: a body with ``feedback(...)`` links is kept with holes in their place,
    filled per reader. Bounded by entries and by characters held: the oldest entries go first.
    """

    def __init__(self, size: int = CACHE_SIZE, max_chars: int = FRAGMENT_CHARS) -> None:
        self.size = size
        self.max_chars = max_chars
        self._cache: dict[tuple[object, ...], str | _Holes] = {}
        self._chars = 0

    def __call__(self, *key: object, caller: Callable[[], str]) -> str:
        key = (*key, ENDS.get() is not None)  # link ends written in, or a hole per link
        try:
            hit = self._cache.get(key)
        except TypeError:  # an unhashable key: no caching
            return caller()
        if hit is None:
            depth = CACHING.set(CACHING.get() + 1)
            try:
                body = caller()
            finally:
                CACHING.reset(depth)
            hit = _Holes(body) if HOLE_MARK in body else body
            cache = self._cache
            self._chars += len(body)
            while cache and (len(cache) >= self.size or self._chars > self.max_chars):
                gone = cache.pop(next(iter(cache)))
                self._chars -= len(gone.body if isinstance(gone, _Holes) else gone)
            cache[key] = hit
        return hit.fill() if isinstance(hit, _Holes) else hit


def feedback_link(item: DigestItem, value: int) -> str:
    """``{{ feedback(item, 1) }}``: the reader's link, or a hole inside a fragment being cached
    (the prefix's alone, followed by the link's end, when every reader's end is the same)."""
    kind = "m" if value > 0 else "l"
    if CACHING.get():
        ends = ENDS.get()
        if ends is not None:
            return PREFIX_HOLE + ends(item, value)  # escaped with the rest by autoescape
        return f"{HOLE_MARK}{item.paper.id}{kind}"
    reader = READER.get()
    return "" if reader is None else reader.link(item.paper.id, kind)


# ---------------------------------------------------------------------------- shared renderings
# The marks of a reader's values while a message is rendered for every reader of its shape
# (see newsletter.digest.shared_render).

READER_CODES = "envmua"
"""A reader's own values in a shared rendering: address (``e``), name (``n``), view (``v``),
manage (``m``) and unsubscribe (``u``) links, and the page of papers a limit left out (``a``,
in the archive); marked ``HOLE_MARK + "r" + code``."""

DEFERRED: ContextVar[list[tuple[Callable[[str], str], str]] | None] = ContextVar(
    "newsletter_render_deferred", default=None
)
"""While a shared rendering is made: the filter calls (wrap, url) whose input holds a reader's
value, to be made per reader (marked ``HOLE_MARK + "d" + index + "x"``)."""
MARKED = re.compile(rf"{HOLE_MARK}r([{READER_CODES}])")


def reader_mark(code: str) -> str:
    """What stands for a reader's value (:data:`READER_CODES`) while a shared rendering is made."""
    return f"{HOLE_MARK}r{code}"


def deferring(fn: Callable[..., str]) -> Callable[..., str]:
    """A filter that, while a shared rendering is made, leaves a slot for a value holding a
    reader's value (a wrapped footer line with the address, a link made safe)."""

    def call(value: Any, *args: Any, **kwargs: Any) -> str:
        pending = DEFERRED.get()
        if pending is not None and isinstance(value, str) and HOLE_MARK in value:
            pending.append((lambda v: fn(v, *args, **kwargs), value))
            return f"{HOLE_MARK}d{len(pending) - 1}x"
        return fn(value, *args, **kwargs)

    return call


def html_value(value: str) -> str:
    """A value as the digest's HTML template writes it: escaped, non-ASCII as references."""
    text = str(markupsafe.escape(value))
    return text if text.isascii() else text.encode("ascii", "xmlcharrefreplace").decode("ascii")
