"""Subscribers written out (:mod:`newsletter.subscriber_lists.export`): the CSV export and one subscriber's
record, called directly on SQLite and the real PostgreSQL."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from newsletter.config import Config
from newsletter.models import Frequency, NewSubscriber, PaperData, SubscriberStatus
from newsletter.services import Services
from newsletter.sources.ingest import decide
from newsletter.store import Store
from newsletter.subscriber_lists.csv_import import import_csv
from newsletter.subscriber_lists.export import CSV_FIELDS, csv_rows, subscriber_record, write_csv
from tests.conftest import base_config

NOW = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)


def _papers(store: Store, *keys: str) -> dict[str, int]:
    batch = [PaperData(key=k, title=f"Paper {k}", abstract="About things.") for k in keys]
    store.write_papers("test", decide(batch, {}), NOW)
    return {k: p.id for k, p in store.papers_by_keys(keys).items()}


def _people(store: Store) -> None:
    """Ada (confirmed, hour 8, weekly, two votes, two own topics), Bob (paused), Cy
    (unsubscribed)."""
    ids = _papers(store, "2611.00001", "2611.00002")
    ada, _ = store.confirm_subscriber(
        "ada@example.org",
        name="Ada, Countess",
        topics=("gpu-kernels", "rendering"),
        timezone="Europe/Berlin",
        send_hour=8,
        frequency=Frequency.WEEKLY,
        now=NOW,
        consent={"how": "web", "when": NOW.isoformat(), "where": "203.0.113.0/24"},
    )
    store.set_vote(ada.id, ids["2611.00001"], 1, "gpu-kernels", NOW)
    store.set_vote(ada.id, ids["2611.00002"], -1, None, NOW.replace(hour=7))
    store.add_own_topic(ada.id, "decoders for quantum error correction", "h1", (), NOW, limit=3)
    store.add_own_topic(
        ada.id, "=diffusion models for protein design", "h2", ("2401.04088",), NOW, limit=3
    )
    store.add_subscriber("bob@example.org", topics=("rendering",), now=NOW)
    store.set_status("bob@example.org", SubscriberStatus.PAUSED, NOW)
    store.add_subscriber("cy@example.org", topics=("rendering",), now=NOW)
    store.set_status("cy@example.org", SubscriberStatus.UNSUBSCRIBED, NOW)


def _read(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_the_export_has_the_header_and_one_row_per_subscriber_with_votes(store: Store) -> None:
    _people(store)
    out = io.StringIO()
    assert write_csv(store, out) == 3
    text = out.getvalue()
    assert text.splitlines()[0] == ",".join(CSV_FIELDS)
    assert "\r" not in text and text.endswith("\n")
    rows = _read(text)
    assert [r["email"] for r in rows] == ["ada@example.org", "bob@example.org", "cy@example.org"]
    ada = rows[0]
    assert ada["name"] == "Ada, Countess"  # quoted, read back whole
    assert (ada["status"], ada["topics"], ada["timezone"]) == (
        "active",
        "gpu-kernels rendering",
        "Europe/Berlin",
    )
    assert (ada["send_hour"], ada["frequency"]) == ("8", "weekly")
    assert ada["confirmed"] == NOW.isoformat()
    assert ada["votes"] == "'-2611.00002 +2611.00001"  # newest first; ' : not a formula
    assert (rows[1]["status"], rows[1]["send_hour"], rows[1]["votes"]) == ("paused", "", "")
    assert rows[2]["status"] == "unsubscribed"
    # Her own topics, in her order, with their example papers.
    assert ada["own_topics"] == (
        "decoders for quantum error correction | "
        "=diffusion models for protein design [like: 2401.04088]"
    )
    assert rows[1]["own_topics"] == ""


def test_the_export_of_one_status_holds_only_those(store: Store) -> None:
    _people(store)
    out = io.StringIO()
    assert write_csv(store, out, SubscriberStatus.PAUSED) == 1
    assert [r["email"] for r in _read(out.getvalue())] == ["bob@example.org"]
    assert [row[0] for row in csv_rows(store, SubscriberStatus.UNSUBSCRIBED)] == ["cy@example.org"]


def test_votes_stay_with_their_reader_across_batches(store: Store) -> None:
    """The store is read a thousand subscribers at a time; votes and own topics are looked up
    per batch."""
    people = [
        NewSubscriber(
            email=f"r{i:04d}@example.org",
            name="",
            status=SubscriberStatus.ACTIVE,
            topics=("rendering",),
            timezone="UTC",
            send_hour=None,
            frequency=Frequency.DAILY,
            consent={"how": "test"},
        )
        for i in range(1205)
    ]
    store.add_subscribers(people, NOW)
    ids = _papers(store, "2611.00009")
    late = store.get_subscriber("r1203@example.org")
    assert late is not None
    store.set_vote(late.id, ids["2611.00009"], 1, None, NOW)
    last = store.get_subscriber("r1204@example.org")
    assert last is not None
    store.add_own_topic(last.id, "decoders for quantum error correction", "h", (), NOW, limit=3)
    rows = list(csv_rows(store))
    assert len(rows) == 1205
    v, o = CSV_FIELDS.index("votes"), CSV_FIELDS.index("own_topics")
    voted = {row[0]: row[v] for row in rows if row[v]}
    assert voted == {"r1203@example.org": "+2611.00009"}
    own = {row[0]: row[o] for row in rows if row[o]}
    assert own == {"r1204@example.org": "decoders for quantum error correction"}


def test_an_export_imports_back_as_the_same_subscribers(
    store: Store, make_config: Callable[..., Config], tmp_path: Path
) -> None:
    _people(store)
    exported = tmp_path / "export.csv"
    with exported.open("w", encoding="utf-8", newline="") as f:
        write_csv(store, f)
    other = Store(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        other.upgrade()
        config = make_config(base_config(f"sqlite:///{tmp_path / 'other.db'}"))
        report = import_csv(Services(config, other), exported, NOW)
        assert (report.added, report.problems) == (3, [])
        for email in ("ada@example.org", "bob@example.org", "cy@example.org"):
            before, after = store.get_subscriber(email), other.get_subscriber(email)
            assert before is not None and after is not None
            assert (after.name, after.status, after.topics, after.timezone) == (
                before.name,
                before.status,
                before.topics,
                before.timezone,
            )
            assert (after.send_hour, after.frequency) == (before.send_hour, before.frequency)
    finally:
        other.close()


def test_a_subscribers_record_holds_consent_votes_and_bounces(store: Store) -> None:
    _people(store)
    ada = store.get_subscriber("ada@example.org")
    assert ada is not None
    store.record_complaint(
        ada.id,
        {
            "kind": "complaint",
            "source": "arf",
            "status": None,
            "diagnostic": "abuse report",
            "edition": NOW.date(),
            "message_id": None,
            "provider_id": None,
            "event_key": "k1",
            "verified": True,
            "received_at": NOW,
        },
        status=SubscriberStatus.SUPPRESSED,
        reason="complaint",
        now=NOW,
    )
    ada = store.get_subscriber("ada@example.org")
    assert ada is not None
    record = subscriber_record(store, ada)
    assert record.subscriber == ada
    assert [(v.paper_key, v.more) for v in record.votes] == [
        ("2611.00002", False),
        ("2611.00001", True),
    ]
    assert [e["how"] for e in record.consent_history] == ["web"]
    assert record.consent_history[0]["where"] == "203.0.113.0/24"
    assert [h.kind for h in record.bounce_history] == ["complaint"]

    data = record.as_json()
    assert list(data) == [
        "email",
        "name",
        "status",
        "topics",
        "timezone",
        "send_hour",
        "frequency",
        "created",
        "confirmed",
        "consent",
        "votes",
        "own_topics",
        "bounces",
    ]
    assert (data["email"], data["status"], data["topics"]) == (
        "ada@example.org",
        "suppressed",
        ["gpu-kernels", "rendering"],
    )
    assert (data["send_hour"], data["frequency"], data["confirmed"]) == (
        8,
        "weekly",
        NOW.isoformat(),
    )
    assert data["votes"][0] == {
        "paper": "2611.00002",
        "title": "Paper 2611.00002",
        "vote": "less",
        "topic": None,
        "when": NOW.replace(hour=7).isoformat(),
    }
    assert data["bounces"]["events"][0]["kind"] == "complaint"
    assert data["bounces"]["events"][0]["diagnostic"] == "abuse report"
    assert [(t["n"], t["text"], t["like"]) for t in data["own_topics"]] == [
        (1, "decoders for quantum error correction", []),
        (2, "=diffusion models for protein design", ["2401.04088"]),
    ]


def test_a_record_without_consent_or_votes_is_empty_not_missing(store: Store) -> None:
    bob, _ = store.add_subscriber("bob@example.org", topics=("rendering",), now=NOW)
    record = subscriber_record(store, bob)
    assert (record.consent, record.consent_history, record.votes) == ({}, [], [])
    data = record.as_json()
    assert (data["consent"], data["votes"], data["confirmed"]) == ({}, [], None)
    assert (record.own_topics, data["own_topics"]) == ([], [])
    assert data["bounces"] == {
        "score": 0.0,
        "last_bounce": None,
        "suppressed_reason": None,
        "suppressed_at": None,
        "events": [],
    }
