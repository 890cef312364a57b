"""A body encoded once with slots, filled with one reader's values, is byte for byte what the
MIME writer makes of the text with those values in place (newsletter.deliver.wire)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from newsletter.deliver.mime import QuotedPrintable, as_7bit
from newsletter.deliver.wire import WireHtml, WireText
from newsletter.models import Slot

CODES = ("P", "e", "v", "d0")

TOKENS = ["a", "b", " ", "\t", ".", "=", "\n", "\n.", "é", "€", "\r", "x" * 90, "y" * 400]
"""Text, line breaks, dots, non-ASCII, a carriage return, and lines long enough to fold (QP)
or to pass 998 octets (7bit)."""
text_piece = st.lists(st.sampled_from(TOKENS), max_size=12).map("".join)
value = st.lists(
    st.sampled_from(["h", ".", "/", "é", "&", " ", "x" * 300, "\n", "\r"]), max_size=4
).map("".join)


def _filled(pieces: list[str | Slot], values: dict[str, str]) -> str:
    return "".join(values[p.code] if isinstance(p, Slot) else p for p in pieces)


pieces_st = st.lists(st.one_of(text_piece, st.sampled_from([Slot(c) for c in CODES])), max_size=12)
values_st = st.fixed_dictionaries({c: value for c in CODES})


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=pieces_st, values=values_st, tail=text_piece)
def test_the_html_part_is_what_as_7bit_writes(
    pieces: list[str | Slot], values: dict[str, str], tail: str
) -> None:
    pieces = [*pieces, tail or "<end>"]
    wire = WireHtml.build(pieces)
    want = as_7bit(_filled(pieces, values))
    static = "".join(p for p in pieces if isinstance(p, str))
    if wire is None:  # only when the shared text itself cannot go 7bit
        assert "\r" in static or as_7bit(static) is None
        return
    got = wire.fill(values)
    if got is None:  # the reader's values may not fit: that reader is rendered alone
        return
    assert want is not None, "a fill went 7bit where the writer would not"
    assert got[0] == want[0]
    assert got[1] or not want[1], "a line that begins with a dot was missed"


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=pieces_st, values=values_st, tail=text_piece)
def test_the_text_part_is_what_quoted_printable_writes(
    pieces: list[str | Slot], values: dict[str, str], tail: str
) -> None:
    pieces = [*pieces, tail or "<end>"]
    wire = WireText.build(pieces)
    if wire is None:  # a carriage return in the shared text: written whole, per reader
        assert any("\r" in p for p in pieces if isinstance(p, str))
        return
    got = wire.fill(values)
    if got is None:
        assert any("\r" in v for v in values.values())
        return
    assert got == QuotedPrintable().encode_flagged(_filled(pieces, values))


def test_a_fill_refuses_what_would_break_a_7bit_line() -> None:
    wire = WireHtml.build(['<a href="', Slot("v"), '">view</a>\n'])
    assert wire is not None
    assert wire.fill({"v": "https://x.example/" + "a" * 980}) is None  # line over 998 octets
    assert wire.fill({"v": "https://x.example/" + "a" * 960}) is not None  # 997 octets
    assert wire.fill({"v": "https://x.example/\n"}) is None  # a line break of the reader's
    assert wire.fill({"v": "https://x.example/é"}) is None  # not 7bit
    ok = wire.fill({"v": "https://x.example/a"})
    assert ok == (b'<a href="https://x.example/a">view</a>\r\n', False)


def test_the_links_of_a_section_are_one_join() -> None:
    pieces: list[str | Slot] = ["<p>"]
    for n in range(5):
        pieces += [Slot("P"), f't/{n}/more">more</a>\n']
    wire = WireHtml.build([*pieces, "</p>\n"])
    assert wire is not None
    runs = [s for s in wire.segments if type(s).__name__ == "_Run"]
    assert len(runs) == 1 and runs[0].code == "P"  # type: ignore[union-attr]
    body, _ = wire.fill({"P": "https://x.example/feedback/TOKEN/"})  # type: ignore[misc]
    assert body.count(b"https://x.example/feedback/TOKEN/t/") == 5
