"""The float16 graph rules (``_graph/float16.py``) against onnxruntime's own converter.

Each model is built with its weights inline. onnxruntime's converter runs on a
copy; ours runs on the same model saved with every tensor external and loaded
without its weights, then the test converts the external bytes with
:func:`clip_to_float16` into a new weights file (the caller's job in the
library). Compared: the nodes (op type, inputs, outputs, attributes, names, over
every graph), the initializers (bytes included), the graph's input and output
types, the checker, and onnxruntime's outputs bit for bit.
"""

from __future__ import annotations

import collections
import os

import numpy as np
import onnx
import pytest
from helpers import float16_converter_since
from onnx import TensorProto, helper, numpy_helper

from onnx_light.onnx._graph.float16 import DEFAULT_OP_BLOCK_LIST, convert_graph
from onnx_light.onnx._write.clip import clip_to_float16

ort = pytest.importorskip("onnxruntime")
float16 = pytest.importorskip("onnxruntime.transformers.float16")

F, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64
EDGES = np.array(
    [0.0, -0.0, 1.0, -2.5, 5.96e-08, -5.96e-08, 2.9802322e-08, 4e-08, -4e-08, 1e-9, -1e-45,
     1e-45, 6.1e-05, 65504.0, -65504.0, 65519.0, 65520.0, -65520.0, 1e30, -1e30,
     3.4028235e38, np.inf, -np.inf, np.nan, -np.nan],
    dtype=np.float32,
)  # fmt: skip
PAYLOADS = np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0x7FBFFFFF], np.uint32).view(np.float32)


def _w(rng, *shape, scale=0.1):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


# --- the comparison ------------------------------------------------------------------


def _ort_convert(model, **kw):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return float16.convert_float_to_float16(copy, **kw)


def _ours(model, folder, **kw):
    """Ours on the model saved with every tensor external, loaded without its weights."""
    os.makedirs(folder, exist_ok=True)
    src = os.path.join(folder, "m.onnx")
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save(
        copy,
        src,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="m.data",
        size_threshold=0,
        convert_attribute=True,  # attribute tensors too
    )
    light = onnx.load(src, load_external_data=False)
    result = convert_graph(light, **kw)
    return light, result


def _convert_bytes(model, result, folder, mpv=5.96e-08, mfv=65504.0):
    """The caller's part: convert the external float32 bytes of the retyped tensors into
    a new weights file, save, return the path and the counts of clipped values. The
    tensors that keep their dtype are put inline (onnxruntime cannot run a TopK whose K,
    or a Resize whose scales, are external: its shape inference reads them)."""
    converted = {id(t) for _, t in result.external}
    out = bytearray()
    clipped = {}
    for tensor in _all_tensors(model):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        entries = {e.key: e.value for e in tensor.external_data}
        with open(os.path.join(folder, entries["location"]), "rb") as f:
            f.seek(int(entries.get("offset", 0)))
            data = f.read(int(entries["length"])) if "length" in entries else f.read()
        del tensor.external_data[:]
        if id(tensor) not in converted:
            tensor.data_location = TensorProto.DEFAULT
            tensor.raw_data = data
            continue
        half, count = clip_to_float16(np.frombuffer(data, "<f4"), mpv, mfv)
        clipped[tensor.name] = count
        for key, value in (("location", "m16.data"), ("offset", len(out)), ("length", half.nbytes)):
            tensor.external_data.add(key=key, value=str(value))
        out += half.tobytes()
    with open(os.path.join(folder, "m16.data"), "wb") as f:
        f.write(out)
    path = os.path.join(folder, "m16.onnx")
    onnx.save(model, path)
    return path, clipped


def _all_tensors(model):
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        yield from graph.initializer
        for node in graph.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)


def _graphs(model):
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        yield graph
        for node in graph.node:
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)


def _tensor_key(t):
    return (
        t.name,
        t.data_type,
        tuple(t.dims),
        t.raw_data,
        tuple(t.int32_data),
        tuple(t.float_data),
    )


def _node_key(node):
    attributes = []
    for a in sorted(node.attribute, key=lambda a: a.name):
        if a.type == onnx.AttributeProto.TENSOR:
            value = _tensor_key(a.t)
        elif a.type == onnx.AttributeProto.TENSORS:
            value = tuple(_tensor_key(t) for t in a.tensors)
        elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            value = "graph"  # its nodes are compared with every other node
        else:
            value = repr(helper.get_attribute_value(a))
        attributes.append((a.name, a.type, value))
    return (node.op_type, node.domain, node.name, tuple(node.input), tuple(node.output),
            tuple(attributes))  # fmt: skip


def _inlined(path):
    """The model at ``path`` with its external bytes in memory (to compare tensors)."""
    model = onnx.load(path)
    for tensor in _all_tensors(model):
        tensor.ClearField("data_location")
    return model


