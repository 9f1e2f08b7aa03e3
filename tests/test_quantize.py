"""quantize_weights: the model onnxruntime's MatMulNBitsQuantizer writes, bit for bit, without
loading the weights; Gemm and Gather run by onnxruntime; slabs; bad input; in place."""

from __future__ import annotations

import itertools
import logging
import os

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest
from helpers import folder_digest, for_onnxruntime, peak_growth_in_subprocess, sha256

import onnx_light.onnx as onnxl
from onnx_light.onnx._write import blockwise, quantize

ort = pytest.importorskip("onnxruntime")
nbits = pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")
logging.getLogger(nbits.__name__).setLevel(logging.WARNING)  # one info line per node

F, H = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
NP = {F: np.float32, H: np.float16}


def _mlp(folder, dtype=F, layout="one file", name="src.onnx") -> str:
    """MatMuls: K a multiple of the block sizes and not (80, 200), a weight read by two
    nodes, one an activation (not a weight), a small weight held inline, an unnamed one."""
    rng = np.random.default_rng(1)
    w = {
        "W1": rng.standard_normal((64, 80)),
        "W2": rng.standard_normal((80, 200)) * 0.1,
        "W3": rng.standard_normal((200, 64)) * 3,
        "Ws": rng.standard_normal((64, 4)),  # 1 KiB: inline under the threshold
    }
    w["W1"][:, :3] = 0  # a block of zeros (scale 0)
    w["W2"][:, 5] = np.abs(w["W2"][:, 5])  # a block without negative values
    nodes = [
        oh.make_node("MatMul", ["X", "W1"], ["H1"], name="mm1"),
        oh.make_node("MatMul", ["H1", "W2"], ["H2"], name="mm2"),
        oh.make_node("MatMul", ["H2", "W3"], ["H3"]),  # unnamed
        oh.make_node("MatMul", ["H3", "W1"], ["H4"], name="mm_shared"),  # W1 again
        oh.make_node("MatMul", ["H4", "H4T"], ["H5"], name="mm_act"),  # B not a weight
        oh.make_node("Transpose", ["H4"], ["H4T"], name="t"),
        oh.make_node("MatMul", ["H3", "Ws"], ["Y2"], name="mm_small"),
    ]
    nodes = nodes[:4] + [nodes[5], nodes[4], nodes[6]]
    dt = NP[dtype]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("X", dtype, [3, 64])],
        [
            oh.make_tensor_value_info("H5", dtype, [3, 3]),
            oh.make_tensor_value_info("Y2", dtype, [3, 4]),
        ],
        [onh.from_array(a.astype(dt), n) for n, a in w.items()],
    )
    model = for_onnxruntime(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    path = os.path.join(folder, name)
    if layout == "one file":
        onnx.save(model, path, save_as_external_data=True, location="src.data", size_threshold=1025)
    else:  # each weight in its own file
        onnx.save(
            model,
            path,
            save_as_external_data=True,
            all_tensors_to_one_file=False,
            size_threshold=1025,
        )
    return path


def _theirs(src: str, **settings) -> onnx.ModelProto:
    """onnxruntime's quantizer on the model loaded with its weights."""
    q = nbits.MatMulNBitsQuantizer(onnx.load(src), **settings)
    q.process()
    return q.model.model


def _settings(bits, block_size, symmetric, accuracy_level=0, exclude=(), op_types=("MatMul",)):
    ours = dict(
        bits=bits,
        block_size=block_size,
        symmetric=symmetric,
        accuracy_level=accuracy_level,
        nodes_to_exclude=list(exclude),
        op_types=op_types,
    )
    theirs = dict(
        bits=bits,
        block_size=block_size,
        is_symmetric=symmetric,
        accuracy_level=accuracy_level or None,
        nodes_to_exclude=list(exclude),
        op_types_to_quantize=op_types,
    )
    return ours, theirs


def _nodes(graph: onnx.GraphProto) -> list:
    """Every node, subgraphs included, as comparable values."""
    out = []
    for node in graph.node:
        attrs = []
        for a in sorted(node.attribute, key=lambda a: a.name):
            if a.type == onnx.AttributeProto.GRAPH:
                attrs.append((a.name, _nodes(a.g), _inits(a.g)))
            else:
                attrs.append((a.name, str(oh.get_attribute_value(a))))
        out.append(
            (node.op_type, node.domain, node.name, list(node.input), list(node.output), attrs)
        )
    return out


def _inits(graph: onnx.GraphProto) -> list:
    """The initializers of ``graph`` in order: name, dtype, dims, values' bytes."""
    return [
        (t.name, t.data_type, list(t.dims), onh.to_array(t).tobytes()) for t in graph.initializer
    ]


def _feeds(model: onnx.ModelProto, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in model.graph.input:
        tt = value.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        if tt.elem_type == onnx.TensorProto.INT64:
            feeds[value.name] = rng.integers(0, 5, shape).astype(np.int64)
        elif tt.elem_type == onnx.TensorProto.BOOL:
            feeds[value.name] = np.array(True)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(NP[tt.elem_type])
    return feeds


def _run(model_or_path, feeds) -> list:
    what = model_or_path if isinstance(model_or_path, str) else model_or_path.SerializeToString()
    session = ort.InferenceSession(what, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _same_as_onnxruntime(dst: str, theirs: onnx.ModelProto) -> None:
    """The same nodes, initializers (bytes), opsets; the checker passes; the same outputs."""
    onnx.checker.check_model(dst, full_check=True)
    ours = onnx.load(dst)
    assert _nodes(ours.graph) == _nodes(theirs.graph)
    assert _inits(ours.graph) == _inits(theirs.graph)
    opsets = {o.domain: o.version for o in ours.opset_import}
    assert opsets == {o.domain: o.version for o in theirs.opset_import}
    assert ours.ir_version == theirs.ir_version
    feeds = _feeds(ours)
    for a, b in zip(_run(dst, feeds), _run(theirs, feeds), strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


GRID = [
    (4, 32, False, 0),
    (4, 16, True, 4),
    (4, 128, False, 1),
    (4, 256, True, 0),
    (8, 32, False, 0),
    (8, 64, True, 4),
]


@pytest.mark.parametrize("dtype", [F, H], ids=["float32", "float16"])
@pytest.mark.parametrize("bits, block_size, symmetric, level", GRID)
def test_matmul_as_onnxruntime(tmp_path, monkeypatch, dtype, bits, block_size, symmetric, level):
    os.mkdir(tmp_path / "src")
    src = _mlp(tmp_path / "src", dtype)
    before = folder_digest(tmp_path / "src")
    ours, theirs = _settings(bits, block_size, symmetric, level)
    monkeypatch.chdir(tmp_path.parent)  # never the model's folder
    dst = str(tmp_path / "q.onnx")
    result = onnxl.quantize_weights(src, dst, **ours)
    _same_as_onnxruntime(dst, _theirs(src, **theirs))
    unnamed = "MatMul #2 in graph 'g'"
    assert result.quantized == {
        "mm1": "W1",
        "mm2": "W2",
        unnamed: "W3",
        "mm_shared": "W1",
        "mm_small": "Ws",
    }
    assert result.skipped == {"mm_act": "its B 'H4T' is not an initializer"}
    assert result.weights == 4
    assert result.weights_paths == [dst + ".data"]
    assert folder_digest(tmp_path / "src") == before  # the source is untouched


def test_several_files_and_shards_exclusions(tmp_path):
    """Each weight in a file of its own, and then in shards; nodes excluded."""
    src = _mlp(tmp_path, layout="per tensor")
    ours, theirs = _settings(4, 32, False, exclude=["mm2"])
    dst = str(tmp_path / "q.onnx")
    result = onnxl.quantize_weights(src, dst, **ours)
    assert result.skipped["mm2"] == "in nodes_to_exclude"
    _same_as_onnxruntime(dst, _theirs(src, **theirs))
    sharded = str(tmp_path / "sharded" / "m.onnx")
    os.mkdir(tmp_path / "sharded")
    onnxl.align_external_data_streaming(
        src, sharded, options=onnxl.WriteOptions(max_shard_size=20000, alignment=64)
    )
    assert len([n for n in os.listdir(tmp_path / "sharded") if n != "m.onnx"]) > 1
    dst2 = str(tmp_path / "q2.onnx")
    onnxl.quantize_weights(sharded, dst2, **ours, options=onnxl.WriteOptions(max_shard_size=10000))
    _same_as_onnxruntime(dst2, _theirs(sharded, **theirs))


def _if_model(folder, inner_name="Wi") -> str:
    """An If whose branches hold MatMuls: one reads an outer weight, one its own (named
    ``inner_name``: "Wo" shadows the outer one, and each graph gets its own Wo_Q4...)."""
    rng = np.random.default_rng(2)
    outer = onh.from_array(rng.standard_normal((64, 32)).astype(np.float32), "Wo")
    inner = onh.from_array(rng.standard_normal((64, 32)).astype(np.float32), inner_name)
    out = oh.make_tensor_value_info("Z", F, [2, 32])
    then = oh.make_graph(
        [oh.make_node("MatMul", ["X", "Wo"], ["Z"], name="then_mm")], "then", [], [out]
    )
    other = oh.make_graph(
        [oh.make_node("MatMul", ["X", inner_name], ["Z"], name="else_mm")],
        "else",
        [],
        [out],
        [inner],
    )
    node = oh.make_node("If", ["cond"], ["Y"], name="if", then_branch=then, else_branch=other)
    graph = oh.make_graph(
        [node],
        "g",
        [
            oh.make_tensor_value_info("X", F, [2, 64]),
            oh.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []),
        ],
        [oh.make_tensor_value_info("Y", F, [2, 32])],
        [outer],
    )
    model = for_onnxruntime(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    path = os.path.join(folder, "if.onnx")
    onnx.save(model, path, save_as_external_data=True, location="if.data", size_threshold=0)
    return path


@pytest.mark.parametrize("bits, symmetric", [(4, False), (8, True)])
def test_subgraphs(tmp_path, bits, symmetric):
    src = _if_model(tmp_path)
    ours, theirs = _settings(bits, 16, symmetric)
    dst = str(tmp_path / "q.onnx")
    result = onnxl.quantize_weights(src, dst, **ours)
    assert result.quantized == {"then_mm": "Wo", "else_mm": "Wi"}
    _same_as_onnxruntime(dst, _theirs(src, **theirs))
    feeds = _feeds(onnx.load(dst))
    _run(dst, {**feeds, "cond": np.array(False)})  # the other branch runs too


def test_a_subgraph_weight_shadowing_an_outer_one(tmp_path):
    """A branch's own weight named as an outer one: each graph gets its own Wo_Q4,
    Wo_scales... as onnxruntime's quantizer makes them (no name is taken twice in one
    graph: not refused). onnxruntime itself fails to run the outer one from the other
    branch then, its quantizer's model as ours: compared without running."""
    src = _if_model(tmp_path, inner_name="Wo")
    ours, theirs = _settings(4, 16, False)
    dst = str(tmp_path / "q.onnx")
    result = onnxl.quantize_weights(src, dst, **ours)
    assert result.quantized == {"then_mm": "Wo", "else_mm": "Wo"}
    onnx.checker.check_model(dst, full_check=True)
    model, expected = onnx.load(dst), _theirs(src, **theirs)
    assert _nodes(model.graph) == _nodes(expected.graph)
    assert _inits(model.graph) == _inits(expected.graph)


def _batched_model(folder) -> str:
    """MatMuls whose B has unit leading dims ([1, K, N], [1, 1, K, N]) under an A of
    rank 2 (onnxruntime reshapes the output), of rank 3 (it does not) and of no known
    rank; and one with a batch of 2 (left)."""
    rng = np.random.default_rng(8)

    def w(name, *shape):
        return onh.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        oh.make_node("MatMul", ["X2", "B3"], ["Y1"], name="rank2"),
        oh.make_node("MatMul", ["X3", "B4"], ["Y2"], name="rank3"),
        oh.make_node("MatMul", ["X3", "B3"], ["Y3"]),  # unnamed, rank 3 >= 3: no reshape
        oh.make_node("Identity", ["X2"], ["X2u"], name="id"),  # a rank nobody declares
        oh.make_node("MatMul", ["X2u", "B3"], ["Y4"], name="unknown"),
        oh.make_node("MatMul", ["X3", "Bb"], ["Y5"], name="batch"),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [
            oh.make_tensor_value_info("X2", F, [3, 64]),
            oh.make_tensor_value_info("X3", F, [2, 3, 64]),
        ],
        [
            oh.make_tensor_value_info(f"Y{i}", F, shape)
            for i, shape in enumerate(
                [[1, 3, 32], [1, 2, 3, 32], [2, 3, 32], [1, 3, 32], [2, 3, 32]], 1
            )
        ],
        [w("B3", 1, 64, 32), w("B4", 1, 1, 64, 32), w("Bb", 2, 64, 32)],
    )
    model = for_onnxruntime(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    path = os.path.join(folder, "batched.onnx")
    onnx.save(model, path, save_as_external_data=True, location="b.data", size_threshold=0)
    return path


@pytest.mark.parametrize("bits", [4, 8])
def test_unit_leading_dims_as_onnxruntime(tmp_path, bits):
    """A B of [1, K, N] or [1, 1, K, N] is quantized as [K, N], the output reshaped as
    onnxruntime reshapes it (its chain of nodes and constants, under its names)."""
    src = _batched_model(tmp_path)
    ours, theirs = _settings(bits, 32, False)
    dst = str(tmp_path / "q.onnx")
    result = onnxl.quantize_weights(src, dst, **ours)
    assert result.skipped == {"batch": "its B 'Bb' has batch dims [2] (not all 1)"}
    _same_as_onnxruntime(dst, _theirs(src, **theirs))
    ops = [n.op_type for n in onnx.load(dst).graph.node]
    assert ops.count("MatMulNBits") == 4 and ops.count("Reshape") > 3


def test_bfloat16_weights_as_onnxruntime(tmp_path):
    """A bfloat16 weight is quantized in float32, its scales rounded to bfloat16 after,
    as onnxruntime's quantizer does (no CPU kernel runs it: nodes and bytes compared)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(9)
    inits = [
        onh.from_array(rng.standard_normal(shape).astype(ml_dtypes.bfloat16), name)
        for name, shape in (("Wb", (96, 40)), ("Ws", (16, 8)))
    ]
    bf = onnx.TensorProto.BFLOAT16
    graph = oh.make_graph(
        [
            oh.make_node("MatMul", ["X", "Wb"], ["Y"], name="mm"),
            oh.make_node("MatMul", ["Z", "Ws"], ["V"], name="small"),
        ],
        "g",
        [oh.make_tensor_value_info("X", bf, [2, 96]), oh.make_tensor_value_info("Z", bf, [2, 16])],
        [oh.make_tensor_value_info("Y", bf, [2, 40]), oh.make_tensor_value_info("V", bf, [2, 8])],
        inits,
    )
    src = str(tmp_path / "bf.onnx")
    onnx.save(
        oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]),
        src,
        save_as_external_data=True,
        size_threshold=1024,
    )
    for bits, symmetric in ((4, False), (8, True)):
        ours, theirs = _settings(bits, 32, symmetric)
        dst = str(tmp_path / f"q{bits}.onnx")
        onnxl.quantize_weights(src, dst, **ours)
        onnx.checker.check_model(dst, full_check=True)
        mine, their = onnx.load(dst), _theirs(src, **theirs)
        assert _nodes(mine.graph) == _nodes(their.graph)
        assert _inits(mine.graph) == _inits(their.graph)


def _gather_model(folder, dtype, vocab=50, hidden=96) -> str:
    rng = np.random.default_rng(3)
    table = rng.standard_normal((vocab, hidden)).astype(NP[dtype])
    w = rng.standard_normal((hidden, 64)).astype(NP[dtype])
    graph = oh.make_graph(
        [
            oh.make_node("Gather", ["E", "ids"], ["h"], name="embed"),
            oh.make_node("MatMul", ["h", "W"], ["Y"], name="proj"),
        ],
        "g",
        [oh.make_tensor_value_info("ids", onnx.TensorProto.INT64, [2, 7])],
        [oh.make_tensor_value_info("Y", dtype, [2, 7, 64])],
        [onh.from_array(table, "E"), onh.from_array(w, "W")],
    )
    model = for_onnxruntime(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    path = os.path.join(folder, "emb.onnx")
    onnx.save(model, path, save_as_external_data=True, location="emb.data", size_threshold=0)
    return path


@pytest.mark.parametrize("dtype", [F, H], ids=["float32", "float16"])
@pytest.mark.parametrize("block_size, symmetric", [(32, False), (64, True)])
def test_gather_as_onnxruntime(tmp_path, monkeypatch, dtype, block_size, symmetric):
    """Gather with 96 columns: blocks of 32, and of 64 (a partial last block); slabs
    of a few rows give the bytes of the whole table."""
    monkeypatch.setattr(quantize, "SLAB_BYTES", 1000)
    src = _gather_model(tmp_path, dtype)
    types = ("MatMul", "Gather")
    ours, theirs = _settings(4, block_size, symmetric, op_types=types)
    dst = str(tmp_path / "q.onnx")
    result = onnxl.quantize_weights(src, dst, **ours)
    assert result.quantized == {"embed": "E", "proj": "W"}
    _same_as_onnxruntime(dst, _theirs(src, **theirs))


def test_gather_8_bits_left(tmp_path):
    src = _gather_model(tmp_path, F)
    result = onnxl.quantize_weights(
        src, str(tmp_path / "q.onnx"), bits=8, op_types=["MatMul", "Gather"]
    )
    assert result.skipped == {"embed": "Gather is quantized at 4 bits only"}
    assert list(result.quantized) == ["proj"]


def _gemm_model(folder, trans_b: int, bias: bool, alpha=1.0) -> tuple[str, str]:
    """A Gemm and the same product as a MatMul (+ Add), for onnxruntime's quantizer."""
    rng = np.random.default_rng(4)
    k, n = 96, 48
    w = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    inits = [onh.from_array(w.T.copy() if trans_b else w, "B")]
    if bias:
        inits.append(onh.from_array(c, "C"))
    gemm = oh.make_node(
        "Gemm",
        ["X", "B", "C"] if bias else ["X", "B"],
        ["Y"],
        name="fc",
        transB=trans_b,
        alpha=alpha,
    )
    x = oh.make_tensor_value_info("X", F, [5, k])
    y = oh.make_tensor_value_info("Y", F, [5, n])
    paths = []
    for name, nodes, weights in (
        ("gemm.onnx", [gemm], inits),
        (
            "matmul.onnx",
            [oh.make_node("MatMul", ["X", "B"], ["P" if bias else "Y"], name="fc")]
            + ([oh.make_node("Add", ["P", "C"], ["Y"], name="add")] if bias else []),
            [onh.from_array(w, "B")] + inits[1:],
        ),
    ):
        graph = oh.make_graph(nodes, "g", [x], [y], weights)
        model = for_onnxruntime(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
        path = os.path.join(folder, name)
        onnx.save(
            model, path, save_as_external_data=True, location=name + ".data", size_threshold=0
        )
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize("trans_b, bias", list(itertools.product([0, 1], [False, True])))
def test_gemm_runs_as_the_matmul_onnxruntime_quantizes(tmp_path, trans_b, bias):
    """A Gemm becomes MatMulNBits (with its bias): the same quantized bytes as
    onnxruntime's quantizer makes of the same product written as a MatMul, and the
    same outputs from onnxruntime."""
    gemm, matmul = _gemm_model(tmp_path, trans_b, bias)
    dst = str(tmp_path / "q.onnx")
    result = onnxl.quantize_weights(gemm, dst, block_size=32, op_types=["MatMul", "Gemm"])
    assert result.quantized == {"fc": "B"}
    onnx.checker.check_model(dst, full_check=True)
    theirs = _theirs(matmul, block_size=32)
    ours = onnx.load(dst)
    (node,) = ours.graph.node
    assert (node.op_type, node.name) == ("MatMulNBits", "fc_Q4")
    assert list(node.input[5:]) == (["C"] if bias else [])
    mine = {t.name.replace("_T_", "_"): onh.to_array(t).tobytes() for t in ours.graph.initializer}
    their = {t.name: onh.to_array(t).tobytes() for t in theirs.graph.initializer}
    assert mine == their
    feeds = _feeds(ours)
    np.testing.assert_allclose(_run(dst, feeds)[0], _run(theirs, feeds)[0], rtol=1e-6, atol=1e-5)


def test_gemm_left_with_the_reason(tmp_path):
    gemm, _ = _gemm_model(tmp_path, 0, True, alpha=0.5)
    result = onnxl.quantize_weights(gemm, str(tmp_path / "q.onnx"), op_types=["Gemm"])
    assert result.skipped == {"fc": "alpha=0.5, beta=1 (only 1 and 1 are quantized)"}
    result = onnxl.quantize_weights(gemm, str(tmp_path / "q2.onnx"))  # Gemm not asked
    assert result.quantized == {} and result.skipped == {}


# -- the arithmetic ----------------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_numpy_is_mlas_bit_for_bit(bits, dtype):
    """The numpy fallback gives the bytes of onnxruntime's own function: K a multiple
    of the block or not, odd, of one row; zeros, one sign, large and small values."""
    rng = np.random.default_rng(5)
    for k, n, block, symmetric in itertools.product(
        [1, 16, 33, 35, 100, 257], [1, 3, 8], [16, 32, 64, 128, 256], [True, False]
    ):
        w = rng.standard_normal((k, n)) * rng.choice([1e-3, 1.0, 300.0])
        if rng.random() < 0.3:
            w[rng.random((k, n)) < 0.4] = 0
        if rng.random() < 0.3:
            w = np.abs(w)
        w = w.astype(dtype)
        theirs = blockwise.ort_blockwise(w, bits, block, symmetric)
        ours = blockwise.mlas_blockwise(w, bits, block, symmetric)
        for a, b in zip(theirs, ours, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                assert a.dtype == b.dtype and a.shape == b.shape
                assert a.tobytes() == b.tobytes(), (k, n, block, symmetric)


def test_gather_numpy_is_onnxruntimes():
    rng = np.random.default_rng(6)
    for shape, block, symmetric, dtype in itertools.product(
        [(7, 96, 1), (5, 33, 1), (3, 40, 3)], [16, 32], [True, False], [np.float32, np.float16]
    ):
        data = rng.standard_normal(shape).astype(dtype)
        theirs = nbits.DefaultWeightOnlyQuantizer.quantize_ndarray(data, 1, block, symmetric)
        ours = blockwise.quantize_gather_rows(data, block, symmetric)
        assert theirs[0].tobytes() == ours[0].tobytes()
        assert theirs[1].dtype == ours[1].dtype and theirs[1].tobytes() == ours[1].tobytes()
        assert (theirs[2] is None) == (ours[2] is None)
        if theirs[2] is not None:
            assert theirs[2].tobytes() == ours[2].tobytes()


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("transposed", [False, True])
def test_slabs_give_the_whole_tensors_bytes(monkeypatch, bits, transposed):
    """Quantized a few blocks of rows at a time, a weight has the bytes it has
    quantized whole (K not a multiple of the block)."""
    rng = np.random.default_rng(7)
    w = rng.standard_normal((300, 24)).astype(np.float32)
    q = quantize.Quantization("MatMulNBits", F, w.shape, bits, 32, False, transposed)
    whole = quantize.quantize(q, lambda first, count: w[first : first + count])
    monkeypatch.setattr(quantize, "SLAB_BYTES", 1)  # one step of rows per slab
    assert len(q.slabs()) > 4
    slabbed = quantize.quantize(q, lambda first, count: w[first : first + count])
    assert {k: v.tobytes() for k, v in whole.items()} == {
        k: v.tobytes() for k, v in slabbed.items()
    }
    reference = blockwise.ort_blockwise(w.T.copy() if transposed else w, bits, 32, False)
    assert [whole[p].tobytes() for p in ("B", "scales", "zero_points")] == [
        r.tobytes() for r in reference
    ]


def test_without_onnxruntimes_function(tmp_path, monkeypatch):
    """Where onnxruntime is not installed, the numpy arithmetic writes the same file."""
    src = _mlp(tmp_path, H)
    first = str(tmp_path / "a.onnx")
    onnxl.quantize_weights(src, first, block_size=16)
    monkeypatch.setattr(blockwise, "ort_blockwise", lambda *args: None)
    second = str(tmp_path / "b.onnx")
    onnxl.quantize_weights(src, second, block_size=16)
    assert sha256(first + ".data") == sha256(second + ".data")


# -- bad input, in place ---------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"bits": 3}, ValueError, "bits=3"),
        ({"bits": True}, TypeError, "bits"),
        ({"block_size": 24}, ValueError, "block_size=24: it must be a power of two"),
        ({"block_size": 8}, ValueError, "block_size=8"),
        ({"block_size": 512}, ValueError, "block_size=512: .* at most 256"),
        ({"accuracy_level": 5}, ValueError, "accuracy_level=5"),
        ({"op_types": "MatMul"}, TypeError, "op_types must be a list"),
        ({"op_types": ["Conv"]}, ValueError, "'Conv' is not"),
        ({"nodes_to_exclude": ["mm9", "mm1"]}, ValueError, "does not have: 'mm9'"),
    ],
)
def test_bad_settings_write_nothing(tmp_path, kwargs, error, words):
    src = _mlp(tmp_path)
    before = folder_digest(tmp_path)
    with pytest.raises(error, match=words):
        onnxl.quantize_weights(src, str(tmp_path / "q.onnx"), **kwargs)
    assert folder_digest(tmp_path) == before


def test_weight_of_another_dtype_is_refused_by_name(tmp_path):
    w = onh.from_array(np.ones((32, 8)), "W64")  # float64
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W64"], ["Y"], name="mm")],
        "g",
        [oh.make_tensor_value_info("X", onnx.TensorProto.DOUBLE, [1, 32])],
        [oh.make_tensor_value_info("Y", onnx.TensorProto.DOUBLE, [1, 8])],
        [w],
    )
    src = str(tmp_path / "d.onnx")
    onnx.save(oh.make_model(graph), src, save_as_external_data=True, size_threshold=0)
    before = folder_digest(tmp_path)
    with pytest.raises(ValueError, match=r"MatMul node 'mm' of .*d\.onnx.* 'W64' of dtype DOUBLE"):
        onnxl.quantize_weights(src, str(tmp_path / "q.onnx"))
    assert folder_digest(tmp_path) == before
    result = onnxl.quantize_weights(src, str(tmp_path / "q.onnx"), nodes_to_exclude=["mm"])
    assert result.skipped == {"mm": "in nodes_to_exclude"}


def _taken_model(folder, nodes, inits) -> str:
    graph = oh.make_graph(
        nodes,
        "g",
        [
            oh.make_tensor_value_info("X", F, [3, 64]),
            oh.make_tensor_value_info("I", onnx.TensorProto.INT64, [3]),
        ],
        [oh.make_tensor_value_info("Z", F, ["a", "b"])],
        [onh.from_array(np.ones(shape, np.float32), name) for name, shape in inits],
    )
    path = os.path.join(folder, "taken.onnx")
    model = for_onnxruntime(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    onnx.save(model, path, save_as_external_data=True, size_threshold=0)
    return path


@pytest.mark.parametrize(
    "nodes, inits, op_types, words",
    [
        (  # the model already has W_Q4: two initializers of one name, or theirs silently lost
            [
                oh.make_node("MatMul", ["X", "W"], ["Y"], name="mm"),
                oh.make_node("Add", ["Y", "W_Q4"], ["Z"]),
            ],
            [("W", [64, 8]), ("W_Q4", [3, 8])],
            ("MatMul",),
            "MatMul node 'mm' of .*taken.onnx.*'W' makes the initializer 'W_Q4', a name the model "
            "already uses",
        ),
        (
            [
                oh.make_node("MatMul", ["X", "W"], ["Y"], name="mm"),
                oh.make_node("Add", ["Y", "W_scales"], ["Z"]),
            ],
            [("W", [64, 8]), ("W_scales", [3, 8])],
            ("MatMul",),
            "'W_scales', a name the model already uses",
        ),
        (  # one weight as a MatMul's B and a Gather's table: two forms under one set of names
            [
                oh.make_node("Gather", ["W", "I"], ["E"], name="g"),
                oh.make_node("MatMul", ["E", "W"], ["Z"], name="mm"),
            ],
            [("W", [64, 64])],
            ("MatMul", "Gather"),
            "MatMul node 'mm' of .*taken.onnx.*'W' makes the initializer 'W_Q4', which "
            "Gather node 'g' makes of it as GatherBlockQuantized",
        ),
    ],
    ids=["W_Q4 exists", "W_scales exists", "MatMul and Gather share W"],
)
def test_names_already_taken_are_refused(tmp_path, nodes, inits, op_types, words):
    """A name the quantizer makes that the model already has (or that another form of the
    same weight takes) is refused before anything is written, naming the node, the weight
    and the name; onnxruntime's quantizer writes a model that fails onnx's checker or
    onnxruntime's load then."""
    src = _taken_model(tmp_path, nodes, inits)
    before = folder_digest(tmp_path)
    with pytest.raises(ValueError, match=words):
        onnxl.quantize_weights(src, str(tmp_path / "q.onnx"), block_size=32, op_types=op_types)
    assert folder_digest(tmp_path) == before
    excluded = [n.name for n in nodes if n.name == "mm"]
    result = onnxl.quantize_weights(
        src, str(tmp_path / "q.onnx"), block_size=32, op_types=op_types, nodes_to_exclude=excluded
    )
    onnx.checker.check_model(str(tmp_path / "q.onnx"), full_check=True)
    assert "mm" not in result.quantized


def test_in_place(tmp_path):
    """In place: the model quantized as elsewhere, its old weights file listed as no
    longer read (deleted when asked)."""
    src = _mlp(tmp_path)
    elsewhere = str(tmp_path / "elsewhere.onnx")
    onnxl.quantize_weights(src, elsewhere)
    result = onnxl.quantize_weights(src, src, options=onnxl.WriteOptions(remove_unreferenced=True))
    assert result.removed == [str(tmp_path / "src.data")]
    assert not os.path.exists(tmp_path / "src.data")
    assert _inits(onnx.load(src).graph) == _inits(onnx.load(elsewhere).graph)
    assert _nodes(onnx.load(src).graph) == _nodes(onnx.load(elsewhere).graph)
    onnx.checker.check_model(src, full_check=True)


def test_truncated_source_leaves_nothing(tmp_path):
    src = _mlp(tmp_path)
    data = tmp_path / "src.data"
    size = data.stat().st_size
    os.truncate(data, size - 100)
    before = folder_digest(tmp_path)
    with pytest.raises((onnxl.ExternalDataError, OSError)):
        onnxl.quantize_weights(src, str(tmp_path / "q.onnx"))
    assert folder_digest(tmp_path) == before


_PEAK = r"""
import sys
import onnx_light.onnx as onnxl
from onnx_light.onnx._write import blockwise, quantize
from benchmarks.harness import PeakMemory
quantize.SLAB_BYTES = 1024 * 1024
blockwise.ort_blockwise = lambda *args: None  # numpy, one thread: nothing timing-dependent
with PeakMemory() as m:
    onnxl.quantize_weights(sys.argv[1], sys.argv[2])
print(m.growth, m.exact)
"""


def _chain(folder, n: int) -> str:
    """``n`` MatMuls of [512, 2048] float32 weights (4 MiB each)."""
    rng = np.random.default_rng(10)
    nodes, inits, x = [], [], "X"
    for i in range(n):
        nodes.append(oh.make_node("MatMul", [x, f"W{i}"], [f"H{i}"], name=f"mm{i}"))
        inits.append(onh.from_array(rng.standard_normal((512, 2048), np.float32), f"W{i}"))
        nodes.append(oh.make_node("Slice", [f"H{i}", "s", "e", "a"], [f"X{i}"], name=f"cut{i}"))
        x = f"X{i}"
    inits += [
        onh.from_array(np.array([v], np.int64), k) for k, v in (("s", 0), ("e", 512), ("a", 1))
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("X", F, [1, 512])],
        [oh.make_tensor_value_info(x, F, [1, 512])],
        inits,
    )
    os.mkdir(folder)
    path = os.path.join(folder, "m.onnx")
    onnx.save(oh.make_model(graph), path, save_as_external_data=True, location="m.data")
    return path


def test_memory_does_not_grow_with_the_model(tmp_path):
    """Peak memory holds one weight's output and one slab: a model of 8 weights grows
    it as one of 2 does (32 MiB of weights against 8 MiB; holding every output would
    add 3.2 MiB, every weight 24 MiB). Measured on the numpy arithmetic: onnxruntime's
    function starts a thread pool per call, whose arenas depend on timing."""
    small, large = _chain(tmp_path / "small", 2), _chain(tmp_path / "large", 8)
    root = os.path.join(os.path.dirname(__file__), "..")
    growth = {}
    for name, src in (("small", small), ("large", large)):
        script = f"import sys; sys.path.insert(0, {os.path.abspath(root)!r})\n" + _PEAK
        growth[name] = peak_growth_in_subprocess(script, src, tmp_path / f"{name}.onnx")
    assert growth["large"] < growth["small"] + 1.5 * 2**20, growth
    assert growth["large"] < 16 * 2**20, growth
