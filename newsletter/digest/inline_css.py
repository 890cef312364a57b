"""CSS inlined once into a Jinja template (see :mod:`newsletter.digest.render`, which uses it).

Each ``{{ expression }}`` of the template becomes an inert alphanumeric placeholder and each
``{% statement %}`` an HTML comment holding one; premailer inlines the CSS into the protected
source; the placeholders are put back. The result is an ordinary Jinja template whose elements
already carry their ``style`` attributes, or :class:`NotInlinable` says why it cannot be one.

The shipped ``digest.html`` is also shipped inlined, as ``digest.inlined.html`` (first line: the
SHA-256 of the source it was made from): :func:`prebuilt` returns it for a template with that
very source, so a run with the shipped template neither imports premailer (with cssutils and
requests, about 90 ms) nor inlines (about 40 ms). ``make templates`` (``python -m
newsletter.digest.inline_css templates``) writes it again; ``tests/digest/test_render.py`` fails while it is
stale.

premailer (with lxml, cssutils and requests: about 21 MB) is therefore needed only for an
operator's own ``digest.html``, and comes with the ``templates`` extra
(:data:`INSTALL`); without it, such a template stops the run with one line saying so.
"""

from __future__ import annotations

import hashlib
import logging
import re
import sys
from pathlib import Path
from typing import Any

from newsletter.errors import NotInstalled

INSTALL = "pip install 'newsletter[templates]' (from a checkout: pip install -e '.[templates]')"
"""What to install to use a ``digest.html`` of one's own: premailer inlines its CSS."""


def to_references(text: str) -> str:
    """``text`` with every non-ASCII character as a character reference (``&#233;``)."""
    return text.encode("ascii", "xmlcharrefreplace").decode("ascii")


PREMAILER_OPTIONS: dict[str, Any] = {
    "keep_style_tags": True,
    "strip_important": False,
    "disable_validation": True,
    "cssutils_logging_level": logging.CRITICAL,
    "allow_network": False,
}


def inline_css(html: str) -> str:
    """premailer with the options every path uses (per message, or once on a template)."""
    try:
        import premailer  # here: a run with the shipped template never needs it (see prebuilt)
    except ImportError as e:
        raise NotInstalled(
            f"inlining its CSS needs premailer, which is not installed: {INSTALL}"
        ) from e

    return str(premailer.transform(html, **PREMAILER_OPTIONS))


PREBUILT = "digest.inlined.html"
"""The shipped ``digest.html``, inlined, beside it."""
_PREBUILT_HEAD = "{# digest.html inlined by newsletter.digest.inline_css, source sha256 "


def _prebuilt_head(source: str) -> str:
    digest = hashlib.sha256(source.encode()).hexdigest()
    return f"{_PREBUILT_HEAD}{digest} #}}\n"


def prebuilt(source: str, directory: Path) -> str | None:
    """:func:`inline_template_source` of ``source`` as ``directory`` ships it
    (:data:`PREBUILT`), or ``None`` when it ships none for that very source."""
    try:
        text = (directory / PREBUILT).read_text(encoding="utf-8")
    except OSError:
        return None
    head = _prebuilt_head(source)
    return text[len(head) :] if text.startswith(head) else None


def write_prebuilt(directory: Path) -> Path:
    """Inline ``directory``'s ``digest.html`` into :data:`PREBUILT` beside it."""
    source = (directory / "digest.html").read_text(encoding="utf-8")
    out = directory / PREBUILT
    out.write_text(_prebuilt_head(source) + inline_template_source(source), encoding="utf-8")
    return out


_JINJA_COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)
_JINJA_TAG = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
_MARK = "Jx9q"
_PLACEHOLDER = re.compile(rf"<!--{_MARK}(\d+)q9xJ-->|{_MARK}(\d+)q9xJ")
_DATA_ATTR = re.compile(rf"""\s(class|id|style)\s*=\s*(["'])[^"']*{_MARK}\d+q9xJ""", re.IGNORECASE)
_COMPOSES = re.compile(r"\{%-?\s*(include|extends|import|from)\b")
_START_TAG = re.compile(r"<([a-zA-Z][a-zA-Z0-9]*)")


