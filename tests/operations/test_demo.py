"""`newsletter demo`: one full edition on the bundled demo, a second run that explains itself,
and never a touch of the operator's config or database (issue 29 item 6)."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.operations.smtp_sink import read_maildir

ROOT = Path(__file__).resolve().parent.parent.parent


def test_demo_sends_three_digests_then_explains_the_second_run(tmp_path: Path) -> None:
    var = tmp_path / "var" / "demo"
    first = CliRunner().invoke(cli, ["demo", "--dir", str(var)], catch_exceptions=False)
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
    # Issue 43: the demo's "Code" links went to made-up repositories (github.com/example-lab/…).
    # Its snapshot carries no repository now, so no digest shows one (a real feed's are kept:
    # tests/sources/test_code_stars.py).
    for message in messages:
        body = message.as_string()
        assert "example-lab" not in body
        html_part = next(p for p in message.walk() if p.get_content_type() == "text/html")
        assert ">Code</a>" not in str(html_part.get_payload(decode=True), "utf-8")
    assert "example-lab" not in (ROOT / "config" / "demo-feeds").joinpath(
        "hf-daily-papers-2026-11-17-evening.json"
    ).read_text(encoding="utf-8")
    assert (var / "demo.db").exists() and (var / "demo.yaml").exists()
    html = sorted((var / "html").glob("*.html"))
    assert len(html) == 3 and "Open a digest in a browser" in first.output

    second = CliRunner().invoke(cli, ["demo", "--dir", str(var)], catch_exceptions=False)
    assert second.exit_code == 0
    flat = " ".join(second.output.split())
    assert "digests sent: 0" in flat and "already sent" in flat
    # The hint names the demo's directory once, not the same database twice.
    assert f"Delete {var} (the demo's config, database and mail) to start over." in flat
    assert flat.count("demo.db") == 0
    assert len(read_maildir(var / "maildir")) == 3


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_demo_run_beside_an_operator_config_leaves_its_database_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run where an operator works (./newsletter.yaml, $NEWSLETTER_CONFIG, --config and
    $NEWSLETTER_DATABASE_URL all naming their real database with a subscriber): the demo
    sends to its own subscribers from its own directory, and the operator's database is
    byte for byte what it was, so their next real send still goes out."""
    operator = tmp_path / "operator"
    operator.mkdir()
    shutil.copytree(ROOT / "config" / "demo-feeds", operator / "demo-feeds")
    text = (ROOT / "config" / "demo.yaml").read_text(encoding="utf-8")
    text = text.replace("sqlite:///demo.db", "sqlite:///operator.db")
    (operator / "newsletter.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(operator)
    runner = CliRunner()
    assert runner.invoke(cli, ["db", "upgrade"]).exit_code == 0
    added = runner.invoke(cli, ["subscribers", "add", "real@example.org", "--topic", "gpu-kernels"])
    assert added.exit_code == 0, added.output
    database = operator / "operator.db"
    before = _digest(database)
    url = f"sqlite:///{database}"
    monkeypatch.setenv("NEWSLETTER_CONFIG", str(operator / "newsletter.yaml"))
    monkeypatch.setenv("NEWSLETTER_DATABASE_URL", url)

    result = runner.invoke(cli, ["--config", "newsletter.yaml", "demo"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "digests sent: 3" in flat and "The demo ignores the config newsletter.yaml" in flat
    assert _digest(database) == before
    # Following its "serve" hint must not open the operator's database either.
    assert "NEWSLETTER_DATABASE_URL= " in flat
    demo_dir = operator / "newsletter-demo"
    assert (demo_dir / "demo.db").exists() and (demo_dir / ".newsletter-demo").exists()
    assert sorted(m["X-Sink-Rcpt-To"] for m in read_maildir(demo_dir / "maildir"))[0] == (
        "ada@example.org"
    )

    # The operator's own send still finds today's editions unsent.
    monkeypatch.delenv("NEWSLETTER_DATABASE_URL")
    dry = runner.invoke(cli, ["send", "--now", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "already sent" not in dry.output


def test_demo_refuses_a_directory_that_is_not_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "newsletter.yaml").write_text("# an operator's config\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["demo", "--dir", "."])
    assert result.exit_code != 0
    assert "is not empty and not a demo directory" in " ".join(result.output.split())
    assert (tmp_path / "newsletter.yaml").read_text(encoding="utf-8") == "# an operator's config\n"
    assert not (tmp_path / "demo.yaml").exists()


def test_the_demo_says_how_to_serve_its_links_and_they_work_when_served(tmp_path: Path) -> None:

    from fastapi.testclient import TestClient

    from newsletter.config import load_config
    from newsletter.store import Store
    from newsletter.web import create_app

    var = tmp_path / "var" / "demo"
    config_path = var / "demo.yaml"  # the demo's own copy of the bundled config
    result = CliRunner().invoke(cli, ["demo", "--dir", str(var)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "The digests' links (View in browser, Manage topics, Unsubscribe) go to" in out
    hint = re.search(
        r"to follow them, run: (\S+) --config (\S+) serve --no-scheduler --port (\d+)", out
    )
    assert hint, out
    assert Path(hint[2]).resolve() == config_path.resolve() and hint[3] == "8000"

    # What that command serves: the app on the demo's config and database.
    html = (var / "html" / "ada-example-org.html").read_text(encoding="utf-8")
    view = re.search(r'href="http://localhost:8000(/archive/view/[^"]+)"', html)
    manage = re.search(r'href="http://localhost:8000(/manage/[^"]+)"', html)
    assert view and manage
    config = load_config(config_path)
    store = Store(config.database_url)
    try:
        with TestClient(create_app(config, store, None)) as client:
            page = client.get(view[1])
            assert page.status_code == 200
            first_title = re.search(r'<a class="title" href="[^"]*"[^>]*>([^<&]{12,})', html)
            assert first_title and first_title[1][:30] in page.text
            assert client.get(manage[1]).status_code == 200
    finally:
        store.close()
