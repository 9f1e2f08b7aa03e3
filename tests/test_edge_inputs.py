"""Inputs at the edges of the planner and the layout (issue 31, item 1).

An empty ``[0, 4]`` tensor, string class labels, tensors shared or deduplicated
across shard boundaries, a tensor ending exactly at ``max_shard_size``, exactly
100 transformers.js shards, tensors of exactly ``inline_below`` bytes, and the
counts ``align`` reports for small raw and typed-field tensors it moves. Each
test fails if the behaviour it names breaks (the change the mutation audit made
is named in its docstring). References that are odd but valid, or refused at
their boundary, are in ``test_edge_references.py``.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from helpers import (
    external_offsets,
    external_places,
    external_tensor,
    folder_digest,
    read_back,
    run_cli,
    save_two_file,
    tensor_bytes,
    uint8_model,
)
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl

KiB = 1024


def _ort(path, feeds=None):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds or {})


def _runnable(nodes, outputs, inits, inputs=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", list(inputs), outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def _shards(path) -> dict[str, list[tuple[int, int]]]:
    """{location: [(offset, length)...]} of the model at ``path``, in the walker's order."""
    out: dict[str, list[tuple[int, int]]] = {}
    for location, offset, length in external_offsets(path):
        out.setdefault(location, []).append((offset, length))
    return out


def _uint8(sizes) -> onnx.ModelProto:
    """A model of uint8 initializers W0, W1... of ``sizes`` random bytes."""
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.integers(0, 255, n, dtype=np.uint8), f"W{i}")
        for i, n in enumerate(sizes)
    ]
    return helper.make_model(helper.make_graph([], "g", [], [], inits))


def _assert_same_values(path, model: onnx.ModelProto) -> None:
    """onnx loads from ``path`` the initializers of ``model``, values, dtypes and shapes
    equal (strings included, which ``tensor_bytes`` cannot compare)."""
    got = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    want = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        assert np.array_equal(got[name], value), name


def _sizes(folder, names) -> list[int]:
    return [os.path.getsize(os.path.join(folder, n)) for n in names]


# -- an empty tensor -------------------------------------------------------------------


def _empty_model() -> onnx.ModelProto:
    """Y = Concat(E, W): E is an empty [0, 4] float32 tensor (raw_data b"")."""
    empty = numpy_helper.from_array(np.zeros((0, 4), np.float32), "E")
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "W")
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 4])
    return _runnable([helper.make_node("Concat", ["E", "W"], ["Y"], axis=0)], [out], [empty, w])


def test_empty_tensor_goes_to_external_data_with_threshold_0(tmp_path):
    """size_threshold=0 moves the empty tensor too: a reference of length 0, which onnx,
    onnxruntime and we read back as an empty [0, 4] array. (Mutant: the planner's
    ``size < 0`` refusal turned ``size <= 0``.)"""
    model = _empty_model()
    opts = onnxl.SerializeOptions(size_threshold=0)
    onnxl.save(model, tmp_path / "m.onnx", "m.onnx.data", options=opts)
    places = external_places(tmp_path / "m.onnx")
    assert places == {"E": ("m.onnx.data", 0, 0), "W": ("m.onnx.data", 0, 64)}
    assert os.path.getsize(tmp_path / "m.onnx.data") == 64
    onnx.checker.check_model(str(tmp_path / "m.onnx"))
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)
    loaded = onnxl.load(tmp_path / "m.onnx").graph.initializer[0]
    assert numpy_helper.to_array(loaded).shape == (0, 4)
    np.testing.assert_array_equal(_ort(tmp_path / "m.onnx")[0], np.arange(16).reshape(4, 4))
    # re-aligned with every tensor moving: the same reference of length 0
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", tmp_path / "a.onnx", size_threshold=0
    )
    assert (result.moved, result.inline) == (2, 0)
    assert external_places(tmp_path / "a.onnx")["E"] == ("a.onnx.data", 0, 0)
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)


# -- string class labels ---------------------------------------------------------------

LABELS = [b"cat", b"dog", "\u00e9l\u00e9phant".encode()]


