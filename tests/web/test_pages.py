"""The pages and their protections, through the real app on a real database and SMTP server."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from newsletter.models import SubscriberStatus
from newsletter.services.link_tokens import Purpose
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from tests.conftest import SmtpServer
from tests.web.conftest import Clock, body_text, csrf_of, link_to


def subscribe(client: TestClient, email: str, *topics: str, **extra: str) -> tuple[int, str]:
    form = client.get("/subscribe")
    data = {
        "csrf": csrf_of(form.text),
        "email": email,
        "topics": list(topics or ("gpu-kernels",)),
        "timezone": "Europe/Berlin",
        "send_hour": "8",
        **extra,
    }
    r = client.post("/subscribe", data=data)
    return r.status_code, r.text


def confirm(client: TestClient, smtp: SmtpServer, email: str) -> None:
    path = link_to(smtp.messages_to(email)[-1], "confirm")
    page = client.get(path)
    assert page.status_code == 200 and "Confirm subscription" in page.text
    done = client.post(path)
    assert done.status_code == 200 and "You are subscribed" in done.text


def test_nothing_is_active_until_the_link_is_confirmed(
    client: TestClient, smtp_server: SmtpServer, web_store: Store
) -> None:
    status, _ = subscribe(client, "ada@example.org", "gpu-kernels", "rendering")
    assert status == 200
    assert web_store.get_subscriber("ada@example.org") is None  # nothing stored yet
    [mail] = smtp_server.messages_to("ada@example.org")
    assert mail["Subject"] == "Confirm your subscription"
    assert "GPU kernels" in body_text(mail) and "Neural rendering" in body_text(mail)
    path = link_to(mail, "confirm")
    client.get(path)  # a link scanner's GET confirms nothing
    assert web_store.get_subscriber("ada@example.org") is None
    confirm(client, smtp_server, "ada@example.org")
    sub = web_store.get_subscriber("ada@example.org")
    assert sub is not None and sub.status is SubscriberStatus.ACTIVE
    assert sub.topics == ("gpu-kernels", "rendering")
    assert sub.timezone == "Europe/Berlin" and sub.send_hour == 8 and sub.confirmed is not None
    consent = web_store.consent_record(sub.id)
    assert consent is not None and consent["how"] == "web form"
    assert consent["requested_from"].startswith("web ") and consent["confirmed"]
    assert client.post(path).status_code == 200  # confirming twice is harmless
    assert web_store.count_subscribers() == 1


def test_same_answer_for_new_pending_and_subscribed_addresses(
    client: TestClient, smtp_server: SmtpServer
) -> None:
    _, new = subscribe(client, "new@example.org")
    subscribe(client, "pending@example.org")
    _, pending = subscribe(client, "pending@example.org")
    subscribe(client, "member@example.org")
    confirm(client, smtp_server, "member@example.org")
    _, member = subscribe(client, "member@example.org")

    def scrub(html: str) -> str:
        return re.sub(r'value="[^"]*"', "", html)

    assert scrub(new) == scrub(pending) == scrub(member)
    assert "Check your inbox" in new
    # The mail tells them apart, and only the owner of the address reads it.
    assert smtp_server.messages_to("pending@example.org")[-1]["Subject"] == (
        "Confirm your subscription"
    )
    last = smtp_server.messages_to("member@example.org")[-1]
    assert last["Subject"] == "Your subscription"
    assert link_to(last, "manage") and link_to(last, "unsubscribe")


def test_form_without_a_valid_csrf_token_is_refused(
    client: TestClient, smtp_server: SmtpServer
) -> None:
    data = {"email": "ada@example.org", "topics": "gpu-kernels"}
    assert client.post("/subscribe", data=data).status_code == 403
    client.get("/subscribe")  # has a cookie now, but a forged field
    assert client.post("/subscribe", data={**data, "csrf": "forged"}).status_code == 403
    other = TestClient(client.app, base_url="https://papers.example.org")
    stolen = csrf_of(other.get("/subscribe").text)  # a token for another browser's cookie
    assert client.post("/subscribe", data={**data, "csrf": stolen}).status_code == 403
    assert smtp_server.received == []


def test_honeypot_gets_the_same_answer_and_no_mail(
    client: TestClient, smtp_server: SmtpServer
) -> None:
    status, html = subscribe(client, "bot@example.org", website="http://spam.example")
    assert status == 200 and "Check your inbox" in html
    assert smtp_server.received == []


def test_invalid_address_and_topic_are_named(client: TestClient, smtp_server: SmtpServer) -> None:
    status, html = subscribe(client, "not an address")
    assert status == 400 and "not a valid email address" in html
    status, html = subscribe(client, "ada@example.org", "astrology")
    assert status == 400 and "unknown topic astrology" in html
    status, html = subscribe(client, "ada@example.org\r\nBcc: x@example.org")
    assert status == 400
    assert smtp_server.received == []


def test_rate_limits_per_client_and_per_address(
    client: TestClient, smtp_server: SmtpServer, clock: Clock
) -> None:
    for _ in range(3):
        assert subscribe(client, "victim@example.org")[0] == 200
    assert subscribe(client, "victim@example.org")[0] == 200  # same answer...
    assert len(smtp_server.messages_to("victim@example.org")) == 3  # ...but no 4th mail
    statuses = [subscribe(client, f"u{i}@example.org")[0] for i in range(7)]
    assert statuses[:6] == [200] * 6 and statuses[6] == 429  # 10 per hour from one client
    clock.advance(hours=1, seconds=1)
    assert subscribe(client, "later@example.org")[0] == 200
    clock.advance(days=1)
    assert subscribe(client, "victim@example.org")[0] == 200
    assert len(smtp_server.messages_to("victim@example.org")) == 4


def test_security_headers(client: TestClient) -> None:
    r = client.get("/subscribe")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    assert "frame-ancestors 'none'" in csp
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert "<script" not in r.text
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie


def test_tampered_foreign_and_expired_tokens(
    client: TestClient, smtp_server: SmtpServer, service: Subscriptions, clock: Clock
) -> None:
    subscribe(client, "ada@example.org")
    path = link_to(smtp_server.messages_to("ada@example.org")[-1], "confirm")
    token = path.rsplit("/", 1)[1]
    tampered = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
    r = client.post(f"/confirm/{tampered}")
    assert r.status_code == 400 and "not valid" in r.text
    clock.advance(days=3, seconds=1)  # confirmation links expire after web.confirm_days
    r = client.post(path)
    assert r.status_code == 400 and "expired" in r.text
    clock.advance(days=-3, seconds=-1)
    client.post(path)
    sub = service.store.get_subscriber("ada@example.org")
    assert sub is not None
    manage = service.tokens.make(Purpose.MANAGE, {"s": sub.id, "e": sub.email})
    assert client.post(f"/unsubscribe/{manage}").status_code == 400  # a manage token
    unsub = service.tokens.make(Purpose.UNSUBSCRIBE, {"s": sub.id, "e": sub.email})
    clock.advance(days=30)
    assert client.get(f"/unsubscribe/{unsub}").status_code == 200  # still good after 30 days
    clock.advance(days=61)
    assert client.post(f"/unsubscribe/{unsub}").status_code == 400  # 91 days: expired
    sub = service.store.get_subscriber("ada@example.org")
    assert sub is not None and sub.status is SubscriberStatus.ACTIVE


def test_one_click_unsubscribe(
    client: TestClient, smtp_server: SmtpServer, service: Subscriptions
) -> None:
    subscribe(client, "ada@example.org")
    confirm(client, smtp_server, "ada@example.org")
    sub = service.store.get_subscriber("ada@example.org")
    assert sub is not None
    path = service.links(sub).unsubscribe.removeprefix("https://papers.example.org")
    page = client.get(path)
    assert page.status_code == 200 and "Unsubscribe" in page.text
    assert service.store.get_subscriber("ada@example.org").status is SubscriberStatus.ACTIVE  # type: ignore[union-attr]
    bare = TestClient(client.app, base_url="https://papers.example.org")  # no cookies at all
    for _ in range(2):  # idempotent
        r = bare.post(
            path,
            content=b"List-Unsubscribe=One-Click",
            follow_redirects=False,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 200 and "unsubscribed" in r.text
    after = service.store.get_subscriber("ada@example.org")
    assert after is not None and after.status is SubscriberStatus.UNSUBSCRIBED
    # The manage link now says so, and subscribing again starts a new confirmation.
    manage = service.links(after).manage.removeprefix("https://papers.example.org")
    assert "not subscribed" in client.get(manage).text
    subscribe(client, "ada@example.org")
    assert smtp_server.messages_to("ada@example.org")[-1]["Subject"] == "Confirm your subscription"


def test_manage_changes_topics_hour_frequency_and_pause(
    client: TestClient, smtp_server: SmtpServer, service: Subscriptions
) -> None:
    subscribe(client, "ada@example.org")
    confirm(client, smtp_server, "ada@example.org")
    sub = service.store.get_subscriber("ada@example.org")
    assert sub is not None
    path = service.links(sub).manage.removeprefix("https://papers.example.org")
    page = client.get(path)
    data = {
        "csrf": csrf_of(page.text),
        "topics": ["rendering"],
        "send_hour": "18",
        "frequency": "weekly",
        "paused": "1",
    }
    r = client.post(path, data=data, follow_redirects=False)
    assert r.status_code == 303
    assert "Saved." in client.get(r.headers["location"]).text
    got = service.store.get_subscriber("ada@example.org")
    assert got is not None and got.topics == ("rendering",)
    assert got.send_hour == 18 and got.frequency.value == "weekly"
    assert got.status is SubscriberStatus.PAUSED
    del data["paused"]
    client.post(path, data=data)
    resumed = service.store.get_subscriber("ada@example.org")
    assert resumed is not None and resumed.status is SubscriberStatus.ACTIVE
    assert client.post(path, data={**data, "csrf": "x"}).status_code == 403
    bad = client.post(path, data={**data, "topics": []})
    assert bad.status_code == 400 and "choose at least one topic" in bad.text


def test_erased_subscriber_links_lead_nowhere(
    client: TestClient, smtp_server: SmtpServer, service: Subscriptions
) -> None:
    subscribe(client, "ada@example.org")
    confirm(client, smtp_server, "ada@example.org")
    sub = service.store.get_subscriber("ada@example.org")
    assert sub is not None
    links = service.links(sub)
    assert service.forget("ada@example.org")
    unsub = links.unsubscribe.removeprefix("https://papers.example.org")
    assert client.post(unsub).status_code == 200  # nothing left to unsubscribe: still 200
    assert client.get(links.manage.removeprefix("https://papers.example.org")).status_code == 400
