"""convert_float_to_float16: the graph of onnxruntime's converter, the same weights bit for
bit, without loading them; a sorted graph the checker accepts; in place; the CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest
from helpers import float16_converter_since, for_onnxruntime

import onnx_light.onnx as onnxl
from benchmarks.harness import file_digests

ort = pytest.importorskip("onnxruntime")
float16 = pytest.importorskip("onnxruntime.transformers.float16")

F, H = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16


def _model(folder, name="src.onnx", topk=True, extreme=True) -> str:
    """An MLP with a TopK (blocked by default) and a weight holding values float16
    cannot (an overflow, underflows), its weights in src.data."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((64, 128)).astype(np.float32)
    if extreme:
        w1.flat[:6] = [1e6, -7e4, 1e-9, -3e-8, 65519.0, np.float32(65520.0)]
    w2 = (rng.standard_normal((128, 32)) * 0.05).astype(np.float32)
    b1 = rng.standard_normal(128).astype(np.float32)
    nodes = [
        oh.make_node("MatMul", ["X", "W1"], ["H0"], name="mm1"),
        oh.make_node("Add", ["H0", "B1"], ["H1"], name="add1"),
        oh.make_node("Relu", ["H1"], ["H2"], name="relu"),
        oh.make_node("MatMul", ["H2", "W2"], ["Y"], name="mm2"),
    ]
    outputs = [oh.make_tensor_value_info("Y", F, [2, 32])]
    inits = [onh.from_array(w1, "W1"), onh.from_array(b1, "B1"), onh.from_array(w2, "W2")]
    if topk:
        nodes.append(oh.make_node("TopK", ["Y", "K"], ["V", "I"], name="topk"))
        inits.append(onh.from_array(np.array([3], np.int64), "K"))
        outputs += [
            oh.make_tensor_value_info("V", F, [2, 3]),
            oh.make_tensor_value_info("I", onnx.TensorProto.INT64, [2, 3]),
        ]
    graph = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("X", F, [2, 64])], outputs, inits)
    model = for_onnxruntime(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    path = os.path.join(folder, name)
    onnx.save(model, path, save_as_external_data=True, location="src.data", size_threshold=1024)
    return path


def _usual(src: str, dst: str, **kwargs) -> None:
    """The usual recipe: onnx.load with the weights, onnxruntime's converter, onnx.save."""
    model = float16.convert_float_to_float16(onnx.load(src), **kwargs)
    onnx.save(model, dst, save_as_external_data=True, location=os.path.basename(dst) + ".data")


def _tensors(path: str) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in onnx.load(path).graph.initializer}


def _node_key(node: onnx.NodeProto):
    attrs = tuple(sorted((a.name, a.SerializeToString()) for a in node.attribute))
    return (node.op_type, node.name, tuple(node.input), tuple(node.output), attrs)


def _run(path: str, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0]
    feed = x.astype(np.float16) if name.type == "tensor(float16)" else x
    return session.run(None, {name.name: feed})


@float16_converter_since("1.25")
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"keep_io_types": True},
        {"op_block_list": [], "keep_io_types": True},
        {"node_block_list": ["mm2"]},
        {"force_fp16_initializers": True},
        {"min_positive_val": 1e-7, "max_finite_val": 1e4},
    ],
    ids=["defaults", "keep-io", "no-block-list", "node-block", "force-init", "clip-1e-7-1e4"],
)
def test_the_graph_and_the_weights_of_onnxruntimes_converter(tmp_path, kwargs):
    src = _model(tmp_path)
    before = file_digests(tmp_path)
    ours = str(tmp_path / "ours.onnx")
    theirs = str(tmp_path / "theirs.onnx")
    result = onnxl.convert_float_to_float16(src, ours, **kwargs)
    _usual(src, theirs, **kwargs)
    assert {k: v for k, v in file_digests(tmp_path).items() if k in before} == before  # sources
    mine, usual = onnx.load(ours), onnx.load(theirs)
    assert Counter(map(_node_key, mine.graph.node)) == Counter(map(_node_key, usual.graph.node))
    a, b = _tensors(ours), _tensors(theirs)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].data_type == b[name].data_type, name
        assert onh.to_array(a[name]).tobytes() == onh.to_array(b[name]).tobytes(), name
    onnx.checker.check_model(ours, full_check=True)  # sorted, typed: the checker accepts it
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    for got, expected in zip(_run(ours, x), _run(theirs, x), strict=True):
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes()
    assert result.converted == sum(
        t.data_type == H and t.data_location == onnx.TensorProto.EXTERNAL
        for t in onnx.load(ours, load_external_data=False).graph.initializer
    )


