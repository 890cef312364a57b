"""The hand-assembled digest message, parsed back with Python's email parser (policy.default).

Every header and both bodies must decode to what was meant, and to what the old
``EmailMessage`` path (tests/digests.py ``email_message_bytes``) produced for the same digest.
"""

from __future__ import annotations

import quopri
import re
from datetime import UTC, datetime
from email import policy
from email.header import decode_header, make_header
from email.message import EmailMessage
from email.parser import BytesParser, Parser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from newsletter.addresses import InvalidAddress
from newsletter.config import Settings
from newsletter.deliver import Envelope, build_message
from newsletter.deliver.mime import MAX_LINE, header_address, one_line
from newsletter.digest.render import RenderedDigest, Renderer
from tests import digests as D

NOW = datetime(2026, 11, 22, 6, 0, tzinfo=UTC)
MID = "<3f2a9c@papers.example.org>"
PAPERS = D.papers()
RENDERER = Renderer(D.settings())


def build(
    rendered: RenderedDigest,
    *,
    to: str = "ada@example.org",
    name: str = "Ada Lovelace",
    settings_: Settings | None = None,
) -> Envelope:
    return build_message(
        rendered,
        settings=settings_ or D.settings(),
        to_address=to,
        to_name=name,
        message_id=MID,
        links=D.links(),
        now=NOW,
    )


def parse(data: bytes) -> EmailMessage:
    msg = BytesParser(policy=policy.default).parsebytes(data)
    assert isinstance(msg, EmailMessage)
    return msg


def rfc2047(raw_value: str) -> str:
    """A header value decoded strictly by RFC 2047 (whitespace between encoded-words dropped)."""
    return str(make_header(decode_header(raw_value)))


def raw_header(data: bytes, name: str) -> str:
    head = data.split(b"\r\n\r\n", 1)[0].decode("ascii")
    m = re.search(rf"^{name}: (.*?)(?=\r\n\S|\Z)", head, re.MULTILINE | re.DOTALL)
    assert m, f"no {name} header"
    return m.group(1).replace("\r\n", "")


def _unquote(text: str) -> str:
    return re.sub(r'"((?:[^"\\]|\\.)*)"', lambda m: re.sub(r"\\(.)", r"\1", m.group(1)), text)


def rfc2047_phrase(raw_value: str) -> str:
    """A raw address header decoded strictly by RFC 2047, its quoted strings unquoted.

    Only the parts that were not encoded-words are unquoted: a quote inside an encoded-word is
    content.
    """
    out = []
    for part, charset in decode_header(raw_value):
        if charset is None:
            text = part.decode("ascii") if isinstance(part, bytes) else part
            out.append(_unquote(text))
        else:
            assert isinstance(part, bytes)
            out.append(part.decode(charset))
    return "".join(out)


def bodies(msg: EmailMessage, *, ours: bool = True) -> tuple[str, str]:
    assert msg.get_content_type() == "multipart/alternative"
    parts = list(msg.iter_parts())
    assert [p.get_content_type() for p in parts] == ["text/plain", "text/html"]
    text_part, html_part = parts
    assert text_part["Content-Transfer-Encoding"] == "quoted-printable"
    if not ours:  # the EmailMessage reference path: quoted-printable throughout
        assert html_part["Content-Transfer-Encoding"] == "quoted-printable"
    for p in parts:
        assert p.get_content_charset() == "utf-8"
    text, html = (str(p.get_content()).replace("\r\n", "\n") for p in parts)
    # ASCII HTML with lines of at most 998 octets goes as it is; anything else quoted-printable
    plain = html.isascii() and max(map(len, re.split(r"\r\n|\r|\n", html))) <= 998
    if ours:
        assert html_part["Content-Transfer-Encoding"] == ("7bit" if plain else "quoted-printable")
    return text, html


def check_wire(data: bytes) -> None:
    assert data.isascii()  # headers too: names are encoded-words, IDN domains xn--
    assert b"\n" not in data.replace(b"\r\n", b"") and b"\r" not in data.replace(b"\r\n", b"")
    lines = data.split(b"\r\n")
    assert max(len(line) for line in lines) <= 998
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    for line in head:  # headers fold at 78 unless one unbreakable URL is longer
        assert len(line) <= MAX_LINE or re.search(rb"<(https?|mailto):\S+>,?$", line), line


