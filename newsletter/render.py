"""Digest → subject, preheader, HTML and plain text. Jinja2 with autoescape; CSS inlined once.

The email HTML needs its CSS inlined (many mail clients drop ``<style>``). Running premailer on
every message costs ~20 ms per digest, so the :class:`Renderer` inlines the *template* once, when
it is built: every Jinja tag is swapped for an inert alphanumeric placeholder, premailer inlines
the CSS into the protected source, and the placeholders are put back. The result is an ordinary
Jinja template whose elements already carry their ``style`` attributes; per subscriber it is a
template render only. Placeholders are letters and digits, so premailer's serializer (which
percent-encodes spaces and non-ASCII in ``href``) cannot mangle a ``{{ url }}``.

Inlining the template is only equivalent to inlining each rendered message when every element's
style is decided by the template itself. A template that builds ``class``, ``id`` or ``style``
from data, or pulls in other templates (``include``, ``extends``, ``import``), cannot be inlined
once: the renderer then logs a warning naming the template and falls back to premailer per
message (correct, slow). ``tests/test_render.py`` proves that both paths give the same HTML.

Per-paper work is done once per paper per run, whatever the number of subscribers: each
paper's card (HTML) and text block are rendered once (``{% call once(paper, ...) %}`` in the
templates) and the excerpt, author list, wrapping and link cleaning are memoized; the reason,
which differs per subscriber, is rendered per message.

The "more like this" / "less like this" links are per reader *and* per paper, yet sit inside
the cached sections: the templates write ``{{ feedback(item, 1) }}``. Outside a cached fragment
that is the reader's link; while a fragment is rendered for the cache it is a hole (a marker
with a per-process random prefix, the paper's id and the vote), and the cache keeps the
fragment cut at its holes, so each reader's copy is a join of the cached pieces with their own
links: no pass over the whole message. Feed text cannot forge a hole: it never knows the prefix. The inlined template writes non-ASCII
characters as references, so the HTML is ASCII (several times faster to join, hash and encode).

Operators may override any template: a folder named in ``digest.templates_dir`` is searched
before the shipped templates.

Why one module of this length: the Jinja environment (memoized filters, the fragment cache and
its feedback holes) and the :class:`Renderer` share private per-message state (the ``_READER``
and ``_CACHING`` context variables), and with the inlining they keep one promise: the fast path
writes the same message as premailer per message would. Split, that state would have to become
public. Most of the rest is the explanation above and the small filters the templates use.
"""

from __future__ import annotations

import functools
import logging
import re
import secrets
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Protocol, TypeVar

import jinja2
import markupsafe
import premailer

from newsletter.config import Settings
from newsletter.excerpts import excerpt, lead_excerpt
from newsletter.latex import to_text
from newsletter.models import Digest, DigestItem

log = logging.getLogger(__name__)

TEXT_WIDTH = 76
"""The text part is wrapped at this width (a URL longer than a line stays whole)."""

CACHE_SIZE = 4096
"""Memoized per-paper values and cards kept per renderer (bounded: the web app's renderer lives
long; a few MB at most). A run with more papers than this still works: the cache starts over."""

FRAGMENT_CHARS = 8_000_000
"""Characters of rendered sections and cards kept per template environment (the HTML is ASCII:
one byte each), so a run's memory stays flat however many different sections it renders."""


def shipped_templates_dir() -> Path:
    """The shipped templates: inside the installed package, or the checkout's ``templates/``."""
    here = Path(__file__).resolve().parent
    inside = here / "templates"
    if inside.is_dir():
        return inside
    checkout = here.parent / "templates"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"no templates folder in {inside} or {checkout}; the install is broken")


class FeedbackUrls(Protocol):
    """One reader's "more like this" (+1) / "less like this" (-1) links for the items of their
    digest: ``prefix + token(item, value)`` (``newsletter.feedback.FeedbackLinks.for_subscriber``
    makes them). Tokens are URL-safe as they are, so only the prefix is ever escaped."""

    @property
    def prefix(self) -> str:
        """``{base_url}/feedback/``: what every token is appended to."""

    def token(self, item: DigestItem, value: int) -> str:
        """The signed token for a vote of ``value`` (+1 or -1) on ``item``."""


@dataclass(frozen=True, slots=True)
class DigestLinks:
    unsubscribe: str
    manage: str
    view: str | None = None
    feedback: FeedbackUrls | None = None
    """Per-item feedback links; without it the digest shows none."""
    by_mail: bool = False
    """``manage`` and ``unsubscribe`` both lead to a page that mails the reader fresh links (a
    "view in browser" page older than those links' 90 days): the footer says so, rather than
    promising a one-click unsubscribe it cannot give."""


