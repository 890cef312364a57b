"""After a send, `rank` and `send --dry-run` say what happened: the papers were already sent
today, not "nothing strong", and a dry run counts the editions a real run would skip as
already sent, not as empty (issue 29 item 8)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from newsletter.cli import cli


@pytest.fixture(scope="module")
def sent_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    var = tmp_path_factory.mktemp("demo") / "demo"
    result = CliRunner().invoke(cli, ["demo", "--dir", str(var)], catch_exceptions=False)
    assert result.exit_code == 0 and "digests sent: 3" in " ".join(result.output.split())
    return var / "demo.yaml"


def test_rank_after_the_send_says_the_papers_were_already_sent_today(sent_demo: Path) -> None:
    result = CliRunner().invoke(
        cli, ["rank", "-c", str(sent_demo), "--to", "ada@example.org", "--explain"]
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "nothing strong in this topic today" not in out
    assert "LLM serving (0)" in out
    assert "already sent today: 4 papers (never sent twice)" in out


def test_a_dry_run_after_the_send_counts_them_as_already_sent(sent_demo: Path) -> None:
    dry = CliRunner().invoke(cli, ["send", "-c", str(sent_demo), "--now", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    out = " ".join(dry.output.split())
    assert "0 digests would be sent, 3 already sent, 0 empty" in out, out
    assert "one edition a day" in out
    # ... as the real run does.
    real = CliRunner().invoke(cli, ["send", "-c", str(sent_demo), "--now"])
    assert real.exit_code == 0, real.output
    assert "Today's editions were already sent (3 of 3)" in real.output


def test_the_readme_tour_ranks_before_it_sends() -> None:
    """The tour tells the reader to copy paper ids from `rank`: `rank` must come before the
    send that would leave it nothing to print, and before the command that needs the ids."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    tour = readme.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    block = tour.split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]

    def first(prefix: str) -> int:
        return next(i for i, c in enumerate(commands) if c.startswith(prefix))

    assert first("newsletter fetch") < first("newsletter rank") < first("newsletter send --now")
    assert first("newsletter rank") < first("newsletter feedback")
    assert "PAPER" in commands[first("newsletter feedback")]
