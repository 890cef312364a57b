"""Scheduling policies end to end with an injected clock, alerts, structured logs, status."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.config import Config
from newsletter.logs import JsonFormatter, step
from newsletter.runs.fetch import fetch_step
from newsletter.runs.scheduler import due_filter
from newsletter.services import Services
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import SmtpServer, base_config, write_config
from tests.sends import run_send, send_step

FRIDAY_7 = datetime(2026, 11, 20, 7, 0, tzinfo=UTC)  # 07:00 UTC: editions due at 07:00


@pytest.fixture
def setup(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> tuple[Config, Store, Path]:
    from newsletter.config import load_config

    data = base_config(
        db_url,
        smtp_server,
        schedule={"timezone": "UTC", "send_hour": 7, "misfire_grace_minutes": 120},
        alerts={"email": "ops@papers.example.org"},
        web={"secret_key": "operations-test-secret-0123456789ab"},
    )
    path = write_config(tmp_path, data)
    config = load_config(path)
    store = Store(config.database_url)
    store.upgrade()
    store.add_subscriber("kernels@example.org", topics=["gpu-kernels"], now=FRIDAY_7)
    run_fetch(config, store, FRIDAY_7 - timedelta(hours=1))
    yield config, store, path
    store.close()


def test_scheduled_tick_sends_only_when_due_and_only_once(
    setup: tuple[Config, Store, Path], smtp_server: SmtpServer
) -> None:
    config, store, _ = setup
    early = FRIDAY_7 - timedelta(minutes=5)
    report = run_send(config, store, early, due=due_filter(config, early))
    assert report.sent == 0 and report.not_due == 1
    for minutes in (0, 5, 10):  # three ticks after the hour: one digest
        now = FRIDAY_7 + timedelta(minutes=minutes)
        run_send(config, store, now, due=due_filter(config, now))
    assert len(smtp_server.received) == 1


def test_downtime_inside_the_grace_window_sends_once_outside_it_not_at_all(
    setup: tuple[Config, Store, Path], smtp_server: SmtpServer
) -> None:
    config, store, _ = setup
    back_late = FRIDAY_7 + timedelta(hours=3)  # grace is 2 h: a 10:00 digest is worse than none
    assert run_send(config, store, back_late, due=due_filter(config, back_late)).sent == 0
    back_soon = FRIDAY_7 + timedelta(minutes=90)
    assert run_send(config, store, back_soon, due=due_filter(config, back_soon)).sent == 1
    assert len(smtp_server.received) == 1


def test_no_arxiv_listing_since_the_last_edition_skips_with_a_reason(
    setup: tuple[Config, Store, Path], smtp_server: SmtpServer
) -> None:
    config, store, _ = setup
    assert run_send(config, store, FRIDAY_7).sent == 1
    saturday = FRIDAY_7 + timedelta(days=1)  # arXiv announced nothing on Friday evening
    report = send_step(config, store, saturday)
    assert report.sent == 0 and report.no_listing == 1
    assert report.no_listing_reason is not None and "Sunday to Thursday" in report.no_listing_reason
    [run] = store.last_runs(1)
    assert run.error is not None and "no new arXiv listing" in run.error
    assert len(smtp_server.received) == 1


def test_no_listing_policy_send_sends_anyway(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> None:
    from newsletter.config import load_config

    data = base_config(
        db_url, smtp_server, schedule={"no_listing": "send"}, digest={"empty": "send"}
    )
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    try:
        store.add_subscriber("kernels@example.org", topics=["gpu-kernels"], now=FRIDAY_7)
        run_fetch(config, store, FRIDAY_7 - timedelta(hours=1))
        run_send(config, store, FRIDAY_7)
        assert run_send(config, store, FRIDAY_7 + timedelta(days=1)).sent == 1  # "nothing new" note
        assert "Nothing new" in str(smtp_server.received[-1].message["Subject"])
    finally:
        store.close()


def test_weekday_fetch_that_finds_nothing_alerts_the_operator(
    setup: tuple[Config, Store, Path], smtp_server: SmtpServer
) -> None:
    config, store, _ = setup
    monday_night = datetime(2026, 11, 24, 2, 0, tzinfo=UTC)  # Monday 21:00 in New York
    report = fetch_step(Services(config, store), monday_night)  # same feeds again: nothing new
    assert report.new == 0
    [alert] = smtp_server.messages_to("ops@papers.example.org")
    assert (
        "found no new papers" in str(alert["Subject"])
        and alert["Auto-Submitted"] == "auto-generated"
    )
    saturday = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)  # Saturday evening: a quiet day is normal
    fetch_step(Services(config, store), saturday)
    assert len(smtp_server.messages_to("ops@papers.example.org")) == 1


def test_a_fetch_where_every_source_failed_sends_one_alert_after_the_announcement_too(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> None:
    """After the weekday announcement, a fetch whose every source failed used to raise both
    "found no new papers" ("every source answered", which was false) and "every source
    failed": the second says what happened."""
    from newsletter.config import load_config

    missing = str(tmp_path / "gone.xml")
    data = base_config(
        db_url,
        smtp_server,
        sources=[{"name": "gone", "kind": "arxiv_rss", "url": missing}],
        alerts={"email": "ops@papers.example.org"},
    )
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    try:
        monday_night = datetime(2026, 11, 24, 2, 0, tzinfo=UTC)  # Monday 21:00 in New York
        report = fetch_step(Services(config, store), monday_night)
        assert [s.source for s in report.failed] == ["gone"]
        [alert] = smtp_server.messages_to("ops@papers.example.org")
        assert "every source failed" in str(alert["Subject"])
    finally:
        store.close()