def test_clipped_values_are_counted_per_tensor(tmp_path):
    src = _model(tmp_path)
    result = onnxl.convert_float_to_float16(src, tmp_path / "m16.onnx")
    # 1e6, -7e4, 65519 and 65520 beyond 65504; 1e-9 and -3e-8 under 5.96e-08 (65519 would
    # round to 65504 anyway: the rule counts what it clips, as onnxruntime's converter)
    assert result.clipped == {"W1": 6}
    assert result.values_clipped == 6
    w1 = onh.to_array(_tensors(str(tmp_path / "m16.onnx"))["W1"]).ravel()
    assert list(w1[:6]) == [
        65504,
        -65504,
        np.float16(5.96e-08),
        -np.float16(5.96e-08),
        65504,
        65504,
    ]
    plain = onnxl.convert_float_to_float16(
        _model(tmp_path, "plain.onnx", extreme=False), tmp_path / "p16.onnx"
    )
    assert plain.clipped == {} and plain.values_clipped == 0


def test_bytes_read_and_written(tmp_path):
    src = _model(tmp_path, topk=False)
    result = onnxl.convert_float_to_float16(
        src, tmp_path / "m16.onnx", options=onnxl.WriteOptions(alignment=0)
    )
    weights = (64 * 128 + 128 * 32) * 4  # W1 and W2 (B1, 512 bytes, is inline)
    assert result.converted == 2 and result.converted_inline == 1
    assert result.bytes_read == weights and result.bytes_written == weights // 2
    assert result.bytes_written == os.path.getsize(tmp_path / "m16.onnx.data") == weights // 2
    assert result.weights_paths == [str(tmp_path / "m16.onnx.data")]


def test_in_place_one_commit_and_the_old_weights_reported(tmp_path):
    src = _model(tmp_path)
    expected = str(tmp_path / "expected.onnx")
    onnxl.convert_float_to_float16(src, expected)
    result = onnxl.convert_float_to_float16(src, src)
    assert [os.path.basename(p) for p in result.unreferenced] == ["src.data"]
    assert result.removed == []
    assert os.path.exists(tmp_path / "src.data")
    a, b = _tensors(src), _tensors(expected)
    assert {k: onh.to_array(v).tobytes() for k, v in a.items()} == {
        k: onh.to_array(v).tobytes() for k, v in b.items()
    }
    again = _model(tmp_path / ".." / tmp_path.name, name="second.onnx")
    pruned = onnxl.convert_float_to_float16(
        again, again, options=onnxl.WriteOptions(remove_unreferenced=True)
    )
    assert not pruned.unreferenced or pruned.removed == pruned.unreferenced


def test_a_truncated_source_fails_before_anything_is_written(tmp_path):
    src = _model(tmp_path)
    os.truncate(tmp_path / "src.data", os.path.getsize(tmp_path / "src.data") - 8)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(onnxl.ExternalDataError, match="W2"):
        onnxl.convert_float_to_float16(src, tmp_path / "m16.onnx")
    assert sorted(os.listdir(tmp_path)) == before


def test_a_failure_while_writing_leaves_nothing(tmp_path, monkeypatch):
    from onnx_light.onnx._write import convert as convert_module

    src = _model(tmp_path)
    before = file_digests(tmp_path)

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(convert_module, "convert", boom)
    with pytest.raises(OSError, match="No space"):
        onnxl.convert_float_to_float16(src, src)  # in place: the old model stays
    assert file_digests(tmp_path) == before


def test_bad_settings_are_refused(tmp_path):
    src = _model(tmp_path)
    with pytest.raises(ValueError, match="min_positive_val"):
        onnxl.convert_float_to_float16(src, tmp_path / "a.onnx", min_positive_val=1e-9)
    with pytest.raises(ValueError, match="max_finite_val"):
        onnxl.convert_float_to_float16(src, tmp_path / "a.onnx", max_finite_val=1e5)
    with pytest.raises(TypeError, match="progress"):
        onnxl.convert_float_to_float16(
            src, tmp_path / "a.onnx", options=onnxl.WriteOptions(progress=3)
        )
    with pytest.raises(FileNotFoundError):
        onnxl.convert_float_to_float16(tmp_path / "missing.onnx", tmp_path / "a.onnx")
    assert not (tmp_path / "a.onnx").exists()


