"""Semantic and hybrid ranking on the judged sets, beside the lexical ranker and plain BM25.

    python -m tests.rank.relevance.hybrid                  # judged2.yaml
    python -m tests.rank.relevance.hybrid --set judged3    # another judged set
    python -m tests.rank.relevance.hybrid --json

Runs, on the same pool and topics:

* ``lexical``: the project's ranker without vectors (what runs without the ``semantic`` extra);
* ``hybrid``: the same ranker given the papers' and topics' vectors (what runs with it);
* ``semantic``: every paper that passes the topic's filters, by cosine similarity alone;
* ``bm25``: plain BM25 over title and abstract (tests/rank/relevance/evaluate.py).

The vectors come from the default model through the project's own :class:`Embedder` (no
store): each text is embedded once per process.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from newsletter.config import TopicSettings
from newsletter.models import Paper
from newsletter.rank import Ranker
from newsletter.semantic.model import DEFAULT_MODEL, Embedder, ModelUnavailable, locate
from newsletter.semantic.vectors import (
    Semantic,
    keyword_texts,
    paper_text,
    topic_text,
)
from tests.rank.relevance import evaluate as ev

CACHE = Path(__file__).resolve().parents[3] / ".cache" / "models"


@functools.cache
def embedder() -> Embedder | None:
    """The default model, or None when it cannot run here (the ``semantic`` extra or model
    missing); the reason is :func:`unavailable`."""
    try:
        return Embedder(locate(DEFAULT_MODEL, CACHE))
    except ModelUnavailable:
        return None


def unavailable() -> str | None:
    try:
        locate(DEFAULT_MODEL, CACHE)
    except ModelUnavailable as e:
        return str(e)
    return None


_VECTORS: dict[str, np.ndarray] = {}


def vectors(texts: Sequence[str]) -> np.ndarray:
    model = embedder()
    assert model is not None, unavailable()
    todo = [t for t in dict.fromkeys(texts) if t not in _VECTORS]
    if todo:
        for text, vec in zip(todo, model.embed(todo), strict=True):
            _VECTORS[text] = vec
    return np.stack([_VECTORS[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)


def semantic_for(
    papers: Sequence[Paper], topics: Sequence[TopicSettings], examples: Sequence[Paper] = ()
) -> Semantic:
    """What :class:`~newsletter.semantic.vectors.VectorSource` gives the ranker, without a store."""
    extra = list({p.key: p for p in examples}.values())
    return Semantic(
        model=DEFAULT_MODEL,
        papers=vectors([paper_text(p) for p in papers]),
        topics=vectors([topic_text(t) for t in topics]),
        examples={
            p.key: v for p, v in zip(extra, vectors([paper_text(p) for p in extra]), strict=True)
        },
        keywords=tuple(
            dict(zip(kw, vectors(list(kw.values())), strict=True))
            for kw in (keyword_texts(t) for t in topics)
        ),
    )


def hybrid_ranker(
    topics: Sequence[TopicSettings], pool: Sequence[Paper], examples: Sequence[Paper] = ()
) -> Ranker:
    return Ranker(
        topics, pool, ev.NOW, examples=examples, semantic=semantic_for(pool, topics, examples)
    )


def rankings(ranker: Ranker) -> dict[str, list[str]]:
    return {name: [i.paper.key for i in items] for name, items in ranker.ranked.items()}


def semantic_rankings(
    topics: Sequence[TopicSettings], pool: Sequence[Paper]
) -> dict[str, list[str]]:
    """Similarity alone: every paper passing a topic's filters, by the cosine of its vector
    with the vector of the topic's text (title and keywords, :func:`topic_text`); no keyword
    part, no candidates, no feedback."""
    ranker = Ranker(topics, pool, ev.NOW)
    keys = [p.key for p in ranker.index.papers]
    similarity = (
        vectors([topic_text(t) for t in topics])
        @ vectors([paper_text(p) for p in ranker.index.papers]).T
    )
    out = {}
    for i, t in enumerate(topics):
        order = np.lexsort((keys, -similarity[i]))
        out[t.name] = [keys[j] for j in order if ranker._passes[i][j]]
    return out


def load_set(name: str) -> tuple[list[TopicSettings], dict[str, ev.Grades], list[Paper]]:
    data = ev.judged_data(name)
    return ev.load_topics(data, name), ev.load_grades(data, name), ev.load_pool(name)


def evaluate(name: str = "judged2") -> dict[str, Any]:
    topics, grades, pool = load_set(name)
    runs = {
        "lexical": rankings(Ranker(topics, pool, ev.NOW)),
        "hybrid": rankings(hybrid_ranker(topics, pool)),
        "semantic": semantic_rankings(topics, pool),
        "bm25": ev.bm25_rankings(topics, pool),
    }
    report: dict[str, Any] = {"set": name, "papers": len(pool), "topics": len(topics), "runs": {}}
    for run, ranked in runs.items():
        results = [ev.measure(t.name, ranked[t.name], grades[t.name]) for t in topics]
        report["runs"][run] = {
            "topics": {r.topic: round(r.ndcg10, 3) for r in results},
            "mean": ev.means(results),
        }
    return report


def table(report: dict[str, Any]) -> str:
    runs = list(report["runs"])
    lines = [
        f"{report['papers']} papers, {report['topics']} topics (tests/rank/relevance/{report['set']}.yaml), nDCG@10",
        "",
        f"{'topic':26}" + "".join(f"{r:>10}" for r in runs),
    ]
    for topic in report["runs"]["lexical"]["topics"]:
        lines.append(
            f"{topic:26}" + "".join(f"{report['runs'][r]['topics'][topic]:10.3f}" for r in runs)
        )
    lines.append(
        f"{'mean nDCG@10':26}"
        + "".join(f"{report['runs'][r]['mean']['ndcg10']:10.3f}" for r in runs)
    )
    lines.append(
        f"{'mean P@10':26}" + "".join(f"{report['runs'][r]['mean']['p10']:10.2f}" for r in runs)
    )
    lines.append(
        f"{'off-topic in top 5':26}"
        + "".join(f"{report['runs'][r]['mean']['off5']:10.0f}" for r in runs)
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--set", default="judged2", help="judged set: judged2 (default), judged3, judged4"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    problem = unavailable()
    if problem:
        raise SystemExit(problem)
    report = evaluate(args.set)
    print(json.dumps(report, indent=2) if args.json else table(report))


if __name__ == "__main__":
    main()
