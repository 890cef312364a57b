"""The "view in browser" page shows the digest that was mailed (issue 43, item 1).

The bundled demo (its config, feeds and three readers) is sent on SQLite and on PostgreSQL to a
real SMTP server; each reader's view page must show what their mail showed: the header line,
the topic labels, the sections with their counts, the papers in their order, each card (title,
authors, signals, excerpt, links) and each reason. Only the reader's own links and the masked
address differ. Then the world moves on (the readers change topics, vote, the papers' signals
change, a paper is revised) and the page still shows the mail, saying what it cannot show.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from email.message import Message
from pathlib import Path
from typing import Any

import lxml.html
import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from newsletter.config import Config, load_config
from newsletter.models import PaperData
from newsletter.operations.demo import shipped_demo
from newsletter.sources.ingest import decide, run_fetch
from newsletter.store import Store
from newsletter.store import tables as t
from newsletter.subscriber_lists.from_config import seed_subscribers
from newsletter.web import create_app
from tests.cli.test_cli_e2e import text_and_html
from tests.conftest import NOW, SmtpServer, write_config
from tests.sends import run_send
from tests.web.test_browser import ARGS, CHROMIUM, LiveServer

BASE = "http://localhost:8000"  # the demo's base_url


def _words(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class Shape:
    """What a reader sees in a digest's HTML, links to their own pages and their address
    aside."""

    head: tuple[str, ...]
    """The header line, the date and the topic labels."""
    body: tuple[tuple[str, ...], ...]
    """Section titles with counts, each card (its text and its paper's links), quiet lines,
    each section's note (a quiet day, or how many more are in the archive)."""
    foot: str


def shape(html: str, address: str) -> Shape:
    """The :class:`Shape` of a digest page or mail (the address, whole or masked, blanked)."""
    doc = lxml.html.fromstring(html)
    head = doc.xpath('//td[contains(@class, "head")]')[0]
    heading = (
        _words(head.xpath('.//div[@class="h1"]')[0].text_content()),
        _words(head.xpath('.//div[@class="date"]')[0].text_content()),
        *(_words(p.text_content()) for p in head.xpath('.//span[@class="pill"]')),
    )
    body: list[tuple[str, ...]] = []
    blocks = (
        '//td[contains(@class, "section") or contains(@class, "card") or contains(@class, "empty")'
        ' or contains(@class, "note")]'
    )
    for td in doc.xpath(blocks):
        kind = td.get("class").split()[0]
        own = tuple(
            a.get("href")
            for a in td.xpath(".//a")
            if not a.get("href", "").startswith(BASE)  # the paper's links, not the reader's
        )
        body.append((kind, _words(td.text_content()), *own))
    foot = _words(doc.xpath('//td[contains(@class, "foot")]')[0].text_content())
    local, domain = address.split("@")
    foot = re.sub(rf"{re.escape(local[0])}\S*@{re.escape(domain)}", "ADDRESS", foot)
    foot = foot.replace(" · View in browser", "")  # the page has no link to itself
    return Shape(heading, tuple(body), foot)


@pytest.fixture
def demo(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Iterator[tuple[Config, Store]]:
    """The bundled demo's config, feeds and readers on ``db_url``, relaying to the test's
    SMTP server; migrated, seeded and fetched (not sent)."""
    config_file, feeds = shipped_demo()
    shutil.copytree(feeds, tmp_path / feeds.name)
    data = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    data["database"] = {"url": db_url}
    data["smtp"] = {"host": smtp_server.host, "port": smtp_server.port}
    config = load_config(write_config(tmp_path, data), environment=False)
    store = Store(config.database_url)
    store.upgrade()
    seed_subscribers(config, store, now=NOW)
    run_fetch(config, store, NOW)
    try:
        yield config, store
    finally:
        store.close()


def mailed(smtp_server: SmtpServer) -> dict[str, tuple[str, str]]:
    """Each reader's digest: address → (its view link's path, its HTML)."""
    out = {}
    for r in smtp_server.received:
        msg: Message = r.message
        if not msg["List-Id"]:
            continue
        html = text_and_html(msg)[1]
        view = re.search(rf'href="{re.escape(BASE)}(/archive/view/[^"]+)"', html)
        assert view, html
        out[r.rcpt_tos[0]] = (view[1], html)
    return out


def test_every_demo_readers_view_page_is_the_digest_mailed(
    demo: tuple[Config, Store], smtp_server: SmtpServer
) -> None:
    config, store = demo
    assert run_send(config, store, NOW).sent == 3
    digests = mailed(smtp_server)
    assert sorted(digests) == ["ada@example.org", "grace@example.org", "marie@example.org"]
    with TestClient(create_app(config, store, None)) as client:
        pages = {a: client.get(view) for a, (view, _) in digests.items()}
        for address, (_, html) in digests.items():
            assert pages[address].status_code == 200
            assert shape(pages[address].text, address) == shape(html, address), address
        # The cases the issue quotes, as Grace's mail had them.
        grace = shape(digests["grace@example.org"][1], "grace@example.org")
        assert grace.head[0] == "11 new papers in GPU kernels, LLM serving"
        assert ("section", "GPU kernels · 8") in grace.body
        # A thin topic says so (issue 44): the page shows the mail's note too.
        assert ("note", "3 papers today in LLM serving: a quiet day") in grace.body
        assert "Also in this edition" not in pages["grace@example.org"].text
        assert "as it was mailed" not in pages["grace@example.org"].text  # no note: all kept

        # The world moves on: other topics, votes, other signals. The pages do not.
        for address in digests:
            sub = store.get_subscriber(address)
            assert sub is not None
            other = "gpu-kernels" if sub.topics == ("neural-rendering",) else "neural-rendering"
            store.set_topics(sub.id, [other])
            first = store.edition_papers(store.edition_for(sub.id, _day(store, sub.id)).id)[0]
            store.set_vote(sub.id, first.id, -1, None, NOW + timedelta(hours=1))
        _more_upvotes(store)
        for address, (view, html) in digests.items():
            page = client.get(view)
            assert shape(page.text, address) == shape(html, address), address


def _day(store: Store, subscriber_id: int) -> Any:
    """The date of the reader's one edition."""
    q = select(t.editions.c.edition_date).where(t.editions.c.subscriber_id == subscriber_id)
    with store.engine.connect() as conn:
        return conn.execute(q).scalar_one()


def _more_upvotes(store: Store) -> None:
    """Every paper with upvotes gets 1,000 more (a later fetch of Hugging Face)."""
    with store.engine.begin() as conn:
        conn.execute(
            update(t.papers)
            .where(t.papers.c.upvotes.is_not(None))
            .values(upvotes=t.papers.c.upvotes + 1000)
        )


def test_a_paper_revised_after_the_send_is_shown_revised_and_the_page_says_so(
    demo: tuple[Config, Store], smtp_server: SmtpServer
) -> None:
    config, store = demo
    assert run_send(config, store, NOW).sent == 3
    view, html = mailed(smtp_server)["ada@example.org"]
    sub = store.get_subscriber("ada@example.org")
    assert sub is not None
    first = store.edition_papers(store.edition_for(sub.id, _day(store, sub.id)).id)[0]
    revised = PaperData(
        key=first.key,
        title=first.title,
        abstract="A revised abstract.",
        version=(first.version or 1) + 1,
    )
    later = NOW + timedelta(hours=20)
    store.write_papers("arxiv-cs-dc-tue", decide([revised], {first.key: first}), later)
    with TestClient(create_app(config, store, None)) as client:
        page = client.get(view).text
    assert "A revised abstract." in page
    assert "1 paper was revised since this digest was mailed" in _words(page)
    before, after = shape(html, sub.email), shape(page, sub.email)
    assert before.head == after.head and len(before.body) == len(after.body)


@pytest.mark.parametrize("layout", ["none", "another reader's", "unreadable"])
def test_an_edition_sent_before_digests_were_recorded_is_ranked_again_and_says_so(
    demo: tuple[Config, Store], smtp_server: SmtpServer, layout: str
) -> None:
    """Editions sent before migration 0015 have only their papers: the page ranks them again
    (every paper still shown) and says that sections, order and reasons may differ. So does
    one whose layout does not describe its papers, or cannot be read."""
    config, store = demo
    assert run_send(config, store, NOW).sent == 3
    view, html = mailed(smtp_server)["grace@example.org"]
    ada = store.get_subscriber("ada@example.org")
    assert ada is not None
    ada_layout = store.edition_layout(store.edition_for(ada.id, _day(store, ada.id)).id)
    value = {"none": None, "another reader's": ada_layout, "unreadable": '{"v":1,"t":'}[layout]
    with store.engine.begin() as conn:
        conn.execute(update(t.editions).values(layout=value))
    with TestClient(create_app(config, store, None)) as client:
        page = client.get(view).text
    flat = _words(page)
    assert "ranked again" in flat and "may differ from the email" in flat
    titles = re.findall(r'class="title"[^>]*>([^<]+)<', html)
    assert len(titles) == 11 and all(title in page for title in titles)


SEEN = """() => Array.from(document.querySelectorAll(
    '.h1, .date, .pill, td.section, td.card, td.empty, td.note')).map(e => e.innerText)"""
"""What a reader sees of a digest in the browser, block by block (its footer aside)."""


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
def test_in_chromium_each_view_page_reads_as_the_mail_and_an_old_edition_says_why_not(
    demo: tuple[Config, Store], smtp_server: SmtpServer
) -> None:
    """Each demo reader's mail opened in Chromium, beside their view page served by uvicorn:
    the same text, block by block. An edition without a layout shows the note."""
    from playwright.sync_api import sync_playwright

    config, store = demo
    assert run_send(config, store, NOW).sent == 3
    digests = mailed(smtp_server)
    with (
        LiveServer(create_app(config, store, None)) as server,
        sync_playwright() as pw,
    ):
        base = f"http://127.0.0.1:{server.port}"
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page()
            for address, (view, html) in digests.items():
                page.set_content(html)
                mail = page.evaluate(SEEN)
                page.goto(base + view)
                assert page.evaluate(SEEN) == mail, address
                assert page.locator("[role=note]").count() == 0
            with store.engine.begin() as conn:
                conn.execute(update(t.editions).values(layout=None))
            page.goto(base + digests["grace@example.org"][0])
            note = page.locator("[role=note]")
            assert note.is_visible() and "ranked again" in note.inner_text()
        finally:
            browser.close()
