"""The web fixtures (real database on both backends, real SMTP server, a clock) for these tests."""

from __future__ import annotations

from tests.web.conftest import app, client, clock, service, web_config, web_store

__all__ = ["app", "client", "clock", "service", "web_config", "web_store"]
