"""Issue 27, a loose end of item 1: the compose file's database password comes from the operator.

``deploy/compose.yaml`` wrote the PostgreSQL password ``newsletter`` into both the database
service and every app's database URL. It now reads ``NEWSLETTER_DB_PASSWORD`` from
``deploy/.env`` (or the shell), the same place as the signing key; without it, the local
try-out default ``newsletter`` applies (PostgreSQL is not published outside compose's network),
marked as such in the file. Checked as ``tests/test_deploy.py`` checks the compose file: parsed,
interpolated as compose does, and the mounted config loaded under the environment it sets.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from newsletter.config import load_config
from tests.test_deploy import DEPLOY, compose, interpolated

APPS = ("migrate", "app", "worker")


def environments(operator: dict[str, str]) -> dict[str, dict[str, str]]:
    services = compose()["services"]
    return {
        name: {k: interpolated(str(v), operator) for k, v in services[name]["environment"].items()}
        for name in (*APPS, "postgres")
    }


def test_the_database_password_comes_from_deploy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    password = secrets.token_hex(24)
    operator = {
        "NEWSLETTER_SECRET_KEY": secrets.token_urlsafe(48),
        "NEWSLETTER_DB_PASSWORD": password,
    }
    env = environments(operator)
    assert env["postgres"]["POSTGRES_PASSWORD"] == password
    for name in APPS:
        assert urlsplit(env[name]["NEWSLETTER_DATABASE_URL"]).password == password
    for key, value in env["app"].items():
        monkeypatch.setenv(key, value)
    config = load_config(DEPLOY / "compose-newsletter.yaml")
    assert urlsplit(config.database_url).password == password


def test_without_one_the_try_out_default_is_used_everywhere_and_marked() -> None:
    env = environments({"NEWSLETTER_SECRET_KEY": secrets.token_urlsafe(48)})
    assert env["postgres"]["POSTGRES_PASSWORD"] == "newsletter"
    for name in APPS:  # the app and the database agree, so a try-out starts
        assert urlsplit(env[name]["NEWSLETTER_DATABASE_URL"]).password == "newsletter"
    text = (DEPLOY / "compose.yaml").read_text()
    # No password written as a literal: each place is the reference, and the default is marked.
    assert "newsletter:newsletter@" not in text
    assert re.search(r"^\s*POSTGRES_PASSWORD:\s*newsletter\s*$", text, re.MULTILINE) is None
    assert "local try-out" in text


def test_the_command_in_the_compose_file_makes_a_password_a_url_can_carry() -> None:
    text = (DEPLOY / "compose.yaml").read_text()
    [code] = re.findall(r"NEWSLETTER_DB_PASSWORD=\$\(python3 -c '([^']+)'\)", text)
    made = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert len(made) >= 32 and re.fullmatch(r"[0-9a-f]+", made)