def test_every_header_and_both_bodies_parse_back() -> None:
    rendered = RENDERER.render(D.digest(PAPERS), D.links())
    env = build(rendered)
    check_wire(env.data)
    msg = parse(env.data)
    assert msg["Subject"] == rendered.subject
    assert (
        msg["Subject"] == "12 new papers in LLM serving, Mixture of experts, GPU kernels · Nov 22"
    )
    assert msg["From"] == "Trending Papers <digest@papers.example.org>"
    assert msg["To"] == "Ada Lovelace <ada@example.org>"
    assert msg["Date"] == "Sun, 22 Nov 2026 06:00:00 +0000"
    assert msg["Message-ID"] == MID
    assert msg["List-Id"] == "Trending papers <digest.papers.example.org>"
    assert msg["List-Unsubscribe"] == (
        f"<{D.links().unsubscribe}>, <mailto:papers-request@papers.example.org?subject=unsubscribe>"
    )
    assert msg["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert msg["Auto-Submitted"] == "auto-generated"
    assert msg["Precedence"] == "bulk"
    assert msg["X-Auto-Response-Suppress"] == "OOF, AutoReply"
    assert msg["MIME-Version"] == "1.0"
    assert "Reply-To" not in msg
    text, html = bodies(msg)
    assert text == rendered.text and html == rendered.html + "\n"  # a final line break
    assert (env.sender, env.recipient, env.message_id) == (
        "digest@papers.example.org",
        "ada@example.org",
        MID,
    )


def test_reply_to_and_list_id_from_config() -> None:
    s = Settings.model_validate(
        {
            "sender": {
                "from": "Papers Bot <bot@papers.example.org>",
                "reply_to": '"Help Desk, Papers" <help@papers.example.org>',
                "list_id": "Daily papers <daily.papers.example.org>",
            }
        }
    )
    msg = parse(build(RENDERER.render(D.digest(PAPERS), D.links()), settings_=s).data)
    assert msg["Reply-To"].addresses[0].display_name == "Help Desk, Papers"
    assert msg["Reply-To"].addresses[0].addr_spec == "help@papers.example.org"
    assert msg["List-Id"] == "Daily papers <daily.papers.example.org>"
    assert msg["From"] == "Papers Bot <bot@papers.example.org>"


@pytest.mark.parametrize(
    ("name", "expected_raw"),
    [
        ("Doe, Jane", '"Doe, Jane" <'),
        ('Jane "JD" Doe', '"Jane \\"JD\\" Doe" <'),
        ("Zoë Ünal", "=?utf-8?q?Zo=C3=AB_=C3=9Cnal?= <"),
        ("", "<"),
        ('"\u00a1', "=?utf-8?q?=22=C2=A1?= <"),  # found by hypothesis
    ],
)
def test_display_names_are_quoted_or_encoded(name: str, expected_raw: str) -> None:
    env = build(RENDERER.render(D.empty_digest(), D.links()), name=name)
    assert raw_header(env.data, "To").startswith(expected_raw)
    [addr] = parse(env.data)["To"].addresses
    assert addr.display_name == name and addr.addr_spec == "ada@example.org"


def test_a_very_long_display_name_is_encoded_and_folded_validly() -> None:
    name = "Zoë «Doe», Jr., Department of Very Long Names, Universität Zürich " * 3
    env = build(RENDERER.render(D.empty_digest(), D.links()), name=name)
    check_wire(env.data)
    raw = raw_header(env.data, "To")
    words = re.findall(r"=\?utf-8\?[qb]\?[^?]*\?=", raw)
    assert len(words) > 2 and all(len(w) <= 75 for w in words)
    assert len(env.data.split(b"\r\n\r\n")[0].split(b"\r\nTo: ")[1].split(b"\r\nDate")[0]) > 78
    # RFC 2047 decoding gives the name, and so does Python's parser
    assert rfc2047_phrase(raw) == f"{one_line(name)} <ada@example.org>"
    [addr] = parse(env.data)["To"].addresses
    assert addr.display_name == one_line(name) and addr.addr_spec == "ada@example.org"


def test_an_idn_domain_is_written_as_punycode_in_the_header() -> None:
    env = build(RENDERER.render(D.empty_digest(), D.links()), to="zoe@bücher.example")
    assert env.recipient == "zoe@bücher.example"  # the mailer makes the envelope form
    assert parse(env.data)["To"].addresses[0].addr_spec == "zoe@xn--bcher-kva.example"
    assert raw_header(env.data, "To").endswith("<zoe@xn--bcher-kva.example>")
    assert env.data.isascii()


def test_a_non_ascii_local_part_is_written_as_utf8_for_smtputf8() -> None:
    env = build(RENDERER.render(D.empty_digest(), D.links()), to="jürgen@bücher.example")
    head = env.data.split(b"\r\n\r\n", 1)[0]
    assert "To: Ada Lovelace <jürgen@xn--bcher-kva.example>".encode() in head
    # an SMTPUTF8 message: its headers are UTF-8 text
    msg = Parser(policy=policy.SMTPUTF8).parsestr(env.data.decode("utf-8"))
    [addr] = msg["To"].addresses
    assert addr.username == "jürgen" and addr.domain == "xn--bcher-kva.example"
    assert header_address("a.b+c@Example.ORG") == "a.b+c@Example.ORG"
    with pytest.raises(InvalidAddress, match="not an address"):
        header_address("no-at-sign")


def test_no_cr_or_lf_from_data_reaches_a_header() -> None:
    digest = D.hostile_digest()
    rendered = RENDERER.render(digest, D.links())
    rendered = RenderedDigest(
        "Hi\r\nBcc: evil@example.org\nX-Evil: 1", rendered.preheader, rendered.html, rendered.text
    )
    env = build(rendered, name="Eve\r\nBcc: evil@example.org\r\n\r\n<b>body</b>")
    check_wire(env.data)
    msg = parse(env.data)
    assert "Bcc" not in msg and "X-Evil" not in msg
    assert msg["Subject"] == "Hi Bcc: evil@example.org X-Evil: 1"
    assert msg["To"].addresses[0].display_name == "Eve Bcc: evil@example.org <b>body</b>"
    assert msg["To"].addresses[0].addr_spec == "ada@example.org"
    text, html = bodies(msg)
    assert html == rendered.html + "\n" and text == rendered.text


def _old_and_new(rendered: RenderedDigest, to: str, name: str) -> tuple[EmailMessage, EmailMessage]:
    kwargs = {
        "settings": D.settings(),
        "to_address": to,
        "to_name": name,
        "message_id": MID,
        "links": D.links(),
        "now": NOW,
    }
    old = parse(D.email_message_bytes(rendered, **kwargs))  # type: ignore[arg-type]
    new = parse(build_message(rendered, **kwargs).data)  # type: ignore[arg-type]
    return old, new


HEADERS = (
    "Subject",
    "From",
    "To",
    "Date",
    "Message-ID",
    "List-Id",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
    "Auto-Submitted",
    "Precedence",
    "X-Auto-Response-Suppress",
    "MIME-Version",
)


def same_as_email_message(rendered: RenderedDigest, to: str, name: str) -> None:
    old, new = _old_and_new(rendered, to, name)
    for header in HEADERS:
        assert str(new[header]) == str(old[header]), header
    assert [k for k, _ in new.items()][: len(HEADERS)] == list(HEADERS[:3]) + list(HEADERS[3:])
    assert bodies(new) == bodies(old, ours=False)


@pytest.mark.parametrize("offset", range(0, 40, 8))
def test_same_message_as_the_email_message_path_for_a_batch_of_digests(offset: int) -> None:
    rendered = RENDERER.render(D.digest(PAPERS, offset=offset), D.links(offset))
    same_as_email_message(rendered, f"reader{offset}@example.org", f"Reader Nº{offset}")


def test_same_message_as_the_email_message_path_for_hostile_and_empty_digests() -> None:
    for digest in (D.hostile_digest(), D.empty_digest()):
        rendered = RENDERER.render(digest, D.links())
        same_as_email_message(rendered, "eve@example.org", "Eve, the <intruder>")


header_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x1FFFF), max_size=120
)
body_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), max_codepoint=0x1FFFF), max_size=600
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(subject=header_text, name=header_text, text=body_text, html=body_text)
def test_any_subject_name_and_bodies_round_trip(
    subject: str, name: str, text: str, html: str
) -> None:
    rendered = RenderedDigest(subject, "", html, text)
    env = build(rendered, name=name)
    check_wire(env.data)
    msg = parse(env.data)
    assert str(msg["Subject"]) == one_line(subject)
    assert rfc2047(raw_header(env.data, "Subject")) == one_line(subject)
    raw_to = raw_header(env.data, "To")
    shown = one_line(name)
    if shown:
        assert rfc2047_phrase(raw_to) == f"{shown} <ada@example.org>"
        if not re.search(r"\?=\s+=\?", raw_to):
            # Python's parser keeps the space between two adjacent encoded-words (RFC 2047
            # drops it); with none adjacent it must read the very same name.
            assert msg["To"].addresses[0].display_name == shown
    assert msg["To"].addresses[0].addr_spec == "ada@example.org"
    assert len(msg["To"].addresses) == 1
    plain, markup = bodies(msg)

    def lines(s: str) -> str:
        s = s.replace("\r\n", "\n").replace("\r", "\n")
        return s if s.endswith("\n") else s + "\n"

    assert plain == lines(text) and markup == lines(html)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(title=header_text, reason=header_text, name=header_text)
