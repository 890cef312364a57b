"""Small helpers shared by the security tests: the subscribe form, the CLI."""

from __future__ import annotations

from click.testing import CliRunner, Result
from fastapi.testclient import TestClient

from newsletter.cli import cli
from newsletter.config import Config
from tests.conftest import SmtpServer
from tests.web.conftest import csrf_of, link_to


def subscribe(client: TestClient, email: str, *topics: str) -> int:
    """Submit the subscribe form as a browser would; the HTTP status."""
    form = client.get("/subscribe")
    data = {
        "csrf": csrf_of(form.text),
        "email": email,
        "topics": list(topics or ("gpu-kernels",)),
        "timezone": "Europe/Berlin",
        "send_hour": "8",
    }
    return client.post("/subscribe", data=data).status_code


def last_link(smtp: SmtpServer, email: str, kind: str) -> str:
    return link_to(smtp.messages_to(email)[-1], kind)


def newsletter(config: Config, *args: str) -> Result:
    """Run the real ``newsletter`` command with this config."""
    return CliRunner().invoke(cli, ["--config", str(config.path), *args], catch_exceptions=False)
