"""YAML config → validated, frozen settings.

Every mistake is reported as ``file:line: key.path: what is wrong``: unknown keys, bad values,
duplicate keys, topics a subscriber names but nobody defined. Paths inside a config file (feed
files, a SQLite database) are relative to the file's own folder. Secrets come from the
environment: ``NEWSLETTER_DATABASE_URL`` overrides ``database.url``, ``NEWSLETTER_BROKER_URL``
overrides ``workers.broker_url``, and the SMTP password is read from the variable that
``smtp.password_env`` names.

Why one long module: the settings models, the YAML line map that gives every error its
``file:line``, and the messages that explain mistakes are one concern (turning a file into
trusted settings); most of its length is field declarations and their validators.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from email.utils import parseaddr
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from newsletter.bounces.settings import BounceSettings
from newsletter.errors import ConfigError

ENV_CONFIG = "NEWSLETTER_CONFIG"
ENV_DATABASE_URL = "NEWSLETTER_DATABASE_URL"
ENV_BROKER_URL = "NEWSLETTER_BROKER_URL"
DEFAULT_CONFIG = "newsletter.yaml"

_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(
            f"unknown timezone {value!r} (use an IANA name like 'Europe/Berlin')"
        ) from e
    return value


#: The shortest link-signing key accepted, in characters (a generated key has 64).
MIN_SECRET_KEY_LENGTH = 32
#: A key with fewer different characters than this is a placeholder ("xxxx…"), not a secret.
MIN_SECRET_KEY_DISTINCT = 10
MAKE_SECRET_KEY = 'python3 -c "import secrets; print(secrets.token_urlsafe(48))"'  # noqa: S105 - a command

#: Keys that were ever written in newsletter's own files (the compose file, docs, examples):
#: public, so they sign nothing. tests/security/test_signing_key.py reads the repository and
#: checks that every key written in it is refused, by this list or by the placeholder words.
PUBLISHED_SECRET_KEYS = frozenset(
    {
        "change-me-to-a-long-random-string",  # deploy/compose.yaml until 2026-11
        "bench-deliver-secret-0123456789abcd",  # bench/ scripts until 2026-11
        "bench-import-secret-0123456789abcdefgh",
        "bench-scale-secret-0123456789abcdefgh",
    }
)
#: Text that marks a key as written for a reader to replace, compared in lower case with the
#: separators (anything but letters and digits) removed: "Change_Me", "change-me" and
#: "CHANGEME" are one. Each is 6 characters or more, so a random key (64 characters from 64)
#: contains one by chance about once in 10^7 keys or less.
_PLACEHOLDER_TEXT = (
    "changeme",
    "replace",
    "example",
    "secretkey",
    "placeholder",
    "yoursecret",
    "yourkey",
    "yourown",
    "insertyour",
    "putyour",
    "randomstring",
    "randomkey",
    "longrandom",
    "notasecret",
    "notsecret",
    "donotuse",
    "dontuse",
    "xxxxxx",
)
#: Whole words (between separators) that mark a placeholder; too short to look for inside a
#: random key, where they would turn up by chance.
_PLACEHOLDER_WORDS = re.compile(r"your|todo|fixme|dummy|sample|insert|x{4,}")


def _placeholder(key: str) -> str | None:
    """The placeholder text in ``key`` ("change-me", "your-key", "xxx", …), or ``None``."""
    lowered = key.lower()
    joined = re.sub(r"[^a-z0-9]", "", lowered)
    for text in _PLACEHOLDER_TEXT:
        if text in joined:
            return text
    for word in re.split(r"[^a-z0-9]+", lowered):
        if _PLACEHOLDER_WORDS.fullmatch(word):
            return word
    return None


def secret_key_problem(key: str) -> str | None:
    """Why ``key`` may not sign links (empty, short, a placeholder, published), or ``None``.

    A key printed in a doc or a shipped file is known to everyone who read it: whoever holds
    the key can sign a confirmation for any address, so such keys are refused by name, and
    keys that look like a placeholder by the words they contain.
    """
    if not key:
        return f"the secret key is empty; make one with: {MAKE_SECRET_KEY}"
    if key in PUBLISHED_SECRET_KEYS:
        return (
            "the secret key is the example published in newsletter's own files, so anyone "
            f"has it; make one with: {MAKE_SECRET_KEY}"
        )
    if len(key) < MIN_SECRET_KEY_LENGTH:
        return (
            f"the secret key is {len(key)} characters, fewer than {MIN_SECRET_KEY_LENGTH}; "
            f"make one with: {MAKE_SECRET_KEY}"
        )
    if len(set(key)) < MIN_SECRET_KEY_DISTINCT:
        return (
            f"the secret key has only {len(set(key))} different characters (a placeholder?); "
            f"make one with: {MAKE_SECRET_KEY}"
        )
    placeholder = _placeholder(key)
    if placeholder is not None:
        return (
            f"the secret key is a placeholder (it says {placeholder!r}), not a secret; "
            f"make one with: {MAKE_SECRET_KEY}"
        )
    return None


def _check_address(value: str) -> str:
    from newsletter.addresses import normalize_address

    return normalize_address(value)


class DatabaseSettings(_Strict):
    url: str = "sqlite:///var/newsletter.db"
    """SQLAlchemy URL. SQLite paths are relative to the config file; PostgreSQL: postgresql+psycopg://..."""
    reconnect_seconds: float = Field(default=30.0, ge=0, le=3600)
    """How long a send waits for a lost database connection to come back before it stops."""


