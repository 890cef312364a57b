"""The model cache is keyed by the weights' content (issue 43): the same weights installed in
several virtual environments share one ONNX file, changed weights get their own, ``status``
says where the cache is and how big, and ``newsletter cache clean`` empties it.

The weights are a tiny BERT encoder (one layer, 8 dimensions) written here as a real
``model.safetensors``: turning it into ONNX takes milliseconds, and it goes through the same
export and cache as all-MiniLM-L6-v2's 87 MB."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from newsletter.cli import cli
from newsletter.semantic.cache import HASHES, clean, entry_for, file_hash, usage
from newsletter.semantic.model import locate
from tests.conftest import base_config, write_config

HIDDEN, INTERMEDIATE, VOCAB, POSITIONS = 8, 16, 12, 16


def tiny_bert(folder: Path, seed: int = 0) -> Path:
    """A BERT encoder's folder (config.json, model.safetensors, tokenizer.json) with random
    weights from ``seed``."""
    rng = np.random.default_rng(seed)
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (VOCAB, HIDDEN),
        "embeddings.position_embeddings.weight": (POSITIONS, HIDDEN),
        "embeddings.token_type_embeddings.weight": (2, HIDDEN),
        "embeddings.LayerNorm.weight": (HIDDEN,),
        "embeddings.LayerNorm.bias": (HIDDEN,),
    }
    p = "encoder.layer.0"
    for name in ("attention.self.query", "attention.self.key", "attention.self.value"):
        shapes |= {f"{p}.{name}.weight": (HIDDEN, HIDDEN), f"{p}.{name}.bias": (HIDDEN,)}
    shapes |= {
        f"{p}.attention.output.dense.weight": (HIDDEN, HIDDEN),
        f"{p}.attention.output.dense.bias": (HIDDEN,),
        f"{p}.attention.output.LayerNorm.weight": (HIDDEN,),
        f"{p}.attention.output.LayerNorm.bias": (HIDDEN,),
        f"{p}.intermediate.dense.weight": (INTERMEDIATE, HIDDEN),
        f"{p}.intermediate.dense.bias": (INTERMEDIATE,),
        f"{p}.output.dense.weight": (HIDDEN, INTERMEDIATE),
        f"{p}.output.dense.bias": (HIDDEN,),
        f"{p}.output.LayerNorm.weight": (HIDDEN,),
        f"{p}.output.LayerNorm.bias": (HIDDEN,),
    }
    header: dict[str, object] = {}
    data = b""
    for name, shape in shapes.items():
        raw = rng.standard_normal(shape).astype("<f4").tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(shape),
            "data_offsets": [len(data), len(data) + len(raw)],
        }
        data += raw
    encoded = json.dumps(header).encode()
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)
    config = {
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": HIDDEN,
        "num_attention_heads": 2,
        "num_hidden_layers": 1,
        "intermediate_size": INTERMEDIATE,
        "vocab_size": VOCAB,
        "max_position_embeddings": POSITIONS,
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")  # locate() only checks that it is there
    return folder


@pytest.fixture
def runtime() -> None:
    """Turning weights into ONNX needs the semantic extra (onnx, onnxruntime, tokenizers)."""
    for module in ("onnx", "onnxruntime", "tokenizers"):
        pytest.importorskip(module, reason=f"{module} (semantic extra) is not installed")


def entries(cache: Path) -> list[str]:
    return sorted(p.parent.name for p in cache.glob("*/model.onnx"))


def test_two_copies_of_the_same_weights_share_one_cache_entry(
    tmp_path: Path, runtime: None
) -> None:
    """The issue's case: every virtual environment ships its own copy of the weights (its own
    path, its own mtime), and each added 87 MB to the cache. Now the second copy finds the
    first one's ONNX file and writes nothing."""
    cache = tmp_path / "cache"
    first = tiny_bert(tmp_path / "venv1" / "site-packages" / "minilm")
    second = tmp_path / "venv2" / "lib" / "other-name"
    shutil.copytree(first, second)
    os.utime(second / "model.safetensors", ns=(1_000_000_000, 1_000_000_000))
    assert (first / "model.safetensors").stat().st_mtime_ns != (
        second / "model.safetensors"
    ).stat().st_mtime_ns

    one = locate(str(first), cache)
    written = one.onnx.stat().st_mtime_ns
    two = locate(str(second), cache)
    assert two.onnx == one.onnx and one.onnx.is_relative_to(cache)
    assert one.onnx.stat().st_mtime_ns == written  # not written again
    assert len(entries(cache)) == 1
    assert (one.name, two.name) == ("minilm", "other-name")  # vectors keep the model's name

    import onnxruntime as ort  # the shared entry is a model that runs

    session = ort.InferenceSession(str(one.onnx), providers=["CPUExecutionProvider"])
    ids = np.array([[1, 2, 3]], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}
    assert session.run(["last_hidden_state"], feed)[0].shape == (1, 3, HIDDEN)


