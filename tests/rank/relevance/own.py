"""Own topics on the judged sets: a reader's sentence against the operator's keyword topic.

    python -m tests.rank.relevance.own                  # every judged set
    python -m tests.rank.relevance.own --set judged4

For each topic of a judged set, a one-sentence description written blind (by someone who saw
only the topic's name and title: descriptions.yaml) is ranked as a reader's own topic would be
(:func:`newsletter.subscribe.own_topics.own_topic_settings`: the sentence's vector is its query, its
content words its keywords), beside the keyword topic, with semantic ranking on. Then again with
two example papers ("papers like ..."): the topic's first two grade-2 papers by id, which are
taken out of the day's pool for both rankings (a reader names papers they have already read).
The ratio is the mean nDCG@10 of the sentences over that of the keyword topics.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from newsletter.config import TopicSettings
from newsletter.models import OWN_PREFIX, OwnTopic
from newsletter.rank import Ranker
from newsletter.subscribe.own_topics import own_topic_settings
from tests.rank.relevance import evaluate as ev
from tests.rank.relevance import hybrid

DESCRIPTIONS = Path(__file__).resolve().parent / "descriptions.yaml"
SETS = ("judged2", "judged3", "judged4")
EXAMPLES = 2


def sentence_topic(topic: TopicSettings, sentence: str, like: Sequence[str] = ()) -> TopicSettings:
    own = OwnTopic(
        id=0,
        subscriber_id=0,
        position=1,
        text=sentence,
        text_hash="",
        examples=tuple(like),
        created=ev.NOW,
        updated=ev.NOW,
    )
    settings = own_topic_settings(own)
    return settings.model_copy(update={"name": f"{OWN_PREFIX}{topic.name}"})


def _ndcg(
    topics: list[TopicSettings],
    pool: list[Any],
    grades: dict[str, ev.Grades],
    examples: list[Any],
    names: dict[str, str],
) -> dict[str, float]:
    ranker = Ranker(
        topics,
        pool,
        ev.NOW,
        examples=examples,
        semantic=hybrid.semantic_for(pool, topics, examples),
    )
    ranked = hybrid.rankings(ranker)
    return {names[t.name]: ev.ndcg(ranked[t.name], grades[names[t.name]]) for t in topics}


def evaluate(name: str) -> dict[str, Any]:
    topics, grades, pool = hybrid.load_set(name)
    sentences = yaml.safe_load(DESCRIPTIONS.read_text())[name]
    same = {t.name: t.name for t in topics}
    own = [sentence_topic(t, sentences[t.name]) for t in topics]
    words = _ndcg(topics, pool, grades, [], same)
    plain = _ndcg(own, pool, grades, [], {o.name: t.name for o, t in zip(own, topics, strict=True)})
    with_examples: dict[str, float] = {}
    words_without: dict[str, float] = {}
    for t in topics:
        liked = sorted(k for k, g in grades[t.name].items() if g == 2)[:EXAMPLES]
        day = [p for p in pool if p.key not in liked]
        read = [p for p in pool if p.key in liked]
        rest = {k: g for k, g in grades[t.name].items() if k not in liked}
        o = sentence_topic(t, sentences[t.name], liked)
        with_examples.update(_ndcg([o], day, {t.name: rest}, read, {o.name: t.name}))
        words_without.update(_ndcg([t], day, {t.name: rest}, [], same))
    mean = lambda d: sum(d.values()) / len(d)  # noqa: E731
    return {
        "set": name,
        "topics": {
            t.name: (words[t.name], plain[t.name], words_without[t.name], with_examples[t.name])
            for t in topics
        },
        "keywords": mean(words),
        "sentence": mean(plain),
        "keywords_without_examples": mean(words_without),
        "sentence_with_examples": mean(with_examples),
        "ratio": mean(plain) / mean(words),
        "ratio_with_examples": mean(with_examples) / mean(words_without),
    }


def table(report: dict[str, Any]) -> str:
    lines = [
        f"{report['set']}: nDCG@10 of the keyword topic and of the reader's sentence (semantic ranking)",
        f"{'topic':26}{'keywords':>10}{'sentence':>10}{'kw, -2':>10}{'+2 like':>10}",
    ]
    for topic, (w, s, w2, s2) in report["topics"].items():
        lines.append(f"{topic:26}{w:10.3f}{s:10.3f}{w2:10.3f}{s2:10.3f}")
    lines.append(
        f"{'mean':26}{report['keywords']:10.3f}{report['sentence']:10.3f}"
        f"{report['keywords_without_examples']:10.3f}{report['sentence_with_examples']:10.3f}"
    )
    lines.append(
        f"ratio {report['ratio']:.2f} (target 0.85), with two examples "
        f"{report['ratio_with_examples']:.2f} (target 0.95)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--set", choices=SETS, action="append")
    args = parser.parse_args(argv)
    problem = hybrid.unavailable()
    if problem:
        raise SystemExit(problem)
    for name in args.set or SETS:
        print(table(evaluate(name)))
        print()


if __name__ == "__main__":
    main()
