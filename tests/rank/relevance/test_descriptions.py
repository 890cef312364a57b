"""Issue 45: every judged topic has a one-sentence, blind-written description for the bench.

``descriptions.yaml`` maps each judged set (``judged2``, ``judged3``, ``judged4``) to
``{topic name: sentence}``. The sentences were written from the topics' names and titles only
(see the file's header). These tests keep the file in step with the judged sets: every topic of
each set has a sentence and there are none for topics that do not exist, and each sentence is
what a reader could type into the "describe your interest" box: one line of plain text, at most
200 characters, no markup and no links. A set whose judged file is not in the tree is skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).parent
DESCRIPTIONS = HERE / "descriptions.yaml"
SETS = ("judged2", "judged3", "judged4")
MAX_CHARS = 200


def _descriptions() -> dict[str, dict[str, str]]:
    """The parsed ``descriptions.yaml``."""
    data = yaml.safe_load(DESCRIPTIONS.read_text(encoding="utf-8"))
    assert isinstance(data, dict), "descriptions.yaml must map judged sets to topics"
    return data


def _topic_names(judged: Path) -> list[str]:
    """Names of the topics of one judged file: the ``name`` of each item of its top-level lists."""
    data: Any = yaml.safe_load(judged.read_text(encoding="utf-8"))
    names = [
        item["name"]
        for value in (data.values() if isinstance(data, dict) else [data])
        if isinstance(value, list)
        for item in value
        if isinstance(item, dict) and "name" in item and "title" in item
    ]
    assert names, f"no topics found in {judged.name}"
    return names


@pytest.mark.parametrize("judged_set", SETS)
def test_every_topic_has_a_sentence(judged_set: str) -> None:
    """The set's topics and its described topics are the same names, each with a sentence."""
    judged = HERE / f"{judged_set}.yaml"
    if not judged.exists():
        pytest.skip(f"{judged.name} is not in the tree")
    described = _descriptions().get(judged_set)
    assert isinstance(described, dict), f"descriptions.yaml has no {judged_set} section"
    names = _topic_names(judged)
    assert sorted(described) == sorted(names)
    for name in names:
        sentence = described[name]
        assert isinstance(sentence, str) and sentence.strip(), f"{judged_set}/{name} is empty"


def _all_sentences() -> list[tuple[str, str]]:
    """``(set/topic, sentence)`` for every sentence in the file."""
    return [
        (f"{judged_set}/{name}", sentence)
        for judged_set, topics in _descriptions().items()
        for name, sentence in (topics or {}).items()
    ]


@pytest.mark.parametrize(
    ("topic", "sentence"), _all_sentences(), ids=[topic for topic, _ in _all_sentences()]
)
def test_sentence_is_one_short_plain_line(topic: str, sentence: str) -> None:
    """One line of at most 200 characters, without HTML or links."""
    assert isinstance(sentence, str), topic
    assert len(sentence) <= MAX_CHARS, f"{topic}: {len(sentence)} characters"
    assert "\n" not in sentence and "\r" not in sentence, topic
    assert "<" not in sentence, topic
    assert "http" not in sentence.lower(), topic


def test_file_holds_only_known_sets() -> None:
    """No section for a judged set the bench does not know (a typo would go unchecked)."""
    assert set(_descriptions()) <= set(SETS)