def _labels_model(seed: int = 0) -> onnx.ModelProto:
    """label = labels[argmax(X @ W)]: a classifier whose class labels are a STRING initializer."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.standard_normal((128, 3)).astype(np.float32), "W")
    labels = helper.make_tensor("labels", TensorProto.STRING, [3], LABELS)
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["scores"]),
        helper.make_node("ArgMax", ["scores"], ["index"], axis=1, keepdims=0),
        helper.make_node("Gather", ["labels", "index"], ["label"]),
    ]
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [4, 128])
    out = helper.make_tensor_value_info("label", TensorProto.STRING, [4])
    return _runnable(nodes, [out], [w, labels], [x])


_X = {"X": np.random.default_rng(5).standard_normal((4, 128)).astype(np.float32)}


def _labels_of(path) -> tuple[list[bytes], str]:
    """The labels tensor as saved (inline), and the predictions onnxruntime makes."""
    model = onnx.load(str(path), load_external_data=False)
    (t,) = [t for t in model.graph.initializer if t.name == "labels"]
    assert t.data_location == TensorProto.DEFAULT and not t.external_data
    return list(t.string_data), list(_ort(path, _X)[0])


def test_string_labels_through_save_align_and_dedup(tmp_path):
    """A STRING initializer stays inline, its values intact, through every writer; the
    float weights move. (Mutant: the planner's ``continue  # a string, or no data``
    removed, which made each of them crash.)"""
    model = _labels_model()
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(model, str(src / "single.onnx"))
    expected = _labels_of(src / "single.onnx")
    assert expected[0] == LABELS and set(expected[1]) <= {b.decode() for b in LABELS}
    out = tmp_path / "out"
    out.mkdir()
    onnxl.save(model, out / "saved.onnx", "saved.onnx.data")
    result = onnxl.align_external_data_streaming(src / "single.onnx", out / "aligned.onnx")
    assert (result.moved, result.inline) == (1, 0)  # W moved; strings are not counted
    save_two_file(model, src / "a.onnx", size_threshold=0)
    save_two_file(_labels_model(), src / "b.onnx", size_threshold=0)
    digest = folder_digest(src)
    dedup = onnxl.deduplicate_external_data(
        [src / "a.onnx", src / "b.onnx"], [out / "da.onnx", out / "db.onnx"], out / "d.data"
    )
    assert dedup.bytes_written == 128 * 3 * 4  # W once, for both models
    for name in ("saved.onnx", "aligned.onnx", "da.onnx", "db.onnx"):
        assert _labels_of(out / name) == expected, name
        assert set(external_places(out / name)) == {"W"}, name
        _assert_same_values(out / name, model)
    assert folder_digest(src) == digest, "the sources are untouched"


# -- shared and deduplicated tensors across shards -------------------------------------


def _shared_span_model(folder) -> dict[str, bytes]:
    """m.onnx: T0 and T2 read one range of w.data, T1 another; returns their bytes."""
    data = np.random.default_rng(0).integers(0, 255, 6000, dtype=np.uint8).tobytes()
    (folder / "w.data").write_bytes(data)
    refs = [("T0", 0, 3000), ("T1", 3000, 3000), ("T2", 0, 3000)]
    inits = [external_tensor(n, "w.data", str(o), k) for n, o, k in refs]
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [], inits)), str(folder / "m.onnx"))
    return {n: data[o : o + k] for n, o, k in refs}


def _values(path) -> dict[str, bytes]:
    return {t.name: t.raw_data for t in onnxl.load(path).graph.initializer}


def test_a_shared_range_stays_in_its_home_shard(tmp_path):
    """T2 reads the bytes T0 reads; T1 fills the first shard, so T2 comes after a shard
    boundary: it points at T0's copy in the first shard, nothing is copied twice. (Mutants:
    the ``continue`` after ``groups[home[key]].append(i)`` removed; the home shard
    recorded as another one.)"""
    expected = _shared_span_model(tmp_path)
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", tmp_path / "a.onnx", alignment=64, max_shard_size=4 * KiB
    )
    first, second = "a-00001-of-00002.onnx.data", "a-00002-of-00002.onnx.data"
    assert result.weights_paths == [str(tmp_path / first), str(tmp_path / second)]
    places = external_places(tmp_path / "a.onnx")
    assert places == {"T0": (first, 0, 3000), "T1": (second, 0, 3000), "T2": (first, 0, 3000)}
    assert _sizes(tmp_path, [first, second]) == [3000, 3000]
    assert result.size == 6000
    assert _values(tmp_path / "a.onnx") == expected


def test_deduplicated_tensors_point_into_the_first_models_shards(tmp_path):
    """b.onnx holds a.onnx's two tensors again; a.onnx's fill one shard each: b's point at
    them, in their shards, and the shards hold each byte string once."""
    src = tmp_path / "src"
    src.mkdir()
    model = uint8_model(2, 3000)
    save_two_file(model, src / "a.onnx", size_threshold=0)
    save_two_file(model, src / "b.onnx", size_threshold=0)
    out = tmp_path / "out"
    out.mkdir()
    result = onnxl.deduplicate_external_data(
        [src / "a.onnx", src / "b.onnx"],
        [out / "a.onnx", out / "b.onnx"],
        out / "w.data",
        alignment=64,
        max_shard_size=4 * KiB,
        size_threshold=0,
    )
    names = ["w-00001-of-00002.data", "w-00002-of-00002.data"]
    assert result.weights_paths == [str(out / n) for n in names]
    a, b = external_places(out / "a.onnx"), external_places(out / "b.onnx")
    assert a == b == {"W0": (names[0], 0, 3000), "W1": (names[1], 0, 3000)}
    assert _sizes(out, names) == [3000, 3000] and result.bytes_written == 6000
    assert read_back(out / "a.onnx") == read_back(out / "b.onnx") == tensor_bytes(model)


def test_tensor_ending_exactly_at_the_limit_and_a_new_shard_from_offset_0(tmp_path):
    """W1 ends at exactly max_shard_size: it stays in the first shard. W2 opens the next
    at offset 0, and W3 fits after it there. (Mutants: ``offset + size > max_shard_size``
    turned ``>=``; the new shard's ``offset = 0`` removed, which pushed W3 to a third.)"""
    model = _uint8([4096, 4096, 3000, 5000])
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", tmp_path / "a.onnx", alignment=64, max_shard_size=8 * KiB
    )
    first, second = "a-00001-of-00002.onnx.data", "a-00002-of-00002.onnx.data"
    assert _shards(tmp_path / "a.onnx") == {
        first: [(0, 4096), (4096, 4096)],
        second: [(0, 3000), (3008, 5000)],
    }
    assert _sizes(tmp_path, [first, second]) == [8 * KiB, 8008]
    assert result.size == 8 * KiB + 8008
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)


