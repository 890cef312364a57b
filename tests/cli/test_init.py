"""`newsletter init`: a plain starter that is quiet until changed, and `init --demo`, a config
that works offline on day one (issue 29 item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.config import load_config
from newsletter.operations.smtp_sink import MaildirSink, html_part, read_maildir


def test_the_plain_starter_warns_about_nothing_and_says_what_to_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    init = runner.invoke(cli, ["init"])
    assert init.exit_code == 0, init.output
    steps = " ".join(init.output.split())
    assert "For production, change: sender.base_url" in steps and "smtp to your relay" in steps
    assert "newsletter init --demo" in steps
    for args in (
        ["db", "upgrade"],
        ["subscribers", "add", "a@example.org", "--topic", "moe"],
        ["rank", "--to", "a@example.org"],
        ["send", "--now", "--dry-run"],
        ["status"],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, result.output
        assert "warning" not in result.output and "not a stored paper" not in result.output, (
            args,
            result.output,
        )


def test_init_demo_writes_a_config_that_sends_offline_with_local_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    init = runner.invoke(cli, ["init", "--demo", "try/newsletter.yaml"])
    assert init.exit_code == 0, init.output
    steps = " ".join(init.output.split())
    assert (
        "newsletter sink --port 2525" in steps
        and "newsletter db upgrade -c try/newsletter.yaml" in steps
    )
    assert "For production, change in it: sources" in steps
    path = tmp_path / "try" / "newsletter.yaml"
    config = load_config(path)
    assert config.settings.sender.base_url == "http://localhost:8000"
    assert config.settings.smtp.host == "127.0.0.1" and config.settings.smtp.port == 2525
    assert all(not s.url.startswith("http") for s in config.settings.sources)
    assert config.database_url == f"sqlite:///{tmp_path / 'try' / 'var' / 'newsletter.db'}"

    maildir = tmp_path / "sink"
    with MaildirSink(maildir) as sink:  # what `newsletter sink` runs, on a free port here
        text = path.read_text(encoding="utf-8").replace("port: 2525", f"port: {sink.port}")
        path.write_text(text, encoding="utf-8")
        for args in (["db", "upgrade"], ["fetch"], ["send", "--now"]):
            result = runner.invoke(cli, ["-c", str(path), *args])
            assert result.exit_code == 0, (args, result.output)
    messages = read_maildir(maildir)
    assert len(messages) == 3
    html = html_part(messages[0]) or ""
    assert 'href="http://localhost:8000/manage/' in html

    again = runner.invoke(cli, ["init", "--demo", "try/newsletter.yaml"])
    assert again.exit_code != 0 and "already exists" in again.output


def test_the_readme_says_what_the_plain_starter_leaves_out() -> None:
    """Issue 43: the README called the starter "quiet until you change it" and never said what
    that meant. It says so now, and what it says holds for the file ``init`` copies."""
    root = Path(__file__).resolve().parents[2]
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    assert "quiet until you change it" not in readme
    configure = readme.split("**Configure.**", 1)[1].split("**Run.**", 1)[0]
    assert "As written it mails no one and warns about nothing" in configure
    assert "(`subscribers: []`" in configure
    assert "(a topic's `like:` papers, `dkim:`, `workers:`) are commented out" in configure
    settings = load_config(root / "config" / "newsletter.example.yaml").settings
    assert settings.subscribers == []
    assert settings.dkim is None and settings.workers is None
    assert all(not topic.like for topic in settings.topics)