class SenderSettings(_Strict):
    from_: str = Field(default="Trending Papers <digest@localhost>", alias="from")
    reply_to: str | None = None
    domain: str | None = None
    """Domain for Message-IDs; defaults to the From address's domain."""
    postal_address: str = ""
    list_id: str | None = None
    base_url: str = "http://localhost:8000"
    """Public URL of the web app: unsubscribe, manage and archive links point here."""
    contact: str | None = None
    """Operator contact (email or URL) named in the fetcher's User-Agent."""

    @field_validator("from_", "reply_to")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if "\r" in value or "\n" in value:
            raise ValueError("must be on one line")
        _, addr = parseaddr(value)
        if "@" not in addr:
            raise ValueError(f"{value!r} is not an address like 'Name <digest@example.org>'")
        _check_address(addr)
        return value

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.rstrip("/")

    @property
    def from_address(self) -> str:
        """The address part of ``from``."""
        return parseaddr(self.from_)[1]

    @property
    def from_name(self) -> str:
        """The display name part of ``from`` (empty when there is none)."""
        return parseaddr(self.from_)[0]

    @property
    def message_domain(self) -> str:
        """The domain of Message-IDs: ``domain``, else that of the ``from`` address."""
        return self.domain or self.from_address.rpartition("@")[2]


class SmtpSettings(_Strict):
    host: str = "localhost"
    port: int = Field(default=25, ge=1, le=65535)
    security: Literal["none", "starttls", "tls"] = "none"
    username: str | None = None
    password_env: str = "NEWSLETTER_SMTP_PASSWORD"  # noqa: S105 - the variable's name, not a secret
    timeout: float = Field(default=30.0, gt=0)
    max_timeouts: int = Field(default=3, ge=1, le=1000)
    """Consecutive replies that did not come within ``timeout`` (a relay that stalls) after
    which the relay counts as unusable: the run stops (exit 2) and alerts the operator."""
    pool_size: int = Field(default=4, ge=1, le=64)
    messages_per_connection: int = Field(default=0, ge=0, le=1_000_000)
    """Messages sent over one connection before it is closed (QUIT) and a new one opened, for
    relays that cap messages per session; 0: no cap (the connection is reused to the end)."""
    rate_per_second: float | None = Field(default=None, gt=0)
    rate_per_hour: int | None = Field(default=None, gt=0)
    dev_recipient: str | None = None
    """Send every message to this one address instead of the subscriber (for trying things out)."""

    @field_validator("dev_recipient")
    @classmethod
    def _dev(cls, value: str | None) -> str | None:
        return None if value is None else _check_address(value)

    def password(self) -> str | None:
        """The relay password from the environment variable ``password_env``, or ``None``."""
        return os.environ.get(self.password_env)


class DeliverySettings(_Strict):
    """How the ledger treats relay answers: retries, the RFC 1047 window, suppression, leases."""

    attempts: int = Field(default=4, ge=1, le=20)
    """Tries per message in one run for temporary failures (4xx, 552, dropped connections)."""
    retry_delay: float = Field(default=5.0, ge=0)
    """Seconds before the second try; each further try waits twice as long (with jitter)."""
    retry_max_delay: float = Field(default=120.0, ge=0)
    """No single wait between tries is longer than this."""
    throttle_retries: int = Field(default=20, ge=0, le=1000)
    """Throttling replies (454, "too many", "rate limit") per message that slow the sender down
    instead of counting as failures; beyond this they count as temporary failures."""
    on_unknown: Literal["resend", "hold"] = "resend"
    """Connection lost after the final dot with no reply: ``resend`` once with the same
    Message-ID (mail clients fold the pair), or ``hold`` (leave it ``unknown`` for the operator)."""
    suppress_after: int = Field(default=3, ge=1, le=100)
    """Permanent failures (5xx to RCPT) after which the address is suppressed."""
    claim_lease: float = Field(default=600.0, gt=0)
    """Seconds a run's claim on an edition is respected by other runs. A claim whose owner
    process is gone (same host) is taken over at once; one from another host after this."""
    queue_size: int = Field(default=0, ge=0, le=10000)
    """Rendered messages waiting for a connection (0: twice ``smtp.pool_size``); bounds memory."""
    group_commit_wait: float = Field(default=0.005, ge=0, le=0.1)
    """Seconds a connection's "sending" mark waits for the other connections' marks, to be
    committed with them in one transaction (0: each at once). Fewer commits per digest (a third
    less database CPU on PostgreSQL); a message leaves at most this much later."""


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
        if not _SLUG.match(value):
            raise ValueError(f"{value!r}: use lowercase letters, digits, '-' and '_'")
        return value

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
        if not _SLUG.match(value):
            raise ValueError(f"{value!r}: use lowercase letters, digits, '-' and '_'")
        return value

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