def test_changed_weights_get_a_new_entry_even_with_the_same_size_and_mtime(
    tmp_path: Path, runtime: None
) -> None:
    cache = tmp_path / "cache"
    folder = tiny_bert(tmp_path / "model")
    before = locate(str(folder), cache).onnx
    weights = folder / "model.safetensors"
    stat = weights.stat()
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0xFF  # one byte of the last tensor
    weights.write_bytes(bytes(raw))
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # size and mtime as they were
    after = locate(str(folder), cache).onnx
    assert after != before and after.is_file()
    assert len(entries(cache)) == 2
    # Other weights altogether: a third entry; config.json is part of the key too.
    other = locate(str(tiny_bert(tmp_path / "other", seed=1)), cache).onnx
    assert other not in (before, after)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-6}))
    assert entry_for(folder, cache) != after


def test_a_files_hash_is_computed_once_and_remembered(tmp_path: Path) -> None:
    """``hashes.json`` remembers each weights file's SHA-256 by its path, size, mtime and
    ctime: while they stay, the file is not read again (shown here by a remembered hash that
    is not the file's: it is used as it is)."""
    cache = tmp_path / "cache"
    folder = tiny_bert(tmp_path / "model")
    weights = (folder / "model.safetensors").resolve()
    real = file_hash(weights, cache)
    import hashlib

    assert real == hashlib.sha256(weights.read_bytes()).hexdigest()
    remembered = json.loads((cache / HASHES).read_text())
    assert remembered[str(weights)]["sha256"] == real
    remembered[str(weights)]["sha256"] = "0" * 64
    (cache / HASHES).write_text(json.dumps(remembered))
    assert file_hash(weights, cache) == "0" * 64  # read from hashes.json, not from the file
    os.utime(weights, ns=(0, 0))  # the file changed (as far as its stamp says): hashed again
    assert file_hash(weights, cache) == real
    # A removed copy's line is dropped the next time the file is written.
    gone = tiny_bert(tmp_path / "gone")
    file_hash(gone / "model.safetensors", cache)
    shutil.rmtree(gone)
    file_hash(tiny_bert(tmp_path / "third") / "model.safetensors", cache)
    assert not any("gone" in p for p in json.loads((cache / HASHES).read_text()))
    # An unreadable hashes.json is no error: the file is hashed again.
    (cache / HASHES).write_text("{not json")
    assert file_hash(weights, cache) == real


def fill(cache: Path) -> int:
    """A cache with one current entry, one made before content keys, the hashes file and a
    file of someone else's; returns the bytes of what the cache itself wrote."""
    (cache / "onnx-0123456789abcdef").mkdir(parents=True)
    (cache / "onnx-0123456789abcdef" / "model.onnx").write_bytes(b"\0" * 3000)
    (cache / "all-MiniLM-L6-v2-0123456789ab").mkdir()
    (cache / "all-MiniLM-L6-v2-0123456789ab" / "model.onnx").write_bytes(b"\0" * 2000)
    (cache / HASHES).write_text("{}")
    (cache / "notes.txt").write_text("mine\n")
    return 3000 + 2000 + 2


