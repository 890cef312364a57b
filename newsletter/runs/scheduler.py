"""The scheduler: the APScheduler 3.x jobs (fetch on cron times, a tick that sends the editions
now due), which subscribers are due at a tick (:func:`due_filter`, from each subscriber's
:class:`~newsletter.runs.due_dates.Preferences`), how many editions were missed, and the next runs.

The tick is idempotent (the ledger claims each subscriber's edition once), so the scheduler,
a manual ``newsletter send --now`` and a restarted process can all run it safely. Fetch times
are cron triggers in their own timezone (APScheduler handles DST for those); edition times are
per subscriber and computed by :mod:`newsletter.runs.due_dates` on every tick.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.models import Subscriber
from newsletter.runs.due_dates import Preferences, due_now, missed, zone_name
from newsletter.store import Store

log = logging.getLogger(__name__)


def preferences(subscriber: Subscriber, config: Config) -> Preferences:
    """A subscriber's schedule: their own hour and frequency when chosen, else the defaults."""
    s = config.settings.schedule
    return Preferences(
        timezone=zone_name(subscriber.timezone, s.timezone),
        hour=s.send_hour if subscriber.send_hour is None else subscriber.send_hour,
        frequency=subscriber.frequency,
        weekday=s.weekly_weekday,
    )


def due_filter(config: Config, now: datetime) -> Callable[[Subscriber], bool]:
    """Which subscribers' editions are due at ``now`` (inside the misfire grace window)."""
    grace = timedelta(minutes=config.settings.schedule.misfire_grace_minutes)

    def is_due(subscriber: Subscriber) -> bool:
        return due_now(preferences(subscriber, config), now, grace=grace) is not None

    return is_due


def count_missed(config: Config, subscribers: list[Subscriber], now: datetime) -> int:
    """How many of ``subscribers`` had an edition due today longer ago than the misfire grace."""
    grace = timedelta(minutes=config.settings.schedule.misfire_grace_minutes)
    return sum(
        1 for s in subscribers if missed(preferences(s, config), now, grace=grace) is not None
    )


@dataclass
class Jobs:
    """What the scheduler calls; each takes ``now``. Injected so tests and `serve` share them."""

    fetch: Callable[[datetime], Any]
    send_due: Callable[[datetime], Any]
    clock: Callable[[], datetime] = utcnow
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run_fetch(self) -> None:
        """Fetch now (after a running send); a failure is only logged."""
        with self.lock:
            try:
                self.fetch(self.clock())
            except Exception:
                log.exception("scheduled fetch failed")

    def run_tick(self) -> None:
        """Send the editions due now, unless a run is still going; a failure is only logged."""
        if not self.lock.acquire(blocking=False):
            log.info("previous run still going; this tick is skipped")
            return
        try:
            self.send_due(self.clock())
        except Exception:
            log.exception("scheduled send failed")
        finally:
            self.lock.release()


def build_scheduler(
    config: Config, jobs: Jobs, *, start_tick_now: bool = True
) -> BackgroundScheduler:
    """A scheduler (not started) with the configured fetch times and the send tick."""
    s = config.settings.schedule
    scheduler = BackgroundScheduler(
        timezone=UTC,
        job_defaults={
            "coalesce": s.coalesce,
            "misfire_grace_time": max(1, s.misfire_grace_minutes * 60),
            "max_instances": 1,
        },
    )
    for i, spec in enumerate(s.fetch):
        scheduler.add_job(
            jobs.run_fetch,
            CronTrigger.from_crontab(spec.cron, timezone=spec.timezone),
            id=f"fetch-{i}",
            name=f"fetch ({spec.cron} {spec.timezone})",
        )
    scheduler.add_job(
        jobs.run_tick,
        IntervalTrigger(minutes=s.tick_minutes, timezone=UTC),
        id="editions",
        name=f"send due editions (every {s.tick_minutes} min)",
        next_run_time=utcnow() if start_tick_now else None,
    )
    return scheduler


def next_runs(scheduler: BackgroundScheduler, now: datetime) -> list[tuple[str, datetime | None]]:
    """(job name, next fire time) for `newsletter status`, including a not-yet-started scheduler."""
    out = []
    for job in scheduler.get_jobs():
        when = getattr(job, "next_run_time", None)
        if when is None:
            when = job.trigger.get_next_fire_time(None, now)
        out.append((job.name, when))
    return out


__all__ = [
    "Jobs",
    "Store",
    "build_scheduler",
    "count_missed",
    "due_filter",
    "next_runs",
    "preferences",
]
