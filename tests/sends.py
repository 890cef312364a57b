"""Short calls for tests: the real send path with a config, a store and a time.

``run_send`` is the run loop alone (no run record), ``send_step`` the recorded send that
``newsletter send --now`` runs; both build the :class:`~newsletter.services.Services` and the
:class:`~newsletter.edition.SendRequest` that the CLI would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from newsletter.config import Config
from newsletter.deliver import MailerFactory
from newsletter.edition import SendReport, SendRequest, Services, send, send_editions
from newsletter.store import Store


def run_send(
    config: Config,
    store: Store,
    now: datetime,
    *,
    mailer_factory: MailerFactory | None = None,
    progress: Callable[[SendReport], None] | None = None,
    stop: threading.Event | None = None,
    **request: Any,
) -> SendReport:
    """:func:`newsletter.edition.send_editions` for ``SendRequest(**request)``."""
    services = Services(config, store, relay=mailer_factory)
    return send_editions(
        services, now, SendRequest(**request).validated(config), progress=progress, stop=stop
    )


def send_step(
    config: Config,
    store: Store,
    now: datetime,
    *,
    mailer_factory: MailerFactory | None = None,
    progress: Callable[[SendReport], None] | None = None,
    stop: threading.Event | None = None,
    **request: Any,
) -> SendReport:
    """:func:`newsletter.edition.send` for ``SendRequest(**request)``: the recorded run."""
    services = Services(config, store, relay=mailer_factory)
    report = send(services, SendRequest(**request), now=now, progress=progress, stop=stop).report
    assert report is not None
    return report
