"""VERP envelope senders: signed, short, case-insensitive, and off by default."""

from __future__ import annotations

from datetime import date

from newsletter.bounces.settings import BounceSettings
from newsletter.bounces.verp import Verp, is_bounce_address
from tests.bounces.helpers import BOUNCE_ADDRESS, SECRET

DAY = date(2026, 11, 17)


def test_the_sender_names_subscriber_and_edition_and_reads_back_in_any_case() -> None:
    verp = Verp(SECRET, BOUNCE_ADDRESS)
    sender = verp.sender(2**40 + 5, DAY)
    local, _, domain = sender.partition("@")
    assert domain == "papers.example.org" and local.startswith("bounces+")
    assert len(local) <= 64 and local == local.lower()
    token = verp.verify(sender)
    assert token is not None and (token.subscriber_id, token.edition) == (2**40 + 5, DAY)
    assert verp.verify(sender.upper()) == token
    assert verp.verify(f"<{sender}>") == token


def test_a_token_from_another_key_or_changed_in_one_character_is_refused() -> None:
    verp = Verp(SECRET, BOUNCE_ADDRESS)
    sender = verp.sender(1, DAY)
    assert Verp(SECRET + "!", BOUNCE_ADDRESS).verify(sender) is None
    token = verp.token_of(sender)
    assert token is not None
    for i in range(len(token)):
        flipped = token[:i] + ("b" if token[i] != "b" else "c") + token[i + 1 :]
        assert verp.read(flipped) is None
    assert verp.read(token[:-1]) is None
    assert verp.verify("someone+" + token + "@papers.example.org") is None  # another local part


def test_off_by_default_and_plain_address_without_verp() -> None:
    assert Verp.from_settings(BounceSettings(), SECRET, "digest@papers.example.org") is None
    plain = Verp.from_settings(
        BounceSettings(enabled=True, verp=False), SECRET, "digest@papers.example.org"
    )
    assert plain is not None and plain.sender(1, DAY) == BOUNCE_ADDRESS
    signed = Verp.from_settings(
        BounceSettings(enabled=True, address="bounce@mail.example.org"), SECRET, "d@x.org"
    )
    assert signed is not None and signed.sender(1, DAY).endswith("@mail.example.org")
    assert signed.sender(1, DAY).startswith("bounce+")


def test_is_bounce_address() -> None:
    assert is_bounce_address("Bounces@Papers.example.org", BOUNCE_ADDRESS)
    assert is_bounce_address("bounces+abc@papers.example.org", BOUNCE_ADDRESS)
    assert not is_bounce_address("bouncesx@papers.example.org", BOUNCE_ADDRESS)
    assert not is_bounce_address("bounces@other.example.org", BOUNCE_ADDRESS)
    assert not is_bounce_address("papers-request@papers.example.org", BOUNCE_ADDRESS)