class SubscriberSeed(_Strict):
    email: str
    name: str = ""
    topics: list[str] = Field(default_factory=list)
    timezone: str | None = None

    @field_validator("email")
    @classmethod
    def _email(cls, value: str) -> str:
        return _check_address(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        from newsletter.addresses import normalize_name

        return normalize_name(value)

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str | None) -> str | None:
        return None if value is None else _check_timezone(value)


class FetchTime(_Strict):
    cron: str
    """Five-field crontab: minute hour day month weekday, e.g. "30 20 * * sun,mon,tue,wed,thu".

    Weekdays by name: APScheduler counts them from Monday (mon=0, unlike crontab), so weekday
    numbers and ranges past Sunday ("sun-thu": write "sun,mon-thu") are refused.
    """
    timezone: str = "America/New_York"

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        from apscheduler.triggers.cron import CronTrigger

        weekdays = _weekday_problem(value)
        if weekdays is not None:
            raise ValueError(f"bad crontab {value!r}: {weekdays}")
        try:
            CronTrigger.from_crontab(value)
        except ValueError as e:
            raise ValueError(
                f"bad crontab {value!r}: {e} (e.g. '30 20 * * sun,mon,tue,wed,thu')"
            ) from e
        return value

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        return _check_timezone(value)


_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
"""APScheduler 3.x order of ``day_of_week``: Monday is 0, Sunday 6 (crontab: Sunday is 0)."""


def _weekday_problem(cron: str) -> str | None:
    """Why the weekday field of ``cron`` would not mean what a crontab reader expects."""
    fields = cron.split()
    if len(fields) != 5:
        return None  # APScheduler's own message says how many fields it wants
    weekday = fields[4].lower()
    if re.search(r"\d", weekday.split("/", 1)[0]):
        return (
            f"weekday {fields[4]!r}: write day names (mon, tue, ... sun), not numbers: in "
            "crontab 0 is Sunday, but APScheduler counts from Monday (mon=0 ... sun=6), so "
            "numbers would pick other days than you meant"
        )
    for part in weekday.split(","):
        m = re.fullmatch(r"([a-z]{3})-([a-z]{3})(/\d+)?", part)
        if m is None or m.group(1) not in _WEEKDAYS or m.group(2) not in _WEEKDAYS:
            continue
        first, last = _WEEKDAYS.index(m.group(1)), _WEEKDAYS.index(m.group(2))
        if first > last:
            head = m.group(1) if first == 6 else f"{m.group(1)}-sun"
            tail = "mon" if last == 0 else f"mon-{m.group(2)}"
            return (
                f"weekday range {part!r} runs backwards: APScheduler counts weekdays from Monday "
                f"(mon=0 ... sun=6) and a range cannot wrap past Sunday; write {head},{tail}"
            )
    return None


def _default_fetch_times() -> list[FetchTime]:
    # arXiv announces at 20:00 US Eastern, Sunday to Thursday; fetch shortly after, and once in
    # the early morning so Hugging Face upvotes are fresh before the first editions go out.
    return [
        FetchTime(cron="30 20 * * sun,mon,tue,wed,thu", timezone="America/New_York"),
        FetchTime(cron="0 4 * * *", timezone="UTC"),
    ]


class ScheduleSettings(_Strict):
    timezone: str = "UTC"
    """Default timezone for subscribers who did not choose one, and for edition dates."""
    send_hour: int = Field(default=7, ge=0, le=23)
    """Default local hour of the edition for subscribers who did not choose one."""
    weekly_weekday: int = Field(default=0, ge=0, le=6)
    """The day weekly editions go out: Monday=0 … Sunday=6."""
    fetch: list[FetchTime] = Field(default_factory=_default_fetch_times)
    tick_minutes: int = Field(default=5, ge=1, le=60)
    """How often the scheduler looks for due editions."""
    misfire_grace_minutes: int = Field(default=360, ge=0)
    """An edition more than this late (the machine was down) is reported missed, not sent."""
    coalesce: bool = True
    """After downtime, run a missed fetch once instead of once per missed time."""
    no_listing: Literal["skip", "send"] = "skip"
    """When arXiv announced nothing since a subscriber's last edition (Fridays and Saturdays):
    skip the edition, recording why (its papers wait for the next one), or send what there is."""

    @field_validator("timezone")
    @classmethod
    def _tz(cls, value: str) -> str:
        return _check_timezone(value)


