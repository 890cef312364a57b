"""The web app's fixtures (a real database, a real SMTP server, a clock) for the security tests."""

from tests.web.conftest import app, client, clock, service, web_config, web_store

__all__ = ["app", "client", "clock", "service", "web_config", "web_store"]
