"""The archive pages, the subscribers CLI (import, export, show, forget) and the new store methods."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner
from fastapi.testclient import TestClient

from newsletter.cli import cli
from newsletter.config import Config
from newsletter.edition.build import day_ranker
from newsletter.models import Frequency, SubscriberStatus
from newsletter.services.link_tokens import Purpose
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from tests.cli.test_cli_e2e import text_and_html
from tests.conftest import NOW, SmtpServer
from tests.sends import run_send
from tests.web.conftest import Clock


def test_view_in_browser_and_the_public_day_page(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    service: Subscriptions,
    clock: Clock,
    smtp_server: SmtpServer,
) -> None:
    web_store.add_subscriber("ada@example.org", topics=["gpu-kernels"], now=NOW)
    run_fetch(web_config, web_store, NOW)
    assert run_send(web_config, web_store, NOW).sent == 1
    sub = web_store.get_subscriber("ada@example.org")
    assert sub is not None
    view = service.tokens.make(Purpose.VIEW, {"s": sub.id, "d": "2026-11-17"})
    r = client.get(f"/archive/view/{view}")
    assert r.status_code == 200 and "CUDA-L1" in r.text and "RT-NeRF" not in r.text
    assert "unsafe-inline" in r.headers["content-security-policy"]
    other_day = service.tokens.make(Purpose.VIEW, {"s": sub.id, "d": "2026-11-16"})
    assert client.get(f"/archive/view/{other_day}").status_code == 404
    assert client.get(f"/archive/view/{view[:-2]}xx").status_code == 400

    index = client.get("/archive")
    assert index.status_code == 200 and "/archive/2026-11-17" in index.text
    day = client.get("/archive/2026-11-17")
    assert day.status_code == 200
    assert "CUDA-L1" in day.text and "RT-NeRF" in day.text  # across all topics
    assert client.get("/archive/2026-11-15").text.count('class="card"') == 0
    assert client.get("/archive/not-a-day").status_code == 404
    api = client.get("/api/archive/2026-11-17").json()
    assert {t["topic"] for t in api["topics"]} == {"gpu-kernels", "rendering"}


def mailed_order(html: str) -> list[tuple[str, str]]:
    """(section title, "") and ("", paper title) in the order a digest's HTML shows them."""
    return re.findall(
        r'class="section font"[^>]*>\s*([^<]+?)\s*<span|class="title(?:text)?"[^>]*>(.*?)</',
        html,
    )


def test_the_view_page_shows_a_voters_edition_as_it_was_mailed(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    service: Subscriptions,
    smtp_server: SmtpServer,
) -> None:
    """The archive ranks a sent edition as the send did, with the reader's votes and the
    papers they voted on: the page shows the mailed papers in the mailed sections and order.
    (Ranked without the votes, the papers there only for them fell out of the reader's
    topic into "Also in this edition".)"""
    web_store.add_subscriber("voter@example.org", topics=["gpu-kernels"], now=NOW)
    run_fetch(web_config, web_store, NOW)
    _, ranker = day_ranker(web_config, web_store, NOW)
    kernels = {i.paper.key for i in ranker.ranked["gpu-kernels"]}
    liked = next(i.paper for i in ranker.ranked["rendering"] if i.paper.key not in kernels)
    sub = web_store.get_subscriber("voter@example.org")
    assert sub is not None
    web_store.set_vote(sub.id, liked.id, 1, None, NOW - timedelta(minutes=5))
    assert run_send(web_config, web_store, NOW).sent == 1
    mailed = text_and_html(smtp_server.received[-1].message)[1]
    assert "seeing this:</b> like: " in " ".join(mailed.split())  # the vote shaped the mail

    view = service.tokens.make(Purpose.VIEW, {"s": sub.id, "d": "2026-11-17"})
    page = client.get(f"/archive/view/{view}")
    assert page.status_code == 200
    assert mailed_order(page.text) == mailed_order(mailed) != []
    # A vote cast after the send does not reorder the edition it was not part of.
    best = ranker.ranked["gpu-kernels"][0].paper
    web_store.set_vote(sub.id, best.id, -1, None, NOW + timedelta(hours=1))
    assert mailed_order(client.get(f"/archive/view/{view}").text) == mailed_order(mailed)


