"""The time zones offered and accepted are time zones: no ``Factory``, no ``localtime`` (issue 43).

``zoneinfo.available_timezones()`` lists both on a Debian system; the forms offered them."""

from __future__ import annotations

import re
import zoneinfo

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from newsletter.cli import cli
from newsletter.config import Config, parse_config
from newsletter.config.time_zones import NOT_ZONES, time_zones
from newsletter.errors import ConfigError
from newsletter.subscribe import InvalidRequest, check_timezone
from tests.conftest import SmtpServer
from tests.web.conftest import csrf_of

FACTORY = "Factory"


def _offered(html: str) -> list[str]:
    select = re.search(r'<select[^>]*name="timezone"[^>]*>(.*?)</select>', html, re.S)
    assert select is not None, html
    return re.findall(r'<option value="([^"]*)"', select.group(1))


def test_the_subscribe_form_offers_only_time_zones(client: TestClient) -> None:
    assert FACTORY in zoneinfo.available_timezones()  # where the list came from: the case
    offered = _offered(client.get("/subscribe").text)
    assert "Europe/Berlin" in offered and "UTC" in offered and "America/Chicago" in offered
    assert not set(offered) & set(NOT_ZONES), set(offered) & set(NOT_ZONES)
    assert offered == list(time_zones())


def test_no_entry_that_is_no_zone_is_accepted(
    client: TestClient, smtp_server: SmtpServer, web_config: Config
) -> None:
    for name in NOT_ZONES:
        with pytest.raises(InvalidRequest, match=f"'{name}' is .*, not a time zone"):
            check_timezone(name)
    form = client.get("/subscribe")
    data = {
        "csrf": csrf_of(form.text),
        "email": "ada@example.org",
        "topics": ["gpu-kernels"],
        "timezone": FACTORY,
        "send_hour": "8",
    }
    page = client.post("/subscribe", data=data)
    assert "not a time zone; use an IANA name like" in " ".join(page.text.split())
    assert smtp_server.messages_to("ada@example.org") == []
    result = CliRunner().invoke(
        cli,
        [
            "--config",
            str(web_config.path),
            "subscribers",
            "add",
            "bob@example.org",
            "--topic",
            "gpu-kernels",
            "--timezone",
            "localtime",
        ],
    )
    assert result.exit_code != 0
    assert "'localtime' is this machine's own zone under another name, not a time zone" in (
        " ".join(result.output.split())
    )


def test_the_config_refuses_them_with_file_and_line() -> None:
    text = "schedule:\n  timezone: Factory\n"
    with pytest.raises(ConfigError) as raised:
        parse_config(text, "cfg.yaml")
    assert str(raised.value) == (
        "cfg.yaml:2: schedule.timezone: 'Factory' is the zone database's placeholder for a "
        "zone not set yet, not a time zone; use an IANA name like 'Europe/Berlin'"
    )
