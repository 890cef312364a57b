"""Importing subscribers: ``newsletter subscribers import`` against a raw bulk insert.

``python -m bench import --subscribers 50000`` writes a CSV of ``rows`` subscribers (a few hundred
domains, 1-3 of 8 topics, some with a time zone and an hour, a share of unsubscribed rows,
duplicates and invalid addresses), then on SQLite and on PostgreSQL (a fresh schema each):

- the product: the real command line, ``newsletter subscribers import FILE``, as an operator
  runs it, start-up included;
- the baseline: the same valid rows inserted with SQLAlchemy's ``executemany`` in one
  transaction, with no validation and no consent checks: the floor a loader can reach.

Target (issue 18): 10,000 rows/s or more on both backends.
"""

from __future__ import annotations

import csv
import os
import random
import resource
import secrets
import subprocess
import sys
import time
import uuid
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import yaml
from sqlalchemy import create_engine, text

from bench import summary
from newsletter.clock import utcnow
from newsletter.store import Store
from newsletter.store import tables as t

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("NEWSLETTER_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TOPICS = [f"t{i}" for i in range(8)]
ZONES = ["Europe/Paris", "America/New_York", "Asia/Tokyo", ""]


def write_csv(path: Path, rows: int, rng: random.Random) -> int:
    """A realistic subscriber file; returns how many rows a correct import adds."""
    domains = [f"mail{i}.example.org" for i in range(300)] + ["gmail.com", "uni-bonn.de"]
    valid = 0
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["email", "name", "status", "topics", "timezone", "send_hour", "consent"])
        for i in range(rows):
            roll = rng.random()
            email = f"Reader.{i}+news@{rng.choice(domains)}"
            if roll < 0.01:
                email = f"broken{i}@@example.org"  # refused: invalid
            elif roll < 0.02:
                email = f"reader.{max(i - 1, 0)}+news@mail0.example.org"  # may repeat a row
            else:
                valid += 1
            status = "unsubscribed" if rng.random() < 0.05 else ""
            topics = " ".join(rng.sample(TOPICS, rng.randint(1, 3)))
            zone = rng.choice(ZONES)
            hour = str(rng.randint(5, 9)) if zone else ""
            w.writerow([email, f"Reader {i}", status, topics, zone, hour, "signup form 2025"])
    return valid


def config(db_url: str) -> dict[str, Any]:
    return {
        "database": {"url": db_url},
        "sender": {
            "from": "Trending Papers <digest@papers.example.org>",
            "postal_address": "1 Bench Street, Benchville",
            "base_url": "https://papers.example.org",
        },
        "smtp": {"host": "127.0.0.1", "port": 2525},
        "topics": [{"name": n, "title": n.upper(), "keywords": [f"word{n}"]} for n in TOPICS],
        "web": {"secret_key": secrets.token_urlsafe(48)},
    }


