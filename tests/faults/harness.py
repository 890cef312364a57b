"""What the fault tests share: a populated install, the real CLI in a subprocess, a faulty relay
plan, ways to cut the database (end its backends, or a TCP proxy that goes away), and the
end-of-test audit (nothing lost, duplicates only as documented, every run in a recorded state).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import create_engine, text

from newsletter.clock import utcnow
from newsletter.config import load_config
from newsletter.models import EditionStatus
from newsletter.operations.smtp_sink import free_port
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import NOW, PG_URL, base_config, write_config
from tests.smtpfaults import Fault, FaultServer

SECRET = "fault-suite-secret-0123456789abcdef"
TOPICS = (["gpu-kernels"], ["rendering"], ["gpu-kernels", "rendering"])
RECORDED = {"ok", "failed", "stopped", "interrupted"}
"""The states a send run may end in; ``running`` is only for a run that is alive."""


def email(i: int) -> str:
    return f"reader{i:04d}@example.org"


def install(
    tmp_path: Path,
    db_url: str,
    relay: FaultServer,
    subscribers: int,
    *,
    pool: int = 3,
    **overrides: Any,
) -> tuple[Path, Store]:
    """A config and a database with ``subscribers`` active readers and today's papers."""
    data = base_config(
        db_url,
        relay,  # type: ignore[arg-type]
        schedule={"no_listing": "send"},
        digest={"empty": "send"},
        web={"secret_key": SECRET},
        delivery={"attempts": 6, "retry_delay": 0.05, "retry_max_delay": 0.2},
    )
    data["smtp"].update(pool_size=pool, timeout=10)
    for key, value in overrides.items():
        data[key] = {**data.get(key, {}), **value}
    path = write_config(tmp_path, data)
    config = load_config(path)
    store = Store(config.database_url)
    store.upgrade()
    for i in range(subscribers):
        store.add_subscriber(email(i), topics=TOPICS[i % 3], now=NOW)
    run_fetch(config, store, utcnow() - timedelta(hours=1))
    return path, store


def cli(path: Path, *args: str, log: Path) -> subprocess.Popen[bytes]:
    """``newsletter --config path ARGS`` in a subprocess, its output appended to ``log``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEWSLETTER_")}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "newsletter", "--config", str(path), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def run_cli(path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEWSLETTER_")}
    return subprocess.run(
        [sys.executable, "-m", "newsletter", "--config", str(path), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def status_of(path: Path, *args: str) -> str:
    """``newsletter status ARGS`` (in this process: it only reads), its output."""
    from click.testing import CliRunner

    from newsletter.cli import cli as command

    result = CliRunner().invoke(command, ["--config", str(path), "status", *args])
    assert result.exit_code == 0, result.output
    return result.output


LOG_LINE = re.compile(r"^(debug|info|warning|error|critical) [\w.]+: ")
"""A log record as ``newsletter.logs.TextFormatter`` writes it (``error newsletter.runs.alerts: …``),
unlike a command's own ``error: …`` line."""


def human_lines(stderr: str) -> list[str]:
    """stderr without the log: its JSON lines, or its text lines (warnings and alerts logged on
    the way), leaving what the command itself says."""
    out = []
    for line in stderr.splitlines():
        try:
            json.loads(line)
        except ValueError:
            if line.strip() and not LOG_LINE.match(line):
                out.append(line)
    return out


# ---------------------------------------------------------------------------- the relay


