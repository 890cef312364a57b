"""The webhook routes over real HTTP: the app under uvicorn on loopback, each provider's request
as the provider sends it, signed with our own keys; SNS certificates and subscription
confirmations served by a real local HTTP server standing in for AWS.

For each provider: a valid request is applied, its replay is answered 200 and not applied again,
and a bad signature, a missing one and a stale timestamp are refused with a short answer that
repeats nothing, and a log line naming the provider and the reason.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from newsletter.bounces.events import BounceEvent, EventKind
from newsletter.config import Config, load_config
from newsletter.errors import StoreError
from newsletter.models import SubscriberStatus
from newsletter.operations.smtp_sink import free_port
from newsletter.store import Store
from newsletter.web import create_app
from newsletter.web.webhooks import WebhookState
from tests.bounces.providers import (
    MAILGUN_KEY,
    POSTMARK_PASSWORD,
    POSTMARK_USER,
    TOPIC,
    AwsStandIn,
    SendgridSigner,
    SnsSigner,
    basic,
    fixture,
    mailgun_body,
    sns_notification,
)
from tests.conftest import NOW, base_config, write_config
from tests.web.conftest import Clock

Request = tuple[bytes, dict[str, str]]


class LiveServer:
    """The app under a real uvicorn on loopback, in a thread."""

    def __init__(self, app: object) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(
            uvicorn.Config(
                app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
            )  # type: ignore[arg-type]
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


@pytest.fixture(scope="module")
def sns_signer() -> SnsSigner:
    return SnsSigner()


@pytest.fixture(scope="module")
def sendgrid_signer() -> SendgridSigner:
    return SendgridSigner()


@pytest.fixture
def aws(sns_signer: SnsSigner) -> Iterator[AwsStandIn]:
    with AwsStandIn(sns_signer.certificate_pem()) as stand_in:
        yield stand_in


@dataclass
class Live:
    """A running app, what it applied, and how to reach it."""

    base: str
    config: Config
    state: WebhookState
    clock: Clock
    applied: list[BounceEvent] = field(default_factory=list)

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
        return httpx.post(f"{self.base}{path}", content=body, headers=headers or {}, timeout=20)


def webhook_settings(aws: AwsStandIn, sendgrid_signer: SendgridSigner) -> dict[str, Any]:
    return {
        "ses": {"topic_arns": [TOPIC], "cert_url_prefix": aws.base},
        "mailgun": {"signing_key": MAILGUN_KEY, "signing_key_env": "NEWSLETTER_TEST_UNSET"},
        "postmark": {
            "username": POSTMARK_USER,
            "password": POSTMARK_PASSWORD,
            "password_env": "NEWSLETTER_TEST_UNSET",
        },
        "sendgrid": {"public_key": sendgrid_signer.public_key()},
    }


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Live]]:
    """Start the app with a ``bounces.webhooks`` section; with ``record``, events are recorded
    in ``Live.applied`` instead of going to the bounce decider."""
    stack: list[tuple[LiveServer, Store]] = []

    def run(
        webhooks: dict[str, Any], db_url: str | None = None, record: bool = True, **web: Any
    ) -> Live:
        data = base_config(db_url or f"sqlite:///{tmp_path}/webhooks.db")
        data["web"] = {"secret_key": "a-test-secret-that-signs-links-0123456789", **web}
        data["bounces"] = {"webhooks": webhooks}
        config = load_config(write_config(tmp_path, data))
        store = Store(config.database_url)
        store.upgrade()
        clock = Clock()
        app = create_app(config, store, None, now=clock)
        server = LiveServer(app).__enter__()
        stack.append((server, store))
        live = Live(f"http://127.0.0.1:{server.port}", config, app.state.webhooks, clock)
        if record:
            live.state.apply_events = live.applied.extend
        return live

    yield run
    for server, store in stack:
        server.__exit__()
        store.close()


@pytest.fixture
def live(start: Callable[..., Live], aws: AwsStandIn, sendgrid_signer: SendgridSigner) -> Live:
    return start(webhook_settings(aws, sendgrid_signer))


# --- how each provider sends ----------------------------------------------------------------------


def ses_request(live: Live, signer: SnsSigner, aws: AwsStandIn, when: datetime) -> Request:
    message = signer.sign(
        sns_notification(fixture("ses-bounce-permanent.json"), when, f"{aws.base}cert.pem")
    )
    return json.dumps(message).encode(), {
        "Content-Type": "text/plain; charset=UTF-8",
        "x-amz-sns-message-type": "Notification",
        "x-amz-sns-topic-arn": TOPIC,
    }


def mailgun_request(when: datetime) -> Request:
    return mailgun_body("mailgun-failed-permanent.json", when), {"Content-Type": "application/json"}


def postmark_request(password: str = POSTMARK_PASSWORD) -> Request:
    body = json.dumps(fixture("postmark-spam-complaint.json")).encode()
    return body, {"Content-Type": "application/json", **basic(POSTMARK_USER, password)}


def sendgrid_request(signer: SendgridSigner, when: datetime) -> Request:
    body = json.dumps(fixture("sendgrid-events.json")).encode()
    return body, {"Content-Type": "application/json", **signer.headers(body, when)}


@dataclass
class Provider:
    path: str
    events: int
    """How many events the valid request holds."""
    valid: Request
    bad_signature: Request
    missing_signature: Request
    stale: Request | None
    """``None``: the provider's scheme has no timestamp (Postmark's Basic auth)."""


def provider(
    name: str, live: Live, sns_signer: SnsSigner, aws: AwsStandIn, sendgrid_signer: SendgridSigner
) -> Provider:
    now = live.clock()
    old = now - timedelta(hours=3)
    if name == "ses":
        body, headers = ses_request(live, sns_signer, aws, now)
        message = json.loads(body)
        forged = {**message, "Message": message["Message"].replace("gone@", "victim@")}
        unsigned = {k: v for k, v in message.items() if k != "Signature"}
        return Provider(
            "/webhooks/ses",
            2,
            (body, headers),
            (json.dumps(forged).encode(), headers),
            (json.dumps(unsigned).encode(), headers),
            ses_request(live, sns_signer, aws, old),
        )
    if name == "mailgun":
        body, headers = mailgun_request(now)
        payload = json.loads(body)
        bad = {**payload, "signature": {**payload["signature"], "signature": "0" * 64}}
        missing = {k: v for k, v in payload.items() if k != "signature"}
        return Provider(
            "/webhooks/mailgun",
            1,
            (body, headers),
            (json.dumps(bad).encode(), headers),
            (json.dumps(missing).encode(), headers),
            mailgun_request(old),
        )
    if name == "postmark":
        body, headers = postmark_request()
        return Provider(
            "/webhooks/postmark",
            1,
            (body, headers),
            postmark_request("not-the-password"),
            (body, {"Content-Type": "application/json"}),
            None,
        )
    body, headers = sendgrid_request(sendgrid_signer, now)
    tampered = body.replace(b"blocked@example.net", b"victim@example.net")
    return Provider(
        "/webhooks/sendgrid",
        6,
        (body, headers),
        (tampered, headers),
        (body, {"Content-Type": "application/json"}),
        sendgrid_request(sendgrid_signer, old),
    )


PROVIDERS = ["ses", "mailgun", "postmark", "sendgrid"]


@pytest.mark.parametrize("name", PROVIDERS)
def test_valid_request_is_applied_once_and_its_replay_answered_200(
    name: str,
    live: Live,
    sns_signer: SnsSigner,
    aws: AwsStandIn,
    sendgrid_signer: SendgridSigner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = provider(name, live, sns_signer, aws, sendgrid_signer)
    caplog.set_level(logging.INFO, logger="newsletter.webhooks")
    first = live.post(p.path, *p.valid)
    assert first.status_code == 200, first.text
    assert first.json() == {
        "applied": p.events,
        "duplicates": 0,
        "ignored": first.json()["ignored"],
    }
    assert len(live.applied) == p.events
    assert all(e.verified and e.source == name and e.provider_id for e in live.applied)
    live.clock.advance(seconds=30)
    again = live.post(p.path, *p.valid)
    assert again.status_code == 200
    assert again.json()["applied"] == 0
    assert len(live.applied) == p.events  # applied once
    assert f"webhook {name}: {p.events} events applied" in caplog.text


REFUSALS = [
    (name, variant, status, reason)
    for name in PROVIDERS
    for variant, status, reason in [
        ("bad_signature", 403, None),
        ("missing_signature", 401, None),
        ("stale", 403, "too old"),
    ]
    if not (name == "postmark" and variant == "stale")  # Basic auth has no timestamp
]


@pytest.mark.parametrize(("name", "variant", "status", "reason"), REFUSALS)
def test_unauthenticated_requests_are_refused_and_logged(
    name: str,
    variant: str,
    status: int,
    reason: str | None,
    live: Live,
    sns_signer: SnsSigner,
    aws: AwsStandIn,
    sendgrid_signer: SendgridSigner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    p = provider(name, live, sns_signer, aws, sendgrid_signer)
    request: Request | None = getattr(p, variant)
    assert request is not None
    response = live.post(p.path, *request)
    assert response.status_code == status, response.text
    assert response.json() == {"detail": {401: "authentication required", 403: "forbidden"}[status]}
    assert b"example" not in response.content  # nothing from the request comes back
    if status == 401:
        assert response.headers["www-authenticate"] == 'Basic realm="webhooks"'
    assert live.applied == []
    lines = [r.getMessage() for r in caplog.records if r.name == "newsletter.webhooks"]
    assert len(lines) == 1 and lines[0].startswith(f"webhook {name} refused ({status}): ")
    assert reason is None or reason in lines[0]
    assert "client 127.0.0.1" in lines[0]


@pytest.mark.parametrize("name", PROVIDERS)
def test_malformed_body_is_a_400(name: str, live: Live) -> None:
    headers = basic(POSTMARK_USER, POSTMARK_PASSWORD) if name == "postmark" else {}
    if name == "sendgrid":
        headers = {
            "X-Twilio-Email-Event-Webhook-Signature": "MEUCIQ==",
            "X-Twilio-Email-Event-Webhook-Timestamp": "not-a-number",
        }
    for body in (b"{this is not json <script>", b"[" * 30_000):  # the second: deeper than the stack
        response = live.post(f"/webhooks/{name}", body, headers)
        assert response.status_code == 400
        assert response.json() == {"detail": "malformed request"}
    assert live.applied == []


def test_ses_subscription_is_confirmed_for_a_configured_topic_only(
    live: Live, sns_signer: SnsSigner, aws: AwsStandIn
) -> None:
    def confirmation(topic: str) -> bytes:
        message = {
            **fixture("sns-subscription-confirmation.json"),
            "TopicArn": topic,
            "Timestamp": live.clock().strftime("%Y-%m-%dT%H:%M:%S.000Z"),
            "SigningCertURL": f"{aws.base}cert.pem",
            "SubscribeURL": f"{aws.base}?Action=ConfirmSubscription&TopicArn={topic}&Token=abc",
        }
        return json.dumps(sns_signer.sign(message, "1")).encode()

    other = "arn:aws:sns:us-east-1:999999999999:not-ours"
    refused = live.post("/webhooks/ses", confirmation(other))
    assert refused.status_code == 403
    assert aws.requests == []  # neither the certificate nor the subscription URL was fetched
    response = live.post("/webhooks/ses", confirmation(TOPIC))
    assert response.status_code == 200, response.text
    assert aws.requests == ["/cert.pem", f"/?Action=ConfirmSubscription&TopicArn={TOPIC}&Token=abc"]


def test_ses_certificate_is_fetched_once(
    live: Live, sns_signer: SnsSigner, aws: AwsStandIn
) -> None:
    for name in ("ses-bounce-permanent.json", "ses-complaint.json", "ses-bounce-transient.json"):
        message = sns_notification(fixture(name), live.clock(), f"{aws.base}cert.pem")
        assert (
            live.post("/webhooks/ses", json.dumps(sns_signer.sign(message)).encode()).status_code
            == 200
        )
    assert aws.requests == ["/cert.pem"]
    assert [e.kind for e in live.applied] == ["hard", "hard", "complaint", "soft"]


def test_ses_refuses_a_certificate_off_amazon_by_default(
    start: Callable[..., Live],
    sns_signer: SnsSigner,
    aws: AwsStandIn,
    sendgrid_signer: SendgridSigner,
) -> None:
    """The certificate URL check is only relaxed by the explicit ``cert_url_prefix`` setting."""
    settings = webhook_settings(aws, sendgrid_signer)
    del settings["ses"]["cert_url_prefix"]
    live = start(settings)
    body, headers = ses_request(live, sns_signer, aws, live.clock())
    response = live.post("/webhooks/ses", body, headers)
    assert response.status_code == 403
    assert aws.requests == []
    assert live.applied == []


def test_mailgun_token_reused_with_another_body_is_refused(live: Live) -> None:
    body, headers = mailgun_request(live.clock())
    assert live.post("/webhooks/mailgun", body, headers).status_code == 200
    forged = json.loads(body)
    forged["event-data"]["recipient"] = "victim@example.com"
    response = live.post("/webhooks/mailgun", json.dumps(forged).encode(), headers)
    assert response.status_code == 403
    assert [e.address for e in live.applied] == ["gone@example.net"]


def test_unconfigured_provider_is_404(
    start: Callable[..., Live], aws: AwsStandIn, sendgrid_signer: SendgridSigner
) -> None:
    settings = webhook_settings(aws, sendgrid_signer)
    del settings["sendgrid"]
    live = start(settings)
    body, headers = sendgrid_request(SendgridSigner(), live.clock())
    response = live.post("/webhooks/sendgrid", body, headers)
    assert response.status_code == 404
    assert response.json() == {"detail": "not found"}


def test_body_over_the_web_limit_is_refused_unread(
    start: Callable[..., Live], aws: AwsStandIn, sendgrid_signer: SendgridSigner
) -> None:
    live = start(webhook_settings(aws, sendgrid_signer), max_body_bytes=4096)
    body = json.dumps([fixture("sendgrid-events.json")[0]] * 40).encode()
    assert len(body) > 4096
    response = live.post(
        "/webhooks/sendgrid",
        body,
        {"Content-Type": "application/json", **SendgridSigner().headers(body, live.clock())},
    )
    assert response.status_code == 413
    assert live.applied == []


def test_failure_to_apply_asks_the_provider_to_retry(live: Live) -> None:
    """A 503 makes the provider send the events again; they are not taken as already applied."""
    calls: list[int] = []

    def down_once(events: Sequence[BounceEvent]) -> None:
        calls.append(len(events))
        if len(calls) == 1:
            raise StoreError("the database is unreachable")
        live.applied.extend(events)

    live.state.apply_events = down_once
    body, headers = postmark_request()
    assert live.post("/webhooks/postmark", body, headers).status_code == 503
    retried = live.post("/webhooks/postmark", body, headers)
    assert retried.status_code == 200 and retried.json()["applied"] == 1
    assert [e.kind for e in live.applied] == [EventKind.COMPLAINT]


# --- end to end: webhook -> the bounce decider -> the database ------------------------------------


def e2e_request(
    name: str, live: Live, sns_signer: SnsSigner, aws: AwsStandIn, sendgrid_signer: SendgridSigner
) -> tuple[str, Request]:
    now = live.clock()
    if name == "ses":
        message = sns_signer.sign(
            sns_notification(fixture("ses-complaint.json"), now, f"{aws.base}cert.pem")
        )
        return "/webhooks/ses", (json.dumps(message).encode(), {})
    if name == "mailgun":
        return "/webhooks/mailgun", (mailgun_body("mailgun-complained.json", now), {})
    if name == "postmark":
        return "/webhooks/postmark", postmark_request()
    return "/webhooks/sendgrid", sendgrid_request(sendgrid_signer, now)


@pytest.mark.parametrize("name", PROVIDERS)
def test_webhook_complaint_suppresses_the_subscriber_in_the_database(
    name: str,
    db_url: str,
    start: Callable[..., Live],
    sns_signer: SnsSigner,
    aws: AwsStandIn,
    sendgrid_signer: SendgridSigner,
) -> None:
    """A complaint through each provider suppresses the reader at once, on SQLite and
    PostgreSQL; the same request again, to another process, changes nothing more."""
    store = Store(db_url)
    store.upgrade()
    try:
        annoyed, _ = store.add_subscriber("annoyed@example.com", topics=["rendering"], now=NOW)
        bystander, _ = store.add_subscriber("reader@example.com", topics=["rendering"], now=NOW)
        live = start(webhook_settings(aws, sendgrid_signer), db_url=db_url, record=False)
        path, request = e2e_request(name, live, sns_signer, aws, sendgrid_signer)
        response = live.post(path, *request)
        assert response.status_code == 200, response.text
        assert store.get_subscriber("annoyed@example.com").status is SubscriberStatus.SUPPRESSED  # type: ignore[union-attr]
        assert store.get_subscriber("reader@example.com").status is SubscriberStatus.ACTIVE  # type: ignore[union-attr]
        history = store.bounce_history(annoyed.id)
        assert [(h.kind, h.source) for h in history] == [("complaint", name)]
        # The same request to a second process (no in-memory memory of it): stored once.
        again = start(webhook_settings(aws, sendgrid_signer), db_url=db_url, record=False)
        assert again.post(path, *request).status_code == 200
        assert len(store.bounce_history(annoyed.id)) == 1
        assert store.bounce_history(bystander.id) == []
    finally:
        store.close()


def test_sendgrid_batch_end_to_end(
    db_url: str, start: Callable[..., Live], aws: AwsStandIn, sendgrid_signer: SendgridSigner
) -> None:
    """One batch: a hard bounce counts 1 towards the score, an unsubscribe unsubscribes, events
    about addresses that are not subscribers are ignored."""
    store = Store(db_url)
    store.upgrade()
    try:
        gone, _ = store.add_subscriber("gone@example.net", topics=["rendering"], now=NOW)
        store.add_subscriber("leaving@example.org", topics=["rendering"], now=NOW)
        live = start(webhook_settings(aws, sendgrid_signer), db_url=db_url, record=False)
        response = live.post("/webhooks/sendgrid", *sendgrid_request(sendgrid_signer, live.clock()))
        assert response.status_code == 200, response.text
        score = store.bounce_score(gone.id)
        assert score is not None and score.score == 1.0
        assert store.get_subscriber("gone@example.net").status is SubscriberStatus.ACTIVE  # type: ignore[union-attr]
        assert store.get_subscriber("leaving@example.org").status is SubscriberStatus.UNSUBSCRIBED  # type: ignore[union-attr]
        assert store.get_subscriber("annoyed@example.com") is None
    finally:
        store.close()


def test_postmark_lifting_a_suppression_does_not_reactivate_anyone(
    db_url: str, start: Callable[..., Live], aws: AwsStandIn, sendgrid_signer: SendgridSigner
) -> None:
    """Consent: after a complaint, Postmark's "reactivated" change leaves the reader suppressed
    (only a fresh confirmation from the address brings it back)."""
    store = Store(db_url)
    store.upgrade()
    try:
        store.add_subscriber("annoyed@example.com", topics=["rendering"], now=NOW)
        live = start(webhook_settings(aws, sendgrid_signer), db_url=db_url, record=False)
        assert live.post("/webhooks/postmark", *postmark_request()).status_code == 200
        reactivated = {
            **fixture("postmark-subscription-reactivated.json"),
            "Recipient": "annoyed@example.com",
        }
        body = json.dumps(reactivated).encode()
        response = live.post("/webhooks/postmark", body, basic(POSTMARK_USER, POSTMARK_PASSWORD))
        assert response.status_code == 200
        assert response.json() == {"applied": 0, "duplicates": 0, "ignored": 1}
        assert store.get_subscriber("annoyed@example.com").status is SubscriberStatus.SUPPRESSED  # type: ignore[union-attr]
    finally:
        store.close()
