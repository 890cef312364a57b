"""`newsletter demo`: one full edition on the bundled demo, and a second run that explains itself."""

from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.sink import read_maildir

ROOT = Path(__file__).resolve().parent.parent


def test_demo_sends_three_digests_then_explains_the_second_run(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "config", tmp_path / "config")
    config = tmp_path / "config" / "demo.yaml"
    var = tmp_path / "var" / "demo"
    first = CliRunner().invoke(
        cli, ["--config", str(config), "demo", "--dir", str(var)], catch_exceptions=False
    )
    assert first.exit_code == 0, first.output
    assert "44 new papers (46 stored)" in " ".join(first.output.split())
    assert "digests sent: 3" in " ".join(first.output.split())
    messages = read_maildir(var / "maildir")
    assert sorted(m["X-Sink-Rcpt-To"] for m in messages) == [
        "ada@example.org",
        "grace@example.org",
        "marie@example.org",
    ]
    subjects = {m["X-Sink-Rcpt-To"]: m["Subject"] for m in messages}
    assert (
        "LLM serving" in subjects["ada@example.org"]
        and "Neural rendering" in subjects["marie@example.org"]
    )
    assert (tmp_path / "var" / "demo" / "newsletter.db").exists()
    html = sorted((var / "html").glob("*.html"))
    assert len(html) == 3 and "Open a digest in a browser" in first.output

    second = CliRunner().invoke(
        cli, ["--config", str(config), "demo", "--dir", str(var)], catch_exceptions=False
    )
    assert second.exit_code == 0
    flat = " ".join(second.output.split())
    assert "digests sent: 0" in flat and "already sent" in flat
    assert len(read_maildir(var / "maildir")) == 3