def test_hostile_feed_text_gives_the_same_message_as_email_message(
    title: str, reason: str, name: str
) -> None:
    from dataclasses import replace

    from newsletter.models import Digest, DigestItem, TopicSection

    paper = replace(PAPERS[0], title=title or "x")
    item = DigestItem(paper, "t", 1.0, reason)
    digest = Digest(D.subscriber(), D.EDITION, (TopicSection("t", "Topic", (item,)),), ("Topic",))
    rendered = RENDERER.render(digest, D.links())
    old, new = _old_and_new(rendered, "ada@example.org", name)
    assert bodies(new) == bodies(old, ours=False)
    for header in ("Subject", "List-Unsubscribe", "Message-ID"):
        assert str(new[header]) == str(old[header])
    assert new["To"].addresses[0].addr_spec == old["To"].addresses[0].addr_spec


def test_the_quoted_printable_caches_stay_bounded_and_correct() -> None:
    from newsletter.deliver.mime import QuotedPrintable

    qp = QuotedPrintable(max_paragraphs=50, max_lines=80)
    for i in range(500):
        text = f"static line = same for all\n\nper reader {i} é\nunique {i}\n"
        encoded = qp.encode(text)
        # checked before each message: at most one message's worth above the bound
        assert len(qp._paragraphs) <= 50 + 5 and len(qp._lines) <= 80 + 10
        expected = quopri.encodestring(text.encode("utf-8")).replace(b"\n", b"\r\n")
        assert quopri.decodestring(encoded) == quopri.decodestring(expected)
        assert encoded.startswith(b"static line =3D same for all\r\n\r\nper reader")


