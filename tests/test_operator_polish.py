"""Operator polish: config mistakes explained, removed sources forgotten, honest wording."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import BaseModel

from newsletter.cli import cli

GOOD = """\
database:
  url: sqlite:///var/n.db
sender:
  from: "Papers <digest@example.org>"
topics:
  - name: moe
    keywords: [[MoE, mixture of experts]]
subscribers:
  - email: ada@example.org
    topics: [moe]
"""


def config_error(tmp_path: Path, text: str) -> str:
    """What ``newsletter status`` prints for a config holding ``text`` (it must fail)."""
    path = tmp_path / "cfg.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli, ["--config", str(path), "status"])
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


# ---------------------------------------------------------------------------- item 9: config


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "htps://rss.arxiv.org/rss/cs.LG",
            "unknown URL scheme 'htps' (did you mean \"https://\"?)",
        ),
        ("ftp://mirror.example.org/cs.LG.xml", "unknown URL scheme 'ftp';"),
        ("https:///rss/cs.LG", "has no host name"),
    ],
)
def test_a_source_url_with_an_unknown_scheme_is_caught_at_load(
    tmp_path: Path, url: str, expected: str
) -> None:
    text = GOOD + f"sources:\n  - name: lg\n    kind: arxiv_rss\n    url: {url}\n"
    out = config_error(tmp_path, text)
    assert "cfg.yaml:14: sources[0].url:" in out
    assert expected in out
    assert "use http://, https://, file:// or a path relative to the config file" in out or (
        "no host name" in expected
    )


def test_source_urls_that_are_allowed_still_load(tmp_path: Path) -> None:
    from newsletter.config import parse_config

    text = (
        GOOD
        + "sources:\n"
        + "".join(
            f"  - name: s{i}\n    kind: feed\n    url: {url}\n"
            for i, url in enumerate(
                [
                    "https://a.example.org/f",
                    "HTTP://b.example.org/f",
                    "file:///tmp/f.xml",
                    "feeds/x.xml",
                ]
            )
        )
    )
    settings, _ = parse_config(text, "cfg.yaml")
    assert [s.url for s in settings.sources][-1] == "feeds/x.xml"


@pytest.mark.parametrize(
    ("text", "line", "hint"),
    [
        # a missing ':' is noticed by PyYAML on the next line; the mistake is on line 3
        ("smtp:\n  host: x\n  port 25\nweb:\n  port: 1\n", 3, "a key without ':' after it?"),
        # a section name without ':' above its keys
        ("database:\n  url: x\nsmtp\n  host: y\n", 3, "a key without ':' after it?"),
        ("smtp\n  host: y\nweb:\n  port: 1\n", 1, "a key without ':' after it?"),
        # indented one space too far, and one too little
        ("smtp:\n  host: x\n   port: 25\nweb:\n  port: 1\n", 3, "indentation"),
        ("smtp:\n  host: x\n port: 25\nweb:\n  port: 1\n", 3, "not indented like the lines"),
        ("topics:\n  - name: a\n    keywords: [x]\n   - name: b\n", 4, "not indented like"),
        # unclosed bracket and quote: the line that opened them, not the end of the file
        ("database:\n  url: [unclosed\nweb:\n  port: 1\n", 2, "'[' opened on this line"),
        ('smtp:\n  host: "x\n  port: 2\nweb:\n  port: 1\n', 2, "quote opened on this line"),
        # ... and closed by the next quote further down (issue 29 item 10): not "indented"
        (
            'sender:\n  from: "Papers <a@b.org>\n  postal_address: "Lab"\n  base_url: x\n',
            2,
            "the quote opened on this line is not closed on it, so the value runs on to line 3",
        ),
        (
            "topics:\n  - name: 'llm\n    title: LLM\n    keywords: ['KV cache']\n",
            2,
            "the quote opened on this line is not closed on it",
        ),
        ("smtp:\n\thost: x\n", 2, "spaces, not tabs"),
    ],
)
def test_a_yaml_error_names_the_line_of_the_mistake(
    tmp_path: Path, text: str, line: int, hint: str
) -> None:
    out = config_error(tmp_path, text)
    assert f"cfg.yaml:{line}: not valid YAML:" in out
    assert hint in out


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("30 20 * * sun-fri", "weekday range 'sun-fri' runs backwards"),
        ("30 20 * * sat-mon", "write sat-sun,mon"),
        ("30 20 * * 0-4", "write day names (mon, tue, ... sun), not numbers"),
    ],
)
def test_a_cron_weekday_range_explains_that_monday_is_zero(
    tmp_path: Path, cron: str, expected: str
) -> None:
    text = GOOD + f"schedule:\n  fetch:\n    - {{cron: '{cron}', timezone: UTC}}\n"
    out = config_error(tmp_path, text)
    assert "cfg.yaml:13: schedule.fetch[0].cron:" in out
    assert "APScheduler counts" in out and "from Monday (mon=0 ... sun=6)" in out
    assert expected in out


def test_the_suggested_cron_is_accepted_and_means_sunday_to_friday() -> None:
    from datetime import datetime

    from apscheduler.triggers.cron import CronTrigger

    from newsletter.config import parse_config

    settings, _ = parse_config(
        GOOD + "schedule:\n  fetch:\n    - {cron: '30 20 * * sun,mon-fri', timezone: UTC}\n",
        "cfg.yaml",
    )
    trigger = CronTrigger.from_crontab(settings.schedule.fetch[0].cron, timezone="UTC")
    days = set()
    t = datetime(2026, 11, 16, tzinfo=trigger.timezone)  # a Monday
    for _ in range(7):
        t = trigger.get_next_fire_time(None, t)
        days.add(t.strftime("%a"))
        t = t.replace(hour=21)
    assert days == {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri"}


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("smtp:\n  hots: relay.example.org\n", 'smtp.hots: unknown key; did you mean "host"?'),
        ("web:\n  rate_limit:\n    per_ipp: 3\n", "web.rate_limit.per_ip: unknown key"),
        (
            "dkim:\n  selector: s\n  header: [From]\n",
            'dkim.header: unknown key; did you mean "headers"?',
        ),
        ("sender:\n  reply-to: a@b.org\n", 'did you mean "reply_to"?'),
        ("smtp:\n  zzzz: 1\n", "smtp.zzzz: unknown key (valid here: host, port, security,"),
    ],
)
def test_an_unknown_key_suggests_the_closest_valid_one(
    tmp_path: Path, section: str, expected: str
) -> None:
    base = GOOD.replace('sender:\n  from: "Papers <digest@example.org>"\n', "")
    out = config_error(tmp_path, base + section)
    assert expected.replace("per_ip: unknown key", "per_ipp: unknown key") in out
    if "per_ipp" in section:
        assert 'did you mean "per_ip"?' in out


def test_an_unknown_key_in_a_topic_suggests_and_names_the_topic(tmp_path: Path) -> None:
    out = config_error(tmp_path, GOOD.replace("    keywords:", "    keywrods:"))
    assert (
        "cfg.yaml:7: topics[0].keywrods: unknown key; did you mean \"keywords\"? (in topic 'moe')"
        in out
    )


# ---------------------------------------------------------------------------- item 11: sources


def test_a_source_removed_from_the_config_drops_out_of_status_and_metrics(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from fastapi.testclient import TestClient

    from newsletter.config import load_config
    from newsletter.store import Store
    from newsletter.web import create_app
    from tests.conftest import base_config, write_config

    data = base_config(db_url)
    data["web"] = {"secret_key": "a-test-secret-that-signs-links-0123456789"}
    broken = [
        {"name": "gone", "kind": "feed", "url": str(tmp_path / "no-such-feed.xml")},
        {"name": "kept-broken", "kind": "feed", "url": str(tmp_path / "missing-too.xml")},
    ]
    path = write_config(tmp_path, {**data, "sources": data["sources"] + broken})
    runner = CliRunner()
    assert runner.invoke(cli, ["--config", str(path), "db", "upgrade"]).exit_code == 0
    runner.invoke(cli, ["--config", str(path), "fetch"])
    before = json.loads(runner.invoke(cli, ["--config", str(path), "status", "--json"]).output)
    assert {s["source"] for s in before["failing_sources"]} == {"gone", "kept-broken"}

    # The operator removes 'gone' from the config; 'kept-broken' stays (and still fails).
    write_config(tmp_path, {**data, "sources": data["sources"] + broken[1:]})
    after = runner.invoke(cli, ["--config", str(path), "status", "--json"])
    assert after.exit_code == 0, after.output
    assert [s["source"] for s in json.loads(after.output)["failing_sources"]] == ["kept-broken"]
    text = " ".join(runner.invoke(cli, ["--config", str(path), "status"]).output.split())
    assert "source kept-broken failed 1 time in a row" in text
    assert "source gone failed" not in text  # (the fetch run's record still names it)

    config = load_config(path)
    store = Store(config.database_url)
    try:
        monkeypatch.setenv("NEWSLETTER_ADMIN_TOKEN", "an-admin-token-for-metrics-0123456789")
        with TestClient(create_app(config, store, None)) as client:
            auth = {"Authorization": "Bearer an-admin-token-for-metrics-0123456789"}
            metrics = client.get("/metrics", headers=auth).text
        assert 'newsletter_source_consecutive_failures{source="kept-broken"} 1.0' in metrics
        assert 'source="gone"' not in metrics
        # The history stays in the database: put 'gone' back and it is reported again.
        assert "gone" in {s.source for s in store.all_source_states()}
    finally:
        store.close()

    # A disabled source is not fetched either: its old failures raise no alert.
    disabled = [{**broken[1], "enabled": False}]
    write_config(tmp_path, {**data, "sources": data["sources"] + disabled})
    quiet = json.loads(runner.invoke(cli, ["--config", str(path), "status", "--json"]).output)
    assert quiet["failing_sources"] == []


# ---------------------------------------------------------------------------- the example config

EXAMPLE = Path(__file__).resolve().parent.parent / "config" / "newsletter.example.yaml"
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<dash>- )?(?P<key>[a-z_]+):(?:\s+(?P<value>.*))?$")


def settings_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key path the settings models accept: ``smtp.host``, ``sources[].enabled``..."""
    paths: set[str] = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        paths.add(path)
        pending: list[Any] = [field.annotation]
        while pending:
            kind = pending.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                paths |= settings_paths(kind, f"{path}.")
            elif typing.get_origin(kind) is list:
                for arg in typing.get_args(kind):
                    if isinstance(arg, type) and issubclass(arg, BaseModel):
                        paths |= settings_paths(arg, f"{path}[].")
            elif typing.get_origin(kind) in (typing.Union, types.UnionType):
                pending.extend(typing.get_args(kind))
    return paths


