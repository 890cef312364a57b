"""What a section knows of the papers it did not show (issue 44, item 5): its limit, and how
many good papers of its topic the limit alone left out (and which), against a brute-force
count over the topic's whole list, with and without the reader's votes."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from newsletter.models import TopicSection
from newsletter.rank import Ranker
from newsletter.rank.profiles import Preference, Vote
from tests.rank.relevance.corpus import NOW
from tests.rank.test_ranker import paper, topic

WORDS = ("MoE", "CUDA", "kernels", "routing", "attention")


def _papers() -> list:
    out = []
    n = 0
    for a in WORDS:
        for b in WORDS:
            n += 1
            out.append(paper(n, f"{a} {b} study {n}", f"{a} and {b}. " * (1 + n % 3)))
    return out


PAPERS = _papers()
TOPICS = [
    topic("moe", keywords=["MoE"]),
    topic("kernels", keywords=["CUDA", "kernels"]),
    topic("routing", keywords=["routing"], max_items=2),
]
RANKER = Ranker(TOPICS, PAPERS, NOW, examples=PAPERS)


def _expected(
    ranker: Ranker,
    sections: Sequence[TopicSection],
    excluded: Collection[int],
    votes: Sequence[Vote],
) -> dict[str, list[int]]:
    """Per section: its topic's list, in pick order, minus what was sent before and minus
    every paper the digest shows (in this section or another)."""
    shown = {i.paper.id for s in sections for i in s.items}
    out = {}
    for s in sections:
        touched = votes and any(v.topic in (None, s.name) for v in votes)
        listed = ranker.reader_items(s.name, votes) if touched else iter(ranker.ranked[s.name])
        if not touched:  # the shared list in the order sections() merges (6-digit scores)
            listed = iter(sorted(listed, key=lambda i: (-round(i.score, 6), i.paper.key)))
        out[s.name] = [
            i.paper.id for i in listed if i.paper.id not in excluded and i.paper.id not in shown
        ]
    return out


@settings(max_examples=60, deadline=None)
@given(
    names=st.lists(st.sampled_from([t.name for t in TOPICS]), min_size=1, max_size=3),
    excluded=st.sets(st.integers(1, len(PAPERS))),
    max_items=st.integers(1, 12),
    vote=st.sampled_from([None, ("2611.00002", 1), ("2611.00013", -1), ("2611.00007", 1)]),
)
def test_each_section_counts_and_lists_what_the_limit_alone_left_out(
    names: list[str], excluded: set[int], max_items: int, vote: tuple[str, int] | None
) -> None:
    votes = () if vote is None else (Preference(vote[0], vote[1]),)
    sections = RANKER.sections(names, exclude_ids=excluded, max_items=max_items, votes=votes)
    expected = _expected(RANKER, sections, excluded, votes)
    for s in sections:
        limit = RANKER.topics[s.name].max_items or max_items
        assert s.limit == limit
        assert s.more == len(expected[s.name]), s.name
        assert s.later is None if not s.more else list(s.later.ids) == expected[s.name]
        if len(s.items) < limit:
            assert s.more == 0  # a section with room left shows every good paper it had
        assert s.quiet == (0 < len(s.items) < limit and s.more == 0)


def test_a_quiet_topic_and_a_cut_one() -> None:
    papers = [paper(i, f"MoE paper {i}") for i in range(1, 4)]
    papers += [paper(i, f"CUDA paper {i}") for i in range(11, 16)]
    ranker = Ranker(
        [topic("moe", keywords=["MoE"]), topic("cuda", keywords=["CUDA"], max_items=2)],
        papers,
        NOW,
    )
    moe, cuda = ranker.sections(["moe", "cuda"], max_items=10)
    assert (len(moe.items), moe.limit, moe.more, moe.quiet) == (3, 10, 0, True)
    assert (len(cuda.items), cuda.limit, cuda.more, cuda.quiet) == (2, 2, 3, False)
    assert cuda.later is not None
    assert sorted(cuda.later.ids) == sorted({11, 12, 13, 14, 15} - {i.paper.id for i in cuda.items})
    # Already sent: not "more in the archive".
    (again,) = ranker.sections(["cuda"], max_items=10, exclude_ids={cuda.later.ids[0]})
    assert again.more == 2
    # Merged: the one list's limit, and what any limit cut.
    (merged,) = ranker.sections(["moe", "cuda"], max_items=4, group_by_topic=False)
    assert (len(merged.items), merged.limit, merged.more) == (4, 4, 4)
    assert merged.later is not None and len(set(merged.later.ids)) == 4


def test_sections_with_the_same_papers_but_other_papers_left_out_differ() -> None:
    """Two readers whose sections show the same papers and count the same number left out,
    but not the same papers (each was sent another one before): their sections are not
    equal, so no cache (rendering, layouts) gives one the other's list."""
    papers = [paper(i, f"CUDA paper {i}") for i in range(1, 8)]
    ranker = Ranker([topic("cuda", keywords=["CUDA"], max_items=2)], papers, NOW)
    (full,) = ranker.sections(["cuda"])
    assert full.later is not None
    a, b = full.later.ids[-1], full.later.ids[-2]
    (x,) = ranker.sections(["cuda"], exclude_ids={a})
    (y,) = ranker.sections(["cuda"], exclude_ids={b})
    assert x.items == y.items and x.more == y.more
    assert x != y and {x: 1}.get(y) is None
    assert x.later is not None and y.later is not None and x.later.ids != y.later.ids