@pytest.mark.parametrize(
    ("html", "cte"),
    [
        ("<p>plain ASCII</p>\n", "7bit"),
        ("<p>" + "x" * 995 + "</p>\n", "quoted-printable"),  # a line over 998 octets
        ("<p>caf\u00e9</p>\n", "quoted-printable"),  # not ASCII (a custom template's text)
    ],
)
def test_the_html_part_goes_7bit_only_when_it_can(html: str, cte: str) -> None:
    env = build(RenderedDigest("S", "p", html, "text\n"))
    check_wire(env.data)
    html_part = list(parse(env.data).iter_parts())[1]
    assert html_part["Content-Transfer-Encoding"] == cte
    assert str(html_part.get_content()).replace("\r\n", "\n") == html


@settings(max_examples=500, deadline=None)
@given(
    lines=st.lists(
        st.sampled_from([0, 1, 5, 80, 997, 998, 999, 1000, 2500]).map(lambda n: "x" * n),
        min_size=1,
        max_size=8,
    ),
    trailing=st.booleans(),
)
def test_the_long_line_check_agrees_with_measuring_every_line(
    lines: list[str], trailing: bool
) -> None:
    """The HTML goes 7bit only when no line passes 998 octets; the check jumps a window at a
    time instead of splitting the message into lines, and must say what splitting says."""
    from newsletter.deliver.mime import as_7bit, longest_line_over

    text = "\n".join(lines) + ("\n" if trailing else "")
    for limit in (0, 5, 80, 998):
        assert longest_line_over(text, limit) == (max(map(len, text.split("\n"))) > limit)
    assert (as_7bit(text) is None) == (max(map(len, text.split("\n"))) > 998)
