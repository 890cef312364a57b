"""Issue 27, item 10: links never carry the reader's address.

Every link of a real digest (sent through a real SMTP server) and of the "your subscription"
mail names the reader by id and a keyed binding; the server checks the binding against the
subscriber's current address. Links made before (with the address) keep working until they
expire; a link whose binding is not the current holder's address (an erased reader's id now
held by someone else) is refused. Real app, SQLite and PostgreSQL.
"""

from __future__ import annotations

import base64
import json
import re
from email.message import Message
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient

from newsletter.config import Config
from newsletter.models import Subscriber, SubscriberStatus
from newsletter.services.link_tokens import Purpose
from newsletter.store import Store
from newsletter.subscribe import Choices, Outcome, Subscriptions
from tests.conftest import SmtpServer
from tests.security.helpers import give_id_to, mailed_digest, send_first_digest
from tests.web.conftest import BASE, Clock

ADDRESS = "Ada.Lovelace@example.org"
URL = re.compile(r"https?://[^\s\"'<>]+")
KINDS = ("manage", "unsubscribe", "feedback", "archive/view")


def parts(msg: Message) -> dict[str, str]:
    """The decoded text of every text part, by content type."""
    out = {}
    for part in msg.walk():
        if part.get_content_maintype() == "text":
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            out[part.get_content_type()] = payload.decode(part.get_content_charset() or "utf-8")
    return out


def payload_of(url: str) -> str:
    """The decoded payload part of a link's token (what anyone who sees the URL can read): the
    longest segment of its path (a vote link's path goes on after it: topic, paper, vote)."""
    token = max(unquote(url).split("/"), key=len)
    first = token.lstrip(".").split(".")[0]
    return base64.urlsafe_b64decode(first + "=" * (-len(first) % 4)).decode("utf-8", "replace")


def assert_no_address(urls: list[str], address: str) -> None:
    local = address.split("@")[0].casefold()
    for url in urls:
        readable = (unquote(url).removeprefix(BASE) + payload_of(url)).casefold()
        assert address.casefold() not in readable, url
        assert local not in readable and "example" not in readable, url


def token_links(text: str) -> list[str]:
    urls = [u.replace("&amp;", "&") for u in URL.findall(text)]
    return [u for u in urls if any(u.startswith(f"{BASE}/{k}/") for k in KINDS)]


def html_links(smtp: SmtpServer, address: str) -> dict[str, str]:
    """The first link of each kind in the digest's HTML part (which has per-paper feedback links)."""
    text = parts(mailed_digest(smtp, address))["text/html"]
    return {
        kind: next(u for u in token_links(text) if u.startswith(f"{BASE}/{kind}/"))
        for kind in KINDS
    }


@pytest.fixture
def ada(web_config: Config, web_store: Store, clock: Clock) -> Subscriber:
    """Ada, subscribed, and her one digest sent through the SMTP server."""
    return send_first_digest(web_config, web_store, clock, ADDRESS)


def test_no_link_of_a_sent_digest_or_a_subscription_mail_carries_the_address(
    client: TestClient, service: Subscriptions, smtp_server: SmtpServer, ada: Subscriber
) -> None:
    digest = mailed_digest(smtp_server, ada.email)
    found = {kind: token_links(text) for kind, text in parts(digest).items()}
    assert set(found) == {"text/plain", "text/html"}
    for text in parts(digest).values():  # no URL at all names the reader
        assert all(ada.email.casefold() not in unquote(u).casefold() for u in URL.findall(text))
    for part, urls in found.items():
        kinds = {k for u in urls for k in KINDS if u.startswith(f"{BASE}/{k}/")}
        # every kind of link is there, and checked; the text part has one "rate these papers"
        # link (the view page) instead of the per-paper feedback links (issue 29)
        wanted = set(KINDS) - {"feedback"} if part == "text/plain" else set(KINDS)
        assert kinds == wanted, part
        assert_no_address(urls, ada.email)
    header = [u.strip("<>") for u in str(digest["List-Unsubscribe"]).split(",")]
    https = [u for u in header if u.startswith("https://")]
    assert https and https[0].startswith(f"{BASE}/unsubscribe/")
    assert_no_address(https, ada.email)

    # They work: each opens the reader's own page (binding checked on the server).
    both = token_links(parts(digest)["text/plain"]) + token_links(parts(digest)["text/html"])
    for kind in ("manage", "archive/view", "feedback", "unsubscribe"):
        url = next(u for u in both if u.startswith(f"{BASE}/{kind}/"))
        r = client.get(url.removeprefix(BASE))
        assert r.status_code == 200, (kind, r.text)

    # The "your subscription" mail (a subscribed address asks again) names no address either.
    choices = Choices(("gpu-kernels",), "UTC", None)
    assert service.request(ada.email, choices, via="test", origin="test") is Outcome.MANAGE_SENT
    mail = smtp_server.messages_to(ada.email)[-1]
    urls = token_links(parts(mail)["text/plain"])
    assert {u.split("/")[3] for u in urls} == {"manage", "unsubscribe"}
    assert_no_address(urls, ada.email)