def test_rate_limit_store_counts_within_the_window(web_store: Store) -> None:
    window = timedelta(hours=1)
    assert [web_store.hit_rate("k", NOW, window=window, limit=2) for _ in range(3)] == [
        True,
        True,
        False,
    ]
    assert web_store.hit_rate("other", NOW, window=window, limit=2)
    assert web_store.hit_rate("k", NOW + window + timedelta(seconds=1), window=window, limit=2)


def test_confirm_subscriber_keeps_the_consent_history(web_store: Store) -> None:
    sub, created = web_store.confirm_subscriber(
        "ada@example.org",
        topics=["rendering"],
        timezone="UTC",
        send_hour=None,
        frequency=Frequency.DAILY,
        now=NOW,
        consent={"how": "web form", "when": "1"},
    )
    assert created and sub.status is SubscriberStatus.ACTIVE and sub.confirmed == NOW
    web_store.unsubscribe_id(sub.id, NOW)
    again, created = web_store.confirm_subscriber(
        "ada@example.org",
        topics=["gpu-kernels"],
        timezone="UTC",
        send_hour=7,
        frequency=Frequency.WEEKLY,
        now=NOW,
        consent={"how": "email", "when": "2"},
    )
    assert not created and again.id == sub.id and again.topics == ("gpu-kernels",)
    record = web_store.consent_record(sub.id)
    assert record is not None and record["how"] == "email"
    assert [h["how"] for h in record["history"]] == ["web form", "email"]


def run(config: Config, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--config", str(config.path), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_cli_import_export_show_and_forget(
    web_config: Config, web_store: Store, service: Subscriptions, tmp_path: Path
) -> None:
    csv_file = tmp_path / "people.csv"
    csv_file.write_text(
        "email,name,topics,timezone,consent\n"
        "ada@example.org,Ada,gpu-kernels;rendering,Europe/London,signed up at the 2026 meetup\n"
        "bad-address,Nobody,rendering,,\n"
        "bob@example.org,Bob,,,\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(
        cli,
        [
            "--config",
            str(web_config.path),
            "subscribers",
            "import",
            str(csv_file),
            "--topic",
            "rendering",
        ],
    )
    assert result.exit_code == 1  # one bad row, reported by line; the others are added
    assert "people.csv:3" in result.output and "added 2" in result.output
    out = run(web_config, "subscribers", "export")
    lines = out.strip().splitlines()
    assert lines[0].startswith("email,name,status,topics")
    assert "ada@example.org,Ada,active,gpu-kernels rendering,Europe/London" in out
    assert "bob@example.org,Bob,active,rendering" in out
    shown = json.loads(run(web_config, "subscribers", "show", "ada@example.org", "--json"))
    assert shown["consent"]["how"] == "import" and "meetup" in shown["consent"]["source"]
    assert "people.csv:2" in run(web_config, "subscribers", "show", "ada@example.org")
    ada = web_store.get_subscriber("ada@example.org")
    assert ada is not None
    web_store.add_own_topic(
        ada.id, "decoders for quantum error correction", "h", ("2401.04088",), NOW, limit=3
    )
    shown_text = run(web_config, "subscribers", "show", "ada@example.org")
    assert "own topics:" in shown_text
    assert "1. decoders for quantum error correction  like: 2401.04088" in shown_text
    assert "decoders for quantum error correction [like: 2401.04088]" in run(
        web_config, "subscribers", "export"
    )

    service.store.hit_rate(
        service._address_key("ada@example.org"), NOW, window=timedelta(days=1), limit=5
    )
    assert "Erased" in run(web_config, "subscribers", "remove", "ada@example.org", "--forget")
    assert web_store.get_subscriber("ada@example.org") is None
    with web_store.engine.connect() as conn:
        from sqlalchemy import text

        assert conn.execute(text("select count(*) from rate_events")).scalar() == 0
        assert conn.execute(text("select count(*) from own_topics")).scalar() == 0