class WebSettings(_Strict):
    secret_key_env: str = "NEWSLETTER_SECRET_KEY"  # noqa: S105 - the variable's name, not a secret
    secret_key: str | None = None
    """Signs unsubscribe and manage links. Prefer the environment variable named above."""
    secret_key_file: str = "var/secret.key"  # noqa: S105 - a path, not a secret
    """Used when neither is set: created with a random key on first use (relative to the config)."""
    host: str = "127.0.0.1"
    """Where ``newsletter serve`` listens. Put a TLS-terminating proxy in front for the public."""
    port: int = Field(default=8000, ge=1, le=65535)
    forwarded_allow_ips: str = "127.0.0.1"
    """Proxies whose X-Forwarded-For is trusted for the client address (comma-separated, or '*')."""
    confirm_days: int = Field(default=3, ge=1, le=30)
    """How long a confirmation link stays valid."""
    rate_limit: RateLimitSettings = Field(default_factory=lambda: RateLimitSettings())
    admin_token_env: str = "NEWSLETTER_ADMIN_TOKEN"  # noqa: S105 - the variable's name, not a secret
    """The admin endpoint (POST /admin/send) is enabled when this variable holds a token."""
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """The largest request body the web app reads (forms, JSON); a larger one is answered 413."""
    metrics_listen: str | None = None
    """``HOST:PORT`` on a loopback address (e.g. ``127.0.0.1:9464``): ``newsletter serve`` also
    serves the Prometheus metrics there, without a token, for a scraper on the same machine.
    Unset: only ``GET /metrics`` with the admin token (``admin_token_env``) serves them."""

    @field_validator("metrics_listen")
    @classmethod
    def _metrics_listen(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, port = loopback_listen(value)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @field_validator("secret_key")
    @classmethod
    def _secret_key(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = secret_key_problem(value.strip())
        if problem is not None:
            raise ValueError(f"{problem} (better: set it in the environment variable)")
        return value.strip()

    def admin_token(self) -> str | None:
        """The admin token from the environment variable ``admin_token_env``, or ``None``."""
        return os.environ.get(self.admin_token_env) or None


def loopback_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0: any free one) on a loopback address, as
    ``(host, port)``; ``ValueError`` (one line) otherwise. Loopback only: the metrics listener
    has no token, so it must not be reachable from the network (a scraper elsewhere uses
    ``GET /metrics`` with the admin token)."""
    host, sep, port_text = value.strip().rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (like 127.0.0.1:9464)")
    host = host.removeprefix("[").removesuffix("]")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"{value!r}: the host must be a loopback IP address (127.0.0.1 or [::1])"
        ) from None
    if not ip.is_loopback:
        raise ValueError(
            f"{value!r} is not a loopback address: the metrics listener has no token; to "
            "scrape from another host use GET /metrics with the admin token"
        )
    return str(ip), int(port_text)


class RateLimitSettings(_Strict):
    """Limits on subscription requests (web form, JSON API, email), against subscription bombing."""

    per_ip: int = Field(default=10, ge=1)
    """Requests one client address (an IPv6 one by its /64; for email commands, the sending
    host) may make per ``per_ip_window`` seconds."""
    per_ip_window: int = Field(default=3600, ge=1)
    per_address: int = Field(default=3, ge=1)
    """Confirmation or reminder mails one email address (its ``+tag`` ignored) may be sent per
    ``per_address_window``."""
    per_address_window: int = Field(default=86400, ge=1)
    email_confirmations_per_address: int = Field(default=1, ge=1)
    """Of those, confirmation mails answering an email command (whose From can be forged)."""


class InboundSettings(_Strict):
    """``newsletter inbound``: the SMTP/LMTP receiver for email commands (subscribe, help...)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8025, ge=1, le=65535)
    lmtp: bool = False
    """Speak LMTP instead of SMTP (for a Postfix ``lmtp:`` transport)."""
    address: str | None = None
    """The request address (e.g. papers-request@example.org); other recipients are refused."""
    max_size: int = Field(default=256 * 1024, ge=1024)
    """Largest message accepted, in bytes (commands are short)."""
    max_per_hour: int = Field(default=60, ge=1)
    """Email commands answered per hour from everyone together; the rest are dropped (logged)."""
    trusted_relays: list[str] = Field(default_factory=lambda: ["127.0.0.1", "::1"])
    """Peers (your MTA) whose topmost ``Received:`` header names the sending host, which the
    per-host limit (``web.rate_limit.per_ip``) then counts; other peers are counted themselves."""

    @field_validator("address")
    @classmethod
    def _addr(cls, value: str | None) -> str | None:
        return None if value is None else _check_address(value)


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


class AlertSettings(_Strict):
    email: str | None = None
    """Operator address for alerts: a failed run, or a weekday fetch that found no papers."""
    on_empty_weekday_fetch: bool = True

    @field_validator("email")
    @classmethod
    def _addr(cls, value: str | None) -> str | None:
        return None if value is None else _check_address(value)


