"""Synthetic models for examples, benchmarks and tests."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_gemm_model(
    n_weights: int = 24, dim: int = 1024, seed: int = 0, opset: int = 18, lead_table: int = 0
) -> onnx.ModelProto:
    """A chain of ``n_weights`` Gemm nodes, each with a ``dim x dim`` float32 weight.

    ``Y = Gemm(...Gemm(X, W0, B0)..., W{n-1}, B{n-1})`` with ``X`` of shape
    ``[batch, dim]``; biases are small (``dim`` floats). The weights are scaled
    so the outputs stay finite. The model weighs ``n_weights * dim * dim * 4``
    bytes (24 x 1024 x 1024 = 96 MiB).

    Args:
        n_weights: number of Gemm nodes (and weights).
        dim: size of each square weight.
        seed: seed of the random weights.
        opset: the ONNX opset.
        lead_table: bytes of an int64 table (a multiple of 8) placed before
            the weights, as exporters often write a small table or bias
            first: saved as external data, no weight then starts on a page.

    Returns:
        The model, every weight inline in ``raw_data``.
    """
    rng = np.random.default_rng(seed)
    scale = np.float32(1.0 / np.sqrt(dim))
    inits, nodes = [], []
    if lead_table:
        table = np.arange(lead_table // 8, dtype=np.int64)
        inits.append(numpy_helper.from_array(table, "lead_table"))
    x = "X"
    for i in range(n_weights):
        w = (rng.standard_normal((dim, dim), dtype=np.float32) * scale).astype(np.float32)
        b = rng.standard_normal(dim, dtype=np.float32) * np.float32(0.01)
        inits += [numpy_helper.from_array(w, f"W{i}"), numpy_helper.from_array(b, f"B{i}")]
        y = "Y" if i == n_weights - 1 else f"H{i}"
        nodes.append(helper.make_node("Gemm", [x, f"W{i}", f"B{i}"], [y], name=f"gemm{i}"))
        x = y
    graph = helper.make_graph(
        nodes,
        "gemm_chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def model_inputs(dim: int = 1024, batch: int = 2, seed: int = 1) -> dict[str, np.ndarray]:
    """Inputs for :func:`make_gemm_model`: ``{"X": float32 [batch, dim]}``."""
    rng = np.random.default_rng(seed)
    return {"X": rng.standard_normal((batch, dim), dtype=np.float32)}


def make_many_tensors_model(n_tensors: int, folder: str, name: str = "model.onnx") -> str:
    """Write a two-file model of ``n_tensors`` float32 tensors of 16 values each.

    A 100-byte table comes first, so no tensor starts on a page. The data
    file is written in one go and the references set by hand: ``onnx.save``
    of 200,000 external tensors takes tens of seconds.

    Args:
        n_tensors: how many tensors.
        folder: an existing folder.
        name: the model file's name; the data is ``name + ".data"``.

    Returns:
        The path of the model file.
    """
    rng = np.random.default_rng(0)
    size, lead = 64, 100
    location = name + ".data"
    inits = []
    for i, off in enumerate(range(lead, lead + n_tensors * size, size)):
        t = TensorProto(name=f"t{i}", data_type=TensorProto.FLOAT, dims=[16])
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(off)), ("length", "64")):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        inits.append(t)
    out = helper.make_tensor_value_info("t0", TensorProto.FLOAT, [16])
    model = helper.make_model(helper.make_graph([], "many", [], [out], inits))
    with open(os.path.join(folder, location), "wb") as f:
        f.write(bytes(lead))
        f.write(rng.standard_normal(n_tensors * 16, dtype=np.float32).tobytes())
    path = os.path.join(folder, name)
    onnx.save(model, path)
    return path


def weights_nbytes(n_weights: int, dim: int) -> int:
    """Bytes of weights (biases included) of ``make_gemm_model(n_weights, dim)``."""
    return n_weights * (dim * dim + dim) * 4


def make_forest_model(n_nodes: int = 500_000, seed: int = 0) -> onnx.ModelProto:
    """A tree ensemble as scikit-learn converters write it: millions of small fields.

    One ``ai.onnx.ml`` ``TreeEnsembleRegressor`` node whose attributes list
    every node of the forest (ids, features, modes, thresholds, targets) as
    unpacked repeated fields, the layout that makes a metadata scan visit
    one field per value. No weights at all: 500,000 nodes weigh about 21 MB.

    Args:
        n_nodes: number of tree nodes (1,000 per tree).
        seed: seed of the random values.

    Returns:
        The model (onnxruntime can run it on inputs of shape ``[batch, 50]``).
    """
    rng = np.random.default_rng(seed)
    ids = np.arange(n_nodes)
    leaves = n_nodes // 2
    node = helper.make_node(
        "TreeEnsembleRegressor",
        ["X"],
        ["Y"],
        domain="ai.onnx.ml",
        nodes_featureids=rng.integers(0, 50, n_nodes).tolist(),
        nodes_modes=[b"BRANCH_LEQ" if i % 2 else b"LEAF" for i in range(n_nodes)],
        nodes_nodeids=(ids % 1000).tolist(),
        nodes_treeids=(ids // 1000).tolist(),
        nodes_truenodeids=rng.integers(0, 1000, n_nodes).tolist(),
        nodes_falsenodeids=rng.integers(0, 1000, n_nodes).tolist(),
        nodes_values=rng.standard_normal(n_nodes).astype(np.float32).tolist(),
        nodes_hitrates=[1.0] * n_nodes,
        nodes_missing_value_tracks_true=[0] * n_nodes,
        target_ids=[0] * leaves,
        target_nodeids=(ids[:leaves] % 1000).tolist(),
        target_treeids=(ids[:leaves] // 1000).tolist(),
        target_weights=rng.standard_normal(leaves).astype(np.float32).tolist(),
        n_targets=1,
        post_transform="NONE",
    )
    graph = helper.make_graph(
        [node],
        "forest",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 50])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 1])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model
