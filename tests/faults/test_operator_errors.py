"""Operator errors end in one clear line on stderr and a distinct exit status, never a traceback.

Each case runs the real ``newsletter`` command in a subprocess, with stdout and stderr as pipes
(as under cron or the systemd unit, whose journal reads stderr).
"""

from __future__ import annotations

import json
import os
import pty
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from newsletter.errors import ExitStatus
from newsletter.operations.smtp_sink import free_port
from newsletter.store import Store
from tests.conftest import PG_URL, base_config, pg_unavailable, write_config
from tests.faults.harness import LOG_LINE
from tests.smtpfaults import serving

SECRET = "an-operator-test-key-0123456789-abcdefghijkl"

# Makes psycopg unimportable, as when the 'postgres' extra is not installed.
BLOCK_PSYCOPG = """
import importlib.abc, runpy, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg2", "psycopg_c", "psycopg_binary"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
sys.argv[0] = "newsletter"
runpy.run_module("newsletter", run_name="__main__", alter_sys=True)
"""


def newsletter(
    cwd: Path, *args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NEWSLETTER_")}
    environ.update({"NEWSLETTER_SECRET_KEY": SECRET, **(env or {})})
    command = [sys.executable, *(prefix or ["-m", "newsletter"]), *args]
    return subprocess.run(
        command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=120, check=False
    )


def human_lines(stderr: str) -> list[str]:
    """stderr without the log (JSON lines, or text lines such as an alert logged on the way):
    what the command itself says."""
    lines = []
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            if not LOG_LINE.match(line):
                lines.append(line)
            continue
        assert isinstance(record, dict) and {"ts", "level", "msg"} <= record.keys(), line
    return lines


def one_error(result: subprocess.CompletedProcess[str], status: ExitStatus, *needles: str) -> str:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert "\x1b" not in result.stderr + result.stdout
    lines = human_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    for needle in needles:
        assert needle in line, line
    assert result.returncode == status, (result.returncode, result.stderr)
    return line


def config(tmp_path: Path, url: str, **overrides: Any) -> Path:
    data = base_config(url)
    data.update(overrides)
    return write_config(tmp_path, data)


# ---------------------------------------------------------------------------- the database


@pytest.mark.parametrize("command", [["db", "upgrade"], ["status"], ["subscribers", "list"]])
def test_postgresql_down(tmp_path: Path, command: list[str]) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test"
    path = config(tmp_path, url)
    result = newsletter(tmp_path, "--config", str(path), *command)
    line = one_error(result, ExitStatus.DATABASE_UNAVAILABLE, url, str(path))
    assert "cannot connect" in line and "start the server" in line


@pytest.mark.postgres
def test_postgresql_database_missing(tmp_path: Path) -> None:
    if reason := pg_unavailable():
        pytest.skip(reason)
    url = PG_URL.rsplit("/", 1)[0] + "/does_not_exist_xyz"
    path = config(tmp_path, url)
    result = newsletter(tmp_path, "--config", str(path), "db", "upgrade")
    line = one_error(result, ExitStatus.DATABASE_UNAVAILABLE, url, str(path))
    assert "does not exist" in line and "createdb does_not_exist_xyz" in line


def test_database_url_from_the_environment_is_named(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test"
    path = config(tmp_path, f"sqlite:///{tmp_path / 'unused.db'}")
    result = newsletter(
        tmp_path, "--config", str(path), "status", env={"NEWSLETTER_DATABASE_URL": url}
    )
    one_error(result, ExitStatus.DATABASE_UNAVAILABLE, url, "$NEWSLETTER_DATABASE_URL")


def test_mysql_url_is_refused(tmp_path: Path) -> None:
    path = config(tmp_path, "mysql://newsletter@127.0.0.1/newsletter")
    result = newsletter(tmp_path, "--config", str(path), "db", "upgrade")
    line = one_error(result, ExitStatus.CONFIG, "mysql://newsletter@127.0.0.1/newsletter")
    assert str(path) in line and "postgresql+psycopg://" in line and "sqlite:///" in line


def test_password_is_hidden(tmp_path: Path) -> None:
    path = config(tmp_path, f"postgresql+psycopg://u:hunter2@127.0.0.1:{free_port()}/x")
    result = newsletter(tmp_path, "--config", str(path), "db", "upgrade")
    one_error(result, ExitStatus.DATABASE_UNAVAILABLE, "u:***@127.0.0.1")
    assert "hunter2" not in result.stderr


def test_postgresql_without_the_postgres_extra(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/test"
    path = config(tmp_path, url)
    blocked = newsletter(
        tmp_path, "--config", str(path), "db", "upgrade", prefix=["-c", BLOCK_PSYCOPG]
    )
    one_error(
        blocked,
        ExitStatus.NOT_INSTALLED,
        url,
        "pip install 'newsletter[postgres]' (from a checkout: pip install -e '.[postgres]')",
    )
    # the blocker is what made the difference: without it the same command reaches the network
    plain = newsletter(tmp_path, "--config", str(path), "db", "upgrade")
    assert plain.returncode == ExitStatus.DATABASE_UNAVAILABLE


@pytest.fixture
def read_only_db(tmp_path: Path) -> str:
    """A migrated SQLite file opened read-only. Tests run as root, which may write a 0444 file,
    so the URL asks SQLite itself for read-only access (``mode=ro``), as a read-only mount
    or a file owned by another user would."""
    db = tmp_path / "newsletter.db"
    store = Store(f"sqlite:///{db}")
    store.upgrade()
    store.close()
    db.chmod(0o444)
    return f"sqlite:///file:{db}?mode=ro&uri=true"


def test_read_only_sqlite(tmp_path: Path, read_only_db: str) -> None:
    path = config(
        tmp_path, read_only_db, subscribers=[{"email": "a@example.org", "topics": ["gpu-kernels"]}]
    )
    db_file = str(tmp_path / "newsletter.db")
    result = newsletter(tmp_path, "--config", str(path), "db", "upgrade")
    line = one_error(result, ExitStatus.DATABASE_READ_ONLY, db_file)
    assert "read-only" in line and "writable" in line
    # reading still works: status does not need to write
    assert newsletter(tmp_path, "--config", str(path), "status").returncode == 0


# ---------------------------------------------------------------------------- ports


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_sink_port_in_use(tmp_path: Path, taken_port: int) -> None:
    result = newsletter(tmp_path, "sink", "--port", str(taken_port), "--maildir", "box")
    line = one_error(result, ExitStatus.PORT_IN_USE, f"127.0.0.1:{taken_port}")
    assert "already in use" in line and "--port" in line
    assert "SMTP sink on" not in result.stdout


def test_inbound_port_in_use(tmp_path: Path, taken_port: int) -> None:
    path = config(tmp_path, f"sqlite:///{tmp_path / 'n.db'}")
    assert newsletter(tmp_path, "--config", str(path), "db", "upgrade").returncode == 0
    result = newsletter(
        tmp_path,
        "--config",
        str(path),
        "inbound",
        "--host",
        "127.0.0.1",
        "--port",
        str(taken_port),
    )
    line = one_error(result, ExitStatus.PORT_IN_USE, f"127.0.0.1:{taken_port}")
    assert "inbound.port" in line
    assert "Answering" not in result.stdout


def test_serve_port_in_use_says_nothing_about_serving(tmp_path: Path, taken_port: int) -> None:
    path = config(tmp_path, f"sqlite:///{tmp_path / 'n.db'}")
    assert newsletter(tmp_path, "--config", str(path), "db", "upgrade").returncode == 0
    result = newsletter(
        tmp_path,
        "--config",
        str(path),
        "serve",
        "--no-scheduler",
        "--host",
        "127.0.0.1",
        "--port",
        str(taken_port),
    )
    line = one_error(result, ExitStatus.PORT_IN_USE, f"127.0.0.1:{taken_port}")
    assert "web.port" in line
    assert "Serving on" not in result.stdout


def test_serve_on_an_address_this_machine_does_not_have_names_web_host(tmp_path: Path) -> None:
    """Issue 43: ``web.host: 10.255.255.1`` said "stop the other program, or set web.port".
    The port is free; the host is not one of this machine's addresses (EADDRNOTAVAIL), so the
    line names web.host. 192.0.2.1 is TEST-NET-1 (RFC 5737), never a machine's own address;
    binding to it fails in the kernel and sends nothing."""
    port = free_port()
    path = config(
        tmp_path, f"sqlite:///{tmp_path / 'n.db'}", web={"host": "192.0.2.1", "port": port}
    )
    assert newsletter(tmp_path, "--config", str(path), "db", "upgrade").returncode == 0
    result = newsletter(tmp_path, "--config", str(path), "serve", "--no-scheduler")
    line = one_error(result, ExitStatus.FAILED, f"192.0.2.1:{port}")
    assert "192.0.2.1 is not an address of this machine; set web.host" in line, line
    assert "web.port" not in line and "other program" not in line, line
    assert "Serving on" not in result.stdout


# ---------------------------------------------------------------------------- the relay


@pytest.fixture
def http_relay() -> Iterator[int]:
    """A port that answers like a web server: a 400 status line at once, then closes."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)

    def answer(done: threading.Event) -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    with serving(server, answer) as port:
        yield port


@pytest.mark.timeout(100)
def test_relay_that_speaks_http(tmp_path: Path, http_relay: int) -> None:
    path = config(
        tmp_path,
        f"sqlite:///{tmp_path / 'n.db'}",
        smtp={"host": "127.0.0.1", "port": http_relay, "timeout": 30},
        subscribers=[{"email": "a@example.org", "topics": ["gpu-kernels"]}],
    )
    assert newsletter(tmp_path, "--config", str(path), "db", "upgrade").returncode == 0
    assert newsletter(tmp_path, "--config", str(path), "fetch").returncode == 0
    result = newsletter(tmp_path, "--config", str(path), "send", "--now")
    line = one_error(
        result,
        ExitStatus.RELAY_UNUSABLE,
        f"127.0.0.1:{http_relay}",
        "did not answer like an SMTP server",
        "'HTTP/1.1 400 Bad Request'",
    )
    assert "smtp.port" in line


# ---------------------------------------------------------------------------- escape codes


@pytest.mark.parametrize(
    "env", [{}, {"NO_COLOR": "1"}, {"FORCE_COLOR": "1"}, {"FORCE_COLOR": "1", "NO_COLOR": "1"}]
)
def test_no_escape_codes_into_a_pipe(tmp_path: Path, env: dict[str, str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [\n", encoding="utf-8")
    result = newsletter(tmp_path, "--config", str(bad), "status", env=env)
    one_error(result, ExitStatus.CONFIG, f"{bad}:2")
    good = config(tmp_path, f"sqlite:///{tmp_path / 'n.db'}")
    for command in (["db", "upgrade"], ["status"], ["fetch"]):
        out = newsletter(tmp_path, "--config", str(good), *command, env=env)
        assert out.returncode == 0, out.stderr
        assert "\x1b" not in out.stdout + out.stderr, command


def run_in_terminal(tmp_path: Path, args: list[str], env: dict[str, str]) -> bytes:
    """Run the command with stdout and stderr on a pseudo-terminal; what it wrote there."""
    primary, secondary = pty.openpty()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NEWSLETTER_", "NO_COLOR"))}
    environ.update({"TERM": "xterm-256color", "COLUMNS": "100", **env})
    proc = subprocess.Popen(
        [sys.executable, "-m", "newsletter", *args],
        cwd=tmp_path,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=60)
    os.close(primary)
    return b"".join(chunks)


def test_no_colour_honoured_on_a_terminal(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources: [\n", encoding="utf-8")
    coloured = run_in_terminal(tmp_path, ["--config", str(bad), "status"], {})
    assert b"\x1b[" in coloured  # a terminal gets colour: the check below can see it
    plain = run_in_terminal(tmp_path, ["--config", str(bad), "status"], {"NO_COLOR": "1"})
    assert b"error:" in plain and b"\x1b" not in plain
