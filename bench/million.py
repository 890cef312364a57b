"""One edition for a million subscribers, import included: the run issue 18 asks for once.

``python -m bench.million [--subscribers 1000000] [--backend sqlite|postgresql]``: manual only
(not named ``bench_*``, so neither ``make bench`` nor ``make test`` runs it; about half an hour
on 2 cores). On a fresh database (a SQLite file, or a new database on the PostgreSQL server of
``NEWSLETTER_BENCH_PG``, dropped afterwards), through the real command lines, as an operator
would:

1. the day's papers (2,000, as :mod:`bench.bench_scale`) stored, and their vectors (with the
   topics' and keywords') embedded and stored as ``newsletter fetch`` does before a send
   (:func:`bench.bench_send.embed_main`, in a process of its own);
2. ``newsletter subscribers import FILE`` of a CSV with the subscribers (1-3 of 40 topics);
3. ``newsletter send --now`` into :mod:`bench.smtp_counter` in its own process: it reads the
   vectors and never loads the model.

Each command is measured from the kernel's accounting when it exits (``os.wait4``: wall, user +
system CPU, peak RSS); on PostgreSQL the server's backends' CPU is read from ``/proc`` as
:mod:`bench.bench_send` does. Prints a Markdown section; nothing is written to docs by itself.
"""

from __future__ import annotations

import argparse
import csv
import random
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import yaml

from bench.bench_scale import TOPICS, Sink, _usage, config_data, newsletter, populate, topics
from bench.bench_send import Database, ServerCpu
from newsletter.store import Store


def write_csv(path: Path, n: int, rng: random.Random) -> None:
    """``n`` active subscribers, each following 1-3 topics weighted like bench_scale's."""
    weights = [1.0 / (r + 1) ** 0.7 for r in range(TOPICS)]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["email", "name", "status", "topics"])
        for i in range(n):
            picked = sorted(set(rng.choices(range(TOPICS), weights=weights, k=rng.randint(1, 3))))
            w.writerow(
                [
                    f"reader{i:07d}@example.org",
                    f"Reader {i}",
                    "active",
                    ";".join(f"t{k:02d}" for k in picked),
                ]
            )


def timed(config: Path, log: Path, *args: str) -> tuple[float, float, float]:
    """Run ``newsletter ARGS``; (wall s, CPU s, peak RSS MB), or an error with its log's end."""
    started = time.perf_counter()
    with log.open("wb") as out:
        proc = newsletter(config, *args, stdout=out, stderr=subprocess.STDOUT)
        usage = _usage(args[0], proc)
    wall = time.perf_counter() - started
    if proc.returncode not in (0,):
        raise RuntimeError(f"newsletter {' '.join(args)} failed: {log.read_text()[-2000:]}")
    return wall, usage.cpu, usage.peak_rss_mb


def main(subscribers: int, backend: str = "sqlite") -> str:
    """Import and send one edition for ``subscribers`` on ``backend``; the Markdown section."""
    rng = random.Random(1_000_000)
    with TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        db = Database.create(backend, tmp)
        try:
            store = Store(db.url)
            store.upgrade()
            populate(store, 0, rng)  # the papers only: the subscribers come through the import
            store.close()
            sink = Sink()
            config = tmp / "million.yaml"
            config.write_text(yaml.safe_dump(config_data(db.url, sink.port, topics(rng))))
            print(f"  {backend}: embed the day's papers, as fetch does", file=sys.stderr)
            subprocess.run(
                [sys.executable, "-m", "bench.bench_send", "embed", str(config), str(tmp / "v")],
                check=True,
            )
            rows = tmp / "subscribers.csv"
            write_csv(rows, subscribers, rng)
            print(f"  {backend}: import {subscribers:,}", file=sys.stderr, flush=True)
            server = ServerCpu(db.name) if backend == "postgresql" else None
            imp = timed(config, tmp / "import.log", "subscribers", "import", str(rows))
            imp_server = server.stop()["backends"] if server is not None else None
            print(f"  {backend}: send {subscribers:,}", file=sys.stderr, flush=True)
            server = ServerCpu(db.name) if backend == "postgresql" else None
            snd = timed(config, tmp / "send.log", "send", "--now")
            snd_server = server.stop()["backends"] if server is not None else None
            delivered = sink.stop()
        finally:
            db.drop()
    total = imp[0] + snd[0]
    name = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[backend]

    def cpu(own: float, server: float | None) -> str:
        return f"{own:.0f} s" + (f" + {server:.0f} s server" if server is not None else "")

    return "\n".join(
        [
            f"### {subscribers:,} subscribers on {name}, import included "
            f"(`python -m bench.million --backend {backend}`)",
            "",
            "| step | wall | rate | CPU | peak RSS |",
            "|---|---:|---:|---:|---:|",
            f"| `subscribers import` of {subscribers:,} CSV rows | {imp[0]:.0f} s | "
            f"{subscribers / imp[0]:,.0f} rows/s | {cpu(imp[1], imp_server)} | {imp[2]:.0f} MB |",
            f"| `send --now` ({delivered:,} delivered to the sink) | {snd[0]:.0f} s | "
            f"{delivered / snd[0]:,.0f} digests/s | {cpu(snd[1], snd_server)} | {snd[2]:.0f} MB |",
            f"| **both** | **{total / 60:.1f} min** | | | **{max(imp[2], snd[2]):.0f} MB** |",
            "",
            "Aim (issue 18): at most 30 minutes and 250 MB on one 2-core machine.",
        ]
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subscribers", type=int, default=1_000_000)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    args = parser.parse_args()
    print(main(args.subscribers, args.backend))
