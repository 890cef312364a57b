"""'More like this' in a real headless Chromium: from the link in a sent digest to the vote,
the manage page and undo, against the app served by uvicorn on a real database."""

from __future__ import annotations

import pytest

from newsletter.config import Config
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from tests.conftest import SmtpServer
from tests.sends import run_send
from tests.web.conftest import Clock, body_text
from tests.web.test_browser import ARGS, CHROMIUM, clock, first_link, live

__all__ = ["clock", "live"]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
]


def test_more_like_this_from_the_digest_to_the_manage_page_and_undo(
    live: tuple[str, Config, Store], smtp_server: SmtpServer, clock: Clock
) -> None:
    from playwright.sync_api import sync_playwright

    base, config, store = live
    sub, _ = store.add_subscriber("ada@example.org", topics=("gpu-kernels",), now=clock())
    run_fetch(config, store, clock())
    assert run_send(config, store, clock()).sent == 1
    [digest] = [m for m in smtp_server.messages_to("ada@example.org") if m["List-Id"]]
    text = body_text(digest)
    # The text part has one "rate these papers" link (issue 29), to the view-in-browser page,
    # whose cards carry each paper's more/less links; no feedback URL per paper.
    assert f"{base}/feedback/" not in text
    rate = text.split("Rate these papers (more or less like this):", 1)[1].split()[0]
    assert rate == first_link(text, base, "archive/view")

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(rate)
            more = page.locator("a", has_text="More like this")
            assert more.count() == page.locator("a", has_text="Less like this").count() >= 1
            assert (more.first.get_attribute("href") or "").startswith(f"{base}/feedback/")
            more.first.click()
            button = page.locator("button", has_text="Show me more papers like")
            button.wait_for()
            title = button.inner_text().split(": ", 1)[1]
            assert store.votes_of(sub.id) == []  # opening the link stored nothing

            button.click()
            page.wait_for_selector("text=Thanks, noted")
            [vote] = store.votes_of(sub.id)
            assert vote.value == 1 and vote.title == title and vote.topic == "gpu-kernels"

            page.click("text=Your subscription and votes")
            page.wait_for_selector("h1:has-text('Your subscription')")
            row = page.locator("table.votes tr", has_text=title)
            assert "more like this" in row.inner_text()
            row.locator("button", has_text="Undo").click()
            page.wait_for_selector("text=Vote withdrawn")
            assert page.locator("table.votes").count() == 0
            assert store.votes_of(sub.id) == []
        finally:
            browser.close()
