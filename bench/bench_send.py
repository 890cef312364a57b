"""``newsletter send --now`` as an operator runs it, start-up included, on SQLite and PostgreSQL.

``python -m bench send --subscribers 30000`` (default 10,000): for each backend a fresh database
(SQLite file; PostgreSQL: a new database on the server of ``NEWSLETTER_BENCH_PG``, dropped
afterwards) is seeded as :mod:`bench.bench_scale` seeds it (2,000 papers first seen over the last
five days, 40 topics, each subscriber following 1-3), then the real command line runs in a
subprocess: ``newsletter --config FILE send --now``, SMTP pool of 4, into an aiosmtpd sink in a
process of its own (:mod:`bench.smtp_counter`; ``NEWSLETTER_BENCH_SINK=counter`` for the bare
counting sink).

The limit, in the same run, right after each backend's send: raw ``smtplib`` ``sendmail`` of a
typical digest of that send (the received message whose size is closest to the median, read back
from the sink) as many times as there are subscribers, over the same 4 connections, to a fresh
sink of the same kind.

Measured per send: wall time of the command (start to exit), digests/s and the ratio to raw; the
command's own CPU and peak RSS from the kernel when it exits (``os.wait4``); on PostgreSQL the CPU
of the server processes serving the bench database (``/proc/<pid>/stat`` of its backends, sampled
while they live) and ``pg_stat_user_tables`` for ``editions`` (sequential scans, rows they read).

The papers' embedding vectors are stored before each send, as ``newsletter fetch`` leaves them
(:func:`seed_vectors`): a send reads vectors and never runs the model (embedded once per bench
run, copied into each database). ``--baseline DIR``: the same sends, in the same run, by the
code checked out in the worktree DIR (its own ``.venv``, its own seeding, its own
``bench/bench_send.py``), one before each of this code's sends; the report gives this code's CPU
per digest as a share of the baseline's. ``--repeat N`` (with ``--baseline``): N such pairs per
backend, interleaved; the table shows the pair with the median share, and a note lists every
pair's share and send / raw.

Where each digest's CPU goes: a second send of each backend runs the same command in-process
(``python -m bench.bench_send profile OUT -- ARGS``, imports included) with a :class:`StageClock`,
which reads the thread's CPU clock around each stage function (:data:`STAGES`); each group's share
is applied to the unprofiled send's measured CPU per digest. On PostgreSQL the server's part is
the measured CPU of its backends.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any, ClassVar

import yaml
from sqlalchemy import create_engine, make_url, text

from bench import summary
from newsletter.clock import utcnow

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("NEWSLETTER_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
POOL = 4
PAPERS = 2000  # bench_scale.PAPERS (imported lazily there: it loads the store)
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- the sink


class Sink:
    """:mod:`bench.smtp_counter` in its own process; :meth:`stop` returns what it received."""

    def __init__(
        self,
        tmp: Path,
        name: str,
        *,
        module: str = "bench.smtp_counter",
        args: list[str] | None = None,
    ) -> None:
        """``module`` (``bench.smtp_counter`` or ``bench.relay_sim``) on a free port, with
        ``args`` (default: the aiosmtpd sink unless ``NEWSLETTER_BENCH_SINK=counter``)."""
        from newsletter.operations.smtp_sink import free_port

        self.port = free_port()
        self.stats = tmp / f"{name}.sink.json"
        if args is None:
            args = ["--aiosmtpd"] if os.environ.get("NEWSLETTER_BENCH_SINK") != "counter" else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, str(self.port), *args, "--stats", str(self.stats)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the SMTP sink did not start")

    def stop(self) -> dict[str, Any]:
        """Stop the sink: messages, recipients, bytes, median size, its CPU, the typical one."""
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.stdout is not None
        self.proc.stdout.read()
        self.proc.stdout.close()
        _, _, ru = os.wait4(self.proc.pid, 0)
        self.proc.returncode = 0
        stats: dict[str, Any] = json.loads(self.stats.read_text())
        stats["cpu"] = ru.ru_utime + ru.ru_stime
        stats["typical"] = self.stats.with_suffix(".eml").read_bytes()
        return stats


# ---------------------------------------------------------------------------- databases


@dataclass
class Database:
    """A fresh database for one send: a SQLite file, or a PostgreSQL database of its own."""

    backend: str
    url: str
    admin_url: str | None = None
    name: str = ""

    @classmethod
    def create(cls, backend: str, tmp: Path) -> Database:
        if backend == "sqlite":
            return cls(backend, f"sqlite:///{tmp / f'send-{uuid.uuid4().hex[:6]}.db'}")
        name = f"bench_send_{uuid.uuid4().hex[:8]}"
        admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
        return cls(backend, url, PG_URL, name)

    def drop(self) -> None:
        if self.admin_url is None:
            return
        admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        admin.dispose()

    def editions_stats(self) -> dict[str, Any]:
        """``pg_stat_user_tables`` for ``editions`` (PostgreSQL; empty on SQLite)."""
        if self.backend != "postgresql":
            return {}
        engine = create_engine(self.url)
        try:
            with engine.connect() as conn:
                time.sleep(1.0)  # backends flush their statistics at most once a second
                conn.execute(text("select pg_stat_clear_snapshot()"))
                row = conn.execute(
                    text(
                        "select seq_scan, seq_tup_read, idx_scan, n_live_tup, last_analyze, "
                        "last_autoanalyze from pg_stat_user_tables where relname = 'editions'"
                    )
                ).one()
                autovacuum = conn.execute(text("show autovacuum")).scalar_one()
        finally:
            engine.dispose()
        return {
            "seq_scan": row.seq_scan,
            "seq_tup_read": row.seq_tup_read,
            "idx_scan": row.idx_scan,
            "rows": row.n_live_tup,
            "analyzed": bool(row.last_analyze or row.last_autoanalyze),
            "autovacuum": autovacuum,
        }


def seed(db: Database, n: int, topic_list: list[dict[str, Any]], papers: int = PAPERS) -> None:
    """Migrated schema, 2,000 papers (``papers``), ``n`` active subscribers: as the scale
    benchmark seeds."""
    import random

    from bench.bench_scale import populate
    from newsletter.store import Store

    store = Store(db.url)
    try:
        store.upgrade()
        populate(store, n, random.Random(n), papers)
    finally:
        store.close()


_VECTORS: dict[int, list[dict[str, Any]]] = {}
"""The embedding rows of the seeded papers by their count, made once per bench run (same papers,
same texts)."""


def seed_vectors(config_path: Path, papers: int = PAPERS) -> None:
    """Store the papers' and topics' embedding vectors as ``newsletter fetch`` does
    (``embed_new``), so that the send reads them; a no-op when semantic ranking is off or its
    model is not installed. The first call embeds, in a process of its own
    (:func:`embed_main`): a send forked from a process that holds the model would report that
    process's memory as its own peak (``ru_maxrss`` counts the parent's pages at the fork).
    Later calls copy its rows."""
    import pickle

    from newsletter.config import load_config
    from newsletter.store import Store
    from newsletter.store import tables as t

    if papers not in _VECTORS:
        rows = config_path.with_suffix(".vectors")
        subprocess.run(
            [sys.executable, "-m", "bench.bench_send", "embed", str(config_path), str(rows)],
            cwd=ROOT,
            check=True,
        )
        if not rows.exists():  # semantic ranking is off, or its model is not installed
            return
        _VECTORS[papers] = pickle.loads(rows.read_bytes())
        return
    store = Store(load_config(config_path).database_url)
    try:
        with store.engine.begin() as conn:
            conn.execute(t.embeddings.insert(), _VECTORS[papers])
    finally:
        store.close()


def embed_main(config_path: str, rows: str) -> None:
    """``python -m bench.bench_send embed CONFIG ROWS``: what a fetch embeds, stored in the
    config's database and written to ``ROWS`` (a pickle of the ``embeddings`` rows); no file
    when semantic ranking is off or its model is not installed."""
    import importlib
    import pickle

    from newsletter.config import load_config
    from newsletter.services import Services
    from newsletter.store import tables as t

    services = Services.open(load_config(Path(config_path)))
    try:
        if services.vectors.problem:
            return
        # where a fetch embeds: runs/fetch.py since issue 46, fetch_run.py before, and
        # runs.py before its rename (bench compares with older commits)
        for name in ("newsletter.runs.fetch", "newsletter.fetch_run", "newsletter.runs"):
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            if hasattr(module, "embed_new"):
                break
        module.embed_new(services, utcnow())
        with services.store.engine.connect() as conn:
            got = [dict(r._mapping) for r in conn.execute(t.embeddings.select())]
        Path(rows).write_bytes(pickle.dumps(got))
    finally:
        services.store.close()


# ---------------------------------------------------------------------------- server CPU


def _ticks(pid: int) -> tuple[int, int] | None:
    """(utime + stime, cutime + cstime) of ``pid`` in clock ticks, None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def _is_postgres(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "postgres"
    except OSError:
        return False


class ServerCpu:
    """CPU of the PostgreSQL server while a send runs, read from ``/proc``.

    ``backends``: the processes serving database ``name`` (found by their process title),
    sampled every ``every`` seconds while they live: a backend that exits loses at most its last
    interval. ``all_postgres``: every postgres process plus what the postmaster reaped, before
    and after; it includes the WAL writer and checkpointer, and other sessions on this server.
    """

    def __init__(self, name: str, every: float = 0.05) -> None:
        self.name = name
        self.every = every
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._ours: set[int] = set()
        self._stop = threading.Event()
        self._before = self._all()
        for pid in self._postgres():  # backends already there start from what they had used
            if self._matches(pid) and (got := _ticks(pid)) is not None:
                self._ours.add(pid)
                self._first[pid] = self._last[pid] = got[0]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    _other: ClassVar[set[int]] = set()
    """Processes seen not to be postgres (a class-wide cache: /proc is read 20 times a second)."""

    def _postgres(self) -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or (pid := int(entry.name)) in self._other:
                continue
            if _is_postgres(pid):
                found.append(pid)
            else:
                self._other.add(pid)
        return found

    def _matches(self, pid: int) -> bool:
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return False
        return f" {self.name} " in title

    def _all(self) -> int:
        total = 0
        for pid in self._postgres():
            got = _ticks(pid)
            if got is not None:
                total += got[0] + got[1]  # the postmaster's reaped children are in its second
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            for pid in self._postgres():
                if pid not in self._ours:
                    if not self._matches(pid):
                        continue  # another database's, or not logged in yet
                    self._ours.add(pid)
                    self._first.setdefault(pid, 0)  # started during the send: all of its CPU
                got = _ticks(pid)
                if got is not None:
                    self._last[pid] = got[0]

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        for pid in self._ours:
            got = _ticks(pid)
            if got is not None:
                self._last[pid] = got[0]
        backends = sum(self._last[p] - self._first.get(p, 0) for p in self._last)
        return {
            "backends": backends / CLK_TCK,
            "backend_count": len(self._ours),
            "all_postgres": (self._all() - self._before) / CLK_TCK,
        }


# ---------------------------------------------------------------------------- one send


@dataclass
class Send:
    """One ``newsletter send --now`` and the raw baseline measured right after it."""

    backend: str
    subscribers: int
    wall: float
    cpu: float
    """The command's user + system CPU seconds."""
    peak_rss_mb: float
    delivered: int
    """Messages the sink accepted."""
    recipients: int
    """Distinct recipients among them."""
    digest_bytes: int
    """Size of the typical digest (the median-sized one received)."""
    raw_seconds: float
    raw_delivered: int
    sink_cpu: float
    server: dict[str, float] = field(default_factory=dict)
    editions: dict[str, Any] = field(default_factory=dict)
    load: tuple[float, float] = (0.0, 0.0)
    """Load average (1 min) when the send started and when the raw baseline ended."""

    @property
    def rate(self) -> float:
        return self.delivered / self.wall

    @property
    def raw_rate(self) -> float:
        return self.subscribers / self.raw_seconds

    @property
    def ratio(self) -> float:
        return self.rate / self.raw_rate

    @property
    def cpu_ms(self) -> float:
        return 1000 * self.cpu / max(1, self.delivered)

    @property
    def server_ms(self) -> float | None:
        if not self.server:
            return None
        return 1000 * self.server["backends"] / max(1, self.delivered)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            rate=self.rate,
            raw_rate=self.raw_rate,
            ratio=self.ratio,
            cpu_ms=self.cpu_ms,
            server_ms=self.server_ms,
        )
        return out


