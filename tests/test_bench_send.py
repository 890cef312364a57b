"""Smoke test of the send benchmark (bench/bench_send.py): 50 subscribers, no times asserted.

It runs what ``make bench`` runs, small: the real ``newsletter send --now`` in a subprocess into
the benchmark's sink, then the raw baseline with the typical digest read back from that sink.
It holds the report's fields and that every digest arrived, once each.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench import bench_send
from tests.conftest import PG_URL, pg_unavailable

# Slow: the real `newsletter send --now` in a subprocess, on each database.
pytestmark = pytest.mark.slow

SUBSCRIBERS = 50
PAPERS = 150  # of the benchmark's 2,000: embedding those was nine tenths of this test's time
FIELDS = (
    "wall",
    "cpu",
    "peak_rss_mb",
    "delivered",
    "recipients",
    "digest_bytes",
    "raw_seconds",
    "rate",
    "raw_rate",
    "ratio",
    "cpu_ms",
)


def _check(send: bench_send.Send) -> dict[str, object]:
    fields = send.as_dict()
    for name in FIELDS:
        assert isinstance(fields[name], int | float) and fields[name] > 0, name
    # every digest reached the sink, one per subscriber; the baseline sent as many
    assert send.delivered == SUBSCRIBERS
    assert send.recipients == SUBSCRIBERS
    assert send.raw_delivered == SUBSCRIBERS
    assert send.digest_bytes > 5000  # a real digest read back from the sink, not a stub
    return fields


def test_sqlite_send_is_measured_and_every_digest_arrives(tmp_path: Path) -> None:
    send = bench_send.measure("sqlite", SUBSCRIBERS, tmp_path, papers=PAPERS)
    fields = _check(send)
    assert fields["server_ms"] is None and send.editions == {}
    # the profiled send: the same command in-process, its CPU credited to the stages
    got = bench_send.profile(
        "sqlite", SUBSCRIBERS, tmp_path, bench_send.topic_list(), papers=PAPERS
    )
    cpu = got["cpu"]
    assert got["missing"] == []
    for stage in bench_send.GROUPS[:10]:  # every stage of the send path counted some CPU
        assert cpu.get(stage, 0) > 0, stage
    text = bench_send.report([send], {"sqlite": Counter(cpu)}, [])
    assert "| SQLite |" in text and "send / raw" in text
    assert "| **the command, all threads** |" in text


@pytest.mark.postgres
def test_postgres_send_counts_server_cpu_and_editions_scans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    monkeypatch.setattr(bench_send, "PG_URL", PG_URL)
    send = bench_send.measure("postgresql", SUBSCRIBERS, tmp_path, papers=PAPERS)
    _check(send)
    assert send.server["backend_count"] >= 1  # the send's backends were found and read
    assert send.server["backends"] >= 0
    assert send.editions["rows"] == SUBSCRIBERS
    assert isinstance(send.editions["seq_scan"], int)
    text = bench_send.report([send], {}, [])
    assert "| PostgreSQL |" in text


def test_stage_clock_takes_inner_stages_out_of_outer_ones() -> None:
    clock = bench_send.StageClock()

    def burn(seconds: float) -> None:
        start = time.thread_time()
        while time.thread_time() - start < seconds:
            pass

    def inner() -> None:
        burn(0.05)

    def rows() -> Any:
        for i in range(3):
            burn(0.02)
            yield i

    timed_inner = clock.wrap(inner, bench_send.RENDER)
    timed_rows = clock.wrap(rows, bench_send.STORE)

    def outer() -> None:
        burn(0.05)
        timed_inner()
        assert list(timed_rows()) == [0, 1, 2]

    clock.wrap(outer, bench_send.RANK)()
    cpu = clock.cpu
    # each stage holds its own CPU, at least what it burned, and the outer one not the inner's
    assert cpu[bench_send.RENDER] >= 50_000_000
    assert cpu[bench_send.STORE] >= 60_000_000
    assert cpu[bench_send.RANK] >= 50_000_000
    assert cpu[bench_send.RANK] < cpu[bench_send.RENDER] + cpu[bench_send.STORE]
    # what no stage counted in a thread goes to the thread's group
    done = threading.Thread(target=lambda: clock.thread_done(bench_send.OTHER, 10**9))
    done.start()
    done.join()
    assert cpu[bench_send.OTHER] == 10**9


def test_every_stage_of_the_send_path_is_found() -> None:
    """The stages name functions of the send path: when one moves, this says which."""
    missing = [
        targets[0]
        for targets, _ in bench_send.STAGES
        if all(bench_send.resolve(t) is None for t in targets)
    ]
    assert missing == []


def _send(cpu: float) -> bench_send.Send:
    return bench_send.Send(
        backend="sqlite",
        subscribers=100,
        wall=1.0,
        cpu=cpu,
        peak_rss_mb=1.0,
        delivered=100,
        recipients=100,
        digest_bytes=1,
        raw_seconds=1.0,
        raw_delivered=100,
        sink_cpu=1.0,
    )


@pytest.mark.parametrize(
    ("shares", "median"), [([0.9, 0.5, 0.7], 0.7), ([0.8, 0.6], 0.6), ([1.1], 1.1)]
)
def test_repeated_pairs_report_the_median_share(shares: list[float], median: float) -> None:
    """``--repeat``: the pair shown is the one whose share is the median, whatever the order the
    pairs ran in (the lower middle one of an even count)."""
    pairs = [(_send(1.0), _send(share)) for share in shares]
    old, new = bench_send.median_pair(pairs)
    assert new.cpu_ms / old.cpu_ms == pytest.approx(median)


def test_the_baseline_runs_with_its_own_blas_default() -> None:
    """``newsletter`` sets ``OPENBLAS_NUM_THREADS`` when imported; the baseline checkout must not
    inherit that default from the bench (it would measure the baseline with this code's
    setting), but keeps a value the bench was started with."""
    import os
    import subprocess
    import sys

    code = (
        "import os\n"
        "from bench.bench_send import own_defaults\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'), own_defaults().get('OPENBLAS_NUM_THREADS'))"
    )
    root = Path(bench_send.__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    run = lambda e: subprocess.run(  # noqa: E731
        [sys.executable, "-c", code], cwd=root, env=e, capture_output=True, text=True, check=True
    ).stdout.split()
    assert run(env) == ["1", "None"]
    assert run({**env, "OPENBLAS_NUM_THREADS": "3"}) == ["3", "3"]


def test_the_benchmark_seeds_as_many_papers_as_the_scale_benchmark() -> None:
    from bench import bench_scale

    assert bench_send.PAPERS == bench_scale.PAPERS  # the smoke test's fewer are its own choice
