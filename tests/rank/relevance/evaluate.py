"""Ranking quality on the second hand-judged set (judged2.yaml over the fixture and written papers).

    python -m tests.rank.relevance.evaluate                 # a table per topic and the means
    python -m tests.rank.relevance.evaluate --json          # the same, machine-readable
    python -m tests.rank.relevance.evaluate --set judged3   # the third set (judged3.yaml), same table
    python -m tests.rank.relevance.evaluate --set judged4   # the fourth set (judged4.yaml), same table

The pool is the 46 real feed-fixture papers (:func:`tests.rank.relevance.corpus.load_papers`) plus the
papers written for this set (papers.yaml); the third set (judged3.yaml, ``--set judged3``) also
sees the papers written for it (papers3.yaml), which the second set never does; the fourth
(judged4.yaml, ``--set judged4``) sees papers3.yaml and its own papers4.yaml as well. Topics go through
the real config validation and are ranked by the real :class:`newsletter.rank.Ranker`; a plain
BM25 over title and abstract is the baseline. Metrics, per topic and averaged over topics:

* nDCG@10 with graded gains ``2^g - 1`` and the ideal ranking built from every judged paper of the
  topic; a list shorter than 10 simply contributes nothing for the missing slots;
* P@10: papers with grade >= 1 among the first 10, missing slots counting as not relevant, and
  strict P@10 (grade 2 only); P@shown: the same precision over what was shown (at most 10; None
  when nothing was shown, and left out of the mean);
* off@5: papers with grade 0 among the first 5.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from newsletter.config import TopicSettings, parse_config
from newsletter.models import Paper
from newsletter.rank import Ranker
from tests.rank.relevance.corpus import FIRST_SEEN, NOW, load_papers

HERE = Path(__file__).resolve().parent
PAPERS_FILE = HERE / "papers.yaml"
JUDGED_FILE = HERE / "judged2.yaml"
PAPERS3_FILE = HERE / "papers3.yaml"
JUDGED3_FILE = HERE / "judged3.yaml"
PAPERS4_FILE = HERE / "papers4.yaml"
JUDGED4_FILE = HERE / "judged4.yaml"
DEFAULT_SET = "judged2"
SETS: dict[str, tuple[Path, tuple[Path, ...]]] = {
    "judged2": (JUDGED_FILE, (PAPERS_FILE,)),
    "judged3": (JUDGED3_FILE, (PAPERS_FILE, PAPERS3_FILE)),
    "judged4": (JUDGED4_FILE, (PAPERS_FILE, PAPERS3_FILE, PAPERS4_FILE)),
}
"""Set name -> (judgments file, written-paper files added to the fixture papers, in order)."""
K = 10
TOP_OFF = 5

Grades = dict[str, int]
"""Paper key -> grade (2, 1); keys not present are grade 0."""


# ---------------------------------------------------------------------------- the set


def written_papers(start_id: int, path: Path = PAPERS_FILE) -> list[Paper]:
    """The papers of ``path`` (papers.yaml), ids from ``start_id``; odd keys published Nov 16, even
    Nov 17."""
    data = yaml.safe_load(path.read_text())
    out = []
    for i, p in enumerate(data["papers"]):
        key = str(p["key"])
        day_before = int(key[-1]) % 2 == 1
        published = FIRST_SEEN.replace(hour=5) - timedelta(days=1 if day_before else 0)
        out.append(
            Paper(
                id=start_id + i,
                key=key,
                title=p["title"],
                abstract=p["abstract"],
                authors=tuple(p["authors"]),
                categories=tuple(p["categories"]),
                url=f"https://arxiv.org/abs/{key}",
                pdf_url=f"https://arxiv.org/pdf/{key}",
                code_url=None,
                version=1,
                published=published,
                first_seen=FIRST_SEEN,
                updated=FIRST_SEEN,
                sources=tuple(p["sources"]),
                upvotes=p["upvotes"],
                comments=p["comments"],
            )
        )
    return out


def load_pool(set_name: str = DEFAULT_SET) -> list[Paper]:
    """Fixture papers and the set's written papers, with unique ids and keys."""
    pool = load_papers()
    for path in SETS[set_name][1]:
        pool += written_papers(max(p.id for p in pool) + 1, path)
    keys = [p.key for p in pool]
    if len(set(keys)) != len(keys):
        raise ValueError(f"the written papers of {set_name} repeat a key or reuse a fixture's key")
    return pool


