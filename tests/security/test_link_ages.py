"""Issue 27, item 5: a page reached by one purpose's link never hands out a longer-lived link of
another purpose.

Feedback and "view in browser" links live a year, manage and unsubscribe links 90 days. The
pages that feedback and view links open hand out manage and unsubscribe links signed as of the
link that opened them (so they expire together with those mailed beside it) and, once those
are too old, none: a button mails fresh ones to the reader's own address. Real digest through a
real SMTP server, the real app, SQLite and PostgreSQL.
"""

from __future__ import annotations

import re
from dataclasses import replace

from fastapi.testclient import TestClient

from newsletter.digest.render import Renderer
from newsletter.models import SubscriberStatus
from newsletter.store import Store
from tests import digests as D
from tests.conftest import SmtpServer
from tests.security.helpers import ADA as ADDRESS
from tests.security.helpers import open_feedback_pages, open_view_page
from tests.web.conftest import BASE, Clock, body_text, csrf_of, link_to

TOKEN_LINK = re.compile(r"/(manage|unsubscribe)/([A-Za-z0-9_\-.]+)")


def usable_manage_links(client: TestClient, html: str) -> list[str]:
    """The manage links in a page that still open the manage form (and so change settings)."""
    found = [f"/manage/{token}" for kind, token in TOKEN_LINK.findall(html) if kind == "manage"]
    return [url for url in found if 'name="topics"' in client.get(url).text]


def assert_hands_out_nothing(client: TestClient, html: str) -> None:
    assert "/manage/" not in html and "/unsubscribe/" not in html
    assert usable_manage_links(client, html) == []


def test_old_feedback_and_view_links_open_pages_without_manage_links(
    client: TestClient,
    smtp_server: SmtpServer,
    clock: Clock,
    mailed: dict[str, str],
) -> None:
    clock.advance(days=200)
    # The mail's own manage link is too old...
    assert "has expired" in client.get(mailed["manage"]).text
    # ... and neither the feedback pages nor the view page make a new one.
    feedback, done, undone = open_feedback_pages(client, mailed["feedback"])
    assert_hands_out_nothing(client, feedback.text)
    assert f'action="{mailed["feedback"]}/links"' in feedback.text
    assert "Thanks, noted" in done.text
    assert_hands_out_nothing(client, done.text)
    assert_hands_out_nothing(client, undone.text)

    view = open_view_page(client, mailed["archive/view"])
    assert_hands_out_nothing(client, view.text)
    ask = f"{BASE}{mailed['archive/view']}/links"
    assert ask in view.text  # where "manage" and "unsubscribe" lead instead
    # ... and the footer says so: no "one click" that is a form and a mail away.
    footer = view.text[view.text.index("You get this digest") :]
    assert "Unsubscribe in one click" not in footer and "Manage topics" not in footer
    assert f'<a href="{ask}"' in footer and "Email me a link to unsubscribe or manage" in footer

    # The way back: the reader asks, and fresh links go to their own address.
    before = len(smtp_server.messages_to(ADDRESS))
    form = client.get(ask.removeprefix(BASE))
    assert form.status_code == 200 and "Email me a link" in form.text
    assert "/manage/" not in form.text
    sent = client.post(ask.removeprefix(BASE), data={"csrf": csrf_of(form.text)})
    assert sent.status_code == 200 and "Check your inbox" in sent.text
    assert "/manage/" not in sent.text
    mails = smtp_server.messages_to(ADDRESS)
    assert len(mails) == before + 1
    fresh = client.get(link_to(mails[-1], "manage"))
    assert fresh.status_code == 200 and 'name="topics"' in fresh.text

    sent = client.post(f"{mailed['feedback']}/links", data={"csrf": csrf_of(feedback.text)})
    assert sent.status_code == 200 and len(smtp_server.messages_to(ADDRESS)) == before + 2
    # A GET sends nothing (link scanners), and a form from elsewhere sends nothing.
    assert client.get(f"{mailed['feedback']}/links").status_code == 405
    client.cookies.clear()
    assert client.post(ask.removeprefix(BASE), data={"csrf": "x"}).status_code == 403
    assert len(smtp_server.messages_to(ADDRESS)) == before + 2


