"""Products a tile of columns at a time (``newsletter.rank.tiled_matmul``) are bitwise the whole product.

The ranker's scores must not move by a bit when a product is computed in tiles: each cell is
still summed over the sparse row in its stored order. Checked on random matrices, with rows
whose indices are stored out of order and duplicate-free, widths that do and do not divide the
column count, and empty rows.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from newsletter.rank.tiled_matmul import column_tiles, dense_product, times_tiles


def _random_csr(rng: np.random.Generator, rows: int, cols: int, density: float) -> sp.csr_matrix:
    m = sp.random(rows, cols, density=density, random_state=rng, format="csr")
    m.data = rng.standard_normal(m.nnz) * 10.0 ** rng.integers(-3, 3, m.nnz)
    # Shuffle each row's stored order: the products must follow it, whatever it is.
    for r in range(rows):
        lo, hi = m.indptr[r], m.indptr[r + 1]
        order = rng.permutation(hi - lo) + lo
        m.indices[lo:hi] = m.indices[order]
        m.data[lo:hi] = m.data[order]
    m.has_sorted_indices = False
    return m


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 40),
    inner=st.integers(1, 60),
    cols=st.integers(1, 700),
    width=st.sampled_from([1, 7, 64, 256, 1000]),
)
def test_tiled_products_are_bitwise_the_whole_product(
    seed: int, rows: int, inner: int, cols: int, width: int
) -> None:
    rng = np.random.default_rng(seed)
    a = _random_csr(rng, rows, inner, 0.3)
    b = _random_csr(rng, inner, cols, 0.5)
    whole = (a @ b).toarray()
    assert np.array_equal(dense_product(a, b, width), whole)
    dense_b = b.toarray()
    assert np.array_equal(times_tiles(a, column_tiles(dense_b, width)), a @ dense_b)
    for dtype in (np.float32, np.int8):
        small = dense_b.astype(dtype)
        got = times_tiles(a.astype(dtype), column_tiles(small, width))
        assert got.dtype == dtype
        assert np.array_equal(got, a.astype(dtype) @ small)


def test_cosines_computed_in_the_background_are_those_computed_on_use() -> None:
    from dataclasses import replace

    from newsletter.rank import Documents
    from newsletter.rank.profiles import ProfileSpace
    from tests.rank.relevance.corpus import load_papers

    papers = load_papers()
    examples = [replace(p, id=10_000 + p.id, key="old-" + p.key) for p in papers[:40]]
    docs = Documents.read(papers)
    early = ProfileSpace(docs, examples)
    early.precompute()
    early.precompute()  # a second call changes nothing
    late = ProfileSpace(docs, examples)
    assert np.array_equal(early.gram, late.gram)
    assert len(early.similarity) == len(late.similarity)
    for a, b in zip(early.similarity, late.similarity, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(
        np.concatenate(late.similarity, axis=1), (late.examples @ late.run_vectors.T).toarray()
    )


def test_many_profiles_at_once_are_each_readers_rocchio_profile() -> None:
    """``ProfileRows`` (cosines in tiles, readers in blocks) against one reader's profile
    computed the plain way (``ProfileSpace.rocchio``: the vector, then its cosines)."""
    from dataclasses import replace

    from newsletter.rank import Documents
    from newsletter.rank.profiles import Preference, ProfileRows, ProfileSpace
    from tests.rank.relevance.corpus import load_papers

    papers = load_papers()
    examples = [replace(p, id=10_000 + p.id, key="old-" + p.key) for p in papers[:60]]
    space = ProfileSpace(Documents.read(papers), examples)
    rng = np.random.default_rng(7)
    prefs = {
        r: [
            Preference(examples[int(e)].key, int(rng.choice([1, 1, -1])))
            for e in rng.choice(len(examples), size=int(rng.integers(1, 8)), replace=False)
        ]
        for r in range(0, 40, 3)
    }
    scale = rng.uniform(0.5, 3.0, 40)
    rows = ProfileRows.build(space, 40, prefs, scale)
    rows.prepare()
    found = rows.relevance_of(np.arange(40, dtype=np.int64))
    assert found is not None
    which, values = found
    assert which.tolist() == sorted(prefs)
    for r, got in zip(which.tolist(), values, strict=True):
        more = [p.paper_key for p in prefs[r] if p.value > 0]
        less = [p.paper_key for p in prefs[r] if p.value < 0]
        plain = space.rocchio(more, less)
        assert plain is not None
        assert np.allclose(got, scale[r] * plain[0], rtol=1e-9, atol=1e-12)
