"""``newsletter send --now`` against a relay across the internet: does concurrency hide its answer time?

``python -m bench relay`` (``--subscribers N``, default 10,000): for each backend (SQLite, and
PostgreSQL when it runs here) and each relay answer time L in 0, 20, 100 and 400 ms, a fresh
database seeded as :mod:`bench.bench_send` seeds it (2,000 papers with their vectors, 40 topics)
and the real command line with the **shipped defaults** (no ``smtp.pool_size``, no rate) sending
to :mod:`bench.relay_sim` in a process of its own: a relay that answers each final dot after L
ms and takes 16 connections at once (the 17th is greeted ``421 too many connections``). One
more send per backend goes to a relay that takes 6 connections and 40 messages a second (a
``MAIL`` beyond it: ``454 Throttling failure``, Amazon SES's words), answering in 20 ms.

Per row: messages a second while the relay accepted (first to last acceptance), the most
connections open at once, the share of **raw smtplib** (``sendmail`` of the send's typical
message over as many reused connections as the send had open, to a fresh relay of the same
kind), and the share of **the limit**: ``min(connections allowed / L, quota, the same backend's
send at L = 0)``; the relay's throttling replies, duplicates and connections refused; the
command's CPU per digest and peak RSS (``os.wait4``).

``--baseline DIR``: the same sends at L = 0 and 100 ms by the code checked out in DIR (run with
this interpreter, ``PYTHONPATH=DIR``, its own defaults), in the same run; at 100 ms with at most
2,000 readers (a send gated at its final dot takes minutes for them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import yaml

from bench import summary
from bench.bench_send import ROOT, Database, Sink, pg_reason, seed, seed_vectors, topic_list

DELAYS = (0, 20, 100, 400)
CONNECTIONS = 16
BASELINE_SLOW = 2_000
"""Readers for the baseline's send at 100 ms (a gated send takes 3.5 minutes for 2,000)."""
QUOTA = (6, 40.0, 20)
"""The throttling relay: connections, messages a second, answer time in ms."""


class Relay(Sink):
    """:mod:`bench.relay_sim` in a process of its own (:meth:`stop` returns its stats)."""

    def __init__(self, tmp: Path, name: str, *, dot: float, connections: int, quota: float = 0):
        args = ["--dot", str(dot), "--connections", str(connections), "--quota", str(quota)]
        super().__init__(tmp, name, module="bench.relay_sim", args=args)


@dataclass
class Row:
    code: str
    backend: str
    delay_ms: int
    allowed: int
    quota: float
    subscribers: int
    delivered: int
    recipients: int
    duplicates: int
    throttled: int
    refused: int
    peak: int
    awaiting: int
    rate: float
    wall: float
    cpu_ms: float
    peak_rss_mb: float
    raw_rate: float | None = None
    limit: float | None = None

    @property
    def raw_share(self) -> float | None:
        return self.rate / self.raw_rate if self.raw_rate else None

    @property
    def limit_share(self) -> float | None:
        return self.rate / self.limit if self.limit else None


def write_config(path: Path, db: Database, port: int, topics: list[dict[str, Any]]) -> Path:
    """The benchmark's config with the shipped delivery defaults (no pool size, no rate)."""
    from bench.bench_scale import config_data

    data = config_data(db.url, port, topics)
    data["smtp"].pop("pool_size", None)
    data["smtp"]["timeout"] = 60
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_send(config: Path, log: Path, code: Path | None) -> tuple[float, Any]:
    """``newsletter --config CONFIG send --now`` by this code, or by the checkout ``code``."""
    argv = [sys.executable, "-m", "newsletter", "--config", str(config), "send", "--now"]
    env = {**os.environ}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=code or ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    if os.waitstatus_to_exitcode(status) not in (0, 1):  # 1: some messages failed
        raise RuntimeError(f"send failed ({status}): {log.read_text()[-3000:]}")
    return wall, ru


def raw_smtplib(port: int, n: int, data: bytes, connections: int) -> float:
    """``n`` sendmail calls of ``data`` over ``connections`` reused connections: messages a
    second."""
    from bench.bench_deliver import raw_smtplib as raw

    return n / raw(port, n, data, connections)