def test_links_that_carry_the_address_keep_working_until_they_expire(
    client: TestClient,
    web_store: Store,
    service: Subscriptions,
    smtp_server: SmtpServer,
    ada: Subscriber,
) -> None:
    [day] = web_store.sent_edition_dates(5)
    voted = html_links(smtp_server, ada.email)["feedback"]
    assert json.loads(payload_of(voted)) == {
        "s": ada.id,
        "h": service.tokens.binding(ada.email),
        "d": day.isoformat(),
    }  # the digest's token: the paper is in the path, the ledger knows the edition's papers
    record = web_store.edition_for(ada.id, day)
    assert record is not None
    paper = web_store.edition_papers(record.id)[0].key
    old = {"s": ada.id, "e": ada.email}
    tokens = service.tokens
    manage = tokens.make(Purpose.MANAGE, old)
    r = client.get(f"/manage/{manage}")
    assert r.status_code == 200 and 'name="topics"' in r.text
    view = tokens.make(Purpose.VIEW, {**old, "d": day.isoformat()})
    assert client.get(f"/archive/view/{view}").status_code == 200
    feedback = tokens.make(Purpose.FEEDBACK, {**old, "p": paper, "v": 1})
    r = client.get(f"/feedback/{feedback}")
    assert r.status_code == 200 and "More papers like this?" in r.text
    unsubscribe = tokens.make(Purpose.UNSUBSCRIBE, old)
    assert client.post(f"/unsubscribe/{unsubscribe}").status_code == 200
    gone = web_store.subscriber_by_id(ada.id)
    assert gone is not None and gone.status is SubscriberStatus.UNSUBSCRIBED


def test_a_link_bound_to_another_address_is_refused(
    client: TestClient,
    web_store: Store,
    service: Subscriptions,
    smtp_server: SmtpServer,
    clock: Clock,
    ada: Subscriber,
) -> None:
    mailed = html_links(smtp_server, ada.email)
    assert service.forget(ada.email)
    # Ada's id given to Bob (ids are never reused today; this is what the binding guards).
    give_id_to(web_store, ada.id, "bob@example.org", clock())
    r = client.get(mailed["manage"].removeprefix(BASE))
    assert r.status_code == 400 and "bob@example.org" not in r.text
    r = client.get(mailed["feedback"].removeprefix(BASE))
    assert r.status_code == 410 and "bob@example.org" not in r.text
    r = client.get(mailed["archive/view"].removeprefix(BASE))
    assert r.status_code == 404 and "bob@example.org" not in r.text
    assert client.post(mailed["unsubscribe"].removeprefix(BASE)).status_code == 200
    bob = web_store.subscriber_by_id(ada.id)
    assert bob is not None and bob.status is SubscriberStatus.ACTIVE  # untouched

    # A binding made for another address, signed with the right key, opens nothing either.
    forged = service.tokens.make(
        Purpose.MANAGE, {"s": ada.id, "h": service.tokens.binding("mallory@example.org")}
    )
    assert client.get(f"/manage/{forged}").status_code == 400
    # Bob's own link works, whatever the letter case of his address.
    own = {"s": ada.id, "h": service.tokens.binding("Bob@Example.org")}
    assert client.get(f"/manage/{service.tokens.make(Purpose.MANAGE, own)}").status_code == 200
