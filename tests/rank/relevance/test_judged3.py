"""The third hand-judged set (judged3.yaml, papers3.yaml): its validity only.

No quality threshold here: the set was judged blind for issue 28 (semantic ranking) and is there
to be measured (``python -m tests.rank.relevance.evaluate --set judged3``), not passed. These tests check
that it stays well-formed: its papers, its topics (through the real config validation), its grades
and its traps, and that the earlier sets do not see its papers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from newsletter.models import Paper
from tests.rank.relevance import evaluate as ev

SET = "judged3"
DATA: dict[str, Any] = ev.judged_data(SET)
GRADES = ev.load_grades(DATA, SET)
TRAPS: dict[str, dict[str, list[str]]] = DATA["traps"]
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def pool() -> list[Paper]:
    return ev.load_pool(SET)


@pytest.fixture(scope="module")
def by_key(pool: list[Paper]) -> dict[str, Paper]:
    return {p.key: p for p in pool}


def written(path: Path) -> list[dict[str, Any]]:
    papers: list[dict[str, Any]] = yaml.safe_load(path.read_text())["papers"]
    return papers


# ---------------------------------------------------------------------------- the papers


def test_the_pool_is_the_second_sets_pool_plus_the_papers_written_for_this_set(
    pool: list[Paper],
) -> None:
    second = ev.load_pool()
    third = written(ev.PAPERS3_FILE)
    assert len(pool) == len(second) + len(third)
    assert [p.key for p in pool[: len(second)]] == [p.key for p in second]
    assert len({p.key for p in pool}) == len({p.id for p in pool}) == len(pool)
    # judged.yaml and judged2.yaml never see them, so their numbers do not move.
    assert not {p["key"] for p in third} & {p.key for p in second}
    assert ev.load_pool("judged2") == second


def test_the_written_papers_follow_papers_yaml() -> None:
    earlier = max(int(p["key"].split(".")[1]) for p in written(ev.PAPERS_FILE))
    papers = written(ev.PAPERS3_FILE)
    assert 1 <= len(papers) <= 60
    numbers = [int(p["key"].split(".")[1]) for p in papers]
    assert numbers == list(range(earlier + 1, earlier + 1 + len(papers)))
    for p in papers:
        ev.check_written_paper(p, words=(120, 200))
        assert not re.search(r"\w- \w", p["abstract"]), p["key"]  # no line broken at a hyphen


# ---------------------------------------------------------------------------- the topics


def earlier_topics() -> tuple[set[str], set[str]]:
    """Names and titles of the topics of judged.yaml, judged2.yaml and config/demo.yaml."""
    names: set[str] = set()
    titles: set[str] = set()
    for path in (ev.HERE / "judged.yaml", ev.JUDGED_FILE, ROOT / "config" / "demo.yaml"):
        for t in yaml.safe_load(path.read_text())["topics"]:
            names.add(t["name"])
            titles.add(str(t.get("title", t["name"])).lower())
    return names, titles


def test_every_topic_parses_is_new_and_is_written_like_an_operators() -> None:
    topics = ev.load_topics(DATA, SET)
    names = [t.name for t in topics]
    assert len(names) == 8 and len(set(names)) == len(names)
    assert set(GRADES) == set(names) == set(TRAPS)
    old_names, old_titles = earlier_topics()
    assert not set(names) & old_names
    for t in topics:
        assert t.title and t.title.lower() not in old_titles, t.name
        assert 3 <= len(t.keywords) <= 6, t.name
        assert not (t.all or t.exclude or t.authors or t.like), t.name  # keywords and a title only


# ---------------------------------------------------------------------------- the grades


def test_every_judged_key_is_in_the_pool(by_key: dict[str, Paper]) -> None:
    ev.check_judged_keys_in_pool(GRADES, TRAPS, by_key, min_top=4, distinct_traps=True)


def test_every_topic_has_traps_consistent_with_their_grades(by_key: dict[str, Paper]) -> None:
    for topic, kinds in TRAPS.items():
        ev.check_traps(topic, kinds, GRADES[topic], by_key)


def test_at_least_four_topics_are_vocabulary_gaps() -> None:
    gaps = [
        topic
        for topic, kinds in TRAPS.items()
        if sum(GRADES[topic].get(key, 0) == 2 for key in kinds.get("vocabulary", [])) >= 2
    ]
    assert len(gaps) >= 4, gaps


def test_the_set_can_be_chosen_on_the_command_line() -> None:
    assert ev.SETS[SET] == (ev.JUDGED3_FILE, (ev.PAPERS_FILE, ev.PAPERS3_FILE))
    assert ev.SETS[ev.DEFAULT_SET][0] == ev.JUDGED_FILE