@pytest.mark.parametrize(
    "limits, named",
    [
        ({"min_positive_val": float("inf")}, "min_positive_val=inf"),
        ({"min_positive_val": 1e308}, "min_positive_val=1e+308"),
        ({"min_positive_val": 65505.0}, "min_positive_val=65505.0"),
        ({"min_positive_val": 1e6}, "min_positive_val=1000000.0"),
        ({"max_finite_val": 1e-9}, "max_finite_val=1e-09"),
        ({"max_finite_val": float("nan")}, "max_finite_val=nan"),
        ({"min_positive_val": 1000.0, "max_finite_val": 10.0}, "max_finite_val=10.0"),
    ],
    ids=["inf", "1e308", "65505", "1e6", "max-1e-9", "max-nan", "min-above-max"],
)
def test_limits_that_would_destroy_the_weights_are_refused(tmp_path, limits, named):
    """A limit beyond float16's positive range, or a smallest magnitude above the largest,
    would clip weights to 0 or to infinities (onnxruntime's converter takes them): refused,
    naming the limit, before anything is written."""
    src = _model(tmp_path)
    with pytest.raises(ValueError, match=re.escape(named)) as info:
        onnxl.convert_float_to_float16(src, tmp_path / "a.onnx", **limits)
    assert all(name in str(info.value) for name in limits)
    assert sorted(os.listdir(tmp_path)) == ["src.data", "src.onnx"]


def test_progress_reaches_the_total(tmp_path):
    calls = []
    onnxl.convert_float_to_float16(
        _model(tmp_path),
        tmp_path / "m16.onnx",
        options=onnxl.WriteOptions(progress=lambda d, t: calls.append((d, t))),
    )
    assert calls and calls[-1][0] == calls[-1][1] > 0
    assert all(a[0] <= b[0] for a, b in zip(calls, calls[1:]))


# -- the command line -----------------------------------------------------------------


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "onnx_light", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_cli_convert_writes_what_the_function_writes(tmp_path):
    src = _model(tmp_path)
    onnxl.convert_float_to_float16(src, tmp_path / "api.onnx", keep_io_types=True)
    proc = _cli("convert", src, tmp_path / "cli.onnx", "--to", "float16", "--keep-io-types")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:3] == [
        "source src.onnx: 4 tensors, 2 external, 2 inline",
        "float16: 3 tensors converted (1 of them inline in cli.onnx), 1 kept as they were "
        "(not float32: 1 INT64)",
        "cli.onnx.data: 2 tensors, external in the source, aligned to 4096; 2 stay inline in "
        "cli.onnx",
    ]
    assert "clipped 6 values" in proc.stdout and "W1 (6)" in proc.stdout
    a, b = _tensors(str(tmp_path / "api.onnx")), _tensors(str(tmp_path / "cli.onnx"))
    assert {k: onh.to_array(v).tobytes() for k, v in a.items()} == {
        k: onh.to_array(v).tobytes() for k, v in b.items()
    }


@pytest.mark.parametrize(
    "args, message",
    [
        (["--to", "bfloat16"], "only float16"),
        (["--to", "int8"], "only float16"),
        ([], "--to"),
        (["--to", "float16", "--max-finite-val", "-1"], "positive"),
        (["--to", "float16", "--min-positive-val", "x"], "not a number"),
        (["--to", "float16", "--min-positive-val", "inf"], "--min-positive-val: 'inf' is above"),
        (["--to", "float16", "--min-positive-val", "1e400"], "--min-positive-val: '1e400' is abo"),
        (["--to", "float16", "--min-positive-val", "65505"], "--min-positive-val: '65505' is abo"),
        (["--to", "float16", "--min-positive-val", "1e6"], "--min-positive-val: '1e6' is above"),
        (["--to", "float16", "--max-finite-val", "1e-9"], "--max-finite-val: '1e-9' is below"),
        (
            ["--to", "float16", "--min-positive-val", "1000", "--max-finite-val", "10"],
            "--min-positive-val 1000 is above --max-finite-val 10",
        ),
        (
            ["--to", "float16", "--max-finite-val", "10", "--min-positive-val", "1000"],
            "--min-positive-val 1000 is above --max-finite-val 10",
        ),
    ],
)
def test_cli_usage_errors_exit_2(tmp_path, args, message):
    src = _model(tmp_path)
    proc = _cli("convert", src, tmp_path / "out.onnx", *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "out.onnx").exists()


