"""A mistyped database URL is one line naming the file, line and key, with the URL to write.

Issue 43: ``database: url: sqlite://var/newsletter.db`` (two slashes) made ``status``, ``db
upgrade`` and ``fetch`` print 40 lines ending in ``sqlalchemy.exc.ArgumentError``. Every shape
below goes to every command that reads the config (and so opens the database), in-process with
click's runner; the issue's own case also runs as the real program with stdout and stderr as
pipes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.cli.app import NO_CONFIG
from newsletter.config.database_url import problem
from newsletter.errors import ExitStatus, UnsupportedDatabase
from newsletter.store import Store
from tests.conftest import PG_URL, base_config, pg_unavailable, write_config

SLASHES = "(three slashes for a relative path, four for an absolute one)"

# (as written in database.url, what the one line must say)
MALFORMED = [
    (
        "sqlite://var/newsletter.db",
        f"'sqlite://var/newsletter.db' is not a valid SQLite URL; write "
        f"sqlite:///var/newsletter.db {SLASHES}",
    ),
    ("sqlite:/srv/n.db", "not a valid SQLite URL; write sqlite:////srv/n.db"),
    ("sqlite:var/n.db", "not a valid SQLite URL; write sqlite:///var/n.db"),
    ("sqlite://", "names no file: SQLite would keep the database in memory"),
    ("sqlite:///", "names no file"),
    ("sqlite:///:memory:", "names no file"),
    (
        "postgresql:/newsletter",
        "'postgresql:/newsletter' is not a valid PostgreSQL URL; write "
        "postgresql+psycopg://user:password@host/newsletter",
    ),
    (
        "postgres+psycopg://u:hunter2@db/n",
        "'postgres+psycopg://u:***@db/n' is not a valid PostgreSQL URL; write "
        "postgresql+psycopg://u:***@db/n",
    ),
    ("var/newsletter.db", "is a file path, not a database URL; write sqlite:///var/newsletter.db"),
    (
        "/srv/newsletter.db",
        "is a file path, not a database URL; write sqlite:////srv/newsletter.db",
    ),
    ("", "the database URL is empty; write sqlite:///"),
    ("newsletter", "'newsletter' is not a database URL; write sqlite:///"),
    ("mysql://newsletter@127.0.0.1/newsletter", "newsletter does not support mysql databases"),
    (" sqlite:///n.db", "has spaces around it; write sqlite:///n.db"),
]

ARGS: dict[str, list[str]] = {
    "db upgrade": [],
    "db current": [],
    "cache show": [],
    "cache clean": [],
    "fetch": [],
    "bounces poll": [],
    "status": [],
    "rank": ["--to", "a@example.org"],
    "feedback": ["a@example.org"],
    "send": ["--now"],
    "preview": ["--to", "a@example.org", "--out", "preview.html"],
    "worker": [],
    "serve": [],
    "inbound": [],
    "subscribers add": ["a@example.org"],
    "subscribers remove": ["a@example.org"],
    "subscribers set": ["a@example.org", "--pause"],
    "subscribers invite": ["a@example.org"],
    "subscribers list": [],
    "subscribers export": [],
    "subscribers import": ["people.csv"],
    "subscribers show": ["a@example.org"],
}
"""Every command that reads the config, with the arguments it needs to get that far."""


def _commands(group: click.Group, prefix: str = "") -> list[str]:
    found = []
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _commands(command, f"{prefix}{name} ")
        elif name not in NO_CONFIG and name != "demo":  # demo runs on its own config
            found.append(prefix + name)
    return found


def test_the_list_covers_every_command_that_reads_the_config() -> None:
    assert sorted(ARGS) == sorted(_commands(cli))


@pytest.mark.parametrize(("url", "says"), MALFORMED, ids=[u or "empty" for u, _ in MALFORMED])
def test_each_malformed_url_is_one_line_from_every_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, says: str
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEWSLETTER_DATABASE_URL", raising=False)
    (tmp_path / "people.csv").write_text("email\na@example.org\n", encoding="utf-8")
    path = write_config(tmp_path, base_config(url))
    line_no = path.read_text(encoding="utf-8").splitlines().index("  url: " + _dumped(url)) + 1
    for command, args in ARGS.items():
        result = CliRunner().invoke(cli, ["--config", str(path), *command.split(), *args])
        where = f"{command}: {result.output!r}"
        assert result.exit_code == ExitStatus.CONFIG, where
        assert result.exception is None or isinstance(result.exception, SystemExit), where
        assert "Traceback" not in result.output, where
        assert result.stdout == "", where
        lines = result.stderr.splitlines()
        assert len(lines) == 1, where
        assert lines[0].startswith(f"error: {path}:{line_no}: database.url: "), where
        assert says in lines[0], where
        assert not list(tmp_path.glob("**/*.db")), where  # nothing was opened


def _dumped(url: str) -> str:
    """The URL as ``yaml.safe_dump`` writes it (quoted when plain YAML would read it otherwise)."""
    import yaml

    return yaml.safe_dump({"u": url}).removeprefix("u: ").rstrip("\n").removesuffix("\n...")


def test_the_environment_url_is_checked_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_config(tmp_path, base_config(f"sqlite:///{tmp_path / 'n.db'}"))
    monkeypatch.setenv("NEWSLETTER_DATABASE_URL", "sqlite://var/newsletter.db")
    result = CliRunner().invoke(cli, ["--config", str(path), "status"])
    assert result.exit_code == ExitStatus.CONFIG
    assert result.stderr == (
        "error: $NEWSLETTER_DATABASE_URL: 'sqlite://var/newsletter.db' is not a valid SQLite "
        f"URL; write sqlite:///var/newsletter.db {SLASHES}\n"
    )


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///var/newsletter.db",
        "sqlite:////srv/newsletter.db",
        "sqlite+pysqlite:///n.db",
        "sqlite:///file:/srv/n.db?mode=ro&uri=true",
        "postgresql+psycopg://u:p@db:5432/newsletter",
        "postgresql://db/newsletter",
        "postgres://u@db/newsletter",
    ],
)
def test_good_urls_pass(url: str) -> None:
    assert problem(url) is None


def test_a_missing_folder_is_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sqlite:///`` with folders that do not exist yet: fixable, so fixed (made)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEWSLETTER_DATABASE_URL", raising=False)
    path = write_config(tmp_path, base_config("sqlite:///var/not/yet/newsletter.db"))
    result = CliRunner().invoke(cli, ["--config", str(path), "db", "upgrade"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "var" / "not" / "yet" / "newsletter.db").is_file()


def test_a_folder_that_cannot_be_made_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NEWSLETTER_DATABASE_URL", raising=False)
    (tmp_path / "var").write_text("a file where the folder should be", encoding="utf-8")
    path = write_config(tmp_path, base_config("sqlite:///var/newsletter.db"))
    for command in (["db", "upgrade"], ["status"], ["fetch"]):
        result = CliRunner().invoke(cli, ["--config", str(path), *command])
        assert result.exit_code == ExitStatus.DATABASE_UNAVAILABLE, result.output
        assert result.stderr == (
            f"error: cannot make the folder {tmp_path / 'var'} for the database file (File "
            f"exists); fix database.url in {path} or create the folder\n"
        )


@pytest.mark.postgres
def test_the_postgres_alias_is_read_as_postgresql(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``postgres://`` (Heroku's and others' spelling) is fixable: it means psycopg 3 here."""
    if reason := pg_unavailable():
        pytest.skip(reason)
    monkeypatch.delenv("NEWSLETTER_DATABASE_URL", raising=False)
    alias = PG_URL.replace("postgresql+psycopg://", "postgres://", 1)
    assert alias.startswith("postgres://")
    path = write_config(tmp_path, base_config(alias))
    result = CliRunner().invoke(cli, ["--config", str(path), "db", "current"])
    assert result.exit_code == 0, result.output