def measure(
    tmp: Path,
    backend: str,
    n: int,
    topics: list[dict[str, Any]],
    *,
    dot: int,
    allowed: int,
    quota: float = 0.0,
    code: Path | None = None,
) -> Row:
    name = f"{backend}-{dot}-{allowed}-{int(quota)}-{'base' if code else 'this'}"
    print(f"  {name}: send --now, {n:,} subscribers", file=sys.stderr, flush=True)
    db = Database.create(backend, tmp)
    try:
        seed(db, n, topics)
        relay = Relay(tmp, name, dot=dot, connections=allowed, quota=quota)
        try:
            config = write_config(tmp / f"{name}.yaml", db, relay.port, topics)
            seed_vectors(config)
            wall, ru = run_send(config, tmp / f"{name}.log", code)
        finally:
            got = relay.stop()
    finally:
        db.drop()
    span = (got["last"] or 0) - (got["first"] or 0)
    rate = got["messages"] / span if span > 0 else 0.0
    row = Row(
        code="baseline" if code else "this",
        backend=backend,
        delay_ms=dot,
        allowed=allowed,
        quota=quota,
        subscribers=n,
        delivered=got["messages"],
        recipients=got["recipients"],
        duplicates=got["duplicates"],
        throttled=got["throttled"],
        refused=got["refused_connections"],
        peak=got["peak_connections"],
        awaiting=got["peak_awaiting"],
        rate=rate,
        wall=wall,
        cpu_ms=1000 * (ru.ru_utime + ru.ru_stime) / max(1, got["messages"]),
        peak_rss_mb=ru.ru_maxrss / 1024,
    )
    if not quota and got["typical"] and row.peak:
        raw_relay = Relay(tmp, f"{name}-raw", dot=dot, connections=allowed)
        try:
            count = min(n, max(300, 40 * row.peak))
            row.raw_rate = raw_smtplib(raw_relay.port, count, got["typical"], row.peak)
        finally:
            raw_relay.stop()
    print(f"  {json.dumps(asdict(row))}", file=sys.stderr, flush=True)
    return row


def main(quick: bool, subscribers: int = 10_000, baseline: Path | None = None) -> str:
    n = 600 if quick else subscribers
    delays = (0, 100) if quick else DELAYS
    topics = topic_list()
    backends = ["sqlite"]
    notes: list[str] = []
    reason = pg_reason()
    if reason is None:
        backends.append("postgresql")
    else:
        notes.append(f"PostgreSQL skipped: {reason}")
    rows: list[Row] = []
    with TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for backend in backends:
            local: float | None = None
            for dot in delays:
                row = measure(tmp, backend, n, topics, dot=dot, allowed=CONNECTIONS)
                if dot == 0:
                    local = row.rate
                caps = [c for c in (CONNECTIONS / (dot / 1000) if dot else None, local) if c]
                row.limit = min(caps)
                rows.append(row)
            allowed, quota, dot = QUOTA
            row = measure(tmp, backend, n, topics, dot=dot, allowed=allowed, quota=quota)
            row.limit = min(c for c in (allowed / (dot / 1000), quota, local) if c)
            rows.append(row)
            if baseline is not None:
                for dot in (0, 100):
                    # the gated baseline sends about 10 a second at 100 ms: a smaller edition
                    size = n if dot == 0 else min(n, BASELINE_SLOW)
                    row = measure(
                        tmp, backend, size, topics, dot=dot, allowed=CONNECTIONS, code=baseline
                    )
                    caps = [c for c in (CONNECTIONS / (dot / 1000) if dot else None, local) if c]
                    row.limit = min(caps)
                    rows.append(row)
    return report(rows, n, baseline, notes)


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _pair(rows: list[Row], get: Any, fmt: str) -> str:
    """One figure per backend, ``SQLite / PostgreSQL``."""
    return " / ".join(_f(get(r), fmt) for r in rows)


