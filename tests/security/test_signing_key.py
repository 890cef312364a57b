"""Issue 16 item 4: the link-signing key is never empty, short or half-written. Issue 27 item 1:
nor a placeholder, nor a key written anywhere in the repository (the compose file shipped one).

With an empty key anyone can forge confirm, manage and unsubscribe links. An existing empty
``secret.key`` and two processes creating the key file at once both used to give ``""``.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.config import (
    MAKE_SECRET_KEY,
    MIN_SECRET_KEY_LENGTH,
    PUBLISHED_SECRET_KEYS,
    load_config,
    secret_key_problem,
)
from newsletter.errors import ConfigError
from newsletter.services.link_tokens import signing_key
from tests.conftest import base_config, write_config

ENV = "NEWSLETTER_SECRET_KEY"
ROUNDS = 25
PROCESSES = 6


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)


def sqlite_config(tmp_path: Path, **web: Any) -> Path:
    data = base_config(f"sqlite:///{tmp_path / 'db.sqlite'}")
    if web:
        data["web"] = web
    return write_config(tmp_path, data)


def test_an_existing_empty_key_file_is_refused(tmp_path: Path) -> None:
    path = sqlite_config(tmp_path)
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "secret.key").write_text("\n")
    config = load_config(path)
    with pytest.raises(ConfigError) as e:
        signing_key(config)
    message = str(e.value)
    assert "secret.key" in message and "empty" in message
    assert "secrets.token_urlsafe(48)" in message

    # `newsletter serve` refuses to start: one line, the config error status, nothing served.
    result = CliRunner().invoke(cli, ["--config", str(path), "serve", "--port", "1"])
    assert result.exit_code == 3  # ExitStatus.CONFIG
    assert "Serving on" not in result.output
    assert "secret key is empty" in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1


def test_short_or_placeholder_keys_are_refused_from_every_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "secret.key").write_text("0123456789abcdef\n")  # 16 characters
    with pytest.raises(ConfigError, match="16 characters, fewer than 32"):
        signing_key(load_config(sqlite_config(tmp_path)))

    # In the config file: refused at load, naming file:line and the key.
    with pytest.raises(ConfigError, match=r"newsletter\.yaml:\d+: web\.secret_key: .*characters"):
        load_config(sqlite_config(tmp_path, secret_key="short"))
    with pytest.raises(ConfigError, match="only 1 different characters"):
        load_config(sqlite_config(tmp_path, secret_key="k" * 40))

    # In the environment: set but empty or short is refused, not silently replaced.
    config = load_config(sqlite_config(tmp_path))
    for weak in ("", "   ", "x" * (MIN_SECRET_KEY_LENGTH - 1)):
        monkeypatch.setenv(ENV, weak)
        with pytest.raises(ConfigError, match=rf"\${ENV}: the secret key"):
            signing_key(config)
    strong = "an-operator-key-from-the-environment-0123456789"
    monkeypatch.setenv(ENV, strong)
    assert signing_key(config) == strong


def test_a_new_key_file_is_strong_and_private(tmp_path: Path) -> None:
    config = load_config(sqlite_config(tmp_path))
    key = signing_key(config)
    path = tmp_path / "var" / "secret.key"
    assert len(key) >= MIN_SECRET_KEY_LENGTH and path.read_text().strip() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signing_key(config) == key  # read back, not made again
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret.key"]  # no temp file left


def _read_keys(configs: list[str], barrier: Any, results: Any) -> None:
    keys: list[str] = []
    for config in configs:
        barrier.wait()
        try:
            keys.append(signing_key(load_config(config)))
        except ConfigError as e:
            keys.append(f"refused: {e}")
    results.put(keys)


@pytest.mark.slow
def test_processes_creating_the_key_at_once_all_get_the_same_strong_key(tmp_path: Path) -> None:
    configs = []
    for r in range(ROUNDS):
        data = base_config(f"sqlite:///{tmp_path / 'db.sqlite'}")
        data["web"] = {"secret_key_file": f"var/round-{r}/secret.key"}
        configs.append(str(write_config(tmp_path, data, f"round-{r}.yaml")))
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_read_keys, args=(configs, barrier, results)) for _ in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    for r in range(ROUNDS):
        keys = {g[r] for g in got}
        on_disk = (tmp_path / "var" / f"round-{r}" / "secret.key").read_text().strip()
        assert keys == {on_disk}, f"round {r}: processes got {keys}"
        assert len(on_disk) >= MIN_SECRET_KEY_LENGTH
        assert os.listdir(tmp_path / "var" / f"round-{r}") == ["secret.key"]


# --- issue 27 item 1: a key anyone can read is no secret ------------------------------------------

OLD_COMPOSE_KEY = "change-me-to-a-long-random-string"  # what deploy/compose.yaml shipped
PLACEHOLDERS = (
    "Change_Me_To_A_Long_Random_String_0123456789",
    "CHANGEME-please-use-a-long-unguessable-value-42",
    "replace-with-a-long-random-string-0123456789",
    "your-own-long-signing-value-goes-in-here-0123456789",
    "Your_Signing_Value_Here_0123456789_abcdefghijk",
    "an-example-signing-value-for-the-docs-0123456789",
    "the-secret-key-for-newsletter-links-0123456789",
    "newsletter_SecretKey_for_production_0123456789",
    "xxxx-signing-value-to-be-filled-in-0123456789-zz",
    "put-your-signing-value-in-here-0123456789-abcdef",
)


def test_serve_refuses_the_old_compose_key_in_one_line_that_says_how_to_make_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key deploy/compose.yaml used to ship is public: anyone could sign a confirmation
    for any address with it. ``serve`` refuses it before it listens."""
    path = sqlite_config(tmp_path)
    monkeypatch.setenv(ENV, OLD_COMPOSE_KEY)
    result = CliRunner().invoke(cli, ["--config", str(path), "serve", "--port", "1"])
    assert result.exit_code == 3, result.output  # ExitStatus.CONFIG
    assert "Serving on" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert f"${ENV}" in lines[0] and "published" in lines[0]
    assert 'python3 -c "import secrets; print(secrets.token_urlsafe(48))"' in lines[0]

    # So are the keys the bench scripts shipped, in the environment or the config file.
    for key in PUBLISHED_SECRET_KEYS:
        assert "published" in (secret_key_problem(key) or ""), key

    # The same key in the config file is refused when the file is loaded, naming the line.
    monkeypatch.delenv(ENV)
    with pytest.raises(ConfigError, match=r"newsletter\.yaml:\d+: web\.secret_key: .*published"):
        load_config(sqlite_config(tmp_path, secret_key=OLD_COMPOSE_KEY))