@dataclass(frozen=True, slots=True)
class RenderedDigest:
    subject: str
    preheader: str
    html: str
    text: str


_F = TypeVar("_F", bound=Callable[..., Any])


def _memo(fn: _F, size: int = CACHE_SIZE) -> _F:
    """``fn`` with a bounded cache; unhashable arguments (a list of authors) skip the cache."""
    cached = functools.lru_cache(maxsize=size)(fn)

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return cached(*args, **kwargs)
        except TypeError:
            return fn(*args, **kwargs)

    functools.update_wrapper(call, fn)
    return call  # type: ignore[return-value]


def make_environment(
    templates_dir: Path | None = None, *, ascii_html: bool = False
) -> jinja2.Environment:
    """The Jinja environment: operator templates first, autoescape for HTML, memoized filters.

    ``ascii_html`` writes every non-ASCII character of an expression as a character reference
    (``&#233;``): the inlined digest template uses it, so its output is pure ASCII, which
    Python joins, hashes and encodes several times faster than text with wide characters.
    """
    loaders: list[jinja2.BaseLoader] = []
    if templates_dir is not None:
        loaders.append(jinja2.FileSystemLoader(str(templates_dir)))
    loaders.append(jinja2.FileSystemLoader(str(shipped_templates_dir())))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=jinja2.select_autoescape(["html", "htm", "xml"], default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        finalize=_ascii_markup if ascii_html else None,
    )
    # One cache per environment: a paper's excerpt, author list and wrapped text are computed
    # once, then reused for every subscriber whose digest holds the paper.
    env.filters["short_authors"] = _memo(short_authors)
    env.filters["excerpt"] = _memo(excerpt)
    env.filters["latex"] = to_text  # memoized itself: LaTeX in titles and abstracts as text
    env.filters["wrap"] = _memo(wrap)
    env.filters["url"] = _memo(safe_url)
    env.globals["once"] = Fragments()
    env.globals["feedback"] = _feedback
    env.filters["thousands"] = thousands
    env.filters["emphasis"] = _memo(emphasis)
    return env


def _ascii_markup(value: object) -> object:
    """An expression's value with non-ASCII characters as references (escaped first)."""
    if isinstance(value, str) and not value.isascii():
        escaped = str(markupsafe.escape(value))
        return markupsafe.Markup(_to_references(escaped))  # noqa: S704 - escaped just above
    return value


def _to_references(text: str) -> str:
    return text.encode("ascii", "xmlcharrefreplace").decode("ascii")


