"""Issue 27, a loose end of item 10: pages that feedback and view links open do not show the
reader's address.

Links no longer carry the address, but the pages they open printed it: the "more/less like
this" page in its heading, the "view in browser" page in the digest's footer ("You get this
digest because ada@example.org subscribed"). Those links live a year and travel with every
forwarded digest, so whoever holds one read the address. The pages now show it masked
(``a…@example.org``): enough for the reader to see which address it is about. Real digest
through a real SMTP server, the real app, SQLite and PostgreSQL.
"""

from __future__ import annotations

import html

from fastapi.testclient import TestClient

from newsletter.addresses import masked_address
from newsletter.config import Config
from newsletter.store import Store
from tests.conftest import SmtpServer
from tests.security.test_link_ages import ADDRESS, send_digest
from tests.web.conftest import Clock, body_text, csrf_of

MASKED = "a…@example.org"


def assert_masked(page: str) -> None:
    text = html.unescape(page)
    assert ADDRESS not in text.casefold()
    assert "ada%40" not in text.casefold() and "ada@" not in text.casefold()
    assert MASKED in text


def test_feedback_and_view_pages_show_the_address_masked(
    client: TestClient,
    web_config: Config,
    web_store: Store,
    smtp_server: SmtpServer,
    clock: Clock,
) -> None:
    mailed = send_digest(web_config, web_store, smtp_server, clock)
    clock.advance(days=1)
    feedback = client.get(mailed["feedback"])
    assert feedback.status_code == 200 and "More papers like this?" in feedback.text
    assert_masked(feedback.text)
    done = client.post(mailed["feedback"], data={"csrf": csrf_of(feedback.text)})
    assert done.status_code == 200 and ADDRESS not in html.unescape(done.text)
    undone = client.post(mailed["feedback"], data={"csrf": csrf_of(done.text), "undo": "1"})
    assert undone.status_code == 200 and ADDRESS not in html.unescape(undone.text)

    view = client.get(mailed["archive/view"])
    assert view.status_code == 200 and "CUDA-L1" in view.text
    assert_masked(view.text)
    # The mailed digest itself still names its reader: it went to that address.
    [digest] = [m for m in smtp_server.messages_to(ADDRESS) if m["List-Id"]]
    assert ADDRESS in body_text(digest)

    clock.advance(days=200)  # an old view page, whose own manage links are gone
    view = client.get(mailed["archive/view"])
    assert view.status_code == 200
    assert_masked(view.text)
    assert_masked(client.get(mailed["feedback"]).text)


def test_the_mask_keeps_one_character_and_the_domain() -> None:
    assert masked_address("ada@example.org") == MASKED
    assert masked_address("émile.x@bücher.example") == "é…@bücher.example"
    assert masked_address("a@b.example") == "a…@b.example"
    assert masked_address("no-at-sign") == "…"
