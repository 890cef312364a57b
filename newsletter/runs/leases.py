"""Run leases: a recorded run is alive while its heartbeat is, and a killed one is settled.

A run holds a lease while it works: its process (``host:pid:incarnation``, as the ledger names
owners) and a heartbeat renewed every :data:`HEARTBEAT` seconds. A run still recorded as
``running`` whose process is gone, or whose heartbeat is older than :data:`STALE_AFTER`, was
killed: ``status`` shows it as ``interrupted``, with what the ledger says it did, and the next
run records it so (:func:`settle_interrupted`).

:class:`RunLease` is shared by fetch runs (:func:`newsletter.runs.fetch.fetch_step`) and send
runs (:class:`newsletter.edition.send_run.SendRun`, the one send-run wrapper).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from newsletter.clock import utcnow
from newsletter.deliver.ledger import owner_gone, run_owner
from newsletter.models import RunRecord
from newsletter.store.protocol import Runs

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

HEARTBEAT = 10.0
"""Seconds between a running run's heartbeats."""
STALE_AFTER = 90.0
"""A run whose heartbeat is older than this is taken as interrupted (its host may be another)."""


def _lease(run: RunRecord) -> tuple[str | None, datetime | None]:
    lease = run.counts.get("lease") if isinstance(run.counts, dict) else None
    if not isinstance(lease, dict):
        return None, None
    owner, beat = lease.get("owner"), lease.get("heartbeat")
    try:
        heartbeat = datetime.fromisoformat(beat) if isinstance(beat, str) else None
    except ValueError:
        heartbeat = None
    return (owner if isinstance(owner, str) else None), heartbeat


def is_interrupted(run: RunRecord, now: datetime) -> bool:
    """True when ``run`` is recorded as ``running`` but its process is gone or silent."""
    if run.status != "running":
        return False
    owner, heartbeat = _lease(run)
    if owner is not None and owner_gone(owner):
        return True
    last = heartbeat or run.started
    return now - last > timedelta(seconds=STALE_AFTER)


def interrupted_record(store: Runs, run: RunRecord, now: datetime) -> RunRecord:
    """``run`` as an interrupted run: when it was last alive, the ledger's count of what its
    process did since it started, and the errors it met."""
    owner, heartbeat = _lease(run)
    counts: dict[str, Any] = {}
    errors: list[str] = []
    if owner is not None:
        # the ledger names each send by its process and a run suffix: host:pid:incarnation.run
        by_status, errors = store.ledger_of(owner.split(".", 1)[0] + ".", run.started)
        counts = {k: by_status[k] for k in sorted(by_status)}
    where = f" ({owner.rsplit('.', 1)[0]})" if owner else ""
    error = f"interrupted: its process{where} stopped without recording the run"
    if errors:
        error += "; errors met: " + "; ".join(errors)
    finished = heartbeat or run.started
    return replace(
        run,
        status="interrupted",
        finished=finished,
        counts=counts,
        error=error,
    )


def runs_as_seen(store: Runs, runs: Sequence[RunRecord], now: datetime) -> list[RunRecord]:
    """``runs`` with every interrupted one shown as such (for ``status``; writes nothing)."""
    return [interrupted_record(store, r, now) if is_interrupted(r, now) else r for r in runs]


def count_interrupted(store: Runs, now: datetime) -> int:
    """Runs recorded as ``running`` whose process is gone or silent (for /metrics)."""
    return sum(1 for run in store.running_runs() if is_interrupted(run, now))


def settle_interrupted(store: Runs, now: datetime) -> int:
    """Record every interrupted run as ``interrupted``; returns how many there were."""
    settled = 0
    for run in store.running_runs():
        if is_interrupted(run, now):
            seen = interrupted_record(store, run, now)
            assert seen.finished is not None
            if store.settle_run(run.id, "interrupted", seen.finished, seen.counts, seen.error):
                settled += 1
                log.warning("run %d (%s) was %s", run.id, run.kind, seen.error)
    return settled


class RunLease:
    """A ``running`` row in ``runs`` with a heartbeat, renewed on a thread until closed."""

    def __init__(
        self, store: Runs, kind: str, now: datetime, *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.store = store
        self.clock = clock
        self.owner = run_owner()
        self.id = store.start_run(kind, now, owner=self.owner)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"run-{self.id}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            try:
                self.store.beat_run(self.id, self.owner, self.clock())
            except Exception as e:  # the database is away: the run itself will say so
                log.warning("could not renew the lease of run %d: %s", self.id, e)

    def close(self) -> None:
        """Stop renewing the heartbeat (the row itself is settled by the caller)."""
        self._stop.set()
        self._thread.join()