_HOLE_MARK = f"fbk{secrets.token_hex(6)}x"
"""Feedback links inside a cached fragment are written as ``_HOLE_MARK + paper id + m|l``, filled
in per reader; random per process, so no feed text can pass for one."""
_HOLE = re.compile(rf"{_HOLE_MARK}(\d+)([ml])")
_CACHING: ContextVar[int] = ContextVar("newsletter_render_caching", default=0)
"""How many fragments are being rendered for the cache (in this thread) right now."""
_READER: ContextVar[Callable[[int, str], str] | None] = ContextVar(
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
        if _CACHING.get():  # inside a fragment being cached: keep the holes
            return self.body
        reader = _READER.get() or _no_link
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
            depth = _CACHING.set(_CACHING.get() + 1)
            try:
                body = caller()
            finally:
                _CACHING.reset(depth)
            hit = _Holes(body) if _HOLE_MARK in body else body
            cache = self._cache
            self._chars += len(body)
            while cache and (len(cache) >= self.size or self._chars > self.max_chars):
                gone = cache.pop(next(iter(cache)))
                self._chars -= len(gone.body if isinstance(gone, _Holes) else gone)
            cache[key] = hit
        return hit.fill() if isinstance(hit, _Holes) else hit


def _feedback(item: DigestItem, value: int) -> str:
    """``{{ feedback(item, 1) }}``: the reader's link, or a hole inside a fragment being cached."""
    kind = "m" if value > 0 else "l"
    if _CACHING.get():
        return f"{_HOLE_MARK}{item.paper.id}{kind}"
    reader = _READER.get()
    return "" if reader is None else reader(item.paper.id, kind)


def short_authors(authors: tuple[str, ...] | list[str], shown: int = 3) -> str:
    """ "A. Author, B. Author + 5 more"."""
    names = [" ".join(a.split()) for a in authors if a.strip()]
    if not names:
        return ""
    if len(names) <= shown + 1:  # "+ 1 more" is longer than the name it hides
        return ", ".join(names)
    return ", ".join(names[:shown]) + f" + {len(names) - shown} more"


def wrap(text: str, width: int = TEXT_WIDTH, indent: str = "", first: str | None = None) -> str:
    """Fill ``text`` to ``width`` columns; words longer than a line (URLs) are never broken.

    The same lines as ``textwrap.fill(" ".join(text.split()), width, initial_indent=first,
    subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)`` (a test holds
    them equal), in a plain greedy loop: several times faster, and the text part wraps a few
    lines per subscriber (the footer with their address) that no cache can spare.
    """
    words = text.split()
    if not words:
        return ""
    lead = indent if first is None else first
    limit = width - len(lead)
    lines: list[str] = []
    line = [words[0]]
    length = len(words[0])
    for word in words[1:]:
        if length + 1 + len(word) > limit:
            lines.append(lead + " ".join(line))
            lead, limit = indent, width - len(indent)
            line, length = [word], len(word)
        else:
            line.append(word)
            length += 1 + len(word)
    lines.append(lead + " ".join(line))
    return "\n".join(lines)


_URL_OK = re.compile(r"^(https?://|mailto:)", re.IGNORECASE)
_URL_ESCAPE = re.compile(r"[\x00-\x20\x7f-\U0010ffff\"<>`]")


def safe_url(value: str | None) -> str:
    """A link from a feed as it may appear in ``href``: http(s) or mailto only, else ``""``.

    ``javascript:`` and other schemes are dropped (escaping does not make them harmless).
    Spaces, control characters and non-ASCII are percent-encoded as UTF-8, exactly as
    premailer's serializer would encode them, so both render paths give the same bytes; so are
    ``"``, ``<``, ``>`` and backticks, which never belong in a URL.
    """
    if not value:
        return ""
    url = value.strip()
    if not _URL_OK.match(url):
        return ""
    return _URL_ESCAPE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), url)


_EMPHASIS = re.compile(r"\*([^*\s][^*]*?)\*")


def emphasis(text: str) -> markupsafe.Markup:
    """A reason's ``*matched phrase*`` in italics; everything else escaped first."""
    out = markupsafe.Markup("")
    for i, part in enumerate(_EMPHASIS.split(text)):
        out += markupsafe.Markup("<em>%s</em>") % part if i % 2 else markupsafe.escape(part)
    return out


def thousands(n: int) -> str:
    """``n`` with thousands separators (``12,345``)."""
    return f"{n:,}"


def summary_line(digest: Digest) -> str:
    """ "3 new papers in LLM serving, Mixture of experts"."""
    count = len(digest.items)
    topics = _topics(digest)
    noun = "paper" if count == 1 else "papers"
    if count == 0:
        return f"Nothing new in {topics or 'your topics'} today"
    return f"{count} new {noun} in {topics}"


def _topics(digest: Digest) -> str:
    return ", ".join(s.title for s in digest.sections if s.items) or ", ".join(digest.topic_titles)


# ---------------------------------------------------------------------------- inlining


PREMAILER_OPTIONS: dict[str, Any] = {
    "keep_style_tags": True,
    "strip_important": False,
    "disable_validation": True,
    "cssutils_logging_level": logging.CRITICAL,
    "allow_network": False,
}


def inline_css(html: str) -> str:
    """premailer with the options every path uses (per message, or once on a template)."""
    return str(premailer.transform(html, **PREMAILER_OPTIONS))


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
    inlined = _to_references(inlined)
    return _PLACEHOLDER.sub(lambda m: tags[int(m.group(1) or m.group(2))], inlined)


# ---------------------------------------------------------------------------- the renderer