def _io(model):
    return [
        (v.name, v.type.tensor_type.elem_type) for v in (*model.graph.input, *model.graph.output)
    ]


def _value_types(model):
    return {
        (v.name, v.type.tensor_type.elem_type)
        for g in _graphs(model)
        for v in (*g.input, *g.output, *g.value_info)
    }


def _nodes(model):
    """Every node of every graph, as comparable keys (a multiset)."""
    return collections.Counter(_node_key(n) for g in _graphs(model) for n in g.node)


def _initializers(model):
    return collections.Counter(_tensor_key(t) for g in _graphs(model) for t in g.initializer)


def compare(model, tmp_path, feeds=None, runs=True, **kw):
    """Ours against onnxruntime's converter on ``model``.

    Returns:
        (our model with its converted bytes inline, convert_graph's result, the path of
        our model, {external tensor: values the clip changed in its bytes})
    """
    theirs = _ort_convert(model, **kw)
    light, result = _ours(model, str(tmp_path), **kw)
    mpv = kw.get("min_positive_val", 5.96e-08)
    mfv = kw.get("max_finite_val", 65504.0)
    path, clipped = _convert_bytes(light, result, str(tmp_path), mpv, mfv)
    ours = _inlined(path)
    for t in _all_tensors(theirs):
        t.ClearField("data_location")
    assert _nodes(ours) == _nodes(theirs)
    assert _initializers(ours) == _initializers(theirs)
    assert _io(ours) == _io(theirs)
    assert _value_types(ours) >= {v for v in _value_types(theirs) if v[1]}
    onnx.checker.check_model(path)
    for graph in _graphs(ours):  # each new Cast's value_info in its own graph
        known = {v.name for v in (*graph.input, *graph.output, *graph.value_info)}
        for node in graph.node:
            if node.op_type == "Cast" and node.name.endswith(("_cast_to_fp32_node", "_fp16_node")):
                assert node.output[0] in known, node.name
    if runs:
        expected = ort.InferenceSession(theirs.SerializeToString()).run(None, feeds)
        got = ort.InferenceSession(path).run(None, feeds)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes()
    return ours, result, path, clipped


def _sorted_error(model):
    """The checker's complaint about ``model`` (None: it passes)."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        return str(e)
    return None


# --- models --------------------------------------------------------------------------


def chain_model(seed=0):
    """MatMul, Add, a tanh Gelu, a Constant, a Cast (to float) of an int64 input."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "B"], ["h2"], name="add"),
        helper.make_node("Mul", ["h2", "h2"], ["sq"], name="sq"),
        helper.make_node("Mul", ["sq", "h2"], ["cube"], name="cube"),
        helper.make_node("Constant", [], ["c"], name="const",
                         value=_init("cv", np.float32(0.044715))),
        helper.make_node("Mul", ["cube", "c"], ["t0"], name="t0"),
        helper.make_node("Add", ["h2", "t0"], ["t1"], name="t1"),
        helper.make_node("Tanh", ["t1"], ["t2"], name="tanh"),
        helper.make_node("Add", ["t2", "one"], ["t3"], name="t3"),
        helper.make_node("Mul", ["h2", "t3"], ["t4"], name="t4"),
        helper.make_node("Mul", ["t4", "half"], ["g"], name="gelu"),
        helper.make_node("Cast", ["n"], ["nf"], name="cast", to=F),
        helper.make_node("Add", ["g", "nf"], ["y"], name="out"),
    ]  # fmt: skip
    inits = [
        _init("W", _w(rng, 16, 8)),
        _init("B", _w(rng, 8)),
        _init("one", np.float32(1.0)),
        _init("half", np.float32(0.5)),
    ]
    model = _model(
        nodes, [_vi("x", F, [2, 16]), _vi("n", I64, [2, 8])], [_vi("y", F, [2, 8])], inits
    )
    feeds = {"x": _w(rng, 2, 16, scale=1.0), "n": rng.integers(-3, 3, (2, 8))}
    return model, feeds


def test_a_chain_converts_as_onnxruntime_converts_it(tmp_path):
    model, feeds = chain_model()
    feeds["x"] = feeds["x"].astype(np.float16)
    ours, result, *_ = compare(model, tmp_path, feeds)
    assert {i.name: i.data_type for i in ours.graph.initializer} == dict.fromkeys(
        ["W", "B", "one", "half"], F16
    )
    assert sorted(name for name, _ in result.external) == ["B", "W", "cv", "half", "one"]
    cast = next(n for n in ours.graph.node if n.name == "cast")
    assert helper.get_attribute_value(cast.attribute[0]) == F16  # Cast(to=float) -> float16
    assert [v.type.tensor_type.elem_type for v in ours.graph.input] == [F16, I64]


