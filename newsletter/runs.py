"""Run steps as the scheduler, the CLI, the admin endpoint and the workers' enqueuer perform them.

Each wraps one pipeline step with what operations needs around it: a row in ``runs`` (counts,
errors, duration), one structured log line with the counts, and an operator alert when the
step failed or found nothing on a day it should have.

A run holds a lease while it works: its process (``host:pid:incarnation``, as the ledger names
owners) and a heartbeat renewed every :data:`HEARTBEAT` seconds. A run still recorded as
``running`` whose process is gone, or whose heartbeat is older than :data:`STALE_AFTER`, was
killed: ``status`` shows it as ``interrupted``, with what the ledger says it did, and the next
run records it so (:func:`settle_interrupted`).

:class:`RunLease` is shared by fetch runs (:func:`fetch_step`) and send runs
(:class:`newsletter.edition.run.SendRun`, the one send-run wrapper).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from newsletter.alerts import alert
from newsletter.clock import utcnow
from newsletter.deliver.ledger import owner_gone, run_owner
from newsletter.examples import profile_examples
from newsletter.ingest import FetchReport, run_fetch
from newsletter.logs import step
from newsletter.models import RunRecord
from newsletter.schedule import ARXIV_TZ, announces_on
from newsletter.store import Store

if TYPE_CHECKING:
    from newsletter.services import Services

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


def interrupted_record(store: Store, run: RunRecord, now: datetime) -> RunRecord:
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


def runs_as_seen(store: Store, runs: Sequence[RunRecord], now: datetime) -> list[RunRecord]:
    """``runs`` with every interrupted one shown as such (for ``status``; writes nothing)."""
    return [interrupted_record(store, r, now) if is_interrupted(r, now) else r for r in runs]


def count_interrupted(store: Store, now: datetime) -> int:
    """Runs recorded as ``running`` whose process is gone or silent (for /metrics)."""
    return sum(1 for run in store.running_runs() if is_interrupted(run, now))


def settle_interrupted(store: Store, now: datetime) -> int:
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
        self, store: Store, kind: str, now: datetime, *, clock: Callable[[], datetime] = utcnow
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


VECTORS_KEPT = timedelta(days=400)
"""Vectors older than this are deleted at fetch: longer than any paper is ranked or a vote
shapes a profile (a year), so only texts nobody needs lose theirs (made again if ever needed)."""


def embed_new(services: Services, now: datetime) -> int:
    """Give everything a send would embed its vector now: the papers it would rank (first
    seen within ``digest.lookback_days``), the topics and their keywords, and the papers
    readers voted on or topics like, so that sends read vectors and never load the model;
    returns how many papers were embedded. A model that fails here is logged and the send tries again: the fetch stands."""
    lookback = timedelta(days=services.config.settings.digest.lookback_days)
    vectors = services.vectors
    if vectors.problem:
        return 0
    store, topics = services.store, services.config.settings.topics
    try:
        store.prune_vectors(now - VECTORS_KEPT)
        papers = store.recent_papers(now - lookback)
        examples = profile_examples(services.config, store, papers, now)
        new = vectors.embed_papers([*papers, *examples])
        vectors.semantic(papers, topics, examples)  # and the topics' and keywords' texts
        return new
    except (RuntimeError, ValueError, OSError, MemoryError) as e:  # the runtime's own failures
        log.warning(
            "ranking: embedding the new papers failed (%s: %s); a send tries again",
            type(e).__name__,
            e,
        )
        return 0


def fetch_step(
    services: Services,
    now: datetime,
    *,
    only: Sequence[str] = (),
    progress: Callable[..., None] | None = None,
) -> FetchReport:
    """Fetch every configured source (or those in ``only``) with the process's ``services``;
    record, log and alert on it."""
    config, store = services.config, services.store
    settle_interrupted(store, now)
    lease = RunLease(store, "fetch", now, clock=services.clock)
    run_id = lease.id
    try:
        report = run_fetch(config, store, now, only=only, progress=progress)
        report = replace(report, embedded=embed_new(services, now), matching=services.vectors.state)
    finally:
        lease.close()
    failed = [s.source for s in report.failed]
    counts = {
        "sources": len(report.sources),
        "entries": report.entries,
        "new": report.new,
        "updated": report.updated,
        "unannounced": report.unannounced,
        "skipped": report.skipped,
        "failed_sources": len(failed),
        "embedded": report.embedded,
    }
    error = "; ".join(f"{s.source}: {'; '.join(s.errors)}" for s in report.failed) or None
    status = "failed" if report.sources and len(failed) == len(report.sources) else "ok"
    store.finish_run(run_id, status, services.clock(), counts, error)
    step("fetch done", **counts)
    # arXiv announces on Sunday to Thursday evenings (US Eastern): a fetch after such an
    # announcement that finds nothing new at all means a source is broken, not a quiet day.
    # When every source failed, the alert below says so: one alert, not two.
    eastern = now.astimezone(ARXIV_TZ)
    announced_today = announces_on(eastern.date()) and eastern.hour >= 20
    if (
        config.settings.alerts.on_empty_weekday_fetch
        and announced_today
        and report.sources
        and report.new == 0
        and status != "failed"
        and not only
    ):
        alert(
            config,
            f"fetch after the arXiv announcement found no new papers ({eastern:%A %Y-%m-%d})",
            (
                f"{len(failed)} of {len(report.sources)} sources failed, and the others stored "
                "nothing new.\n\n"
                if failed
                else "Every source answered, but nothing new was stored.\n\n"
            )
            + "\n".join(
                f"- {s.source}: {s.entries} entries, {s.new} new"
                + (f", errors: {'; '.join(s.errors)}" if s.errors else "")
                for s in report.sources
            ),
            now,
            services=services,
        )
    if status == "failed":
        alert(config, "every source failed to fetch", error or "", now, services=services)
    return report
