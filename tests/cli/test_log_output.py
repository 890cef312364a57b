"""A person reads the same lines wherever a command's output goes; JSON logs are for services.

Issue 43: with stdout not a terminal (``make demo | tee``, CI logs, cron mail) JSON log lines
were interleaved with the human summary. A command someone runs writes readable lines; JSON is
for ``serve``, ``worker`` and ``inbound`` under a journal or a container, or when asked
(``NEWSLETTER_LOG_FORMAT=json``), and always on stderr.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from newsletter import logs
from newsletter.cli import cli


def _json_lines(text: str) -> list[dict[str, object]]:
    found = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append(record)
    return found


def _demo(tmp_path: Path, *, merged: bool, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NEWSLETTER_")}
    return subprocess.run(
        [sys.executable, "-m", "newsletter", "demo", "--dir", str(tmp_path / "demo")],
        cwd=tmp_path,
        env={**environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merged else subprocess.PIPE,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_the_demo_piped_as_in_ci_or_cron_has_no_json(tmp_path: Path) -> None:
    """stdout and stderr into one pipe (CI, cron mail, ``make demo 2>&1 | tee``)."""
    result = _demo(tmp_path, merged=True, env={})
    assert result.returncode == 0, result.stdout
    assert "digests sent: 3" in " ".join(result.stdout.split())
    assert _json_lines(result.stdout) == [], result.stdout
    assert '"level"' not in result.stdout and '"ts"' not in result.stdout


@pytest.mark.slow
def test_json_logs_when_asked_go_to_stderr_only(tmp_path: Path) -> None:
    result = _demo(tmp_path, merged=False, env={"NEWSLETTER_LOG_FORMAT": "json"})
    assert result.returncode == 0, result.stderr
    assert "digests sent: 3" in " ".join(result.stdout.split())
    assert _json_lines(result.stdout) == [], result.stdout
    records = _json_lines(result.stderr)
    assert [line for line in result.stderr.splitlines() if line.strip()] == [
        json.dumps(r, ensure_ascii=False) for r in records
    ], "stderr holds something other than JSON lines"
    steps = {r["msg"] for r in records if r["logger"] == "newsletter.run"}
    assert {"fetch done", "send done"} <= steps


def _format_after(*args: str) -> type[logging.Formatter]:
    CliRunner().invoke(cli, ["--config", "/nonexistent/newsletter.yaml", *args])
    (handler,) = logging.getLogger().handlers
    assert handler.formatter is not None
    return type(handler.formatter)


def test_services_log_json_when_stderr_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under click's runner stderr is not a terminal, as under systemd or in a container."""
    monkeypatch.delenv("NEWSLETTER_LOG_FORMAT", raising=False)
    for service in sorted(logs.SERVICES):
        assert _format_after(service) is logs.JsonFormatter, service
    for command in ("status", "fetch", "send"):
        assert _format_after(command) is logs.TextFormatter, command
    monkeypatch.setenv("NEWSLETTER_LOG_FORMAT", "json")
    assert _format_after("status") is logs.JsonFormatter
    monkeypatch.setenv("NEWSLETTER_LOG_FORMAT", "text")
    assert _format_after("serve") is logs.TextFormatter
