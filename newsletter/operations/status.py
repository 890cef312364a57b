"""What ``newsletter status`` reports: the next scheduled fetches, recent runs with their
counts, failing sources, suppressed addresses, deliverability, editions left unknown, the
model cache.

Read from the store and the config only; nothing is written to the database (an interrupted
run is shown as such, not settled). Checking the model may remember its weights' hash in the
model cache (:mod:`newsletter.semantic.cache`), so that the next check reads no weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from newsletter.bounces import report as bounce_report
from newsletter.bounces.report import RATE_DAYS
from newsletter.config import Config
from newsletter.models import Subscriber, SubscriberStatus
from newsletter.runs.leases import runs_as_seen
from newsletter.runs.scheduler import Jobs, build_scheduler, next_runs
from newsletter.semantic.cache import CacheUsage, model_cache, usage
from newsletter.semantic.vectors import VectorSource
from newsletter.store import EditionRecord, RunRecord, Store
from newsletter.store.bounces import EditionRates


def run_duration(run: RunRecord) -> float | None:
    """Seconds a recorded run took, as measured by the run when it recorded it, else from its
    start and end; ``None`` while it runs."""
    measured = run.counts.get("duration")
    if isinstance(measured, int | float) and not isinstance(measured, bool):
        return float(measured)
    if run.finished is None:
        return None
    return round(float((run.finished - run.started).total_seconds()), 3)


@dataclass(frozen=True)
class Status:
    """The operator's overview at one moment (``now``)."""

    now: datetime
    upcoming: list[tuple[str, datetime | None]]
    """Scheduled fetch jobs and when each runs next (``None``: never), soonest first."""
    tick_minutes: int
    """How often the scheduler checks for due editions."""
    subscribers: dict[str, int]
    """Subscribers per status."""
    editions_today: dict[str, int]
    """Editions dated today (UTC) per ledger status."""
    papers: int
    runs: list[RunRecord]
    """The most recent runs, newest first; one whose process is gone shows as interrupted."""
    failing_sources: list[tuple[str, int, str | None]]
    """(source, failures in a row, last error) for each configured source now failing."""
    suppressed: list[Subscriber]
    rates: list[EditionRates]
    """Per edition date in the last ``RATE_DAYS`` days: sent, bounces, complaints."""
    bounce_days: dict[date, dict[str, int]]
    """Bounce and complaint events received per day in the last ``RATE_DAYS`` days, by kind."""
    alerts: list[str]
    """Editions whose complaint or hard-bounce rate is over its threshold, one line each."""
    unknown: list[EditionRecord]
    """Editions whose delivery is unknown (``unknown``, ``held``, ``resend``), oldest first."""
    resend_unknown: bool
    """``delivery.on_unknown: resend``: unknown editions are re-sent once by the next send."""
    matching: str = ""
    """One line: whether ranking fuses meaning with keywords, or why it is lexical."""
    model_cache: CacheUsage | None = None
    """The folder of ONNX files made from a model's weights: where it is and what it holds."""

    def as_json(self) -> dict[str, Any]:
        """The overview as ``newsletter status --json`` prints it."""
        return {
            "next_fetches": [
                {"job": n, "at": w.isoformat() if w else None} for n, w in self.upcoming
            ],
            "editions_checked_every_minutes": self.tick_minutes,
            "subscribers": self.subscribers,
            "editions_today": self.editions_today,
            "papers": self.papers,
            "matching": self.matching,
            "model_cache": None if self.model_cache is None else self.model_cache.as_json(),
            "runs": [
                {
                    "kind": r.kind,
                    "started": r.started.isoformat(),
                    "status": r.status,
                    "counts": r.counts,
                    "error": r.error,
                    "duration": run_duration(r),
                }
                for r in self.runs
            ],
            "failing_sources": [
                {"source": s, "consecutive_failures": n, "last_error": e}
                for s, n, e in self.failing_sources
            ],
            "suppressed": [s.email for s in self.suppressed],
            "deliverability": {
                "editions": bounce_report.rates_json(self.rates),
                "days": bounce_report.days_json(self.bounce_days),
                "alerts": self.alerts,
            },
            "unknown_editions": [
                {
                    "email": e.email,
                    "edition_date": e.edition_date.isoformat(),
                    "status": e.status.value,
                    "message_id": e.message_id,
                    "last_error": e.last_error,
                }
                for e in self.unknown
            ],
        }


def gather_status(config: Config, store: Store, now: datetime, *, runs: int = 10) -> Status:
    """The overview at ``now``, with the ``runs`` most recent runs."""
    scheduler = build_scheduler(config, Jobs(fetch=lambda n: None, send_due=lambda n: None))
    upcoming = [(name, when) for name, when in next_runs(scheduler, now) if "every" not in name]
    upcoming.sort(key=lambda x: x[1] or now)
    snapshot = store.ops_snapshot(now.date(), config.settings.fetched_sources())
    recent = runs_as_seen(store, store.last_runs(runs), now)  # killed ones: interrupted
    suppressed = [s for batch in store.iter_subscribers(SubscriberStatus.SUPPRESSED) for s in batch]
    rates = store.edition_rates(now.date() - timedelta(days=RATE_DAYS))
    bounce_days = store.events_per_day(now - timedelta(days=RATE_DAYS))
    return Status(
        now=now,
        upcoming=upcoming,
        tick_minutes=config.settings.schedule.tick_minutes,
        subscribers=snapshot["subscribers"],
        editions_today=snapshot["editions_today"],
        papers=snapshot["papers"],
        runs=recent,
        failing_sources=snapshot["failing_sources"],
        suppressed=suppressed,
        rates=rates,
        bounce_days=bounce_days,
        alerts=bounce_report.alerts_for(rates, config.settings.bounces),
        unknown=store.unsettled_editions(),
        resend_unknown=config.settings.delivery.on_unknown == "resend",
        matching=VectorSource(config, store, lambda: now).check(),
        model_cache=usage(model_cache(config)),
    )
