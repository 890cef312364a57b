"""Config errors name the file, the line and the key path, one test per kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from newsletter.config import load_config, parse_config
from newsletter.errors import ConfigError

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


def problem(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "cfg.yaml")
    return str(info.value)


def test_good_config_parses() -> None:
    settings, _ = parse_config(GOOD, "cfg.yaml")
    assert settings.topic("moe").keywords == [["MoE", "mixture of experts"]]
    assert settings.subscribers[0].email == "ada@example.org"
    assert settings.smtp.pool_size == 20 and settings.smtp.pool_start == 4  # defaults filled in


def test_unknown_key_names_file_line_and_path() -> None:
    msg = problem(GOOD.replace("  url: sqlite", "  ur1: sqlite"))
    assert msg.startswith("cfg.yaml:2: database.ur1: unknown key")


def test_unknown_nested_key_in_a_list() -> None:
    msg = problem(GOOD.replace("    keywords:", "    keywrods:"))
    assert "cfg.yaml:7: topics[0].keywrods: unknown key" in msg


def test_bad_value_type() -> None:
    msg = problem(GOOD + "smtp:\n  port: lots\n")
    assert "cfg.yaml:12: smtp.port:" in msg and "integer" in msg


def test_out_of_range_value() -> None:
    msg = problem(GOOD + "smtp:\n  port: 70000\n")
    assert "cfg.yaml:12: smtp.port:" in msg and "65535" in msg


def test_bad_choice() -> None:
    msg = problem(GOOD + "smtp:\n  security: ssl\n")
    assert "cfg.yaml:12: smtp.security:" in msg and "starttls" in msg


def test_invalid_address() -> None:
    msg = problem(GOOD.replace("email: ada@example.org", "email: not-an-address"))
    assert "cfg.yaml:9: subscribers[0].email:" in msg and "not a valid email address" in msg


def test_header_injecting_address_is_refused() -> None:
    msg = problem(GOOD.replace("email: ada@example.org", 'email: "a@b.c\\r\\nBcc: x@y.z"'))
    assert "subscribers[0].email" in msg and "line breaks" in msg


def test_unknown_topic_for_a_subscriber() -> None:
    msg = problem(GOOD.replace("topics: [moe]", "topics: [moe, llm]"))
    assert "cfg.yaml:10: subscribers[0].topics[1]: unknown topic 'llm' (topics: moe)" in msg


def test_duplicate_key() -> None:
    msg = problem(GOOD.replace("database:\n", "database:\n  url: sqlite:///a.db\n"))
    assert "cfg.yaml:3: database.url: duplicate key (first given on line 2)" in msg


def test_not_yaml() -> None:
    msg = problem("database:\n  url: [unclosed\n")
    assert msg.startswith("cfg.yaml:2: not valid YAML")  # the line with the unclosed [


def test_missing_required_key() -> None:
    msg = problem(GOOD.replace("  - name: moe\n", "  - title: MoE\n"))
    assert "cfg.yaml:6: topics[0].name: required key is missing" in msg


def test_bad_timezone() -> None:
    msg = problem(GOOD + "schedule:\n  timezone: Mars/Olympus\n")
    assert "cfg.yaml:12: schedule.timezone: unknown timezone 'Mars/Olympus'" in msg


def test_topic_without_rules() -> None:
    msg = problem(GOOD.replace("topics:\n", "topics:\n  - name: empty\n"))
    assert "topics[0]: topic 'empty' needs keywords, categories or authors" in msg


def test_bad_subject_template() -> None:
    msg = problem(GOOD + "digest:\n  subject: '{count} papers about {subject}'\n")
    assert "cfg.yaml:12: digest.subject: bad subject template" in msg


def test_several_problems_are_all_reported() -> None:
    msg = problem(GOOD + "smtp:\n  port: x\n  security: ssl\n")
    assert "2 problems" in msg and "smtp.port" in msg and "smtp.security" in msg


def test_missing_file_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert "nope.yaml: no such config file" in str(info.value) and "newsletter init" in str(
        info.value
    )


def test_paths_resolve_against_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "n.yaml"
    path.write_text(GOOD + "sources:\n  - {name: a, kind: arxiv_rss, url: feeds/a.xml}\n")
    config = load_config(path)
    assert config.database_url == f"sqlite:///{tmp_path / 'sub' / 'var' / 'n.db'}"
    assert config.resolve("feeds/a.xml") == str(tmp_path / "sub" / "feeds" / "a.xml")
    assert config.resolve("https://rss.arxiv.org/rss/cs.LG") == "https://rss.arxiv.org/rss/cs.LG"


def test_environment_overrides_database_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "n.yaml"
    path.write_text(GOOD)
    monkeypatch.setenv("NEWSLETTER_DATABASE_URL", "postgresql+psycopg://u@db/n")
    assert load_config(path).database_url == "postgresql+psycopg://u@db/n"


def test_shipped_example_and_demo_configs_are_valid() -> None:
    root = Path(__file__).resolve().parents[2] / "config"
    example = load_config(root / "newsletter.example.yaml")
    assert {s.kind for s in example.settings.sources} >= {"arxiv_rss", "hf_daily"}
    demo = load_config(root / "demo.yaml")
    assert len(demo.settings.subscribers) == 3
    assert len({tuple(s.topics) for s in demo.settings.subscribers}) == 3


def test_the_removed_crash_duplicates_key_says_what_replaced_it(tmp_path: Path) -> None:
    """``delivery.crash_duplicates`` (the final-dot gate) is gone: a config that still sets it
    gets one line naming the file, the line and what to do, not an unknown-key error."""
    path = tmp_path / "old.yaml"
    path.write_text("delivery:\n  crash_duplicates: one\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert f"{path}:2" in message and "crash_duplicates" in message, message
    assert "one duplicate per open connection" in message and "delete this line" in message
