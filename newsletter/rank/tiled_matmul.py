"""Sparse × dense products a tile of columns at a time, bitwise as the whole product.

The ranker's hot products multiply a sparse matrix (readers' rows, a few nonzeros each) with a
dense one of a few megabytes (groups × papers weights, examples × papers cosines). scipy
computes ``a @ b`` row by row, adding ``a[i, k] · b[k, :]`` for each nonzero of the row in its
stored order: with ``b`` cut into column tiles of ``TILE`` columns, each kept contiguous, the rows
of a tile stay in the core's cache while the sparse rows go by, and every cell is still the
same sum in the same order, so the result is bitwise that of the whole product.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

TILE = 256
"""Columns per tile: 256 float64 columns of 2,000 rows are 4 MiB."""

Tiles = tuple[npt.NDArray[Any], ...]


def column_tiles(m: npt.NDArray[Any], width: int = TILE) -> Tiles:
    """``m`` cut into contiguous copies of ``width`` columns (the last one may be narrower)."""
    return tuple(
        np.ascontiguousarray(m[:, lo : lo + width]) for lo in range(0, max(1, m.shape[1]), width)
    )


def times_tiles(a: sp.csr_matrix, tiles: Tiles) -> npt.NDArray[Any]:
    """``a @ b`` where ``tiles`` are :func:`column_tiles` of ``b``, in ``b``'s dtype."""
    width = sum(t.shape[1] for t in tiles)
    out = np.empty((a.shape[0], width), dtype=np.result_type(a.dtype, tiles[0].dtype))
    lo = 0
    for t in tiles:
        hi = lo + t.shape[1]
        out[:, lo:hi] = a @ t
        lo = hi
    return out


def dense_product(a: sp.csr_matrix, b: Any, width: int = TILE) -> npt.NDArray[np.float64]:
    """``a @ b`` of two sparse matrices as a dense array, for a product that is dense anyway
    (cosines of papers): ``b`` is made dense a tile of columns at a time. Each cell is summed
    over ``a``'s row in its stored order, from 0.0, as scipy's sparse × sparse product does (so
    bitwise the same), without that product's bookkeeping of a mostly full result."""
    b = sp.csc_matrix(b)
    out = np.empty((a.shape[0], b.shape[1]))
    for lo in range(0, b.shape[1], width):
        hi = min(b.shape[1], lo + width)
        out[:, lo:hi] = a @ b[:, lo:hi].toarray()
    return out
