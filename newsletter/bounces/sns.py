"""Amazon SNS message authentication, as AWS documents it for HTTP(S) subscribers.

An SNS message carries an RSA signature (``SignatureVersion`` 1: SHA1withRSA, 2: SHA256withRSA)
over a canonical string of some of its fields, and the URL of the X.509 certificate whose key made
it. The certificate is only trusted when that URL is https on ``sns.<region>.amazonaws.com`` (or
``.amazonaws.com.cn``): fetched over TLS from AWS's own host, the certificate vouches for itself.
A test may replace that rule with an explicit URL prefix (``cert_url_prefix``), never by default.

A valid signature says the message came from SNS, not from *our* topic: anyone can sign
messages through a topic of their own, so the caller must also check ``TopicArn``.
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from newsletter.errors import NewsletterError

#: The host every genuine signing certificate and subscription URL is on.
SNS_HOST = re.compile(r"^sns\.[a-z]{2}(-[a-z]+)+-\d\.amazonaws\.com(\.cn)?$")

#: The fields each message type signs, in the order AWS documents.
SIGNED_FIELDS: Mapping[str, tuple[str, ...]] = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
    "UnsubscribeConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
}

_HASHES: Mapping[str, type[hashes.HashAlgorithm]] = {"1": hashes.SHA1, "2": hashes.SHA256}

MAX_CERT_BYTES = 16 * 1024


class SnsError(NewsletterError):
    """A message that cannot be authenticated; ``status`` is the HTTP answer it deserves."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def aws_url(url: str, prefix: str | None = None) -> bool:
    """Whether ``url`` may be fetched: https on an SNS host, or (tests only) under ``prefix``."""
    if prefix is not None:
        return url.startswith(prefix)
    try:
        parts = urlsplit(url)
        port = parts.port  # a port that is not a number (":abc", ":99999") is a ValueError here
    except ValueError:
        return False
    return (
        parts.scheme == "https"
        and port in (None, 443)
        and parts.username is None
        and parts.password is None
        and bool(SNS_HOST.match(parts.hostname or ""))
    )


def signing_string(message: Mapping[str, object]) -> bytes:
    """The canonical bytes SNS signs for ``message``: ``name\\nvalue\\n`` for each signed field.

    Raises :class:`SnsError` for an unknown type or a missing or non-text required field.
    """
    kind = message.get("Type")
    fields = SIGNED_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        raise SnsError(400, "unknown SNS message type")
    out: list[str] = []
    for name in fields:
        value = message.get(name)
        if value is None and name == "Subject":
            continue  # a notification without a subject leaves it out
        if not isinstance(value, str):
            raise SnsError(400, f"the SNS message has no {name}")
        out.append(f"{name}\n{value}\n")
    return "".join(out).encode("utf-8")


def verify(message: Mapping[str, object], public_key: rsa.RSAPublicKey) -> None:
    """Check ``message``'s signature with ``public_key``; raises :class:`SnsError` (403) if bad."""
    version = message.get("SignatureVersion")
    algorithm = _HASHES.get(version) if isinstance(version, str) else None
    if algorithm is None:
        raise SnsError(403, "unsupported SNS SignatureVersion")
    signature = message.get("Signature")
    if not isinstance(signature, str) or not signature:
        raise SnsError(401, "the SNS message is not signed")
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError) as e:
        raise SnsError(403, "the SNS signature is not base64") from e
    try:
        public_key.verify(raw, signing_string(message), padding.PKCS1v15(), algorithm())
    except InvalidSignature as e:
        raise SnsError(403, "bad SNS signature") from e


class Certificates:
    """Signing certificates fetched from their URL once, their keys kept (at most ``capacity``).

    Each fetch is one short-lived HTTP connection (``timeout`` seconds, no redirects); fetches
    are rare, since SNS signs with few certificates. ``prefix`` replaces the AWS host rule, for
    tests only. Thread-safe: the web app calls it from its thread pool.
    """

    def __init__(
        self, prefix: str | None = None, capacity: int = 32, timeout: float = 10.0
    ) -> None:
        self.prefix = prefix
        self.timeout = timeout
        self.capacity = capacity
        self._keys: OrderedDict[str, rsa.RSAPublicKey] = OrderedDict()
        self._lock = threading.Lock()

    def key_for(self, url: object) -> rsa.RSAPublicKey:
        """The RSA key of the certificate at ``url``; :class:`SnsError` if not allowed or unusable."""
        if not isinstance(url, str) or not url:
            raise SnsError(401, "the SNS message names no SigningCertURL")
        if not aws_url(url, self.prefix):
            raise SnsError(403, "SigningCertURL is not on an Amazon SNS host")
        with self._lock:
            key = self._keys.get(url)
            if key is not None:
                self._keys.move_to_end(url)
                return key
        key = self._fetch(url)
        with self._lock:
            self._keys[url] = key
            while len(self._keys) > self.capacity:
                self._keys.popitem(last=False)
        return key

    def _fetch(self, url: str) -> rsa.RSAPublicKey:
        try:
            with (
                httpx.Client(timeout=self.timeout, follow_redirects=False) as client,
                client.stream("GET", url) as response,
            ):
                if response.status_code != 200:
                    raise SnsError(
                        403, f"the signing certificate URL answered {response.status_code}"
                    )
                data = b""
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > MAX_CERT_BYTES:
                        raise SnsError(403, "the signing certificate is too large")
        except httpx.HTTPError as e:
            # Our side or the network: 503 makes SNS deliver the message again later.
            raise SnsError(
                503, f"could not fetch the signing certificate ({type(e).__name__})"
            ) from e
        try:
            cert = x509.load_pem_x509_certificate(data)
        except ValueError as e:
            raise SnsError(403, "the signing certificate is not a PEM certificate") from e
        key = cert.public_key()
        if not isinstance(key, rsa.RSAPublicKey):
            raise SnsError(403, "the signing certificate's key is not RSA")
        return key

    def confirm(self, url: object) -> None:
        """Confirm a subscription by visiting its ``SubscribeURL`` (an SNS URL, checked)."""
        if not isinstance(url, str) or not aws_url(url, self.prefix):
            raise SnsError(403, "SubscribeURL is not on an Amazon SNS host")
        try:
            with httpx.Client(timeout=self.timeout, follow_redirects=False) as client:
                response = client.get(url)
        except httpx.HTTPError as e:
            raise SnsError(503, f"could not confirm the subscription ({type(e).__name__})") from e
        if response.status_code != 200:
            raise SnsError(503, f"confirming the subscription answered {response.status_code}")
