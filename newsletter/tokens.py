"""Signed, purpose-bound tokens for links in mail (unsubscribe, manage, confirm, view).

A token is signed with the operator's secret key and a salt per purpose, so a manage link is
not an unsubscribe link and no token is valid for another purpose. Each purpose has its own
maximum age (:data:`MAX_AGE`): confirmation links expire after days, unsubscribe links keep
working for months after the mail that carried them. The clock is replaceable (``now``), so
tests can age a token without waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, TimestampSigner, URLSafeTimedSerializer
from itsdangerous.encoding import base64_encode
from itsdangerous.serializer import Serializer

from newsletter.clock import utcnow


class Purpose(StrEnum):
    UNSUBSCRIBE = "unsubscribe"
    MANAGE = "manage"
    CONFIRM = "confirm"
    VIEW = "view"
    CSRF = "csrf"


#: How long a token of each purpose stays valid.
MAX_AGE: dict[Purpose, timedelta] = {
    Purpose.UNSUBSCRIBE: timedelta(days=90),
    Purpose.MANAGE: timedelta(days=90),
    Purpose.CONFIRM: timedelta(days=3),
    Purpose.VIEW: timedelta(days=365),
    Purpose.CSRF: timedelta(hours=12),
}

#: A token signed up to this far in the future (another machine's clock is ahead) is accepted.
CLOCK_SKEW = timedelta(minutes=5)


class TokenError(ValueError):
    """A token is tampered with, for another purpose, or expired (``expired`` says which)."""

    def __init__(self, message: str, *, expired: bool = False) -> None:
        super().__init__(message)
        self.expired = expired


class _Uncompressed(URLSafeTimedSerializer):
    """Writes the payload without zlib: for a few dozen bytes compression saves a handful of
    characters and costs most of the time of making a token (three per digest). Reading still
    accepts compressed payloads, so links mailed before keep working."""

    def dump_payload(self, obj: Any) -> bytes:
        return base64_encode(Serializer.dump_payload(self, obj))


class Tokens:
    def __init__(self, secret: str, now: Callable[[], datetime] = utcnow) -> None:
        self.secret = secret
        clock = now

        class _Signer(TimestampSigner):
            def get_timestamp(self) -> int:
                return int(clock().timestamp())

        self._signer = _Signer
        self._now = now
        self._serializers: dict[Purpose, URLSafeTimedSerializer] = {}

    def _serializer(self, purpose: Purpose) -> URLSafeTimedSerializer:
        serializer = self._serializers.get(purpose)
        if serializer is None:
            serializer = _Uncompressed(
                self.secret, salt=f"newsletter.{purpose.value}", signer=self._signer
            )
            self._serializers[purpose] = serializer
        return serializer

    def make(self, purpose: Purpose, payload: Any) -> str:
        return str(self._serializer(purpose).dumps(payload))

    def read(self, purpose: Purpose, token: str, max_age: timedelta | None = None) -> Any:
        return self.read_signed(purpose, token, max_age)[0]

    def read_signed(
        self, purpose: Purpose, token: str, max_age: timedelta | None = None
    ) -> tuple[Any, datetime]:
        """The payload and when the token was signed (to the second)."""
        age = max_age or MAX_AGE[purpose]
        serializer = self._serializer(purpose)
        try:
            payload, signed_at = serializer.loads(
                token, max_age=int(age.total_seconds()), return_timestamp=True
            )
            return payload, signed_at
        except SignatureExpired as e:
            signed = e.date_signed
            ahead = None if signed is None else signed - self._now()
            if (
                signed is not None
                and ahead is not None
                and e.payload is not None
                and timedelta(0) < ahead <= CLOCK_SKEW
            ):
                return serializer.load_payload(e.payload), signed  # made by a machine a bit ahead
            raise TokenError("this link has expired", expired=True) from e
        except BadSignature as e:
            raise TokenError("this link is not valid") from e
        except (ValueError, TypeError, UnicodeError) as e:  # garbage that decodes oddly
            raise TokenError("this link is not valid") from e
