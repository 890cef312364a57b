"""The per-run caches of :mod:`newsletter.render` and the holes that keep them per reader.

:class:`Fragments` renders a template block (a topic section, a paper's card) once per key and
keeps it with *holes* where each reader's "more/less like this" links go. :class:`Skeletons`
does the same for a whole message: readers whose digests have the same sections (the same
topics, no votes) share one rendering, with holes for everything that is theirs: the address,
the name, the view, manage and unsubscribe links, the feedback links, and the wrapped lines that
hold any of them. A hole is :data:`HOLE_MARK` (random per process, so feed text cannot forge
one) and a short code; a reader's copy is a join of the cached pieces and their values, which
is what rendering the template for them writes (``tests/test_render_shared.py`` holds them
byte-equal).
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

SKELETON_CHARS = 24_000_000
"""Characters of whole messages kept per renderer (a few hundred topic sets)."""


HOLE_MARK = f"fbk{secrets.token_hex(6)}x"
"""Feedback links inside a cached fragment are written as ``HOLE_MARK + paper id + m|l``, filled
in per reader; random per process, so no feed text can pass for one."""
_HOLE = re.compile(rf"{HOLE_MARK}(\d+)([ml])")
CACHING: ContextVar[int] = ContextVar("newsletter_render_caching", default=0)
"""How many fragments are being rendered for the cache (in this thread) right now."""
READER: ContextVar[Callable[[int, str], str] | None] = ContextVar(
    "newsletter_render_reader", default=None
)
"""The message being rendered: its feedback link for (paper id, ``m`` or ``l``)."""


class _Holes:
    """A cached fragment with the reader's feedback links left out: text, hole, text, ..."""

    __slots__ = ("body", "markup", "parts")

    def __init__(self, body: str) -> None:
        self.body = body
        self.markup = isinstance(body, markupsafe.Markup)
        """Rendered with autoescape: the joined copy is markup too (links come escaped)."""
        pieces = _HOLE.split(body)  # text, id, kind, text, id, kind, ..., text
        self.parts: tuple[str | tuple[int, str], ...] = tuple(
            pieces[i] if i % 3 == 0 else (int(pieces[i]), pieces[i + 1])
            for i in range(0, len(pieces))
            if i % 3 != 2
        )

    def fill(self) -> str:
        if CACHING.get():  # inside a fragment being cached: keep the holes
            return self.body
        reader = READER.get() or _no_link
        joined = "".join(p if type(p) is str else reader(*p) for p in self.parts)
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
    """``{{ feedback(item, 1) }}``: the reader's link, or a hole inside a fragment being cached."""
    kind = "m" if value > 0 else "l"
    if CACHING.get():
        return f"{HOLE_MARK}{item.paper.id}{kind}"
    reader = READER.get()
    return "" if reader is None else reader(item.paper.id, kind)


# ---------------------------------------------------------------------------- whole messages

READER_CODES = "envmu"
"""A reader's own values in a skeleton: address (``e``), name (``n``), view (``v``), manage
(``m``) and unsubscribe (``u``) links; written ``HOLE_MARK + "r" + code``."""
_DEFERRED: ContextVar[list[tuple[Callable[..., str], tuple[Any, ...]]] | None] = ContextVar(
    "newsletter_render_deferred", default=None
)
"""While a skeleton renders: the filter calls (wrap, url) whose input holds a reader's value,
to be made per reader (``HOLE_MARK + "d" + index + "x"``)."""
_DIGITS = re.compile(r"(\d+)([ml])")
_PLAIN = re.compile(rf"{HOLE_MARK}r([{READER_CODES}])")


def reader_mark(code: str) -> str:
    """What stands for a reader's value (``READER_CODES``) while a skeleton renders."""
    return f"{HOLE_MARK}r{code}"


def deferring(fn: Callable[..., str]) -> Callable[..., str]:
    """A filter that, while a skeleton renders, leaves a hole for a value holding a reader's
    value (a wrapped footer line with the address, a link made safe), made per reader."""

    def call(value: Any, *args: Any, **kwargs: Any) -> str:
        pending = _DEFERRED.get()
        if pending is not None and isinstance(value, str) and HOLE_MARK in value:
            pending.append((lambda v: fn(v, *args, **kwargs), (value,)))
            return f"{HOLE_MARK}d{len(pending) - 1}x"
        return fn(value, *args, **kwargs)

    return call


