"""Vectors are made once per text and kept in the database (SQLite and PostgreSQL): a send
whose papers were embedded at fetch time never loads the model."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from newsletter.config import Config, load_config
from newsletter.semantic.model import Embedder
from newsletter.semantic.vectors import VectorSource, paper_text, text_hash
from newsletter.store import Store
from tests.conftest import base_config, write_config
from tests.rank.relevance.corpus import load_papers

# Slow: the real sentence encoder embeds every paper, topic and example.
pytestmark = pytest.mark.slow

NOW = datetime(2026, 11, 17, 6, 0, tzinfo=UTC)


def config(tmp_path: Path, db_url: str, model_cache: Path, **ranking: Any) -> Config:
    data = base_config(db_url)
    data["ranking"] = {"model_cache": str(model_cache), **ranking}
    return load_config(write_config(tmp_path, data))


def test_each_text_is_embedded_once_and_stored(
    tmp_path: Path, store: Store, db_url: str, model_cache: Path, embedder: Embedder
) -> None:
    cfg = config(tmp_path, db_url, model_cache)
    papers = load_papers()[:12]
    seen: list[tuple[int, int]] = []
    first = VectorSource(cfg, store, lambda: NOW, progress=lambda d, n: seen.append((d, n)))
    assert first.embed_papers(papers) == 12 and first.loaded
    assert seen[-1] == (12, 12)
    stored = store.vectors(first.model, [text_hash(paper_text(p)) for p in papers])
    assert len(stored) == 12 and all(len(v) == 384 * 4 for v in stored.values())

    # A later process (a send) finds every vector and does not load the model.
    second = VectorSource(cfg, store, lambda: NOW)
    assert second.embed_papers(papers) == 0
    got = second.vectors([paper_text(p) for p in papers])
    assert got is not None and not second.loaded
    assert np.allclose(got, embedder.embed([paper_text(p) for p in papers]), atol=1e-5)

    # A revised abstract is a new text: embedded again, the old vector stays until pruned.
    revised = replace(papers[0], abstract=papers[0].abstract + " We also release the code.")
    assert second.embed_papers([revised, *papers[1:]]) == 1 and second.loaded
    assert store.put_vectors(second.model, {text_hash("x"): b"\0" * 8}, NOW) == 1
    assert store.put_vectors(second.model, {text_hash("x"): b"\1" * 8}, NOW) == 0  # kept
    assert store.prune_vectors(datetime(2030, 1, 1, tzinfo=UTC)) == 14


def test_the_run_gets_vectors_for_papers_topics_keywords_and_examples(
    tmp_path: Path, store: Store, db_url: str, model_cache: Path, embedder: Embedder
) -> None:
    cfg = config(tmp_path, db_url, model_cache)
    papers = load_papers()
    semantic = VectorSource(cfg, store, lambda: NOW).semantic(
        papers[:30], cfg.settings.topics, papers[30:33]
    )
    assert semantic is not None
    assert semantic.papers.shape == (30, 384)
    assert semantic.topics.shape == (len(cfg.settings.topics), 384)
    assert set(semantic.examples) == {p.key for p in papers[30:33]}
    assert [set(k) for k in semantic.keywords] == [{"CUDA", "GEMM"}, {"NeRF", "rendering"}]


def test_semantic_false_is_lexical_and_says_so(
    tmp_path: Path, store: Store, db_url: str, model_cache: Path
) -> None:
    cfg = config(tmp_path, db_url, model_cache, semantic=False)
    source = VectorSource(cfg, store, lambda: NOW)
    assert source.state == "ranking is lexical: ranking.semantic is false"
    assert source.semantic(load_papers()[:3], cfg.settings.topics) is None
    assert source.embed_papers(load_papers()[:3]) == 0 and not source.loaded


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_model_that_cannot_be_found_leaves_ranking_lexical(
    tmp_path: Path, store: Store, db_url: str, model_cache: Path
) -> None:
    cfg = config(tmp_path, db_url, model_cache, model="models/minilm")
    source = VectorSource(cfg, store, lambda: NOW)
    assert source.check().startswith("ranking is lexical: ranking.model: models/minilm is not")
    assert source.semantic(load_papers()[:3], cfg.settings.topics) is None
    assert source.problem is not None and "ranking is lexical" in source.problem


def test_a_send_has_a_child_process_embed_what_no_fetch_stored(
    tmp_path: Path,
    store: Store,
    db_url: str,
    model_cache: Path,
    embedder: Embedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 41: papers stored without their vectors (as bench.million stored them) made the
    send load the model itself (510 MB peak for a million digests). The send's source says so
    in one line and a child process embeds and stores them; the send reads them back and never
    loads the model."""
    cfg = config(tmp_path, db_url, model_cache)
    papers = load_papers()[:6]
    texts = [paper_text(p) for p in papers]
    send = VectorSource(cfg, store, lambda: NOW, child=True)
    with caplog.at_level("WARNING", logger="newsletter.semantic.vectors"):
        got = send.vectors(texts)
    assert got is not None and not send.loaded and send.embedded == 6
    [line] = [r.getMessage() for r in caplog.records]
    assert "6 of the send's 6 texts have no stored vector" in line and "child process" in line
    assert np.allclose(got, embedder.embed(texts), atol=1e-5)
    stored = store.vectors(send.model, [text_hash(t) for t in texts])
    assert len(stored) == 6  # stored by the child, under the model name the send reads