@pytest.mark.parametrize("key", PLACEHOLDERS)
def test_placeholder_keys_are_refused_whatever_their_case_and_separators(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    assert len(key) >= MIN_SECRET_KEY_LENGTH and len(set(key)) >= 10  # not refused for that
    monkeypatch.setenv(ENV, key)
    with pytest.raises(ConfigError, match=r"placeholder .*secrets\.token_urlsafe") as e:
        signing_key(load_config(sqlite_config(tmp_path)))
    assert len(str(e.value).splitlines()) == 1


def test_a_random_key_still_works_and_made_keys_are_never_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command the errors print makes a key that is accepted; so are 20,000 more random
    keys (placeholder words are long enough not to turn up in a random key by chance)."""
    made = subprocess.run(
        [sys.executable, "-c", MAKE_SECRET_KEY.split(" -c ", 1)[1].strip('"')],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    config = load_config(sqlite_config(tmp_path))
    monkeypatch.setenv(ENV, made)
    assert signing_key(config) == made
    refused = [
        k for k in (secrets.token_urlsafe(48) for _ in range(20_000)) if secret_key_problem(k)
    ]
    assert refused == []


# Where a key is given a value: `NEWSLETTER_SECRET_KEY=…`, `NEWSLETTER_SECRET_KEY: …`,
# `secret_key: …` (YAML), `"secret_key": "…"` (Python, JSON); not secret_key_env / _file.
_ASSIGNED = re.compile(
    r"""(?<![A-Za-z0-9_])(?:NEWSLETTER_SECRET_KEY|secret_key)["']?\s*[:=]\s*"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|[^\s#,}`|]*)"""
)
ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("README.md", "CHANGELOG.md", "deploy", "docs", "config", "bench", "templates")


def assigned_keys(text: str, python: bool) -> list[tuple[int, str, bool]]:
    """Every value given to the key in ``text``: (line, value, whether it is a literal key).

    Not literal: a reference to something else (``${VAR…}``, ``$VAR``, ``%s``, ``<key>``,
    ``null``, ``...``) and, in Python, an unquoted name or type.
    """
    found = []
    for m in _ASSIGNED.finditer(text):
        raw = m["value"]
        quoted = raw[:1] in ("'", '"')
        value = raw[1:-1] if quoted else raw
        literal = not (
            value.startswith(("$", "%", "<", "{"))
            or value.lower() in ("null", "none", "~", "...")
            or (python and not quoted)
        )
        found.append((text.count("\n", 0, m.start()) + 1, value, literal))
    return found


def repository_files() -> list[Path]:
    """The tracked text files the project ships (tests aside: their keys sign test links)."""
    try:
        names = subprocess.run(
            ["git", "ls-files", *SCANNED], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout
        names = [
            str(p.relative_to(ROOT))
            for s in SCANNED
            for p in ([ROOT / s] if (ROOT / s).is_file() else (ROOT / s).rglob("*"))
            if p.is_file()
        ]
    return [ROOT / n for n in names]


def test_the_scan_finds_keys_in_every_way_the_repository_writes_them() -> None:
    sample = (
        "NEWSLETTER_SECRET_KEY: change-me-to-a-long-random-string\n"
        'NEWSLETTER_SECRET_KEY="k1"\n'
        "export NEWSLETTER_SECRET_KEY='k2'\n"
        "  secret_key: k3   # comment\n"
        "  secret_key_env: NEWSLETTER_SECRET_KEY\n"
        "  secret_key_file: var/secret.key\n"
        "  # secret_key: null\n"
        '  NEWSLETTER_SECRET_KEY: "${NEWSLETTER_SECRET_KEY:?make one}"\n'
        "printf 'NEWSLETTER_SECRET_KEY=%s\\n'\n"
        '{"web": {"secret_key": "k4"}}\n'
    )
    got = [(v, lit) for _, v, lit in assigned_keys(sample, python=False)]
    assert got == [
        (OLD_COMPOSE_KEY, True),
        ("k1", True),
        ("k2", True),
        ("k3", True),
        ("null", False),
        ("${NEWSLETTER_SECRET_KEY:?make one}", False),
        ("%s\\n'", False),
        ("k4", True),
    ]
    python = 'data["web"] = {"secret_key": "k5"}\nsecret_key: str | None = None\n'
    assert [(v, lit) for _, v, lit in assigned_keys(python, python=True)] == [
        ("k5", True),
        ("str", False),
    ]


def test_no_key_written_in_the_repository_is_accepted() -> None:
    """A key printed in a doc, an example or the compose file is public. Every one is refused,
    so a future example cannot bring the shipped key back."""
    files = repository_files()
    assert ROOT / "deploy" / "compose.yaml" in files
    seen: dict[str, list[str]] = {}
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (screenshots)
        for line, value, literal in assigned_keys(text, python=path.suffix == ".py"):
            where = f"{path.relative_to(ROOT)}:{line}"
            seen.setdefault("literal" if literal else "reference", []).append(where)
            if literal:
                assert secret_key_problem(value) is not None, f"{where}: key {value!r} accepted"
    # The compose file takes the key from the operator: a reference, never a literal.
    assert any(w.startswith("deploy/compose.yaml:") for w in seen.get("reference", []))
    assert not any(w.startswith("deploy/") for w in seen.get("literal", [])), seen