DKIM_HEADERS = (
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "Reply-To",
    "List-Id",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
    "MIME-Version",
    "Content-Type",
)


class DkimSettings(_Strict):
    """DKIM signing of every message sent (digests, confirmations, alerts)."""

    selector: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """The selector: the public key is published as TXT at ``SELECTOR._domainkey.DOMAIN``."""
    domain: str | None = None
    """Signing domain (``d=``); defaults to the sender's domain."""
    private_key_file: str | None = None
    """PEM private key (RSA), relative to this config file."""
    private_key_env: str = "NEWSLETTER_DKIM_KEY"
    """Environment variable holding the PEM key; it wins over ``private_key_file``."""
    headers: list[str] = Field(default_factory=lambda: list(DKIM_HEADERS))

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[^\s@/]+\.[^\s@/]+$", value):
            raise ValueError(f"{value!r} is not a domain name")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: list[str]) -> list[str]:
        if not any(h.lower() == "from" for h in value):
            raise ValueError("DKIM must sign the From header (RFC 6376 5.4)")
        for h in value:
            if not re.match(r"^[!-9;-~]+$", h):
                raise ValueError(f"{h!r} is not a header name")
        return value


_BROKER_SCHEMES = ("redis", "rediss", "amqp", "amqps", "pyamqp", "sentinel")


class WorkersSettings(_Strict):
    """Scale-out: Celery workers render and send chunks of subscribers (``newsletter worker``).

    With this section, ``newsletter send`` and the scheduler enqueue chunks instead of sending
    in-process. The workers share the database, so it must be PostgreSQL."""

    broker_url: str = "redis://127.0.0.1:6379/0"
    """Redis (``redis://``) or RabbitMQ (``amqp://``); ``$NEWSLETTER_BROKER_URL`` overrides it."""
    result_backend: str | None = None
    """Where chunk results go (for ``send``'s progress): default the Redis broker, or ``rpc://``
    with RabbitMQ."""
    queue: str = "newsletter"
    chunk_size: int = Field(default=500, ge=1, le=100_000)
    """Subscribers per task."""
    visibility_timeout: int = Field(default=3600, ge=1)
    """Seconds (Redis broker): a task not acknowledged by then is given to another worker; this
    is how a chunk of a worker that died is picked up again. Keep it above a chunk's run time."""
    retry_delay: int = Field(default=60, ge=1)
    """Seconds before a chunk is tried again after the relay failed. (A dead worker's claimed
    editions are taken over after ``delivery.claim_lease``, keeping their Message-ID.)"""

    @field_validator("broker_url", "result_backend")
    @classmethod
    def _broker(cls, value: str | None) -> str | None:
        if value is None:
            return None
        scheme = value.split("://", 1)[0] if "://" in value else ""
        if scheme not in (*_BROKER_SCHEMES, "rpc", "db+postgresql", "db+postgresql+psycopg"):
            raise ValueError(
                f"{value!r} is not a broker URL (redis://host:6379/0 or amqp://user:pass@host//)"
            )
        return value

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$", value):
            raise ValueError(f"{value!r}: use letters, digits, '.', '_', ':' or '-'")
        return value

    def broker(self) -> str:
        """The broker URL in force: the environment, else the config."""
        return os.environ.get(ENV_BROKER_URL) or self.broker_url

    def backend(self) -> str:
        """The result backend in force: configured, else Redis broker, else ``rpc://``."""
        if self.result_backend:
            return self.result_backend
        broker = self.broker()
        return broker if broker.startswith(("redis", "rediss")) else "rpc://"


class Settings(_Strict):
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    sender: SenderSettings = Field(default_factory=SenderSettings)
    smtp: SmtpSettings = Field(default_factory=SmtpSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    sources: list[SourceSettings] = Field(default_factory=list)
    topics: list[TopicSettings] = Field(default_factory=list)
    digest: DigestSettings = Field(default_factory=DigestSettings)
    subscribers: list[SubscriberSeed] = Field(default_factory=list)
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
    web: WebSettings = Field(default_factory=WebSettings)
    inbound: InboundSettings = Field(default_factory=InboundSettings)
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    ranking: RankingSettings = Field(default_factory=RankingSettings)
    dkim: DkimSettings | None = None
    workers: WorkersSettings | None = None
    """Absent: one process sends everything. Present: Celery workers do (see docs/deploy.md)."""
    delivery: DeliverySettings = Field(default_factory=DeliverySettings)
    bounces: BounceSettings = Field(default_factory=BounceSettings)

    def fetched_sources(self) -> set[str]:
        """Names of the sources fetched now (configured and enabled): the ones worth alerting on."""
        return {s.name for s in self.sources if s.enabled}

    def topic(self, name: str) -> TopicSettings:
        """The topic called ``name``; raises :class:`KeyError` when there is none."""
        for topic in self.topics:
            if topic.name == name:
                return topic
        raise KeyError(name)


@dataclass(frozen=True)
class Config:
    """Validated settings plus where they came from."""

    settings: Settings
    path: Path
    database_url: str

    @property
    def base_dir(self) -> Path:
        """The folder of the config file: relative paths in it start there."""
        return self.path.parent

    def resolve(self, location: str) -> str:
        """A source location as the fetcher takes it: URLs unchanged, paths made absolute."""
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location):
            return location
        return str((self.base_dir / location).resolve())

    def templates_dir(self) -> Path | None:
        """The absolute ``digest.templates_dir``, or ``None`` for the built-in templates."""
        d = self.settings.digest.templates_dir
        return None if d is None else (self.base_dir / d).resolve()


