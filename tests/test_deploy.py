"""What CI can check of deploy/ without a container engine.

The compose file parses, wires only services, volumes and files that exist, and its commands are
valid ``newsletter`` command lines; the config it mounts is valid under the environment it sets;
the Dockerfile copies everything the project's build needs and installs it with pip as CI does
(the build stage is replayed here: only the copied files, then ``pip wheel``); the image runs as
a non-root user with a healthcheck on an endpoint the app serves; the systemd units run real
commands as their own user.
"""

from __future__ import annotations

import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from newsletter.cli import cli
from newsletter.config import load_config, secret_key_problem
from newsletter.services.link_tokens import signing_key

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def parses_as_newsletter_command(argv: list[str]) -> None:
    """Click parses the arguments against the real command (options and choices exist)."""
    assert argv[0] == "newsletter", argv
    group_ctx = cli.make_context("newsletter", [], resilient_parsing=True)
    command = cli.get_command(group_ctx, argv[1])
    assert command is not None, f"no command {argv[1]!r}"
    rest = argv[2:]
    while hasattr(command, "get_command") and rest:  # a group such as 'db'
        sub = command.get_command(group_ctx, rest[0])  # type: ignore[attr-defined]
        assert sub is not None, f"no command {argv[1]} {rest[0]!r}"
        command, rest = sub, rest[1:]
    command.make_context(argv[1], list(rest))


def test_compose_file_parses_and_wires_every_service() -> None:
    data = compose()
    services = data["services"]
    assert set(services) == {"migrate", "app", "worker", "postgres", "redis", "mailpit"}
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, f"{name} has neither image nor build"
        for dep in svc.get("depends_on", {}):
            assert dep in services and dep != name, f"{name} depends on unknown {dep}"
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in data["volumes"], f"{name} uses undeclared volume {source}"
    for name in ("migrate", "app", "worker"):
        svc = services[name]
        assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
        assert (DEPLOY.parent / svc["build"]["context"].removeprefix("..")).exists()
        env = svc["environment"]
        assert env["NEWSLETTER_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert "@postgres:5432/" in env["NEWSLETTER_DATABASE_URL"]
        assert env["NEWSLETTER_BROKER_URL"].startswith("redis://redis:")
        assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
        mount = next(v for v in svc["volumes"] if "newsletter.yaml" in v)
        assert mount.split(":")[1] == env["NEWSLETTER_CONFIG"]
        parses_as_newsletter_command(svc["command"])
    for name in ("app", "worker"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert services["migrate"]["command"] == ["newsletter", "db", "upgrade"]
    assert services["app"]["command"][:2] == ["newsletter", "serve"]
    assert services["worker"]["command"][:2] == ["newsletter", "worker"]
    # the worker is not a web server: its healthcheck asks the worker itself over the broker
    check = services["worker"]["healthcheck"]["test"]
    assert check[0] == "CMD" and "--ping" in check
    parses_as_newsletter_command(check[1:])
    name = services["worker"]["command"][services["worker"]["command"].index("--name") + 1]
    assert check[check.index("--name") + 1] == name
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["redis"]["healthcheck"]["test"][-1] == "ping"
    assert services["mailpit"]["image"].startswith("axllent/mailpit")


#: ``${VAR:?message}``: compose takes the value from the shell or deploy/.env, and refuses to
#: start (printing the message) when it is not set.
_REQUIRED = re.compile(r"^\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*):\?(?P<message>[^}]+)\}$")


#: ``${VAR:?message}`` (required) or ``${VAR:-default}`` anywhere in a value.
_REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:\?|:-)(?P<arg>[^}]*)\}")


def interpolated(value: str, environ: dict[str, str]) -> str:
    """``value`` as compose interpolates it (the ``${VAR:?message}`` and ``${VAR:-default}``
    forms this file uses)."""

    def one(m: re.Match[str]) -> str:
        if environ.get(m["name"]):
            return environ[m["name"]]
        if m["op"] == ":-":
            return m["arg"]
        raise LookupError(f"required variable {m['name']} is missing a value: {m['arg']}")

    out = _REFERENCE.sub(one, value)
    assert "$" not in out, f"unexpected interpolation in {value!r}"
    return out


