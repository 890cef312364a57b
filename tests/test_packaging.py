"""The wheel ships its templates, migrations and example config; an install finds them."""

from __future__ import annotations

import os
import subprocess
import sys
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
        "from newsletter.render import shipped_templates_dir; from newsletter.cli import example_config;"
        "print(shipped_templates_dir()); print(example_config());"
        "from newsletter.demo import shipped_demo; print(*shipped_demo())"
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
