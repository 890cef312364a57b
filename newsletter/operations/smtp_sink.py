"""A local SMTP sink: accepts every message on loopback and stores it in a Maildir.

Used by ``newsletter demo`` and ``newsletter sink`` for trying things out without a relay.
"""

from __future__ import annotations

import mailbox
import socket
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

from newsletter.errors import listen_error


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class MaildirHandler:
    def __init__(self, maildir: Path) -> None:
        maildir.parent.mkdir(parents=True, exist_ok=True)
        for sub in ("tmp", "new", "cur"):  # Maildir(create=True) skips these if the folder exists
            (maildir / sub).mkdir(parents=True, exist_ok=True)
        self.box = mailbox.Maildir(str(maildir), create=True)
        self.count = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        """Store the message in the Maildir, with its recipients in ``X-Sink-Rcpt-To``."""
        msg = message_from_bytes(envelope.original_content or envelope.content)
        msg["X-Sink-Rcpt-To"] = ", ".join(envelope.rcpt_tos)
        self.box.add(msg)
        self.count += 1
        return "250 OK stored"


class MaildirSink:
    """``with MaildirSink(path) as sink: ... sink.port ...``"""

    def __init__(self, maildir: Path, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.maildir = maildir
        self.host = host
        self.port = port or free_port(host)
        self.handler = MaildirHandler(maildir)
        self.controller = Controller(self.handler, hostname=host, port=self.port)

    def __enter__(self) -> MaildirSink:
        try:
            self.controller.start()
        except OSError as e:
            raise listen_error(
                e, self.host, self.port, port_key="--port", host_key="the sink's host"
            ) from e
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()


def read_maildir(maildir: Path) -> list[Message]:
    """Every message in the Maildir, in the order they were stored."""
    box = mailbox.Maildir(str(maildir), create=False)
    return [message_from_bytes(box.get_bytes(key)) for key in sorted(box.keys())]


def html_part(msg: Message) -> str | None:
    """The decoded ``text/html`` part of ``msg``, or ``None`` when it has none."""
    for part in msg.walk():
        if part.get_content_type() == "text/html":
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                return payload.decode(part.get_content_charset() or "utf-8", "replace")
    return None
