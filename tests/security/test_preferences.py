"""Issue 16, item 14: the manage page saves the timezone (and every other preference a reader
has: name, topics, hour, frequency, pause), in a real headless Chromium; the JSON API and
``newsletter subscribers set`` change the same, with clear errors. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.models import Frequency, SubscriberStatus
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from tests.security.helpers import newsletter
from tests.web.conftest import Clock
from tests.web.test_browser import ARGS, CHROMIUM, live

__all__ = ["live"]

CONSENT = {"how": "web form", "when": "2026-11-17T06:00:00+00:00"}


def member(store: Store, clock: Clock) -> int:
    sub, _ = store.confirm_subscriber(
        "ada@example.org",
        topics=["gpu-kernels"],
        timezone="Europe/Berlin",
        send_hour=8,
        frequency=Frequency.DAILY,
        now=clock(),
        consent=CONSENT,
    )
    return sub.id


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
def test_the_manage_page_saves_timezone_name_and_every_other_choice(
    live: tuple[str, Config, Store], clock: Clock
) -> None:
    from playwright.sync_api import sync_playwright

    _, config, store = live
    member(store, clock)
    sub = store.get_subscriber("ada@example.org")
    assert sub is not None
    manage = Subscriptions(Services(config, store, clock=clock)).links(sub).manage
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(manage)
            assert page.input_value("#timezone") == "Europe/Berlin"
            page.select_option("#timezone", "Asia/Tokyo")
            page.fill("#name", "Ada <Lovelace>")
            page.check("input[name=topics][value=rendering]")
            page.uncheck("input[name=topics][value=gpu-kernels]")
            page.select_option("#send_hour", "6")
            page.check("input[name=frequency][value=weekly]")
            page.check("input[name=paused]")
            page.click("button:has-text('Save')")
            page.wait_for_selector("text=Saved.")
            assert page.input_value("#timezone") == "Asia/Tokyo"  # shown as saved
            assert page.input_value("#name") == "Ada <Lovelace>"  # text, not markup
        finally:
            browser.close()
    got = store.get_subscriber("ada@example.org")
    assert got is not None
    assert got.timezone == "Asia/Tokyo" and got.name == "Ada <Lovelace>"
    assert got.topics == ("rendering",) and got.send_hour == 6
    assert got.frequency is Frequency.WEEKLY and got.status is SubscriberStatus.PAUSED


def test_the_api_saves_the_timezone_and_refuses_a_bad_one(
    client: TestClient, web_store: Store, service: Subscriptions, clock: Clock
) -> None:
    member(web_store, clock)
    sub = web_store.get_subscriber("ada@example.org")
    assert sub is not None
    token = service.links(sub).manage.rsplit("/", 1)[1]
    body = {"topics": ["rendering"], "timezone": "America/Chicago", "name": "Ada"}
    r = client.put(f"/api/subscription/{token}", json=body)
    assert r.status_code == 200 and r.json()["timezone"] == "America/Chicago"
    got = web_store.get_subscriber("ada@example.org")
    assert got is not None and got.timezone == "America/Chicago" and got.name == "Ada"
    bad = client.put(f"/api/subscription/{token}", json={**body, "timezone": "Mars/Olympus"})
    assert bad.status_code == 400 and bad.json()["field"] == "timezone"
    crlf = client.put(f"/api/subscription/{token}", json={**body, "name": "A\r\nBcc: x@y.z"})
    assert crlf.status_code == 400 and crlf.json()["field"] == "name"
    assert web_store.get_subscriber("ada@example.org") == got


def test_subscribers_set_changes_every_preference_with_clear_errors(
    web_config: Config, web_store: Store, clock: Clock
) -> None:
    member(web_store, clock)
    helped = newsletter(web_config, "subscribers", "set", "--help")
    assert helped.exit_code == 0
    for option in ("--topic", "--timezone", "--hour", "--frequency", "--name", "--pause"):
        assert option in helped.output
    assert "newsletter subscribers set ada@example.org --timezone" in helped.output

    r = newsletter(
        web_config,
        "subscribers", "set", "ada@example.org",
        "--topic", "rendering", "--topic", "gpu-kernels",
        "--timezone", "Asia/Kolkata", "--hour", "21", "--frequency", "weekly",
        "--name", "Ada L.", "--pause",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "paused; topics gpu-kernels, rendering; timezone Asia/Kolkata; hour 21:00" in r.output
    got = web_store.get_subscriber("ada@example.org")
    assert got is not None and got.status is SubscriberStatus.PAUSED
    assert got.topics == ("gpu-kernels", "rendering") and got.timezone == "Asia/Kolkata"
    assert got.send_hour == 21 and got.frequency is Frequency.WEEKLY and got.name == "Ada L."

    r = newsletter(
        web_config, "subscribers", "set", "ada@example.org", "--hour", "default", "--resume"
    )
    assert r.exit_code == 0, r.output
    got = web_store.get_subscriber("ada@example.org")
    assert got is not None and got.send_hour is None and got.status is SubscriberStatus.ACTIVE
    assert got.timezone == "Asia/Kolkata" and got.topics == ("gpu-kernels", "rendering")

    errors = {
        ("--timezone", "Mars/Olympus"): "--timezone: unknown timezone 'Mars/Olympus'",
        ("--topic", "cooking"): "--topic: unknown topic cooking (topics: gpu-kernels, rendering)",
        ("--hour", "25"): "--hour: an hour from 0 to 23",
        ("--hour", "soon"): "--hour: 'soon': an hour from 0 to 23, or 'default'",
        ("--name", "A\nB"): "--name: name 'A\\nB': a display name cannot contain line breaks",
    }
    for args, message in errors.items():
        r = newsletter(web_config, "subscribers", "set", "ada@example.org", *args)
        assert r.exit_code == 1 and message in " ".join(r.output.split()), r.output
    r = newsletter(web_config, "subscribers", "set", "ada@example.org")
    assert r.exit_code == 1 and "nothing to change" in r.output
    r = newsletter(web_config, "subscribers", "set", "nobody@example.org", "--hour", "3")
    assert r.exit_code == 1 and "nobody@example.org is not a subscriber" in r.output
    assert web_store.get_subscriber("ada@example.org") == got  # the errors changed nothing

    web_store.set_status("ada@example.org", SubscriberStatus.UNSUBSCRIBED, clock())
    r = newsletter(web_config, "subscribers", "set", "ada@example.org", "--resume")
    assert r.exit_code == 1 and "ada@example.org is unsubscribed" in r.output
    gone = web_store.get_subscriber("ada@example.org")
    assert gone is not None and gone.status is SubscriberStatus.UNSUBSCRIBED