def judged_data(set_name: str = DEFAULT_SET) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(SETS[set_name][0].read_text())
    return data


def load_topics(
    data: Mapping[str, Any] | None = None, set_name: str = DEFAULT_SET
) -> list[TopicSettings]:
    """The set's topics, parsed by the real config validation."""
    data = data if data is not None else judged_data(set_name)
    source = str(SETS[set_name][0])
    settings, _ = parse_config(yaml.safe_dump({"topics": data["topics"]}), source)
    return settings.topics


def load_grades(
    data: Mapping[str, Any] | None = None, set_name: str = DEFAULT_SET
) -> dict[str, Grades]:
    data = data if data is not None else judged_data(set_name)
    out: dict[str, Grades] = {}
    for topic, levels in data["judgments"].items():
        grades: Grades = {}
        for grade in (2, 1):
            for key in levels.get(grade, []):
                if key in grades:
                    raise ValueError(f"{topic}: {key} is judged twice")
                grades[key] = grade
        out[topic] = grades
    return out


# ---------------------------------------------------------------------------- metrics


def dcg(gains: Sequence[int], k: int = K) -> float:
    """Discounted cumulative gain of grades in rank order, gain ``2^g - 1``, cut at ``k``."""
    return float(sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(gains[:k])))


def ndcg(ranked: Sequence[str], grades: Grades, k: int = K) -> float:
    """nDCG@k; the ideal list is every judged paper, best grade first."""
    ideal = dcg(sorted(grades.values(), reverse=True), k)
    if ideal == 0:
        return 0.0
    return dcg([grades.get(key, 0) for key in ranked], k) / ideal


def precision(ranked: Sequence[str], grades: Grades, k: int = K, minimum: int = 1) -> float:
    """Share of the ``k`` slots holding a paper of grade >= ``minimum`` (empty slots count 0)."""
    return sum(grades.get(key, 0) >= minimum for key in ranked[:k]) / k


def precision_shown(ranked: Sequence[str], grades: Grades, k: int = K) -> float | None:
    """Precision (grade >= 1) over the papers actually shown among the first ``k``."""
    shown = ranked[:k]
    if not shown:
        return None
    return sum(grades.get(key, 0) >= 1 for key in shown) / len(shown)


def off_topic(ranked: Sequence[str], grades: Grades, k: int = TOP_OFF) -> int:
    """Grade-0 papers among the first ``k``."""
    return sum(grades.get(key, 0) == 0 for key in ranked[:k])


@dataclass(frozen=True)
class TopicResult:
    topic: str
    ndcg10: float
    p10: float
    p10_strict: float
    p_shown: float | None
    shown: int
    off5: int
    top: tuple[str, ...]


def measure(topic: str, ranked: Sequence[str], grades: Grades) -> TopicResult:
    return TopicResult(
        topic=topic,
        ndcg10=ndcg(ranked, grades),
        p10=precision(ranked, grades),
        p10_strict=precision(ranked, grades, minimum=2),
        p_shown=precision_shown(ranked, grades),
        shown=min(K, len(ranked)),
        off5=off_topic(ranked, grades),
        top=tuple(ranked[:K]),
    )


def means(results: Sequence[TopicResult]) -> dict[str, float]:
    shown = [r.p_shown for r in results if r.p_shown is not None]
    n = len(results)
    return {
        "ndcg10": sum(r.ndcg10 for r in results) / n,
        "p10": sum(r.p10 for r in results) / n,
        "p10_strict": sum(r.p10_strict for r in results) / n,
        "p_shown": sum(shown) / len(shown) if shown else 0.0,
        "off5": float(sum(r.off5 for r in results)),
    }


# ---------------------------------------------------------------------------- rankings


