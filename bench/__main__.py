"""Run the benchmarks and regenerate docs/benchmarks.md.

Each module ``bench/bench_<name>.py`` defines ``main(quick: bool) -> str`` that runs its
measurement (fast path and naive baseline in the same run) and returns a Markdown section. The
section is saved to ``docs/benchmarks/<name>.md`` (the latest run only); ``docs/benchmarks.md``
is then rebuilt from every saved section, so running one benchmark keeps the others' results.

docs/benchmarks.md leads with one summary table, built from the sections: a row for each
``bench.summary(target, result, met)`` line a section carries (an HTML comment), with the date
and machine of its ``_Measured … on …_`` line and the command that re-measures it (``python -m
bench <name>``, or a section's ``<!-- command: … -->``). A new benchmark gets its rows by
printing ``summary(...)`` lines in its section; a section without one is listed as "see below".
Earlier runs and what changed between them are kept by hand in ``bench/history/<name>.md``,
which each section links to.

    python -m bench            # all
    python -m bench rank       # only bench_rank.py
    python -m bench render     # digest rendering + MIME per subscriber (bench_render.py)
    python -m bench --quick    # smaller sizes, for a smoke test
    python -m bench --rebuild  # only rebuild docs/benchmarks.md from docs/benchmarks/*.md
    python -m bench scale --subscribers 100000   # options for one benchmark (see its main())
    python -m bench send --subscribers 30000     # `newsletter send --now` itself, both backends
    python -m bench send --baseline ../base      # ... and the same sends by another checkout
    python -m bench send --baseline ../base --repeat 3   # ... three interleaved pairs, median
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import platform
import re
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


def history(name: str) -> Path | None:
    """Earlier runs of benchmark ``name`` and what changed between them, kept by hand in
    ``bench/history/<name>.md`` (a run never erases them; the section links to it)."""
    path = HISTORY / f"{name}.md"
    return path if path.exists() else None


_SUMMARY = re.compile(r"<!-- summary: (.*?) \| (.*?) \| (yes|no|-) -->")
_COMMAND = re.compile(r"<!-- command: (.*?) -->")
_MEASURED = re.compile(r"_Measured (\d{4}-\d\d-\d\d)[^_]*? on (.*?)(?: in \d+ s)?[,.]_", re.DOTALL)
VERDICT = {"yes": "met", "no": "**missed**", "-": "(record)"}


def summary_rows(name: str, text: str) -> list[str]:
    """The summary table's rows for one saved section (see the module's docstring)."""
    title = next((ln[3:].strip() for ln in text.splitlines() if ln.startswith("## ")), name)
    title = re.split(r"[:(]", title, maxsplit=1)[0].strip() or name
    measured = _MEASURED.search(text)
    when = "?"
    if measured:
        cores = re.search(r"\d+ cores(?: \((?:[^()]|\([^)]*\))*\))?", measured[2])
        when = f"{measured[1]}, {cores[0] if cores else ' '.join(measured[2].split())}"
    command = _COMMAND.search(text)
    run = command[1] if command else f"python -m bench {name}"
    link = f"[{title}](#{_anchor(text, name)})"
    rows = [
        f"| {link} | {target} | {result} | {VERDICT[met]} | {when} | `{run}` |"
        for target, result, met in _SUMMARY.findall(text)
    ]
    return rows or [f"| {link} | see below | | | {when} | `{run}` |"]


def _anchor(text: str, name: str) -> str:
    """GitHub's anchor of a section's ``## `` heading."""
    title = next((ln[3:].strip() for ln in text.splitlines() if ln.startswith("## ")), name)
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def rebuild() -> None:
    sections = [(p.stem, p.read_text().rstrip() + "\n") for p in sorted(SECTIONS.glob("*.md"))]
    parts = [
        "# Benchmarks",
        "",
        "Every target is measured as a ratio against a naive baseline **in the same run**, so a",
        "busy or slower machine moves both sides. Regenerate with `make bench` (or",
        "`python -m bench NAME`); each section below says when and on what machine it was measured,",
        "and links to its earlier runs (`bench/history/`).",
        "",
        "| benchmark | target | latest | pass | measured (date, machine) | command |",
        "|---|---|---|---|---|---|",
        *(row for name, text in sections for row in summary_rows(name, text)),
        "",
    ]
    for name, text in sections:
        parts.append(text)
        past = history(name)
        if past is not None:
            parts.append(
                f"Earlier runs and what changed: [bench/history/{name}.md]"
                f"(../bench/history/{name}.md).\n"
            )
    OUT.write_text("\n".join(parts))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names", nargs="*", help=f"benchmarks to run (default: all of {', '.join(available())})"
    )
    parser.add_argument(
        "--rebuild",
        action="store_true",
        help="only rebuild docs/benchmarks.md from the saved sections (after editing one by hand)",
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
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a worktree of another commit, with its .venv built: the benchmarks that take one "
        "(send) measure its code in the same run and report this code against it",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="(send, with --baseline) this many interleaved pairs of sends per backend, the "
        "baseline's first in each; the page shows the pair with the median share, and lists all",
    )
    args = parser.parse_args()
    if args.rebuild:
        rebuild()
        return 0
    names = args.names or available()
    unknown = sorted(set(names) - set(available()))
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; available: {', '.join(available())}")
    SECTIONS.mkdir(parents=True, exist_ok=True)
    for name in names:
        module = importlib.import_module(f"bench.bench_{name}")
        print(f"== {name}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        options: dict[str, object] = {"subscribers": args.subscribers} if args.subscribers else {}
        if args.baseline is not None:
            options["baseline"] = args.baseline.resolve()
        if args.repeat:
            options["repeat"] = args.repeat
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
            (SECTIONS / f"{name}.md").write_text(section)
    if not args.quick:
        rebuild()
        print(f"wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