def example_paths(text: str) -> set[str]:
    """Key paths written in the example, commented-out ones included (``# dkim:`` blocks).

    A comment line that reads as a key (``#   selector: news2026``) counts once its ``# `` is
    removed; its indentation then places it like the YAML it would be uncommented.
    """
    paths: set[str] = set()
    stack: list[tuple[int, str]] = []  # (column, path) of the enclosing keys and list items
    for raw in text.splitlines():
        line = re.sub(r"^( *)# ?", r"\1", raw) if raw.lstrip().startswith("#") else raw
        m = _KEY_LINE.match(line)
        if m is None:
            continue
        col = len(m["indent"])
        if m["dash"]:  # a list item: its keys sit two columns right of the dash
            while stack and stack[-1][0] >= col:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            stack.append((col + 1, f"{parent}[]"))
            col += 2
        while stack and stack[-1][0] >= col:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        path = f"{parent}.{m['key']}" if parent else m["key"]
        paths.add(path)
        stack.append((col, path))
        value = (m["value"] or "").strip()
        if value.startswith("{"):  # a flow mapping: {cron: "...", timezone: UTC}
            paths |= {f"{path}.{k}" for k in re.findall(r"([a-z_]+):", value.split("#")[0])}
    return paths


def test_every_key_the_code_reads_is_in_the_example_config() -> None:
    from newsletter.config import Settings

    text = EXAMPLE.read_text(encoding="utf-8")
    written = example_paths(text)
    # list items written in flow style, "- {cron: ..., timezone: ...}", under schedule.fetch
    for m in re.finditer(r"^ *- \{(.*)\}", text, re.M):
        written |= {f"schedule.fetch[].{k}" for k in re.findall(r"([a-z_]+):", m[1])}
    missing = sorted(settings_paths(Settings) - written)
    assert missing == [], f"keys missing from {EXAMPLE.name}: {missing}"


