"""The config's ``subscribers:`` list put into the database.

``newsletter db upgrade``, ``newsletter demo`` and the commands that read a subscriber (``send``,
``preview``, ``rank``, ``feedback``) add the listed people the database does not have yet. The
consent rules are those of one-by-one adds (:func:`newsletter.subscribe.consent_block`): an
address that unsubscribed, was suppressed or erased is not added back by the config.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from newsletter.clock import utcnow
from newsletter.config import Config
from newsletter.store import Store

log = logging.getLogger(__name__)


def seed_subscribers(
    config: Config,
    store: Store,
    report: Callable[[str], None] | None = None,
    *,
    now: datetime | None = None,
) -> int:
    """Insert the subscribers listed in the config that the database does not have yet, as of
    ``now`` (the caller's clock; default the wall clock); returns how many were added.

    An address that unsubscribed, was suppressed or erased is not added back (consent comes
    from the address, not the config): ``report`` (default: the log) is told why.
    """
    # Imported here: newsletter.subscribe brings the mailer and the templates, which every
    # command that imports this module (the whole command line) would pay for at start-up.
    from newsletter.subscribe import consent_block

    now = now or utcnow()
    added = 0
    for i, seed in enumerate(config.settings.subscribers):
        if store.get_subscriber(seed.email) is None:
            blocked = consent_block(config, store, seed.email)
            if blocked is not None:
                note = f"{config.path}: subscribers[{i}]: {blocked}"
                (report or log.info)(note)
                continue
        _, created = store.add_subscriber(
            seed.email,
            name=seed.name,
            topics=seed.topics,
            timezone=seed.timezone or config.settings.schedule.timezone,
            now=now,
            consent={"how": "config", "when": now.isoformat(), "where": str(config.path)},
        )
        added += int(created)
    return added