def test_pages_hand_out_links_as_old_as_the_link_that_opened_them(
    client: TestClient,
    web_store: Store,
    smtp_server: SmtpServer,
    clock: Clock,
    mailed: dict[str, str],
) -> None:
    clock.advance(days=1)  # a fresh link works as designed: the page links to the manage page
    feedback = client.get(mailed["feedback"])
    [manage] = usable_manage_links(client, feedback.text)
    view = client.get(mailed["archive/view"])
    [from_view] = usable_manage_links(client, view.text)
    assert "Unsubscribe in one click" in view.text  # a fresh page's footer as mailed
    assert "Email me a link" not in view.text
    [(_, unsubscribe)] = [m for m in TOKEN_LINK.findall(view.text) if m[0] == "unsubscribe"]

    clock.advance(days=60)  # day 61: still within the 90 days of the mailed manage link
    assert usable_manage_links(client, client.get(mailed["feedback"]).text) != []
    clock.advance(days=30)  # day 91: they expire with the mailed one, not 90 days after
    for url in (manage, from_view, mailed["manage"]):
        assert "has expired" in client.get(url).text
    r = client.post(f"/unsubscribe/{unsubscribe}")
    assert "has expired" in r.text
    assert "/manage/" not in client.get(mailed["feedback"]).text
    # The mailed List-Unsubscribe link worked for its own 90 days, one click (no cookie, no form).
    clock.advance(days=-2)
    assert client.post(mailed["unsubscribe"]).status_code == 200
    ada = web_store.get_subscriber(ADDRESS)
    assert ada is not None and ada.status is SubscriberStatus.UNSUBSCRIBED


def test_feedback_links_in_an_old_view_page_expire_with_the_view_link(
    client: TestClient,
    smtp_server: SmtpServer,
    clock: Clock,
    mailed: dict[str, str],
) -> None:
    clock.advance(days=364)
    view = client.get(mailed["archive/view"])
    votes = re.findall(r"/feedback/[A-Za-z0-9_\-./~]+", view.text)
    assert votes and client.get(votes[0]).status_code == 200
    clock.advance(days=2)  # a year and a day after the digest: no vote made at day 364 lives on
    assert "has expired" in client.get(votes[0]).text
    assert "has expired" in client.get(mailed["archive/view"]).text


def test_a_subscription_mail_still_opens_the_manage_page(
    client: TestClient, smtp_server: SmtpServer, clock: Clock, mailed: dict[str, str]
) -> None:
    """The "your subscription" mail is signed when it is sent: its links last their full age."""
    clock.advance(days=200)
    form = client.get(f"{mailed['archive/view']}/links")
    client.post(f"{mailed['archive/view']}/links", data={"csrf": csrf_of(form.text)})
    mail = smtp_server.messages_to(ADDRESS)[-1]
    assert "/manage/" in body_text(mail)
    clock.advance(days=89)
    assert 'name="topics"' in client.get(link_to(mail, "manage")).text


def test_both_parts_of_a_digest_say_what_links_that_mail_fresh_ones_do() -> None:
    """The footer of either part, HTML and text, when its manage and unsubscribe links lead to
    the "email me a link" page (``DigestLinks.by_mail``), and as mailed otherwise."""
    renderer = Renderer(D.settings())
    ask = "https://papers.example.org/archive/view/t/links"
    asking = replace(D.links(), manage=ask, unsubscribe=ask, by_mail=True)
    rendered = renderer.render(D.empty_digest(), asking)
    for part in (rendered.html, rendered.text):
        assert "Email me a link to unsubscribe or manage" in part
        assert "one click" not in part and "Manage topics" not in part
    mailed = renderer.render(D.empty_digest(), D.links())
    for part in (mailed.html, mailed.text):
        assert "Unsubscribe in one click" in part and "Email me a link" not in part
