"""VERP: each digest's envelope sender names its subscriber and edition, signed.

``bounces+<token>@example.org``: the token is the subscriber id and the edition date with an
HMAC-SHA256 tag (80 bits) keyed by the operator's secret key (the one that signs links, see
:mod:`newsletter.services.link_tokens`) under a purpose salt of its own, so no link token is a VERP token
and no VERP token can be made without the key. A bounce that comes back to that address
therefore proves which digest bounced; a forged bounce cannot name another subscriber.

The token is lowercase base32 (32 characters; the local part stays under RFC 5321's 64)
because some MTAs lowercase local parts; reading it ignores case.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from dataclasses import dataclass
from datetime import date, timedelta

from newsletter.bounces.settings import BounceSettings

_EPOCH = date(1970, 1, 1)
_PACK = struct.Struct(">QH")
_TAG = 10
_SALT = b"newsletter.verp"
TOKEN_LENGTH = 32
"""Characters in a token: base32 of 8 (id) + 2 (day) + 10 (tag) bytes, no padding."""


@dataclass(frozen=True, slots=True)
class VerpToken:
    """What a valid token says: the digest of ``edition`` to subscriber ``subscriber_id``."""

    subscriber_id: int
    edition: date


class Verp:
    """Makes and reads signed VERP envelope senders for one bounce address and secret key."""

    def __init__(self, secret: str, bounce_address: str, *, signed: bool = True) -> None:
        self.signed = signed
        """False: :meth:`sender` gives the plain bounce address (``bounces.verp: false``)."""
        self._key = hmac.new(secret.encode(), _SALT, hashlib.sha256).digest()
        local, _, domain = bounce_address.lower().rpartition("@")
        self.local = local
        self.domain = domain
        self.address = bounce_address.lower()

    @classmethod
    def from_settings(cls, settings: BounceSettings, secret: str, from_address: str) -> Verp | None:
        """The envelope senders in force, or ``None`` when ``bounces.enabled`` is off (the From
        address stays the envelope sender)."""
        if not settings.enabled:
            return None
        return cls(secret, settings.bounce_address(from_address), signed=settings.verp)

    def _tag(self, packed: bytes) -> bytes:
        return hmac.new(self._key, packed, hashlib.sha256).digest()[:_TAG]

    def token(self, subscriber_id: int, edition: date) -> str:
        """The token for one subscriber's digest of ``edition``."""
        packed = _PACK.pack(subscriber_id, (edition - _EPOCH).days)
        raw = packed + self._tag(packed)
        return base64.b32encode(raw).decode("ascii").lower().rstrip("=")

    def sender(self, subscriber_id: int, edition: date) -> str:
        """The envelope sender (MAIL FROM) for one subscriber's digest of ``edition``."""
        if not self.signed:
            return self.address
        return f"{self.local}+{self.token(subscriber_id, edition)}@{self.domain}"

    def read(self, token: str) -> VerpToken | None:
        """What a token says, or ``None`` when it is not one this key signed."""
        if len(token) != TOKEN_LENGTH:
            return None
        try:
            raw = base64.b32decode(token.upper())
        except (binascii.Error, ValueError):
            return None
        packed, tag = raw[: _PACK.size], raw[_PACK.size :]
        if not hmac.compare_digest(tag, self._tag(packed)):
            return None
        sid, days = _PACK.unpack(packed)
        return VerpToken(sid, _EPOCH + timedelta(days=days))

    def token_of(self, recipient: str) -> str | None:
        """The token in ``recipient`` when it is this bounce address's VERP form, else None."""
        local, _, domain = recipient.strip().strip("<>").lower().rpartition("@")
        base, plus, token = local.partition("+")
        if plus and base == self.local and domain == self.domain and token:
            return token
        return None

    def verify(self, recipient: str) -> VerpToken | None:
        """What a VERP recipient address says, or ``None`` (not VERP, or forged)."""
        token = self.token_of(recipient)
        return None if token is None else self.read(token)


def is_bounce_address(recipient: str, bounce_address: str) -> bool:
    """Whether ``recipient`` is the bounce address or a ``+tagged`` (VERP) form of it."""
    local, _, domain = recipient.strip().strip("<>").lower().rpartition("@")
    b_local, _, b_domain = bounce_address.lower().rpartition("@")
    return domain == b_domain and (local == b_local or local.startswith(b_local + "+"))
