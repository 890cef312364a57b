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
message (correct, slow). ``tests/digest/test_render.py`` proves that both paths give the same HTML.

Per-paper work is done once per paper per run, whatever the number of subscribers: each
paper's card (HTML) and text block are rendered once (``{% call once(paper, ...) %}`` in the
templates) and the excerpt, author list, wrapping and link cleaning are memoized; the reason,
which differs per subscriber, is rendered per message.

The "more like this" / "less like this" links are per reader *and* per paper, yet sit inside
the cached sections: the templates write ``{{ feedback(item, 1) }}``. Outside a cached fragment
that is the reader's link; while a fragment is rendered for the cache it is a hole (a marker
with a per-process random prefix). With one token per digest the link's end (topic, paper,
vote) is the same for every reader: the section is kept with the ends written in and a hole
for the prefix only, so a reader's copy of a section is ``prefix.join(pieces)``; per-reader
tokens leave a hole per link, filled by a callback. Feed text cannot forge a hole: it never
knows the marker. The inlined template writes non-ASCII characters as references, so the HTML
is ASCII (several times faster to join, hash and encode).

Operators may override any template: a folder named in ``digest.templates_dir`` is searched
before the shipped templates.

The fragment and whole-message caches and their holes live in :mod:`newsletter.digest.fragments`;
inlining the CSS once, in :mod:`newsletter.digest.inline_css`.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Protocol, TypeVar

import jinja2
import markupsafe

from newsletter.config import Settings
from newsletter.digest.excerpts import excerpt, lead_excerpt
from newsletter.digest.fragments import (
    CACHE_SIZE,
    ENDS,
    READER,
    Fragments,
    Reader,
    deferring,
    feedback_link,
)
from newsletter.digest.inline_css import (
    PREMAILER_OPTIONS,
    NotInlinable,
    inline_css,
    inline_template_source,
    prebuilt,
    to_references,
)
from newsletter.digest.latex import to_text
from newsletter.errors import NotInstalled
from newsletter.models import MAX_AUTHOR_CHARS, Digest, DigestItem, TopicSection, clip

log = logging.getLogger(__name__)

TEXT_WIDTH = 76
"""The text part is wrapped at this width (a URL longer than a line stays whole)."""


def shipped_templates_dir() -> Path:
    """The shipped templates: inside the installed package, or the checkout's ``templates/``."""
    here = Path(__file__).resolve().parent.parent
    inside = here / "templates"
    if inside.is_dir():
        return inside
    checkout = here.parent / "templates"
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"no templates folder in {inside} or {checkout}; the install is broken")


class FeedbackUrls(Protocol):
    """One reader's "more like this" (+1) / "less like this" (-1) links for the items of their
    digest: ``prefix + token(item, value)`` (``newsletter.subscribe.votes.FeedbackLinks.for_subscriber``
    makes them). Tokens are URL-safe as they are, so only the prefix is ever escaped."""

    @property
    def prefix(self) -> str:
        """``{base_url}/feedback/``: what every token is appended to."""

    def token(self, item: DigestItem, value: int) -> str:
        """The signed token for a vote of ``value`` (+1 or -1) on ``item``."""

    @property
    def shared_ends(self) -> bool:
        """Whether :meth:`token` is the same for every reader (the reader is in the prefix):
        then the cached sections carry the links' ends and a reader's copy is one join."""


@dataclass(frozen=True, slots=True)
class DigestLinks:
    unsubscribe: str
    manage: str
    view: str | None = None
    feedback: FeedbackUrls | None = None
    """Per-item feedback links; without it the digest shows none."""
    more: str | None = None
    """The page listing, per section, the papers its limit left out (``{view}/more``): a
    section's "3 more in the archive" links to it (``#more-{section}``); without it the note
    is not a link."""
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
    env.filters["wrap"] = deferring(_memo(wrap))  # a line with the reader's address: per reader
    env.filters["url"] = deferring(_memo(safe_url))
    env.globals["once"] = Fragments()
    env.globals["feedback"] = feedback_link
    env.globals["section_note"] = section_note
    env.filters["thousands"] = thousands
    env.filters["emphasis"] = _memo(emphasis)
    return env


def _ascii_markup(value: object) -> object:
    """An expression's value with non-ASCII characters as references (escaped first)."""
    if isinstance(value, str) and not value.isascii():
        escaped = str(markupsafe.escape(value))
        return markupsafe.Markup(to_references(escaped))  # noqa: S704 - escaped just above
    return value


def short_authors(authors: tuple[str, ...] | list[str], shown: int = 3) -> str:
    """ "A. Author, B. Author + 5 more" (each name shown in at most
    :data:`~newsletter.models.MAX_AUTHOR_CHARS`)."""
    names = [a for a in authors if a and not a.isspace()]
    if not names:
        return ""
    first = names if len(names) <= shown + 1 else names[:shown]
    text = ", ".join(
        clip(" ".join(a[: 2 * MAX_AUTHOR_CHARS].split()), MAX_AUTHOR_CHARS) for a in first
    )
    if len(names) <= shown + 1:  # "+ 1 more" is longer than the name it hides
        return text
    return text + f" + {len(names) - shown} more"


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