@pytest.mark.parametrize("keep", [True, ["x"], ["y"], ("x", "y")])
def test_keep_io_types_adds_casts_before_their_consumers(tmp_path, keep):
    model, feeds = chain_model()
    if not (keep is True or "x" in keep):
        feeds["x"] = feeds["x"].astype(np.float16)
    ort_keep = list(keep) if isinstance(keep, tuple) else keep  # onnxruntime: a list only
    ours, *_ = compare(model, tmp_path, feeds, keep_io_types=ort_keep)
    names = [n.name for n in ours.graph.node]
    kept_x = keep is True or "x" in keep
    if kept_x:  # right before MatMul, its first consumer
        assert names.index("graph_input_cast0") == names.index("mm") - 1
    if keep is True or "y" in keep:  # right after the node that made it
        assert names.index("graph_output_cast0") == names.index("out") + 1
    theirs = _ort_convert(model, keep_io_types=ort_keep)
    if kept_x:  # onnxruntime's converter appends the input's Cast at the end
        assert "topologically sorted" in _sorted_error(theirs)


def test_a_tuple_of_names_is_a_list_of_names(tmp_path):
    model, _ = chain_model()
    light, _ = _ours(model, str(tmp_path), keep_io_types=("y",))
    assert [v.type.tensor_type.elem_type for v in light.graph.input] == [F16, I64]
    assert light.graph.output[0].type.tensor_type.elem_type == F


def blocked_model(seed=1):
    """TopK (default block list) and named nodes blocked by node_block_list, between
    float16 nodes; an initializer used by blocked and float16 nodes (S3), one used only
    by a blocked node (C)."""
    rng = np.random.default_rng(seed)
    nodes = [
        helper.make_node("Mul", ["x", "S"], ["a"], name="scale"),
        helper.make_node("TopK", ["a", "K"], ["vals", "idx"], name="topk", axis=-1),
        helper.make_node("Add", ["vals", "S3"], ["b"], name="after"),
        helper.make_node("Relu", ["b"], ["r"], name="keepme"),
        helper.make_node("Mul", ["r", "S3"], ["c"], name="blocked_mul"),
        helper.make_node("Sub", ["c", "C"], ["d"], name="blocked_sub"),
        helper.make_node("Mul", ["d", "D"], ["y"], name="last"),
    ]
    inits = [
        _init("S", _w(rng, 8)),
        _init("K", np.array([3], np.int64)),
        _init("S3", _w(rng, 3)),
        _init("C", _w(rng, 3)),
        _init("D", _w(rng, 3)),
    ]
    model = _model(
        nodes,
        [_vi("x", F, [2, 8])],
        [_vi("y", F, [2, 3]), _vi("idx", I64, [2, 3])],
        inits,
    )
    return model, {"x": _w(rng, 2, 8, scale=1.0).astype(np.float16)}


@float16_converter_since("1.25")
@pytest.mark.parametrize("force", [False, True])
def test_blocked_nodes_sit_between_casts(tmp_path, force):
    model, feeds = blocked_model()
    blocked = ["keepme", "blocked_mul", "blocked_sub"]
    kw = {"node_block_list": blocked, "force_fp16_initializers": force}
    ours, *_ = compare(model, tmp_path, feeds, **kw)
    names = [n.name for n in ours.graph.node]
    # a Cast right before each blocked node's first consumption, one right after it
    assert names[names.index("topk") - 1] == "a_cast_to_fp32_node"
    assert names[names.index("topk") + 1] == "vals_cast_to_fp16_node"
    assert names[names.index("keepme") - 1] == "b_cast_to_fp32_node"
    types = {i.name: i.data_type for i in ours.graph.initializer}
    assert types["C"] == (F16 if force else F)  # only a blocked node uses it
    assert types["S3"] == F16  # used by a float16 node and a blocked one
    if force:
        assert "C_cast_to_fp32_node" in names
    assert "S3_cast_to_fp32_node" in names


def test_the_default_block_list_is_onnxruntimes():
    assert list(DEFAULT_OP_BLOCK_LIST) == float16.DEFAULT_OP_BLOCK_LIST


def resize_model(opset):
    """Resize with its scales initializer (input 1 in opset 10, 2 after)."""
    rng = np.random.default_rng(opset)
    scales = _init("scales", np.array([1, 1, 2, 2], np.float32))
    if opset <= 10:
        resize = helper.make_node("Resize", ["a", "scales"], ["r"], name="resize")
        inits = [scales]
    else:
        resize = helper.make_node("Resize", ["a", "roi", "scales"], ["r"], name="resize")
        inits = [scales, _init("roi", np.zeros(0, np.float32))]
    nodes = [
        helper.make_node("Mul", ["x", "m"], ["a"], name="mul"),
        resize,
        helper.make_node("Add", ["r", "m"], ["y"], name="add"),
    ]
    model = _model(
        nodes, [_vi("x", F, [1, 1, 2, 2])], [_vi("y", F, [1, 1, 4, 4])], [*inits,
        _init("m", np.float32(1.5))], opset=opset
    )  # fmt: skip
    return model, {"x": _w(rng, 1, 1, 2, 2, scale=1.0).astype(np.float16)}


