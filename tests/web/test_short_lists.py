"""Short lists only when the day is thin (issue 44, item 5).

A real send through aiosmtpd, on SQLite and on PostgreSQL, of a day where one topic has 3 good
papers (``max_items`` 10: "3 papers today in Zeolites: a quiet day") and another has 5
(``max_items`` 2: two shown, "3 more in the archive", linking a page that lists those 3). The
notes are in both parts of the mail, recorded in the edition's layout, and on the "view in
browser" page exactly as mailed; a reader whose votes re-rank the topics gets the same notes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from email.message import Message
from pathlib import Path

import lxml.html
import pytest
from fastapi.testclient import TestClient

from newsletter.config import Config, load_config
from newsletter.edition.layout import read_layout
from newsletter.models import PaperData
from newsletter.operations.smtp_sink import free_port
from newsletter.sources.ingest import decide
from newsletter.store import Store
from newsletter.subscriber_lists.from_config import seed_subscribers
from newsletter.web import create_app
from tests.cli.test_cli_e2e import text_and_html
from tests.conftest import NOW, SmtpServer, write_config
from tests.sends import run_send
from tests.web.conftest import web_settings
from tests.web.test_browser import ARGS, CHROMIUM, LiveServer
from tests.web.test_view_as_mailed import SEEN, shape

QUIET = [f"Zeolite membranes for separation, part {i}" for i in range(1, 4)]
BUSY = [f"Tokamak plasma confinement, study {i}" for i in range(1, 6)]


ASPECTS = (
    "divertor heat flux",
    "edge localized modes",
    "neutral beam heating",
    "bootstrap current",
)
ASPECTS += ("runaway electrons", "impurity transport", "pedestal stability", "disruption loads")


def _paper(n: int, title: str, word: str) -> PaperData:
    aspect = ASPECTS[n % len(ASPECTS)]
    return PaperData(
        key=f"2611.{n:05d}",
        title=title,
        abstract=f"We study {word} {aspect} in depth; {aspect} results follow.",
        authors=("A. Author",),
        categories=("physics.app-ph",),
        url=f"https://arxiv.org/abs/2611.{n:05d}",
    )


@pytest.fixture
def thin_day(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> Iterator[tuple[Config, Store]]:
    """Two topics: ``zeolites`` with 3 good papers (``max_items`` 10) and ``tokamaks`` with 5
    (its ``max_items`` 2); Ada follows both, Bob too, with a vote that re-ranks them."""
    data = web_settings(db_url, smtp_server)
    data["sender"]["base_url"] = f"http://127.0.0.1:{free_port()}"
    data["topics"] = [
        {"name": "zeolites", "title": "Zeolites", "keywords": ["zeolite"]},
        {"name": "tokamaks", "title": "Tokamaks", "keywords": ["tokamak"], "max_items": 2},
    ]
    data["digest"] = {"max_items": 10}
    data["subscribers"] = [
        {"email": "ada@example.org", "topics": ["zeolites", "tokamaks"]},
        {"email": "bob@example.org", "topics": ["zeolites", "tokamaks"]},
    ]
    config = load_config(write_config(tmp_path, data), environment=False)
    store = Store(config.database_url)
    store.upgrade()
    seed_subscribers(config, store, now=NOW)
    incoming = [_paper(i + 1, t, "zeolite") for i, t in enumerate(QUIET)]
    incoming += [_paper(i + 11, t, "tokamak") for i, t in enumerate(BUSY)]
    store.write_papers("cs-dc", decide(incoming, {}), NOW - timedelta(hours=2))
    bob = store.get_subscriber("bob@example.org")
    last = store.paper_by_key("2611.00015")  # the weakest tokamak paper: Bob wants more of it
    assert bob is not None and last is not None
    store.set_vote(bob.id, last.id, 1, "tokamaks", NOW - timedelta(hours=1))
    try:
        yield config, store
    finally:
        store.close()


def _mail(smtp_server: SmtpServer, address: str) -> tuple[str, str]:
    [msg] = [m for m in smtp_server.messages_to(address) if m["List-Id"]]
    assert isinstance(msg, Message)
    return text_and_html(msg)


def _words(text: str) -> str:
    return " ".join(text.split())


def _titles(html: str) -> list[str]:
    doc = lxml.html.fromstring(html)
    return [_words(a.text_content()) for a in doc.xpath('//a[@class="title"]')]


def test_a_thin_topic_says_so_and_a_cut_one_says_how_many_more_and_where(
    thin_day: tuple[Config, Store], smtp_server: SmtpServer
) -> None:
    config, store = thin_day
    assert run_send(config, store, NOW).sent == 2
    base = config.settings.sender.base_url
    for address in ("ada@example.org", "bob@example.org"):
        text, html = _mail(smtp_server, address)
        flat_html = _words(lxml.html.fromstring(html).text_content())
        flat_text = _words(text)
        for flat in (flat_html, flat_text):
            assert "3 papers today in Zeolites: a quiet day" in flat, address
            assert "3 more in the archive" in flat, address
            assert "a quiet day" not in flat.split("Tokamaks", 1)[1].split("3 more")[0]
        shown = _titles(html)
        assert sorted(t for t in shown if "Tokamak" in t) != sorted(BUSY)
        assert len([t for t in shown if "Tokamak" in t]) == 2
        assert len([t for t in shown if "Zeolite" in t]) == 3
        more = re.search(
            rf'href="({re.escape(base)}/archive/view/[^"#]+/more)#more-tokamaks"', html
        )
        assert more, html
        assert f"{more[1]}#more-tokamaks" in text  # the text part links the same page

        # Recorded: the layout holds each section's limit and the papers the limit left out.
        sub = store.get_subscriber(address)
        assert sub is not None
        record = store.edition_for(sub.id, NOW.date())
        assert record is not None
        layout = read_layout(store.edition_layout(record.id))
        assert layout is not None
        sections = {s.name: s for s in layout.sections}
        assert sections["zeolites"].limit == 10 and sections["zeolites"].later == ()
        assert sections["tokamaks"].limit == 2 and len(sections["tokamaks"].later) == 3
        cut = store.papers_by_ids(sections["tokamaks"].later)
        shown_keys = {p.key for p in store.edition_papers(record.id)}
        assert {p.title for p in cut.values()} == set(BUSY) - set(shown)
        assert not shown_keys & {p.key for p in cut.values()}

    # Bob's vote put the weakest tokamak paper first for him alone; his notes are the same.
    ada_titles = _titles(_mail(smtp_server, "ada@example.org")[1])
    bob_titles = _titles(_mail(smtp_server, "bob@example.org")[1])
    assert "Tokamak plasma confinement, study 5" in bob_titles
    assert "Tokamak plasma confinement, study 5" not in ada_titles

    with TestClient(create_app(config, store, None)) as client:
        for address in ("ada@example.org", "bob@example.org"):
            text, html = _mail(smtp_server, address)
            view = re.search(rf'href="{re.escape(base)}(/archive/view/[^"/]+)"', html)
            assert view
            page = client.get(view[1])
            assert page.status_code == 200
            assert shape(page.text, address) == shape(html, address)
            assert ("note", "3 papers today in Zeolites: a quiet day") in shape(html, address).body
            # The page the note links lists exactly the papers the limit left out.
            more = client.get(f"{view[1]}/more")
            assert more.status_code == 200
            listed = _titles(more.text)
            assert sorted(listed) == sorted(set(BUSY) - set(_titles(html))), address
            assert "Zeolite" not in more.text  # nothing was cut there
            assert 'id="more-tokamaks"' in more.text


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed")
def test_in_chromium_the_notes_read_as_mailed_and_the_more_link_shows_the_rest(
    thin_day: tuple[Config, Store], smtp_server: SmtpServer
) -> None:
    """The mail opened in Chromium beside its view page: the same blocks, notes included; the
    mail's "3 more in the archive" link, clicked, opens a page showing those 3 papers."""
    from playwright.sync_api import sync_playwright

    config, store = thin_day
    base = config.settings.sender.base_url
    port = int(base.rsplit(":", 1)[1])
    assert run_send(config, store, NOW).sent == 2
    _, html = _mail(smtp_server, "ada@example.org")
    view = re.search(rf'href="{re.escape(base)}(/archive/view/[^"/]+)"', html)
    assert view
    with LiveServer(create_app(config, store, None), port), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.set_content(html)
            mail = page.evaluate(SEEN)
            assert "3 papers today in Zeolites: a quiet day" in mail
            assert "3 more in the archive" in mail
            page.click("text=3 more in the archive")
            page.wait_for_selector("#more-tokamaks")
            seen = page.locator("#more-tokamaks").inner_text()
            cut = set(BUSY) - set(_titles(html))
            assert len(cut) == 3
            assert all(t in seen for t in cut), seen
            assert not any(t in seen for t in set(BUSY) - cut)
            page.goto(base + view[1])
            assert page.evaluate(SEEN) == mail
        finally:
            browser.close()