class Renderer:
    """Renders digests; built once per run (or once per web app) and reused for every subscriber.

    ``inline_once=False`` runs premailer on every rendered message instead: the slow reference
    path, and the fallback for a template that cannot be inlined once.
    """

    def __init__(
        self, settings: Settings, templates_dir: Path | None = None, *, inline_once: bool = True
    ) -> None:
        self.settings = settings
        self.env = make_environment(templates_dir)
        self.html_env = make_environment(templates_dir, ascii_html=True)
        self.html_template = self.env.get_template("digest.html")
        self.text_template = self.env.get_template("digest.txt")
        self.inlined: jinja2.Template | None = None
        """The HTML template with its CSS inlined, or ``None`` (premailer per message)."""
        if inline_once:
            self.inlined = self._inline_once()

    def _inline_once(self) -> jinja2.Template | None:
        assert self.env.loader is not None
        source, filename, _ = self.env.loader.get_source(self.env, "digest.html")
        try:
            inlined = inline_template_source(source)
        except NotInlinable as e:
            log.warning(
                "%s: CSS cannot be inlined once (%s); inlining every message instead, "
                "which is about 50x slower",
                filename,
                e,
            )
            return None
        return self.html_env.from_string(inlined)

    @property
    def fast(self) -> bool:
        """Whether the CSS was inlined once (else premailer runs for every message)."""
        return self.inlined is not None

    def subject(self, digest: Digest) -> str:
        """The digest's subject line (on one line, for the header)."""
        count = len(digest.items)
        topics = _topics(digest)
        if count == 0:
            text = f"Nothing new in {topics or 'your topics'} · {digest.edition_date:%b %d}"
        else:
            text = self.settings.digest.subject.format(
                count=count, topics=topics, date=digest.edition_date, name=digest.subscriber.name
            )
            if count == 1:
                text = text.replace("1 new papers", "1 new paper")
        return " ".join(text.split())  # never a CR/LF in a header

    @staticmethod
    def _reader(digest: Digest, feedback: FeedbackUrls) -> tuple[Callable[[int, str], str], ...]:
        """The message's feedback links by (paper id, ``m``/``l``): for the HTML (prefix made
        safe and escaped once) and for the text part. Each token is made once, on first use."""
        items = {item.paper.id: item for item in digest.items}
        tokens: dict[tuple[int, str], str] = {}
        prefix = feedback.prefix
        html_prefix = str(markupsafe.escape(safe_url(prefix)))

        def token(pid: int, kind: str) -> str:
            found = tokens.get((pid, kind))
            if found is None:
                item = items.get(pid)
                found = "" if item is None else feedback.token(item, 1 if kind == "m" else -1)
                tokens[pid, kind] = found
            return found

        def html(pid: int, kind: str) -> str:
            return html_prefix + token(pid, kind)

        def text(pid: int, kind: str) -> str:
            return prefix + token(pid, kind)

        return html, text

    def context(self, digest: Digest, links: DigestLinks) -> dict[str, object]:
        """The values the digest templates are rendered with."""
        sections = [s for s in digest.sections if s.items]
        # A topic with nothing strong today says so, rather than padding with weak matches.
        grouped = self.settings.digest.group_by_topic
        quiet = [s.title for s in digest.sections if not s.items] if grouped and sections else []
        return {
            "quiet": quiet,
            "digest": digest,
            "sections": sections,
            "items": digest.items,
            "subscriber": digest.subscriber,
            "date": digest.edition_date,
            "date_label": _date_label(digest.edition_date),
            "preheader": summary_line(digest),
            "topics": digest.topic_titles,
            "links": links,
            "feedback_on": links.feedback is not None,
            # The text part: one "rate these papers" link (the view page, whose cards have the
            # more/less buttons) when there is one, else each paper's two feedback links.
            "rate_link": links.view if links.feedback is not None and links.view else None,
            "paper_feedback": links.feedback is not None and not links.view,
            "sender": self.settings.sender,
            "show_sections": self.settings.digest.group_by_topic and len(sections) > 1,
            "width": TEXT_WIDTH,
        }

    def render(self, digest: Digest, links: DigestLinks) -> RenderedDigest:
        """The digest as subject, preheader, HTML (CSS inlined) and plain text."""
        ctx = self.context(digest, links)
        html_links = text_links = None
        if links.feedback is not None:
            html_links, text_links = self._reader(digest, links.feedback)
        reader = _READER.set(html_links)
        try:
            if self.inlined is not None:
                html = self.inlined.render(ctx)
            else:
                html = inline_css(self.html_template.render(ctx))
            _READER.set(text_links)
            text = self.text_template.render(ctx)
        finally:
            _READER.reset(reader)
        return RenderedDigest(self.subject(digest), str(ctx["preheader"]), html, text)


def _date_label(d: date) -> str:
    return f"{d:%A}, {d:%B} {d.day}, {d.year}"


__all__ = [
    "DigestItem",
    "DigestLinks",
    "FeedbackUrls",
    "NotInlinable",
    "RenderedDigest",
    "Renderer",
    "excerpt",
    "inline_css",
    "inline_template_source",
    "lead_excerpt",
    "safe_url",
    "short_authors",
    "wrap",
]