def ranker_rankings(topics: Sequence[TopicSettings], pool: Sequence[Paper]) -> dict[str, list[str]]:
    """Each topic's ranked paper keys from the project's ranker, as the digest would see them."""
    ranker = Ranker(topics, pool, NOW)
    return {t.name: [item.paper.key for item in ranker.ranked.get(t.name, ())] for t in topics}


BM25_K1 = 1.2
BM25_B = 0.75
_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "in",
        "into",
        "is",
        "it",
        "of",
        "on",
        "or",
        "the",
        "to",
        "with",
        "without",
    ]
)


def bm25_tokens(text: str) -> list[str]:
    """Lowercased alphanumeric words, a trailing plural ``s`` dropped from words over 3 letters."""
    out = []
    for w in _WORD.findall(text.lower()):
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        out.append(w)
    return out


def topic_query(topic: TopicSettings) -> list[str]:
    """Every distinct word of the topic's keywords and aliases (no phrases, no stopwords)."""
    words: dict[str, None] = {}
    for entry in topic.keywords:
        for alias in [entry] if isinstance(entry, str) else entry:
            for w in bm25_tokens(alias):
                if w not in STOPWORDS:
                    words[w] = None
    return list(words)


def bm25_rankings(topics: Sequence[TopicSettings], pool: Sequence[Paper]) -> dict[str, list[str]]:
    """Plain BM25 (k1 1.2, b 0.75) over title + abstract; no filters, phrases or trending."""
    docs = [bm25_tokens(f"{p.title} {p.abstract}") for p in pool]
    queries = {t.name: topic_query(t) for t in topics}
    vocab = {w: i for i, w in enumerate(dict.fromkeys(w for q in queries.values() for w in q))}
    tf = np.zeros((len(pool), len(vocab)))
    for d, words in enumerate(docs):
        for w in words:
            j = vocab.get(w)
            if j is not None:
                tf[d, j] += 1
    length = np.array([len(words) for words in docs], dtype=np.float64)
    n = len(pool)
    df = (tf > 0).sum(axis=0)
    idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
    norm = BM25_K1 * (1 - BM25_B + BM25_B * length / length.mean())
    weights = idf * tf * (BM25_K1 + 1) / (tf + norm[:, None])
    out = {}
    for name, words in queries.items():
        scores = weights[:, [vocab[w] for w in words]].sum(axis=1)
        hits = [d for d in range(n) if scores[d] > 0]
        hits.sort(key=lambda d: (-scores[d], pool[d].key))
        out[name] = [pool[d].key for d in hits]
    return out


# ---------------------------------------------------------------------------- report


def evaluate(set_name: str = DEFAULT_SET) -> dict[str, Any]:
    data = judged_data(set_name)
    topics = load_topics(data, set_name)
    grades = load_grades(data, set_name)
    pool = load_pool(set_name)
    runs = {"ranker": ranker_rankings(topics, pool), "bm25": bm25_rankings(topics, pool)}
    report: dict[str, Any] = {"papers": len(pool), "topics": len(topics), "runs": {}}
    for name, rankings in runs.items():
        results = [measure(t.name, rankings[t.name], grades[t.name]) for t in topics]
        report["runs"][name] = {
            "topics": [asdict(r) for r in results],
            "mean": means(results),
        }
    return report