def test_cli_library_errors_exit_1(tmp_path):
    src = _model(tmp_path)
    proc = _cli("convert", src, tmp_path / "out.onnx", "--to", "float16", "--weights", "../w.data")
    assert proc.returncode == 1 and "inside the model's folder" in proc.stderr
    assert proc.stderr.count("\n") == 1  # one line, no traceback


def test_a_model_whose_weights_exceed_2_gib(tmp_path):
    """The graph, its shape inference and the checker run on the model without its
    weights: 2.4 GiB of float32 (a sparse file, a few values set) converts as any other,
    and the result runs in onnxruntime."""
    n, dim = 3, 14336  # three 14336 x 14336 float32 weights: 784 MiB each
    size = dim * dim * 4
    nodes, inits = [], []
    for i in range(n):
        t = onnx.TensorProto(name=f"W{i}", data_type=F, dims=[dim, dim])
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (
            ("location", "big.data"),
            ("offset", str(i * size)),
            ("length", str(size)),
        ):
            t.external_data.add(key=key, value=value)
        inits.append(t)
        nodes.append(oh.make_node("MatMul", ["X" if i == 0 else f"H{i - 1}", f"W{i}"], [f"H{i}"]))
    graph = oh.make_graph(
        nodes,
        "big",
        [oh.make_tensor_value_info("X", F, [1, dim])],
        [oh.make_tensor_value_info(f"H{n - 1}", F, [1, dim])],
        inits,
    )
    model = for_onnxruntime(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    onnx.save(model, tmp_path / "big.onnx")
    marks = {i * size: np.float32(1.5 + i) for i in range(n)}  # W_i[0, 0]
    with open(tmp_path / "big.data", "wb") as f:
        f.truncate(n * size)  # sparse: zeros that take no disk
        for offset, value in marks.items():
            f.seek(offset)
            f.write(value.tobytes())
    assert n * size > 2**31
    result = onnxl.convert_float_to_float16(tmp_path / "big.onnx", tmp_path / "big16.onnx")
    assert result.converted == n and result.bytes_read == n * size
    assert os.path.getsize(tmp_path / "big16.onnx.data") == n * size // 2  # 4096-aligned sizes
    onnx.checker.check_model(str(tmp_path / "big16.onnx"))
    loaded = onnx.load(tmp_path / "big16.onnx", load_external_data=False)
    assert all(t.data_type == H for t in loaded.graph.initializer)
    with open(tmp_path / "big16.onnx.data", "rb") as f:
        for i in range(n):
            f.seek(i * size // 2)
            assert np.frombuffer(f.read(2), np.float16)[0] == 1.5 + i
    x = np.zeros((1, dim), np.float16)
    x[0, 0] = 1
    (y,) = ort.InferenceSession(str(tmp_path / "big16.onnx")).run(None, {"X": x})
    assert y[0, 0] == np.float16(1.5 * 2.5 * 3.5) and np.count_nonzero(y) == 1


@float16_converter_since("1.25")
def test_an_initializer_kept_float32_keeps_its_declared_type(tmp_path):
    """Resize's scales stay float32; torch's dynamo exporter declares them in value_info:
    the declaration stays float32 (onnxruntime's converter makes it float16, which the
    checker's full check refuses), the nodes are onnxruntime's."""
    graph = oh.make_graph(
        [oh.make_node("Resize", ["X", "", "scales"], ["Y"], mode="nearest")],
        "g",
        [oh.make_tensor_value_info("X", F, [1, 1, 2, 2])],
        [oh.make_tensor_value_info("Y", F, [1, 1, 4, 4])],
        [onh.from_array(np.array([1, 1, 2, 2], np.float32), "scales")],
        value_info=[oh.make_tensor_value_info("scales", F, [4])],
    )
    src = str(tmp_path / "src.onnx")
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), src)
    onnx.checker.check_model(src, full_check=True)
    onnxl.convert_float_to_float16(src, tmp_path / "ours.onnx")
    _usual(src, str(tmp_path / "theirs.onnx"))
    ours, theirs = onnx.load(tmp_path / "ours.onnx"), onnx.load(tmp_path / "theirs.onnx")
    types = {v.name: v.type.tensor_type.elem_type for v in ours.graph.value_info}
    assert types["scales"] == F and ours.graph.initializer[0].data_type == F
    assert Counter(map(_node_key, ours.graph.node)) == Counter(map(_node_key, theirs.graph.node))
    onnx.checker.check_model(str(tmp_path / "ours.onnx"), full_check=True)


