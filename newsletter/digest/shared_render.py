"""One rendering of a digest for every reader with the same sections, cut at each reader's values.

Readers who follow the same topics and have not voted get the same sections, so the same
message but for their address, their name, their view, manage and unsubscribe links, the
page of the papers a limit left out, and the prefix of their more/less links (which holds their
digest token). :func:`render_shared`
renders the message once with a mark in place of each such value
(:func:`~newsletter.digest.fragments.reader_mark`; the links' prefix is
:data:`~newsletter.digest.fragments.PREFIX_HOLE`) and cuts it into text and
:class:`~newsletter.models.Slot`; a filter whose input holds a mark (the footer line with the
address, wrapped; a link made safe) is left as a slot of its own, made per reader
(:func:`~newsletter.digest.fragments.deferring`). :func:`reader_values` gives a reader's values as
each part writes them; :mod:`newsletter.deliver.wire` encodes the parts once and joins each
reader's message (:class:`newsletter.edition.build.SharedMessages` keeps them per shape).

The marks start with :data:`~newsletter.digest.fragments.HOLE_MARK`, random per process, so feed text
cannot pass for one. A template that does with a reader's value something no mark can stand
for makes the cut fail (``None``) and its readers are rendered one by one; only the shipped
templates are shared at all (an operator's template may do anything, such as ``{{
subscriber.email | length }}``), and ``tests/edition/test_shared_messages.py`` holds each
reader's shared message byte-equal to their message rendered alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from newsletter.digest.fragments import (
    CACHING,
    DEFERRED,
    ENDS,
    HOLE_MARK,
    MARKED,
    READER_CODES,
    html_value,
    reader_mark,
)
from newsletter.digest.render import DigestLinks, Renderer, html_link_prefix, shipped_templates_dir
from newsletter.models import Digest, Slot


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a shared rendering: its pieces, and the deferred filter calls by slot code."""

    pieces: tuple[str | Slot, ...]
    deferred: dict[str, tuple[Callable[[str], str], str]]


def render_part(render: Callable[[], str]) -> Part | None:
    """Render with every reader's value marked and cut the result; ``None`` when a mark was
    changed into something no slot stands for (or a feedback link has a token per reader)."""
    deferred: list[tuple[Callable[[str], str], str]] = []
    pending = DEFERRED.set(deferred)
    depth = CACHING.set(CACHING.get() + 1)  # feedback links stay holes, as in a fragment
    try:
        body = str(render())
    finally:
        CACHING.reset(depth)
        DEFERRED.reset(pending)
    parts = body.split(HOLE_MARK)
    pieces: list[str | Slot] = [parts[0]]
    calls: dict[str, tuple[Callable[[str], str], str]] = {}
    for part in parts[1:]:
        kind = part[:1]
        if kind == "P":
            pieces += [Slot("P"), part[1:]]
        elif kind == "r" and part[1:2] and part[1] in READER_CODES:
            pieces += [Slot(part[1]), part[2:]]
        elif kind == "d" and (end := part.find("x")) > 1 and part[1:end].isdigit():
            code = f"d{part[1:end]}"
            calls[code] = deferred[int(part[1:end])]
            pieces += [Slot(code), part[end + 1 :]]
        else:
            return None
    return Part(tuple(p for p in pieces if p != ""), calls)


@dataclass(frozen=True, slots=True)
class Shared:
    """A message's HTML and text parts rendered once for the readers of one shape."""

    html: Part
    text: Part

    def without_pieces(self) -> Shared:
        """The same with the rendered text dropped (what :meth:`values` needs is kept)."""
        return Shared(Part((), self.html.deferred), Part((), self.text.deferred))

    def values(
        self, raw: dict[str, str], html_prefix: str, prefix: str
    ) -> tuple[dict[str, str], dict[str, str]]:
        """A reader's values by slot code for the HTML part (escaped, non-ASCII as references)
        and for the text part (as they are): ``raw`` by reader code, ``html_prefix`` and
        ``prefix`` their more/less links' prefix as each part writes it."""
        html = {k: html_value(v) for k, v in raw.items()}
        text = dict(raw)
        html["P"], text["P"] = html_prefix, prefix
        fill = lambda m: raw[m[1]]  # noqa: E731 - the marks in a deferred call's input
        for code, (fn, arg) in self.html.deferred.items():
            html[code] = html_value(fn(MARKED.sub(fill, arg)))
        for code, (fn, arg) in self.text.deferred.items():
            text[code] = fn(MARKED.sub(fill, arg))
        return html, text


# ---------------------------------------------------------------------------- a renderer's


def shares(renderer: Renderer) -> bool:
    """Whether readers of one shape may share ``renderer``'s renderings: only with the shipped
    templates (an operator's template may do anything with a reader's value) and the CSS
    inlined once."""
    if renderer.shares is None:
        renderer.shares = renderer.inlined is not None and _shipped(renderer)
    return renderer.shares


def _shipped(renderer: Renderer) -> bool:
    env = renderer.env
    assert env.loader is not None
    shipped = shipped_templates_dir()
    for name in ("digest.html", "digest.txt"):
        _, filename, _ = env.loader.get_source(env, name)
        if filename is None or Path(filename).resolve().parent != shipped:
            return False
    return True


def share_key(renderer: Renderer, digest: Digest, links: DigestLinks) -> tuple[object, ...] | None:
    """What readers must have in common to share a rendering (sections, titles, date, which
    of their values and links they have), or ``None``: render this one alone (an operator's
    templates, links with a token per reader)."""
    feedback = links.feedback
    if not shares(renderer) or (feedback is not None and not feedback.shared_ends):
        return None
    sub = digest.subscriber
    own = (sub.email, sub.name, links.view, links.manage, links.unsubscribe, links.more)
    return (
        digest.sections,
        digest.topic_titles,
        digest.note,
        digest.edition_date,
        tuple(bool(v) for v in own),  # a missing value is part of the shape
        feedback is None,
        links.by_mail,
    )


def render_shared(renderer: Renderer, digest: Digest, links: DigestLinks) -> Shared | None:
    """``digest``'s message rendered with a mark for each of the reader's values; ``None``
    when it cannot be shared."""
    inlined = renderer.inlined
    assert inlined is not None
    sub = digest.subscriber
    stand_in = replace(
        digest,
        subscriber=replace(
            sub, email=sub.email and reader_mark("e"), name=sub.name and reader_mark("n")
        ),
    )
    ctx = renderer.context(
        stand_in,
        replace(
            links,
            view=links.view and reader_mark("v"),
            manage=links.manage and reader_mark("m"),
            unsubscribe=links.unsubscribe and reader_mark("u"),
            more=links.more and reader_mark("a"),
        ),
    )
    feedback = links.feedback
    ends = ENDS.set(feedback.token if feedback is not None else None)
    try:
        html = render_part(lambda: inlined.render(ctx))
        text = render_part(lambda: renderer.text_template.render(ctx))
    finally:
        ENDS.reset(ends)
    return None if html is None or text is None else Shared(html, text)


def reader_values(
    shared: Shared, digest: Digest, links: DigestLinks
) -> tuple[dict[str, str], dict[str, str]]:
    """The reader's values for ``shared``'s slots, for the HTML part and the text part."""
    sub = digest.subscriber
    raw = {
        "e": sub.email,
        "n": sub.name,
        "v": links.view or "",
        "m": links.manage,
        "u": links.unsubscribe,
        "a": links.more or "",
    }
    prefix = links.feedback.prefix if links.feedback is not None else ""
    return shared.values(raw, html_link_prefix(prefix), prefix)
