"""Helpers for the delivery fault tests: a populated database, the real CLI in a subprocess.

Each test runs ``newsletter send --now`` as operators do (a subprocess, stdout and stderr to
files) against a real aiosmtpd relay on loopback (:mod:`tests.smtpfaults`) and a real database
(SQLite, and PostgreSQL through the ``db_url`` fixture).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from newsletter.clock import utcnow
from newsletter.config import load_config
from newsletter.models import EditionRecord
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import NOW, base_config, write_config
from tests.smtpfaults import FaultServer

SECRET = "a-delivery-fault-test-key-0123456789-abcdef"


@dataclass
class Setup:
    path: Path
    url: str
    emails: list[str]

    def store(self) -> Store:
        return Store(self.url)


def populate(
    tmp_path: Path,
    db_url: str,
    relay: FaultServer,
    n: int,
    *,
    smtp: dict[str, Any] | None = None,
    delivery: dict[str, Any] | None = None,
) -> Setup:
    """A migrated database with ``n`` active subscribers and the fixture papers, and a config."""
    data = base_config(
        db_url,
        relay,  # type: ignore[arg-type]
        schedule={"no_listing": "send"},
        digest={"empty": "send"},
        web={"secret_key": SECRET},
    )
    data["smtp"].update({"pool_size": 2, "timeout": 10, **(smtp or {})})
    if delivery:
        data["delivery"] = delivery
    path = write_config(tmp_path, data)
    config = load_config(path)
    store = Store(config.database_url)
    try:
        store.upgrade()
        emails = [f"reader{i:03d}@example.org" for i in range(n)]
        topics = (["gpu-kernels"], ["rendering"], ["gpu-kernels", "rendering"])
        for i, email in enumerate(emails):
            store.add_subscriber(email, topics=topics[i % 3], now=NOW)
        run_fetch(config, store, utcnow() - timedelta(hours=1))
    finally:
        store.close()
    return Setup(path, config.database_url, emails)


def start_send(setup: Setup, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``newsletter send --now`` (or ``args``) in a subprocess; stdout and stderr go to ``log``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NEWSLETTER_")}
    environ["NO_COLOR"] = "1"
    command = [sys.executable, "-m", "newsletter", "--config", str(setup.path), "send"]
    with log.open("ab") as out:
        return subprocess.Popen(
            [*command, *(args or ("--now",))], stdout=out, stderr=subprocess.STDOUT, env=environ
        )


def ledger(store: Store) -> list[EditionRecord]:
    """Every ledger row of the days around today (the edition date is the reader's local day)."""
    today = utcnow().date()
    rows: list[EditionRecord] = []
    for d in (today - timedelta(days=1), today, today + timedelta(days=1)):
        rows.extend(store.editions_on(d))
    return rows


def edition_dates(store: Store) -> set[date]:
    return {r.edition_date for r in ledger(store)}
