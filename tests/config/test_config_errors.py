"""Config mistakes explained where ``newsletter`` loads the file: a source URL's scheme, the
line of a YAML error, cron weekdays, and the closest valid key for an unknown one."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from tests.config.test_config import GOOD


def config_error(tmp_path: Path, text: str) -> str:
    """What ``newsletter status`` prints for a config holding ``text`` (it must fail)."""
    path = tmp_path / "cfg.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli, ["--config", str(path), "status"])
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


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
