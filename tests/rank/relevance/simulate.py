"""A two-day feedback simulation on the second judged set: does "more/less like this" help?

    python -m tests.rank.relevance.simulate          # a table per topic and the means
    python -m tests.rank.relevance.simulate --json

Day one is every other paper of the pool (by key), day two the rest. For each topic, one reader
follows only that topic: they get day one's digest (the topic's top 10 from the real ranker),
vote "more like this" on every grade-2 paper in it and "less like this" on every grade-0 paper
(grade 1: no vote), as the judgments say a reader would. Day two is ranked twice by the real
:class:`newsletter.rank.Ranker`, with day one's papers as examples: once for a reader without
votes (the shared topic list) and once with their votes (``Ranker.sections(votes=...)``). The
gain is day two's nDCG@10 with votes minus without.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from newsletter.models import Paper
from newsletter.rank import Ranker
from newsletter.rank.profiles import Preference
from tests.rank.relevance.evaluate import (
    NOW,
    K,
    judged_data,
    load_grades,
    load_pool,
    load_topics,
    ndcg,
    precision,
)


@dataclass(frozen=True)
class DayTwo:
    topic: str
    votes_more: int
    votes_less: int
    ndcg_without: float
    ndcg_with: float
    p10_without: float
    p10_with: float

    @property
    def gain(self) -> float:
        return self.ndcg_with - self.ndcg_without


def split(pool: Sequence[Paper]) -> tuple[list[Paper], list[Paper]]:
    ordered = sorted(pool, key=lambda p: p.key)
    return ordered[0::2], ordered[1::2]


def simulate(set_name: str = "judged2", *, semantic: bool = False) -> list[DayTwo]:
    """The simulation on a judged set; ``semantic``: with the papers' and topics' vectors
    (semantic ranking, profiles over embeddings), else lexical (tf-idf profiles)."""
    data = judged_data(set_name)
    topics = load_topics(data, set_name)
    grades = load_grades(data, set_name)
    one, two = split(load_pool(set_name))

    def ranker(papers: Sequence[Paper], examples: Sequence[Paper] = ()) -> Ranker:
        if not semantic:
            return Ranker(topics, papers, NOW, examples=examples)
        from tests.rank.relevance.hybrid import semantic_for

        vectors = semantic_for(papers, topics, examples)
        return Ranker(topics, papers, NOW, examples=examples, semantic=vectors)

    first = ranker(one)
    second = ranker(two, one)
    out = []
    today = {p.key for p in two}
    for topic in topics:
        g = grades[topic.name]
        g2 = {k: v for k, v in g.items() if k in today}  # day two's ideal: day two's papers
        shown = [i.paper.key for i in first.ranked[topic.name][:K]]
        votes = [Preference(k, 1 if g.get(k, 0) == 2 else -1) for k in shown if g.get(k, 0) != 1]
        without = [i.paper.key for s in second.sections([topic.name], max_items=K) for i in s.items]
        with_votes = [
            i.paper.key
            for s in second.sections([topic.name], max_items=K, votes=votes)
            for i in s.items
        ]
        out.append(
            DayTwo(
                topic.name,
                sum(v.value > 0 for v in votes),
                sum(v.value < 0 for v in votes),
                ndcg(without, g2),
                ndcg(with_votes, g2),
                precision(without, g2),
                precision(with_votes, g2),
            )
        )
    return out


def table(rows: Sequence[DayTwo]) -> str:
    lines = [
        f"{'topic':24} {'more':>4} {'less':>4}  {'nDCG@10 no votes':>16} {'with votes':>10} "
        f"{'gain':>6}  {'P@10 no votes':>13} {'with':>5}"
    ]
    for r in rows:
        lines.append(
            f"{r.topic:24} {r.votes_more:4} {r.votes_less:4}  {r.ndcg_without:16.3f} "
            f"{r.ndcg_with:10.3f} {r.gain:+6.3f}  {r.p10_without:13.2f} {r.p10_with:5.2f}"
        )
    n = len(rows)
    lines.append(
        f"{'mean':24} {'':4} {'':4}  {sum(r.ndcg_without for r in rows) / n:16.3f} "
        f"{sum(r.ndcg_with for r in rows) / n:10.3f} {sum(r.gain for r in rows) / n:+6.3f}  "
        f"{sum(r.p10_without for r in rows) / n:13.2f} {sum(r.p10_with for r in rows) / n:5.2f}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print machine-readable results")
    parser.add_argument(
        "--set", default="judged2", help="judged set: judged2 (default), judged3, judged4"
    )
    parser.add_argument(
        "--semantic", action="store_true", help="rank with vectors (needs the semantic extra)"
    )
    args = parser.parse_args(argv)
    rows = simulate(args.set, semantic=args.semantic)
    if args.json:
        print(json.dumps([{**asdict(r), "gain": r.gain} for r in rows], indent=2))
    else:
        print(table(rows))


if __name__ == "__main__":
    main()
