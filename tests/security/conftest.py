"""The web fixtures (real database on both backends, real SMTP server, a clock) for these tests."""

from __future__ import annotations

import pytest

from newsletter.config import Config
from newsletter.store import Store
from tests.conftest import SmtpServer
from tests.security.helpers import ADA, digest_links, send_first_digest
from tests.web.conftest import Clock, app, client, clock, service, web_config, web_store

__all__ = ["app", "client", "clock", "mailed", "service", "web_config", "web_store"]


@pytest.fixture
def mailed(
    web_config: Config, web_store: Store, smtp_server: SmtpServer, clock: Clock
) -> dict[str, str]:
    """Ada's one digest, sent: the paths of its manage, unsubscribe, view and feedback links."""
    send_first_digest(web_config, web_store, clock, ADA)
    return digest_links(smtp_server, ADA)
