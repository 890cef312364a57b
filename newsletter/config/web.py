"""The front doors: the ``web:`` and ``inbound:`` sections and the link-signing key's rules.

The web app (where it listens, the admin token, the metrics listener on loopback), the limits on
subscription requests and admin token guesses, the receiver for email commands, and which
signing keys and admin tokens are refused (empty, short, placeholders, keys published in
newsletter's own files).
"""

from __future__ import annotations

import ipaddress
import os
import re

from pydantic import Field, field_validator

from newsletter.config.base import _check_address, _Strict

#: The shortest link-signing key accepted, in characters (a generated key has 64).
MIN_SECRET_KEY_LENGTH = 32
#: A key with fewer different characters than this is a placeholder ("xxxx…"), not a secret.
MIN_SECRET_KEY_DISTINCT = 10
MAKE_SECRET_KEY = 'python3 -c "import secrets; print(secrets.token_urlsafe(48))"'  # noqa: S105 - a command
#: The shortest admin token accepted (``$NEWSLETTER_ADMIN_TOKEN``): the signing key's rules hold.
MIN_ADMIN_TOKEN_LENGTH = MIN_SECRET_KEY_LENGTH

#: Keys that were ever written in newsletter's own files (the compose file, docs, examples):
#: public, so they sign nothing. tests/security/test_signing_key.py reads the repository and
#: checks that every key written in it is refused, by this list or by the placeholder words.
PUBLISHED_SECRET_KEYS = frozenset(
    {
        "change-me-to-a-long-random-string",  # deploy/compose.yaml until 2026-11
        "bench-deliver-secret-0123456789abcd",  # bench/ scripts until 2026-11
        "bench-import-secret-0123456789abcdefgh",
        "bench-scale-secret-0123456789abcdefgh",
    }
)
#: Text that marks a key as written for a reader to replace, compared in lower case with the
#: separators (anything but letters and digits) removed: "Change_Me", "change-me" and
#: "CHANGEME" are one. Each is 6 characters or more, so a random key (64 characters from 64)
#: contains one by chance about once in 10^7 keys or less.
_PLACEHOLDER_TEXT = (
    "changeme",
    "replace",
    "example",
    "secretkey",
    "placeholder",
    "yoursecret",
    "yourkey",
    "yourown",
    "insertyour",
    "putyour",
    "randomstring",
    "randomkey",
    "longrandom",
    "notasecret",
    "notsecret",
    "donotuse",
    "dontuse",
    "xxxxxx",
)
#: Whole words (between separators) that mark a placeholder; too short to look for inside a
#: random key, where they would turn up by chance.
_PLACEHOLDER_WORDS = re.compile(r"your|todo|fixme|dummy|sample|insert|x{4,}")


def _placeholder(key: str) -> str | None:
    """The placeholder text in ``key`` ("change-me", "your-key", "xxx", …), or ``None``."""
    lowered = key.lower()
    joined = re.sub(r"[^a-z0-9]", "", lowered)
    for text in _PLACEHOLDER_TEXT:
        if text in joined:
            return text
    for word in re.split(r"[^a-z0-9]+", lowered):
        if _PLACEHOLDER_WORDS.fullmatch(word):
            return word
    return None


def secret_key_problem(key: str) -> str | None:
    """Why ``key`` may not sign links (empty, short, a placeholder, published), or ``None``.

    A key printed in a doc or a shipped file is known to everyone who read it: whoever holds
    the key can sign a confirmation for any address, so such keys are refused by name, and
    keys that look like a placeholder by the words they contain.
    """
    return _weak(key, "the secret key", MIN_SECRET_KEY_LENGTH)


def admin_token_problem(token: str) -> str | None:
    """Why ``token`` may not be the admin token (short, few characters, a placeholder,
    published), or ``None``: the signing key's rules (:func:`secret_key_problem`).

    The admin token opens ``POST /admin/send`` and ``GET /metrics`` to whoever sends it: a
    guessable one ("a", "admin", "change-me") is as good as none, and worse, since the
    operator believes the endpoints closed. An unset or empty variable turns them off instead.
    """
    return _weak(token, "the admin token", MIN_ADMIN_TOKEN_LENGTH)


def _weak(key: str, what: str, min_length: int) -> str | None:
    if not key:
        return f"{what} is empty; make one with: {MAKE_SECRET_KEY}"
    if key in PUBLISHED_SECRET_KEYS:
        return (
            f"{what} is the example published in newsletter's own files, so anyone "
            f"has it; make one with: {MAKE_SECRET_KEY}"
        )
    if len(key) < min_length:
        return (
            f"{what} is {len(key)} characters, fewer than {min_length}; "
            f"make one with: {MAKE_SECRET_KEY}"
        )
    if len(set(key)) < MIN_SECRET_KEY_DISTINCT:
        return (
            f"{what} has only {len(set(key))} different characters (a placeholder?); "
            f"make one with: {MAKE_SECRET_KEY}"
        )
    placeholder = _placeholder(key)
    if placeholder is not None:
        return (
            f"{what} is a placeholder (it says {placeholder!r}), not a secret; "
            f"make one with: {MAKE_SECRET_KEY}"
        )
    return None