def test_usage_counts_entries_and_clean_removes_only_what_the_cache_wrote(
    tmp_path: Path,
) -> None:
    cache = tmp_path / "models"
    assert usage(cache).line() == f"{cache}, empty"
    ours = fill(cache)
    found = usage(cache)
    assert (found.entries, found.old, found.bytes) == (2, 1, ours + 5)
    assert found.line() == f"{cache}, 0.0 MB in 2 models (1 of them old and never used again)"
    removed = clean(cache)
    assert (removed.entries, removed.old, removed.bytes) == (2, 1, ours)
    assert sorted(p.name for p in cache.iterdir()) == ["notes.txt"]  # not the cache's
    (cache / "notes.txt").unlink()
    fill(cache)
    (cache / "notes.txt").unlink()
    clean(cache)
    assert not cache.exists()  # nothing else was in it: the folder goes too


def test_status_shows_the_cache_and_clean_empties_it(
    tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an operator types: ``status`` (text and JSON) names the folder and its size,
    ``cache show`` too, ``cache clean`` empties it (the old entries as well)."""
    cache = tmp_path / "models"
    ours = fill(cache)
    data = base_config(db_url)
    data["ranking"] = {"model_cache": "models"}  # relative to the config's folder
    path = str(write_config(tmp_path, data))
    runner = CliRunner()
    assert runner.invoke(cli, ["--config", path, "db", "upgrade"]).exit_code == 0
    result = runner.invoke(cli, ["--config", path, "status"])
    assert result.exit_code == 0, result.output
    assert (
        f"Model cache: {cache}, 0.0 MB in 2 models (1 of them old and never used again); "
        "'newsletter cache clean' empties it." in result.output
    )
    shown = json.loads(runner.invoke(cli, ["--config", path, "status", "--json"]).output)
    # Every file under the folder (status itself may have remembered the installed model's
    # weights hash in hashes.json: that is part of the cache too).
    on_disk = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert on_disk >= ours + 5
    assert shown["model_cache"] == {
        "path": str(cache),
        "bytes": on_disk,
        "entries": 2,
        "old_entries": 1,
    }
    result = runner.invoke(cli, ["cache", "show", "--config", path])
    assert result.exit_code == 0, result.output
    assert f"Model cache (ranking.model_cache in {Path(path).resolve()}): {cache}, " in (
        result.output
    )
    result = runner.invoke(cli, ["cache", "clean", "--config", path])
    assert result.exit_code == 0, result.output
    assert f"Removed 2 models (0.0 MB) from {cache}." in result.output
    assert [p.name for p in cache.iterdir()] == ["notes.txt"]
    result = runner.invoke(cli, ["--config", path, "status"])
    assert f"Model cache: {cache}, 0.0 MB in 0 models." in result.output
    again = runner.invoke(cli, ["cache", "clean", "-c", path])
    assert f"Model cache {cache}: nothing to remove." in again.output


def test_without_a_config_the_cache_commands_use_the_default_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A developer's machine with no instance set up: ``cache clean`` still finds
    ``$XDG_CACHE_HOME/newsletter/models`` (``~/.cache`` when unset)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEWSLETTER_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = tmp_path / "xdg" / "newsletter" / "models"
    fill(cache)
    runner = CliRunner()
    shown = runner.invoke(cli, ["cache", "show"])
    assert shown.exit_code == 0, shown.output
    assert f"Model cache (the default location; no config file here): {cache}, " in shown.output
    removed = runner.invoke(cli, ["cache", "clean"])
    assert removed.exit_code == 0, removed.output
    assert f"Removed 2 models (0.0 MB) from {cache}." in removed.output
    again = runner.invoke(cli, ["cache", "clean"])
    assert f"Model cache {cache}: nothing to remove." in again.output
