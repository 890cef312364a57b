"""What is wrong with a database URL, in one sentence that gives the URL to write instead.

Shared by the config check (``database.url``, ``$NEWSLETTER_DATABASE_URL``: the line names the
file and key) and by the store, which opens the engine (a URL built in code). Pure string work:
no SQLAlchemy, so loading a config stays cheap.

Accepted: ``sqlite:///relative/path.db`` (three slashes; relative to the config file),
``sqlite:////absolute/path.db`` (four), ``sqlite:///file:…?uri=true``, and PostgreSQL as
``postgresql+psycopg://…``, ``postgresql://…`` or the older alias ``postgres://…`` (both mean
psycopg 3 here). Everything else gets the corrected URL when one can be read off it: the
two-slash ``sqlite://var/newsletter.db``, ``sqlite:/x``, ``sqlite:relative``, a bare file
path, ``postgresql:/db``; an in-memory SQLite database, which every command would find empty;
an empty URL; a database newsletter does not support (``mysql://…``).
"""

from __future__ import annotations

import re

SQLITE_EXAMPLE = "sqlite:///var/newsletter.db"
POSTGRES_EXAMPLE = "postgresql+psycopg://user:password@host/database"
SUPPORTED = f"{SQLITE_EXAMPLE} (SQLite) or {POSTGRES_EXAMPLE}"
"""The two kinds of URL newsletter opens, as examples for a message."""

SLASHES = "three slashes for a relative path, four for an absolute one"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(.*)$", re.S)
_PASSWORD = re.compile(r"(?<=:)[^:@/]+(?=@)")
_DB_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def shown(url: str) -> str:
    """``url`` with any ``:password@`` hidden, for a message (works on malformed URLs too)."""
    scheme = _SCHEME.match(url)
    if scheme is None:
        return url
    return f"{scheme.group(1)}:{_PASSWORD.sub('***', scheme.group(2))}"


def _sqlite(scheme: str, rest: str, memory_ok: bool) -> str | None:
    path, _, _query = rest.partition("?")
    if path in ("", "//", "///") or path.removeprefix("///") == ":memory:":
        if memory_ok:
            return None
        return (
            f"{shown(scheme + ':' + rest)!r} names no file: SQLite would keep the database in "
            "memory, empty again for every command; write a file's URL such as "
            f"{SQLITE_EXAMPLE} ({SLASHES})"
        )
    if rest.startswith("///"):
        return None
    fixed = f"{scheme}:///{rest[2:] if rest.startswith('//') else rest}"
    return f"{shown(scheme + ':' + rest)!r} is not a valid SQLite URL; write {fixed} ({SLASHES})"


def _postgres(scheme: str, rest: str) -> str | None:
    backend, _, driver = scheme.partition("+")
    url = shown(f"{scheme}:{rest}")
    if rest.startswith("//") and (backend.lower() == "postgresql" or not driver):
        return None  # postgres:// is the older alias, read as postgresql+psycopg://
    if backend.lower() == "postgres" and rest.startswith("//"):
        fixed = f"postgresql+{driver}:{url.split(':', 1)[1]}"
        return f"{url!r} is not a valid PostgreSQL URL; write {fixed}"
    name = rest.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
    database = name if _DB_NAME.match(name) else "database"
    fixed = f"postgresql+psycopg://user:password@host/{database}"
    return f"{url!r} is not a valid PostgreSQL URL; write {fixed} (two slashes after the colon)"


def problem(url: str, *, memory_ok: bool = False) -> str | None:
    """Why ``url`` cannot be newsletter's database, saying what to write instead; ``None`` when
    it can be. ``memory_ok``: an in-memory SQLite database is fine (a store built in code)."""
    text = url.strip()
    if not text:
        return f"the database URL is empty; write {SUPPORTED}"
    if text != url:
        return f"{shown(url)!r} has spaces around it; write {shown(text)}"
    match = _SCHEME.match(url)
    if match is None or len(match.group(1)) == 1:  # no scheme (a one-letter one is a drive)
        if "/" in url or "\\" in url or re.search(r"\.(db|sqlite3?)$", url):
            fixed = "sqlite:///" + url.replace("\\", "/")
            return f"{url!r} is a file path, not a database URL; write {fixed} ({SLASHES})"
        return f"{shown(url)!r} is not a database URL; write {SUPPORTED}"
    scheme, rest = match.groups()
    backend = scheme.split("+", 1)[0].lower()
    if backend == "sqlite":
        return _sqlite(scheme, rest, memory_ok)
    if backend in ("postgresql", "postgres"):
        return _postgres(scheme, rest)
    if not rest.startswith("//"):
        return f"{shown(url)!r} is not a database URL; write {SUPPORTED}"
    return f"{shown(url)}: newsletter does not support {backend} databases; use {SUPPORTED}"
