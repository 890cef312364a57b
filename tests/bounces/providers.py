"""What each provider does to a webhook request, done with our own keys: SNS signs with an RSA key
behind a self-signed certificate, Mailgun with an HMAC key, SendGrid with an ECDSA P-256 key."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import NameOID

from newsletter.bounces import sns
from tests.conftest import FIXTURES

WEBHOOKS = FIXTURES / "bounces" / "webhooks"
TOPIC = "arn:aws:sns:us-east-1:123456789012:ses-bounces"
MAILGUN_KEY = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0"
POSTMARK_USER = "postmark"
POSTMARK_PASSWORD = "a-long-random-webhook-password-0123"


def fixture(name: str) -> Any:
    return json.loads((WEBHOOKS / name).read_text(encoding="utf-8"))


@dataclass
class SnsSigner:
    """An RSA key and its self-signed certificate, signing SNS messages as SNS does."""

    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )

    def certificate_pem(self) -> bytes:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
        now = datetime.now().astimezone()
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1))
            .not_valid_after(now + timedelta(days=30))
            .sign(self.key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM)

    def sign(self, message: dict[str, Any], version: str = "2") -> dict[str, Any]:
        message = {**message, "SignatureVersion": version}
        algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()
        signature = self.key.sign(sns.signing_string(message), padding.PKCS1v15(), algorithm)
        message["Signature"] = base64.b64encode(signature).decode()
        return message


def sns_notification(
    ses_message: dict[str, Any], when: datetime, cert_url: str, topic: str = TOPIC
) -> dict[str, Any]:
    """An unsigned SNS Notification carrying an SES notification."""
    return {
        **fixture("sns-notification.json"),
        "Message": json.dumps(ses_message),
        "MessageId": f"sns-{secrets.token_hex(8)}",
        "Timestamp": when.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        "SigningCertURL": cert_url,
        "TopicArn": topic,
    }


def mailgun_body(
    name: str, when: datetime, key: str = MAILGUN_KEY, token: str | None = None
) -> bytes:
    """A Mailgun fixture signed as Mailgun signs: HMAC-SHA256 of timestamp + token."""
    payload = fixture(name)
    timestamp = str(int(when.timestamp()))
    token = token or secrets.token_hex(25)
    digest = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    payload["signature"] = {"timestamp": timestamp, "token": token, "signature": digest}
    return json.dumps(payload).encode()


class MemoryNonces:
    """:class:`newsletter.bounces.webhooks.Nonces` in memory, for the provider functions alone
    (the app reserves tokens in its store)."""

    def __init__(self) -> None:
        self._seen: dict[str, str] = {}

    def reserve_webhook_token(
        self, token: str, digest: str, now: datetime, *, keep: timedelta
    ) -> bool:
        """True for a new token or the same body again; False for another body."""
        return self._seen.setdefault(token, digest) == digest


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@dataclass
class SendgridSigner:
    """An ECDSA P-256 key as SendGrid's Signed Event Webhook has, and its public half as shown."""

    key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )

    def public_key(self) -> str:
        der = self.key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return base64.b64encode(der).decode()

    def headers(self, body: bytes, when: datetime) -> dict[str, str]:
        timestamp = str(int(when.timestamp()))
        signature = self.key.sign(timestamp.encode() + body, ec.ECDSA(hashes.SHA256()))
        return {
            "X-Twilio-Email-Event-Webhook-Signature": base64.b64encode(signature).decode(),
            "X-Twilio-Email-Event-Webhook-Timestamp": timestamp,
        }


class AwsStandIn:
    """A real HTTP server on loopback standing in for SNS: serves the signing certificate at
    ``/cert.pem`` and records the subscription confirmations (any other GET)."""

    def __init__(self, cert_pem: bytes) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests.append(self.path)
                body = cert_pem if self.path == "/cert.pem" else b"<ConfirmSubscriptionResponse/>"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> AwsStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
