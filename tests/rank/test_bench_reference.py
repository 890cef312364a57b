"""The rank benchmark's per-subscriber loop (bench/bench_rank.py, ``NaiveRanker``) scores as the
ranker does: the benchmark's "same top 10" line is only worth something while it does. A rule
added to the ranker and not to the loop (CamelCase compounds in titles did) fails here, not
silently on the benchmark page."""

from __future__ import annotations

import random
from dataclasses import replace

from bench import bench_rank as R
from newsletter.text import compound_parts


def test_the_loop_and_the_vectorized_ranker_give_the_same_top_10() -> None:
    rng = random.Random(20261117)
    papers = R.make_papers(300, rng)
    examples = [
        replace(p, id=10**6 + p.id, key=p.key.replace("2611.", "2610."))
        for p in R.make_papers(300, random.Random(20261116))
    ]
    rules = R.make_rules(600, R.make_vocabulary(), rng)
    votes = R.make_votes(600, examples, rng)
    docs = R.Documents.read(papers)
    space = R.ProfileSpace(docs, examples)
    queries = R.compile_rules(rules)
    index = R.PaperIndex(papers, queries.vocab, R.NOW, docs)
    profiles = R.ProfileRows.build(space, len(rules), votes, R.PROFILE_SCALE)
    result = R.top_n(queries, index, R.TOP, block=R.BLOCK, profiles=profiles)
    naive, naive_profiles = R.NaiveRanker(papers), R.NaiveProfiles(space)
    rows = sorted(set(range(0, 600, 6)) | set(sorted(votes)[:20]))
    compounds = sum(bool(compound_parts(p.title)) for p in papers)
    assert compounds > 0  # the sample holds titles with CamelCase compounds
    for r in rows:
        profile = naive_profiles.profile(votes[r], R.PROFILE_SCALE) if r in votes else None
        expected = naive.top(rules[r], R.TOP, profile)
        assert [int(j) for j in result.ids[r] if j >= 0] == [j for _, j in expected], r
        for (score, _), got in zip(expected, result.scores[r], strict=False):
            assert abs(score - got) <= 1e-9 * max(score, 1.0), r