# -- transformers.js: exactly 100 files ------------------------------------------------


def test_exactly_100_transformers_js_shards_are_written(tmp_path):
    """transformers.js loads up to 100 files: 100 shards are written and read back.
    (Mutant: the limit 100 turned 99.)"""
    model = uint8_model(100, 100)
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    out = tmp_path / "out"
    out.mkdir()
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", out / "model.onnx", max_shard_size=100, shard_naming="transformers.js"
    )
    names = ["model.onnx_data"] + [f"model.onnx_data_{i}" for i in range(1, 100)]
    assert result.weights_paths == [str(out / n) for n in names]
    assert sorted(os.listdir(out)) == sorted(["model.onnx", *names])
    assert [loc for loc, _, _ in external_offsets(out / "model.onnx")] == names
    assert read_back(out / "model.onnx") == tensor_bytes(model)
    opts = onnxl.SerializeOptions(
        size_threshold=0, max_shard_size=100, shard_naming="transformers.js"
    )
    onnxl.save(model, out / "model.onnx", "model.onnx_data", options=opts)
    assert [loc for loc, _, _ in external_offsets(out / "model.onnx")] == names
    assert read_back(out / "model.onnx") == tensor_bytes(model)


@pytest.mark.parametrize("naming", [1, b"transformers.js", None, ["onnx-ir"]])
def test_shard_naming_that_is_not_a_string_is_a_type_error(tmp_path, naming):
    """A value of the wrong type raises TypeError, as the API page says of every setting;
    nothing is written. (Mutant: the ``isinstance(value, str)`` check removed, which
    raised ValueError.)"""
    save_two_file(uint8_model(3, 3000), tmp_path / "m.onnx", size_threshold=0)
    before = folder_digest(tmp_path)
    with pytest.raises(TypeError, match="shard_naming must be a str"):
        onnxl.SerializeOptions(shard_naming=naming)
    opts = onnxl.SerializeOptions()
    with pytest.raises(TypeError, match="shard_naming must be a str"):
        opts.shard_naming = naming
    assert opts.shard_naming == "onnx-ir"
    if naming is not None:  # align's default: onnx-ir, or in place the naming the model follows
        with pytest.raises(TypeError, match="shard_naming must be a str"):
            onnxl.align_external_data_streaming(
                tmp_path / "m.onnx", tmp_path / "a.onnx", max_shard_size=4000, shard_naming=naming
            )
    assert folder_digest(tmp_path) == before


