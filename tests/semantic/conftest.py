"""Semantic ranking needs the ``semantic`` extra and a model; tests that run the model skip,
saying why, when either is missing (``make test`` installs both)."""

from __future__ import annotations

from pathlib import Path

import pytest

from newsletter.semantic.model import DEFAULT_MODEL, Embedder, ModelUnavailable, locate


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder for the model's ONNX form, shared by the session's tests."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def embedder(model_cache: Path) -> Embedder:
    """The default model on ONNX Runtime; skips when the extra or the model is missing."""
    try:
        return Embedder(locate(DEFAULT_MODEL, model_cache))
    except ModelUnavailable as e:
        pytest.skip(str(e))