def test_relay_failure_is_logged_as_one_alert_and_recorded(
    tmp_path: Path, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from newsletter.config import load_config
    from newsletter.operations.smtp_sink import free_port

    data = base_config(db_url, alerts={"email": "ops@papers.example.org"})
    data["smtp"] = {"host": "127.0.0.1", "port": free_port(), "timeout": 2}
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    try:
        store.add_subscriber("a@example.org", topics=["gpu-kernels"], now=FRIDAY_7)
        run_fetch(config, store, FRIDAY_7)
        with caplog.at_level(logging.ERROR, logger="newsletter.alerts"):
            report = send_step(config, store, FRIDAY_7)
        assert report.relay_error is not None
        alerts = [r for r in caplog.records if r.name == "newsletter.alerts"]
        assert len(alerts) == 1 and "relay cannot be used" in alerts[0].getMessage()
        [run] = store.last_runs(1)
        assert run.status == "failed" and "cannot reach the relay" in (run.error or "")
    finally:
        store.close()


def test_json_log_lines_carry_the_counts() -> None:
    record = logging.LogRecord("newsletter.run", logging.INFO, __file__, 1, "send done", None, None)
    record.counts = {"sent": 3, "failed": 0}
    line = json.loads(JsonFormatter().format(record))
    assert line["msg"] == "send done" and line["counts"] == {"sent": 3, "failed": 0}
    assert line["level"] == "info" and line["ts"].endswith("+00:00")


def test_step_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="newsletter.run"):
        step("fetch done", new=4)
    [rec] = caplog.records
    assert rec.getMessage() == "fetch done" and rec.counts == {"new": 4}  # type: ignore[attr-defined]


def test_status_shows_runs_and_next_fetch(setup: tuple[Config, Store, Path]) -> None:
    config, store, path = setup
    send_step(config, store, FRIDAY_7)
    result = CliRunner().invoke(cli, ["--config", str(path), "status", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["runs"][0]["kind"] == "send" and data["runs"][0]["counts"]["sent"] == 1
    assert data["subscribers"] == {"active": 1}
    assert any("sun,mon,tue,wed,thu" in f["job"] for f in data["next_fetches"])
    text = CliRunner().invoke(cli, ["--config", str(path), "status"])
    assert "Recent runs" in text.stdout and "1 active subscriber;" in text.stdout
