"""A send's policy is fixed once from the request and the config, and the run follows it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from newsletter.config import Config, load_config
from newsletter.edition import BadSendRequest, SendPolicy, SendRequest, Services
from newsletter.runs.fetch import fetch_step
from newsletter.store import Store
from tests.conftest import NOW, SmtpServer, base_config, write_config
from tests.sends import send_step


def config_with(
    tmp_path: Path, db_url: str, smtp: SmtpServer | None = None, **overrides: Any
) -> Config:
    return load_config(write_config(tmp_path, base_config(db_url, smtp, **overrides)))


def test_the_policy_reads_each_setting_once(tmp_path: Path) -> None:
    config = config_with(
        tmp_path,
        f"sqlite:///{tmp_path}/n.db",
        delivery={"claim_lease": 120, "on_unknown": "hold"},
        schedule={"no_listing": "skip", "timezone": "Asia/Tokyo"},
        digest={"empty": "send"},
    )
    policy = SendPolicy.of(SendRequest(topic="rendering"), config, owner="host:1:x.run")
    assert policy.lease == timedelta(seconds=120) and not policy.resend_unknown
    assert policy.skip_quiet and not policy.empty_skips
    assert policy.default_zone == "Asia/Tokyo" and policy.topic == "rendering"
    assert policy.owner == "host:1:x.run"
    assert policy.message_domain == config.settings.sender.message_domain
    forced = SendPolicy.of(SendRequest(to="ada@example.org", force=True), config)
    assert forced.force and not forced.skip_quiet  # a forced re-send goes out on a quiet day
    assert forced.owner  # a name of its own when none is given


def test_an_invalid_request_never_becomes_a_policy(tmp_path: Path) -> None:
    config = config_with(tmp_path, f"sqlite:///{tmp_path}/n.db")
    with pytest.raises(BadSendRequest, match="force re-sends one subscriber's edition"):
        SendPolicy.of(SendRequest(force=True), config)
    checked = SendRequest(to=" Ada@EXAMPLE.org").validated(config)
    assert checked.checked and SendPolicy.of(checked, config).to == "Ada@example.org"


def test_a_recorded_runs_claims_carry_the_runs_own_name(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> None:
    """One owner for the run and its editions (it used to be two names made apart)."""
    config = config_with(
        tmp_path, db_url, smtp_server, schedule={"no_listing": "send"}, digest={"empty": "send"}
    )
    store = Store(config.database_url)
    store.upgrade()
    try:
        for who in ("ada", "bob"):
            store.add_subscriber(f"{who}@example.org", topics=["gpu-kernels"], now=NOW)
        fetch_step(Services(config, store), NOW - timedelta(hours=1))
        leases: list[str] = []

        def progress(_: object) -> None:  # while the run is alive: its lease names it
            leases.extend(r.counts["lease"]["owner"] for r in store.running_runs())

        report = send_step(config, store, NOW, progress=progress)
        assert report.sent == 2
        with store.engine.connect() as conn:
            owners = {r[0] for r in conn.execute(text("SELECT owner FROM editions"))}
        assert leases and set(leases) == owners
    finally:
        store.close()
