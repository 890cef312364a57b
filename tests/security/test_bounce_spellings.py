"""Issue 27, a loose end of items 3 and 6: a report names each reader once, however spelled.

A bounce report's recipients were told apart with ``address.lower()``: the decomposed and the
composed ``é``, ``ß`` and ``SS``, an IDN domain in its ``xn--`` form and in Unicode were
different recipients. Each took one of the report's ``MAX_RECIPIENTS`` places (pushing real
ones out) and was one more look-up of one subscriber. They are now told apart by
:func:`newsletter.addresses.address_key`, the form consent and look-ups compare on
(``subscribers.email_key``), in DSNs, plain-text bounces and abuse reports alike. And a
non-ASCII address written raw in a header (an SMTPUTF8 bounce) is read as UTF-8: the parser
made each of its bytes a U+FFFD, an address nobody has.
"""

from __future__ import annotations

import unicodedata

from newsletter.addresses import address_key
from newsletter.bounces.parse import MAX_RECIPIENTS, parse_report
from tests.bounces.helpers import fixture
from tests.conftest import NOW
from tests.security.test_bounce_oracle import BOUNCES, dsn

EMILE = "émile.straße@bücher.example"
SPELLINGS = [
    EMILE,
    unicodedata.normalize("NFD", EMILE),  # e + combining accent, as some MTAs write it
    "ÉMILE.STRASSE@BÜCHER.EXAMPLE",
    "Émile.Straße@xn--bcher-kva.example",
    "émile.strasse@XN--BCHER-KVA.EXAMPLE",
]
OTHERS = [f"r{i}@example.net" for i in range(MAX_RECIPIENTS - 1)]


def test_the_spellings_of_one_address_are_one_recipient_of_a_dsn() -> None:
    assert len({address_key(a) for a in SPELLINGS}) == 1
    parsed = parse_report(dsn(*SPELLINGS, *OTHERS), recipients=[BOUNCES], verp=None, now=NOW)
    keys = [address_key(e.address) for e in parsed.events]
    # One event for Émile, and every other reader still read: nobody pushed past the cap.
    assert len(keys) == len(set(keys)) == MAX_RECIPIENTS
    assert {address_key(a) for a in [EMILE, *OTHERS]} == set(keys)
    assert parsed.dropped == 0


def test_the_spellings_of_one_address_are_one_complaint_of_an_abuse_report() -> None:
    arf = (
        fixture("arf-abuse.eml")
        .replace(b"\r\n", b"\n")
        .replace(
            b"Original-Rcpt-To: <reader@example.net>\n",
            b"".join(f"Original-Rcpt-To: <{a}>\n".encode() for a in [*SPELLINGS, *OTHERS]),
        )
    )
    parsed = parse_report(arf, recipients=[BOUNCES], verp=None, now=NOW)
    keys = [address_key(e.address) for e in parsed.events]
    assert len(keys) == len(set(keys)) == MAX_RECIPIENTS and parsed.dropped == 0
    assert parsed.events[0].address == EMILE  # the first spelling is kept
