"""Subscribing: the logic the web pages, the JSON API, email commands and the CLI share.

- :mod:`.rules`: the checks (choices, addresses, rate-limit keys, who the operator may not add)
  and the outcomes and errors;
- :mod:`.mailing`: the mail a subscription sends, its links and rate limits, and the answers
  to email commands (:class:`Mailing`);
- :mod:`.service`: the double opt-in rules (:class:`Subscriptions`), built on the process's
  :class:`~newsletter.services.Services`.

May import: core, config, store, semantic, rank, digest, deliver, services.
"""

from newsletter.subscribe.mailing import COMMANDS, Command, Mailing, Problem, parse_command
from newsletter.subscribe.rules import (
    DOTLESS_DOMAINS,
    LIVE,
    Choices,
    Clock,
    InvalidRequest,
    Links,
    LinkUsed,
    Outcome,
    blocked_message,
    check_timezone,
    client_network,
    consent_block,
    consent_history,
    forgotten_key,
    mailbox,
    parse_address,
)
from newsletter.subscribe.service import Subscriptions

__all__ = [
    "COMMANDS",
    "DOTLESS_DOMAINS",
    "LIVE",
    "Choices",
    "Clock",
    "Command",
    "InvalidRequest",
    "LinkUsed",
    "Links",
    "Mailing",
    "Outcome",
    "Problem",
    "Subscriptions",
    "blocked_message",
    "check_timezone",
    "client_network",
    "consent_block",
    "consent_history",
    "forgotten_key",
    "mailbox",
    "parse_address",
    "parse_command",
]
