"""The recorded fetch: :func:`fetch_step` as the scheduler, the CLI and the demo run it.

It wraps :func:`newsletter.sources.ingest.run_fetch` with what operations needs around it: a row in
``runs`` with its lease (:class:`~newsletter.runs.leases.RunLease`), the counts, one structured
log line, an operator alert when every source failed or nothing came on a day arXiv announces,
and the vectors a send will need (:func:`embed_new`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from newsletter.logs import step
from newsletter.rank.example_papers import profile_examples
from newsletter.runs.alerts import alert
from newsletter.runs.due_dates import ARXIV_TZ, announces_on
from newsletter.runs.leases import RunLease, settle_interrupted
from newsletter.sources.ingest import FetchReport, run_fetch

if TYPE_CHECKING:
    from newsletter.services import Services

log = logging.getLogger(__name__)

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
