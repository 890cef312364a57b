"""The topic language in YAML: a bad topic fails at load with its name and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from newsletter.config import parse_config
from newsletter.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

TOPICS = """\
topics:
  - name: other
    keywords: [GPU]
  - name: moe
    title: Mixture of experts
    keywords:
      - [MoE, mixture of experts]
      - router
    all: [inference]
    exclude: [[survey, literature review]]
    categories: [cs.LG, stat.ML, hep-th]
    authors: [Jürgen Müller]
    min_score: 1.5
    max_items: 5
"""


def problem(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "cfg.yaml")
    return str(info.value)


def test_the_whole_topic_language_parses() -> None:
    settings, _ = parse_config(TOPICS, "cfg.yaml")
    moe = settings.topic("moe")
    assert moe.exclude == [["survey", "literature review"]]
    assert moe.categories == ["cs.LG", "stat.ML", "hep-th"] and moe.min_score == 1.5


def test_the_example_config_topics_parse() -> None:
    text = (ROOT / "config" / "newsletter.example.yaml").read_text()
    settings, _ = parse_config(text, "newsletter.example.yaml")
    assert {t.name for t in settings.topics} >= {"llm-serving", "moe"}


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "categories: [cs.LG, stat.ML, hep-th]",
            "categories: [cs.LG, machine learning]",
            "cfg.yaml:11: topics[1].categories: 'machine learning' is not an arXiv category"
            " (write them like cs.LG, stat.ML or hep-th) (in topic 'moe')",
        ),
        (
            "      - router\n",
            "      - []\n",
            "cfg.yaml:6: topics[1].keywords: entry 2 ([]): an alias list must not be empty"
            " (in topic 'moe')",
        ),
        (
            "      - router\n",
            "      - '++'\n",
            "cfg.yaml:6: topics[1].keywords: entry 2 ('++'): '++' has no letters or digits to"
            " match (in topic 'moe')",
        ),
        (
            "      - router\n",
            "      - Mixture-of-Experts\n",
            "cfg.yaml:6: topics[1].keywords: entry 2 ('Mixture-of-Experts') matches the same words"
            " as entry 1; put aliases in one list (in topic 'moe')",
        ),
        (
            "    min_score: 1.5",
            "    min_score: -1",
            "cfg.yaml:13: topics[1].min_score: Input should be greater than or equal to 0"
            " (in topic 'moe')",
        ),
        (
            "    exclude: [[survey, literature review]]",
            "    exclude: [routers]",
            "cfg.yaml:10: topics[1].exclude: topic 'moe': 'router' is both wanted and excluded;"
            " remove one",
        ),
        (
            "    authors: [Jürgen Müller]",
            "    authors: ['--']",
            "cfg.yaml:12: topics[1].authors: '--' is not a name (in topic 'moe')",
        ),
        (
            "    max_items: 5",
            "    max_itmes: 5",
            "cfg.yaml:14: topics[1].max_itmes: unknown key",
        ),
    ],
)
def test_a_bad_topic_names_itself_and_its_line(old: str, new: str, expected: str) -> None:
    assert old in TOPICS
    msg = problem(TOPICS.replace(old, new))
    assert expected in msg, msg


def test_a_topic_with_only_all_is_allowed_but_one_with_nothing_is_not() -> None:
    parse_config("topics:\n  - name: a\n    all: [GPU]\n", "cfg.yaml")
    msg = problem("topics:\n  - name: a\n    exclude: [GPU]\n")
    assert "cfg.yaml:2: topics[0]: topic 'a' needs keywords, categories or authors" in msg