_RAW_TEXT = re.compile(r"<(/?)(title|style|script|textarea)\b", re.IGNORECASE)


def _in_tag_or_raw_text(html: str, at: int) -> bool:
    """Whether position ``at`` is inside a tag, or inside ``<title>``/``<style>``/... text,
    where an HTML comment would not be a comment."""
    if html.rfind("<", 0, at) > html.rfind(">", 0, at):
        return True
    opened = [m for m in _RAW_TEXT.finditer(html, 0, at)]
    return bool(opened) and opened[-1].group(1) == ""


class NotInlinable(Exception):
    """A template whose CSS cannot be inlined once; the reason says why."""


def inline_template_source(source: str) -> str:
    """Inline the CSS of a Jinja HTML template once; the result is still a Jinja template.

    Each ``{{ expression }}`` becomes an alphanumeric placeholder; each ``{% statement %}``
    becomes an HTML comment holding one (an alphanumeric one inside a tag), so the HTML parser
    leaves it where it is even between table rows or in ``<head>``; ``{# comments #}`` go.
    Raises :class:`NotInlinable` when the result would differ from inlining each rendered
    message: data-built ``class``/``id``/``style``, composed templates, or Jinja tags or elements
    that the HTML parser moved or dropped.
    """
    if _MARK in source:
        raise NotInlinable(f"the template contains the placeholder marker {_MARK!r}")
    if m := _COMPOSES.search(source):
        raise NotInlinable(f"it uses {{% {m.group(1)} %}}; its parts would not be inlined")
    source = _JINJA_COMMENT.sub("", source)
    blank = _JINJA_TAG.sub(lambda m: " " * len(m.group()), source)
    tags: list[str] = []
    out: list[str] = []
    at = 0
    for m in _JINJA_TAG.finditer(source):
        before = source[at : m.start()]
        out.append(before)
        at = m.end()
        tags.append(m.group())
        mark = f"{_MARK}{len(tags) - 1}q9xJ"
        bare = m.group().startswith("{{") or _in_tag_or_raw_text(blank, m.start())
        out.append(mark if bare else f"<!--{mark}-->")
    out.append(source[at:])
    protected = "".join(out)
    if m := _DATA_ATTR.search(protected):
        raise NotInlinable(
            f"its {m.group(1)} attribute is built from data; styles would be lost (keep it static)"
        )
    inlined = inline_css(protected)
    found = [m.group() for m in _PLACEHOLDER.finditer(inlined)]
    if found != [m.group() for m in _PLACEHOLDER.finditer(protected)]:
        raise NotInlinable("the HTML parser moved, dropped or rewrote some Jinja tags")
    if _START_TAG.findall(_PLACEHOLDER.sub("", protected)) != _START_TAG.findall(
        _PLACEHOLDER.sub("", inlined)
    ):
        raise NotInlinable("the HTML parser moved or dropped elements (is the markup valid?)")
    # premailer's serializer turns character references into characters; the template's own
    # non-ASCII text (typographic quotes, the preheader padding) goes back to references, so
    # that the rendered HTML is ASCII (see make_environment's ascii_html).
    inlined = to_references(inlined)
    return _PLACEHOLDER.sub(lambda m: tags[int(m.group(1) or m.group(2))], inlined)


if (
    __name__ == "__main__"
):  # python -m newsletter.digest.inline_css DIR: DIR's digest.html, inlined again
    if len(sys.argv) != 2:
        sys.exit("usage: python -m newsletter.digest.inline_css TEMPLATES_DIR  (make templates)")
    print(write_prebuilt(Path(sys.argv[1])))