def topic_list() -> list[dict[str, Any]]:
    import random

    from bench.bench_scale import topics

    return topics(random.Random(7))


def write_config(path: Path, db: Database, port: int, topics: list[dict[str, Any]]) -> Path:
    from bench.bench_scale import config_data

    data = config_data(db.url, port, topics)
    data["smtp"]["pool_size"] = POOL
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def command() -> list[str]:
    """The installed ``newsletter`` script beside this interpreter (``-m newsletter`` without)."""
    script = Path(sys.executable).parent / "newsletter"
    return [str(script)] if script.exists() else [sys.executable, "-m", "newsletter"]


def run_cli(config: Path, log: Path, *, profile: Path | None = None) -> tuple[float, Any]:
    """``newsletter --config CONFIG send --now``: (wall seconds, rusage); raises if it failed.

    With ``profile``, the same command runs in-process under :func:`sampled` in a fresh
    interpreter (``python -m bench.bench_send profile FILE -- ARGS``), which writes its CPU per
    group to ``profile``.
    """
    args = ["--config", str(config), "send", "--now"]
    argv = [*command(), *args]
    if profile is not None:
        argv = [sys.executable, "-m", "bench.bench_send", "profile", str(profile), "--", *args]
    env = {**os.environ, "NEWSLETTER_LOG_FORMAT": "json"}
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"send failed ({status}): {log.read_text()[-3000:]}")
    return wall, ru


