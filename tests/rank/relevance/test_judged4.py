"""The fourth hand-judged set (judged4.yaml, papers4.yaml): its validity only.

No quality threshold here: the set was judged blind for issue 44 (topics in a reader's words) and
is there to be measured (``python -m tests.rank.relevance.evaluate --set judged4``), not passed.
These tests check that it stays well-formed: its papers, its topics (through the real config
validation), its grades and traps, that every topic is a vocabulary gap, and that the earlier
sets do not see its papers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from newsletter.config import TopicSettings
from newsletter.models import Paper
from tests.rank.relevance import evaluate as ev

SET = "judged4"
DATA: dict[str, Any] = ev.judged_data(SET)
GRADES = ev.load_grades(DATA, SET)
TRAPS: dict[str, dict[str, list[str]]] = DATA["traps"]
TOPICS = ev.load_topics(DATA, SET)
ROOT = Path(__file__).resolve().parents[3]

WORD = re.compile(r"[a-z0-9]+")
FUNCTION_WORDS = frozenset(
    {"a", "an", "the", "to", "of", "for", "from", "in", "on", "with", "and", "or", "be", "by"}
    | {"my", "me", "under", "how", "what", "it", "its", "their", "is", "are"}
)
"""Words of a keyword that say nothing about its topic ("right to be forgotten", "under the
hood"); every other word of every alias counts."""


@pytest.fixture(scope="module")
def pool() -> list[Paper]:
    return ev.load_pool(SET)


@pytest.fixture(scope="module")
def by_key(pool: list[Paper]) -> dict[str, Paper]:
    return {p.key: p for p in pool}


def written(path: Path) -> list[dict[str, Any]]:
    papers: list[dict[str, Any]] = yaml.safe_load(path.read_text())["papers"]
    return papers


def keyword_words(topic: TopicSettings) -> set[str]:
    words: set[str] = set()
    for entry in topic.keywords:
        for alias in [entry] if isinstance(entry, str) else entry:
            words |= set(WORD.findall(alias.lower()))
    return words - FUNCTION_WORDS


def shared_words(topic: TopicSettings, paper: Paper) -> set[str]:
    """Lowercase words the paper's title and abstract share with the topic's keywords."""
    return keyword_words(topic) & set(WORD.findall(f"{paper.title} {paper.abstract}".lower()))


# ---------------------------------------------------------------------------- the papers


def test_the_pool_is_the_third_sets_pool_plus_the_papers_written_for_this_set(
    pool: list[Paper],
) -> None:
    third = ev.load_pool("judged3")
    fourth = written(ev.PAPERS4_FILE)
    assert len(pool) == len(third) + len(fourth) >= 360
    assert [p.key for p in pool[: len(third)]] == [p.key for p in third]
    assert len({p.key for p in pool}) == len({p.id for p in pool}) == len(pool)
    # The earlier sets never see them, so their numbers do not move.
    assert not {p["key"] for p in fourth} & {p.key for p in third}
    assert [p.key for p in ev.load_pool("judged2")] == [p.key for p in ev.load_pool()]
    assert ev.SETS["judged3"][1] == (ev.PAPERS_FILE, ev.PAPERS3_FILE)


def test_the_written_papers_follow_papers3_yaml() -> None:
    earlier = max(int(p["key"].split(".")[1]) for p in written(ev.PAPERS3_FILE))
    papers = written(ev.PAPERS4_FILE)
    assert 70 <= len(papers) <= 90
    numbers = [int(p["key"].split(".")[1]) for p in papers]
    assert numbers == list(range(earlier + 1, earlier + 1 + len(papers)))
    for p in papers:
        ev.check_written_paper(p, words=(120, 200))
        assert not re.search(r"\w- \w", p["abstract"]), p["key"]  # no line broken at a hyphen
    assert len({p["title"] for p in papers}) == len(papers)


# ---------------------------------------------------------------------------- the topics


def earlier_topics() -> tuple[set[str], set[str]]:
    """Names and titles of the topics of the earlier sets and of config/demo.yaml."""
    names: set[str] = set()
    titles: set[str] = set()
    paths = (
        ev.HERE / "judged.yaml",
        ev.JUDGED_FILE,
        ev.JUDGED3_FILE,
        ROOT / "config" / "demo.yaml",
    )
    for path in paths:
        for t in yaml.safe_load(path.read_text())["topics"]:
            names.add(t["name"])
            titles.add(str(t.get("title", t["name"])).lower())
    return names, titles


def test_every_topic_parses_is_new_and_is_written_like_a_readers() -> None:
    names = [t.name for t in TOPICS]
    assert len(names) == 9 and len(set(names)) == len(names)
    assert set(GRADES) == set(names) == set(TRAPS)
    old_names, old_titles = earlier_topics()
    assert not set(names) & old_names
    for t in TOPICS:
        assert t.title and t.title.lower() not in old_titles, t.name
        assert 3 <= len(t.keywords) <= 6, t.name
        assert not (t.all or t.exclude or t.authors or t.like or t.categories), t.name


# ---------------------------------------------------------------------------- the grades


def test_grades_are_one_or_two() -> None:
    for topic, levels in DATA["judgments"].items():
        assert set(levels) <= {1, 2}, topic
        for keys in levels.values():
            assert len(set(keys)) == len(keys), topic


def test_every_judged_key_is_in_the_pool(by_key: dict[str, Paper]) -> None:
    ev.check_judged_keys_in_pool(GRADES, TRAPS, by_key, min_top=5, distinct_traps=True)


def test_every_topic_has_grade_one_papers_and_traps_consistent_with_their_grades(
    by_key: dict[str, Paper],
) -> None:
    for topic, kinds in TRAPS.items():
        assert 1 in GRADES[topic].values(), topic
        ev.check_traps(topic, kinds, GRADES[topic], by_key)


def test_every_topic_is_a_vocabulary_gap(by_key: dict[str, Paper]) -> None:
    for t in TOPICS:
        top = [key for key, grade in GRADES[t.name].items() if grade == 2]
        silent = {key for key in top if not shared_words(t, by_key[key])}
        assert len(top) >= 5 and 2 * len(silent) >= len(top), (t.name, len(silent), len(top))
        # `vocabulary` names exactly the grade-2 papers that share no word with the keywords.
        assert set(TRAPS[t.name]["vocabulary"]) == silent, t.name


def test_every_topic_has_traps_that_use_its_own_words(by_key: dict[str, Paper]) -> None:
    # Near-misses and generic words: the topic's words for something else (some only inflected,
    # "leaks", "weathering the storm", which plain word matching does not count).
    for t in TOPICS:
        kinds = TRAPS[t.name]
        traps = kinds["near-miss"] + kinds.get("generic-word", [])
        assert sum(bool(shared_words(t, by_key[key])) for key in traps) >= 3, t.name


def test_the_set_can_be_chosen_on_the_command_line() -> None:
    assert ev.SETS[SET] == (ev.JUDGED4_FILE, (ev.PAPERS_FILE, ev.PAPERS3_FILE, ev.PAPERS4_FILE))
    assert ev.SETS[ev.DEFAULT_SET][0] == ev.JUDGED_FILE
