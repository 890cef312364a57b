"""The scheduler's jobs: fetch after arXiv's announcement, and a tick that sends what is due."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from newsletter.config import load_config
from newsletter.runs.scheduler import Jobs, build_scheduler, next_runs

GOOD = """\
topics:
  - name: moe
    keywords: [MoE]
"""


def test_default_fetch_follows_the_arxiv_announcement(tmp_path: Path) -> None:
    path = tmp_path / "n.yaml"
    path.write_text(GOOD)
    config = load_config(path)
    calls: list[str] = []
    jobs = Jobs(fetch=lambda now: calls.append("fetch"), send_due=lambda now: calls.append("tick"))
    scheduler = build_scheduler(config, jobs, start_tick_now=False)
    friday_noon = datetime(2026, 11, 20, 17, 0, tzinfo=UTC)
    runs = dict(next_runs(scheduler, friday_noon))
    arxiv = next(v for k, v in runs.items() if "sun,mon,tue,wed,thu" in k)
    # Friday and Saturday bring nothing: the next announcement fetch is Sunday 20:30 EST.
    assert arxiv == datetime(2026, 11, 23, 1, 30, tzinfo=UTC)
    assert runs["send due editions (every 5 min)"] is not None


def test_a_tick_never_overlaps_a_running_one() -> None:
    seen: list[datetime] = []
    jobs = Jobs(
        fetch=lambda now: None, send_due=seen.append, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC)
    )
    with jobs.lock:  # a fetch or an earlier tick is still running
        jobs.run_tick()
    assert seen == []
    jobs.run_tick()
    assert seen == [datetime(2026, 1, 1, tzinfo=UTC)]


def test_a_failing_job_is_logged_and_the_scheduler_lives_on() -> None:
    def boom(now: datetime) -> None:
        raise RuntimeError("relay exploded")

    jobs = Jobs(fetch=boom, send_due=boom)
    jobs.run_fetch()
    jobs.run_tick()
    assert not jobs.lock.locked()
