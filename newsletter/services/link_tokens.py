"""Signed, purpose-bound tokens for links in mail (unsubscribe, manage, confirm, view, feedback).

A token is signed with the operator's secret key and a salt per purpose, so a manage link is
not an unsubscribe link and no token is valid for another purpose. Each purpose has its own
maximum age (:data:`MAX_AGE`): confirmation links expire after days, unsubscribe links keep
working for months after the mail that carried them. The clock is replaceable (``now``), so
tests can age a token without waiting.

Links name a subscriber by id and by a *binding* (:meth:`Tokens.binding`), never by address:
URLs end up in web-server and proxy logs, link scanners and forwarded mail. The binding is a
short keyed hash of the address the link was made for; the server recomputes it from the
subscriber's current address (:meth:`Tokens.made_for`), so the link of an erased subscriber,
whose id another address might hold, leads nowhere. Confirmation links are the exception: they
carry the address because nothing is stored before the subscription is confirmed.
"""

from __future__ import annotations

import binascii
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, TimestampSigner, URLSafeTimedSerializer
from itsdangerous.encoding import base64_encode, int_to_bytes
from itsdangerous.serializer import Serializer

from newsletter.clock import utcnow
from newsletter.config import Config, admin_token_problem, secret_key_problem
from newsletter.errors import ConfigError, NewsletterError


class Purpose(StrEnum):
    UNSUBSCRIBE = "unsubscribe"
    MANAGE = "manage"
    CONFIRM = "confirm"
    VIEW = "view"
    CSRF = "csrf"
    FEEDBACK = "feedback"
    OWN_TOPIC = "own_topic"


#: How long a token of each purpose stays valid.
MAX_AGE: dict[Purpose, timedelta] = {
    Purpose.UNSUBSCRIBE: timedelta(days=90),
    Purpose.MANAGE: timedelta(days=90),
    Purpose.CONFIRM: timedelta(days=3),
    Purpose.VIEW: timedelta(days=365),
    Purpose.CSRF: timedelta(hours=12),
    Purpose.FEEDBACK: timedelta(days=365),
    Purpose.OWN_TOPIC: timedelta(days=3),
}

#: A token signed up to this far in the future (another machine's clock is ahead) is accepted.
CLOCK_SKEW = timedelta(minutes=5)

_BINDING = b"link-binding:"
"""What a binding's HMAC starts with: it is not the key's other uses (rate-limit keys)."""


class TokenError(NewsletterError, ValueError):
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
        self._binding = hmac.new(secret.encode(), _BINDING, hashlib.sha256)

    def binding(self, email: str) -> str:
        """What a link carries instead of the address it was made for: the first 10 bytes of
        HMAC-SHA256(key, ``link-binding:`` + the address, letter case folded), 14 characters.

        Opaque without the key, and long enough that a link made for one address does not
        match another (2^-80); the signature over the whole token keeps it from being forged.
        """
        h = self._binding.copy()
        h.update(email.casefold().encode())
        return _b64(h.digest()[:10]).decode()

    def made_for(self, payload: Mapping[str, Any], email: str) -> bool | None:
        """Whether a link's payload names ``email``: its binding ``h``, or the address ``e``
        itself in links made before bindings (they keep working until they expire); ``None``
        when it names neither (view links made before those named the address)."""
        binding = payload.get("h")
        if isinstance(binding, str):
            return hmac.compare_digest(binding.encode(), self.binding(email).encode())
        address = payload.get("e")
        if isinstance(address, str):
            return hmac.compare_digest(address.encode(), email.encode())
        return None

    def _serializer(self, purpose: Purpose) -> URLSafeTimedSerializer:
        serializer = self._serializers.get(purpose)
        if serializer is None:
            serializer = _Uncompressed(
                self.secret, salt=f"newsletter.{purpose.value}", signer=self._signer
            )
            self._serializers[purpose] = serializer
        return serializer

    def family(self, purpose: Purpose, signed_at: datetime | None = None) -> TokenFamily:
        """A maker of many tokens of ``purpose`` whose payloads share a head (see the class),
        signed now or as of ``signed_at`` (see :meth:`make`)."""
        when = self._now() if signed_at is None else signed_at
        return TokenFamily(self.secret, purpose, int(when.timestamp()))

    def make(self, purpose: Purpose, payload: Any, signed_at: datetime | None = None) -> str:
        """A signed token carrying ``payload`` for ``purpose``.

        ``signed_at``: sign it as of then, so it expires when a token signed then does. A page
        reached by one link hands out other links signed as of that link, never newer: a
        year-old feedback link must not yield a manage link that a 90-day one could not.
        """
        if signed_at is not None:
            return self.family(purpose, signed_at).make(payload)
        return str(self._serializer(purpose).dumps(payload))

    def read(self, purpose: Purpose, token: str, max_age: timedelta | None = None) -> Any:
        """The payload of a token made for ``purpose``; raises :class:`TokenError` when it is
        damaged, for another purpose or older than ``max_age``."""
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