# -- size_threshold for inline tensors -------------------------------------------------


def _single_file(folder) -> str:
    """A model held in one file: a 2 KiB float32 W and a 2.4 KiB int64 table, inline."""
    w = np.linspace(-3, 3, 512, dtype=np.float32).reshape(16, 32)
    table = np.arange(300, dtype=np.int64) * 7
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W"], ["Y"]), oh.make_node("Gather", ["T", "I"], ["Z"])],
        "g",
        [oh.make_tensor_value_info("X", F, [2, 16]), oh.make_tensor_value_info("I", 7, [3])],
        [oh.make_tensor_value_info("Y", F, [2, 32]), oh.make_tensor_value_info("Z", 7, [3])],
        [onh.from_array(w, "W"), onh.from_array(table, "T")],
    )
    path = os.path.join(folder, "single.onnx")
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)
    return path


def test_inline_tensors_under_the_threshold_stay_inline(tmp_path):
    """With a threshold above every tensor, the converted model stays one file; its
    values are onnxruntime's converter's."""
    src = _single_file(tmp_path)
    result = onnxl.convert_float_to_float16(
        src, tmp_path / "o.onnx", options=onnxl.WriteOptions(size_threshold=1 << 20)
    )
    assert sorted(os.listdir(tmp_path)) == ["o.onnx", "single.onnx"]
    assert result.weights_paths == [] and result.bytes_written == 0
    model = onnx.load(tmp_path / "o.onnx", load_external_data=False)
    assert all(t.data_location != onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    expected = float16.convert_float_to_float16(onnx.load(src))
    ours = {t.name: t for t in model.graph.initializer}
    for t in expected.graph.initializer:
        assert ours[t.name].data_type == t.data_type, t.name
        assert onh.to_array(ours[t.name]).tobytes() == onh.to_array(t).tobytes(), t.name
    onnx.checker.check_model(str(tmp_path / "o.onnx"), full_check=True)


def test_inline_tensors_at_the_threshold_move_out(tmp_path):
    """With a threshold under both tensors, they move to the weights file as before."""
    src = _single_file(tmp_path)
    result = onnxl.convert_float_to_float16(
        src, tmp_path / "o.onnx", options=onnxl.WriteOptions(size_threshold=1024)
    )
    assert result.weights_paths == [str(tmp_path / "o.onnx.data")]
    model = onnx.load(tmp_path / "o.onnx", load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
    expected = {
        t.name: t for t in float16.convert_float_to_float16(onnx.load(src)).graph.initializer
    }
    for name, t in _tensors(str(tmp_path / "o.onnx")).items():
        assert onh.to_array(t).tobytes() == onh.to_array(expected[name]).tobytes(), name


@pytest.mark.parametrize("threshold, where", [(1024, "external"), (1025, "inline")])
def test_the_threshold_measures_float_data_as_raw_data(tmp_path, threshold, where):
    """Two float32 initializers of 1024 bytes, one in raw_data and one in float_data: the
    threshold compares both by their size in the source, so both move out or both stay;
    their values are onnxruntime's converter's."""
    values = np.linspace(-2, 2, 256, dtype=np.float32)
    inits = [onh.from_array(values, "raw"), oh.make_tensor("fdata", F, [256], values.tolist())]
    graph = oh.make_graph(
        [oh.make_node("Add", ["X", t.name], [t.name + "_o"]) for t in inits],
        "g",
        [oh.make_tensor_value_info("X", F, [1])],
        [oh.make_tensor_value_info(t.name + "_o", F, None) for t in inits],
        inits,
    )
    src = str(tmp_path / "m.onnx")
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), src)
    dst = tmp_path / "o.onnx"
    options = onnxl.WriteOptions(size_threshold=threshold)
    onnxl.convert_float_to_float16(src, dst, options=options)
    held = onnx.load(dst, load_external_data=False).graph.initializer
    external = {t.name: t.data_location == onnx.TensorProto.EXTERNAL for t in held}
    assert external == {"raw": where == "external", "fdata": where == "external"}
    expected = float16.convert_float_to_float16(onnx.load(src))
    ours = _tensors(str(dst))
    for t in expected.graph.initializer:
        assert onh.to_array(ours[t.name]).tobytes() == onh.to_array(t).tobytes(), t.name