def _fmt(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def table(report: Mapping[str, Any], set_name: str = DEFAULT_SET) -> str:
    ranker = report["runs"]["ranker"]
    bm25 = report["runs"]["bm25"]
    lines = [
        f"{report['papers']} papers, {report['topics']} topics (tests/rank/relevance/{set_name}.yaml)",
        "",
        f"{'':24} {'--------- ranker ---------':>41}   {'---------- BM25 ----------':>41}",
        f"{'topic':24} "
        + "   ".join(
            [f"{'nDCG@10':>7} {'P@10':>5} {'P2@10':>5} {'P@shown':>7} {'shown':>5} {'off@5':>5}"]
            * 2
        ),
    ]

    def cells(r: Mapping[str, Any]) -> str:
        return (
            f"{r['ndcg10']:7.3f} {r['p10']:5.2f} {r['p10_strict']:5.2f} "
            f"{_fmt(r['p_shown']):>7} {r['shown']:5d} {r['off5']:5d}"
        )

    for a, b in zip(ranker["topics"], bm25["topics"], strict=True):
        lines.append(f"{a['topic']:24} {cells(a)}   {cells(b)}")

    def mean_cells(m: Mapping[str, float]) -> str:
        return (
            f"{m['ndcg10']:7.3f} {m['p10']:5.2f} {m['p10_strict']:5.2f} "
            f"{m['p_shown']:7.3f} {'':5} {int(m['off5']):5d}"
        )

    lines.append(
        f"{'mean (off@5: total)':24} {mean_cells(ranker['mean'])}   {mean_cells(bm25['mean'])}"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- checks shared by the set tests

TRAP_KINDS = frozenset(
    {
        "generic-word",
        "acronym",
        "vocabulary",
        "inflection",
        "upvoted-weak",
        "zero-upvote",
        "near-miss",
    }
)
WRITTEN_FIELDS = {
    "key",
    "title",
    "abstract",
    "authors",
    "categories",
    "upvotes",
    "comments",
    "sources",
}


def check_written_paper(p: Mapping[str, Any], words: tuple[int, int]) -> None:
    """Assert one paper written in a papers file is well-formed, its abstract within ``words``."""
    assert set(p) == WRITTEN_FIELDS, p["key"]
    assert p["key"].startswith("2611.2") and p["title"].strip() and p["authors"], p["key"]
    assert p["upvotes"] is None or p["upvotes"] >= 0, p["key"]
    assert p["sources"] and all(s in ("hf-daily",) or s.startswith("arxiv-") for s in p["sources"])
    assert ("hf-daily" in p["sources"]) == (p["upvotes"] is not None), p["key"]
    assert words[0] <= len(p["abstract"].split()) <= words[1], p["key"]


def check_judged_keys_in_pool(
    grades_by_topic: Mapping[str, Grades],
    traps: Mapping[str, Mapping[str, list[str]]],
    by_key: Mapping[str, Paper],
    min_top: int,
    distinct_traps: bool = False,
) -> None:
    """Assert every graded and trap key is in the pool, each topic has ``min_top`` grade-2 papers."""
    for topic, grades in grades_by_topic.items():
        assert set(grades) <= set(by_key), (topic, set(grades) - set(by_key))
        assert sum(g == 2 for g in grades.values()) >= min_top, topic
    for topic, kinds in traps.items():
        for kind, keys in kinds.items():
            assert set(keys) <= set(by_key), (topic, kind, set(keys) - set(by_key))
            if distinct_traps:
                assert len(set(keys)) == len(keys), (topic, kind)


def check_traps(
    topic: str, kinds: Mapping[str, list[str]], grades: Grades, by_key: Mapping[str, Paper]
) -> None:
    """Assert one topic's traps are of known kinds and consistent with its grades and upvotes."""
    assert set(kinds) <= TRAP_KINDS, topic
    assert len(kinds.get("near-miss", [])) >= 3, topic
    for key in kinds.get("generic-word", []) + kinds.get("near-miss", []):
        assert grades.get(key, 0) <= 1, (topic, key)
    for kind in ("acronym", "vocabulary", "inflection"):
        for key in kinds.get(kind, []):
            assert grades.get(key, 0) >= 1, (topic, kind, key)
    for key in kinds.get("upvoted-weak", []):
        assert grades.get(key, 0) <= 1 and (by_key[key].upvotes or 0) >= 100, (topic, key)
    for key in kinds.get("zero-upvote", []):
        assert grades.get(key, 0) == 2 and not by_key[key].upvotes, (topic, key)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print machine-readable results")
    parser.add_argument(
        "--set",
        choices=sorted(SETS),
        default=DEFAULT_SET,
        help=f"which judged set to evaluate (default {DEFAULT_SET})",
    )
    args = parser.parse_args(argv)
    report = evaluate(args.set)
    print(json.dumps(report, indent=2) if args.json else table(report, args.set))


if __name__ == "__main__":
    main()
