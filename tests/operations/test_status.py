"""The operator's overview (:mod:`newsletter.operations.status`) and the fetch report's JSON, called
directly on SQLite and the real PostgreSQL; a source removed from the config leaves the
overview and the metrics."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.config import Config
from newsletter.models import EditionStatus, SubscriberStatus
from newsletter.operations.status import gather_status, run_duration
from newsletter.sources.base import Skipped
from newsletter.sources.ingest import FetchReport, SourceReport
from newsletter.store import RunRecord, SourceState, Store
from tests.conftest import base_config

NOW = datetime(2026, 11, 17, 12, 0, tzinfo=UTC)


def _run(counts: dict[str, Any], finished: datetime | None) -> RunRecord:
    return RunRecord(1, "send", NOW, finished, "ok", counts, None)


def test_a_runs_duration_is_the_measured_one_else_from_its_times() -> None:
    assert run_duration(_run({"duration": 2.5}, NOW + timedelta(seconds=9))) == 2.5
    assert run_duration(_run({"duration": 3}, None)) == 3.0
    assert run_duration(_run({"duration": True}, NOW + timedelta(seconds=1.25))) == 1.25
    assert run_duration(_run({}, NOW + timedelta(milliseconds=4321))) == 4.321
    assert run_duration(_run({}, None)) is None


def _config(make_config: Callable[..., Config], store: Store, on_unknown: str) -> Config:
    url = store.engine.url.render_as_string(hide_password=False)
    fetch = [{"cron": "0 23 * * *", "timezone": "UTC"}, {"cron": "0 13 * * *", "timezone": "UTC"}]
    return make_config(
        base_config(url, delivery={"on_unknown": on_unknown}, schedule={"fetch": fetch})
    )


def test_the_overview_gathers_counts_runs_failures_and_unknown_editions(
    make_config: Callable[..., Config], store: Store
) -> None:
    config = _config(make_config, store, "hold")
    ada, _ = store.add_subscriber("ada@example.org", topics=("rendering",), now=NOW)
    store.add_subscriber("bob@example.org", topics=("rendering",), now=NOW)
    store.set_status("bob@example.org", SubscriberStatus.SUPPRESSED, NOW)
    old = store.start_run("fetch", NOW - timedelta(hours=2))
    store.finish_run(old, "ok", NOW - timedelta(hours=2) + timedelta(seconds=3), {"new": 4})
    new = store.start_run("send", NOW - timedelta(hours=1))
    store.finish_run(new, "failed", NOW - timedelta(minutes=59), {"sent": 0, "duration": 1.5}, "x")
    store.save_source_state(
        SourceState("cs-dc", last_error="HTTP 503", consecutive_failures=3, last_fetch=NOW)
    )
    store.save_source_state(  # not configured: not reported
        SourceState("gone", last_error="HTTP 404", consecutive_failures=9, last_fetch=NOW)
    )
    claim = store.claim_edition(ada.id, NOW.date(), "<m1@x>", NOW, owner="test")
    assert claim is not None
    store.mark_edition(claim.id, EditionStatus.UNKNOWN, NOW, error="no answer after the dot")

    status = gather_status(config, store, NOW, runs=5)
    assert status.now == NOW and status.tick_minutes == config.settings.schedule.tick_minutes
    assert status.subscribers == {"active": 1, "suppressed": 1}
    assert status.editions_today == {"unknown": 1}
    assert status.papers == 0
    assert [(r.kind, r.status) for r in status.runs] == [("send", "failed"), ("fetch", "ok")]
    assert [run_duration(r) for r in status.runs] == [1.5, 3.0]
    assert status.failing_sources == [("cs-dc", 3, "HTTP 503")]
    assert [s.email for s in status.suppressed] == ["bob@example.org"]
    assert [(e.email, e.status) for e in status.unknown] == [
        ("ada@example.org", EditionStatus.UNKNOWN)
    ]
    assert status.resend_unknown is False
    assert status.upcoming == [  # soonest first; the edition tick ("every ...") left out
        ("fetch (0 13 * * * UTC)", NOW.replace(hour=13)),
        ("fetch (0 23 * * * UTC)", NOW.replace(hour=23)),
    ]
    assert [r.kind for r in gather_status(config, store, NOW, runs=1).runs] == ["send"]

    data = status.as_json()
    json.dumps(data)  # all of it serializes
    assert data["subscribers"] == {"active": 1, "suppressed": 1}
    assert data["runs"][0] == {
        "kind": "send",
        "started": (NOW - timedelta(hours=1)).isoformat(),
        "status": "failed",
        "counts": {"sent": 0, "duration": 1.5},
        "error": "x",
        "duration": 1.5,
    }
    assert data["failing_sources"] == [
        {"source": "cs-dc", "consecutive_failures": 3, "last_error": "HTTP 503"}
    ]
    assert data["suppressed"] == ["bob@example.org"]
    assert data["unknown_editions"] == [
        {
            "email": "ada@example.org",
            "edition_date": NOW.date().isoformat(),
            "status": "unknown",
            "message_id": "<m1@x>",
            "last_error": "no answer after the dot",
        }
    ]
    assert data["next_fetches"][0]["job"] == status.upcoming[0][0]
    assert set(data["deliverability"]) == {"editions", "days", "alerts"}


def test_the_overview_says_whether_unknown_editions_are_resent(
    make_config: Callable[..., Config], store: Store
) -> None:
    assert gather_status(_config(make_config, store, "resend"), store, NOW).resend_unknown is True


def test_a_running_run_whose_process_is_gone_shows_as_interrupted(
    make_config: Callable[..., Config], store: Store
) -> None:
    config = _config(make_config, store, "hold")
    store.start_run("send", NOW - timedelta(hours=1), owner="nohost:999999:0dead.run")
    (run,) = gather_status(config, store, NOW).runs
    assert run.status == "interrupted" and run.finished is not None
    assert store.last_runs(1)[0].status == "running"  # shown so, not written


def test_the_fetch_report_json_has_totals_and_each_sources_status() -> None:
    ok = SourceReport("a", "https://a.example/rss", entries=3, new=2, unchanged=1, seconds=0.12345)
    partial = SourceReport(
        "b", "https://b", entries=2, new=1, errors=("page 2: 503",), skipped=(Skipped("x", "y"),)
    )
    failed = SourceReport("c", "https://c", errors=("HTTP 500",))
    cached = SourceReport("d", "https://d", not_modified=True)
    assert [s.status for s in (ok, partial, failed, cached)] == [
        "ok",
        "partial",
        "failed",
        "not modified (304)",
    ]
    data = FetchReport((ok, partial, failed, cached)).as_json()
    assert {k: v for k, v in data.items() if k != "sources"} == {
        "entries": 5,
        "new": 3,
        "updated": 0,
        "unannounced": 0,
        "embedded": 0,
        "matching": "",
        "skipped": 1,
        "failed_sources": ["b", "c"],
    }
    assert data["sources"][0] == {
        "source": "a",
        "url": "https://a.example/rss",
        "status": "ok",
        "entries": 3,
        "new": 2,
        "updated": 0,
        "unchanged": 1,
        "unannounced": 0,
        "merged": 0,
        "not_modified": False,
        "skipped": [],
        "errors": [],
        "seconds": 0.123,
    }
    assert data["sources"][1]["skipped"] == [{"what": "x", "reason": "y"}]
    assert data["sources"][1]["errors"] == ["page 2: 503"]
    assert [s["status"] for s in data["sources"]] == [
        s.status for s in (ok, partial, failed, cached)
    ]


def test_a_source_removed_from_the_config_drops_out_of_status_and_metrics(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from newsletter.config import load_config
    from newsletter.store import Store
    from newsletter.web import create_app
    from tests.conftest import base_config, write_config

    data = base_config(db_url)
    data["web"] = {"secret_key": "a-test-secret-that-signs-links-0123456789"}
    broken = [
        {"name": "gone", "kind": "feed", "url": str(tmp_path / "no-such-feed.xml")},
        {"name": "kept-broken", "kind": "feed", "url": str(tmp_path / "missing-too.xml")},
    ]
    path = write_config(tmp_path, {**data, "sources": data["sources"] + broken})
    runner = CliRunner()
    assert runner.invoke(cli, ["--config", str(path), "db", "upgrade"]).exit_code == 0
    runner.invoke(cli, ["--config", str(path), "fetch"])
    before = json.loads(runner.invoke(cli, ["--config", str(path), "status", "--json"]).output)
    assert {s["source"] for s in before["failing_sources"]} == {"gone", "kept-broken"}

    # The operator removes 'gone' from the config; 'kept-broken' stays (and still fails).
    write_config(tmp_path, {**data, "sources": data["sources"] + broken[1:]})
    after = runner.invoke(cli, ["--config", str(path), "status", "--json"])
    assert after.exit_code == 0, after.output
    assert [s["source"] for s in json.loads(after.output)["failing_sources"]] == ["kept-broken"]
    text = " ".join(runner.invoke(cli, ["--config", str(path), "status"]).output.split())
    assert "source kept-broken failed 1 time in a row" in text
    assert "source gone failed" not in text  # (the fetch run's record still names it)

    config = load_config(path)
    store = Store(config.database_url)
    try:
        monkeypatch.setenv("NEWSLETTER_ADMIN_TOKEN", "an-admin-token-for-metrics-0123456789")
        with TestClient(create_app(config, store, None)) as client:
            auth = {"Authorization": "Bearer an-admin-token-for-metrics-0123456789"}
            metrics = client.get("/metrics", headers=auth).text
        assert 'newsletter_source_consecutive_failures{source="kept-broken"} 1.0' in metrics
        assert 'source="gone"' not in metrics
        # The history stays in the database: put 'gone' back and it is reported again.
        assert "gone" in {s.source for s in store.all_source_states()}
    finally:
        store.close()

    # A disabled source is not fetched either: its old failures raise no alert.
    disabled = [{**broken[1], "enabled": False}]
    write_config(tmp_path, {**data, "sources": data["sources"] + disabled})
    quiet = json.loads(runner.invoke(cli, ["--config", str(path), "status", "--json"]).output)
    assert quiet["failing_sources"] == []
