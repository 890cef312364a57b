"""The sending probe (bench/smtp_mux.py) delivers what it claims to, both ways: every message
arrives once, to its own recipient, into the benchmarks' aiosmtpd sink in its own process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench import smtp_mux
from newsletter.sink import free_port

pytestmark = pytest.mark.slow  # a sink in a subprocess


def test_both_ways_deliver_every_message_once(tmp_path: Path) -> None:
    port = free_port()
    stats = tmp_path / "sink.json"
    sink = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.smtp_counter",
            str(port),
            "--aiosmtpd",
            "--stats",
            str(stats),
        ],
        cwd=smtp_mux.ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        smtp_mux.in_threads(port, 30)
        smtp_mux.in_one_thread(port, 50)
    finally:
        sink.send_signal(signal.SIGTERM)
        sink.communicate(timeout=30)
    got = json.loads(stats.read_text())
    assert got["messages"] == 80
    assert got["recipients"] == 80  # each message to a recipient of its own
    assert got["median_size"] >= len(smtp_mux.MESSAGE)