# ---------------------------------------------------------------------------- loading


Loc = tuple[str | int, ...]
_SCALARS = yaml.SafeLoader("")


def _to_python(
    node: yaml.Node, path: Loc, lines: dict[Loc, int], problems: list[str], file: str
) -> Any:
    """Turn a composed YAML node into Python data, recording the line of every key path."""
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            if not isinstance(key_node, yaml.ScalarNode):
                problems.append(f"{file}:{key_node.start_mark.line + 1}: keys must be plain words")
                continue
            sub = (*path, key)
            if key in result:
                problems.append(
                    f"{file}:{key_node.start_mark.line + 1}: {_dotted(sub)}: duplicate key "
                    f"(first given on line {lines[sub]})"
                )
                continue
            lines[sub] = key_node.start_mark.line + 1
            result[key] = _to_python(value_node, sub, lines, problems, file)
            lines[sub] = key_node.start_mark.line + 1
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _to_python(item, (*path, i), lines, problems, file) for i, item in enumerate(node.value)
        ]
    if len(path) >= 2 and path[-2] in _VERBATIM_LISTS and isinstance(node, yaml.ScalarNode):
        return node.value  # as written: YAML would read 2611.00020 as the number 2611.0002
    return _SCALARS.construct_object(node)


_VERBATIM_LISTS = frozenset({"like"})
"""Lists whose items are kept as the text written (arXiv ids look like numbers to YAML)."""


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _line_for(loc: Loc, lines: Mapping[Loc, int]) -> int:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return 1


