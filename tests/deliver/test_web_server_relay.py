"""smtp.host/port pointed at a web server: said at once, not after the whole timeout
(issue 29 item 10), while a relay that greets late still works."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from newsletter.config import SmtpSettings
from newsletter.deliver.smtp import GREETING_PATIENCE, SmtpMailer
from newsletter.errors import RelayError
from tests.smtpfaults import serving


class _Quiet(BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def web_server() -> Iterator[int]:
    """A web server as they are: silent until it gets a request."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@contextmanager
def _listener(greet: bytes, delay: float) -> Iterator[int]:
    """A server that sends ``greet`` ``delay`` seconds after each connection; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    held: list[tuple[socket.socket, float]] = []

    def serve(done: threading.Event) -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
                held.append((conn, time.monotonic() + delay))
            except TimeoutError:
                pass
            for conn, due in held:
                if due <= time.monotonic() and conn.fileno() != -1 and conn.gettimeout() != 0.5:
                    conn.settimeout(0.5)  # marks it greeted
                    with suppress(OSError):
                        conn.sendall(greet)

    try:
        with serving(server, serve) as port:
            yield port
    finally:
        for conn, _ in held:
            conn.close()


@pytest.mark.slow  # waits out a greeting timeout
def test_a_silent_web_server_is_named_as_one(web_server: int) -> None:
    mailer = SmtpMailer(SmtpSettings(host="127.0.0.1", port=web_server, timeout=60))
    with pytest.raises(RelayError) as e:
        mailer.connect()
    assert str(e.value) == (
        f"the relay at 127.0.0.1:{web_server} did not answer like an SMTP server: it is a web "
        "server (it said 'HTTP/1.0 404 Not Found'); check smtp.host and smtp.port (an SMTP "
        "relay listens on 25, 465 or 587)"
    )


def test_a_web_server_that_answers_at_once_is_named_as_one() -> None:
    answer = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
    with _listener(answer, 0) as port, pytest.raises(RelayError) as e:
        SmtpMailer(SmtpSettings(host="127.0.0.1", port=port, timeout=60)).connect()
    assert "it is a web server (it said 'HTTP/1.1 400 Bad Request')" in str(e.value)


@pytest.mark.slow  # waits out a greeting timeout
def test_a_relay_that_greets_late_is_still_a_relay() -> None:
    """Its greeting comes after the web-server probe: the probe's own connection gets the same
    greeting (not HTTP), and the session waits on for it."""
    with _listener(b"220 slow.example.org ESMTP\r\n", GREETING_PATIENCE + 0.5) as port:
        conn = SmtpMailer(SmtpSettings(host="127.0.0.1", port=port, timeout=10)).connect()
        conn.close()