# -- inline_below at its boundary ------------------------------------------------------


@pytest.mark.parametrize("limit", [512, 2000], ids=["held in memory", "read from the file"])
def test_tensors_of_exactly_inline_below_bytes(tmp_path, limit):
    """``inline_below`` keeps inline the tensors of *fewer* bytes: one of exactly that many
    goes to the weights file (an inline one moved by size_threshold=0), or stays there (an
    external one). (Mutants: ``size >= inline_below`` turned ``>``; ``ref.length <
    inline_below`` turned ``<=``.) Tensors under 1 KiB are held in memory by the scan,
    bigger ones read from the .onnx: both paths."""
    model = _uint8([limit, limit - 1])
    onnx.save(model, str(tmp_path / "single.onnx"))
    result = onnxl.align_external_data_streaming(
        tmp_path / "single.onnx", tmp_path / "a.onnx", size_threshold=0, inline_below=limit
    )
    assert (result.moved, result.inline, result.inlined) == (1, 1, 0)
    assert external_places(tmp_path / "a.onnx") == {"W0": ("a.onnx.data", 0, limit)}
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)
    # both external: the one of exactly ``limit`` bytes stays there, the smaller comes back
    save_two_file(model, tmp_path / "two.onnx", size_threshold=0)
    result = onnxl.align_external_data_streaming(
        tmp_path / "two.onnx", tmp_path / "b.onnx", inline_below=limit
    )
    assert (result.moved, result.inline, result.inlined) == (1, 1, 1)
    assert external_places(tmp_path / "b.onnx") == {"W0": ("b.onnx.data", 0, limit)}
    assert read_back(tmp_path / "b.onnx") == tensor_bytes(model)


# -- what align reports of the small tensors it moves ----------------------------------


def _small_tensors_model() -> onnx.ModelProto:
    """A single-file model: a big tensor, small raw and float_data ones, string labels, and
    an empty typed tensor (no bytes to move)."""
    big = numpy_helper.from_array(np.arange(1024, dtype=np.float32), "big")
    raw = numpy_helper.from_array(np.arange(4, dtype=np.float32) + 0.5, "raw")
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [8], [1.5 * i for i in range(8)])
    labels = helper.make_tensor("labels", TensorProto.STRING, [2], [b"no", b"yes"])
    empty = helper.make_tensor("empty", TensorProto.FLOAT, [0], [])
    graph = helper.make_graph([], "g", [], [], [big, raw, typed, labels, empty])
    return helper.make_model(graph)


def test_align_counts_small_raw_and_typed_tensors_it_moves(tmp_path, capsys):
    """size_threshold=0 moves the small raw tensor and the float_data one (held in memory
    by the scan, not read from the file): counted as moved, one as typed, none as kept
    inline (the labels and the empty tensor have no bytes to count). (Mutants: the
    ``continue`` after the raw or the typed item removed, counting it inline as well.)"""
    model = _small_tensors_model()
    onnx.save(model, str(tmp_path / "m.onnx"))
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", tmp_path / "a.onnx", size_threshold=0, alignment=64
    )
    assert (result.moved, result.typed, result.inline, result.inlined) == (3, 1, 0, 0)
    assert external_places(tmp_path / "a.onnx") == {
        "big": ("a.onnx.data", 0, 4096),
        "raw": ("a.onnx.data", 4096, 16),
        "typed": ("a.onnx.data", 4160, 32),
    }
    saved = onnx.load(str(tmp_path / "a.onnx"), load_external_data=False)
    typed = [t for t in saved.graph.initializer if t.name == "typed"][0]
    assert len(typed.float_data) == 0, "the typed field is cleared once moved"
    _assert_same_values(tmp_path / "a.onnx", model)
    code, out, err = run_cli(
        capsys, "align", tmp_path / "m.onnx", tmp_path / "c.onnx", "--size-threshold", "0"
    )
    assert code == 0, err
    assert "for 3 tensors (1 from typed fields such as float_data)" in out
    # by default (1024 bytes) the small ones stay: counted inline, the labels left out
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "b.onnx")
    assert (result.moved, result.typed, result.inline, result.threshold) == (1, 0, 2, 1024)
    assert set(external_places(tmp_path / "b.onnx")) == {"big"}
    _assert_same_values(tmp_path / "b.onnx", model)
