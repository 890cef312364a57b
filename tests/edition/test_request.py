"""A send request is validated once, the same for every front end; a report has one
serialization that worker chunks and the run record share."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from newsletter.config import Config, load_config
from newsletter.edition import BadSendRequest, SendReport, SendRequest
from newsletter.models import SubscriberStatus
from newsletter.store import Store
from tests.conftest import base_config, write_config

NOW = datetime(2026, 11, 18, 7, 0, tzinfo=UTC)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return load_config(write_config(tmp_path, base_config(f"sqlite:///{tmp_path}/n.db")))


@pytest.fixture
def sqlite_store(config: Config) -> Store:
    store = Store(config.database_url)
    store.upgrade()
    store.add_subscriber("ada@example.org", topics=["gpu-kernels"], now=NOW)
    store.add_subscriber(
        "gone@example.org",
        topics=["gpu-kernels"],
        status=SubscriberStatus.UNSUBSCRIBED,
        now=NOW,
    )
    return store


def test_a_valid_request_comes_back_with_its_address_normalized(config: Config) -> None:
    request = SendRequest(to="  Ada@EXAMPLE.org ", topic="rendering").validated(config)
    assert request.to == "Ada@example.org"
    assert request.topic == "rendering"


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (SendRequest(force=True), "force re-sends one subscriber's edition: give the address"),
        (
            SendRequest(topic="astrology"),
            "unknown topic astrology (available: gpu-kernels, rendering)",
        ),
        (SendRequest(to="not an address"), "not an address"),
        (SendRequest(kind="cron"), "unknown kind of send 'cron'"),
    ],
)
def test_an_invalid_request_says_what_to_change(
    config: Config, request_: SendRequest, message: str
) -> None:
    with pytest.raises(BadSendRequest) as e:
        request_.validated(config)
    assert message in str(e.value)


def test_with_the_store_the_address_must_be_an_active_subscriber(
    config: Config, sqlite_store: Store
) -> None:
    assert SendRequest(to="ada@example.org").validated(config, sqlite_store).to == "ada@example.org"
    with pytest.raises(BadSendRequest, match=r"nobody@example\.org is not a subscriber; add it"):
        SendRequest(to="nobody@example.org").validated(config, sqlite_store)
    with pytest.raises(BadSendRequest, match=r"gone@example\.org is unsubscribed; only active"):
        SendRequest(to="gone@example.org").validated(config, sqlite_store)


def test_only_a_whole_list_send_goes_to_the_workers(tmp_path: Path) -> None:
    data = base_config("postgresql+psycopg://127.0.0.1/test")  # workers need PostgreSQL
    data["workers"] = {"broker_url": "redis://127.0.0.1:6379/0"}
    with_workers = load_config(write_config(tmp_path, data, "w.yaml"))
    without = load_config(write_config(tmp_path, base_config(f"sqlite:///{tmp_path}/n.db")))
    assert SendRequest().by_workers(with_workers)
    assert SendRequest(topic="rendering").by_workers(with_workers)
    assert not SendRequest(to="ada@example.org").by_workers(with_workers)
    assert not SendRequest(dry_run=True).by_workers(with_workers)
    assert not SendRequest(subscriber_ids=[1, 2]).by_workers(with_workers)  # a chunk itself
    assert not SendRequest().by_workers(without)


def test_chunks_add_up_to_the_report_the_run_records() -> None:
    one = SendReport(sent=3, failed=1, considered=5, already=1, retried=2)
    one.dates.add(date(2026, 11, 18))
    one.error("bad@example.org: 550 no such user")
    two = SendReport(sent=4, considered=4, unknown=1, no_listing_reason=None)
    two.dates.add(date(2026, 11, 17))
    two.relay_error = "relay 127.0.0.1:2525 refused the login"
    total = SendReport()
    total.merge(one.as_chunk())
    total.merge(two.as_chunk())
    assert (total.sent, total.failed, total.considered, total.already) == (7, 1, 9, 1)
    assert (total.retried, total.unknown) == (2, 1)
    assert total.dates == {date(2026, 11, 17), date(2026, 11, 18)}
    assert total.errors == ["bad@example.org: 550 no such user"]
    assert total.relay_error == "relay 127.0.0.1:2525 refused the login"
    # every count the run record carries survives the trip through a chunk
    for key in SendReport.COUNTS:
        part = SendReport()
        setattr(part, key, 2)
        back = SendReport()
        back.merge(part.as_chunk())
        assert back.as_dict()[key] == 2, key


def test_an_empty_chunk_adds_nothing() -> None:
    total = SendReport(sent=2)
    total.merge(SendReport.empty_chunk())
    assert total.as_dict() == SendReport(sent=2).as_dict() | {
        "duration": total.as_dict()["duration"]
    }
    assert total.errors == [] and total.relay_error is None and total.dates == set()
