"""The SMTP transaction the mailer writes itself (MAIL, RCPT, DATA) against a real aiosmtpd.

The mailer skips ``smtplib.sendmail``'s per-message regular expressions when the message says
it is already CRLF and has no line that begins with a dot. These tests check that what the relay
stores is byte for byte the message, dots and line endings included, on both paths; that the
flag the MIME writer gives is true exactly when a line begins with a dot; and that a refused
recipient leaves the connection usable (RSET), as ``smtplib`` would.
"""

from __future__ import annotations

import re
import smtplib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from newsletter.config import SmtpSettings
from newsletter.deliver import Envelope, SmtpMailer, wire_data
from newsletter.errors import DeliveryError
from newsletter.mime import QuotedPrintable
from newsletter.render import RenderedDigest
from tests.conftest import SmtpServer
from tests.test_mime import build


def mailer(server: SmtpServer) -> SmtpMailer:
    return SmtpMailer(SmtpSettings(host=server.host, port=server.port, timeout=10))


def dotted_digest() -> RenderedDigest:
    text = "Intro\n.\n.hidden line\n..two dots\n\nlast\n"
    html = "<p>x</p>\n.starts with a dot\n<p>" + "y" * 200 + ".z</p>\n"
    return RenderedDigest("Dots", "pre", html, text)


def test_a_digest_with_dotted_lines_arrives_byte_for_byte(smtp_server: SmtpServer) -> None:
    envelope = build(dotted_digest())
    assert envelope.crlf and envelope.dot_lines
    assert re.search(rb"(?m)^\.", envelope.data), "the fixture must have a line starting with '.'"
    with mailer(smtp_server) as m:
        m.send(envelope)
    assert [r.data for r in smtp_server.received] == [envelope.data]


def test_a_plain_digest_says_it_has_no_dotted_line_and_arrives_intact(
    smtp_server: SmtpServer,
) -> None:
    envelope = build(RenderedDigest("Plain", "pre", "<p>hello</p>\n", "hello\n"))
    assert envelope.crlf and not envelope.dot_lines
    assert wire_data(envelope) is envelope.data  # nothing to fix: the bytes go out as they are
    with mailer(smtp_server) as m:
        m.send(envelope)
    assert [r.data for r in smtp_server.received] == [envelope.data]


def test_a_message_with_bare_line_feeds_and_dots_is_fixed_like_smtplib(
    smtp_server: SmtpServer,
) -> None:
    raw = b"Subject: lf\n\n.first\nsecond\r\nthird\r.last"
    envelope = Envelope("digest@papers.example.org", "ada@example.org", raw, "<m@x>")
    assert not envelope.crlf and envelope.dot_lines  # the defaults: vouch for nothing
    with mailer(smtp_server) as m:
        m.send(envelope)
    assert (
        smtp_server.received[0].data == b"Subject: lf\r\n\r\n.first\r\nsecond\r\nthird\r\n.last\r\n"
    )


def test_wire_data_is_smtplib_dot_stuffing_after_crlf_line_endings() -> None:
    raw = b".a\n.b\r\n\r.c\rd\n"
    envelope = Envelope("a@example.org", "b@example.org", raw, "<m@x>")
    crlf = re.sub(rb"\r\n|\n|\r", b"\r\n", raw)  # bare CR or LF never reaches the relay
    assert wire_data(envelope) == smtplib._quote_periods(crlf)  # type: ignore[attr-defined]
    assert wire_data(envelope) == b"..a\r\n..b\r\n\r\n..c\r\nd\r\n"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.sampled_from(list("ab. =é\n")), max_size=120), min_size=1, max_size=4
    )
)
def test_the_dot_flag_is_true_exactly_when_a_line_begins_with_a_dot(texts: list[str]) -> None:
    qp = QuotedPrintable(max_paragraphs=3, max_lines=5)  # small: the caches are cleared too
    for text in texts:
        data, dotted = qp.encode_flagged(text)
        assert dotted == bool(re.search(rb"(?m)^\.", data)), (text, data)
        assert data == QuotedPrintable().encode(text)


def test_a_refused_recipient_resets_and_the_connection_is_reused(
    smtp_server: SmtpServer,
) -> None:
    sessions: set[int] = set()

    def fault(stage: str, arg: object) -> str | None:
        if stage == "RCPT" and str(arg).startswith("gone@"):
            return "550 5.1.1 no such user"
        return None

    smtp_server.handler.fault = fault
    with mailer(smtp_server) as m:
        with pytest.raises(DeliveryError) as e:
            m.send(build(dotted_digest(), to="gone@example.org"))
        assert e.value.stage == "RCPT" and e.value.code == 550 and not e.value.temporary
        conn = m._conn
        assert conn is not None
        sessions.add(id(conn))
        m.send(build(dotted_digest(), to="ada@example.org"))
        assert m._conn is conn  # the same connection carried the next message
    assert [r.rcpt_tos for r in smtp_server.received] == [["ada@example.org"]]


@pytest.mark.parametrize("address", ["ada@example.org>", "a da@example.org", "ada@exa\r\nmple.org"])
def test_an_address_that_cannot_go_in_a_command_is_refused_before_sending(
    smtp_server: SmtpServer, address: str
) -> None:
    raw = b"Subject: x\r\n\r\nbody\r\n"
    with mailer(smtp_server) as m, pytest.raises(DeliveryError) as e:
        m.send(Envelope("digest@papers.example.org", address, raw, "<m@x>", crlf=True))
    assert e.value.stage == "RCPT" and not e.value.temporary
    assert smtp_server.received == []