def test_the_store_refuses_a_malformed_url_in_one_line() -> None:
    """A URL built in code (not from a config) meets the same check where the engine opens,
    and SQLAlchemy's ``ArgumentError`` is never what the caller sees."""
    with pytest.raises(UnsupportedDatabase) as raised:
        Store("sqlite://var/newsletter.db", where="database.url in x.yaml")
    assert str(raised.value) == (
        "database.url in x.yaml: 'sqlite://var/newsletter.db' is not a valid SQLite URL; "
        f"write sqlite:///var/newsletter.db {SLASHES}"
    )
    Store("sqlite://").close()  # in memory, on purpose: the tests' stores


@pytest.mark.slow
@pytest.mark.parametrize("command", [["status"], ["db", "upgrade"], ["fetch"]])
def test_the_issue_case_as_the_real_program(tmp_path: Path, command: list[str]) -> None:
    config = tmp_path / "config.yaml"
    text = write_config(tmp_path, base_config("sqlite://var/newsletter.db")).read_text()
    config.write_text(text, encoding="utf-8")
    line_no = text.splitlines().index("  url: sqlite://var/newsletter.db") + 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEWSLETTER_")}
    result = subprocess.run(
        [sys.executable, "-m", "newsletter", "--config", str(config), *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in result.stderr
    assert result.returncode == ExitStatus.CONFIG
    assert result.stdout == ""
    assert result.stderr == (
        f"error: {config}:{line_no}: database.url: 'sqlite://var/newsletter.db' is not a valid "
        f"SQLite URL; write sqlite:///var/newsletter.db {SLASHES}\n"
    )
