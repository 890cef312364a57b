"""Keyword rows compiled a column list at a time: :func:`newsletter.rank.compile_rules`'s path
for many subscribers' rules (keywords and exclusions, no ``all`` entries, no acronym variants).

The general path compiles rule by rule; with 100,000 rules most of its time is Python
bookkeeping per rule. Here every entry is looked up once in one pass (``GroupIds``), the
keyword and exclusion columns are split with numpy, and the rows' groups stay one flat array
(``RowGroups``). The numbering and the matrices are those of the rule-by-rule path (a test
compares them on random rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Protocol, overload

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

IntArray = npt.NDArray[np.int64]
Group = tuple[str, ...]


class KeywordRule(Protocol):
    """What is read of a rule here (``rank.Rule`` is one); this module imports nothing of
    :mod:`newsletter.rank.rules`, which builds on it."""

    @property
    def keywords(self) -> Sequence[Group]:
        """The keyword entries, each an alias set."""
        ...

    @property
    def exclude(self) -> Sequence[Group]:
        """The exclusion entries, each an alias set."""
        ...

    @property
    def categories(self) -> Sequence[str]:
        """The arXiv categories the rule matches."""
        ...

    @property
    def authors(self) -> Sequence[str]:
        """The authors the rule matches."""
        ...

    @property
    def min_score(self) -> float:
        """The rule's own minimum score."""
        ...


class Numbering(Protocol):
    """What is used of the vocabulary (``rank.Vocabulary`` is one): ids given on first sight."""

    @property
    def groups(self) -> dict[tuple[int, ...], int]:
        """Every group numbered so far."""
        ...

    @property
    def categories(self) -> dict[str, int]:
        """Every category numbered so far."""
        ...

    @property
    def authors(self) -> dict[str, int]:
        """Every author numbered so far."""
        ...

    def group(self, aliases: Group) -> int:
        """The id of an alias set (numbered on first sight)."""
        ...

    def category(self, name: str) -> int:
        """The column of an arXiv category (numbered on first sight)."""
        ...

    def author(self, name: str) -> int:
        """The column of an author (numbered on first sight)."""
        ...


def csr_rows(
    cols: Sequence[int] | IntArray, lengths: Sequence[int] | IntArray, n_cols: int
) -> sp.csr_matrix:
    """A 0/1 matrix whose row ``i`` has ones at its ``lengths[i]`` columns, taken in turn from
    ``cols`` (repeats count once)."""
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    m = sp.csr_matrix(
        (np.ones(len(cols)), np.asarray(cols, dtype=np.int64), indptr),
        shape=(len(lengths), n_cols),
    )
    m.sum_duplicates()
    m.data[:] = 1.0
    return m


class GroupIds(dict[tuple[str, ...], int]):
    """Alias set → group id, numbered by the vocabulary on first sight."""

    def __init__(self, vocab: Numbering) -> None:
        super().__init__()
        self.vocab = vocab

    def __missing__(self, aliases: Group) -> int:
        gid = self[aliases] = self.vocab.group(aliases)
        return gid


class RowGroups(Sequence[tuple[int, ...]]):
    """Per row, the group of each keyword entry in the rule's order, kept as one flat array
    (a tuple per row is built only for the rows explained)."""

    def __init__(self, flat: IntArray, indptr: IntArray) -> None:
        self._flat = flat
        self._indptr = indptr

    def __len__(self) -> int:
        return len(self._indptr) - 1

    @overload
    def __getitem__(self, i: int) -> tuple[int, ...]: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[int, ...]]: ...
    def __getitem__(self, i: int | slice) -> tuple[int, ...] | Sequence[tuple[int, ...]]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        k = i + len(self) if i < 0 else i
        if not 0 <= k < len(self):
            raise IndexError(i)
        lo, hi = self._indptr[k], self._indptr[k + 1]
        return tuple(self._flat[lo:hi].tolist())


@dataclass(frozen=True)
class KeywordMatrices:
    """The matrices of ``rank.Queries`` for keyword-only rules (``rank`` wraps them)."""

    scoring: sp.csr_matrix
    required: sp.csr_matrix
    n_required: IntArray
    exclude: sp.csr_matrix
    categories: sp.csr_matrix
    authors: sp.csr_matrix
    min_score: npt.NDArray[np.float64]
    category_only: npt.NDArray[np.bool_]
    row_groups: RowGroups


def compile_keywords(rules: Sequence[KeywordRule], v: Numbering) -> KeywordMatrices:
    """:func:`~newsletter.rank.compile_rules` for rules without ``all`` entries, with no
    acronym variants: the same matrices and the same numbering, built a column list at a time
    (not rule by rule)."""
    n = len(rules)
    kw_lengths = np.fromiter(map(len, (r.keywords for r in rules)), dtype=np.int64, count=n)
    ex_lengths = np.fromiter(map(len, (r.exclude for r in rules)), dtype=np.int64, count=n)
    # Groups are numbered in order of first use (a rule's keywords, then its exclusions): one
    # pass over every entry, each looked up once.
    entries = chain.from_iterable(chain.from_iterable((r.keywords, r.exclude) for r in rules))
    ids = np.fromiter(
        map(GroupIds(v).__getitem__, entries),
        dtype=np.int64,
        count=int(kw_lengths.sum() + ex_lengths.sum()),
    )
    is_exclusion = np.repeat(
        np.tile([False, True], n), np.column_stack([kw_lengths, ex_lengths]).ravel()
    )
    keywords = ids[~is_exclusion]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(kw_lengths, out=indptr[1:])
    categories = [r.categories for r in rules]
    authors = [r.authors for r in rules]
    g_n = len(v.groups)
    return KeywordMatrices(
        scoring=csr_rows(keywords.copy(), kw_lengths, g_n),  # (sorted in place there)
        required=csr_rows([], [0] * n, g_n),
        n_required=np.zeros(n, dtype=np.int64),
        exclude=csr_rows(ids[is_exclusion], ex_lengths, g_n),
        categories=csr_rows(
            list(map(v.category, chain.from_iterable(categories))),
            list(map(len, categories)),
            len(v.categories),
        ),
        authors=csr_rows(
            list(map(v.author, chain.from_iterable(authors))),
            list(map(len, authors)),
            len(v.authors),
        ),
        min_score=np.array([r.min_score for r in rules], dtype=np.float64).reshape(n),
        category_only=np.array(
            [not r.keywords and bool(r.categories) for r in rules], dtype=bool
        ).reshape(n),
        row_groups=RowGroups(keywords, indptr),
    )
