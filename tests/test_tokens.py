"""Link tokens: purpose-bound, expiring, and readable across the switch to uncompressed payloads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from itsdangerous import URLSafeTimedSerializer

from newsletter.tokens import Purpose, TokenError, Tokens

NOW = datetime(2026, 11, 24, 7, 0, tzinfo=UTC)


def test_round_trip_and_purpose_binding() -> None:
    tokens = Tokens("secret", now=lambda: NOW)
    payload = {"s": 42, "e": "ada@example.org"}
    token = tokens.make(Purpose.UNSUBSCRIBE, payload)
    assert not token.startswith(".")  # not zlib-compressed
    assert tokens.read(Purpose.UNSUBSCRIBE, token) == payload
    with pytest.raises(TokenError):
        tokens.read(Purpose.MANAGE, token)
    with pytest.raises(TokenError):
        Tokens("other secret", now=lambda: NOW).read(Purpose.UNSUBSCRIBE, token)
    later = Tokens("secret", now=lambda: NOW + timedelta(days=91))
    with pytest.raises(TokenError) as info:
        later.read(Purpose.UNSUBSCRIBE, token)
    assert info.value.expired


def test_links_mailed_with_compressed_payloads_still_work() -> None:
    """Tokens made before (itsdangerous's default, zlib when it is shorter) are still read."""
    payload = {"s": 7, "e": "a-long-address-that-compresses-well@example.org" * 3}
    old = URLSafeTimedSerializer("secret", salt="newsletter.unsubscribe").dumps(payload)
    assert old.startswith(".")  # the compressed form
    assert Tokens("secret").read(Purpose.UNSUBSCRIBE, old) == payload
