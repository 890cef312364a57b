"""Digest → subject, HTML and plain text. Jinja2 with autoescape; CSS inlined with premailer.

Operators may override any template: a folder named in ``digest.templates_dir`` is searched
before the shipped templates.
"""

from __future__ import annotations

import logging
import textwrap
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import jinja2
import premailer

from newsletter.config import Settings
from newsletter.models import Digest, DigestItem

log = logging.getLogger(__name__)


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


@dataclass(frozen=True, slots=True)
class DigestLinks:
    unsubscribe: str
    manage: str
    view: str | None = None


@dataclass(frozen=True, slots=True)
class RenderedDigest:
    subject: str
    preheader: str
    html: str
    text: str


def make_environment(templates_dir: Path | None = None) -> jinja2.Environment:
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
    )
    env.filters["short_authors"] = short_authors
    env.filters["excerpt"] = excerpt
    env.filters["wrap"] = wrap
    return env


def short_authors(authors: tuple[str, ...] | list[str], shown: int = 3) -> str:
    """ "A. Author, B. Author + 5 more"."""
    names = list(authors)
    if not names:
        return ""
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f" + {len(names) - shown} more"


def excerpt(text: str, limit: int = 320) -> str:
    """Cut at a sentence boundary if one is near, else at a word boundary, with an ellipsis."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    sentence = max(cut.rfind(". "), cut.rfind("? "), cut.rfind("! "))
    if sentence >= limit * 0.6:
        return cut[: sentence + 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > 0 else cut).rstrip(",;:") + "…"


def wrap(text: str, width: int = 76, indent: str = "") -> str:
    return textwrap.fill(
        " ".join(text.split()),
        width=width,
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def summary_line(digest: Digest) -> str:
    """ "3 new papers in LLM serving, Mixture of experts"."""
    count = len(digest.items)
    topics = ", ".join(s.title for s in digest.sections if s.items) or ", ".join(
        digest.topic_titles
    )
    noun = "paper" if count == 1 else "papers"
    if count == 0:
        return f"Nothing new in {topics or 'your topics'} today"
    return f"{count} new {noun} in {topics}"


class Renderer:
    def __init__(self, settings: Settings, templates_dir: Path | None = None) -> None:
        self.settings = settings
        self.env = make_environment(templates_dir)
        self.html_template = self.env.get_template("digest.html")
        self.text_template = self.env.get_template("digest.txt")

    def subject(self, digest: Digest) -> str:
        count = len(digest.items)
        topics = ", ".join(s.title for s in digest.sections if s.items) or ", ".join(
            digest.topic_titles
        )
        if count == 0:
            return f"Nothing new in {topics or 'your topics'} · {digest.edition_date:%b %d}"
        text = self.settings.digest.subject.format(
            count=count, topics=topics, date=digest.edition_date, name=digest.subscriber.name
        )
        return " ".join(text.split())  # never a CR/LF in a header

    def context(self, digest: Digest, links: DigestLinks) -> dict[str, object]:
        return {
            "digest": digest,
            "sections": [s for s in digest.sections if s.items],
            "items": digest.items,
            "subscriber": digest.subscriber,
            "date": digest.edition_date,
            "date_label": _date_label(digest.edition_date),
            "preheader": summary_line(digest),
            "topics": digest.topic_titles,
            "links": links,
            "sender": self.settings.sender,
            "show_sections": self.settings.digest.group_by_topic and len(digest.sections) > 1,
        }

    def render(self, digest: Digest, links: DigestLinks) -> RenderedDigest:
        ctx = self.context(digest, links)
        raw_html = self.html_template.render(ctx)
        html = premailer.transform(
            raw_html,
            keep_style_tags=True,
            strip_important=False,
            disable_validation=True,
            cssutils_logging_level=logging.CRITICAL,
            allow_network=False,
        )
        text = self.text_template.render(ctx)
        return RenderedDigest(self.subject(digest), str(ctx["preheader"]), html, text)


def _date_label(d: date) -> str:
    return f"{d:%A}, {d:%B} {d.day}, {d.year}"


__all__ = ["DigestItem", "DigestLinks", "RenderedDigest", "Renderer", "excerpt", "short_authors"]
