"""Loading: a config file → validated :class:`Config`, or a :class:`ConfigError` listing every
mistake as ``file:line: key.path: what is wrong``.

Finds the file (``--config``, ``$NEWSLETTER_CONFIG``, ``./newsletter.yaml``), validates it,
turns pydantic's errors into those lines (with a spelling hint for unknown keys), checks what
one section cannot check alone (duplicate names, unknown topics, leases against timeouts), and
applies the environment: ``$NEWSLETTER_DATABASE_URL`` overrides ``database.url``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from newsletter.config.base import DEFAULT_CONFIG, ENV_CONFIG, ENV_DATABASE_URL
from newsletter.config.settings import Config, Settings
from newsletter.config.yaml_lines import (
    Loc,
    _clean_loc,
    _dotted,
    _line_for,
    _to_python,
    _yaml_problem,
)
from newsletter.errors import ConfigError


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
    from_env = os.environ.get(ENV_DATABASE_URL) if environment else None
    if from_env:
        from newsletter.config.database_url import problem

        why = problem(from_env)
        if why:
            raise ConfigError(f"${ENV_DATABASE_URL}", [f"${ENV_DATABASE_URL}: {why}"])
    url = from_env or settings.database.url
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
