"""A BERT sentence encoder's weights (``model.safetensors``) as an ONNX graph, without torch.

Sentence-transformers models such as all-MiniLM-L6-v2 are published as a BERT encoder's
weights (``model.safetensors`` and ``config.json``) beside a ``tokenizer.json``. ONNX Runtime
runs a graph, not weights, and the usual way to get one (``torch.onnx.export``) needs torch,
which a plain ``pip install torch`` turns into gigabytes of GPU wheels. This module writes the
encoder's forward pass as an ONNX graph directly with the ``onnx`` package's helpers: the
embeddings, then each layer's self-attention and feed-forward block with their post-layer
normalisations, exactly as Hugging Face's ``BertModel`` computes them (GELU in its exact erf
form). Its input and output names are those of the ONNX files Hugging Face publishes
(``input_ids``, ``attention_mask``, ``token_type_ids`` → ``last_hidden_state``), so either kind
of file runs through the same :class:`~newsletter.semantic.model.Embedder`.

The safetensors file is read with NumPy (an 8-byte header length, a JSON header, raw
little-endian tensors), so the ``safetensors`` package is not needed either.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64}
OPSET = 17
"""LayerNormalization is an ONNX operator from opset 17 on (ONNX Runtime 1.14+)."""


def read_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """Every tensor of a ``.safetensors`` file, as NumPy arrays (float16 and float32 kept)."""
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    out: dict[str, npt.NDArray[Any]] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}, not supported")
        start, stop = info["data_offsets"]
        out[name] = np.frombuffer(data[start:stop], dtype=dtype).reshape(info["shape"])
    return out


def bert_to_onnx(model_dir: Path, target: Path) -> None:
    """Write ``model_dir``'s BERT encoder (``config.json``, ``model.safetensors``) to ``target``
    as an ONNX model. Raises ``ValueError`` for a model that is not a plain BERT encoder."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    if config.get("model_type") != "bert" or config.get("hidden_act", "gelu") != "gelu":
        raise ValueError(
            f"{model_dir}: not a BERT encoder with GELU (model_type "
            f"{config.get('model_type')!r}); give a directory with an ONNX file instead"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"{model_dir}: only absolute position embeddings are supported")
    weights = read_safetensors(model_dir / "model.safetensors")
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    layers = int(config["num_hidden_layers"])
    eps = float(config.get("layer_norm_eps", 1e-12))
    head_dim = hidden // heads

    inits: list[Any] = []
    nodes: list[Any] = []
    counter = iter(range(1_000_000))

    def w(name: str, array: npt.NDArray[Any]) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(name: str, transpose: bool = False) -> str:
        array = weights[prefix + name].astype(np.float32)
        return w(name, array.T if transpose else array)

    def node(op: str, inputs: list[str], **attrs: Any) -> str:
        out = f"{op.lower()}_{next(counter)}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def linear(x: str, name: str) -> str:
        return node(
            "Add", [node("MatMul", [x, weight(f"{name}.weight", True)]), weight(f"{name}.bias")]
        )

    def layer_norm(x: str, name: str) -> str:
        return node(
            "LayerNormalization",
            [x, weight(f"{name}.weight"), weight(f"{name}.bias")],
            axis=-1,
            epsilon=eps,
        )

    # Embeddings: word + position (0..S-1) + token type, then LayerNorm.
    length = node("Shape", ["input_ids"], start=1, end=2)  # [S], 1-D
    zero = w("zero", np.array([0], dtype=np.int64))
    positions = node("Slice", [weight("embeddings.position_embeddings.weight"), zero, length, zero])
    x = node(
        "Add",
        [
            node(
                "Add",
                [
                    node("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"]),
                    positions,
                ],
            ),
            node("Gather", [weight("embeddings.token_type_embeddings.weight"), "token_type_ids"]),
        ],
    )
    x = layer_norm(x, "embeddings.LayerNorm")

    # Padding is masked with a large negative bias on the attention scores: (1 - mask) · -1e4.
    mask = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = node(
        "Mul",
        [
            node("Sub", [w("f_one", np.array(1.0, np.float32)), mask]),
            w("neg", np.array(-1e4, np.float32)),
        ],
    )
    bias = node("Unsqueeze", [bias, w("axes_1_2", np.array([1, 2], dtype=np.int64))])
    split = w("split_heads", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge = w("merge_heads", np.array([0, 0, hidden], dtype=np.int64))
    scale = w("scale", np.array(1.0 / math.sqrt(head_dim), np.float32))
    root2 = w("root2", np.array(math.sqrt(2.0), np.float32))
    half = w("half", np.array(0.5, np.float32))

    for i in range(layers):
        p = f"encoder.layer.{i}"

        def heads_of(name: str, perm: list[int], x: str = x, p: str = p) -> str:
            return node(
                "Transpose", [node("Reshape", [linear(x, f"{p}.{name}"), split])], perm=perm
            )

        q = heads_of("attention.self.query", [0, 2, 1, 3])
        k = heads_of("attention.self.key", [0, 2, 3, 1])
        v = heads_of("attention.self.value", [0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k]), scale]), bias])
        probs = node("Softmax", [scores], axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = node("Reshape", [context, merge])
        x = layer_norm(
            node("Add", [linear(context, f"{p}.attention.output.dense"), x]),
            f"{p}.attention.output.LayerNorm",
        )
        h = linear(x, f"{p}.intermediate.dense")
        h = node(
            "Mul",
            [
                node("Mul", [h, half]),
                node("Add", [node("Erf", [node("Div", [h, root2])]), "f_one"]),
            ],
        )
        x = layer_norm(node("Add", [linear(h, f"{p}.output.dense"), x]), f"{p}.output.LayerNorm")

    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    ints = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    out = helper.make_tensor_value_info(
        "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden]
    )
    graph = helper.make_graph(nodes, "bert_encoder", ints, [out], initializer=inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="newsletter"
    )
    model.ir_version = 8  # readable by ONNX Runtime 1.14 and later
    onnx.checker.check_model(model, full_check=False)
    target.parent.mkdir(parents=True, exist_ok=True)
    # a name of this process's own: two processes converting the same weights at once (two
    # test workers, two services starting together) each write theirs, and the last rename wins
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        onnx.save(model, str(tmp))
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
