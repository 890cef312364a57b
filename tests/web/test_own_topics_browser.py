"""The manage page's "Your own topics" in a real headless Chromium (issue 45): add, edit,
remove, the limit, an inline refusal, and a hostile sentence that stays text (no script runs,
no element is injected)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from newsletter.config import Config, load_config
from newsletter.operations.smtp_sink import free_port
from newsletter.services import Services
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.web import create_app
from tests.conftest import NOW, SmtpServer, write_config
from tests.web.conftest import Clock, web_settings
from tests.web.test_browser import ARGS, CHROMIUM, LiveServer

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
]

HOSTILE = '"><img src=x onerror="window.pwned=1"><script>window.pwned=2</script> decoders'


@pytest.fixture
def live(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, clock: Clock
) -> Iterator[tuple[str, Store, int]]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    data = web_settings(db_url, smtp_server)
    data["sender"]["base_url"] = base
    data["own_topics"] = {"enabled": True, "max": 2, "max_chars": 200}
    config: Config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    sub, _ = store.add_subscriber("ada@example.org", topics=("gpu-kernels",), now=NOW)
    manage = Subscriptions(Services(config, store, clock=clock)).links(sub).manage
    try:
        with LiveServer(create_app(config, store, None, now=clock), port):
            yield manage, store, sub.id
    finally:
        store.close()


def test_add_edit_remove_limit_and_refusal_in_chromium(live: tuple[str, Store, int]) -> None:
    from playwright.sync_api import sync_playwright

    manage, store, sid = live
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(manage)
            page.wait_for_selector("h2:has-text('Your own topics')")
            assert page.is_visible(".own-note")  # lexical here: the page says so once
            page.fill("#own-text-new", "Decoders for quantum error correction")
            page.fill("#own-examples-new", "2401.04088")
            page.click("button:has-text('Add topic')")
            page.wait_for_selector("text=Your own topic was added")
            assert page.input_value("#own-text-1") == "Decoders for quantum error correction"

            page.fill("#own-text-new", "sparse attention for long documents")
            page.fill("#own-examples-new", "not-an-id")
            page.click("button:has-text('Add topic')")
            page.wait_for_selector(".own-error")
            assert "example 1 is not an arXiv id" in page.inner_text(".own-error")
            assert page.input_value("#own-examples-new") == "not-an-id"  # kept for fixing
            page.fill("#own-examples-new", "")
            page.click("button:has-text('Add topic')")
            page.wait_for_selector("text=Your own topic was added")
            assert not page.is_visible("#own-add")  # two topics: the limit, no add form
            assert page.is_visible("text=the most allowed")

            page.fill("#own-text-2", "x" * 201)
            page.click("button:has-text('Save topic 2')")
            page.wait_for_selector(".own-error")
            assert "too long: at most 200 characters" in page.inner_text(".own-error")
            page.fill("#own-text-2", "sparse attention kernels")
            page.click("button:has-text('Save topic 2')")
            page.wait_for_selector("text=Your own topic was changed")

            page.click("button:has-text('Remove topic 1')")
            page.wait_for_selector("text=Your own topic was removed")
            assert page.input_value("#own-text-1") == "sparse attention kernels"
            [own] = store.own_topics_of([sid])[sid]
            assert (own.position, own.text) == (1, "sparse attention kernels")
        finally:
            browser.close()


def test_a_hostile_sentence_stays_text_in_chromium(live: tuple[str, Store, int]) -> None:
    from playwright.sync_api import sync_playwright

    manage, store, sid = live
    hostile = HOSTILE.replace("<", "").replace(">", "")  # < and > are refused outright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(manage)
            page.fill("#own-text-new", HOSTILE)
            page.click("button:has-text('Add topic')")
            page.wait_for_selector(".own-error")
            assert "no HTML" in page.inner_text(".own-error")
            assert page.input_value("#own-text-new") == HOSTILE  # put back as text
            assert page.evaluate("window.pwned") is None
            assert page.locator("img[src=x]").count() == 0

            page.fill("#own-text-new", hostile)
            page.click("button:has-text('Add topic')")
            page.wait_for_selector("text=Your own topic was added")
            assert page.input_value("#own-text-1") == hostile
            assert page.evaluate("window.pwned") is None
            assert page.locator("img").count() == 0 and page.locator("script").count() == 0
            assert store.own_topics_of([sid])[sid][0].text == hostile
        finally:
            browser.close()