def product(cfg: Path, csv_file: Path) -> tuple[float, float]:
    """Wall-clock seconds of the command, and the CPU seconds its process used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "newsletter",
            "--config",
            str(cfg),
            "subscribers",
            "import",
            *[str(csv_file)],
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if "added" not in proc.stdout:
        raise RuntimeError(f"import failed: {proc.stdout[-500:]} {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def baseline(db_url: str, csv_file: Path) -> float:
    store = Store(db_url)
    now = utcnow()
    with csv_file.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    started = time.perf_counter()
    seen: set[str] = set()
    subs, topics = [], []
    for r in rows:
        if "@@" in r["email"] or r["email"] in seen:
            continue
        seen.add(r["email"])
        subs.append(
            {
                "email": r["email"],
                "name": r["name"],
                "status": r["status"] or "active",
                "timezone": r["timezone"] or "UTC",
                "created": now,
                "status_changed": now,
                "confirmed": now,
                "frequency": "daily",
            }
        )
    with store.engine.begin() as conn:
        ids = (
            conn.execute(
                t.subscribers.insert().returning(t.subscribers.c.id, sort_by_parameter_order=True),
                subs,
            )
            .scalars()
            .all()
        )
        by_email = {s["email"]: sid for s, sid in zip(subs, ids, strict=True)}
        for r in rows:
            sid = by_email.pop(r["email"], None)
            if sid is not None:
                topics += [{"subscriber_id": sid, "topic": tp} for tp in r["topics"].split()]
        conn.execute(t.subscriptions.insert(), topics)
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed


def count(db_url: str) -> int:
    store = Store(db_url)
    with store.engine.connect() as conn:
        n = int(conn.execute(text("SELECT count(*) FROM subscribers")).scalar_one())
    store.close()
    return n


def _fresh(db_url: str) -> None:
    store = Store(db_url)
    store.upgrade()
    store.close()


def run_backend(name: str, url_for: Any, tmp: Path, csv_file: Path) -> dict[str, Any]:
    url_p, cleanup_p = url_for("p")
    url_b, cleanup_b = url_for("b")
    try:
        _fresh(url_p)
        _fresh(url_b)
        cfg = tmp / f"{name}.yaml"
        cfg.write_text(yaml.safe_dump(config(url_p)))
        took, cpu = product(cfg, csv_file)
        added = count(url_p)
        base = baseline(url_b, csv_file)
        return {"backend": name, "product": took, "cpu": cpu, "baseline": base, "added": added}
    finally:
        cleanup_p()
        cleanup_b()


def main(quick: bool, subscribers: int = 50_000) -> str:
    rows = 5_000 if quick else subscribers
    rng = random.Random(18)
    results = []
    with TemporaryDirectory() as d:
        tmp = Path(d)
        csv_file = tmp / "subscribers.csv"
        write_csv(csv_file, rows, rng)

        def sqlite_url(tag: str) -> tuple[str, Any]:
            return f"sqlite:///{tmp}/{tag}.db", lambda: None

        results.append(run_backend("SQLite", sqlite_url, tmp, csv_file))
        engine = create_engine(PG_URL)
        try:
            with engine.connect():
                pass
        except Exception as e:  # report and go on with SQLite's result
            print(f"PostgreSQL not reachable ({type(e).__name__}); skipped", file=sys.stderr)
        else:

            def pg_url(tag: str) -> tuple[str, Any]:
                schema = f"bench_import_{tag}_{uuid.uuid4().hex[:8]}"
                with engine.begin() as conn:
                    conn.execute(text(f'CREATE SCHEMA "{schema}"'))

                def drop() -> None:
                    with engine.begin() as conn:
                        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))

                return f"{PG_URL}?options=-csearch_path%3D{schema}", drop

            results.append(run_backend("PostgreSQL", pg_url, tmp, csv_file))
    lines = [
        f"## Import: `newsletter subscribers import` of {rows:,} CSV rows",
        "",
        f"Measured {utcnow():%Y-%m-%d}. The product is the real command (start-up, config, "
        "validation of every address, topic and time zone, the consent checks, one transaction "
        "per 2,000 rows); the baseline inserts the same valid rows with one `executemany`, "
        "nothing checked. Target: 10,000 rows/s or more on both backends.",
        "",
        "| backend | import (wall) | rows/s | import's CPU | raw insert | rows/s | import / raw |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['backend']} | {r['product']:.2f} s | {rows / r['product']:,.0f} | "
            f"{r['cpu']:.2f} s | {r['baseline']:.2f} s | {rows / r['baseline']:,.0f} | "
            f"{r['product'] / r['baseline']:.2f}x |"
        )
    lines += ["", f"Rows added by the import: {', '.join(str(r['added']) for r in results)}."]
    slowest = min(rows / r["product"] for r in results)
    lines.append(
        summary("import rows/s, slowest backend (≥ 10,000)", f"{slowest:,.0f}", slowest >= 10_000)
    )
    return "\n".join(lines) + "\n"