def report(rows: list[Row], n: int, baseline: Path | None, notes: list[str]) -> str:
    out = [
        "## Relay pace: a send against a relay 0-400 ms away (issue 41)",
        "",
        f"`newsletter send --now`, {n:,} readers, shipped defaults, into `bench/relay_sim.py` (16"
        " connections; the quota row: 6, 40 msg/s, 20 ms). Figures per backend (SQLite /"
        " PostgreSQL). limit: min(connections / L, quota, the send at L = 0); raw: smtplib over"
        " as many connections.",
        "",
        "| code, relay | delivered | msg/s | of the limit | of raw | connections, awaiting "
        "(peak) | throttled, refused conns, duplicates | CPU ms/digest | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, int, float], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.code, r.delay_ms, r.quota), []).append(r)
    for (code, delay, quota), mine in groups.items():
        mine.sort(key=lambda r: r.backend != "sqlite")
        relay = f"{delay} ms" + (f", {mine[0].allowed} conns, {quota:g}/s" if quota else "")
        out.append(
            f"| {code}, {relay} | {_pair(mine, lambda r: r.delivered, ',')} | "
            f"{_pair(mine, lambda r: r.rate, '.1f')} | {_pair(mine, lambda r: r.limit_share, '.2f')} | "
            f"{_pair(mine, lambda r: r.raw_share, '.2f')} | "
            f"{_pair(mine, lambda r: r.peak, 'd')}, {_pair(mine, lambda r: r.awaiting, 'd')} | "
            f"{_pair(mine, lambda r: r.throttled, 'd')}, {_pair(mine, lambda r: r.refused, 'd')}, "
            f"{_pair(mine, lambda r: r.duplicates, 'd')} | {_pair(mine, lambda r: r.cpu_ms, '.2f')} | "
            f"{_pair(mine, lambda r: r.peak_rss_mb, '.0f')} |"
        )
    out.append("")
    this = [r for r in rows if r.code == "this"]
    backends = sorted({r.backend for r in this}, key=lambda b: b != "sqlite")

    def at(backend: str, delay: int, quota: float = 0.0, code: str = "this") -> Row | None:
        return next(
            (
                r
                for r in rows
                if r.code == code
                and r.backend == backend
                and r.delay_ms == delay
                and r.quota == quota
            ),
            None,
        )

    near = [(at(b, 0), at(b, 100)) for b in backends]
    if all(a and c for a, c in near):
        shares = [c.rate / a.rate for a, c in near if a and c and a.rate]
        out.append(
            summary(
                "relay 100 ms away, 16 connections: >= 0.85 of a local relay",
                " / ".join(f"{x:.2f}" for x in shares)
                + " (16 / 0.1 s caps it at 160 msg/s); of 16 / 0.1 s: "
                + " / ".join(_f(c.limit_share, ".2f") for _, c in near if c),
                all(x >= 0.85 for x in shares),
            )
        )
    far = [at(b, 400) for b in backends]
    if all(far):
        shares = [r.rate / (CONNECTIONS / 0.4) for r in far if r]
        out.append(
            summary(
                "relay 400 ms away, 16 connections: >= 0.85 of 16 / 0.4 s",
                " / ".join(f"{x:.2f}" for x in shares),
                all(x >= 0.85 for x in shares),
            )
        )
    quota = [at(b, QUOTA[2], QUOTA[1]) for b in backends]
    if all(quota):
        got = [r for r in quota if r]
        ok = all(
            r.delivered == r.subscribers == r.recipients
            and not r.duplicates
            and r.rate >= 0.8 * r.quota
            and r.throttled <= 0.05 * r.delivered
            for r in got
        )
        out.append(
            summary(
                "relay of 6 connections, 40 msg/s: all once, >= 0.8 of the quota, <= 5 % throttled",
                " / ".join(
                    f"{r.delivered:,} once, {r.rate / r.quota:.2f}, "
                    f"{100 * r.throttled / max(1, r.delivered):.1f} %"
                    for r in got
                ),
                ok,
            )
        )
    pairs = [(at(b, 0), at(b, 0, code="baseline")) for b in backends]
    if baseline is not None and all(a and o for a, o in pairs):
        out.append(
            summary(
                f"CPU per digest and peak RSS at 0 ms: no worse than {baseline.name}",
                " / ".join(
                    f"{a.cpu_ms:.2f} vs {o.cpu_ms:.2f} ms, {a.peak_rss_mb:.0f} vs "
                    f"{o.peak_rss_mb:.0f} MB"
                    for a, o in pairs
                    if a and o
                ),
                all(
                    a.cpu_ms <= o.cpu_ms and a.peak_rss_mb <= o.peak_rss_mb
                    for a, o in pairs
                    if a and o
                ),
            )
        )
    out += [f"- {note}" for note in notes]
    return "\n".join(out) + "\n"