_B64 = bytes.maketrans(b"+/", b"-_")


def _b64(data: bytes) -> bytes:
    """URL-safe base64 without padding (itsdangerous's ``base64_encode``, without its checks)."""
    return binascii.b2a_base64(data, newline=False).translate(_B64).rstrip(b"=")


class TokenFamily:
    """Many tokens of one purpose, made fast: a digest carries two feedback links per paper.

    A token is a head plus a tail: the head (a dict: the subscriber) is shared by one reader's
    tokens, the tail (a dict: the paper and the vote) by every reader's token for that paper.
    The result is an ordinary token: :meth:`Tokens.read` reads it as the merged dict, with the
    same secret, purpose salt, timestamp and HMAC-SHA1 signature that :meth:`Tokens.make`
    writes. What is saved is the work: the head's JSON is padded with spaces to a multiple of
    three bytes, so its base64 is a prefix of the whole payload's and is encoded once per
    reader, as is the HMAC state over it; each tail is encoded once (the caller keeps it); per
    token there remains one short HMAC (RFC 2104 written out over ``hashlib`` states, which
    copy cheaply) and its base64: a few microseconds, against ~40 for ``Tokens.make``. The
    timestamp is the family's creation time (one run).
    """

    def __init__(self, secret: str, purpose: Purpose, timestamp: int) -> None:
        salt = f"newsletter.{purpose.value}".encode()
        # itsdangerous's "django-concat" key derivation, then HMAC's padded inner/outer keys.
        # SHA-1 because itsdangerous signs with HMAC-SHA1 (Tokens.read checks these tokens);
        # HMAC-SHA1 is not weakened by SHA-1's collisions.
        key = hashlib.sha1(salt + b"signer" + secret.encode()).digest().ljust(64, b"\0")  # noqa: S324
        self._inner = hashlib.sha1(bytes(b ^ 0x36 for b in key))  # noqa: S324
        self._outer = hashlib.sha1(bytes(b ^ 0x5C for b in key))  # noqa: S324
        self._stamp = b"." + base64_encode(int_to_bytes(timestamp))

    def head(self, fields: dict[str, Any]) -> TokenHead:
        """The shared part of one group's tokens (its fields come first in the payload)."""
        raw = _json(fields)
        raw = raw[:-1] + b","  # an object left open for the tail's fields
        raw += b" " * (-len(raw) % 3)  # JSON allows the blanks; base64 then splits cleanly
        encoded = _b64(raw)
        inner = self._inner.copy()
        inner.update(encoded)
        return TokenHead(self._outer, encoded.decode(), inner)

    def make(self, fields: dict[str, Any]) -> str:
        """One whole token for ``fields``: what :meth:`Tokens.make` writes (read back by
        :meth:`Tokens.read`), signed with the family's prepared HMAC states and timestamp."""
        signed = _b64(_json(fields)) + self._stamp
        inner = self._inner.copy()
        inner.update(signed)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return signed.decode() + "." + _b64(outer.digest()).decode()

    def tail(self, fields: dict[str, Any]) -> TokenTail:
        """The rest of a payload (its fields come after the head's), encoded once."""
        signed = _b64(_json(fields)[1:]) + self._stamp
        return TokenTail(signed, signed.decode() + ".")


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
"""Built once: ``json.dumps`` with any option builds an encoder per call, two thirds of a
token's cost (three tokens per digest)."""