@float16_converter_since("1.25")
@pytest.mark.parametrize("opset", [10, 13])
@pytest.mark.parametrize("force", [False, True])
def test_resize_keeps_its_scales_float(tmp_path, opset, force):
    model, feeds = resize_model(opset)
    ours, *_ = compare(
        model, tmp_path, feeds, runs=opset > 10, force_fp16_initializers=force
    )  # onnxruntime has no float16 Resize-10
    resize = next(n for n in ours.graph.node if n.op_type == "Resize")
    scales = resize.input[1 if opset <= 10 else 2]
    types = {i.name: i.data_type for i in ours.graph.initializer}
    if force:  # converted, then cast back to float32 for Resize
        assert scales == "scales_cast_to_fp32" and types["scales"] == F16
    else:
        assert scales == "scales" and types["scales"] == F


@float16_converter_since("1.31")
def test_dtype_rules_of_constant_of_shape_and_random_ops(tmp_path):
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["z"], name="cos"),
        helper.make_node("RandomNormal", [], ["rn"], name="rn", shape=[2, 3], seed=1.0),
        helper.make_node("RandomUniform", [], ["ru"], name="ru", shape=[2, 3], dtype=F,
                         seed=2.0),
        helper.make_node("EyeLike", ["x"], ["eye"], name="eye", dtype=F),
        helper.make_node("Add", ["z", "x"], ["s"], name="s"),
        helper.make_node("Add", ["s", "eye"], ["y"], name="y"),
    ]  # fmt: skip
    model = _model(
        nodes,
        [_vi("x", F, [2, 3])],
        [_vi("y", F, [2, 3]), _vi("rn", F, [2, 3]), _vi("ru", F, [2, 3])],
        [_init("shape", np.array([2, 3], np.int64))],
    )
    ours, *_ = compare(model, tmp_path, runs=False)
    attrs = {n.name: {a.name: helper.get_attribute_value(a) for a in n.attribute}
             for n in ours.graph.node}  # fmt: skip
    assert attrs["rn"]["dtype"] == F16 and attrs["ru"]["dtype"] == F16
    assert attrs["eye"]["dtype"] == F16
    value = attrs["cos"]["value"]
    assert value.data_type == F16 and numpy_helper.to_array(value).tolist() == [0.0]


def subgraph_model():
    """An If whose branches use an outer initializer (W), a blocked TopK on a value of
    the branch, and a blocked node on an outer value; a Loop body as well."""
    rng = np.random.default_rng(5)
    then_nodes = [
        helper.make_node("MatMul", ["x", "W"], ["t1"], name="then_mm"),
        helper.make_node("TopK", ["t1", "K"], ["t2", "t2i"], name="then_topk", axis=-1),
        helper.make_node("Add", ["t2", "T"], ["then_out"], name="then_add"),
    ]
    then_g = helper.make_graph(
        then_nodes, "then", [], [_vi("then_out", F, [2, 3])], [_init("T", _w(rng, 3))]
    )
    else_nodes = [
        helper.make_node("Neg", ["x"], ["e0"], name="else_blocked"),
        helper.make_node("MatMul", ["e0", "W"], ["e1"], name="else_mm"),
        helper.make_node("Slice", ["e1", "st", "en", "ax"], ["else_out"], name="else_slice"),
    ]
    else_g = helper.make_graph(else_nodes, "else", [], [_vi("else_out", F, [2, 3])])
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id"),
            helper.make_node("Mul", ["acc", "W2"], ["m"], name="body_mul"),
            helper.make_node("Relu", ["m"], ["acc_out"], name="body_relu_blocked"),
        ],
        "body",
        [_vi("i", I64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc", F, [2, 3])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", F, [2, 3])],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["branch"], name="if", then_branch=then_g,
                         else_branch=else_g),
        helper.make_node("Loop", ["trip", "true", "branch"], ["looped"], name="loop", body=body),
        helper.make_node("Add", ["looped", "x_bias"], ["y"], name="y"),
    ]  # fmt: skip
    inits = [
        _init("W", _w(rng, 8, 4)),
        _init("K", np.array([3], np.int64)),
        _init("zero", np.float32(0.0)),
        _init("st", np.array([0], np.int64)),
        _init("en", np.array([3], np.int64)),
        _init("ax", np.array([1], np.int64)),
        _init("trip", np.array(2, np.int64)),
        _init("true", np.array(True)),
        _init("W2", _w(rng, 3, scale=1.0)),
        _init("x_bias", _w(rng, 3)),
    ]
    model = _model(nodes, [_vi("x", F, [2, 8])], [_vi("y", F, [2, 3])], inits, opset=17)
    return model


