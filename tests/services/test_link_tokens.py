"""Link tokens: purpose-bound, expiring, and readable across the switch to uncompressed payloads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from itsdangerous import URLSafeTimedSerializer

from newsletter.services.link_tokens import Purpose, TokenError, Tokens

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


@pytest.mark.parametrize("email", ["ada@example.org", "zoë@bücher.example"])
@pytest.mark.parametrize("purpose", [Purpose.UNSUBSCRIBE, Purpose.MANAGE, Purpose.VIEW])
def test_a_family_makes_whole_tokens_that_read_back_like_made_ones(
    purpose: Purpose, email: str
) -> None:
    """The digest's three links come from :meth:`TokenFamily.make` (prepared HMAC states):
    each reads back exactly as a :meth:`Tokens.make` token does, and only for its purpose."""
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 11, 18, 7, 0, tzinfo=UTC)
    tokens = Tokens("family-secret-0123456789abcdef", now=lambda: now)
    fields = {"s": 42, "e": email, "d": "2026-11-18"}
    token = tokens.family(purpose).make(fields)
    assert tokens.read(purpose, token) == fields
    assert tokens.read_signed(purpose, token)[1] == now
    same = tokens.make(purpose, fields)
    assert tokens.read(purpose, same) == tokens.read(purpose, token)
    other = Purpose.MANAGE if purpose is not Purpose.MANAGE else Purpose.UNSUBSCRIBE
    with pytest.raises(TokenError):
        tokens.read(other, token)
    payload, stamp, sig = token.split(".")
    with pytest.raises(TokenError):
        tokens.read(purpose, f"{payload}.{stamp}.{sig[:-2]}AA")
    with pytest.raises(TokenError):
        Tokens("another-secret-0123456789abcdef").read(purpose, token)
    later = Tokens("family-secret-0123456789abcdef", now=lambda: now + timedelta(days=400))
    with pytest.raises(TokenError) as e:
        later.read(purpose, token)
    assert e.value.expired


def test_a_binding_stands_for_an_address_without_showing_it() -> None:
    tokens = Tokens("secret", now=lambda: NOW)
    binding = tokens.binding("Ada@Example.org")
    assert len(binding) == 14 and "ada" not in binding.casefold()
    assert binding == tokens.binding("ada@example.org")  # letter case ignored
    assert binding != tokens.binding("bob@example.org")
    assert binding != Tokens("another secret").binding("ada@example.org")
    assert tokens.made_for({"s": 1, "h": binding}, "ADA@example.org") is True
    assert tokens.made_for({"s": 1, "h": binding}, "bob@example.org") is False
    assert tokens.made_for({"s": 1, "e": "ada@example.org"}, "ada@example.org") is True  # old
    assert tokens.made_for({"s": 1, "e": "ada@example.org"}, "bob@example.org") is False
    assert tokens.made_for({"s": 1}, "ada@example.org") is None


def test_a_token_signed_as_of_another_expires_with_it() -> None:
    tokens = Tokens("secret", now=lambda: NOW)
    signed = NOW - timedelta(days=80)
    token = tokens.make(Purpose.MANAGE, {"s": 1}, signed)
    assert tokens.read_signed(Purpose.MANAGE, token) == ({"s": 1}, signed)
    later = Tokens("secret", now=lambda: NOW + timedelta(days=11))
    with pytest.raises(TokenError) as e:
        later.read(Purpose.MANAGE, token)
    assert e.value.expired