def _json(fields: dict[str, Any]) -> bytes:
    return _ENCODER.encode(fields).encode()


@dataclass(frozen=True, slots=True)
class TokenTail:
    signed: bytes
    """The tail's base64 and the timestamp: the bytes the signature covers after the head."""
    text: str


class TokenHead:
    """One group's tokens (one reader's): ``make(tail)`` is the token for head + tail."""

    __slots__ = ("_inner", "_outer", "text")

    def __init__(self, outer: Any, text: str, inner: Any) -> None:
        self._outer = outer
        self._inner = inner
        self.text = text

    def make(self, tail: TokenTail) -> str:
        """The token for this head followed by ``tail``."""
        inner = self._inner.copy()
        inner.update(tail.signed)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return self.text + tail.text + _b64(outer.digest()).decode()


# ---------------------------------------------------------------------------- the key


def signing_key(config: Config) -> str:
    """The key that signs links: environment, else config, else a generated key file.

    Raises :class:`ConfigError` rather than return an empty, short or placeholder key. Reads
    the environment and may write the key file: call it once per process
    (:attr:`newsletter.services.Services.secret`), not from settings code.
    """
    web = config.settings.web
    env = os.environ.get(web.secret_key_env)
    if env is not None:  # set but empty is a mistake, not a request for the key file
        return _strong(config, env.strip(), f"${web.secret_key_env}")
    if web.secret_key:
        return _strong(config, web.secret_key, "web.secret_key")
    path = config.base_dir / web.secret_key_file
    try:
        if not path.exists():
            _create_key_file(path)
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise ConfigError(
            str(config.path),
            [
                f"{config.path}: web: no secret key: set ${web.secret_key_env}, or make "
                f"{path} writable ({why})"
            ],
        ) from e
    return _strong(
        config, key, f"{path} (delete the file to have a new key generated, or write one)"
    )


def admin_token(config: Config) -> str | None:
    """The admin token (``$`` ``web.admin_token_env``), or ``None`` when unset or empty (the
    admin endpoints are off).

    Raises :class:`ConfigError`, one line naming the variable and how to make a token, for a
    weak one (:func:`~newsletter.config.admin_token_problem`): ``newsletter serve`` calls this
    before it starts, as it calls :func:`signing_key`.
    """
    web = config.settings.web
    token = web.admin_token()
    if token is None:
        return None
    problem = admin_token_problem(token)
    if problem is not None:
        raise ConfigError(
            str(config.path),
            [
                f"{config.path}: web: ${web.admin_token_env}: {problem}, or unset it to turn "
                "/admin/send and the token's /metrics off"
            ],
        )
    return token


def _strong(config: Config, key: str, where: str) -> str:
    problem = secret_key_problem(key)
    if problem is not None:
        raise ConfigError(str(config.path), [f"{config.path}: web: {where}: {problem}"])
    return key


def _new_key() -> str:
    """A random key that :func:`secret_key_problem` accepts (one in about 10^7 random keys
    happens to spell a placeholder word such as "example"; that one is drawn again)."""
    while True:
        key = secrets.token_urlsafe(48)
        if secret_key_problem(key) is None:
            return key


def _create_key_file(path: Path) -> None:
    """Write a new random key to ``path`` unless another process got there first.

    The key goes to a temporary file (mode 0600) in the same folder, which is then hard-linked
    to ``path``: the link appears complete or not at all and never replaces an existing file,
    so processes racing to create the key all end up reading the one that won.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_new_key() + "\n")
            f.flush()
            os.fsync(f.fileno())
        # FileExistsError: another process wrote the key first; everyone uses theirs.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)
