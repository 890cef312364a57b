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
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from newsletter.config import SmtpSettings
from newsletter.deliver import Envelope, SmtpMailer, wire_data
from newsletter.deliver.mime import QuotedPrintable
from newsletter.digest.render import RenderedDigest
from newsletter.errors import DeliveryError
from tests.conftest import SmtpServer
from tests.deliver.test_mime import build


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


class _Scripted(socketserver.BaseRequestHandler):
    """A relay on a bare socket that offers PIPELINING and records each read as it came."""

    reads: list[bytes]
    replies: dict[bytes, bytes]

    def handle(self) -> None:
        sock = self.request
        sock.sendall(b"220 scripted ESMTP\r\n")
        buffer = b""
        in_data = False
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return
            type(self).reads.append(chunk)
            buffer += chunk
            while True:
                if in_data:
                    end = buffer.find(b"\r\n.\r\n")
                    if end < 0:
                        break
                    buffer, in_data = buffer[end + 5 :], False
                    sock.sendall(b"250 queued\r\n")
                    continue
                end = buffer.find(b"\r\n")
                if end < 0:
                    break
                line, buffer = buffer[:end], buffer[end + 2 :]
                verb = line[:4].upper()
                if verb == b"EHLO":
                    sock.sendall(b"250-scripted\r\n250-PIPELINING\r\n250 SIZE 1000000\r\n")
                elif verb == b"QUIT":
                    sock.sendall(b"221 bye\r\n")
                    return
                elif verb == b"DATA":
                    reply = type(self).replies.get(b"DATA", b"354 go on\r\n")
                    in_data = reply.startswith(b"354")
                    sock.sendall(reply)
                else:
                    sock.sendall(type(self).replies.get(verb, b"250 OK\r\n"))


@pytest.fixture
def scripted() -> Iterator[type[_Scripted]]:
    handler = type("Handler", (_Scripted,), {"reads": [], "replies": {}})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    handler.port = server.server_address[1]  # type: ignore[attr-defined]
    try:
        yield handler
    finally:
        server.shutdown()
        server.server_close()


def test_with_pipelining_mail_rcpt_and_data_go_in_one_write(scripted: type[_Scripted]) -> None:
    port = scripted.port  # type: ignore[attr-defined]
    with SmtpMailer(SmtpSettings(host="127.0.0.1", port=port, timeout=10)) as m:
        m.send(build(RenderedDigest("One", "pre", "<p>x</p>\n", "x\n")))
        m.send(build(RenderedDigest("Two", "pre", "<p>y</p>\n", "y\n")))
    commands = [r for r in scripted.reads if r.startswith(b"MAIL")]
    assert len(commands) == 2
    for read in commands:
        lines = read.split(b"\r\n")
        assert lines[0].startswith(b"MAIL FROM:<digest@papers.example.org> SIZE=")
        assert lines[1:] == [b"RCPT TO:<ada@example.org>", b"DATA", b""]


def test_with_pipelining_a_refused_recipient_reads_every_reply_and_resets(
    scripted: type[_Scripted],
) -> None:
    scripted.replies = {b"RCPT": b"550 5.1.1 no such user\r\n", b"DATA": b"554 no recipients\r\n"}
    port = scripted.port  # type: ignore[attr-defined]
    with SmtpMailer(SmtpSettings(host="127.0.0.1", port=port, timeout=10)) as m:
        with pytest.raises(DeliveryError) as e:
            m.send(build(dotted_digest(), to="gone@example.org"))
        assert (e.value.stage, e.value.code, e.value.temporary) == ("RCPT", 550, False)
        scripted.replies = {}
        m.send(build(dotted_digest()))  # the same connection, in step after RSET
    assert any(r.upper().startswith(b"RSET") for r in scripted.reads)
    assert sum(r.count(b"\r\n.\r\n") for r in scripted.reads) == 1


@pytest.mark.parametrize(("cap", "connections"), [(0, 1), (3, 3), (1, 7)])
def test_messages_per_connection_caps_each_session(cap: int, connections: int) -> None:
    """``smtp.messages_per_connection``: after that many messages the mailer says QUIT and
    opens a new connection; 0 keeps one connection to the end."""
    from tests.smtpfaults import fault_server

    with fault_server() as relay:
        settings = SmtpSettings(host=relay.host, port=relay.port, messages_per_connection=cap)
        with SmtpMailer(settings) as mailer:
            for i in range(7):
                data = b"Subject: hi\r\nMessage-ID: <%d@x.example>\r\n\r\nbody\r\n" % i
                mailer.send(Envelope("from@x.example", f"r{i}@x.example", data, f"<{i}@x.example>"))
        assert len(relay.received) == 7
        assert relay.handler.connections == connections


def test_a_mailer_builds_its_tls_settings_once() -> None:
    mailer = SmtpMailer(SmtpSettings(security="starttls"))
    assert mailer.tls_context() is mailer.tls_context()


def _received(scripted: type[_Scripted]) -> bytes:
    return b"".join(scripted.reads)


def test_the_relay_connection_sends_small_writes_at_once(smtp_server: SmtpServer) -> None:
    """TCP_NODELAY: the final dot, written alone after the data, is not held back by Nagle's
    algorithm until the relay acknowledges the data (up to 40 ms a message)."""
    with mailer(smtp_server) as m:
        m.send(build(RenderedDigest("One", "pre", "<p>x</p>\n", "x\n")))
        conn = m._conn
        assert conn is not None and conn.sock is not None
        assert conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
