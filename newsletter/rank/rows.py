"""Topics × papers values kept two ways: the operator's topics dense, readers' own compact.

A run ranks the operator's topics (tens) and the readers' own topics (up to tens of thousands,
each read by one reader). The first are kept as dense rows, as numpy arrays; the others are
made a block of rows at a time and kept as sparse rows (what is not zero), so 30,000 own topics
over 2,000 papers take megabytes, not gigabytes. :class:`Rows` reads either as a dense row;
:class:`Orders` gives a row's papers best first from one sort of a whole block.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

FloatArray = npt.NDArray[np.float64]


class Rows:
    """Rows of topics × papers values: the first ``len(dense)`` rows dense, then blocks of
    sparse rows (``add``). ``rows[i]`` is row ``i`` as a dense array (a view for a dense row,
    a new array for a sparse one). ``fill``: the value of what a sparse row does not store
    (``True`` for a filter mask that holds its failures)."""

    def __init__(
        self,
        dense: npt.NDArray[Any],
        n_papers: int,
        *,
        fill: bool = False,
        detail: Callable[[int], npt.NDArray[Any]] | None = None,
    ) -> None:
        self.dense = dense
        self.n_papers = n_papers
        self._fill = fill
        self._detail = detail
        self._starts: list[int] = []
        self._blocks: list[sp.csr_matrix] = []
        self._partial: list[bool] = []
        self._size = len(dense)

    def add(self, block: Any, *, partial: bool = False) -> None:
        """The next rows, kept sparse (a mask with ``fill`` keeps where it differs); a block
        already sparse is kept as it is. ``partial``: the block holds some of its rows'
        values (a sparse block, on the papers a topic shows); the whole row, and any other
        value, is ``detail(i)`` (made again when asked)."""
        if partial and self._detail is None:
            raise ValueError("a partial block needs rows' detail")
        self._starts.append(self._size)
        if sp.issparse(block):
            self._blocks.append(sp.csr_matrix(block))
        else:
            self._blocks.append(sp.csr_matrix(block != self._fill if self._fill else block))
        self._partial.append(partial)
        self._size += block.shape[0]

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, i: int) -> npt.NDArray[Any]:
        if i < len(self.dense):
            row: npt.NDArray[Any] = self.dense[i]
            return row
        k = bisect.bisect_right(self._starts, i) - 1
        if self._partial[k]:
            assert self._detail is not None
            return self._detail(i)
        block = self._blocks[k]
        r = i - self._starts[k]
        lo, hi = block.indptr[r], block.indptr[r + 1]
        if self._fill:
            out = np.ones(self.n_papers, dtype=bool)
            out[block.indices[lo:hi]] = False
            return out
        out = np.zeros(self.n_papers, dtype=block.dtype)
        out[block.indices[lo:hi]] = block.data[lo:hi]
        return out

    def stored(self, i: int) -> tuple[npt.NDArray[np.int32], npt.NDArray[Any]] | None:
        """Row ``i``'s stored papers and values, when it is a sparse row that holds all of its
        values (None for a dense or partial row)."""
        if i < len(self.dense) or self._fill:
            return None
        k = bisect.bisect_right(self._starts, i) - 1
        if self._partial[k]:
            return None
        block = self._blocks[k]
        r = i - self._starts[k]
        lo, hi = block.indptr[r], block.indptr[r + 1]
        return block.indices[lo:hi], block.data[lo:hi]

    def at(self, i: int, j: int) -> Any:
        """Row ``i``'s value for paper ``j`` (a sparse row is searched, not made dense)."""
        if i < len(self.dense):
            return self.dense[i, j]
        k = bisect.bisect_right(self._starts, i) - 1
        block = self._blocks[k]
        r = i - self._starts[k]
        lo, hi = block.indptr[r], block.indptr[r + 1]
        cols = block.indices[lo:hi]
        at = int(cols.searchsorted(j))
        held = at < len(cols) and cols[at] == j
        if not held and self._partial[k]:
            assert self._detail is not None
            return self._detail(i)[j]
        if self._fill:
            return not held
        return block.data[lo + at] if held else block.dtype.type(0)


class ByName(Mapping[str, npt.NDArray[Any]]):
    """Topic name → its row of ``rows`` (``order``: name → row number)."""

    def __init__(self, rows: Rows, order: Mapping[str, int]) -> None:
        self._rows = rows
        self._order = order

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        return self._rows[self._order[name]]

    def at(self, name: str, j: int) -> Any:
        """The topic's value for paper ``j``."""
        return self._rows.at(self._order[name], j)

    def __contains__(self, name: object) -> bool:
        return name in self._order  # not Mapping's default, which would make the row

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


def block_orders(
    scores: FloatArray, key_rank: npt.NDArray[np.int64], digits: int
) -> list[npt.NDArray[np.intp]]:
    """Each row's positive entries, best first: by score rounded to ``digits``, then by the
    paper's key (``key_rank``); one sort for the whole block (views of one array)."""
    rows, cols = np.nonzero(scores > 0)
    if not len(rows):
        return [cols[:0] for _ in range(len(scores))]
    values = np.round(scores[rows, cols], digits)
    order = np.lexsort((key_rank[cols], -values, rows))
    cols = cols[order]
    bounds = np.searchsorted(rows[order], np.arange(len(scores) + 1))
    return [cols[bounds[r] : bounds[r + 1]] for r in range(len(scores))]


class Orders(Mapping[str, list[int]]):
    """Topic name → its papers best first, made on first use by ``make`` (for the rows that
    were not ordered up front)."""

    def __init__(
        self, known: dict[str, list[int]], names: list[str], make: Callable[[str], list[int]]
    ) -> None:
        self._known = known
        self._names = names
        self._make = make

    def __getitem__(self, name: str) -> list[int]:
        found = self._known.get(name)
        if found is None:
            if name not in self._names_set():
                raise KeyError(name)
            found = self._known[name] = self._make(name)
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._known or name in self._names_set()

    def _names_set(self) -> frozenset[str]:
        names = getattr(self, "_set", None)
        if names is None:
            names = self._set = frozenset(self._names)
        return names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)
