"""Attacks the adversarial review of issue 16 found HOLDING, kept that way.

Many are covered elsewhere already; this module adds the variants the suite lacked. Where each
attack is covered:

XSS in feed fields (title, abstract, authors, categories, links)
    tests/digest/test_render.py::test_feed_text_stays_text_in_both_parts (a hostile paper in both
    renderers: every field, ``javascript:`` and quote-breaking links, template syntax);
    tests/sources/test_parsers.py::test_hostile_entry_stays_text (the parser keeps markup as text);
    tests/deliver/test_mime.py::test_hostile_feed_text_gives_the_same_message_as_email_message.
    Here: :func:`test_xss_in_every_feed_field_through_ingest_mail_and_archive`, a hostile feed
    through the real ingest into both databases, the digest a real SMTP server receives, and
    the web archive's day page.
CRLF in addresses and display names
    tests/test_addresses.py::test_bad_addresses_are_refused_naming_the_address,
    ::test_names_with_line_breaks_or_too_long_are_refused,
    ::test_cli_add_refuses_injection_and_stores_nothing (CLI),
    ::test_import_reports_bad_rows_by_line_and_keeps_the_rest (CSV import),
    ::test_config_seed_with_injected_name_is_a_config_error (config ``subscribers:``);
    tests/config/test_config.py::test_header_injecting_address_is_refused (``sender.from``);
    tests/web/test_pages.py::test_invalid_address_and_topic_are_named (CRLF in the form);
    tests/deliver/test_mime.py::test_no_cr_or_lf_from_data_reaches_a_header.
    Here: bare CR, bare LF, NUL and CRLF in the form and the JSON API
    (:func:`test_line_breaks_in_addresses_are_refused_by_form_and_api`); CRLF in every address
    and name the config takes (:func:`test_line_breaks_in_config_addresses_are_refused`).
Token tampering and expiry (confirm, manage, unsubscribe)
    tests/web/test_pages.py::test_tampered_foreign_and_expired_tokens (a tampered and an expired
    confirm link, a manage token used to unsubscribe, unsubscribe links at 30 and 91 days),
    ::test_erased_subscriber_links_lead_nowhere; tests/services/test_link_tokens.py.
    Here: :func:`test_forged_and_expired_tokens_are_refused_everywhere`, every purpose x
    (damaged signature, another token's payload, another key, another purpose, truncated,
    expired) on the pages and the API, with nobody's state changed.
CSRF on the web forms
    tests/web/test_pages.py::test_form_without_a_valid_csrf_token_is_refused (subscribe form:
    none, forged, another browser's), ::test_manage_changes_topics_hour_frequency_and_pause
    (a forged field on the manage form).
    Here: the manage form with no token and with another browser's token
    (:func:`test_manage_form_needs_its_own_csrf_token`).
Account enumeration
    tests/web/test_pages.py::test_same_answer_for_new_pending_and_subscribed_addresses (form);
    tests/web/test_api.py::test_subscribe_confirm_manage_unsubscribe_by_api (the API, twice).
    Here: form and API answer alike for new, pending, active, paused and unsubscribed
    addresses (:func:`test_subscribe_answers_alike_whatever_the_address_state`).
SSRF
    tests/sources/test_fetch.py::test_blocked_reason (the address table),
    ::test_loopback_needs_allow_private, ::test_redirect_to_metadata_address_is_blocked_on_that_hop,
    ::test_a_name_resolving_to_a_private_address_is_blocked,
    ::test_redirects_are_followed_and_checked (a ``file://`` redirect);
    tests/sources/test_ingest.py::test_private_address_refused_unless_allowed.
    Here: literal, decimal, octal, hex, short, IPv6 and IPv4-mapped URLs through the real
    resolver against a real server on loopback, refused before connecting
    (:func:`test_internal_addresses_in_any_spelling_are_refused_before_connecting`), the same
    through ``newsletter fetch``'s ingest, and a redirect to each
    (:func:`test_a_redirect_to_an_internal_address_is_refused_on_that_hop`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import lxml.html
import pytest
from fastapi.testclient import TestClient

from newsletter.config import ConfigError, load_config
from newsletter.models import SubscriberStatus
from newsletter.services.link_tokens import Purpose, Tokens
from newsletter.sources.fetch import BlockedAddress, Fetcher, FetchError, system_resolver
from newsletter.sources.ingest import run_fetch
from newsletter.store import Store
from newsletter.subscribe import Subscriptions
from newsletter.web import create_app
from tests.conftest import NOW, SmtpServer, write_config
from tests.feedserver import Answer, FeedServer, feed_server
from tests.sends import run_send
from tests.web.conftest import BASE, Clock, csrf_of, link_to, web_settings

# ---------------------------------------------------------------------------- XSS

JS = re.compile(r"^\s*(javascript|data|vbscript):", re.IGNORECASE)

HOSTILE_RSS = """<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:dc="http://purl.org/dc/elements/1.1/">
<channel><title>Hostile lab</title><link>https://lab.example.org/</link>
<description>every field carries a payload</description>
<item>
  <title><![CDATA[<script>alert("title")</script><img src=x onerror=alert(1)> CUDA GEMM "quoted" 'single' </td></table>]]></title>
  <link>javascript:alert(document.cookie)</link>
  <guid isPermaLink="false">https://doi.org/10.1234/xss.1</guid>
  <description><![CDATA[<a href="javascript:alert(4)">GEMM</a> "><script>alert(5)</script> <svg onload=alert(6)> {{ 7*7 }} matrix multiplication]]></description>
  <category><![CDATA[<svg onload=alert(2)>cs.DC]]></category>
  <dc:creator><![CDATA[<iframe src="javascript:alert(3)"></iframe>Eve, <b onmouseover=alert(7)>Mallory</b>]]></dc:creator>
  <pubDate>Mon, 16 Nov 2026 12:00:00 +0000</pubDate>
</item>
<item>
  <title>CUDA kernels with a quote-breaking link</title>
  <link>https://lab.example.org/post?a="><script>alert(8)</script></link>
  <description>GEMM on GPUs</description>
  <pubDate>Mon, 16 Nov 2026 12:00:00 +0000</pubDate>
</item>
</channel></rss>
"""

HOSTILE_HF = [
    {
        "paper": {
            "id": "2611.07777",
            "title": "<script>alert('hf')</script> CUDA GEMM <img src=x onerror=alert(9)>",
            "summary": "<iframe src=javascript:alert(10)></iframe> matrix multiplication",
            "authors": [{"name": "<svg/onload=alert(11)>"}],
            "publishedAt": "2026-11-16T12:00:00.000Z",
            "upvotes": 50,
            "githubRepo": 'https://github.com/x/y"><script>alert(12)</script>',
        },
        "numComments": 1,
    }
]


def assert_inert(html: str, where: str) -> None:
    """No script, no event handler, no active URL: the feed's markup is only text here."""
    tree = lxml.html.document_fromstring(html)
    assert tree.xpath("//script | //iframe | //svg | //img[@onerror] | //object | //embed") == []
    handlers = [
        (e.tag, a)
        for e in tree.iter()
        if isinstance(e.tag, str)
        for a in e.attrib
        if a.startswith("on")
    ]
    assert handlers == [], where
    for attr in ("href", "src", "action", "formaction"):
        for value in tree.xpath(f"//@{attr}"):
            assert not JS.match(value), (where, attr, value)
            assert "<script" not in value.lower(), (where, attr, value)


def test_xss_in_every_feed_field_through_ingest_mail_and_archive(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> None:
    (tmp_path / "hostile.rss").write_text(HOSTILE_RSS, encoding="utf-8")
    (tmp_path / "hostile.json").write_text(json.dumps(HOSTILE_HF), encoding="utf-8")
    data = web_settings(db_url, smtp_server)
    data["sources"] = [
        {"name": "lab", "kind": "feed", "url": str(tmp_path / "hostile.rss")},
        {"name": "hf", "kind": "hf_daily", "url": str(tmp_path / "hostile.json")},
    ]
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    try:
        report = run_fetch(config, store, NOW)
        assert report.new == 3, report
        store.add_subscriber("ada@example.org", topics=["gpu-kernels"], now=NOW)
        assert run_send(config, store, NOW).sent == 1
        [mail] = smtp_server.received
        msg = message_from_bytes(mail.data, policy=policy.default)
        assert isinstance(msg, EmailMessage)
        html_part = msg.get_body(preferencelist=("html",))
        assert html_part is not None
        html = str(html_part.get_content())
        assert_inert(html, "digest")
        text = lxml.html.document_fromstring(html).text_content()
        assert "CUDA GEMM" in text and "alert" in text  # shown, as text

        clock = Clock()
        with TestClient(create_app(config, store, None, now=clock), base_url=BASE) as client:
            day = client.get("/archive/2026-11-17")
            assert day.status_code == 200 and "CUDA GEMM" in day.text
            assert_inert(day.text, "archive day page")
    finally:
        store.close()


# ---------------------------------------------------------------------------- CRLF


def form_subscribe(client: TestClient, email: str) -> int:
    form = client.get("/subscribe")
    data = {"csrf": csrf_of(form.text), "email": email, "topics": ["gpu-kernels"]}
    return client.post("/subscribe", data=data).status_code


@pytest.mark.parametrize(
    "email",
    [
        "ada@example.org\r\nBcc: victim@example.org",
        "ada@example.org\nBcc: victim@example.org",
        "ada@example.org\rBcc: victim@example.org",
        "ada@example.org\x00Bcc: victim@example.org",
        "ada@example.org%0d%0aBcc: victim@example.org",
        "Ada\r\n <ada@example.org>",
    ],
    ids=["crlf", "lf", "cr", "nul", "percent-encoded", "crlf-in-name"],
)
def test_line_breaks_in_addresses_are_refused_by_form_and_api(
    email: str, client: TestClient, smtp_server: SmtpServer, web_store: Store
) -> None:
    assert form_subscribe(client, email) == 400
    r = client.post("/api/subscribe", json={"email": email, "topics": ["gpu-kernels"]})
    assert r.status_code == 400 and r.json()["field"] == "email"
    assert smtp_server.received == []
    assert web_store.count_subscribers() == 0


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("sender", "from", "Papers\r\nBcc: victim@example.org <digest@papers.example.org>"),
        ("sender", "reply_to", "help@papers.example.org\r\nBcc: victim@example.org"),
        ("inbound", "address", "req@papers.example.org\nBcc: victim@example.org"),
        ("alerts", "email", "ops@papers.example.org\r\nBcc: victim@example.org"),
    ],
)
def test_line_breaks_in_config_addresses_are_refused(
    section: str, key: str, value: str, tmp_path: Path, db_url: str, smtp_server: SmtpServer
) -> None:
    data = web_settings(db_url, smtp_server)
    data.setdefault(section, {})[key] = value
    with pytest.raises(ConfigError, match=f"{section}.{key}"):
        load_config(write_config(tmp_path, data))


# ---------------------------------------------------------------------------- tokens


@pytest.fixture
def members(client: TestClient, service: Subscriptions, smtp_server: SmtpServer) -> dict[str, str]:
    """Ada (active) and Bob (asked, not confirmed): their real links, by purpose."""
    from newsletter.subscribe import Choices

    choices = Choices(("gpu-kernels",), "UTC")
    service.request("ada@example.org", choices, via="web", origin="test")
    assert (
        client.post(link_to(smtp_server.messages_to("ada@example.org")[-1], "confirm")).status_code
        == 200
    )
    service.request("bob@example.org", choices, via="web", origin="test")
    ada = service.store.get_subscriber("ada@example.org")
    assert ada is not None
    links = service.links(ada)
    return {
        "confirm": link_to(smtp_server.messages_to("bob@example.org")[-1], "confirm").rsplit(
            "/", 1
        )[1],
        "manage": links.manage.rsplit("/", 1)[1],
        "unsubscribe": links.unsubscribe.rsplit("/", 1)[1],
    }


def refused(client: TestClient, purpose: str, token: str) -> list[int]:
    """The status of every page and API call that takes a token of this purpose."""
    if purpose == "confirm":
        calls = [
            client.get(f"/confirm/{token}"),
            client.post(f"/confirm/{token}"),
            client.post("/api/confirm", json={"token": token}),
        ]
    elif purpose == "manage":
        calls = [
            client.get(f"/manage/{token}"),
            client.get(f"/api/subscription/{token}"),
            client.put(f"/api/subscription/{token}", json={"topics": ["rendering"]}),
        ]
    else:
        calls = [client.post(f"/unsubscribe/{token}"), client.post(f"/api/unsubscribe/{token}")]
    return [r.status_code for r in calls]


@pytest.mark.parametrize("purpose", ["confirm", "manage", "unsubscribe"])
def test_forged_and_expired_tokens_are_refused_everywhere(
    purpose: str,
    members: dict[str, str],
    client: TestClient,
    service: Subscriptions,
    clock: Clock,
) -> None:
    token = members[purpose]
    payload, stamp, signature = token.rsplit(".", 2)
    # Someone else's payload under Ada's (or Bob's) signature.
    other_payload = service.tokens.make(
        Purpose(purpose), {"s": 999, "e": "eve@example.org", "t": ["gpu-kernels"]}
    ).rsplit(".", 2)[0]
    data = service.tokens.read(Purpose(purpose), token)
    forged = {
        "damaged signature": f"{payload}.{stamp}.{signature[:-2]}{'AA' if not signature.endswith('AA') else 'BB'}",
        "another payload": f"{other_payload}.{stamp}.{signature}",
        "another key": Tokens("another-secret-of-the-same-length!", now=clock).make(
            Purpose(purpose), data
        ),
        "another purpose": service.tokens.make(
            Purpose.MANAGE if purpose != "manage" else Purpose.UNSUBSCRIBE, data
        ),
        "truncated": token[: len(token) // 2],
    }
    for what, bad in forged.items():
        assert all(s in (400, 404, 422) for s in refused(client, purpose, bad)), what
        assert 404 not in refused(client, purpose, bad) or what == "truncated", what
    clock.advance(days=91)  # past every purpose's age (confirm: 3 days, the others 90)
    assert all(s == 400 for s in refused(client, purpose, token)), "expired"

    ada = service.store.get_subscriber("ada@example.org")
    assert ada is not None and ada.status is SubscriberStatus.ACTIVE
    assert ada.topics == ("gpu-kernels",)
    assert service.store.get_subscriber("bob@example.org") is None


# ---------------------------------------------------------------------------- CSRF


def test_manage_form_needs_its_own_csrf_token(
    members: dict[str, str], client: TestClient, service: Subscriptions
) -> None:
    path = f"/manage/{members['manage']}"
    data = {"topics": ["rendering"], "send_hour": "18", "frequency": "weekly", "paused": "1"}
    assert client.post(path, data=data).status_code == 403  # no token at all
    other = TestClient(client.app, base_url=BASE)
    stolen = csrf_of(other.get(path).text)  # a token for another browser's cookie
    client.get(path)
    assert client.post(path, data={**data, "csrf": stolen}).status_code == 403
    fresh = TestClient(client.app, base_url=BASE)  # no cookie, a valid-looking field
    assert fresh.post(path, data={**data, "csrf": stolen}).status_code == 403
    ada = service.store.get_subscriber("ada@example.org")
    assert ada is not None and ada.topics == ("gpu-kernels",)
    assert ada.status is SubscriberStatus.ACTIVE and ada.send_hour is None


# ---------------------------------------------------------------------------- enumeration


def test_subscribe_answers_alike_whatever_the_address_state(
    client: TestClient, service: Subscriptions, smtp_server: SmtpServer, clock: Clock
) -> None:
    from newsletter.subscribe import Choices

    choices = Choices(("gpu-kernels",), "UTC")
    for who in ("active", "paused", "gone"):
        service.request(f"{who}@example.org", choices, via="web", origin="test")
        client.post(link_to(smtp_server.messages_to(f"{who}@example.org")[-1], "confirm"))
    service.request("pending@example.org", choices, via="web", origin="test")
    service.store.set_status("paused@example.org", SubscriberStatus.PAUSED, NOW)
    service.store.set_status("gone@example.org", SubscriberStatus.UNSUBSCRIBED, NOW)
    clock.advance(days=1)  # a fresh per-address window for everyone

    def scrub(html: str) -> str:
        return re.sub(r'value="[^"]*"', "", html)

    pages: dict[str, tuple[int, str]] = {}
    api: dict[str, tuple[int, Any]] = {}
    for who in ("new", "pending", "active", "paused", "gone"):
        form = client.get("/subscribe")
        r = client.post(
            "/subscribe",
            data={
                "csrf": csrf_of(form.text),
                "email": f"{who}@example.org",
                "topics": ["gpu-kernels"],
            },
        )
        pages[who] = (r.status_code, scrub(r.text))
        a = client.post(
            "/api/subscribe", json={"email": f"{who}@example.org", "topics": ["gpu-kernels"]}
        )
        api[who] = (a.status_code, a.json())
    assert len(set(pages.values())) == 1, pages.keys()
    assert len({json.dumps(v, sort_keys=True) for v in api.values()}) == 1, api
    assert pages["new"][0] == 200 and api["new"][0] == 202


# ---------------------------------------------------------------------------- SSRF


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with feed_server() as s:
        s.script("/feed", Answer(200, b"<rss version='2.0'><channel></channel></rss>"))
        yield s


def fetcher(**kw: Any) -> Fetcher:
    return Fetcher(host_delay=0.0, rng=random.Random(1), sleep=lambda s: None, **kw)


INTERNAL = [
    "127.0.0.1",
    "localhost",
    "2130706433",  # decimal
    "0x7f000001",  # hex
    "017700000001",  # octal
    "0177.0.0.1",
    "127.1",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[0:0:0:0:0:ffff:127.0.0.1]",
]
UNREACHABLE = ["169.254.169.254", "[fd00:ec2::254]", "10.0.0.1", "0.0.0.0", "[::]"]


@pytest.mark.parametrize("host", INTERNAL + UNREACHABLE)
def test_internal_addresses_in_any_spelling_are_refused_before_connecting(
    host: str, server: FeedServer
) -> None:
    port = f":{server.port}" if host in INTERNAL else ""
    with fetcher() as f, pytest.raises(BlockedAddress, match="allow_private"):
        f.fetch(f"http://{host}{port}/feed")
    assert server.requests == []


def test_ingest_records_the_refusal_for_a_decimal_address(
    tmp_path: Path, db_url: str, smtp_server: SmtpServer, server: FeedServer
) -> None:
    data = web_settings(db_url, smtp_server)
    data["sources"] = [
        {"name": "sneaky", "kind": "feed", "url": f"http://2130706433:{server.port}/feed"},
        {"name": "mapped", "kind": "feed", "url": f"http://[::ffff:127.0.0.1]:{server.port}/feed"},
    ]
    config = load_config(write_config(tmp_path, data))
    store = Store(config.database_url)
    store.upgrade()
    try:
        report = run_fetch(config, store, NOW)
        assert [s.ok for s in report.sources] == [False, False]
        for name in ("sneaky", "mapped"):
            error = store.source_state(name).last_error or ""
            assert "loopback" in error and "allow_private" in error
    finally:
        store.close()
    assert server.requests == []


@pytest.mark.parametrize("target", [h for h in INTERNAL + UNREACHABLE if h != "localhost"])
def test_a_redirect_to_an_internal_address_is_refused_on_that_hop(target: str) -> None:
    hits: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hits.append(request)
        return httpx.Response(302, headers={"Location": f"http://{target}/latest/meta-data"})

    def resolve(host: str, port: int) -> list[str]:
        return ["93.184.216.34"] if host == "feeds.example.org" else system_resolver(host, port)

    with (
        fetcher(transport=httpx.MockTransport(handler), resolver=resolve) as f,
        pytest.raises(FetchError) as e,
    ):
        f.fetch("https://feeds.example.org/rss")
    # Refused as internal, or (0177.0.0.1) as no valid URL at all: either way, on that hop.
    assert isinstance(e.value, BlockedAddress) or "Invalid IPv4" in str(e.value), e.value
    assert len(hits) == 1  # the redirect's target was never asked
