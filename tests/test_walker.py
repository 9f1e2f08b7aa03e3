"""The tensor walker finds every tensor, wherever it is, without recursion."""

import numpy as np
import onnx
from helpers import make_every_kind_model
from onnx import helper, numpy_helper

from onnx_light.onnx._read.tensors import iter_tensors, path_to_str, tensor_nbytes


def test_every_kind_found_in_fixed_order():
    model = make_every_kind_model()
    paths = [path_to_str(s.path) for s in iter_tensors(model)]
    assert paths[:4] == [
        "graph.initializer[0]",
        "graph.initializer[1]",
        "graph.sparse_initializer[0].values",
        "graph.sparse_initializer[0].indices",
    ]
    for expected in [
        "graph.node[1].attribute[0].t",
        "graph.node[4].attribute[1].g.node[0].attribute[0].t",
        "graph.node[4].attribute[0].g.initializer[0]",
        "graph.node[6].attribute[0].tensors[1]",
        "graph.node[6].attribute[1].sparse_tensor.indices",
        "graph.node[6].attribute[2].sparse_tensors[0].values",
        "graph.node[6].attribute[3].graphs[0].initializer[0]",
        "graph.node[6].attribute[3].graphs[0].node[0].attribute[0].t",
        "training_info[0].initialization.initializer[0]",
        "functions[0].node[0].attribute[0].t",
    ]:
        assert expected in paths
    assert len(paths) == len(set(paths)) == 18
    assert paths == [path_to_str(s.path) for s in iter_tensors(model)]


def test_deep_nesting_does_not_recurse():
    depth = 3000
    model = onnx.ModelProto()
    graph = model.graph
    for _ in range(depth):
        att = graph.node.add(op_type="If").attribute.add(name="then_branch")
        att.type = onnx.AttributeProto.GRAPH
        graph = att.g
    graph.initializer.append(numpy_helper.from_array(np.ones(4), "leaf"))
    sites = list(iter_tensors(model))
    assert len(sites) == 1 and sites[0].tensor.name == "leaf"
    assert len(sites[0].path) == 3 * depth + 2


def test_tensor_nbytes():
    t = numpy_helper.from_array(np.zeros((3, 5), "float16"))
    assert tensor_nbytes(t) == 30
    t4 = helper.make_tensor("i4", onnx.TensorProto.INT4, [5], [1, 2, 3, 4, 5])
    assert tensor_nbytes(t4) == 3
    s = helper.make_tensor("s", onnx.TensorProto.STRING, [1], [b"x"])
    assert tensor_nbytes(s) is None
