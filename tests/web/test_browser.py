"""The whole flow in a real headless Chromium against the app served by uvicorn.

Subscribe on the page → confirmation mail (real aiosmtpd) → confirm → change topics on the
manage page → a digest arrives (run_send to the same server) → view it in the browser →
unsubscribe with the RFC 8058 one-click POST from the mail's List-Unsubscribe header.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from newsletter.clock import utcnow
from newsletter.config import Config, load_config
from newsletter.models import SubscriberStatus
from newsletter.operations.smtp_sink import free_port
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from newsletter.web import create_app
from tests.conftest import SmtpServer, write_config
from tests.sends import run_send
from tests.web.conftest import Clock, body_text, web_settings

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed"),
]


class LiveServer:
    """The app under a real uvicorn on loopback (``port``, else a free one), in a thread."""

    def __init__(self, app: object, port: int | None = None) -> None:
        self.port = port or free_port()
        port = self.port
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")  # type: ignore[arg-type]
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@pytest.fixture
def live(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, clock: Clock
) -> Iterator[tuple[str, Config, Store]]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    data = web_settings(db_url, smtp_server)
    data["sender"]["base_url"] = base
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    try:
        with LiveServer(create_app(config, store, None, now=clock), port):
            yield base, config, store
    finally:
        store.close()


def first_link(text: str, base: str, kind: str) -> str:
    m = re.search(rf"{re.escape(base)}/{kind}/\S+", text)
    assert m, f"no {kind} link in:\n{text}"
    return m.group(0)


@pytest.fixture
def clock() -> Clock:
    # The digest's links are signed by run_send on the real clock; the app must read them on it.
    return Clock(utcnow())


def test_subscribe_confirm_manage_receive_view_and_one_click_unsubscribe(
    live: tuple[str, Config, Store], smtp_server: SmtpServer, clock: Clock
) -> None:
    from playwright.sync_api import sync_playwright

    base, config, store = live
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(f"{base}/subscribe")
            page.fill("#email", "ada@example.org")
            page.check("input[name=topics][value=gpu-kernels]")
            page.select_option("#timezone", "Europe/Berlin")
            page.select_option("#send_hour", "8")
            page.click("button[type=submit]")
            page.wait_for_selector("text=Check your inbox")
            assert store.get_subscriber("ada@example.org") is None

            [mail] = smtp_server.messages_to("ada@example.org")
            page.goto(first_link(body_text(mail), base, "confirm"))
            page.click("text=Confirm subscription")
            page.wait_for_selector("text=You are subscribed")

            page.click("text=Manage your subscription")
            page.wait_for_selector("h1:has-text('Your subscription')")
            page.check("input[name=topics][value=rendering]")
            page.click("button:has-text('Save')")
            page.wait_for_selector("text=Saved.")
            sub = store.get_subscriber("ada@example.org")
            assert sub is not None and sub.topics == ("gpu-kernels", "rendering")
            assert sub.timezone == "Europe/Berlin" and sub.send_hour == 8

            run_fetch(config, store, clock())
            report = run_send(config, store, clock())
            assert report.sent == 1, report.errors
            [digest] = [m for m in smtp_server.messages_to("ada@example.org") if m["List-Id"]]
            text = body_text(digest)
            assert "CUDA-L1" in text and "RT-NeRF" in text  # both topics, after the change

            page.goto(first_link(text, base, "archive/view"))
            assert "CUDA-L1" in page.content() and "RT-NeRF" in page.content()
        finally:
            browser.close()

    header = str(digest["List-Unsubscribe"])
    url = re.search(r"<(https?://[^>]+)>", header)
    assert url and digest["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    for _ in range(2):
        r = httpx.post(
            url.group(1),
            content=b"List-Unsubscribe=One-Click",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            follow_redirects=False,
        )
        assert r.status_code == 200
    gone = store.get_subscriber("ada@example.org")
    assert gone is not None and gone.status is SubscriberStatus.UNSUBSCRIBED
    clock.advance(days=1)
    assert run_send(config, store, clock()).sent == 0
