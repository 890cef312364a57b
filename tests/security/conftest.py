"""The web fixtures (a real database, a real SMTP server, the app and its test client)."""

from tests.web.conftest import app, client, clock, service, web_config, web_store

__all__ = ["app", "client", "clock", "service", "web_config", "web_store"]
