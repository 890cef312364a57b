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
from tests.conftest import SmtpServer
from tests.security.helpers import ADA as ADDRESS
from tests.security.helpers import mailed_digest, open_feedback_pages, open_view_page
from tests.web.conftest import Clock, body_text

MASKED = "a…@example.org"


def assert_masked(page: str) -> None:
    text = html.unescape(page)
    assert ADDRESS not in text.casefold()
    assert "ada%40" not in text.casefold() and "ada@" not in text.casefold()
    assert MASKED in text


def test_feedback_and_view_pages_show_the_address_masked(
    client: TestClient, smtp_server: SmtpServer, clock: Clock, mailed: dict[str, str]
) -> None:
    clock.advance(days=1)
    feedback, done, undone = open_feedback_pages(client, mailed["feedback"])
    assert_masked(feedback.text)
    assert ADDRESS not in html.unescape(done.text)
    assert ADDRESS not in html.unescape(undone.text)

    view = open_view_page(client, mailed["archive/view"])
    assert_masked(view.text)
    # The mailed digest itself still names its reader: it went to that address.
    assert ADDRESS in body_text(mailed_digest(smtp_server, ADDRESS))

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
