"""What the CLI says: counts of one in the singular, what each age counts from, whole addresses,
a re-add that changed nothing, the time a send took and its progress counts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from newsletter.cli import cli


def one_entry_world(tmp_path: Path, db_url: str, smtp: Any = None, **extra: Any) -> Path:
    """A config whose only source is a feed with one entry (a quantization paper)."""
    from tests.conftest import FEEDS, base_config, write_config

    blog = (FEEDS / "lab-blog.atom").read_text(encoding="utf-8")
    head, _, rest = blog.partition("<entry>")
    first = rest.partition("</entry>")[0]
    feed = tmp_path / "one.atom"
    feed.write_text(f"{head}<entry>{first}</entry>\n</feed>\n", encoding="utf-8")
    data = base_config(db_url, smtp, **extra)
    data["sources"] = [{"name": "blog", "kind": "feed", "url": str(feed)}]
    data["topics"] = [{"name": "quant", "title": "Quantization", "keywords": ["quantization"]}]
    data["web"] = {"secret_key": "a-test-secret-that-signs-links-0123456789"}
    path = write_config(tmp_path, data)
    assert CliRunner().invoke(cli, ["--config", str(path), "db", "upgrade"]).exit_code == 0
    return path


def run_cli(path: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--config", str(path), *args])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_counts_of_one_are_singular(tmp_path: Path, db_url: str) -> None:
    path = one_entry_world(tmp_path, db_url)
    assert "1 entry, 1 new paper, 0 updated." in run_cli(path, "fetch")
    run_cli(path, "subscribers", "add", "ada@example.org", "--topic", "quant")
    status = run_cli(path, "status")
    assert "1 active subscriber;" in status and "1 paper stored." in status
    preview = run_cli(path, "preview", "--to", "ada@example.org", "--out", str(tmp_path / "d.html"))
    assert "(1 paper)." in preview
    rank = run_cli(path, "rank", "--to", "ada@example.org")
    assert "1 paper first seen here in the last 7 days" in rank
    for text in (status, preview, rank):
        assert not re.search(r"\b1 (papers|entries|subscribers|days)\b", text), text


def test_counted_agrees_with_the_number() -> None:
    from newsletter.text import counted

    assert counted(1, "paper") == "1 paper" and counted(0, "paper") == "0 papers"
    assert counted(1, "entry") == "1 entry" and counted(3, "entry") == "3 entries"
    assert counted(2, "day") == "2 days" and counted(2, "mouse", "mice") == "2 mice"


def test_the_rank_header_and_explain_say_what_each_age_counts_from(
    tmp_path: Path, db_url: str
) -> None:
    path = one_entry_world(tmp_path, db_url)
    run_cli(path, "fetch")
    run_cli(path, "subscribers", "add", "ada@example.org", "--topic", "quant")
    out = run_cli(path, "rank", "--to", "ada@example.org", "--explain")
    # The window counts from when this server first saw the paper; the age from publication.
    assert "first seen here in the last 7 days (digest.lookback_days;" in out
    assert re.search(r"recency [0-9.]+ \(published [0-9.]+ days ago\)", out), out
    assert "days old" not in out


def test_the_new_column_counts_only_papers_announced_as_new(tmp_path: Path, db_url: str) -> None:
    from tests.conftest import FEEDS, base_config, write_config

    data = base_config(db_url)
    data["sources"] = [
        {"name": "dc", "kind": "arxiv_rss", "url": str(FEEDS / "arxiv-rss-cs.DC-2026-11-16.xml")}
    ]
    path = write_config(tmp_path, data)
    run_cli(path, "db", "upgrade")
    out = run_cli(path, "fetch")
    # 20 entries, 2 of them revisions (announce_type replace) of papers never seen here: they
    # are stored for merging but never announced, so they are not "new".
    assert "dc ok 20 18 0 0 0" in out
    assert "20 entries, 18 new papers, 0 updated, 2 papers stored without announcing" in out
    status = run_cli(path, "status", "--json")
    assert '"new": 18' in status and '"unannounced": 2' in status


def test_subscribers_list_never_cuts_an_address(tmp_path: Path, db_url: str) -> None:
    path = one_entry_world(tmp_path, db_url)
    long = "a.very.long.local.part.for.testing.tables" + "@" + "department-of-examples.example.org"
    assert len(long) > 70
    run_cli(path, "subscribers", "add", long, "--topic", "quant", "--name", "Ada Lovelace")
    result = CliRunner().invoke(cli, ["--config", str(path), "subscribers", "list"])
    assert result.exit_code == 0
    assert long in result.output  # whole, on one line
    assert "Ada Lovelace" in result.output and "quant" in result.output


def test_re_adding_with_new_topics_says_nothing_changed_and_points_at_set(
    tmp_path: Path, db_url: str
) -> None:
    from tests.conftest import write_config

    path = one_entry_world(tmp_path, db_url)
    data = __import__("yaml").safe_load(path.read_text())
    data["topics"].append({"name": "nerf", "keywords": ["NeRF"]})
    write_config(tmp_path, data)
    run_cli(path, "subscribers", "add", "ada@example.org", "--topic", "quant")
    again = run_cli(path, "subscribers", "add", "ada@example.org", "--topic", "nerf")
    assert "ada@example.org is already a subscriber (active; topics quant;" in again
    assert "nothing changed" in again
    assert "newsletter subscribers set ada@example.org --topic nerf" in again
    shown_json = run_cli(path, "subscribers", "show", "ada@example.org", "--json")
    assert '"quant"' in shown_json and '"nerf"' not in shown_json
    # The same add again is simply acknowledged: nothing to change, nothing to point at.
    same = run_cli(path, "subscribers", "add", "ada@example.org", "--topic", "quant")
    assert "already a subscriber" in same and "nothing changed" not in same


def test_took_line_precision() -> None:
    from newsletter.cli import seconds_text, took_line

    assert seconds_text(0.004) == "under 0.01 s"
    assert seconds_text(0.043) == "0.043 s" and seconds_text(1.26) == "1.3 s"
    assert seconds_text(42.4) == "42 s" and seconds_text(185) == "3 min 05 s"
    assert took_line(0.5, 3) == "Took 0.5 s, start-up included: 3 messages, 6 messages/s."
    assert took_line(2.0, 1) == "Took 2 s, start-up included: 1 message, 0.5 messages/s."
    assert took_line(12.0, 600) == "Took 12 s, start-up included: 600 messages, 50 messages/s."
    assert "nothing was sent" in took_line(0.2, 0)


@pytest.mark.slow
def test_send_reports_time_from_start_up_and_progress_counts_messages_in_flight(
    tmp_path: Path, db_url: str, smtp_server: Any
) -> None:
    import json
    import os
    import subprocess
    import sys

    path = one_entry_world(tmp_path, db_url, smtp_server)
    run_cli(path, "fetch")
    for name in ("ada", "bob", "cy", "dee", "eve"):
        run_cli(path, "subscribers", "add", f"{name}@example.org", "--topic", "quant")
    env = {**os.environ, "NEWSLETTER_LOG_FORMAT": "text"}
    out = subprocess.run(
        [sys.executable, "-m", "newsletter", "--config", str(path), "send", "--now"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    m = re.search(r"Took (.+?) s, start-up included: 5 messages, ([0-9.]+) messages/s\.", out)
    assert m, out
    took = float(m[1].removeprefix("under "))
    rate = float(m[2])
    # The rate is over the same time the line shows, which holds the whole command: at least
    # the send's own recorded duration.
    assert took * rate == pytest.approx(5, rel=0.15)
    [run] = [
        r for r in json.loads(run_cli(path, "status", "--json"))["runs"] if r["kind"] == "send"
    ]
    assert took >= run["duration"] * 0.95
    assert len(smtp_server.received) == 5


def test_progress_counts_add_up_to_the_list_with_messages_in_flight(
    tmp_path: Path, db_url: str, smtp_server: Any
) -> None:
    from newsletter.clock import utcnow
    from newsletter.config import load_config
    from newsletter.edition import SendReport
    from newsletter.store import Store
    from tests.sends import send_step

    path = one_entry_world(tmp_path, db_url, smtp_server)
    run_cli(path, "fetch")
    for i in range(12):
        run_cli(path, "subscribers", "add", f"r{i}@example.org", "--topic", "quant")
    seen: list[tuple[int, int, int, int]] = []

    def progress(r: SendReport) -> None:
        assert r.remaining is not None and r.total == 12
        settled = r.sent + r.failed + r.already + r.empty + r.no_listing
        assert settled + r.in_flight + r.remaining == r.total, r
        seen.append((r.sent, r.failed, r.in_flight, r.remaining))

    config = load_config(path)
    store = Store(config.database_url)
    try:
        report = send_step(config, store, utcnow(), progress=progress)
    finally:
        store.close()
    assert report.sent == 12 and seen[-1] == (12, 0, 0, 0)
    assert any(in_flight for _, _, in_flight, _ in seen)  # handed over before the answer came