@float16_converter_since("1.25")
@pytest.mark.parametrize("sign", [1.0, -1.0])  # the then branch, the else branch
def test_subgraphs_get_their_casts_inside(tmp_path, sign):
    model = subgraph_model()
    blocked = ["else_blocked", "body_relu_blocked"]
    theirs = _ort_convert(model, node_block_list=blocked)
    with pytest.raises(Exception, match="invalid model"):  # its Casts left the subgraphs
        ort.InferenceSession(theirs.SerializeToString())
    light, result = _ours(model, str(tmp_path), node_block_list=blocked)
    path, _ = _convert_bytes(light, result, str(tmp_path))
    ours = _inlined(path)
    for t in _all_tensors(theirs):
        t.ClearField("data_location")
    assert _nodes(ours) == _nodes(theirs)
    assert _initializers(ours) == _initializers(theirs)
    onnx.checker.check_model(path, full_check=True)
    graphs = {g.name: [n.name for n in g.node] for g in _graphs(ours)}
    assert graphs["then"][:4] == [
        "then_mm", "t1_cast_to_fp32_node", "then_topk", "t2_cast_to_fp16_node"
    ]  # fmt: skip
    assert graphs["else"][:2] == ["x_cast_to_fp32_node", "else_blocked"]  # an outer value
    assert graphs["body"][2:] == ["m_cast_to_fp32_node", "body_relu_blocked",
                                  "acc_out_cast_to_fp16_node"]  # fmt: skip
    assert all(n.op_type != "Cast" for n in ours.graph.node)
    # the outer W converted once, for both branches; the branch's own T too
    assert {name for name, _ in result.external} >= {"W", "T", "W2"}
    listed = dict(result.external)
    listed["T"].doc_string = "found"  # the model's own object, after the insertions
    then_g = next(g for g in _graphs(light) if g.name == "then")
    assert then_g.initializer[0].doc_string == "found"
    x = (sign * np.abs(_w(np.random.default_rng(2), 2, 8, scale=1.0))).astype(np.float16)
    _close_to_float32(model, path, {"x": x})


@float16_converter_since("1.32")
def test_a_subgraph_reading_outer_values_runs_as_onnxruntimes(tmp_path):
    """Blocked nodes of If branches that read only outer values: onnxruntime's output runs
    too (its Casts at the end of the main graph, which onnxruntime sorts); ours puts the
    Cast both branches share right before the If, and both give the same bits."""
    rng = np.random.default_rng(9)

    def branch(name, op):
        nodes = [
            helper.make_node(op, ["x"], [f"{name}_i"], name=f"{name}_arg", axis=1, keepdims=1),
            helper.make_node("Cast", [f"{name}_i"], [f"{name}_f"], name=f"{name}_cast", to=F),
            helper.make_node("Mul", [f"{name}_f", "W"], [f"{name}_out"], name=f"{name}_mul"),
        ]
        return helper.make_graph(nodes, name, [], [_vi(f"{name}_out", F, [2, 4])])

    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch("then", "ArgMax"),
                         else_branch=branch("else", "ArgMin")),
    ]  # fmt: skip
    inits = [_init("W", _w(rng, 4, scale=1.0)), _init("zero", np.float32(0.0))]
    model = _model(nodes, [_vi("x", F, [2, 4])], [_vi("y", F, [2, 4])], inits)
    blocked = ["then_arg", "else_arg"]
    for sign in (1.0, -1.0):
        x = (sign * np.abs(_w(rng, 2, 4, scale=1.0))).astype(np.float16)
        ours, *_ = compare(model, tmp_path / str(sign), {"x": x}, node_block_list=blocked)
    names = [n.name for n in ours.graph.node]  # one Cast for both branches: before the If
    assert names[names.index("if") - 1] == "x_cast_to_fp32_node"


def _close_to_float32(model, path, feeds):
    """Our float16 model at ``path`` runs and gives the float32 model's outputs, roughly."""
    got = ort.InferenceSession(path).run(None, feeds)
    as32 = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in feeds.items()}
    want = ort.InferenceSession(model.SerializeToString()).run(None, as32)
    for a, b in zip(got, want):
        assert a.dtype == np.float16
        np.testing.assert_allclose(a.astype(np.float32), b, rtol=2e-2, atol=2e-2)


def edge_model():
    """The clipping edges in an external initializer (raw bytes) and an inline one held in
    float_data, and in a Constant's tensor."""
    n = len(EDGES) + len(PAYLOADS)
    values = np.concatenate([EDGES, PAYLOADS])
    as_floats = helper.make_tensor("Wf", F, [n], values.tolist())  # float_data
    nodes = [
        helper.make_node("Add", ["x", "We"], ["a"], name="a"),
        helper.make_node("Add", ["a", "Wf"], ["b"], name="b"),
        helper.make_node("Constant", [], ["c"], name="k", value=_init("", values)),
        helper.make_node(
            "Constant", [], ["cf"], name="kf", value=helper.make_tensor("", F, [n], values.tolist())
        ),
        helper.make_node("Add", ["b", "c"], ["b2"], name="b2"),
        helper.make_node("Add", ["b2", "cf"], ["y"], name="y"),
        helper.make_node("Identity", ["We"], ["we_out"], name="we_out"),
        helper.make_node("Identity", ["Wf"], ["wf_out"], name="wf_out"),
    ]
    outputs = [_vi("y", F, [n]), _vi("we_out", F, [n]), _vi("wf_out", F, [n])]
    model = _model(nodes, [_vi("x", F, [n])], outputs, [_init("We", values), as_floats])
    return model, {"x": np.zeros(n, np.float16)}


