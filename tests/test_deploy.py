"""What CI can check of deploy/ without a container engine."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from newsletter.config import load_config

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def test_compose_file_parses_and_wires_every_service() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"app", "worker", "postgres", "redis", "mailpit"}
    for name in ("app", "worker"):
        svc = services[name]
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
        env = svc["environment"]
        assert env["NEWSLETTER_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["NEWSLETTER_BROKER_URL"].startswith("redis://redis:")
        assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["app"]["command"][:2] == ["newsletter", "serve"]
    assert services["worker"]["command"][:2] == ["newsletter", "worker"]


def test_compose_config_is_a_valid_newsletter_config() -> None:
    config = load_config(DEPLOY / "compose-newsletter.yaml")
    assert config.settings.smtp.host == "mailpit" and config.settings.smtp.port == 1025


def test_dockerfile_installs_the_project_like_ci_and_runs_unprivileged() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    runs = [line for line in text.splitlines() if line.startswith("RUN pip install")]
    assert runs and "'.[postgres]'" in runs[0]  # pip install of this project, as `make` does
    for copied in ("pyproject.toml", "newsletter", "templates", "config"):
        assert re.search(rf"^COPY {copied}\b", text, re.M), f"the image does not copy {copied}"
    assert re.search(r"^USER newsletter$", text, re.M)
    assert "HEALTHCHECK" in text and "/healthz" in text


def test_systemd_unit_runs_the_service_as_its_own_user() -> None:
    unit = (DEPLOY / "systemd" / "newsletter.service").read_text()
    assert "User=newsletter" in unit and "KillSignal=SIGTERM" in unit
    starts = [
        shlex.split(line.split("=", 1)[1])
        for line in unit.splitlines()
        if line.startswith("ExecStart")
    ]
    assert [s[1:3] for s in starts] == [["db", "upgrade"], ["serve", "--host"]]
