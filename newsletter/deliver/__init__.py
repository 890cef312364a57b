"""Delivery: a rendered digest becomes a message, is signed and handed to the relay.

- :mod:`.message`: the envelope and its RFC 5322 bytes (list headers, Message-ID);
- :mod:`.mime`: the hand-assembled MIME of a digest;
- :mod:`.dkim`: DKIM signing;
- :mod:`.smtp`: one relay connection (:class:`SmtpMailer`) and the :class:`Mailer` protocol;
- :mod:`.pool`: N connections, the rate limit, retries and outcomes (:class:`SendPool`);
- :mod:`.ledger`: each outcome recorded in the ledger (:class:`LedgerWriter`), claim owners.
"""

from newsletter.deliver.message import (
    Envelope,
    build_message,
    header_safe,
    make_message_id,
    wire_data,
)
from newsletter.deliver.smtp import Mailer, MailerFactory, SmtpMailer, is_temporary, is_throttle

__all__ = [
    "Envelope",
    "Mailer",
    "MailerFactory",
    "SmtpMailer",
    "build_message",
    "header_safe",
    "is_temporary",
    "is_throttle",
    "make_message_id",
    "wire_data",
]