@dataclass
class FaultyRelay:
    """A seeded plan for :func:`tests.smtpfaults.fault_server`: a share of recipients get one
    temporary fault (421, 451, 452, 552, or the line dropped after the final dot, with the
    message kept) on their first transaction; the ``bad`` ones get 550 to RCPT every time."""

    seed: int
    share: float = 0.15
    bad: frozenset[str] = frozenset()
    on_message: Any = None
    """Called (with the count) after each message the relay stored, under its lock."""
    seen: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    stored: int = 0

    def _first_fault(self, rcpt: str) -> str | None:
        rng = random.Random(f"{self.seed}:{rcpt}")
        if rng.random() >= self.share:
            return None
        return rng.choice(["421", "451", "452", "552", "drop"])

    def __call__(self, stage: str, rcpt: str | None) -> Fault | None:
        if rcpt is None:
            return None
        if rcpt in self.bad:
            return Fault("550 5.1.1 no such user") if stage == "RCPT" else None
        if stage == "RCPT":
            self.seen[rcpt] += 1
        first = self.seen[rcpt] == 1
        kind = self._first_fault(rcpt) if first else None
        if stage == "DATA" and kind is None:
            self._stored()
            return None
        if kind is None:
            return None
        if stage == "RCPT" and kind in ("421", "451", "452"):
            self.faults[kind] += 1
            reply = {
                "421": "421 4.3.2 try again later",
                "451": "451 4.3.0 local problem",
                "452": "452 4.2.2 mailbox full for now",
            }[kind]
            return Fault(reply, close=kind == "421")
        if stage == "DATA" and kind == "552":
            self.faults[kind] += 1
            return Fault("552 4.3.1 out of storage, try later")
        if stage == "DATA" and kind == "drop":
            self.faults[kind] += 1
            self._stored()
            return Fault(None, close=True, keep=True)
        return None

    def _stored(self) -> None:
        self.stored += 1
        if self.on_message is not None:
            self.on_message(self.stored)


# ---------------------------------------------------------------------------- the database


def with_application_name(url: str, name: str) -> str:
    """``url`` with connections labelled ``name`` in ``pg_stat_activity``."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}application_name={name}"


def terminate_backends(name: str) -> int:
    """End every PostgreSQL backend labelled ``name`` (as a failover or an operator would)."""
    admin = create_engine(PG_URL)
    try:
        with admin.begin() as conn:
            rows = conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = :n AND pid <> pg_backend_pid()"
                ),
                {"n": name},
            ).all()
        return sum(1 for (ok,) in rows if ok)
    finally:
        admin.dispose()


class TcpProxy:
    """A loopback TCP proxy (to PostgreSQL, or to a relay) that can go away (connections cut,
    new ones refused) and come back on the same port."""

    def __init__(self, target: tuple[str, int], *, reject: int = 0) -> None:
        self.target = target
        self.reject = reject
        """Connections to close at once, unanswered, before forwarding any (a dead relay)."""
        self.port = free_port()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.up()

    def url(self, url: str) -> str:
        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) > 1 else host))

    def up(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def down(self) -> None:
        """Refuse new connections and cut the open ones."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):  # wakes the blocked accept(): else the kernel
                listener.shutdown(socket.SHUT_RDWR)  # keeps queueing connections for it
            listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self.reject > 0:
                self.reject -= 1
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


# ---------------------------------------------------------------------------- the audit


@dataclass
class Audit:
    subscribers: int
    delivered: int
    duplicates: int
    lost: list[str]
    other_ids: list[str]
    """Recipients who got two different Message-IDs (never allowed)."""
    failed: list[str]
    refused_resend: list[str]
    """Recipients whose edition ended ``resend_refused``: resumed after a run was killed while
    it was ``sending``, then refused (counted as delivered: the ledger cannot tell that the cut
    attempt never reached its final dot)."""
    statuses: Counter[str]
    runs: Counter[str]


def audit(path: Path, relay: FaultServer, bad: frozenset[str] = frozenset()) -> Audit:
    """Compare what the relay received with the ledger and the runs, from the CLI's view."""
    config = load_config(path)
    store = Store(config.database_url)
    try:
        active = [s.email for batch in store.iter_subscribers() for s in batch]
        today = utcnow().date()
        rows = [r for d in (today - timedelta(days=1), today) for r in store.editions_on(d)]
    finally:
        store.close()
    ids = relay.ids_by_rcpt()
    lost = [e for e in active if e not in bad and not ids.get(e)]
    other = [r for r, mids in ids.items() if len(set(mids)) > 1]
    by_mail = {r.email: r for r in rows}
    failed = [e for e in active if e in by_mail and by_mail[e].status is EditionStatus.FAILED]
    refused = [
        e for e in active if e in by_mail and by_mail[e].status is EditionStatus.RESEND_REFUSED
    ]
    status = json.loads(status_of(path, "--json", "--runs", "1000"))
    runs = Counter(r["status"] for r in status["runs"] if r["kind"] == "send")
    return Audit(
        subscribers=len(active),
        delivered=sum(1 for e in active if ids.get(e)),
        duplicates=sum(len(m) - 1 for m in ids.values()),
        lost=lost,
        other_ids=other,
        failed=failed,
        refused_resend=refused,
        statuses=Counter(r.status.value for r in rows),
        runs=runs,
    )
