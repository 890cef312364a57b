"""End to end through the CLI: fixture feeds, a fresh database, a real SMTP server on loopback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from newsletter.cli import cli
from tests.conftest import SmtpServer, base_config, write_config


def run(config: Path, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["--config", str(config), *args], catch_exceptions=False)
    return result


@pytest.fixture
def config_path(tmp_path: Path, db_url: str, smtp_server: SmtpServer) -> Path:
    data = base_config(
        db_url,
        smtp_server,
        subscribers=[
            {"email": "kernels@example.org", "name": "Kai Kernel", "topics": ["gpu-kernels"]},
            {"email": "render@example.org", "name": "René Render", "topics": ["rendering"]},
            {"email": "leaver@example.org", "topics": ["gpu-kernels"]},
        ],
    )
    return write_config(tmp_path, data)


def text_and_html(msg: object) -> tuple[str, str]:
    from email.message import Message

    assert isinstance(msg, Message)
    assert msg.get_content_type() == "multipart/alternative"
    parts = {
        p.get_content_type(): p.get_payload(decode=True).decode(p.get_content_charset())
        for p in msg.get_payload()
    }  # type: ignore[union-attr]
    assert set(parts) == {"text/plain", "text/html"}
    return parts["text/plain"], parts["text/html"]


def test_fetch_send_and_second_send_sends_nothing(
    config_path: Path, smtp_server: SmtpServer
) -> None:
    assert run(config_path, "db", "upgrade").exit_code == 0
    fetched = run(config_path, "fetch")
    assert fetched.exit_code == 0, fetched.output
    # 20 cs.DC + 16 cs.LG, 6 listed in both: 30 papers, of which 2 are revisions (replace)
    # of papers not seen before, stored but never announced as new
    assert "28 new papers" in fetched.output and "2 papers stored without announcing" in " ".join(
        fetched.output.split()
    )
    removed = run(config_path, "subscribers", "remove", "leaver@example.org")
    assert removed.exit_code == 0 and "Unsubscribed leaver@example.org" in removed.output

    sent = run(config_path, "send", "--now")
    assert sent.exit_code == 0, sent.output
    assert sorted(r for m in smtp_server.received for r in m.rcpt_tos) == [
        "kernels@example.org",
        "render@example.org",
    ]
    assert smtp_server.messages_to("leaver@example.org") == []

    [kernels] = smtp_server.messages_to("kernels@example.org")
    assert kernels["To"] == "Kai Kernel <kernels@example.org>"
    text, html = text_and_html(kernels)
    for title in (
        "CUDA-L1: Improving CUDA Optimization",
        "CUDA-L2: Surpassing cuBLAS Performance",
        "CUDA-LLM: LLMs Can Write Efficient CUDA Kernels",
    ):
        assert title in text and title in html
    assert (
        "Rendering-Aware Reinforcement Learning" not in text
    )  # a rendering paper, not a kernels one

    [render] = smtp_server.messages_to("render@example.org")
    assert "=?utf-8?" in render["To"] or "René" in render["To"]
    rtext, _ = text_and_html(render)
    assert "RT-NeRF: Real-Time On-Device Neural Radiance Fields" in rtext
    assert "CUDA-L1" not in rtext

    before = len(smtp_server.received)
    again = run(config_path, "send", "--now")
    assert again.exit_code == 0
    assert len(smtp_server.received) == before
    assert "already sent" in again.output


def test_dry_run_sends_and_records_nothing(config_path: Path, smtp_server: SmtpServer) -> None:
    run(config_path, "db", "upgrade")
    run(config_path, "fetch")
    dry = run(config_path, "send", "--now", "--dry-run")
    assert dry.exit_code == 0 and "Dry run" in dry.output and "kernels@example.org" in dry.output
    assert smtp_server.received == []
    real = run(config_path, "send", "--now", "--to", "kernels@example.org")
    assert real.exit_code == 0
    assert [r.rcpt_tos for r in smtp_server.received] == [["kernels@example.org"]]


def test_preview_writes_the_html_that_would_be_sent(
    config_path: Path, tmp_path: Path, smtp_server: SmtpServer
) -> None:
    run(config_path, "db", "upgrade")
    run(config_path, "fetch")
    out = tmp_path / "digest.html"
    result = run(config_path, "preview", "--to", "kernels@example.org", "--out", str(out))
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "CUDA-L2" in html and 'style="' in html  # CSS inlined
    assert smtp_server.received == []


def test_commands_before_db_upgrade_say_what_to_do(config_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--config", str(config_path), "send", "--now"])
    assert result.exit_code == 1
    assert "run 'newsletter db upgrade' first" in result.output


def test_subscribers_add_list_remove(config_path: Path) -> None:
    run(config_path, "db", "upgrade")
    added = run(
        config_path,
        "subscribers",
        "add",
        "new@example.org",
        "--topic",
        "rendering",
        "--name",
        "New",
    )
    assert added.exit_code == 0 and "Added new@example.org (rendering)" in added.output
    bad = CliRunner().invoke(
        cli,
        ["--config", str(config_path), "subscribers", "add", "x@example.org", "--topic", "nope"],
    )
    assert bad.exit_code == 1 and "unknown topic nope" in bad.output
    invalid = CliRunner().invoke(
        cli,
        [
            "--config",
            str(config_path),
            "subscribers",
            "add",
            "not-an-address",
            "--topic",
            "rendering",
        ],
    )
    assert invalid.exit_code == 1 and "not a valid email address" in invalid.output
    listed = run(config_path, "subscribers", "list", "--json")
    assert "new@example.org" in listed.output and "kernels@example.org" in listed.output
    assert run(config_path, "subscribers", "remove", "new@example.org", "--forget").exit_code == 0
    assert "new@example.org" not in run(config_path, "subscribers", "list").output


def test_relay_down_stops_with_one_clear_error(tmp_path: Path, db_url: str) -> None:
    from newsletter.operations.smtp_sink import free_port

    data = base_config(db_url, subscribers=[{"email": "a@example.org", "topics": ["gpu-kernels"]}])
    data["smtp"] = {"host": "127.0.0.1", "port": free_port(), "timeout": 2}
    path = write_config(tmp_path, data)
    run(path, "db", "upgrade")
    run(path, "fetch")
    result = CliRunner().invoke(cli, ["--config", str(path), "send", "--now"])
    assert result.exit_code == 2
    assert "cannot reach the relay at 127.0.0.1" in result.output
    from newsletter.config import load_config
    from newsletter.store import Store

    store = Store(load_config(path).database_url)
    sub = store.get_subscriber("a@example.org")
    assert sub is not None
    from newsletter.models import EditionStatus

    with store.engine.connect() as conn:
        from sqlalchemy import text

        statuses = [r[0] for r in conn.execute(text("select status from editions"))]
    assert EditionStatus.SENT.value not in statuses  # nothing marked sent
    store.close()


def test_init_writes_a_valid_starter_config(tmp_path: Path) -> None:
    target = tmp_path / "mine.yaml"
    result = CliRunner().invoke(cli, ["init", str(target)])
    assert result.exit_code == 0 and target.exists()
    assert "newsletter db upgrade" in result.output
    again = CliRunner().invoke(cli, ["init", str(target)])
    assert again.exit_code == 1 and "--force" in again.output
    from newsletter.config import load_config

    assert load_config(target).settings.topics


def test_python_dash_m_lists_the_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "newsletter", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("init", "db", "fetch", "send", "preview", "subscribers", "demo"):
        assert f"  {command}" in out


def test_every_command_has_help() -> None:
    import click

    def walk(group: click.Group, prefix: list[str]) -> list[list[str]]:
        found = []
        for name, command in group.commands.items():
            found.append([*prefix, name])
            if isinstance(command, click.Group):
                found.extend(walk(command, [*prefix, name]))
        return found

    for path in walk(cli, []):
        command = cli
        for part in path:
            command = command.commands[part]  # type: ignore[attr-defined]
        assert command.help, f"newsletter {' '.join(path)} has no help text"
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output


def test_a_bad_send_request_is_said_before_a_long_fetch(config_path: Path) -> None:
    """``send --fetch`` checks its request first (the one check ``edition.send`` makes), so an
    address that is not a subscriber, or ``--force`` without ``--to``, costs no fetch."""
    from newsletter.config import load_config
    from newsletter.store import Store

    assert run(config_path, "db", "upgrade").exit_code == 0
    for args in (("--to", "nobody@example.org"), ("--force",)):
        result = run(config_path, "send", "--now", "--fetch", *args)
        assert result.exit_code == 1, result.output
        assert "error:" in result.output
    store = Store(load_config(config_path).database_url)
    try:
        assert store.last_runs(10, kind="fetch") == []  # no fetch ran
        assert store.count_papers() == 0
    finally:
        store.close()