# -- the clipping limits' numpy type ----------------------------------------------------

_NAN_BITS = [0x7F800001, 0xFF800001, 0x7FC00001, 0xFFC00001, 0x7FC00000, 0xFFBFFFFF]


def _edge_values(n: int) -> np.ndarray:
    """``n`` float32 values: NaN payloads (signalling and quiet, both signs), subnormals,
    values under and beyond the limits, infinities, zeros, then ordinary values."""
    special = np.concatenate(
        [
            np.array(_NAN_BITS, np.uint32).view(np.float32),
            np.array([1e-40, -1e-40, 1e-9, -3e-8, 5e-8, -9e-8, 2e-7], np.float32),
            np.array([2e4, -2e4, 1e5, -7e4, 65519, np.inf, -np.inf, 0.0, -0.0], np.float32),
        ]
    )
    values = np.linspace(-3, 3, n, dtype=np.float32)
    values[: special.size] = special
    return values


def _limits_model(folder) -> str:
    """Each way a float32 tensor can be held, each with the edge values: external (E),
    inline and moved out (B, 2 KiB), inline and kept (S, 256 bytes), in float_data (D)."""
    inits = [
        onh.from_array(_edge_values(1024), "E"),
        onh.from_array(_edge_values(512), "B"),
        onh.from_array(_edge_values(64), "S"),
        oh.make_tensor("D", F, [64], _edge_values(64).tolist()),
    ]
    nodes = [oh.make_node("Add", ["X", name], [f"Y{name}"]) for name in "EBSD"]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("X", F, [1])],
        [oh.make_tensor_value_info(f"Y{name}", F, None) for name in "EBSD"],
        inits,
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)])
    onnx.external_data_helper.convert_model_to_external_data(
        model, all_tensors_to_one_file=True, location="src.data", size_threshold=4096
    )
    path = str(folder / "src.onnx")
    onnx.save(model, path)
    return path


@pytest.mark.parametrize(
    "low, high",
    [
        (np.float64(1e-7), np.float64(1e4)),
        (1e-7, 1e4),
        (5.96e-08, 65504.0),
        (65504.0, 65504.0),
        (np.float64(2.5), np.float64(2.5)),
        (5.96e-08, 5.96e-08),
    ],
    ids=["float64-limits", "float-limits", "defaults", "both-65504", "both-2.5", "both-smallest"],
)
def test_the_limits_type_is_onnxruntimes_bit_for_bit(tmp_path, low, high):
    """A numpy float64 limit makes onnxruntime's converter clip in float64 (a NaN
    payload then comes out quiet), a Python float in float32 (kept): each tensor,
    external or inline, NaN bits included, is what onnxruntime's converter makes."""
    src = _limits_model(tmp_path)
    held = onnx.load(src, load_external_data=False).graph.initializer
    assert {t.name: t.data_location for t in held} == {
        "E": onnx.TensorProto.EXTERNAL,
        "B": onnx.TensorProto.DEFAULT,
        "S": onnx.TensorProto.DEFAULT,
        "D": onnx.TensorProto.DEFAULT,
    }
    onnxl.convert_float_to_float16(
        src, tmp_path / "o.onnx", min_positive_val=low, max_finite_val=high
    )
    expected = float16.convert_float_to_float16(
        onnx.load(src), min_positive_val=low, max_finite_val=high
    )
    out = onnx.load(tmp_path / "o.onnx", load_external_data=False).graph.initializer
    moved = {t.name for t in out if t.data_location == onnx.TensorProto.EXTERNAL}
    assert moved == {"E", "B"}  # streamed and cast; S and D converted in memory
    ours = _tensors(str(tmp_path / "o.onnx"))
    for t in expected.graph.initializer:
        got = onh.to_array(ours[t.name]).view(np.uint16)
        want = onh.to_array(t).view(np.uint16)
        assert [hex(b) for b in got] == [hex(b) for b in want], t.name
