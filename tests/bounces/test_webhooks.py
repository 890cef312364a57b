"""Each provider's documented payloads read into the events they mean, and each provider's
authentication checked the way the provider documents it (no HTTP here: see
test_webhooks_http.py for the routes)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from newsletter.bounces import sns
from newsletter.bounces import webhooks as hooks
from newsletter.bounces.events import BounceEvent, EventKind, EventSource
from newsletter.config import ConfigError
from tests.bounces.providers import (
    MAILGUN_KEY,
    POSTMARK_PASSWORD,
    POSTMARK_USER,
    TOPIC,
    MemoryNonces,
    SendgridSigner,
    SnsSigner,
    basic,
    fixture,
    mailgun_body,
    sns_notification,
)
from tests.conftest import NOW

CERT_URL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem"


def request(body: bytes | dict[str, Any] | list[Any], **headers: str) -> hooks.WebhookRequest:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return hooks.WebhookRequest(raw, {k.lower(): v for k, v in headers.items()}, "192.0.2.1")


def summary(events: tuple[BounceEvent, ...]) -> list[tuple[str, str, str | None, str | None]]:
    return [(e.kind, e.address, e.status, e.message_id) for e in events]


# --- SES through SNS ----------------------------------------------------------------------------


class FixedKey:
    """The certificate source of a test: one key, whatever the (already checked) URL."""

    def __init__(self, signer: SnsSigner) -> None:
        self.signer = signer
        self.asked: list[object] = []

    def key_for(self, url: object) -> Any:
        self.asked.append(url)
        return self.signer.key.public_key()


@pytest.fixture(scope="module")
def signer() -> SnsSigner:
    return SnsSigner()


SES = hooks.SesWebhook(topic_arns=[TOPIC])


def ses(signer: SnsSigner, message: dict[str, Any], version: str = "2") -> hooks.Accepted:
    signed = signer.sign(message, version)
    return hooks.ses(request(signed), SES, NOW, FixedKey(signer))


def test_ses_permanent_bounce_is_hard_for_each_recipient(signer: SnsSigner) -> None:
    out = ses(signer, sns_notification(fixture("ses-bounce-permanent.json"), NOW, CERT_URL))
    mid = "<3f2a9c1e5b7d4e8f9a0b1c2d3e4f5a6b@papers.example.org>"
    assert summary(out.events) == [
        ("hard", "gone@example.net", "5.1.1", mid),
        ("hard", "nodomain@nxdomain.example", "5.4.4", mid),
    ]
    assert all(e.verified and e.source is EventSource.SES for e in out.events)
    assert out.events[0].provider_id == (
        "0100017b3c5a9a6f-6bd3b3c5-5f5d-4b3a-9c3e-2f1f1d7e8a11-000000:gone@example.net"
    )
    assert "User unknown" in out.events[0].diagnostic
    assert out.events[0].received_at == NOW


def test_ses_transient_bounce_is_soft_and_complaint_is_complaint(signer: SnsSigner) -> None:
    soft = ses(signer, sns_notification(fixture("ses-bounce-transient.json"), NOW, CERT_URL), "1")
    assert summary(soft.events) == [("soft", "full@example.net", "4.2.2", None)]
    complaint = ses(signer, sns_notification(fixture("ses-complaint.json"), NOW, CERT_URL))
    assert summary(complaint.events) == [
        (
            "complaint",
            "annoyed@example.com",
            None,
            "<9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d@papers.example.org>",
        )
    ]


def test_ses_not_spam_feedback_and_deliveries_change_nothing(signer: SnsSigner) -> None:
    not_spam = fixture("ses-complaint.json")
    not_spam["complaint"]["complaintFeedbackType"] = "not-spam"
    for message in (not_spam, fixture("ses-delivery.json")):
        out = ses(signer, sns_notification(message, NOW, CERT_URL))
        assert out.events == () and out.ignored == 1


def test_sns_message_that_is_not_ses_json_is_ignored(signer: SnsSigner) -> None:
    for text in ("Successfully validated SNS topic for Amazon SES event publishing.", "[" * 30_000):
        message = {**sns_notification({}, NOW, CERT_URL), "Message": text}
        out = ses(signer, message)
        assert out.events == () and out.ignored == 1


def test_ses_event_publishing_format_is_read_too(signer: SnsSigner) -> None:
    message = fixture("ses-bounce-permanent.json")
    message["eventType"] = message.pop("notificationType")
    out = ses(signer, sns_notification(message, NOW, CERT_URL))
    assert [e.kind for e in out.events] == [EventKind.HARD, EventKind.HARD]


@pytest.mark.parametrize("version", ["1", "2"])
def test_sns_signature_covers_every_signed_field(signer: SnsSigner, version: str) -> None:
    good = signer.sign(sns_notification(fixture("ses-complaint.json"), NOW, CERT_URL), version)
    assert hooks.ses(request(good), SES, NOW, FixedKey(signer)).events
    for name, value in [
        ("Message", json.dumps(fixture("ses-bounce-permanent.json"))),
        ("MessageId", "other"),
    ]:
        forged = {**good, name: value}
        with pytest.raises(hooks.Refused) as e:
            hooks.ses(request(forged), SES, NOW, FixedKey(signer))
        assert (e.value.status, e.value.reason) == (403, "bad SNS signature")


def test_sns_signed_by_another_key_is_refused(signer: SnsSigner) -> None:
    forged = SnsSigner().sign(sns_notification(fixture("ses-complaint.json"), NOW, CERT_URL))
    with pytest.raises(hooks.Refused) as e:
        hooks.ses(request(forged), SES, NOW, FixedKey(signer))
    assert e.value.status == 403


def test_sns_from_another_topic_is_refused_before_any_certificate_is_fetched(
    signer: SnsSigner,
) -> None:
    other = "arn:aws:sns:us-east-1:999999999999:someone-elses-topic"
    message = signer.sign(sns_notification(fixture("ses-complaint.json"), NOW, CERT_URL, other))
    source = FixedKey(signer)
    with pytest.raises(hooks.Refused) as e:
        hooks.ses(request(message), SES, NOW, source)
    assert (e.value.status, e.value.reason) == (
        403,
        f"the SNS topic ('{other}') is not in bounces.webhooks.ses.topic_arns",
    )
    assert source.asked == []


def test_sns_stale_unsigned_and_unknown_version_are_refused(signer: SnsSigner) -> None:
    old = signer.sign(
        sns_notification(fixture("ses-complaint.json"), NOW - timedelta(hours=2), CERT_URL)
    )
    unsigned = {**sns_notification(fixture("ses-complaint.json"), NOW, CERT_URL), "Signature": ""}
    v3 = {
        **signer.sign(sns_notification(fixture("ses-complaint.json"), NOW, CERT_URL)),
        "SignatureVersion": "3",
    }
    for message, status in [(old, 403), (unsigned, 401), (v3, 403)]:
        with pytest.raises(hooks.Refused) as e:
            hooks.ses(request(message), SES, NOW, FixedKey(signer))
        assert e.value.status == status, message


def test_sns_subscription_confirmation_asks_to_visit_its_url(signer: SnsSigner) -> None:
    message = {**fixture("sns-subscription-confirmation.json"), "Timestamp": NOW.isoformat()}
    out = ses(signer, message, "1")
    assert out.events == ()
    assert out.confirm_url == message["SubscribeURL"]


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-1.pem", True),
        ("https://sns.eu-central-1.amazonaws.com/SimpleNotificationService-1.pem", True),
        ("https://sns.us-gov-west-1.amazonaws.com/x.pem", True),
        ("https://sns.cn-north-1.amazonaws.com.cn/x.pem", True),
        ("http://sns.us-east-1.amazonaws.com/x.pem", False),
        ("https://sns.us-east-1.amazonaws.com.evil.example/x.pem", False),
        ("https://evil.example/sns.us-east-1.amazonaws.com/x.pem", False),
        ("https://sns.amazonaws.com/x.pem", False),
        ("https://user@sns.us-east-1.amazonaws.com/x.pem", False),
        ("https://sns.us-east-1.amazonaws.com:8443/x.pem", False),
        ("http://127.0.0.1:8080/cert.pem", False),
        ("file:///etc/passwd", False),
    ],
)
def test_certificate_urls_must_be_https_on_an_sns_host(url: str, ok: bool) -> None:
    assert sns.aws_url(url) is ok


def test_certificate_url_prefix_is_an_explicit_override_only() -> None:
    assert sns.aws_url("http://127.0.0.1:8080/cert.pem", "http://127.0.0.1:8080/")
    assert not sns.aws_url("http://127.0.0.1:9999/cert.pem", "http://127.0.0.1:8080/")
    assert hooks.SesWebhook(topic_arns=[TOPIC]).cert_url_prefix is None


# --- Mailgun ------------------------------------------------------------------------------------

MAILGUN = hooks.MailgunWebhook(signing_key=MAILGUN_KEY, signing_key_env="NEWSLETTER_TEST_UNSET")


def test_mailgun_events(monkeypatch: pytest.MonkeyPatch) -> None:
    nonces = MemoryNonces()
    got = {
        name: hooks.mailgun(request(mailgun_body(name, NOW)), MAILGUN, NOW, nonces)
        for name in (
            "mailgun-failed-permanent.json",
            "mailgun-failed-temporary.json",
            "mailgun-complained.json",
            "mailgun-unsubscribed.json",
            "mailgun-delivered.json",
        )
    }
    assert summary(got["mailgun-failed-permanent.json"].events) == [
        (
            "hard",
            "gone@example.net",
            "5.1.1",
            "<3f2a9c1e5b7d4e8f9a0b1c2d3e4f5a6b@papers.example.org>",
        )
    ]
    assert got["mailgun-failed-permanent.json"].events[0].provider_id == "G9Bn5sl1TC6nu79C8C0bwg"
    assert got["mailgun-failed-temporary.json"].events == ()  # Mailgun retries it: not final
    assert summary(got["mailgun-complained.json"].events) == [
        (
            "complaint",
            "annoyed@example.com",
            None,
            "<9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d@papers.example.org>",
        )
    ]
    assert [e.kind for e in got["mailgun-unsubscribed.json"].events] == [EventKind.UNSUBSCRIBE]
    assert got["mailgun-delivered.json"].events == () and got["mailgun-delivered.json"].ignored == 1
    assert all(e.verified for a in got.values() for e in a.events)


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("suppress-bounce", "hard"),
        ("suppress-complaint", "complaint"),
        ("old", "soft"),
        ("generic", "hard"),
    ],
)
def test_mailgun_permanent_failure_reasons(reason: str, kind: str) -> None:
    data = fixture("mailgun-failed-permanent.json")["event-data"]
    data["reason"] = reason
    event = hooks.mailgun_event(data, NOW)
    assert event is not None and event.kind == kind


def test_mailgun_signature_checks() -> None:
    nonces = MemoryNonces()
    name = "mailgun-complained.json"
    wrong_key = mailgun_body(name, NOW, key="key-not-the-one-mailgun-uses-000000")
    stale = mailgun_body(name, NOW - timedelta(minutes=16))
    unsigned = json.dumps({"event-data": fixture(name)["event-data"]}).encode()
    cases = [
        (wrong_key, 403, "bad Mailgun signature"),
        (stale, 403, "the Mailgun timestamp is too old (replayed?)"),
        (unsigned, 401, "the request carries no Mailgun signature"),
        (b"{not json", 400, "the body is not JSON"),
    ]
    for body, status, reason in cases:
        with pytest.raises(hooks.Refused) as e:
            hooks.mailgun(request(body), MAILGUN, NOW, nonces)
        assert (e.value.status, e.value.reason) == (status, reason)


def test_mailgun_token_is_reserved_for_one_body() -> None:
    nonces = MemoryNonces()
    body = mailgun_body("mailgun-complained.json", NOW, token="t" * 50)
    first = hooks.mailgun(request(body), MAILGUN, NOW, nonces)
    assert len(first.events) == 1
    # The same body again is the provider's retry: its event is stored once anyway.
    retry = hooks.mailgun(request(body), MAILGUN, NOW + timedelta(seconds=5), nonces)
    assert [e.provider_id for e in retry.events] == [e.provider_id for e in first.events]
    # The signature does not cover event-data: the same token with another body is a forgery.
    forged = json.loads(body)
    forged["event-data"]["recipient"] = "someone-else@example.com"
    with pytest.raises(hooks.Refused) as e:
        hooks.mailgun(request(json.dumps(forged).encode()), MAILGUN, NOW, nonces)
    assert e.value.status == 403 and "reused" in e.value.reason


def test_mailgun_without_a_key_asks_to_be_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = hooks.MailgunWebhook(signing_key_env="NEWSLETTER_TEST_MAILGUN_KEY")
    body = mailgun_body("mailgun-complained.json", NOW)
    with pytest.raises(hooks.Refused) as e:
        hooks.mailgun(request(body), settings, NOW, MemoryNonces())
    assert e.value.status == 503 and "$NEWSLETTER_TEST_MAILGUN_KEY" in e.value.reason
    monkeypatch.setenv("NEWSLETTER_TEST_MAILGUN_KEY", MAILGUN_KEY)
    assert hooks.mailgun(request(body), settings, NOW, MemoryNonces()).events


# --- Postmark -----------------------------------------------------------------------------------

POSTMARK = hooks.PostmarkWebhook(
    username=POSTMARK_USER, password=POSTMARK_PASSWORD, password_env="NEWSLETTER_TEST_UNSET"
)


def postmark(name: str, settings: hooks.PostmarkWebhook = POSTMARK) -> hooks.Accepted:
    return hooks.postmark(
        request(fixture(name), **basic(POSTMARK_USER, POSTMARK_PASSWORD)), settings, NOW
    )


def test_postmark_records() -> None:
    assert summary(postmark("postmark-bounce.json").events) == [
        ("hard", "gone@example.net", "5.1.1", None)
    ]
    assert postmark("postmark-bounce.json").events[0].provider_id == "bounce:4323372036854775807"
    assert summary(postmark("postmark-soft-bounce.json").events) == [
        ("soft", "full@example.net", "4.2.2", None)
    ]
    assert [e.kind for e in postmark("postmark-spam-complaint.json").events] == ["complaint"]
    change = postmark("postmark-subscription-change.json").events
    assert [(e.kind, e.address) for e in change] == [("unsubscribe", "leaving@example.org")]
    assert "ManualSuppression" in change[0].diagnostic


def test_postmark_auto_replies_and_reactivations_change_nothing() -> None:
    """An out-of-office is not a bounce; a lifted suppression never re-activates anyone."""
    for name in ("postmark-autoresponder.json", "postmark-subscription-reactivated.json"):
        out = postmark(name)
        assert out.events == () and out.ignored == 1


def test_postmark_credentials() -> None:
    body = fixture("postmark-bounce.json")
    cases = [
        ({}, 401),
        (basic(POSTMARK_USER, "wrong-password"), 403),
        (basic("someone", POSTMARK_PASSWORD), 403),
        ({"Authorization": "Bearer " + POSTMARK_PASSWORD}, 401),
        ({"Authorization": "Basic !!!"}, 401),
    ]
    for headers, status in cases:
        with pytest.raises(hooks.Refused) as e:
            hooks.postmark(request(body, **headers), POSTMARK, NOW)
        assert e.value.status == status, headers


def test_postmark_ip_allowlist() -> None:
    settings = POSTMARK.model_copy(update={"allowed_ips": ["3.134.147.250", "50.31.156.0/24"]})
    ok = hooks.WebhookRequest(
        json.dumps(fixture("postmark-bounce.json")).encode(),
        {"authorization": basic(POSTMARK_USER, POSTMARK_PASSWORD)["Authorization"]},
        "50.31.156.6",
    )
    assert hooks.postmark(ok, settings, NOW).events
    with pytest.raises(hooks.Refused) as e:
        hooks.postmark(hooks.WebhookRequest(ok.body, ok.headers, "192.0.2.1"), settings, NOW)
    assert e.value.status == 403


# --- SendGrid -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sendgrid_signer() -> SendgridSigner:
    return SendgridSigner()


def test_sendgrid_batch(sendgrid_signer: SendgridSigner) -> None:
    settings = hooks.SendgridWebhook(public_key=sendgrid_signer.public_key())
    body = json.dumps(fixture("sendgrid-events.json")).encode()
    out = hooks.sendgrid(request(body, **sendgrid_signer.headers(body, NOW)), settings, NOW)
    assert [(e.kind, e.address, e.status) for e in out.events] == [
        ("hard", "gone@example.net", "5.1.1"),
        ("soft", "blocked@example.net", "5.7.1"),
        ("hard", "dropped@example.net", "5.0.0"),
        ("complaint", "annoyed@example.com", None),
        ("unsubscribe", "leaving@example.org", None),
        ("unsubscribe", "group-leaving@example.org", None),
    ]
    assert out.ignored == 4  # a dropped over-size message, a delivery, an open, a deferral
    assert out.events[0].provider_id == "6g4ZI7SA-xmRDv57GoPIPw=="
    assert out.events[0].message_id == "<3f2a9c1e5b7d4e8f9a0b1c2d3e4f5a6b@papers.example.org>"
    assert all(e.verified and e.source is EventSource.SENDGRID for e in out.events)


def test_sendgrid_signature_checks(sendgrid_signer: SendgridSigner) -> None:
    settings = hooks.SendgridWebhook(public_key=sendgrid_signer.public_key())
    body = json.dumps(fixture("sendgrid-events.json")).encode()
    good = sendgrid_signer.headers(body, NOW)
    tampered = body.replace(b"gone@example.net", b"other@example.net")
    bad = "bad SendGrid signature"
    cases = [
        (tampered, good, 403, bad),
        (body, SendgridSigner().headers(body, NOW), 403, bad),
        (body, sendgrid_signer.headers(body, NOW - timedelta(minutes=11)), 403, "too old"),
        (body, {}, 401, "no SendGrid signature"),
        (body, {**good, "X-Twilio-Email-Event-Webhook-Signature": "%%%"}, 403, bad),
        (
            body,
            {**good, "X-Twilio-Email-Event-Webhook-Timestamp": str(int(NOW.timestamp()) + 1)},
            403,
            bad,
        ),
    ]
    for raw, headers, status, reason in cases:
        with pytest.raises(hooks.Refused) as e:
            hooks.sendgrid(request(raw, **headers), settings, NOW)
        assert e.value.status == status and reason in e.value.reason, headers


# --- settings -----------------------------------------------------------------------------------


def test_config_reads_bounces_webhooks(make_config: Any, tmp_path: Any) -> None:
    from tests.conftest import base_config

    signer = SendgridSigner()
    data = base_config(f"sqlite:///{tmp_path}/db.sqlite")
    data["bounces"] = {
        "webhooks": {
            "ses": {"topic_arns": [TOPIC]},
            "mailgun": {},
            "postmark": {"username": "pm", "allowed_ips": ["50.31.156.0/24"]},
            "sendgrid": {"public_key": signer.public_key()},
        }
    }
    webhooks = make_config(data).settings.bounces.webhooks
    assert webhooks.ses.topic_arns == [TOPIC]
    assert webhooks.mailgun.signing_key_env == "NEWSLETTER_MAILGUN_SIGNING_KEY"
    assert webhooks.sendgrid.public_key == signer.public_key()


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"ses": {"topic_arns": ["not-an-arn"]}}, "bounces.webhooks.ses.topic_arns"),
        ({"ses": {"topic_arns": []}}, "bounces.webhooks.ses.topic_arns"),
        ({"sendgrid": {"public_key": "bm90IGEga2V5"}}, "bounces.webhooks.sendgrid.public_key"),
        ({"postmark": {"username": "pm", "allowed_ips": ["nowhere"]}}, "allowed_ips"),
        ({"mailgun": {"signing_keys": "x"}}, "bounces.webhooks.mailgun"),
    ],
)
def test_bad_webhook_settings_name_the_key(
    make_config: Any, tmp_path: Any, section: dict[str, Any], words: str
) -> None:
    from tests.conftest import base_config

    data = base_config(f"sqlite:///{tmp_path}/db.sqlite")
    data["bounces"] = {"webhooks": section}
    with pytest.raises(ConfigError) as e:
        make_config(data)
    assert words in str(e.value)
    assert "newsletter.yaml:" in str(e.value)
