"""Issue 42 item 2: the embedder tokenized the whole text and truncated afterwards.

``Embedder.embed`` gave every text to the tokenizer whole: a 16 MB abstract took 25 s and
2.7 GB (18.5 s and 1.6 GB more on the test machine) for a vector made of its first 128 word
pieces. Each text is now cut to ``Embedder.max_chars`` characters before the tokenizer sees it
(the ingest caps bound what is stored; this bounds whatever the embedder is given), and the
vector is the same. Runs the real model; skips, saying why, when it is not installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from newsletter.semantic.model import DEFAULT_MODEL, Embedder, ModelUnavailable, locate

MB = 1024 * 1024


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Embedder:
    try:
        return Embedder(locate(DEFAULT_MODEL, tmp_path_factory.mktemp("models")))
    except ModelUnavailable as e:
        pytest.skip(str(e))


class Seen:
    """The real tokenizer, noting the length of every text it is given."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.lengths: list[int] = []

    def encode_batch(self, texts: Sequence[str]) -> Any:
        self.lengths.extend(map(len, texts))
        return self.tokenizer.encode_batch(texts)


def test_a_huge_text_is_cut_before_the_tokenizer_with_the_same_vector(
    embedder: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    sentence = "Sparse attention kernels for graph neural network training at scale. "
    huge = (sentence * (4 * MB // len(sentence)))[: 4 * MB]
    head = huge[:2_000]  # about 300 word pieces: more than the model reads
    seen = Seen(embedder._tokenizer)
    monkeypatch.setattr(embedder, "_tokenizer", seen)
    vectors = embedder.embed([huge, head, "a short text"])
    assert max(seen.lengths) < 64 * 1024  # 4 MB before
    assert max(seen.lengths) <= embedder.max_chars
    assert embedder.max_chars < 16 * embedder.max_tokens * 4  # a few KB, never the text
    assert np.allclose(vectors[0], vectors[1], atol=1e-6)
    monkeypatch.undo()
    assert np.allclose(embedder.embed(["a short text"])[0], vectors[2], atol=1e-5)