@pytest.mark.parametrize(
    "limits", [{}, {"min_positive_val": 1e-7, "max_finite_val": 1e4}, {"max_finite_val": 65000}]
)
def test_the_clipping_edges_are_onnxruntimes_bit_for_bit(tmp_path, limits):
    model, feeds = edge_model()
    ours, result, _, clipped = compare(model, tmp_path, feeds, **limits)
    mpv = np.float32(limits.get("min_positive_val", 5.96e-08))
    mfv = np.float32(limits.get("max_finite_val", 65504.0))
    a = np.concatenate([EDGES, PAYLOADS])
    finite = np.isfinite(a) & (a != 0)
    expected = int(np.count_nonzero(finite & ((np.abs(a) < mpv) | (np.abs(a) > mfv))))
    assert clipped["We"] == expected  # the caller's count, raw bytes
    assert result.clipped["Wf"] == expected  # float_data (float64 comparisons, same here)
    assert result.converted_inline == 2 and result.clipped["kf.value"] == expected
    wf = next(t for t in ours.graph.initializer if t.name == "Wf")
    assert not wf.float_data and len(wf.int32_data) == len(a)  # as onnxruntime stores it
    assert [name for name, _ in result.external] == ["k.value", "We"]


def test_shape_inference_can_be_skipped(tmp_path):
    model, _ = blocked_model()
    compare(model, tmp_path, runs=False, disable_shape_infer=True)
    light, _ = _ours(model, str(tmp_path / "b"), disable_shape_infer=True)
    assert not any(v.name == "a" for v in light.graph.value_info)  # not inferred
    light, _ = _ours(model, str(tmp_path / "c"))
    assert any(v.name == "a" for v in light.graph.value_info)


def branch_model(same_names: bool):
    """An If whose branches each slice a reshaped value (Reshape's shape from a Constant,
    Slice's starts from initializers of the branch) and TopK it (blocked)."""
    rng = np.random.default_rng(3)

    def branch(tag):
        v = "" if same_names else tag  # sibling branches may reuse a name
        nodes = [
            helper.make_node("Slice", ["m", "st", "en", "ax"], [f"sl{v}"], name=f"{tag}_slice"),
            helper.make_node("TopK", [f"sl{v}", "K"], [f"v{v}", f"i{v}"], name=f"{tag}_topk"),
            helper.make_node("Neg", [f"v{v}"], [f"{tag}_out"], name=f"{tag}_neg"),
        ]
        inits = [_init("st", np.array([0], np.int64)), _init("en", np.array([3], np.int64)),
                 _init("ax", np.array([1], np.int64))]  # fmt: skip
        return helper.make_graph(nodes, tag, [], [_vi(f"{tag}_out", F, None)], inits)

    nodes = [
        helper.make_node(
            "Constant", [], ["shape"], name="shape", value=_init("", np.array([2, 6], np.int64))
        ),
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("Mul", ["r", "M"], ["m"], name="mul"),
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("then"),
                         else_branch=branch("else")),
    ]  # fmt: skip
    model = _model(
        nodes,
        [_vi("x", F, [3, 4]), _vi("c", TensorProto.BOOL, [])],
        [_vi("y", F, None)],
        [_init("M", _w(rng, 6)), _init("K", np.array([2], np.int64))],
    )
    feeds = {"x": _w(rng, 3, 4, scale=1.0).astype(np.float16), "c": np.array(True)}
    return model, feeds


@float16_converter_since("1.25")
def test_types_survive_shape_inference_without_the_weights(tmp_path):
    """onnx cannot read the external Constant (Reshape's shape) nor the branch's external
    starts (Slice), yet every type is inferred, so the blocked TopK after them gets its
    Casts as with the weights loaded."""
    model, feeds = branch_model(same_names=False)
    ours, _, path, _ = compare(model, tmp_path, runs=False)  # its Casts left the branches
    for c in (True, False):
        feeds["c"] = np.array(c)
        _close_to_float32(model, path, feeds)
    names = {g.name: [n.name for n in g.node] for g in _graphs(ours)}
    assert names["then"] == [
        "then_slice", "slthen_cast_to_fp32_node", "then_topk", "vthen_cast_to_fp16_node",
        "then_neg",
    ]  # fmt: skip