def _clean_loc(loc: tuple[Any, ...]) -> Loc:
    # pydantic puts union-member names ("str", "list[str]") in locations; they are not config keys.
    return tuple(
        p for p in loc if isinstance(p, int) or not re.match(r"^(str|list\[|function-)", p)
    )


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The settings model whose keys are valid at ``loc`` (a path of keys and list indexes)."""
    import types
    import typing

    model: type[BaseModel] = Settings
    for part in loc:
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        if field is None:
            return None
        pending: list[Any] = [field.annotation]
        found: type[BaseModel] | None = None
        while pending:
            kind = pending.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                found = kind
                break
            if typing.get_origin(kind) in (list, typing.Union, types.UnionType):
                pending.extend(typing.get_args(kind))
        if found is None:
            return None
        model = found
    return model


def valid_keys(model: type[BaseModel]) -> list[str]:
    """The keys a config section of ``model`` accepts, as written in YAML."""
    return [f.alias or n for n, f in model.model_fields.items()]


def _unknown_key(loc: Loc) -> str:
    import difflib

    model = _model_at(loc[:-1])
    key = loc[-1] if loc else ""
    if model is None or not isinstance(key, str):
        return "unknown key (check the spelling; see config/newsletter.example.yaml)"
    keys = valid_keys(model)
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    if close:
        return f'unknown key; did you mean "{close[0]}"?'
    return f"unknown key (valid here: {', '.join(keys)})"


def _describe(err: Mapping[str, Any], loc: Loc) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return _unknown_key(loc)
    if kind == "missing":
        return "required key is missing"
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def _cross_check(settings: Settings, lines: Mapping[Loc, int], file: str) -> list[str]:
    problems: list[str] = []

    def add(loc: Loc, why: str) -> None:
        problems.append(f"{file}:{_line_for(loc, lines)}: {_dotted(loc)}: {why}")

    seen: dict[str, int] = {}
    for i, topic in enumerate(settings.topics):
        if topic.name in seen:
            add(
                ("topics", i, "name"),
                f"topic {topic.name!r} is defined twice (also topics[{seen[topic.name]}])",
            )
        seen[topic.name] = i
        if not topic.match_rules():
            add(("topics", i), f"topic {topic.name!r} needs keywords, categories or authors")
        for word in topic.conflicts():
            add(
                ("topics", i, "exclude"),
                f"topic {topic.name!r}: {word!r} is both wanted and excluded; remove one",
            )
    names = set(seen)
    seen_sources: dict[str, int] = {}
    for i, source in enumerate(settings.sources):
        if source.name in seen_sources:
            add(("sources", i, "name"), f"source {source.name!r} is defined twice")
        seen_sources[source.name] = i
        if source.kind != "arxiv_api":
            for key in ("query", "categories", "date_from", "date_to"):
                if getattr(source, key):
                    add(("sources", i, key), f"only arxiv_api sources take {key!r}")
        elif source.date_from and source.date_to and source.date_from > source.date_to:
            add(("sources", i, "date_to"), "date_to is before date_from")
    w = settings.workers
    lease = settings.delivery.claim_lease
    if w is not None and lease <= settings.smtp.timeout:
        add(
            ("delivery", "claim_lease"),
            f"{lease:g} s is not longer than smtp.timeout ({settings.smtp.timeout:g} s): with "
            "workers, another worker could take over a message still being sent; raise it",
        )
    if w is not None and w.visibility_timeout <= max(lease, w.retry_delay):
        add(
            ("workers", "visibility_timeout"),
            f"{w.visibility_timeout} s must be longer than delivery.claim_lease ({lease:g} s) "
            f"and workers.retry_delay ({w.retry_delay} s): a chunk waiting to retry would be "
            "handed out twice",
        )
    seen_emails: dict[str, int] = {}
    for i, sub in enumerate(settings.subscribers):
        if sub.email in seen_emails:
            add(("subscribers", i, "email"), f"{sub.email} is listed twice")
        seen_emails[sub.email] = i
        for j, t in enumerate(sub.topics):
            if t not in names:
                known = ", ".join(sorted(names)) or "none defined"
                add(("subscribers", i, "topics", j), f"unknown topic {t!r} (topics: {known})")
    return problems


def _topic_hint(loc: Loc, data: Mapping[str, Any]) -> str:
    """`` (in topic 'moe')`` for a problem inside a named topic, so the reader finds it by name."""
    if len(loc) < 2 or loc[0] != "topics" or not isinstance(loc[1], int):
        return ""
    topics = data.get("topics")
    if not isinstance(topics, list) or loc[1] >= len(topics):
        return ""
    topic = topics[loc[1]]
    name = topic.get("name") if isinstance(topic, dict) else None
    return f" (in topic {name!r})" if isinstance(name, str) and len(loc) > 2 else ""


_OPENED_AT_CONTEXT = (
    "while scanning a simple key",
    "while scanning a quoted scalar",
    "while scanning a block scalar",
    "while parsing a flow sequence",
    "while parsing a flow mapping",
)
"""Parser contexts whose start (not where the parser gave up) is the line with the mistake."""

_YAML_HINTS = (
    ("could not find expected ':'", "a key without ':' after it? write 'key: value'"),
    (
        "mapping values are not allowed here",
        "check this line's indentation, or quote a value that contains ': '",
    ),
    ("expected <block end>", "this line is not indented like the lines above it"),
    ("cannot start any token", "indent with spaces, not tabs"),
    ("expected ',' or ']'", "the '[' opened on this line is not closed"),
    ("expected ',' or '}'", "the '{' opened on this line is not closed"),
    ("found unexpected end of stream", "the quote opened on this line is not closed"),
)


def _yaml_problem(e: yaml.YAMLError, text: str) -> tuple[int, str]:
    """The line of a YAML mistake (1-based) and what is wrong, with a hint where one helps.

    PyYAML marks where it gave up, often the line after the mistake (a missing ':' is noticed
    on the next line, an unclosed bracket at the end of the file); for those the context mark,
    where the key, quote or bracket started, is the line to fix.
    """
    context = getattr(e, "context", None)
    context_mark = getattr(e, "context_mark", None)
    problem_mark = getattr(e, "problem_mark", None)
    mark = problem_mark
    if context_mark is not None and (context in _OPENED_AT_CONTEXT or problem_mark is None):
        mark = context_mark
    line = mark.line + 1 if mark is not None else 1
    problem = str(getattr(e, "problem", None) or e)
    if problem_mark is not None:
        opened = _quote_run_on(text, problem_mark.line)
        if opened is not None:
            start, end = opened
            return start + 1, (
                f"the quote opened on this line is not closed on it, so the value runs on to "
                f"line {end + 1} (close the quote, or quote with the other kind if the value "
                "holds this one)"
            )
    hint = next((h for needle, h in _YAML_HINTS if needle in problem), None)
    if "mapping values are not allowed here" in problem:
        # "smtp" (no ':') above "  host: x" reads as one text "smtp host" until the ':'.
        key = _key_without_colon_above(text.splitlines(), line - 1)
        if key is not None:
            line, hint = key + 1, "a key without ':' after it? write 'key:'"
    return line, f"{problem} ({hint})" if hint else problem


def _quote_run_on(text: str, problem_line: int) -> tuple[int, int] | None:
    """Where a quoted value that ran over several lines opened and ended (0-based), when the
    mistake PyYAML found is on the line it ended on or the next: a quote left open on one line
    is closed by the next quote further down, and what follows that one is then reported, on
    the wrong line and with a wrong hint."""
    found: tuple[int, int] | None = None
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.line > problem_line:
                break
            if (
                isinstance(token, yaml.ScalarToken)
                and token.style in ('"', "'")
                and token.end_mark.line > token.start_mark.line
            ):
                found = (token.start_mark.line, token.end_mark.line)
    except yaml.YAMLError:
        pass  # the tokens read up to the mistake are the ones that matter
    if found is not None and found[1] <= problem_line <= found[1] + 1:
        return found
    return None


def _key_without_colon_above(lines: list[str], index: int) -> int | None:
    """The index of the line above ``index`` that looks like a key missing its ':'."""
    if not 0 < index < len(lines):
        return None
    indent = len(lines[index]) - len(lines[index].lstrip(" "))
    for i in range(index - 1, -1, -1):
        above = lines[i].strip()
        if not above or above.startswith("#"):
            continue
        above_indent = len(lines[i]) - len(lines[i].lstrip(" "))
        looks_like_key = re.fullmatch(r"(- )?[A-Za-z_][\w.-]*", above) is not None
        return i if looks_like_key and above_indent < indent else None
    return None


def parse_config(text: str, file: str = "<config>") -> tuple[Settings, dict[Loc, int]]:
    """Parse and validate config text. Raises :class:`ConfigError` naming file, line and key."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        line, why = _yaml_problem(e, text)
        raise ConfigError(file, [f"{file}:{line}: not valid YAML: {why}"]) from e
    lines: dict[Loc, int] = {}
    problems: list[str] = []
    data = {} if root is None else _to_python(root, (), lines, problems, file)
    if not isinstance(data, dict):
        raise ConfigError(file, [f"{file}:1: the top level must be a mapping of keys"])
    if problems:
        raise ConfigError(file, problems)
    try:
        settings = Settings.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            loc = _clean_loc(err["loc"])
            problems.append(
                f"{file}:{_line_for(loc, lines)}: {_dotted(loc)}: {_describe(err, loc)}"
                + _topic_hint(loc, data)
            )
        raise ConfigError(file, list(dict.fromkeys(problems))) from e
    problems = _cross_check(settings, lines, file)
    if problems:
        raise ConfigError(file, problems)
    return settings, lines