class WebSettings(_Strict):
    secret_key_env: str = "NEWSLETTER_SECRET_KEY"  # noqa: S105 - the variable's name, not a secret
    secret_key: str | None = None
    """Signs unsubscribe and manage links. Prefer the environment variable named above."""
    secret_key_file: str = "var/secret.key"  # noqa: S105 - a path, not a secret
    """Used when neither is set: created with a random key on first use (relative to the config)."""
    host: str = "127.0.0.1"
    """Where ``newsletter serve`` listens. Put a TLS-terminating proxy in front for the public."""
    port: int = Field(default=8000, ge=1, le=65535)
    forwarded_allow_ips: str = "127.0.0.1"
    """Proxies whose X-Forwarded-For is trusted for the client address (comma-separated, or '*')."""
    confirm_days: int = Field(default=3, ge=1, le=30)
    """How long a confirmation link stays valid."""
    rate_limit: RateLimitSettings = Field(default_factory=lambda: RateLimitSettings())
    admin_token_env: str = "NEWSLETTER_ADMIN_TOKEN"  # noqa: S105 - the variable's name, not a secret
    """The admin endpoint (POST /admin/send) is enabled when this variable holds a token; a
    weak one (:func:`admin_token_problem`) stops ``newsletter serve``."""
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, le=16 * 1024 * 1024)
    """The largest request body the web app reads (forms, JSON); a larger one is answered 413."""
    metrics_listen: str | None = None
    """``HOST:PORT`` on a loopback address (e.g. ``127.0.0.1:9464``): ``newsletter serve`` also
    serves the Prometheus metrics there, without a token, for a scraper on the same machine.
    Unset: only ``GET /metrics`` with the admin token (``admin_token_env``) serves them."""

    @field_validator("metrics_listen")
    @classmethod
    def _metrics_listen(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, port = loopback_listen(value)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @field_validator("secret_key")
    @classmethod
    def _secret_key(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = secret_key_problem(value.strip())
        if problem is not None:
            raise ValueError(f"{problem} (better: set it in the environment variable)")
        return value.strip()

    def admin_token(self) -> str | None:
        """The admin token from the environment variable ``admin_token_env``, or ``None``
        (unchecked: see :func:`admin_token_problem`)."""
        return os.environ.get(self.admin_token_env) or None


def loopback_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0: any free one) on a loopback address, as
    ``(host, port)``; ``ValueError`` (one line) otherwise. Loopback only: the metrics listener
    has no token, so it must not be reachable from the network (a scraper elsewhere uses
    ``GET /metrics`` with the admin token)."""
    host, sep, port_text = value.strip().rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"{value!r} is not HOST:PORT (like 127.0.0.1:9464)")
    host = host.removeprefix("[").removesuffix("]")
    if host == "localhost":
        host = "127.0.0.1"
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"{value!r}: the host must be a loopback IP address (127.0.0.1 or [::1])"
        ) from None
    if not ip.is_loopback:
        raise ValueError(
            f"{value!r} is not a loopback address: the metrics listener has no token; to "
            "scrape from another host use GET /metrics with the admin token"
        )
    return str(ip), int(port_text)


class RateLimitSettings(_Strict):
    """Limits on subscription requests (web form, JSON API, email), against subscription bombing."""

    per_ip: int = Field(default=10, ge=1)
    """Requests one client address (an IPv6 one by its /64; for email commands, the sending
    host) may make per ``per_ip_window`` seconds."""
    per_ip_window: int = Field(default=3600, ge=1)
    per_address: int = Field(default=3, ge=1)
    """Mails that anyone may have sent to one email address (its ``+tag`` ignored) per
    ``per_address_window``: confirmations and "your subscription" mails answering subscribe
    requests (form, API, email, ``subscribers invite``), and ``help``/``topics`` replies."""
    per_address_window: int = Field(default=86400, ge=1)
    email_confirmations_per_address: int = Field(default=1, ge=1)
    """Of those, confirmation mails answering an email command (whose From can be forged)."""
    links_per_address: int = Field(default=3, ge=1)
    """"Email me a link" mails per ``per_address_window``, asked from a page opened by the
    reader's own digest link (a valid token): a budget of its own, which anonymous requests
    (``per_address``) cannot spend."""
    unsubscribe_per_address: int = Field(default=3, ge=1)
    """Unsubscribe links answering the ``unsubscribe`` email command per ``per_address_window``:
    a budget of its own, which subscribe requests and ``help`` replies cannot spend."""
    admin_failures_per_ip: int = Field(default=10, ge=1)
    """Wrong admin tokens (``/admin/send``, ``/metrics``) one client address (IPv6: its /64)
    may send per ``admin_failures_window``; past that it is answered 429 with ``Retry-After``,
    its token not compared, until its failures are older than the window. The right token is
    never counted."""
    admin_failures: int = Field(default=100, ge=1)
    """Wrong admin tokens from all clients together per ``admin_failures_window``; past that
    each client is answered 429 after its first failure. A client that sent no wrong token
    is never slowed by the failures of others: the operator's right token still works."""
    admin_failures_window: int = Field(default=600, ge=1)


class InboundSettings(_Strict):
    """``newsletter inbound``: the SMTP/LMTP receiver for email commands (subscribe, help...)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8025, ge=1, le=65535)
    lmtp: bool = False
    """Speak LMTP instead of SMTP (for a Postfix ``lmtp:`` transport)."""
    address: str | None = None
    """The request address (e.g. papers-request@example.org); other recipients are refused."""
    max_size: int = Field(default=256 * 1024, ge=1024)
    """Largest message accepted, in bytes (commands are short)."""
    max_per_hour: int = Field(default=60, ge=1)
    """Email commands answered per hour from everyone together; the rest are dropped (logged)."""
    trusted_relays: list[str] = Field(default_factory=lambda: ["127.0.0.1", "::1"])
    """Peers (your MTA) that name the sending host, which the per-host limits
    (``web.rate_limit.per_ip``, ``bounces.per_host``) then count: by XFORWARD or XCLIENT (offered
    to them only), else in their own comment on the topmost ``Received:`` line (never the
    client's HELO); other peers are counted themselves."""

    @field_validator("address")
    @classmethod
    def _addr(cls, value: str | None) -> str | None:
        return None if value is None else _check_address(value)
