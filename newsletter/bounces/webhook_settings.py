"""``bounces.webhooks``: each provider's webhook settings, validated with the config.

Kept apart from :mod:`newsletter.bounces.webhooks` (which verifies and reads the requests) so
loading a config does not load the cryptography those checks need.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


_TOPIC_ARN = re.compile(r"^arn:aws(-cn|-us-gov)?:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_.-]{1,256}$")


class SesWebhook(_Strict):
    """Amazon SES notifications through an SNS topic (``POST /webhooks/ses``)."""

    topic_arns: list[str] = Field(min_length=1)
    """The topics whose messages are accepted and whose subscriptions are confirmed."""
    max_age: int = Field(default=3600, ge=60, le=14 * 86400)
    """Seconds a message's ``Timestamp`` may lie in the past (SNS retries keep the original)."""
    cert_url_prefix: str | None = None
    """For tests only: certificate and subscription URLs must start with this instead of being
    https on ``sns.<region>.amazonaws.com``. Never set it in production."""

    @field_validator("topic_arns")
    @classmethod
    def _arns(cls, value: list[str]) -> list[str]:
        for arn in value:
            if not _TOPIC_ARN.match(arn):
                raise ValueError(
                    "each topic ARN must look like arn:aws:sns:us-east-1:123456789012:name"
                )
        return value


class MailgunWebhook(_Strict):
    """Mailgun event webhooks (``POST /webhooks/mailgun``)."""

    signing_key_env: str = "NEWSLETTER_MAILGUN_SIGNING_KEY"
    """The environment variable holding the HTTP webhook signing key (Mailgun: Webhooks)."""
    signing_key: str | None = None
    """The key itself, when the environment is not used (keep the config file private then)."""
    max_age: int = Field(default=900, ge=30, le=86400)
    """Seconds a request's signed timestamp may be away from our clock."""

    def key(self) -> str | None:
        """The signing key in force: the environment, else the config, else ``None``."""
        return os.environ.get(self.signing_key_env) or self.signing_key or None


class PostmarkWebhook(_Strict):
    """Postmark bounce, spam complaint and subscription change webhooks (``POST /webhooks/postmark``)."""

    username: str = Field(min_length=1)
    """The Basic auth user name put in the webhook URL configured at Postmark."""
    password_env: str = "NEWSLETTER_POSTMARK_WEBHOOK_PASSWORD"  # noqa: S105 - the variable's name
    password: str | None = None
    """The password itself, when the environment is not used."""
    allowed_ips: list[str] = Field(default_factory=list)
    """If not empty, only these addresses or networks may call (Postmark publishes its own)."""

    @field_validator("allowed_ips")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError as e:
                raise ValueError(
                    "each allowed IP must be an address or a network like 203.0.113.0/24"
                ) from e
        return value

    def secret(self) -> str | None:
        """The password in force: the environment, else the config, else ``None``."""
        return os.environ.get(self.password_env) or self.password or None

    def allows(self, client: str) -> bool:
        """Whether ``client`` (an IP) may call: always, when no allowlist is configured."""
        if not self.allowed_ips:
            return True
        try:
            ip = ipaddress.ip_address(client)
        except ValueError:
            return False
        return any(ip in ipaddress.ip_network(n, strict=False) for n in self.allowed_ips)


class SendgridWebhook(_Strict):
    """SendGrid's Signed Event Webhook (``POST /webhooks/sendgrid``)."""

    public_key: str
    """The verification key SendGrid shows for the signed webhook (base64, no PEM lines)."""
    max_age: int = Field(default=600, ge=30, le=86400)
    """Seconds the signed timestamp may be away from our clock."""

    @field_validator("public_key")
    @classmethod
    def _key(cls, value: str) -> str:
        sendgrid_key(value)
        return value


class WebhookSettings(_Strict):
    """``bounces.webhooks``: one optional section per provider; an absent one answers 404."""

    ses: SesWebhook | None = None
    mailgun: MailgunWebhook | None = None
    postmark: PostmarkWebhook | None = None
    sendgrid: SendgridWebhook | None = None


def sendgrid_key(value: str) -> ec.EllipticCurvePublicKey:
    """The P-256 public key from SendGrid's base64 text (DER, with or without PEM lines)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    text = re.sub(r"-----[A-Z ]+-----|\s", "", value)
    try:
        key = serialization.load_der_public_key(base64.b64decode(text, validate=True))
    except (ValueError, binascii.Error) as e:
        raise ValueError(
            "not a public key: paste SendGrid's verification key (Mail Settings: Signed Event Webhook)"
        ) from e
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise ValueError("the SendGrid verification key must be an ECDSA P-256 key")
    return key


__all__ = [
    "MailgunWebhook",
    "PostmarkWebhook",
    "SendgridWebhook",
    "SesWebhook",
    "WebhookSettings",
    "sendgrid_key",
]
