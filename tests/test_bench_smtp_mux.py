"""The sending probe (bench/smtp_mux.py) delivers what it claims to, both ways: every message
arrives once, to its own recipient, into the benchmarks' sink in its own process."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import smtp_mux
from bench.bench_send import Sink

pytestmark = pytest.mark.slow  # a sink in a subprocess


def test_both_ways_deliver_every_message_once(tmp_path: Path) -> None:
    sink = Sink(tmp_path, "mux")
    try:
        smtp_mux.in_threads(sink.port, 30)
        smtp_mux.in_one_thread(sink.port, 50)
    finally:
        got = sink.stop()
    assert got["messages"] == 80
    assert got["recipients"] == 80  # each message to a recipient of its own
    assert got["median_size"] >= len(smtp_mux.MESSAGE)
