"""What a new operator and a developer wait for: the install, ``newsletter --help``, the tests.

Four figures, each against its baseline in the same run:

- **Install size**: a fresh virtual environment after ``pip install .`` (the plain install,
  no extras), against the same with every extra a developer installs (``make test``'s).
- **``newsletter --help``**: the median wall time of the installed command, against the naive
  start-up it replaced: the same interpreter importing what the command modules imported at
  start-up before issue 43 (SQLAlchemy, pydantic, PyYAML, email-validator, the config and the
  store), then printing the same help.
- **``make test``** and **``make test-fast``'s pytest**: the wall time of the suite as the
  Makefile runs it (``-n`` workers; ``make test`` with its ruff and mypy steps, mypy's cache
  empty as on a clean clone), the fast set against the same tests in one process (``-n 0``).
  ``--quick`` times the fast set only.

Sizes do not depend on the machine's load; the times do (bench/history/install.md keeps the
runs and their load).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from bench import summary

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
HELP_RUNS = 11
NAIVE_START = (
    "import sqlalchemy, sqlalchemy.orm, pydantic, yaml, email_validator\n"
    "import newsletter.config, newsletter.store\n"
    "from newsletter.cli import main\n"
    "import sys; sys.argv = ['newsletter', '--help']; main()\n"
)
"""What ``newsletter --help`` paid for at start-up before the command modules imported their
heavy parts in the commands that use them."""


def jobs() -> str:
    """The Makefile's worker count for pytest (``TEST_JOBS``: twice the cores)."""
    return str(2 * (os.cpu_count() or 1))


def du_mb(path: Path) -> float:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                total += p.stat().st_size
    return total / 1e6


def install(tmp: Path, spec: str) -> tuple[float, float]:
    """A fresh venv with ``pip install --no-cache-dir SPEC``: its size (MB) and the time."""
    venv = tmp / "venv"
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    began = time.perf_counter()
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--no-cache-dir", spec],
        check=True,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seconds = time.perf_counter() - began
    return du_mb(venv), seconds


def median_wall(argv: list[str], runs: int = HELP_RUNS) -> float:
    walls = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        walls.append(time.perf_counter() - began)
    return statistics.median(walls)


def pytest_wall(args: list[str]) -> tuple[float, str]:
    """The wall time of ``pytest ARGS`` in the project's venv, and its last line."""
    began = time.perf_counter()
    done = subprocess.run(
        [str(VENV / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - began
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1].strip("= ")
    if done.returncode != 0:
        raise RuntimeError(f"pytest {' '.join(args)} failed: {done.stdout[-3000:]}")
    return wall, last


def lint_wall() -> float:
    """``make test``'s steps before pytest: ruff, ruff format and mypy with an empty cache (as
    on a clean clone in CI)."""
    began = time.perf_counter()
    with TemporaryDirectory() as cache:
        for argv in (
            ["ruff", "check", "--no-cache", "."],
            ["ruff", "format", "--check", "--no-cache", "."],
            ["mypy", "--cache-dir", cache],
        ):
            subprocess.run(
                [str(VENV / "bin" / argv[0]), *argv[1:]],
                cwd=ROOT,
                check=True,
                stdout=subprocess.DEVNULL,
            )
    return time.perf_counter() - began


def main(quick: bool) -> str:
    with TemporaryDirectory() as d:
        tmp = Path(d)
        base_mb, base_s = install(tmp, ".")
        help_s = median_wall([str(tmp / "venv" / "bin" / "newsletter"), "--help"])
        naive_s = median_wall([str(tmp / "venv" / "bin" / "python"), "-c", NAIVE_START])
    dev_mb = du_mb(VENV)
    fast = ["-m", "not slow and not long"]
    fast_s, fast_line = pytest_wall([*fast, "-n", jobs()])
    fast_one_s, _ = pytest_wall([*fast, "-n", "0"])
    rows = [
        f"| plain install (`pip install .`), size | {base_mb:,.0f} MB | "
        f"the dev venv (`make test`'s extras): {dev_mb:,.0f} MB | {base_mb / dev_mb:.2f} | "
        "≤ 350 MB |",
        f"| plain install, time (no pip cache) | {base_s:.0f} s | | | |",
        f"| `newsletter --help`, wall (median of {HELP_RUNS}) | {help_s:.2f} s | "
        f"naive start-up: {naive_s:.2f} s | {help_s / naive_s:.2f} | ≤ 0.4 s |",
        f"| `make test-fast`'s pytest ({fast_line}) | {fast_s:.0f} s | "
        f"one process: {fast_one_s:.0f} s | {fast_s / fast_one_s:.2f} | ≤ 90 s |",
    ]
    met_full: bool | None = None
    full_s = 0.0
    if not quick:
        lint_s = lint_wall()
        full_s, full_line = pytest_wall(["-n", jobs()])
        rows += [
            f"| `make test`'s ruff, format and mypy (empty cache) | {lint_s:.0f} s | | | |",
            f"| `make test`'s pytest ({full_line}) | {full_s / 60:.1f} min | | | |",
            f"| `make test`, both | {(lint_s + full_s) / 60:.1f} min | | | ≤ 8 min |",
        ]
        full_s += lint_s
        met_full = full_s <= 8 * 60
    lines = [
        "## Install and tests: the plain install, `newsletter --help`, the test suite",
        "",
        f"Sizes of fresh virtual environments, the median start-up of the installed command, and "
        f"the suite's wall time with pytest-xdist (`-n {jobs()}`: twice the cores, since half "
        "the suite waits on subprocesses, servers and relays) against one process. Times depend "
        "on the machine's load: bench/history/install.md keeps each run with its load.",
        "",
        "| figure | this code | baseline | ratio | target |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
        summary("plain install size (≤ 350 MB)", f"{base_mb:,.0f} MB", base_mb <= 350),
        summary("`newsletter --help` wall (≤ 0.4 s)", f"{help_s:.2f} s", help_s <= 0.4),
        summary("`make test-fast`'s pytest (≤ 90 s)", f"{fast_s:.0f} s", fast_s <= 90),
    ]
    if met_full is not None:
        lines.append(
            summary("`make test`, ruff to pytest (≤ 8 min)", f"{full_s / 60:.1f} min", met_full)
        )
    lines.append(f"\nLoad average at the end: {os.getloadavg()[0]:.1f}.")
    return "\n".join(lines) + "\n"