def test_the_example_checker_sees_a_missing_key(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert "sources[].allow_private" in example_paths(text)
    assert "dkim.private_key_env" in example_paths(text)  # a commented-out section counts
    without = re.sub(r"^.*\bmax_per_hour:.*\n", "", text, flags=re.M)
    assert "inbound.max_per_hour" not in example_paths(without)


# ---------------------------------------------------------------------------- item 13: wording


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


# ---------------------------------------------------------------------------- item 12: demo, tour

ROOT = Path(__file__).resolve().parent.parent


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


def _tour_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tour = readme.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    block = tour.split("```sh", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_tour_names_no_topic_a_user_would_not_have(tmp_path: Path) -> None:
    import yaml

    from newsletter.config import parse_config

    example = (ROOT / "config" / "newsletter.example.yaml").read_text(encoding="utf-8")
    settings, _ = parse_config(example, "example.yaml")
    shipped = {t.name for t in settings.topics}
    commands = _tour_commands()
    for command in commands:
        for topic in re.findall(r"--topic (\S+)", command):
            assert topic not in shipped, f"the tour hard-codes topic {topic!r}: {command}"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert ". .venv/bin/activate" in readme and "pip install ." in readme

    # A user who renamed the topics runs the tour's 'subscribers add' with their own name.
    data = yaml.safe_load(example)
    data["topics"] = [{"name": "my-systems", "keywords": ["cache"]}]
    data["database"] = {"url": f"sqlite:///{tmp_path / 'n.db'}"}
    path = tmp_path / "newsletter.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    [add] = [c for c in commands if c.startswith("newsletter subscribers add")]
    args = shlex_split(add.replace("TOPIC", "my-systems"))[1:]
    run_cli(path, "db", "upgrade")
    assert "Added ada@example.org (my-systems)" in run_cli(path, *args)
    # Without --topic, the command lists the topics the config has.
    missing = CliRunner().invoke(
        cli, ["--config", str(path), "subscribers", "add", "b@example.org"]
    )
    assert "available: my-systems" in missing.output


def shlex_split(command: str) -> list[str]:
    import shlex

    return shlex.split(command)


def test_a_worker_chunk_carries_every_count_of_the_report() -> None:
    """Worker mode adds up its chunks' ``as_dict``: every count there must be in ``COUNTS``,
    or worker-mode reports read 0 for it (issue 19 item 7; ``resend_refused`` was missed)."""
    from newsletter.edition import SendReport

    part = SendReport()
    keys = [k for k, v in part.as_dict().items() if isinstance(v, int) and not isinstance(v, bool)]
    for n, key in enumerate(keys, start=1):
        setattr(part, key, n)
    total = SendReport()
    total.add_counts(part.as_dict())
    total.add_counts(part.as_dict())
    assert {k: getattr(total, k) for k in keys} == {k: 2 * n for n, k in enumerate(keys, 1)}
