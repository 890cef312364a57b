"""Choosing the fusion's settings by cross-validation over the judged sets.

    python -m tests.rank.relevance.fusion          # the grid, and the choice per held-out set

The hybrid ranker's settings (:class:`newsletter.rank.Fusion`: the keyword weight ``alpha``,
pseudo-relevance feedback on or off, what a topic's query vector is made of) are chosen on
all judged sets but one and reported on the one left out, for each set in turn: no setting is
chosen by the set it is measured on. The shipped defaults are the choice over all sets; the
held-out numbers are what to expect on topics and papers the settings never saw.
"""

from __future__ import annotations

import argparse
import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from newsletter.rank import DEFAULT_FUSION, Fusion, Ranker
from tests.rank.relevance import evaluate as ev
from tests.rank.relevance import hybrid

SETS = ("judged2", "judged3", "judged4")
GRID = tuple(
    Fusion(alpha=a, feedback_docs=fd, query=q)
    for q, fd, a in itertools.product(
        ("keywords", "text"), (0, DEFAULT_FUSION.feedback_docs), (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
    )
)
"""The settings tried: the keyword weight from none to half, feedback off and on, and the
topic's query as its keywords' centroid or as one text."""


@dataclass(frozen=True)
class Score:
    ndcg10: float
    off5: float


@functools.cache
def _set(name: str) -> tuple[object, ...]:
    topics, grades, pool = hybrid.load_set(name)
    return topics, grades, pool, hybrid.semantic_for(pool, topics)


def score(name: str, fusion: Fusion) -> Score:
    topics, grades, pool, semantic = _set(name)
    ranker = Ranker(topics, pool, ev.NOW, semantic=semantic, fusion=fusion)  # type: ignore[arg-type]
    ranked = hybrid.rankings(ranker)
    results = [ev.measure(t.name, ranked[t.name], grades[t.name]) for t in topics]  # type: ignore[attr-defined,index]
    means = ev.means(results)
    return Score(means["ndcg10"], means["off5"])


def label(f: Fusion) -> str:
    return f"alpha {f.alpha:<4g} feedback {'on ' if f.feedback_docs else 'off'} query {f.query}"


def cross_validate(sets: Sequence[str] = SETS) -> dict[str, tuple[Fusion, Score]]:
    """For each set: the setting best on the others (mean nDCG@10), and its score there."""
    scores = {(f, s): score(s, f) for f in GRID for s in sets}
    out = {}
    for held in sets:
        tune = [s for s in sets if s != held]
        best = max(GRID, key=lambda f: sum(scores[f, s].ndcg10 for s in tune))
        out[held] = (best, scores[best, held])
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.parse_args(argv)
    problem = hybrid.unavailable()
    if problem:
        raise SystemExit(problem)
    print(f"{'setting':44}" + "".join(f"{s:>16}" for s in SETS))
    for f in GRID:
        cells = "".join(f"{score(s, f).ndcg10:>10.3f} {score(s, f).off5:>4.0f} " for s in SETS)
        print(f"{label(f):44}{cells}")
    print()
    for held, (f, sc) in cross_validate().items():
        print(f"held out {held}: chosen on the others {label(f)}; nDCG@10 {sc.ndcg10:.3f}")
    print(f"shipped default: {label(DEFAULT_FUSION)}")


if __name__ == "__main__":
    main()
