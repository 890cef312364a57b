"""Benchmarks: each `bench/bench_<name>.py` measures one target against a naive baseline in the
same run. `make bench` (or `python -m bench [name ...]`) runs them and rewrites docs/benchmarks.md.
"""

from __future__ import annotations


def summary(target: str, result: str, met: bool | None) -> str:
    """One row of the summary table that leads docs/benchmarks.md, as a line a section carries
    (an HTML comment: invisible in the section itself). ``met``: ``None`` when the figure has
    no pass or fail (a record, a diagnostic)."""
    verdict = "-" if met is None else "yes" if met else "no"
    clean = [s.replace("|", "/").replace("-->", "->").strip() for s in (target, result)]
    return f"<!-- summary: {clean[0]} | {clean[1]} | {verdict} -->"
