"""The wheel ships its templates, migrations and example config; an install finds them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_ships_templates_and_an_installed_package_finds_them(tmp_path: Path) -> None:
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
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("newsletter-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "newsletter/templates/digest.html",
        "newsletter/templates/digest.txt",
        "newsletter/data/newsletter.example.yaml",
        "newsletter/data/demo.yaml",
        *(
            f"newsletter/data/demo-feeds/{f.name}"
            for f in (ROOT / "config" / "demo-feeds").iterdir()
        ),
        "newsletter/store/migrations/env.py",
        "newsletter/store/migrations/versions/0001_initial_schema.py",
    ):
        assert needed in names, f"{needed} is missing from {wheel.name}"
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "from newsletter.digest.render import shipped_templates_dir; from newsletter.cli import example_config;"
        "print(shipped_templates_dir()); print(example_config());"
        "from newsletter.operations.demo import shipped_demo; print(*shipped_demo())"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    templates, example, demo, feeds = out.split()
    assert templates == str(site / "newsletter" / "templates")
    assert example == str(site / "newsletter" / "data" / "newsletter.example.yaml")
    assert demo == str(site / "newsletter" / "data" / "demo.yaml")
    assert feeds == str(site / "newsletter" / "data" / "demo-feeds")

    # Outside the checkout, the installed package runs its demo from the files it ships.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    demo_run = subprocess.run(
        [sys.executable, "-m", "newsletter", "demo"],
        cwd=elsewhere,
        env={**env, "NEWSLETTER_LOG_FORMAT": "text"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert demo_run.returncode == 0, demo_run.stderr
    assert "digests sent: 3" in " ".join(demo_run.stdout.split())
    assert (elsewhere / "newsletter-demo" / "demo.db").exists()


# ---------------------------------------------------------------------------- a lighter install

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BASE = PROJECT["project"]["dependencies"]
EXTRAS = PROJECT["project"]["optional-dependencies"]


def requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower()


def test_the_plain_install_leaves_the_workers_and_premailer_to_extras() -> None:
    """Celery, its Redis client and premailer (with lxml) were a third of the plain install's
    weight beyond numpy and scipy, for the workers mode and operators' own templates only
    (issue 43)."""
    base = {requirement_name(r) for r in BASE}
    assert not base & {"celery", "redis", "kombu", "premailer", "lxml", "cssutils"}
    assert [requirement_name(r) for r in EXTRAS["workers"]] == ["celery"]
    assert "celery[redis]" in EXTRAS["workers"][0]
    assert [requirement_name(r) for r in EXTRAS["templates"]] == ["premailer"]
    # The test suite runs the workers and inlines templates: the dev install brings both.
    assert "newsletter[workers,templates]" in EXTRAS["dev"]
    assert "-e '.[dev,semantic,workers,templates]'" in (ROOT / "Makefile").read_text()


IMPORTED_AS = {
    "pyyaml": "yaml",
    "email-validator": "email_validator",
    "dkimpy": "dkim",
    "prometheus-client": "prometheus_client",
    "typing-extensions": "typing_extensions",
}
"""Base dependencies whose module is not named after the distribution."""


def test_every_base_dependency_is_imported_by_the_package() -> None:
    """A dependency in the plain install is there because newsletter imports it (defusedxml
    was listed and never imported); python-multipart is the one newsletter uses through
    another package: Starlette parses the web forms (``await request.form()``) with it."""
    sources = "\n".join(p.read_text() for p in (ROOT / "newsletter").rglob("*.py"))
    assert "await request.form()" in sources
    for requirement in BASE:
        name = requirement_name(requirement)
        if name == "python-multipart":
            continue
        module = IMPORTED_AS.get(name, name.replace("-", "_"))
        pattern = rf"^\s*(from|import) {re.escape(module)}(\.|\s|$)"
        assert re.search(pattern, sources, re.M), f"{name} is a dependency nothing imports"


HEAVY = frozenset(
    {
        "sqlalchemy",
        "alembic",
        "numpy",
        "scipy",
        "celery",
        "kombu",
        "redis",
        "fastapi",
        "starlette",
        "uvicorn",
        "onnxruntime",
        "tokenizers",
        "pydantic",
        "jinja2",
        "yaml",
        "email_validator",
        "apscheduler",
        "httpx",
        "cryptography",
        "premailer",
    }
)
"""What ``newsletter --help`` must not import: each command imports what it runs."""


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [("--help",), ("--version",), ("send", "--help"), ("status", "--help"), ("cache", "--help")],
)
def test_help_imports_none_of_the_heavy_parts(args: tuple[str, ...], tmp_path: Path) -> None:
    """``newsletter --help`` took 0.7 s, most of it importing SQLAlchemy, pydantic and the
    config for a page of text; the command modules now import them in the commands that run
    (measured without timing: the interpreter's own list of what it imported)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "newsletter", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "Usage:" in out.stdout or "version" in out.stdout
    imported = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in out.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "click" in imported and "newsletter" in imported  # the list is the real one
    assert not imported & HEAVY, f"newsletter {' '.join(args)} imports {sorted(imported & HEAVY)}"