@float16_converter_since("1.32")
def test_sibling_branches_reusing_a_name_get_a_cast_each(tmp_path):
    """onnxruntime's converter shares one Cast of ``sl`` between the branches and puts it
    in the main graph, where no ``sl`` exists: onnxruntime refuses its output. Each branch
    gets its own here, and the model runs."""
    model, feeds = branch_model(same_names=True)
    theirs = _ort_convert(model)
    with pytest.raises(Exception, match="invalid model|not output of any previous"):
        ort.InferenceSession(theirs.SerializeToString())
    light, result = _ours(model, str(tmp_path))
    path, _ = _convert_bytes(light, result, str(tmp_path))
    onnx.checker.check_model(path, full_check=True)
    ours = _inlined(path)
    extra = _nodes(ours) - _nodes(theirs)
    assert list(extra.values()) == [1] and next(iter(extra))[2] == "sl_cast_to_fp32_node"
    assert not _nodes(theirs) - _nodes(ours)
    for c in (True, False):
        feeds["c"] = np.array(c)
        _close_to_float32(model, path, feeds)


def test_force_fp16_inputs_as_onnxruntime(tmp_path):
    model, feeds = resize_model(13)
    compare(model, tmp_path, feeds, force_fp16_inputs={"Resize": [2]}, runs=False)


def test_external_bytes_are_never_read(tmp_path):
    """A weight of 3 GiB whose file does not exist: the graph converts (shape inference
    on the small weightless model), the tensor is only retyped."""
    big = TensorProto(name="E", data_type=F, dims=[1 << 28, 3])
    big.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "missing.data"), ("offset", "0"), ("length", str(3 << 30))):
        big.external_data.add(key=key, value=value)
    nodes = [helper.make_node("Gather", ["E", "i"], ["y"], name="gather")]
    model = _model(nodes, [_vi("i", I64, [2])], [_vi("y", F, [2, 3])], [big])
    result = convert_graph(model)
    tensor = model.graph.initializer[0]
    assert result.external == [("E", tensor)] and tensor.data_type == F16
    assert {e.key: e.value for e in tensor.external_data}["length"] == str(3 << 30)
    assert not tensor.HasField("raw_data") and result.converted_inline == 0
    assert model.graph.output[0].type.tensor_type.elem_type == F16


def test_bad_arguments_are_refused_clearly():
    model, _ = chain_model()
    with pytest.raises(TypeError, match="ModelProto"):
        convert_graph(model.SerializeToString())
    with pytest.raises(ValueError, match="min_positive_val=1e-08 is below 5.96e-08"):
        convert_graph(model, min_positive_val=1e-8)
    with pytest.raises(ValueError, match="max_finite_val=70000.0 is above 65504"):
        convert_graph(model, max_finite_val=70000.0)
    with pytest.raises(ValueError, match="min_positive_val"):
        convert_graph(model, min_positive_val=float("nan"))
    with pytest.raises(TypeError, match="op_block_list must be a list of names"):
        convert_graph(model, op_block_list="TopK")
    with pytest.raises(TypeError, match="max_finite_val must be a number"):
        convert_graph(model, max_finite_val="65504")
    assert model.graph.input[0].type.tensor_type.elem_type == F  # nothing changed


def test_a_name_defined_twice_is_refused():
    inner = helper.make_graph(
        [helper.make_node("Add", ["x", "W"], ["o"])], "b", [], [_vi("o", F, [2])],
        [_init("W", np.ones(2, np.float32))],
    )  # fmt: skip
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=inner)]
    model = _model(
        nodes,
        [_vi("c", TensorProto.BOOL, []), _vi("x", F, [2])],
        [_vi("y", F, [2])],
        [_init("W", np.ones(2, np.float32))],
    )
    with pytest.raises(ValueError, match="initializer 'W' is defined twice"):
        convert_graph(model)


# --- the clip and cast ---------------------------------------------------------------


def _ort_bits(values, *limits):
    with np.errstate(invalid="ignore", over="ignore"):  # NaN payloads, float64 -> float16
        return float16.convert_np_to_float16(values, *limits).view(np.uint16)


def _expected_count(values, low, high):
    """Values strictly inside (0, low) or (high, inf) in magnitude, compared in the dtype
    numpy promotes to (onnxruntime's comparisons)."""
    work = np.result_type(values, low, high)
    with np.errstate(invalid="ignore"):
        a = np.abs(values.astype(work))
    return int(np.count_nonzero(((a > 0) & (a < work.type(low))) | (np.isfinite(a) & (a > high))))


LIMITS = [(), (1e-7, 1e4), (np.float64(1e-7), 1e4), (5.96e-08, np.float64(60000.0)),
          (0.5, 0.25), (6.1e-05, 65504), (1e-3, 1.0)]  # fmt: skip