def _resolve_db_url(url: str, base: Path) -> str:
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith("sqlite:////"):
        rest = url[len(prefix) :]
        if rest and rest != ":memory:" and not rest.startswith("file:"):  # file: URIs as given
            return prefix + str((base / rest).resolve())
    return url


def load_config(path: str | os.PathLike[str] | None = None, *, environment: bool = True) -> Config:
    """Load the config at ``path``, else ``$NEWSLETTER_CONFIG``, else ``./newsletter.yaml``.

    ``environment=False`` reads the file alone, without ``$NEWSLETTER_DATABASE_URL``: the demo's
    database must be its own even where the environment names an operator's."""
    chosen = Path(path or (os.environ.get(ENV_CONFIG) if environment else None) or DEFAULT_CONFIG)
    try:
        text = chosen.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigError(
            str(chosen),
            [f"{chosen}: no such config file; create one with 'newsletter init' or pass --config"],
        ) from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(str(chosen), [f"{chosen}: cannot read: {e}"]) from e
    settings, lines = parse_config(text, str(chosen))
    base = chosen.resolve().parent
    url = (os.environ.get(ENV_DATABASE_URL) if environment else None) or settings.database.url
    check_workers_database(settings, url, str(chosen), _line_for(("workers",), lines))
    return Config(settings=settings, path=chosen.resolve(), database_url=_resolve_db_url(url, base))


def check_workers_database(settings: Settings, url: str, file: str, line: int) -> None:
    """Workers on several machines or processes share one database: refuse SQLite with them."""
    if settings.workers is not None and url.startswith("sqlite"):
        raise ConfigError(
            file,
            [
                f"{file}:{line}: workers: Celery workers need a database they can all reach "
                f"at once, and SQLite ({url}) is a local file with one writer at a time: set "
                f"database.url (or ${ENV_DATABASE_URL}) to PostgreSQL "
                "(postgresql+psycopg://user:password@host/db), or remove the workers section "
                "to send from one process"
            ],
        )


def config_from_settings(settings: Settings, base_dir: Path) -> Config:
    """A Config for settings built in code (tests, the demo)."""
    check_workers_database(settings, settings.database.url, str(base_dir / DEFAULT_CONFIG), 1)
    return Config(
        settings=settings,
        path=base_dir / DEFAULT_CONFIG,
        database_url=_resolve_db_url(settings.database.url, base_dir),
    )


__all__ = [
    "AlertSettings",
    "Config",
    "ConfigError",
    "DatabaseSettings",
    "DeliverySettings",
    "DigestSettings",
    "FetchTime",
    "InboundSettings",
    "RateLimitSettings",
    "ScheduleSettings",
    "SenderSettings",
    "Settings",
    "SmtpSettings",
    "SourceSettings",
    "SubscriberSeed",
    "TopicSettings",
    "WebSettings",
    "WorkersSettings",
    "load_config",
    "parse_config",
]
