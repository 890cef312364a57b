"""Many subscribers' keyword rules compile column list by column list (``keyword_rows``) into
exactly what the rule-by-rule path builds: the same vocabulary numbering, the same matrices
(bitwise: indices, order and values), the same groups per row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from newsletter.rank import Queries, Rule, Vocabulary, compile_rules
from newsletter.rank.keyword_rows import RowGroups
from newsletter.rank.rules import _compile_each
from tests.rank.test_ranker import group_st

keyword_rule_st = st.builds(
    Rule,
    keywords=st.lists(group_st, max_size=5).map(tuple),
    exclude=st.lists(group_st, max_size=2).map(tuple),
    categories=st.lists(st.sampled_from(["cs.DC", "cs.LG", "CS.lg", "stat.ML"]), max_size=2).map(
        tuple
    ),
    authors=st.lists(
        st.sampled_from(["Ada Lovelace", "ada  lovelace", "Alan Turing"]), max_size=1
    ).map(tuple),
    min_score=st.sampled_from([0.0, 0.0, 1.5]),
)


def _matrices(q: Queries) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("scoring", "required", "exclude", "categories", "authors"):
        m = getattr(q, name)
        out[name] = (m.shape, m.indptr.tolist(), m.indices.tolist(), m.data.tolist())
    for name in ("n_required", "min_score", "category_only"):
        out[name] = getattr(q, name).tolist()
    v = q.vocab
    out["vocab"] = (
        list(v.terms.items()),
        list(v.groups.items()),
        list(v.categories.items()),
        list(v.authors.items()),
    )
    out["row_groups"] = list(q.row_groups)
    return out


@settings(max_examples=80, deadline=None)
@given(rules=st.lists(keyword_rule_st, max_size=30))
def test_keyword_rows_compile_as_the_rule_by_rule_path(rules: list[Rule]) -> None:
    fast = compile_rules(rules)
    assert isinstance(fast.row_groups, RowGroups)  # the column-list path was taken
    slow = _compile_each(rules, Vocabulary())
    assert _matrices(fast) == _matrices(slow)
    assert len(fast.row_groups) == len(rules)
    if rules:
        assert fast.row_groups[-1] == slow.row_groups[-1]
        assert list(fast.row_groups[1:3]) == list(slow.row_groups[1:3])


def test_row_groups_index_like_a_tuple() -> None:
    groups = RowGroups(np.array([4, 2, 7], dtype=np.int64), np.array([0, 2, 2, 3], dtype=np.int64))
    assert list(groups) == [(4, 2), (), (7,)]
    assert groups[-1] == (7,)
    assert groups[0:2] == [(4, 2), ()]