def _mixed_values(limits):
    rng = np.random.default_rng(0)
    low = np.float32(limits[0] if limits else 5.96e-08)
    return np.concatenate(
        [
            EDGES,
            PAYLOADS,
            np.arange(0x7F800001, 0x7F800001 + 5000, 7, dtype=np.uint32).view(np.float32),
            (rng.standard_normal(20000) * 10.0 ** rng.integers(-12, 8, 20000)).astype(np.float32),
            np.nextafter(low, [0, 1], dtype=np.float32),
            [low, -low],
        ]
    ).astype(np.float32)


@pytest.mark.parametrize("limits", LIMITS)
def test_clip_to_float16_is_onnxruntimes_conversion(limits):
    values = _mixed_values(limits)
    half, count = clip_to_float16(values, *limits)
    assert half.dtype == np.float16
    assert half.view(np.uint16).tolist() == _ort_bits(values, *limits).tolist()
    low, high = (limits or (5.96e-08, 65504.0))[:2]
    if low <= high:  # else the rules overlap (onnxruntime accepts it; the bits still agree)
        assert count == _expected_count(values, low, high)
    with np.errstate(invalid="ignore"):
        as64 = values.astype(np.float64)  # as onnxruntime reads float_data
    half64, count64 = clip_to_float16(as64, *limits)
    assert half64.view(np.uint16).tolist() == _ort_bits(as64, *limits).tolist()
    if low <= high:
        assert count64 == _expected_count(as64, low, high)


@pytest.mark.parametrize("limits", LIMITS[:2])
def test_clip_to_float16_in_chunks_is_the_whole(limits):
    """What a streaming writer does: any split gives the whole's bits and count."""
    values = _mixed_values(limits)
    whole, count = clip_to_float16(values, *limits)
    for size in (1, 7, 4096, 10_001):
        parts = [
            clip_to_float16(values[i : i + size], *limits) for i in range(0, len(values), size)
        ]
        assert np.concatenate([p for p, _ in parts]).tobytes() == whole.tobytes()
        assert sum(c for _, c in parts) == count


@pytest.mark.parametrize("fill", [0.0, -0.0, 1.0, 1e-9, 1e9, np.nan])
def test_clip_to_float16_on_uniform_chunks(fill):
    values = np.full(100_003, fill, np.float32)
    values[7] = 3.0
    out = np.empty_like(values, dtype=np.float16)
    half, count = clip_to_float16(values, out=out)
    assert half is out
    assert out.view(np.uint16).tolist() == _ort_bits(values).tolist()
    assert count == (len(values) - 1 if fill in (1e-9, 1e9) else 0)
    assert values[0] == fill or np.isnan(fill)  # the input is never modified


def test_clip_to_float16_refuses_what_it_cannot_write():
    with pytest.raises(TypeError, match="float array"):
        clip_to_float16(np.arange(3))
    with pytest.raises(ValueError, match="C-contiguous float16"):
        clip_to_float16(np.ones(4, np.float32), out=np.empty(4, np.float32))
    with pytest.raises(ValueError, match="shape"):
        clip_to_float16(np.ones(4, np.float32), out=np.empty(3, np.float16))


def test_inference_leaves_out_the_weights_it_does_not_need():
    """onnx infers on a copy without the main graph's external initializers: those a
    node reads (or the graph outputs) are inputs of that copy, the others are left out;
    the types are those of the copy with every initializer, and the model keeps its own."""
    from onnx_light.onnx._graph import infer

    def external(name, dims):
        t = TensorProto(name=name, data_type=F, dims=dims)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "w.data"), ("offset", "0"), ("length", "64")):
            t.external_data.add(key=key, value=value)
        return t

    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    inits = [external("W", [4, 4]), external("unread", [4]), external("out", [2])]
    inits.append(_init("inline", np.ones(3, np.float32)))
    model = _model(nodes, [_vi("x", F, [2, 4])], [_vi("y", F, None), _vi("out", F, None)], inits)
    seen = {}
    real = onnx.shape_inference.infer_shapes

    def spy(copy, *args, **kwargs):
        seen["initializers"] = [t.name for t in copy.graph.initializer]
        seen["inputs"] = [v.name for v in copy.graph.input]
        return real(copy, *args, **kwargs)

    before = model.SerializeToString()
    onnx.shape_inference.infer_shapes = spy
    try:
        infer.infer_shapes(model)
    finally:
        onnx.shape_inference.infer_shapes = real
    assert seen == {"initializers": ["inline"], "inputs": ["x", "W", "out"]}
    assert [t.name for t in model.graph.initializer] == ["W", "unread", "out", "inline"]
    types = {v.name: v.type.tensor_type for v in [*model.graph.value_info, *model.graph.output]}
    assert [d.dim_value for d in types["h"].shape.dim] == [2, 4]
    assert types["out"].elem_type == F and types["y"].elem_type == F
    assert len(model.SerializeToString()) > len(before)  # inferred types added, nothing lost
