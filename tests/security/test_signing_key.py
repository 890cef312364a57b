"""Issue 16 item 4: the link-signing key is never empty, short or half-written.

With an empty key anyone can forge confirm, manage and unsubscribe links. An existing empty
``secret.key`` and two processes creating the key file at once both used to give ``""``.
"""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.config import MIN_SECRET_KEY_LENGTH, load_config
from newsletter.errors import ConfigError
from newsletter.tokens import signing_key
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
