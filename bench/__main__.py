"""Run the benchmarks and regenerate docs/benchmarks.md.

Each module ``bench/bench_<name>.py`` defines ``main(quick: bool) -> str`` that runs its
measurement (fast path and naive baseline in the same run) and returns a Markdown section. The
section is saved to ``docs/benchmarks/<name>.md``, followed by ``bench/history/<name>.md`` when there
is one (earlier runs and what changed, kept by hand); ``docs/benchmarks.md`` is then rebuilt from
every saved section, so running one benchmark keeps the others' results.

    python -m bench            # all
    python -m bench rank       # only bench_rank.py
    python -m bench render     # digest rendering + MIME per subscriber (bench_render.py)
    python -m bench --quick    # smaller sizes, for a smoke test
    python -m bench scale --subscribers 100000   # options for one benchmark (see its main())
    python -m bench send --subscribers 30000     # `newsletter send --now` itself, both backends
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ROOT / "docs" / "benchmarks"
OUT = ROOT / "docs" / "benchmarks.md"
HISTORY = Path(__file__).resolve().parent / "history"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    return (
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores ({cpu}){mem}, "
        f"Python {platform.python_version()}"
    )


def available() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in Path(__file__).parent.glob("bench_*.py"))


def history(name: str) -> str:
    """Earlier runs of benchmark ``name`` and what changed between them, kept by hand in
    ``bench/history/<name>.md`` and appended to each new section (a run never erases them)."""
    path = HISTORY / f"{name}.md"
    return "\n" + path.read_text().rstrip() + "\n" if path.exists() else ""


def rebuild() -> None:
    parts = [
        "# Benchmarks",
        "",
        "Every target is measured as a ratio against a naive baseline **in the same run**, so a",
        "busy or slower machine moves both sides. Regenerate with `make bench` (or",
        "`python -m bench NAME`); each section says when and on what machine it was measured.",
        "",
    ]
    for path in sorted(SECTIONS.glob("*.md")):
        parts.append(path.read_text().rstrip() + "\n")
    OUT.write_text("\n".join(parts))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(available())})"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller sizes, for a smoke test; results are not saved",
    )
    parser.add_argument(
        "--subscribers",
        type=int,
        default=None,
        help="subscribers for the benchmarks that take a size (scale: default 100000; send: 10000)",
    )
    args = parser.parse_args()
    names = args.names or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; available: {', '.join(available())}")
    SECTIONS.mkdir(parents=True, exist_ok=True)
    for name in names:
        module = importlib.import_module(f"bench.bench_{name}")
        print(f"== {name}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        options = {"subscribers": args.subscribers} if args.subscribers else {}
        accepted = inspect.signature(module.main).parameters
        section = module.main(
            quick=args.quick, **{k: v for k, v in options.items() if k in accepted}
        )
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = (
            section.rstrip()
            + f"\n\n_Measured {stamp} on {machine()} in {time.perf_counter() - started:.0f} s._\n"
        )
        print(section)
        if not args.quick:
            (SECTIONS / f"{name}.md").write_text(section + history(name))
    if not args.quick:
        rebuild()
        print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