def raw_smtplib(port: int, n: int, data: bytes) -> float:
    """``n`` sendmail calls of ``data`` over POOL reused connections; seconds taken."""
    from bench.bench_deliver import POOL as DELIVER_POOL
    from bench.bench_deliver import raw_smtplib as raw

    assert DELIVER_POOL == POOL
    return raw(port, n, data)


def measure(
    backend: str,
    n: int,
    tmp: Path,
    topics: list[dict[str, Any]] | None = None,
    papers: int = PAPERS,
) -> Send:
    """Seed a fresh database, run the command into a sink, then the raw baseline (``papers``
    fewer than the benchmark's 2,000 only in its smoke test: embedding them is most of its time)."""
    topics = topics or topic_list()
    db = Database.create(backend, tmp)
    try:
        seed(db, n, topics, papers)
        sink = Sink(tmp, f"{backend}-send")
        config = write_config(tmp / f"{backend}-send.yaml", db, sink.port, topics)
        seed_vectors(config, papers)
        load0 = os.getloadavg()[0]
        server = ServerCpu(db.name) if backend == "postgresql" else None
        try:
            wall, ru = run_cli(config, tmp / f"{backend}-send.log")
        finally:
            used = server.stop() if server is not None else {}
            got = sink.stop()
        editions = db.editions_stats()
    finally:
        db.drop()
    typical: bytes = got["typical"]
    raw_sink = Sink(tmp, f"{backend}-raw")
    try:
        raw = raw_smtplib(raw_sink.port, n, typical)
    finally:
        raw_got = raw_sink.stop()
    return Send(
        backend=backend,
        subscribers=n,
        wall=wall,
        cpu=ru.ru_utime + ru.ru_stime,
        peak_rss_mb=ru.ru_maxrss / 1024,
        delivered=got["messages"],
        recipients=got["recipients"],
        digest_bytes=len(typical),
        raw_seconds=raw,
        raw_delivered=raw_got["messages"],
        sink_cpu=got["cpu"],
        server=used,
        editions=editions,
        load=(load0, os.getloadavg()[0]),
    )


