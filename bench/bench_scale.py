"""A full edition at scale: rank, render, build and send one digest per subscriber to a local sink.

``python -m bench scale --subscribers 100000`` (default 100,000; 2,000 papers, 40 topics, each
subscriber following 1-3 of them). Three configurations, each through the real command lines:

- SQLite, one process: ``newsletter send --now``;
- PostgreSQL with 1 and with 2 ``newsletter worker --pool solo`` processes, the edition queued by
  ``newsletter send --now`` through Redis.

The sink is :mod:`bench.smtp_counter` in a process of its own (it accepts and counts, nothing
else, and offers PIPELINING as production relays do). The limit to compare against is the raw SMTP hand-off rate to that same sink: one real
digest's bytes sent again and again with ``smtplib`` over as many connections as the product's
pool. Each product process is measured from the kernel's accounting when it exits
(``os.wait4``: user + system CPU, peak RSS), so the sink, PostgreSQL and Redis are not counted
as the product's CPU. SQLite runs at a tenth of the size too, to show peak RSS does not grow with
the number of subscribers.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import smtplib
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import yaml
from sqlalchemy import create_engine, delete, text

from bench import summary
from bench.bench_rank import make_papers, make_vocabulary
from newsletter.clock import utcnow
from newsletter.config import load_config
from newsletter.operations.smtp_sink import free_port
from newsletter.store import Store
from newsletter.store import tables as t
from newsletter.text import phrase_terms

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("NEWSLETTER_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("NEWSLETTER_BENCH_REDIS", "redis://127.0.0.1:6379/0")
PAPERS = 2000
TOPICS = 40
POOL = 4
CHUNK = 1000


@dataclass
class ProcessUsage:
    role: str
    cpu: float
    """User + system CPU seconds."""
    peak_rss_mb: float


@dataclass
class Run:
    name: str
    subscribers: int
    wall: float
    delivered: int
    processes: list[ProcessUsage] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.delivered / self.wall

    @property
    def cpu_ms_per_digest(self) -> float:
        return 1000 * sum(p.cpu for p in self.processes) / max(1, self.delivered)

    @property
    def peak_rss(self) -> float:
        return max(p.peak_rss_mb for p in self.processes)


def _usage(role: str, proc: subprocess.Popen[Any]) -> ProcessUsage:
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return ProcessUsage(role, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024)


# ---------------------------------------------------------------------------- data


def topics(rng: random.Random) -> list[dict[str, Any]]:
    vocab = make_vocabulary()
    out = []
    for i in range(TOPICS):
        groups = []
        seen: set[tuple[str, ...]] = set()
        wanted = rng.randint(2, 4)
        while len(groups) < wanted:  # no two entries matching the same words
            group = rng.choice(vocab[:400])
            terms = {term for word in group for term in phrase_terms(word)}
            if terms.isdisjoint(seen):
                groups.append(group)
                seen |= terms
        out.append(
            {
                "name": f"t{i:02d}",
                "title": " / ".join(g[0] for g in groups[:2]),
                "keywords": [list(g) if len(g) > 1 else g[0] for g in groups],
            }
        )
    return out


def config_data(db_url: str, sink_port: int, topic_list: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "database": {"url": db_url},
        "sender": {
            "from": "Trending Papers <digest@papers.example.org>",
            "postal_address": "1 Bench Street, Benchville",
            "base_url": "https://papers.example.org",
        },
        "smtp": {"host": "127.0.0.1", "port": sink_port, "pool_size": POOL},
        "topics": topic_list,
        "web": {"secret_key": secrets.token_urlsafe(48)},
        "schedule": {"no_listing": "send"},
    }


def populate(store: Store, n: int, rng: random.Random, papers_count: int = PAPERS) -> None:
    """2,000 papers (``papers_count``) first seen in the last days, ``n`` active subscribers with
    1-3 topics."""
    now = utcnow()
    papers = make_papers(papers_count, rng)
    with store.engine.begin() as conn:
        conn.execute(
            t.papers.insert(),
            [
                {
                    "key": p.key,
                    "title": p.title,
                    "abstract": p.abstract,
                    "authors": list(p.authors),
                    "categories": list(p.categories),
                    "url": p.url,
                    "version": 1,
                    "published": now - timedelta(hours=rng.uniform(1, 120)),
                    "first_seen": now - timedelta(hours=rng.uniform(1, 120)),
                    "updated": now,
                    "upvotes": p.upvotes,
                    "comments": p.comments,
                    "content_hash": "x",
                    "announced": True,
                }
                for p in papers
            ],
        )
    weights = [1.0 / (r + 1) ** 0.7 for r in range(TOPICS)]
    for start in range(0, n, 10_000):
        rows = [
            {
                "email": f"reader{i:07d}@example.org",
                "name": f"Reader {i}",
                "status": "active",
                "timezone": "UTC",
                "created": now,
                "status_changed": now,
                "confirmed": now,
                "frequency": "daily",
            }
            for i in range(start, min(n, start + 10_000))
        ]
        with store.engine.begin() as conn:
            conn.execute(t.subscribers.insert(), rows)
            first = conn.execute(
                text("select min(id) from subscribers where email >= :e"), {"e": rows[0]["email"]}
            ).scalar_one()
            subs = []
            for sid in range(first, first + len(rows)):
                picked = set(rng.choices(range(TOPICS), weights=weights, k=rng.randint(1, 3)))
                subs += [{"subscriber_id": sid, "topic": f"t{k:02d}"} for k in picked]
            conn.execute(t.subscriptions.insert(), subs)


def reset_ledger(store: Store) -> None:
    with store.engine.begin() as conn:
        if store.dialect == "postgresql":  # leaves no dead rows behind for the next run
            conn.execute(text("TRUNCATE editions, runs"))
            return
        for table in (t.editions, t.runs):
            conn.execute(delete(table))


# ---------------------------------------------------------------------------- processes


class Sink:
    def __init__(self) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.smtp_counter", str(self.port)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return int(out.split()[-1])


def newsletter(config: Path, *args: str, **kw: Any) -> subprocess.Popen[Any]:
    return subprocess.Popen(
        [sys.executable, "-m", "newsletter", "--config", str(config), *args],
        cwd=ROOT,
        env={**os.environ, "NEWSLETTER_LOG_FORMAT": "json"},
        **kw,
    )


def run_sqlite(config: Path, sink: Sink, n: int, log: Path) -> Run:
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = newsletter(config, "send", "--now", stdout=out, stderr=subprocess.STDOUT)
        usage = _usage("send (one process)", proc)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"send failed: {log.read_text()[-2000:]}")
    return Run("SQLite, one process", n, wall, sink.stop(), [usage])


def run_workers(config: Path, sink: Sink, n: int, workers: int, tmp: Path) -> Run:
    from newsletter.edition.workers import ping_worker

    cfg = load_config(config)
    names = [f"bench{i}-{uuid.uuid4().hex[:6]}@%h" for i in range(workers)]
    procs = []
    for i, name in enumerate(names):
        with (tmp / f"worker{i}.log").open("wb") as out:
            procs.append(
                newsletter(
                    config,
                    "worker",
                    "--pool",
                    "solo",
                    "--name",
                    name,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
    deadline = time.monotonic() + 60
    while not all(ping_worker(cfg, name, timeout=1) for name in names):
        if time.monotonic() > deadline:
            raise RuntimeError("workers did not start: " + (tmp / "worker0.log").read_text())
    started = time.perf_counter()
    with (tmp / "send.log").open("wb") as out:
        send = newsletter(config, "send", "--now", stdout=out, stderr=subprocess.STDOUT)
        usage = [_usage("send (enqueue, wait)", send)]
    wall = time.perf_counter() - started
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    usage += [_usage(f"worker {i + 1}", p) for i, p in enumerate(procs)]
    if send.returncode != 0:
        raise RuntimeError(f"send failed: {(tmp / 'send.log').read_text()[-2000:]}")
    label = f"PostgreSQL, {workers} worker{'s' if workers > 1 else ''}"
    return Run(label, n, wall, sink.stop(), usage)


def raw_handoff(sink: Sink, message: bytes, seconds: float) -> float:
    """Messages per second smtplib hands to the sink over POOL reused connections."""
    count = [0] * POOL
    stop = time.perf_counter() + seconds

    def work(i: int) -> None:
        with smtplib.SMTP("127.0.0.1", sink.port) as smtp:
            while time.perf_counter() < stop:
                smtp.sendmail("digest@papers.example.org", [f"r{i}@example.org"], message)
                count[i] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(POOL)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(count) / (time.perf_counter() - started)


def one_message(config: Path) -> bytes:
    """A real digest of this benchmark, as the product builds it (for the raw hand-off)."""
    from newsletter.deliver import make_message_id
    from newsletter.edition import EditionBuilder, Services, edition_date_for
    from newsletter.models import SubscriberStatus

    cfg = load_config(config)
    store = Store(cfg.database_url)
    try:
        now = utcnow()
        builder = EditionBuilder(Services(cfg, store), now)
        sub = next(iter(store.iter_subscribers(SubscriberStatus.ACTIVE, batch=1)))[0]
        digest = builder.digest(
            sub, edition_date_for(sub, now, cfg.settings.schedule.timezone), set()
        )
        rendered, links = builder.render(digest)
        env = builder.envelope(
            digest, rendered, links, make_message_id(cfg.settings.sender.message_domain)
        )
        return env.data
    finally:
        store.close()


STAGES = (
    ("papers, ranker, templates (once per run)", "build.py", "__init__"),
    ("rank (per subscriber)", "rank/ranker.py", "sections"),
    ("render (HTML + text)", "digest/render.py", "render"),
    ("build the MIME message", "message.py", "build_message"),
    ("SMTP hand-off", "smtp.py", "send"),
    ("ledger: claim", "ledger.py", "claim_editions"),
    ("ledger: mark sending/sent", "ledger.py", "mark_edition"),
    ("ledger: re-read subscriber", "subscribers.py", "subscriber_by_id"),
)


def where_the_time_goes(config: Path, n: int) -> list[tuple[str, float]]:
    """cProfile of one in-process run_send: cumulative ms per digest of each stage."""
    import cProfile
    import pstats

    from newsletter.edition import SendRequest, Services, send_editions

    cfg = load_config(config)
    store = Store(cfg.database_url)
    try:
        profile = cProfile.Profile()
        profile.enable()
        report = send_editions(Services(cfg, store), utcnow(), SendRequest())
        profile.disable()
    finally:
        store.close()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())  # tottime of everything
    out = []
    for label, file, func in STAGES:
        cum = sum(v[3] for (f, _, name), v in stats.items() if f.endswith(file) and name == func)
        if cum:
            out.append((label, 1000 * cum / max(1, report.sent)))
    out.append(("everything (profiled)", 1000 * total / max(1, report.sent)))
    return out


def _reachable() -> str | None:
    try:
        engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"


# ---------------------------------------------------------------------------- main


def embed_as_fetch(config: Path) -> None:
    """Store the vectors of ``config``'s papers and topics as ``newsletter fetch`` does, in a
    process of its own (``bench.bench_send embed``): the send then reads them instead of loading
    the model and embedding 2,000 papers itself (about 30 s of CPU and 300 MB in the measured
    process). A no-op when semantic ranking is off or its model is not installed."""
    rows = config.with_suffix(".vectors")
    subprocess.run(
        [sys.executable, "-m", "bench.bench_send", "embed", str(config), str(rows)],
        cwd=Path(__file__).resolve().parent.parent,
        check=True,
    )


def main(quick: bool, subscribers: int = 100_000) -> str:
    n = 2000 if quick else subscribers
    rng = random.Random(7)
    topic_list = topics(rng)
    runs: list[Run] = []
    notes: list[str] = []
    with TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        # --- SQLite, one process, at n/10 and n
        sizes = [max(100, n // 10), n]
        handoff = 0.0
        msg_size = 0
        for size in sizes:
            db = tmp / f"bench-{size}.db"
            store = Store(f"sqlite:///{db}")
            store.upgrade()
            populate(store, size, random.Random(size))
            store.close()
            sink = Sink()
            path = tmp / f"sqlite-{size}.yaml"
            path.write_text(yaml.safe_dump(config_data(f"sqlite:///{db}", sink.port, topic_list)))
            embed_as_fetch(path)
            if size == n:
                message = one_message(path)
                msg_size = len(message)
                handoff = raw_handoff(sink, message, 5 if quick else 15)
                sink.stop()
                sink = Sink()
                path.write_text(
                    yaml.safe_dump(config_data(f"sqlite:///{db}", sink.port, topic_list))
                )
            print(f"  sqlite {size}", file=sys.stderr, flush=True)
            runs.append(run_sqlite(path, sink, size, tmp / f"sqlite-{size}.log"))
        # --- where the CPU goes: one profiled in-process run on a small database
        small = min(1000, n)
        db = tmp / "profile.db"
        store = Store(f"sqlite:///{db}")
        store.upgrade()
        populate(store, small, random.Random(small))
        store.close()
        sink = Sink()
        path = tmp / "profile.yaml"
        path.write_text(yaml.safe_dump(config_data(f"sqlite:///{db}", sink.port, topic_list)))
        print(f"  profile {small}", file=sys.stderr, flush=True)
        embed_as_fetch(path)
        stages = where_the_time_goes(path, small)
        sink.stop()
        # --- PostgreSQL with 1 and 2 workers
        reason = _reachable()
        if reason:
            notes.append(f"PostgreSQL/Redis runs skipped: {reason}")
        else:
            schema = f"bench_{uuid.uuid4().hex[:8]}"
            admin = create_engine(PG_URL)
            with admin.begin() as conn:
                conn.execute(text(f'CREATE SCHEMA "{schema}"'))
            url = f"{PG_URL}?options=-csearch_path%3D{schema}"
            queue = f"bench-{uuid.uuid4().hex[:8]}"
            try:
                store = Store(url)
                store.upgrade()
                populate(store, n, random.Random(n))
                for workers in (1, 2):
                    reset_ledger(store)
                    sink = Sink()
                    data = config_data(url, sink.port, topic_list)
                    data["workers"] = {"broker_url": REDIS_URL, "queue": queue, "chunk_size": CHUNK}
                    path = tmp / f"pg-{workers}.yaml"
                    path.write_text(yaml.safe_dump(data))
                    if workers == 1:
                        embed_as_fetch(path)
                    print(f"  postgres {workers} worker(s)", file=sys.stderr, flush=True)
                    runs.append(run_workers(path, sink, n, workers, tmp))
                store.close()
            finally:
                with admin.begin() as conn:
                    conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
                admin.dispose()
                import redis

                client = redis.Redis.from_url(REDIS_URL)
                for key in client.scan_iter(f"{queue}*"):
                    client.delete(key)
    return report(n, runs, handoff, msg_size, notes, stages, small)


def report(
    n: int,
    runs: list[Run],
    handoff: float,
    msg_size: int,
    notes: list[str],
    stages: list[tuple[str, float]],
    profiled: int,
) -> str:
    lines = [
        "## Scale: one full edition (rank, render, send to a local sink)",
        "",
        f"{n:,} subscribers, {PAPERS:,} papers, {TOPICS} topics (1-3 per subscriber); SMTP pool "
        f"of {POOL} connections to a counting sink in its own process; workers take chunks of "
        f"{CHUNK:,}. CPU and peak RSS are each product process's own, from the kernel when it "
        "exits (the sink, PostgreSQL and Redis are not counted).",
        "",
        "| configuration | subscribers | delivered | wall s | digests/s | CPU ms/digest | "
        "per process: CPU s, peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        each = "; ".join(f"{p.role}: {p.cpu:.1f} s, {p.peak_rss_mb:.0f} MB" for p in r.processes)
        lines.append(
            f"| {r.name} | {r.subscribers:,} | {r.delivered:,} | {r.wall:.1f} | {r.rate:.0f} | "
            f"{r.cpu_ms_per_digest:.2f} | {each} |"
        )
    lines += [
        "",
        f"Limit: raw `smtplib` hand-off of one real {msg_size / 1024:.0f} KB digest to the same "
        f"sink over {POOL} connections: **{handoff:.0f} messages/s**.",
        "",
    ]
    full = [r for r in runs if r.subscribers == n]
    by = {r.name: r for r in full}
    one, two = by.get("PostgreSQL, 1 worker"), by.get("PostgreSQL, 2 workers")
    targets = []
    cpu = max((r.cpu_ms_per_digest for r in full), default=0.0)
    targets.append(f"- CPU per digest, end to end: worst {cpu:.2f} ms (target ≤ 1.5 ms).")
    verdicts = [summary("CPU per digest, end to end (≤ 1.5 ms)", f"{cpu:.2f} ms", cpu <= 1.5)]
    rss = max((r.peak_rss for r in runs), default=0.0)
    small = [r for r in runs if r.name.startswith("SQLite") and r.subscribers < n]
    if small:
        targets.append(
            f"- Peak RSS: worst {rss:.0f} MB per process (target ≤ 200 MB); SQLite one process "
            f"{small[0].peak_rss:.0f} MB at {small[0].subscribers:,} subscribers vs "
            f"{by['SQLite, one process'].peak_rss:.0f} MB at {n:,}."
        )
        verdicts.append(summary("peak RSS per process (≤ 200 MB)", f"{rss:.0f} MB", rss <= 200))
    if one and two:
        targets.append(
            f"- 2 workers vs 1: {two.rate / one.rate:.2f}x the digests/s (target ≥ 1.6x where "
            f"cores allow; this machine has {os.cpu_count()} cores shared by the workers, "
            "PostgreSQL, Redis, the sink and the enqueuing process)."
        )
        gain = two.rate / one.rate
        verdicts.append(summary("2 workers vs 1 (≥ 1.6x)", f"{gain:.2f}x", gain >= 1.6))
    lines += targets + [f"- {note}" for note in notes] + verdicts
    lines.append(
        f"- Load average when the runs ended: {Path('/proc/loadavg').read_text().split()[0]} on {os.cpu_count()} cores."
    )
    lines += [
        "",
        f"Where the CPU goes (cProfile of one in-process run, SQLite, {profiled:,} subscribers; "
        "profiling inflates every figure, the shares are what matter):",
        "",
        "| stage | ms per digest |",
        "|---|---:|",
        *(f"| {label} | {ms:.2f} |" for label, ms in stages),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(main(quick="--quick" in sys.argv))