def html_link_prefix(prefix: str) -> str:
    """A feedback links' prefix as the HTML part writes it: made safe, then escaped."""
    return str(markupsafe.escape(safe_url(prefix)))


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


def section_note(section: TopicSection) -> str:
    """What a section says under its papers (issue 44): "3 papers today in GPU kernels: a
    quiet day" when it had room for more and nothing was left out, "5 more in the archive"
    when its limit left good papers out, else nothing. A section without papers says nothing
    here: the digest's "Nothing strong in ... today" line names it."""
    n = len(section.items)
    if section.quiet:
        return f"{n} {'paper' if n == 1 else 'papers'} today in {section.title}: a quiet day"
    if section.more and n:
        return f"{section.more} more in the archive"
    return ""


def _topics(digest: Digest) -> str:
    return ", ".join(s.title for s in digest.sections if s.items) or ", ".join(digest.topic_titles)


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
        self.shares: bool | None = None
        """Whether readers of one shape may share a rendering (:func:`newsletter.digest.shared_render.shares`)."""

    def _inline_once(self) -> jinja2.Template | None:
        assert self.env.loader is not None
        source, filename, _ = self.env.loader.get_source(self.env, "digest.html")
        try:
            inlined = prebuilt(source, shipped_templates_dir()) or inline_template_source(source)
        except NotInstalled as e:  # a template of the operator's, without the templates extra
            raise NotInstalled(f"{filename}: {e}") from e
        except NotInlinable as e:
            log.warning(
                "%s: CSS cannot be inlined once (%s); inlining every message instead, "
                "which is about 50x slower",
                filename,
                e,
            )
            try:  # every message will need premailer: say so now, not once per reader
                inline_css("<p></p>")
            except NotInstalled as missing:
                raise NotInstalled(f"{filename}: {missing}") from missing
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
    def _readers(digest: Digest, feedback: FeedbackUrls) -> tuple[Reader, Reader]:
        """The message's feedback links, for the HTML (prefix made safe and escaped once) and
        for the text part. Each token is made once, on first use."""
        items = {item.paper.id: item for item in digest.items}
        tokens: dict[tuple[int, str], str] = {}
        prefix = feedback.prefix
        html_prefix = html_link_prefix(prefix)

        def token(pid: int, kind: str) -> str:
            found = tokens.get((pid, kind))
            if found is None:
                item = items.get(pid)
                found = "" if item is None else feedback.token(item, 1 if kind == "m" else -1)
                tokens[pid, kind] = found
            return found

        return (
            Reader(html_prefix, lambda pid, kind: html_prefix + token(pid, kind)),
            Reader(prefix, lambda pid, kind: prefix + token(pid, kind)),
        )

    def context(
        self, digest: Digest, links: DigestLinks, *, grouped: bool | None = None
    ) -> dict[str, object]:
        """The values the digest templates are rendered with; ``grouped`` as
        ``digest.group_by_topic`` (the default) says."""
        sections = [s for s in digest.sections if s.items]
        # A topic with nothing strong today says so, rather than padding with weak matches.
        if grouped is None:
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
            "show_sections": grouped and len(sections) > 1,
            "width": TEXT_WIDTH,
        }

    def render(
        self, digest: Digest, links: DigestLinks, *, grouped: bool | None = None
    ) -> RenderedDigest:
        """The digest as subject, preheader, HTML (CSS inlined) and plain text; ``grouped``
        (by topic) as ``digest.group_by_topic`` says unless given (a mail sent under another
        setting, rendered again).

        Topic sections and paper cards come from the caches (:class:`Fragments`): a section
        is rendered once per run and reused by every reader of its topic, with their own
        more/less links joined in.
        """
        html_reader = text_reader = None
        feedback = links.feedback
        if feedback is not None:
            html_reader, text_reader = self._readers(digest, feedback)
        ctx = self.context(digest, links, grouped=grouped)
        reader = READER.set(html_reader)
        ends = ENDS.set(feedback.token if feedback is not None and feedback.shared_ends else None)
        try:
            if self.inlined is not None:
                html = self.inlined.render(ctx)
            else:
                html = inline_css(self.html_template.render(ctx))
            READER.set(text_reader)
            text = self.text_template.render(ctx)
        finally:
            ENDS.reset(ends)
            READER.reset(reader)
        return RenderedDigest(self.subject(digest), str(ctx["preheader"]), html, text)


def _date_label(d: date) -> str:
    return f"{d:%A}, {d:%B} {d.day}, {d.year}"


__all__ = [
    "PREMAILER_OPTIONS",
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