def test_compose_takes_the_secret_key_from_the_operator() -> None:
    """No key is written in the compose file (one was, and anyone could read it): compose
    refuses to start until the operator sets one, and says how to make it."""
    text = (DEPLOY / "compose.yaml").read_text()
    services = compose()["services"]
    for name in ("migrate", "app", "worker"):
        value = services[name]["environment"]["NEWSLETTER_SECRET_KEY"]
        m = _REQUIRED.match(value)
        assert m is not None and m["name"] == "NEWSLETTER_SECRET_KEY", value
        with pytest.raises(LookupError, match=r"deploy/\.env; make a key with: python3 -c"):
            interpolated(value, {})
    # Whatever the YAML form (mapping or list, anchors or not), each value is the reference.
    values = re.findall(r"^\s*-?\s*NEWSLETTER_SECRET_KEY\s*[:=]\s*(.*)$", text, re.MULTILINE)
    assert values and all(v.startswith('"${NEWSLETTER_SECRET_KEY:?') for v in values), values
    assert "/deploy/.env" in (DEPLOY.parent / ".gitignore").read_text().splitlines()
    # The one-line command the message gives makes a key the app accepts.
    command = _REQUIRED.match(value)["message"].split("python3 -c ", 1)[1]  # type: ignore[index]
    made = subprocess.run(
        [sys.executable, "-c", shlex.split(command)[0]], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert secret_key_problem(made) is None


def test_compose_config_is_valid_under_the_environment_compose_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    operator = {"NEWSLETTER_SECRET_KEY": secrets.token_urlsafe(48)}  # what deploy/.env holds
    env = {
        key: interpolated(value, operator)
        for key, value in compose()["services"]["worker"]["environment"].items()
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = load_config(DEPLOY / "compose-newsletter.yaml")
    assert signing_key(config) == operator["NEWSLETTER_SECRET_KEY"]
    assert config.settings.smtp.host == "mailpit" and config.settings.smtp.port == 1025
    assert config.database_url == env["NEWSLETTER_DATABASE_URL"]
    assert config.settings.workers is not None
    assert config.settings.workers.broker() == env["NEWSLETTER_BROKER_URL"]


def copied(dockerfile: str) -> list[str]:
    out = []
    for line in dockerfile.splitlines():
        if line.startswith("COPY ") and "--from" not in line:
            out.extend(line.split()[1:-1])
    return out


def app_paths(tmp_path: Path) -> set[str]:
    from newsletter.store import Store
    from newsletter.web import create_app
    from tests.conftest import base_config, write_config

    config = load_config(write_config(tmp_path, base_config(f"sqlite:///{tmp_path / 'x.db'}")))
    store = Store(config.database_url)
    try:
        return {getattr(r, "path", "") for r in create_app(config, store).routes}
    finally:
        store.close()


def test_dockerfile_copies_what_the_build_needs_and_runs_unprivileged(tmp_path: Path) -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    runs = [line for line in text.splitlines() if line.startswith("RUN pip install")]
    assert len(runs) == 1
    extras = re.search(r"'\.\[([a-z,]+)\]'", runs[0])
    assert extras, "the image installs the project itself with pip"
    for extra in extras.group(1).split(","):
        assert extra in project["project"]["optional-dependencies"], extra
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {
        "pyproject.toml",
        project["project"]["readme"],
        *wheel["packages"],
        *(src.split("/")[0] for src in wheel["force-include"]),
    }
    have = set(copied(text))
    assert needed <= have, f"the image does not copy {sorted(needed - have)}"
    assert re.search(r"^USER newsletter$", text, re.M)
    assert "useradd --system" in text
    health = re.search(r"HEALTHCHECK .*\n\s+CMD .*127\.0\.0\.1:(\d+)(/\w+)", text)
    assert health, "the image has an HTTP healthcheck"
    port, path = health.groups()
    assert f"EXPOSE {port}" in text and f'"--port", "{port}"' in text
    assert path in app_paths(tmp_path), f"the app does not serve {path}"
    cmd = re.search(r"^CMD (\[.*\])$", text, re.M)
    assert cmd
    parses_as_newsletter_command(yaml.safe_load(cmd.group(1)))


@pytest.mark.slow
def test_the_dockerfile_build_stage_builds_from_only_the_files_it_copies(tmp_path: Path) -> None:
    """Replay the build stage: a context holding only the COPYed files builds a wheel with pip."""
    text = (DEPLOY / "Dockerfile").read_text()
    src = tmp_path / "src"
    src.mkdir()
    for name in copied(text):
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path / "wheel"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = out.glob("newsletter-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "newsletter/edition/workers.py" in names and "newsletter/templates/digest.html" in names
    meta = next(n for n in names if n.endswith("METADATA"))
    requires = zipfile.ZipFile(wheel).read(meta).decode()
    # Celery is the workers extra (the image installs it: one image runs the app and workers)
    assert re.search(r"^Requires-Dist: celery\[redis\].*extra == .workers.", requires, re.M)
    extras = re.search(r"'\.\[([a-z,]+)\]'", text)
    assert extras and "workers" in extras.group(1).split(",")
    assert "Requires-Dist: psycopg[binary]" in requires  # as the [postgres] extra


def unit_commands(name: str) -> list[list[str]]:
    unit = (DEPLOY / "systemd" / name).read_text()
    assert "User=newsletter" in unit and "KillSignal=SIGTERM" in unit
    return [
        shlex.split(line.split("=", 1)[1])
        for line in unit.splitlines()
        if line.startswith("ExecStart")
    ]


def test_systemd_units_run_real_commands_as_their_own_user() -> None:
    starts = unit_commands("newsletter.service")
    assert [s[1:3] for s in starts] == [["db", "upgrade"], ["serve", "--host"]]
    [worker] = unit_commands("newsletter-worker.service")
    assert worker[1] == "worker"
    for argv in [*starts, worker]:
        parses_as_newsletter_command(["newsletter", *argv[1:]])
