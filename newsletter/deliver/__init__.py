"""Delivery: a rendered digest becomes a message, is signed and handed to the relay.

- :mod:`.message`: the envelope and its RFC 5322 bytes (list headers, Message-ID);
- :mod:`.mime`: the hand-assembled MIME of a digest;
- :mod:`.dkim`: DKIM signing;
- :mod:`.smtp`: one relay connection (:class:`SmtpMailer`) and the :class:`Mailer` protocol;
- :mod:`.pool`: N connections, the rate limit, retries and outcomes (:class:`SendPool`);
- :mod:`.ledger`: each outcome recorded in the ledger (:class:`LedgerWriter`), claim owners.

May import: core, config, store, digest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from newsletter.deliver.message import (
        Envelope,
        build_message,
        header_safe,
        make_message_id,
        wire_data,
    )
    from newsletter.deliver.smtp import (
        Mailer,
        MailerFactory,
        SmtpMailer,
        is_temporary,
        is_throttle,
    )

_WHERE = {
    "Envelope": "message",
    "build_message": "message",
    "header_safe": "message",
    "make_message_id": "message",
    "wire_data": "message",
    "Mailer": "smtp",
    "MailerFactory": "smtp",
    "SmtpMailer": "smtp",
    "is_temporary": "smtp",
    "is_throttle": "smtp",
}


def __getattr__(name: str) -> Any:
    """The names above, loaded on first use: a command that only records a run or checks an
    owner (:mod:`.ledger`) does not load the renderer and MIME writer behind :mod:`.message`."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


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
