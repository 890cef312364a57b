"""Run steps as the scheduler, the CLI and the admin endpoint all perform them.

Each wraps one pipeline step with what operations needs around it: a row in ``runs`` (counts,
errors, duration), one structured log line with the counts, and an operator alert when the
step failed or found nothing on a day it should have.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime

from newsletter.alerts import alert
from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.deliver import MailerFactory
from newsletter.edition import SendReport, run_send
from newsletter.ingest import FetchReport, run_fetch
from newsletter.logs import step
from newsletter.models import Subscriber
from newsletter.schedule import ARXIV_TZ, announces_on
from newsletter.store import Store


def fetch_step(
    config: Config,
    store: Store,
    now: datetime,
    *,
    only: Sequence[str] = (),
    progress: Callable[..., None] | None = None,
    mailer_factory: MailerFactory | None = None,
) -> FetchReport:
    run_id = store.start_run("fetch", now)
    report = run_fetch(config, store, now, only=only, progress=progress)
    failed = [s.source for s in report.failed]
    counts = {
        "sources": len(report.sources),
        "entries": report.entries,
        "new": report.new,
        "updated": report.updated,
        "unannounced": report.unannounced,
        "skipped": report.skipped,
        "failed_sources": len(failed),
    }
    error = "; ".join(f"{s.source}: {'; '.join(s.errors)}" for s in report.failed) or None
    status = "failed" if report.sources and len(failed) == len(report.sources) else "ok"
    store.finish_run(run_id, status, utcnow(), counts, error)
    step("fetch done", **counts)
    # arXiv announces on Sunday to Thursday evenings (US Eastern): a fetch after such an
    # announcement that finds nothing new at all means a source is broken, not a quiet day.
    eastern = now.astimezone(ARXIV_TZ)
    announced_today = announces_on(eastern.date()) and eastern.hour >= 20
    if (
        config.settings.alerts.on_empty_weekday_fetch
        and announced_today
        and report.sources
        and report.new == 0
        and not only
    ):
        alert(
            config,
            f"fetch after the arXiv announcement found no new papers ({eastern:%A %Y-%m-%d})",
            "Every source answered, but nothing new was stored.\n\n"
            + "\n".join(
                f"- {s.source}: {s.entries} entries, {s.new} new"
                + (f", errors: {'; '.join(s.errors)}" if s.errors else "")
                for s in report.sources
            ),
            now,
            mailer_factory=mailer_factory,
        )
    if status == "failed":
        alert(
            config, "every source failed to fetch", error or "", now, mailer_factory=mailer_factory
        )
    return report


def send_step(
    config: Config,
    store: Store,
    now: datetime,
    *,
    kind: str = "send",
    to: str | None = None,
    topic: str | None = None,
    due: Callable[[Subscriber], bool] | None = None,
    force: bool = False,
    dry_run: bool = False,
    keep_rendered: int = 0,
    stop: threading.Event | None = None,
    progress: Callable[[SendReport], None] | None = None,
    mailer_factory: MailerFactory | None = None,
) -> SendReport:
    """Send (or dry-run) editions; record the run unless it is a dry run."""
    run_id = None if dry_run else store.start_run(kind, now)
    report = run_send(
        config,
        store,
        now,
        mailer_factory=mailer_factory,
        to=to,
        topic=topic,
        due=due,
        force=force,
        dry_run=dry_run,
        keep_rendered=keep_rendered,
        progress=progress,
        stop=stop,
    )
    counts = report.as_dict()
    if run_id is not None:
        status = "failed" if report.relay_error else ("stopped" if report.stopped else "ok")
        error = report.relay_error or ("; ".join(report.errors[:20]) or None)
        if report.no_listing_reason and not error:
            error = f"{report.no_listing} skipped: {report.no_listing_reason}"
        store.finish_run(run_id, status, utcnow(), counts, error)
    if not dry_run and (report.considered or report.relay_error):
        step(f"{kind} done", **{k: v for k, v in counts.items() if v})
    if report.relay_error:
        alert(
            config,
            "sending stopped: the relay cannot be used",
            f"{report.relay_error}\n\nNothing more was sent in this run; editions not sent are "
            "retried by the next run.",
            now,
            mailer_factory=mailer_factory,
            relay_broken=True,
        )
    return report
