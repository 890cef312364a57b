"""What a send's summary says about the editions an earlier run left: only an interrupted run
is called interrupted (issue 43)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.errors import ExitStatus
from newsletter.operations.smtp_sink import free_port
from tests.conftest import SmtpServer, base_config, write_config


def _said(text: str) -> str:
    return " ".join(text.split())


def test_after_a_plain_relay_down_run_the_next_run_says_it_retries_them(
    tmp_path: Path, smtp_server: SmtpServer
) -> None:
    """Issue 43: after a run whose relay was down, the next run said "resumed from an
    interrupted run". Nothing was interrupted: the relay refused the first message."""
    db = f"sqlite:///{tmp_path / 'n.db'}"
    readers = [{"email": f"r{i}@example.org", "topics": ["gpu-kernels"]} for i in range(3)]
    down = base_config(db, subscribers=readers)
    down["smtp"] = {"host": "127.0.0.1", "port": free_port()}  # nothing listens there
    path = write_config(tmp_path, down)
    for command in (["db", "upgrade"], ["fetch"]):
        assert CliRunner().invoke(cli, ["-c", str(path), *command]).exit_code == 0
    first = CliRunner().invoke(cli, ["-c", str(path), "send", "--now"])
    assert first.exit_code == ExitStatus.RELAY_UNUSABLE, first.output
    assert "given back unsent (next run sends them) │ 3 │" in _said(first.stdout)

    write_config(tmp_path, base_config(db, smtp_server, subscribers=readers))
    second = CliRunner().invoke(cli, ["-c", str(path), "send", "--now"])
    assert second.exit_code == 0, second.output
    assert "│ sent │ 3 │" in _said(second.stdout)
    assert "interrupted" not in second.output, second.output
    # the one message the relay refused was tried already: it is retried, and said so
    assert "retried: the relay refused them in an earlier run │ 1 │" in _said(second.stdout)
    assert len(smtp_server.received) == 3
