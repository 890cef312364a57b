"""What goes into a digest: the ``sources:``, ``fetch:``, ``topics:``, ``digest:`` and ``ranking:``
sections.

Where papers come from and how politely they are fetched, the topics that pick them (keywords,
categories, authors, example papers), how a digest is put together, and how papers are matched
to topics beyond their words.
"""

from __future__ import annotations

import re
from datetime import date
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from newsletter.config.base import _Strict, check_slug

SourceKind = Literal["arxiv_rss", "arxiv_api", "hf_daily", "feed"]

#: URL schemes a source may use; anything without ``scheme://`` is a local path.
SOURCE_SCHEMES = ("http", "https", "file")
_ALLOWED_SOURCES = "http://, https://, file:// or a path relative to the config file"


def source_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a source location (unknown scheme, no host), or ``None``."""
    import difflib

    if not url.strip():
        return f"a source needs a url: {_ALLOWED_SOURCES}"
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", url)
    if m is None:
        return None  # a local path
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme not in SOURCE_SCHEMES:
        close = difflib.get_close_matches(scheme, SOURCE_SCHEMES, n=1, cutoff=0.6)
        hint = f' (did you mean "{close[0]}://"?)' if close else ""
        return f"{url!r}: unknown URL scheme {scheme!r}{hint}; use {_ALLOWED_SOURCES}"
    if scheme != "file" and not re.match(r"^[^/\s?#]+", rest):
        return f"{url!r} has no host name (write it like https://rss.arxiv.org/rss/cs.LG)"
    return None


class SourceSettings(_Strict):
    name: str
    kind: SourceKind
    url: str
    """http(s) URL, file:// URL, or a path relative to the config file."""
    enabled: bool = True
    allow_private: bool = False
    """Allow this source to resolve to loopback or private addresses (an intranet mirror)."""
    # arxiv_api only: what to backfill and how politely.
    query: str | None = None
    """arXiv API ``search_query`` (``cat:cs.DC AND abs:cache``); ``categories`` builds one."""
    categories: list[str] = Field(default_factory=list)
    """arXiv API: categories to backfill (``[cs.DC, cs.LG]``), OR-ed together."""
    date_from: date | None = None
    """arXiv API: first submission date to backfill (inclusive, UTC)."""
    date_to: date | None = None
    """arXiv API: last submission date to backfill (inclusive, UTC)."""
    page_size: int = Field(default=100, ge=1, le=2000)
    """arXiv API: results per request (arXiv allows at most 2,000)."""
    max_pages: int = Field(default=10, ge=1, le=1000)
    """arXiv API: stop after this many requests in one fetch."""
    page_delay: float = Field(default=3.0, ge=0)
    """Seconds between two requests to this source's host (arXiv asks for 3)."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_slug(value)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        problem = source_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("categories")
    @classmethod
    def _categories(cls, value: list[str]) -> list[str]:
        for c in value:
            if not _CATEGORY.match(c):
                raise ValueError(f"{c!r} is not an arXiv category like 'cs.DC' or 'hep-th'")
        return value


class FetchSettings(_Strict):
    """How sources are fetched: timeouts, politeness, retries and limits."""

    timeout: float = Field(default=30.0, gt=0)
    """Seconds to wait for a connection or for the next bytes of an answer."""
    max_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    """Largest response accepted from one request, after decompression."""
    host_delay: float = Field(default=1.0, ge=0)
    """Seconds between two requests to the same host (a source's page_delay can raise it)."""
    retries: int = Field(default=3, ge=0, le=10)
    """Retries after a 429, a 5xx or a timeout, with exponential backoff and jitter."""
    backoff: float = Field(default=2.0, ge=0)
    """First retry waits about this many seconds; each later one twice as long (±50% jitter)."""
    max_retry_after: float = Field(default=300.0, ge=0)
    """Longest Retry-After honored; a server asking for more is reported as failing."""
    max_redirects: int = Field(default=5, ge=0, le=20)
    proxy: str | None = None
    """HTTP(S) proxy for every source (``http://proxy.internal:3128``); environment variables
    such as HTTPS_PROXY are not used."""

    @field_validator("proxy")
    @classmethod
    def _proxy(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^(https?|socks5h?)://[^/\s]+", value):
            raise ValueError(f"{value!r} is not a proxy URL like 'http://proxy.internal:3128'")
        return value


Keyword = str | list[str]


def _arxiv_id(value: str) -> str:
    from newsletter.identity import arxiv_id_of

    key = arxiv_id_of(value)
    if key is None:
        raise ValueError(
            f"{value!r} is not an arXiv id (write 2411.01234, 2411.01234v2, hep-th/9901001 "
            "or https://arxiv.org/abs/2411.01234)"
        )
    return key


ArxivId = Annotated[str, AfterValidator(_arxiv_id)]
"""An arXiv id or arXiv link as written in the config, kept as its versionless id."""

_CATEGORY = re.compile(r"^[a-z][a-z-]*(\.[A-Za-z][A-Za-z-]*)?$")


def _keyword_problem(words: list[str]) -> str | None:
    from newsletter.text import phrase_terms

    if not words:
        return "an alias list must not be empty"
    for w in words:
        if not isinstance(w, str) or not w.strip():
            return "keywords must be non-empty strings or non-empty lists of aliases"
        if not phrase_terms(w):
            return f"{w!r} has no letters or digits to match"
    return None


class TopicSettings(_Strict):
    name: str
    title: str | None = None
    keywords: list[Keyword] = Field(default_factory=list)
    """Words or phrases; a list inside the list is a set of aliases (``[MoE, mixture of experts]``)."""
    all: list[Keyword] = Field(default_factory=list)
    """Each of these must match too."""
    exclude: list[Keyword] = Field(default_factory=list)
    """Papers matching any of these are never shown for this topic."""
    categories: list[str] = Field(default_factory=list)
    """arXiv categories (``cs.LG``); cross-lists count. Papers must be in one of them."""
    authors: list[str] = Field(default_factory=list)
    min_score: float = Field(default=0.0, ge=0)
    """Drop papers whose relevance (before trending) is below this."""
    max_items: int | None = Field(default=None, ge=1, le=100)
    like: list[ArxivId] = Field(default_factory=list)
    """Example papers that define the topic better than keywords (versionless arXiv ids,
    however written); the ranker reads them as "more like this" votes of the topic."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_slug(value)

    @field_validator("title")
    @classmethod
    def _title(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\n" in value or "\r" in value):
            raise ValueError("a title must be one non-empty line")
        return value

    @field_validator("keywords", "all", "exclude")
    @classmethod
    def _keywords(cls, value: list[Keyword]) -> list[Keyword]:
        from newsletter.text import phrase_terms

        ids: dict[tuple[str, ...], int] = {}  # term ids in order of appearance, as the ranker's
        seen: dict[int, int] = {}
        for i, entry in enumerate(value):
            words = [entry] if isinstance(entry, str) else entry
            problem = _keyword_problem(words)
            if problem:
                raise ValueError(f"entry {i + 1} ({entry!r}): {problem}")
            terms = {ids.setdefault(t, len(ids)) for w in words for t in phrase_terms(w)}
            for t in sorted(terms):
                if t in seen and seen[t] != i:
                    raise ValueError(
                        f"entry {i + 1} ({entry!r}) matches the same words as entry "
                        f"{seen[t] + 1}; put aliases in one list"
                    )
                seen[t] = i
        return value

    @field_validator("categories")
    @classmethod
    def _categories(cls, value: list[str]) -> list[str]:
        for c in value:
            if not _CATEGORY.match(c.strip()):
                raise ValueError(
                    f"{c!r} is not an arXiv category (write them like cs.LG, stat.ML or hep-th)"
                )
        return value

    @field_validator("authors")
    @classmethod
    def _authors(cls, value: list[str]) -> list[str]:
        from newsletter.text import author_key

        for a in value:
            if not author_key(a):
                raise ValueError(f"{a!r} is not a name")
        return value

    @property
    def label(self) -> str:
        """The topic's title, else its name made readable."""
        return self.title or self.name.replace("-", " ").replace("_", " ").capitalize()

    def match_rules(self) -> bool:
        """Whether the topic says what matches it (keywords, all, categories or authors)."""
        return bool(self.keywords or self.all or self.categories or self.authors)

    def conflicts(self) -> list[str]:
        """Keywords that are also excluded: such a topic could never show them."""
        from newsletter.text import phrase_terms

        excluded = {t for e in self.exclude for w in _words(e) for t in phrase_terms(w)}
        return [
            w
            for e in (*self.keywords, *self.all)
            for w in _words(e)
            if any(t in excluded for t in phrase_terms(w))
        ]


def _words(entry: Keyword) -> list[str]:
    return [entry] if isinstance(entry, str) else list(entry)


class DigestSettings(_Strict):
    max_items: int = Field(default=10, ge=1, le=100)
    """Papers per topic section (a topic's own ``max_items`` overrides it); with
    ``group_by_topic: false``, papers in the one merged list."""
    empty: Literal["skip", "send"] = "skip"
    """What to do when nothing new matches: skip the edition, or send a short 'nothing new' note."""
    subject: str = "{count} new papers in {topics} · {date:%b %d}"
    lookback_days: int = Field(default=7, ge=1, le=365)
    """Papers first seen more than this many days ago are no longer 'new'."""
    group_by_topic: bool = True
    templates_dir: str | None = None
    """A folder whose templates take precedence over the shipped ones."""

    @field_validator("subject")
    @classmethod
    def _subject(cls, value: str) -> str:
        from datetime import date

        try:
            value.format(count=1, topics="x", date=date(2026, 1, 1), name="x")
        except (KeyError, ValueError, IndexError) as e:
            raise ValueError(
                f"bad subject template {value!r}: {e}; fields are {{count}}, {{topics}}, "
                "{date:%b %d}, {name}"
            ) from e
        return value


class RankingSettings(_Strict):
    """How papers are matched to topics beyond their words (docs/topics.md, "Semantic matching")."""

    semantic: bool = True
    """Fuse sentence-embedding similarity with keyword matching when the ``semantic`` extra and
    the model are available (ranking is lexical otherwise, and says so); false: lexical only."""
    model: str = "all-MiniLM-L6-v2"
    """The sentence encoder: the name of a model a Python package ships (all-MiniLM-L6-v2), or
    a directory with ``tokenizer.json`` and ``model.onnx`` (or ``model.safetensors`` and
    ``config.json``), relative to the config file's folder."""
    max_tokens: int = Field(default=128, ge=16, le=512)
    """Word pieces of a paper's title and abstract the model reads (MiniLM was trained on 128)."""
    model_cache: str | None = None
    """Where a model's ONNX form is written when it ships only weights (default:
    ``$XDG_CACHE_HOME/newsletter/models``, else ``~/.cache/newsletter/models``)."""


class OwnTopicsSettings(_Strict):
    """Readers' own topics (docs/topics.md, "Your own topics"): a sentence of their own and a
    few example papers, each its own section of that reader's digest only."""

    enabled: bool | Literal["auto"] = "auto"
    """``auto``: on when semantic ranking is (``ranking.semantic`` and the extra installed;
    without the extra they match words only, and say so); ``true``: on, also lexical-only;
    ``false``: off (the manage page hides them, the mail command refuses, sends skip them)."""
    max: int = Field(default=3, ge=1, le=20)
    """Own topics per reader."""
    max_chars: int = Field(default=200, ge=20, le=500)
    """Characters in a reader's sentence."""
    max_examples: int = Field(default=5, ge=0, le=20)
    """Example papers (arXiv ids) per own topic."""
    edits_per_day: int = Field(default=20, ge=1, le=1000)
    """Adds, edits and removals a reader may make in 24 hours (web and mail together)."""

    @field_validator("enabled", mode="before")
    @classmethod
    def _enabled(cls, value: object) -> object:
        if value is True or value is False or value == "auto":
            return value
        raise ValueError(f"{value!r}: write auto, true or false")
