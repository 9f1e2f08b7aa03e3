"""The output reshape of a MatMul whose weight had unit leading dims, as onnxruntime adds it.

onnxruntime's quantizer (1.32) quantizes a MatMul weight of shape
``[1, ..., 1, K, N]`` as ``[K, N]``. ``MatMulNBits`` gives an output of A's
rank, where the MatMul broadcast to B's: when A's rank is not known to be at
least B's, it names the MatMulNBits output ``Y_pre_reshape`` and restores the
shape with a chain of Shape / Gather / Max / Sub / ConstantOfShape / Slice /
Concat / Reshape nodes (valid from opset 11) and seven int64 initializers,
under names derived from the node's. :func:`output_reshape` builds that chain,
the same nodes and initializers under the same names, so the model is the
one onnxruntime writes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["output_reshape", "static_rank"]


def static_rank(name: str, stack: list[onnx.GraphProto]) -> int | None:
    """The rank of ``name`` when a graph input, value_info or output of the graphs
    (innermost first) declares its shape; None otherwise."""
    for graph in reversed(stack):
        for value in [*graph.input, *graph.value_info, *graph.output]:
            if value.name == name:
                tensor_type = value.type.tensor_type
                return len(tensor_type.shape.dim) if tensor_type.HasField("shape") else None
    return None


def output_reshape(
    a: str, b_shape: list[int], prefix: str, pre_output: str, output: str
) -> tuple[list[onnx.TensorProto], list[onnx.NodeProto]]:
    """The initializers (for the weight's graph) and the nodes (after the
    MatMulNBits node) that reshape ``pre_output`` into ``output``: the shape
    ``[1] * max(rank(B) - max(rank(A), 2), 0) + A.shape[:-1] + [N]``.

    Args:
        a: the MatMul's A.
        b_shape: the weight's dims before they were squeezed.
        prefix: the names' prefix (the new node's name, or the weight's name
            plus ``_Q4`` when the node has none).
        pre_output: the MatMulNBits node's output.
        output: the MatMul's output.
    """
    p = f"{prefix}_{output}"
    values = {
        "zero": np.array(0, np.int64),
        "one": np.array(1, np.int64),
        "two": np.array(2, np.int64),
        "one_vec": np.array([1], np.int64),
        "rank_b": np.array(len(b_shape), np.int64),
        "n_vec": np.array([b_shape[-1]], np.int64),
        "zero_vec": np.array([0], np.int64),
    }
    inits = [numpy_helper.from_array(v, f"{p}_{k}") for k, v in values.items()]

    def n(op, inputs, out, suffix, **attrs):
        return helper.make_node(op, inputs, [out], name=f"{p}_{suffix}", **attrs)

    one = helper.make_tensor(f"{p}_one_value", onnx.TensorProto.INT64, [1], [1])
    nodes = [
        n("Shape", [a], f"{p}_a_shape", "shape_a"),
        n("Shape", [f"{p}_a_shape"], f"{p}_a_shape_of_shape", "shape_of_a_shape"),
        n("Gather", [f"{p}_a_shape_of_shape", f"{p}_zero"], f"{p}_a_rank", "gather_rank"),
        n("Max", [f"{p}_a_rank", f"{p}_two"], f"{p}_a_rank_eff", "max_rank_eff"),
        n("Sub", [f"{p}_rank_b", f"{p}_a_rank_eff"], f"{p}_extra_raw", "sub"),
        n("Max", [f"{p}_extra_raw", f"{p}_zero"], f"{p}_extra_count", "max"),
        n("Reshape", [f"{p}_extra_count", f"{p}_one_vec"], f"{p}_extra_count_vec", "reshape_extra"),
        n("ConstantOfShape", [f"{p}_extra_count_vec"], f"{p}_extra_ones", "const_ones", value=one),
        n("Sub", [f"{p}_a_rank", f"{p}_one"], f"{p}_a_rank_m1", "sub_one"),
        n("Reshape", [f"{p}_a_rank_m1", f"{p}_one_vec"], f"{p}_a_rank_m1_vec", "reshape_rank_m1"),
        n(
            "Slice",
            [f"{p}_a_shape", f"{p}_zero_vec", f"{p}_a_rank_m1_vec", f"{p}_zero_vec"],
            f"{p}_a_prefix_shape",
            "slice_a_prefix",
        ),
        n(
            "Concat",
            [f"{p}_extra_ones", f"{p}_a_prefix_shape", f"{p}_n_vec"],
            f"{p}_target_shape",
            "concat_target",
            axis=0,
        ),
        n("Reshape", [pre_output, f"{p}_target_shape"], output, "reshape_out"),
    ]
    return inits, nodes