_BASELINE_SCRIPT = """
import json, sys
from dataclasses import asdict
from pathlib import Path
from bench import bench_send
send = bench_send.measure(sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]))
print("SEND " + json.dumps(asdict(send), default=str))
"""


def measure_baseline(baseline: Path, backend: str, n: int, tmp: Path) -> Send:
    """:func:`measure` as the code checked out in ``baseline`` runs it (its venv, its seeding,
    its command), in a subprocess; raises if it failed."""
    python = baseline / ".venv" / "bin" / "python"
    out = subprocess.run(
        [str(python), "-c", _BASELINE_SCRIPT, backend, str(n), str(tmp)],
        cwd=baseline,
        env={**own_defaults(), "NEWSLETTER_BENCH_PG": PG_URL},
        capture_output=True,
        text=True,
        check=False,
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("SEND ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"the baseline's send failed: {out.stderr[-3000:]}")
    data = json.loads(line.removeprefix("SEND "))
    known = {f for f in Send.__dataclass_fields__}
    send = Send(**{k: v for k, v in data.items() if k in known})
    send.load = (send.load[0], send.load[1])
    return send


def own_defaults() -> dict[str, str]:
    """This process's environment without what importing ``newsletter`` added to it (its
    ``OPENBLAS_NUM_THREADS`` default, ``newsletter/__init__.py``): the baseline runs with its
    own code's defaults, as an operator's shell would start it. What the bench was started with
    (``/proc/self/environ``, the environment at exec) is kept."""
    env = dict(os.environ)
    try:
        started = Path("/proc/self/environ").read_bytes().split(b"\0")
    except OSError:
        return env
    given = {kv.split(b"=", 1)[0].decode(errors="replace") for kv in started if b"=" in kv}
    if "OPENBLAS_NUM_THREADS" not in given:
        env.pop("OPENBLAS_NUM_THREADS", None)
    return env


def baseline_name(baseline: Path) -> str:
    """The short commit the baseline worktree has checked out."""
    out = subprocess.run(
        ["git", "-C", str(baseline), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or baseline.name


# ---------------------------------------------------------------------------- where the CPU goes

LEDGER = "ledger: claims and marks (store ledger, LedgerWriter)"
STORE = "store, other: subscribers, papers, votes, runs, schema"
RANK = "rank (Ranker, the subscriber's sections)"
RENDER = "render (HTML and text)"
LINKS = "links and tokens (unsubscribe, manage, view, feedback)"
MIME = "MIME and DKIM (build the message, VERP, sign)"
SHARED = (
    "shared messages (render and MIME of the readers of a shape made once, each reader's a join)"
)
SMTP = "SMTP hand-off (SmtpMailer)"
POOL_GLUE = "sender threads, rest: queue, rate limit, outcome"
LOOP = "send loop, per-run set-up (edition)"
IMPORTS = "start-up: imports"
CLI = "CLI, rest: config, schema check, run record, report"
OTHER = "other threads"

GROUPS = (
    LEDGER,
    STORE,
    RANK,
    RENDER,
    LINKS,
    MIME,
    SHARED,
    SMTP,
    POOL_GLUE,
    LOOP,
    IMPORTS,
    CLI,
    OTHER,
)
"""The groups of the breakdown, in table order."""

STAGES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("newsletter.edition:EditionBuilder.__init__",), LOOP),
    (("newsletter.edition:run_send", "newsletter.edition.loop:send_editions"), LOOP),
    (("newsletter.edition:EditionBuilder.digest",), RANK),
    (("newsletter.rank:Ranker.__init__",), RANK),
    (("newsletter.rank:Ranker.sections",), RANK),
    (("newsletter.edition:EditionBuilder.links",), LINKS),
    (
        (
            "newsletter.subscribe.votes:VoteLinks.tail",
            "newsletter.feedback:VoteLinks.tail",
            "newsletter.subscribe.votes:FeedbackLinks.tail",
            "newsletter.feedback:FeedbackLinks.tail",
        ),
        LINKS,
    ),
    (
        (
            "newsletter.subscribe.votes:DigestVoteLinks.token",
            "newsletter.feedback:DigestVoteLinks.token",
            "newsletter.subscribe.votes:ReaderLinks.token",
            "newsletter.feedback:ReaderLinks.token",
        ),
        LINKS,
    ),
    (
        (
            "newsletter.digest.render:Renderer.__init__",
            "newsletter.render:Renderer.__init__",
        ),
        RENDER,
    ),
    (
        (
            "newsletter.digest.render:Renderer.render",
            "newsletter.render:Renderer.render",
        ),
        RENDER,
    ),
    (("newsletter.edition:EditionBuilder.envelope",), MIME),
    (("newsletter.edition.build:SharedMessages.envelope",), SHARED),
    (("newsletter.deliver.smtp:SmtpMailer.send", "newsletter.deliver:SmtpMailer.send"), SMTP),
    (("newsletter.deliver.smtp:SmtpMailer.connect", "newsletter.deliver:SmtpMailer.connect"), SMTP),
    (("newsletter.deliver.smtp:SmtpMailer.close", "newsletter.deliver:SmtpMailer.close"), SMTP),
    (
        ("newsletter.deliver.pool:RateLimiter.acquire", "newsletter.sending:RateLimiter.acquire"),
        POOL_GLUE,
    ),
    (
        ("newsletter.deliver.ledger:LedgerWriter.call", "newsletter.sending:LedgerWriter.call"),
        LEDGER,
    ),
    (
        ("newsletter.deliver.ledger:LedgerWriter.post", "newsletter.sending:LedgerWriter.post"),
        LEDGER,
    ),
    (
        ("newsletter.deliver.ledger:LedgerWriter.wait", "newsletter.sending:LedgerWriter.wait"),
        LEDGER,
    ),
)
"""Functions whose CPU, less that of the stages they call, counts for a group; each names where
the function lives now and where it lived before the send path became the ``edition`` and
``deliver`` packages (the first that exists is used). Every public method of the ``Store``
counts too: those of its ledger module for :data:`LEDGER`, the others for :data:`STORE`. A
thread's CPU outside every stage counts for its own group (:data:`THREADS`). A stage found
nowhere is listed as missing in the report; its CPU then counts for the stage or thread around
it."""


def resolve(target: str) -> tuple[Any, str, Any] | None:
    """``module:Owner.name`` -> (owner, name, function), None when it does not exist."""
    import importlib

    module_name, _, path = target.partition(":")
    try:
        owner: Any = importlib.import_module(module_name)
        *owners, name = path.split(".")
        for part in owners:
            owner = getattr(owner, part)
        return owner, name, getattr(owner, name)
    except (ImportError, AttributeError):
        return None


THREADS = (("MainThread", CLI), ("smtp-sender", POOL_GLUE), ("ledger-writer", LEDGER))


class StageClock:
    """Exact CPU per stage, per thread: each stage function is wrapped to read the thread's CPU
    clock (``time.thread_time_ns``) when it starts and ends; a stage called inside another is
    taken out of the outer one. Waiting (a lock, a socket, the GIL) costs no CPU, so it adds
    nothing; C work with the GIL released (SQLite, hashing, socket writes) is on the clock.
    Costs about a microsecond per wrapped call."""

    def __init__(self) -> None:
        self.cpu: Counter[str] = Counter()
        """Nanoseconds of CPU per group."""
        self.missing: list[str] = []
        self._lock = threading.Lock()
        self._local = threading.local()

    # ------------------------------------------------------------------ accounting

    def _stack(self) -> list[list[Any]]:
        stack: list[list[Any]] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _add(self, group: str, ns: int) -> None:
        with self._lock:
            self.cpu[group] += ns
        self._local.counted = getattr(self._local, "counted", 0) + ns

    def enter(self, group: str) -> None:
        now = time.thread_time_ns()
        stack = self._stack()
        if stack:
            self._add(stack[-1][0], now - stack[-1][1])
        stack.append([group, now])

    def leave(self) -> None:
        now = time.thread_time_ns()
        stack = self._stack()
        group, began = stack.pop()
        self._add(group, now - began)
        if stack:
            stack[-1][1] = now

    def thread_done(self, group: str, used: int) -> None:
        """The thread used ``used`` ns in all: what no stage counted goes to ``group``."""
        self._add(group, max(0, used - getattr(self._local, "counted", 0)))

    # ------------------------------------------------------------------ wrapping

    def wrap(self, fn: Any, group: str) -> Any:
        import functools
        import inspect

        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen(*args: Any, **kwargs: Any) -> Any:
                self.enter(group)
                try:
                    it = fn(*args, **kwargs)
                finally:
                    self.leave()
                while True:
                    self.enter(group)
                    try:
                        item = next(it)
                    except StopIteration:
                        return
                    finally:
                        self.leave()
                    yield item

            return gen

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            self.enter(group)
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()

        return call

    def install(self) -> None:
        """Wrap :data:`STAGES`, the ``Store``'s public methods, and every thread's run."""
        import inspect

        for targets, group in STAGES:
            found = next((got for t in targets if (got := resolve(t)) is not None), None)
            if found is None:
                self.missing.append(targets[0])
                continue
            owner, name, fn = found
            wrapped = self.wrap(fn, group)
            setattr(owner, name, wrapped)
            if inspect.ismodule(owner):  # a module function: also where it was imported by name
                for other in list(sys.modules.values()):
                    if getattr(other, "__name__", "").startswith("newsletter") and (
                        getattr(other, name, None) is fn
                    ):
                        setattr(other, name, wrapped)
        from newsletter.store import Store

        for name, fn in inspect.getmembers(Store, inspect.isfunction):
            if name.startswith("_"):
                continue
            home = getattr(inspect.getmodule(fn), "__name__", "")
            setattr(Store, name, self.wrap(fn, LEDGER if ".ledger" in home else STORE))
        run = threading.Thread.run
        clock = self

        def counted_run(thread: threading.Thread) -> None:
            try:
                run(thread)
            finally:
                group = next((g for prefix, g in THREADS if thread.name.startswith(prefix)), OTHER)
                clock.thread_done(group, time.thread_time_ns())

        threading.Thread.run = counted_run  # type: ignore[method-assign,assignment]


def profile_main(out: str, args: list[str]) -> None:
    """``python -m bench.bench_send profile OUT -- ARGS``: ``newsletter ARGS`` in this process
    with a :class:`StageClock`; writes the CPU per group (seconds) to OUT as JSON."""
    clock = StageClock()
    began = time.thread_time_ns()
    import newsletter.cli
    import newsletter.edition  # the send path, loaded as the command would load it

    imported = time.thread_time_ns()
    clock.install()
    clock.cpu[IMPORTS] += imported - began
    code = 0
    sys.argv = ["newsletter", *args]
    main_began = time.thread_time_ns()
    try:
        newsletter.cli.main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        clock.thread_done(CLI, time.thread_time_ns() - main_began)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    Path(out).write_text(
        json.dumps(
            {
                "cpu": {k: v / 1e9 for k, v in clock.cpu.items()},
                "process_cpu": usage.ru_utime + usage.ru_stime,
                "missing": clock.missing,
            }
        )
    )
    raise SystemExit(code)


def profile(
    backend: str, n: int, tmp: Path, topics: list[dict[str, Any]], papers: int = PAPERS
) -> dict[str, Any]:
    """A second send on a fresh database, in-process with a :class:`StageClock`."""
    db = Database.create(backend, tmp)
    try:
        seed(db, n, topics, papers)
        sink = Sink(tmp, f"{backend}-profile")
        config = write_config(tmp / f"{backend}-profile.yaml", db, sink.port, topics)
        seed_vectors(config, papers)
        out = tmp / f"{backend}.profile.json"
        try:
            run_cli(config, tmp / f"{backend}-profile.log", profile=out)
        finally:
            sink.stop()
    finally:
        db.drop()
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def pg_reason() -> str | None:
    """Why PostgreSQL cannot be used (None: it can)."""
    try:
        engine = create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(text("select 1"))
        engine.dispose()
        return None
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"


# ---------------------------------------------------------------------------- main


def median_pair(pairs: list[tuple[Send, Send]]) -> tuple[Send, Send]:
    """Of interleaved (baseline, this code) sends of one backend, the pair whose CPU share is the
    median (the lower middle one of an even count): on a shared virtual machine one send's CPU
    moves by a fifth between runs, and a single pair can land on either side of a target."""
    ranked = sorted(pairs, key=lambda pair: pair[1].cpu_ms / pair[0].cpu_ms)
    return ranked[(len(ranked) - 1) // 2]


def main(
    quick: bool, subscribers: int = 10_000, baseline: Path | None = None, repeat: int = 1
) -> str:
    n = 300 if quick else subscribers
    topics = topic_list()
    backends = ["sqlite"]
    notes = []
    reason = pg_reason()
    if reason is None:
        backends.append("postgresql")
    else:
        notes.append(f"PostgreSQL skipped: {reason}")
    sends: list[Send] = []
    base: list[Send] = []
    profiles: dict[str, Counter[str]] = {}  # CPU seconds per group
    with TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for backend in backends:
            pairs: list[tuple[Send, Send]] = []
            for _ in range(max(1, repeat) if baseline is not None else 1):
                if baseline is not None:
                    print(f"  {backend}: baseline {baseline}", file=sys.stderr, flush=True)
                    old = measure_baseline(baseline, backend, n, tmp)
                    print(f"  {json.dumps(old.as_dict(), default=str)}", file=sys.stderr)
                print(f"  {backend}: send --now, {n:,} subscribers", file=sys.stderr, flush=True)
                new = measure(backend, n, tmp, topics)
                print(f"  {json.dumps(new.as_dict(), default=str)}", file=sys.stderr, flush=True)
                if baseline is None:
                    sends.append(new)
                else:
                    pairs.append((old, new))
            if pairs:
                old, new = median_pair(pairs)
                base.append(old)
                sends.append(new)
                if len(pairs) > 1:
                    shares = ", ".join(f"{b.cpu_ms / a.cpu_ms:.0%}" for a, b in pairs)
                    ratios = ", ".join(f"{b.ratio:.2f}" for _, b in pairs)
                    notes.append(
                        f"{_name(backend)}: {len(pairs)} interleaved pairs, in order: CPU share "
                        f"{shares}; send / raw {ratios}; the table shows the median pair."
                    )
        for backend in backends:
            print(f"  {backend}: profiled send", file=sys.stderr, flush=True)
            got = profile(backend, n, tmp, topics)
            profiles[backend] = Counter(got["cpu"])
            print(f"  {json.dumps(got)}", file=sys.stderr, flush=True)
    return report(sends, profiles, notes, base, baseline_name(baseline) if baseline else "")


def _name(backend: str) -> str:
    return {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[backend]


def report(
    sends: list[Send],
    profiles: dict[str, Counter[str]],
    notes: list[str],
    base: list[Send] | None = None,
    base_name: str = "",
) -> str:
    """The section; with ``base`` (the baseline's sends, one per backend, ``--baseline``), its
    CPU per digest and this code's share of it are columns of the table, with their verdicts."""
    n = sends[0].subscribers
    base = base or []
    against = (
        f" Against `{base_name}`: the same send by that commit's code from a worktree beside this "
        "one (its venv, its seeding), right before each of this code's sends."
        if base
        else ""
    )
    extra = f" {base_name} CPU per digest | share |" if base else ""
    lines = [
        "## Send: `newsletter send --now` as an operator runs it",
        "",
        f"{n:,} subscribers, 2,000 papers, 40 topics (1-3 per subscriber), a fresh database for "
        f"each send; the real command line in a subprocess, start-up included, SMTP pool of {POOL} "
        "into an aiosmtpd sink in its own process. Raw: `smtplib` `sendmail` of a typical digest "
        "of that send (the median-sized message the sink received) as many times, over "
        f"{POOL} connections, to a fresh sink, right after the send. CPU and peak RSS: the "
        "command's own (kernel accounting at exit); database server: the CPU of the PostgreSQL "
        "backends serving the send's database (`/proc`)." + against,
        "",
        "| backend | wall | digests/s | raw digests/s | send / raw | CPU per digest | "
        "DB server CPU per digest | peak RSS | `editions` seq scans (rows read) | load avg |"
        + extra,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|" + ("---:|---:|" if base else ""),
    ]
    old = {b.backend: b for b in base}
    for s in sends:
        server = f"{s.server_ms:.2f} ms" if s.server_ms is not None else "(in process)"
        scans = (
            f"{s.editions['seq_scan']:,} ({s.editions['seq_tup_read']:,})" if s.editions else "n/a"
        )
        lines.append(
            f"| {_name(s.backend)} | {s.wall:.1f} s | {s.rate:,.0f} | {s.raw_rate:,.0f} | "
            f"**{s.ratio:.2f}** | {s.cpu_ms:.2f} ms | {server} | {s.peak_rss_mb:.0f} MB | "
            f"{scans} | {s.load[0]:.1f} → {s.load[1]:.1f} |"
            + (
                f" {old[s.backend].cpu_ms:.2f} ms | **{s.cpu_ms / old[s.backend].cpu_ms:.0%}** |"
                if s.backend in old
                else ""
            )
        )
    lines.append("")
    for s in sends:
        name = _name(s.backend)
        if s.backend in old:  # the issue 30 targets
            share = s.cpu_ms / old[s.backend].cpu_ms
            lines.append(
                summary(
                    f"`send --now` vs raw smtplib, {name} (≥ 0.80)",
                    f"{s.ratio:.2f}",
                    s.ratio >= 0.8,
                )
            )
            lines.append(
                summary(
                    f"CPU per digest vs {base_name}, {name} (≤ 55 %)", f"{share:.0%}", share <= 0.55
                )
            )
            continue
        lines.append(summary(f"`send --now` vs raw smtplib, {name}", f"{s.ratio:.2f}", None))
        lines.append(summary(f"CPU per digest, {name}", f"{s.cpu_ms:.2f} ms", None))
    for s in sends:
        lines.append(
            f"- {_name(s.backend)}: {s.delivered:,} messages to {s.recipients:,} distinct "
            f"recipients; typical digest {s.digest_bytes / 1024:.0f} KB; the sink used "
            f"{1000 * s.sink_cpu / max(1, s.delivered):.2f} ms of CPU per message."
        )
        if s.server:
            lines.append(
                f"  Server: {s.server['backends']:.1f} s of CPU in {s.server['backend_count']:.0f} "
                f"backends; all postgres processes {s.server['all_postgres']:.1f} s (WAL writer, "
                "checkpointer and any other session on the server included). `editions` after the "
                f"send: {s.editions['idx_scan']:,} index scans, {s.editions['rows']:,} rows, "
                f"statistics {'present' if s.editions['analyzed'] else 'never gathered'}, "
                f"autovacuum {s.editions['autovacuum']}."
            )
    lines += [f"- {note}" for note in notes]
    if profiles:
        lines += breakdown(sends, profiles)
    return "\n".join(lines) + "\n"


def breakdown(sends: list[Send], profiles: dict[str, Counter[str]]) -> list[str]:
    by = {s.backend: s for s in sends}
    backends = [b for b in by if b in profiles]
    head = " | ".join(f"{_name(b)} ms/digest | share" for b in backends)
    lines = [
        "",
        "Where each digest's CPU goes: a second send of each backend, the same command run "
        "in-process with each stage's function wrapped to read its thread's CPU clock on the way "
        "in and out (a stage inside another is taken out of the outer one; waiting costs no "
        "CPU; what no stage counts goes to its thread's group; `bench/bench_send.py`, "
        "`StageClock`). ms/digest = the group's share × the unprofiled send's CPU per digest "
        "above. The PostgreSQL server's CPU is measured (its backends), not estimated.",
        "",
        f"| where | {head} |",
        "|---|" + "---:|---:|" * len(backends),
    ]
    totals = {b: sum(profiles[b].values()) or 1 for b in backends}
    for group in GROUPS:
        if not any(profiles[b][group] for b in backends):
            continue
        cells = []
        for b in backends:
            share = profiles[b][group] / totals[b]
            cells.append(f"{share * by[b].cpu_ms:.3f} | {share:.0%}")
        lines.append(f"| {group} | {' | '.join(cells)} |")
    cells = [f"**{by[b].cpu_ms:.3f}** | 100%" for b in backends]
    lines.append(f"| **the command, all threads** | {' | '.join(cells)} |")
    cells = []
    for b in backends:
        ms = by[b].server_ms
        cells.append(f"{ms:.3f} | " if ms is not None else "(in the command) | ")
    lines.append(f"| database server (PostgreSQL backends) | {' | '.join(cells)} |")
    cells = [f"**{by[b].cpu_ms + (by[b].server_ms or 0):.3f}** | " for b in backends]
    lines.append(f"| **end to end (command + server)** | {' | '.join(cells)} |")
    lines.append("")
    lines.append(
        "CPU the stage clock counted in the profiled sends (the clock costs a little): "
        + ", ".join(f"{_name(b)} {totals[b]:.1f} s" for b in backends)
        + "."
    )
    return lines


if __name__ == "__main__":
    if sys.argv[1:2] == ["profile"]:
        profile_main(sys.argv[2], sys.argv[sys.argv.index("--") + 1 :])
    elif sys.argv[1:2] == ["embed"]:
        embed_main(sys.argv[2], sys.argv[3])
    else:
        print(main(quick="--quick" in sys.argv))
