"""Ranking quality: the judged set, the ranker against plain BM25, and the feedback simulation.

Not a speed benchmark: the "naive baseline in the same run" is a plain BM25 over title and
abstract (tests/rank/relevance/evaluate.py), on the hand-judged set of tests/rank/relevance/ (judged2.yaml over
the fixture papers and papers.yaml). The two-day feedback simulation (tests/rank/relevance/simulate.py)
measures what "more/less like this" votes add on day two.
"""

from __future__ import annotations

from bench import summary
from tests.rank.relevance import hybrid
from tests.rank.relevance.evaluate import evaluate, table
from tests.rank.relevance.simulate import simulate

BEFORE = {"ndcg10": 0.749, "p10": 0.80, "p10_strict": 0.63, "off5": 7}
"""The ranker before issue 17 (commit 403a7b1) on the same set, measured 2026-11-25."""


def semantic_section() -> str:
    """Lexical, semantic and hybrid side by side on both judged sets, and the simulation with
    the profiles of each (needs the ``semantic`` extra; says so without it)."""
    problem = hybrid.unavailable()
    if problem:
        return f"### Semantic matching\n\nNot measured: {problem}\n"
    reports = {name: hybrid.evaluate(name) for name in ("judged2", "judged3")}
    runs = ("lexical", "hybrid", "semantic", "bm25")
    label = {
        "lexical": "lexical ranker (without the extra)",
        "hybrid": "**hybrid (semantic matching on)**",
        "semantic": "similarity alone, every paper ranked",
        "bm25": "plain BM25 (same run)",
    }
    rows = []
    for run in runs:
        cells = []
        for name in reports:
            m = reports[name]["runs"][run]["mean"]
            cells.append(f"{m['ndcg10']:.3f} | {m['p10']:.2f} | {m['off5']:.0f}")
        rows.append(f"| {label[run]} | " + " | ".join(cells) + " |")
    sims = {}
    for name in reports:
        for semantic in (False, True):
            done = simulate(name, semantic=semantic)
            n = len(done)
            sims[name, semantic] = (
                sum(r.ndcg_without for r in done) / n,
                sum(r.ndcg_with for r in done) / n,
            )
    sim_rows = [
        f"| {kind} | "
        + " | ".join(
            f"{sims[name, semantic][0]:.3f} | {sims[name, semantic][1]:.3f}" for name in reports
        )
        + " |"
        for kind, semantic in (
            ("lexical, tf-idf profiles", False),
            ("hybrid, profiles in both spaces", True),
        )
    ]
    return f"""### Semantic matching: lexical, semantic and hybrid

`python -m tests.rank.relevance.hybrid --set judged2|judged3`; judged3 (295 papers, 8 topics written
as operators write them, judged blind; 23 of its 57 clearly relevant papers share no word with
their topic) was judged blind before any ranker ran on it, then used once to choose between
two literature values of the outlier threshold (docs/design.md). Each cell: mean nDCG@10 | P@10 |
off-topic papers in the top-5 slots.

| ranker | judged2 nDCG@10 | P@10 | off@5 | judged3 nDCG@10 | P@10 | off@5 |
|---|---:|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

Two-day simulation (`python -m tests.rank.relevance.simulate --set NAME [--semantic]`), day two's
nDCG@10 without and with the reader's day-one votes:

| ranker | judged2 without | with votes | judged3 without | with votes |
|---|---:|---:|---:|---:|
{chr(10).join(sim_rows)}
"""


def main(quick: bool) -> str:
    report = evaluate()
    mine = report["runs"]["ranker"]["mean"]
    bm25 = report["runs"]["bm25"]["mean"]
    rows = simulate()
    n = len(rows)
    without = sum(r.ndcg_without for r in rows) / n
    with_votes = sum(r.ndcg_with for r in rows) / n
    return f"""## relevance: judged set, ranker vs plain BM25, and learning from votes

{report["papers"]} papers (46 real feed-fixture papers and {report["papers"] - 46} written in
the style of real abstracts, with near-misses, acronym-only and reworded relevant papers, and
heavily upvoted weak matches), {report["topics"]} topics written as researchers would,
graded 0/1/2 over every paper before any ranker ran (`tests/rank/relevance/judged2.yaml`). Baseline in
the same run: plain BM25 (k1 1.2, b 0.75) over title + abstract with every keyword word as a
query term. `python -m tests.rank.relevance.evaluate` prints the table below.

| ranker | nDCG@10 | P@10 | P@10 (grade 2) | off-topic papers in the 50 top-5 slots |
|---|---:|---:|---:|---:|
| before issue 17 (403a7b1) | {BEFORE["ndcg10"]:.3f} | {BEFORE["p10"]:.2f} | {BEFORE["p10_strict"]:.2f} | {BEFORE["off5"]} |
| **now** | **{mine["ndcg10"]:.3f}** | **{mine["p10"]:.2f}** | **{mine["p10_strict"]:.2f}** | **{mine["off5"]:.0f}** |
| plain BM25 (same run) | {bm25["ndcg10"]:.3f} | {bm25["p10"]:.2f} | {bm25["p10_strict"]:.2f} | {bm25["off5"]:.0f} |

Per topic:

```
{table(report)}
```

### Two-day feedback simulation

Day one is every other paper of the pool, day two the rest. For each topic one reader gets day
one's digest, votes "more like this" on its grade-2 papers and "less like this" on its grade-0
ones, and day two is ranked for them with and without those votes (`python -m
tests.rank.relevance.simulate`).

| day two | nDCG@10 |
|---|---:|
| without votes (the shared topic list) | {without:.3f} |
| with the reader's votes (Rocchio profile) | {with_votes:.3f} |
| gain | **{with_votes - without:+.3f}** |

Per topic: `python -m tests.rank.relevance.simulate`.

{summary("nDCG@10 on the judged set, plain BM25 in the same run", f"{mine['ndcg10']:.3f} (BM25 {bm25['ndcg10']:.3f})", None)}
{summary("nDCG@10 gain from a reader's votes, day two", f"{with_votes - without:+.3f}", None)}

{semantic_section()}"""