Piece = str | tuple[int, Any, Any]
"""Text, or a hole: (0, paper id, ``m``/``l``), (1, reader code, -), (2, filter, its input)."""


class Skeleton:
    """One message part rendered for a set of readers, cut at its holes."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: tuple[Piece, ...], size: int) -> None:
        self.pieces = pieces
        self.size = size

    @classmethod
    def cut(
        cls, body: str, deferred: list[tuple[Callable[..., str], tuple[Any, ...]]]
    ) -> Skeleton | None:
        """The pieces of a rendered body; ``None`` when a hole is not one this code made (a
        template that transforms a reader's value in a way no hole can stand for)."""
        parts = body.split(HOLE_MARK)
        pieces: list[Piece] = [parts[0]]
        for part in parts[1:]:
            kind = part[:1]
            if kind == "r" and part[1:2] and part[1] in READER_CODES:
                pieces += [(1, part[1], None), part[2:]]
            elif kind == "d" and (end := part.find("x")) > 1 and part[1:end].isdigit():
                fn, args = deferred[int(part[1:end])]
                pieces += [(2, fn, args[0]), part[end + 1 :]]
            elif m := _DIGITS.match(part):
                pieces += [(0, int(m[1]), m[2]), part[m.end() :]]
            else:
                return None
        return cls(tuple(p for p in pieces if p != ""), len(body))

    def fill(
        self,
        raw: dict[str, str],
        written: dict[str, str],
        out: Callable[[str], str],
        feedback: Callable[[int, str], str] | None,
    ) -> str:
        """The reader's copy: their values by reader code (``raw``, and ``written`` as the part
        writes them: escaped for HTML), ``out`` to write a deferred filter's result (escaped
        likewise), ``feedback`` for the more/less links (``None``: no links)."""
        joined: list[str] = []
        add = joined.append
        for p in self.pieces:
            if isinstance(p, str):
                add(p)
                continue
            kind, a, b = p
            if kind == 0:
                add("" if feedback is None else feedback(a, b))
            elif kind == 1:
                add(written[a])
            else:
                add(out(a(_PLAIN.sub(lambda m: raw[m[1]], b))))
        return "".join(joined)


def render_skeleton(render: Callable[[], str]) -> Skeleton | None:
    """Render with every reader's value left as a hole (feedback links too) and cut it."""
    deferred: list[tuple[Callable[..., str], tuple[Any, ...]]] = []
    pending = _DEFERRED.set(deferred)
    depth = CACHING.set(CACHING.get() + 1)  # feedback links stay holes, as in a fragment
    try:
        body = render()
    finally:
        CACHING.reset(depth)
        _DEFERRED.reset(pending)
    return Skeleton.cut(str(body), deferred)


class Skeletons:
    """A renderer's skeletons by key (sections, titles, date, which links are there), bounded
    by characters held: the oldest go first."""

    def __init__(self, max_chars: int = SKELETON_CHARS) -> None:
        self.max_chars = max_chars
        self._cache: dict[object, tuple[Skeleton, Skeleton] | None] = {}
        self._chars = 0

    def get(self, key: object) -> tuple[Skeleton, Skeleton] | bool | None:
        """The (HTML, text) skeletons of ``key``; ``None`` if they cannot be made, ``False``
        if not made yet."""
        return self._cache.get(key, False)

    def put(self, key: object, made: tuple[Skeleton, Skeleton] | None) -> None:
        """Keep ``made`` for ``key`` (``None``: this shape is rendered per reader)."""
        cache = self._cache
        if made is not None:
            self._chars += made[0].size + made[1].size
        while cache and self._chars > self.max_chars:
            gone = cache.pop(next(iter(cache)))
            if gone is not None:
                self._chars -= gone[0].size + gone[1].size
        cache[key] = made


def html_value(value: str) -> str:
    """A value as the digest's HTML template writes it: escaped, non-ASCII as references."""
    text = str(markupsafe.escape(value))
    return text if text.isascii() else text.encode("ascii", "xmlcharrefreplace").decode("ascii")
