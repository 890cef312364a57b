"""Operator alerts: a failed run, or a weekday fetch that found no papers.

Every alert is logged at ERROR. When ``alerts.email`` is set it is also mailed to the operator
through the configured relay; if the relay itself is what failed, the log line is the alert
(no retry loop, no second alert for the same run).
"""

from __future__ import annotations

import logging
from datetime import datetime
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime
from typing import TYPE_CHECKING

from newsletter.config import Config
from newsletter.errors import NewsletterError

if TYPE_CHECKING:
    from newsletter.services import Services
    from newsletter.store.protocol import SendStore

log = logging.getLogger("newsletter.alerts")


def alert(
    config: Config,
    subject: str,
    body: str,
    now: datetime,
    *,
    services: Services[SendStore],
    relay_broken: bool = False,
) -> bool:
    """Log the alert and mail it to ``alerts.email`` if set, through ``services``' relay and
    DKIM signer (loaded once per process). True when a mail went out."""
    from newsletter.deliver.dkim import maybe_sign  # loaded when an alert is mailed, not at start
    from newsletter.deliver.message import Envelope, make_message_id

    log.error("ALERT: %s", subject, extra={"alert": subject, "detail": body})
    to = config.settings.alerts.email
    if not to or relay_broken:
        return False
    sender = config.settings.sender
    msg = EmailMessage()
    msg["Subject"] = f"[newsletter] {subject}"
    msg["From"] = sender.from_
    msg["To"] = to
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = make_message_id(sender.message_domain)
    msg["Auto-Submitted"] = "auto-generated"
    msg.set_content(body + "\n\n-- newsletter (this is an operator alert)\n")
    envelope = Envelope(
        sender.from_address, to, msg.as_bytes(policy=policy.SMTP), str(msg["Message-ID"])
    )
    mailer = services.mailer_factory()
    try:
        mailer.send(maybe_sign(services.signer, envelope))
        return True
    except NewsletterError as e:
        log.error("could not mail the alert to %s: %s", to, e)
        return False
    finally:
        mailer.close()
