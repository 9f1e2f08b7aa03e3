"""The planner's decision table (``_plan/planner.py``), and the writers following it.

Every combination of where a tensor's bytes are, what the writer does with
external tensors, and the three size facts, against the rules written out
independently here; then one model with a tensor of every kind, planned
under each mode, lands where the table says. Then the inputs a user may hand
the planner: a string tensor before the weights (planning goes on past it),
external bytes brought back into a single ``.onnx`` (they count towards
protobuf's 2 GiB limit), and a raw tensor of a data type onnx does not know
(it moves by its length), and the largest layout a file can hold (2**63 - 1
bytes). What each writer does with an empty ``[0, 4]`` tensor, string class
labels, tensors of exactly ``inline_below`` bytes, and the counts ``align``
reports for the small raw and typed-field tensors it moves.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import onnx
import pytest
from helpers import (
    external_offsets,
    external_places,
    folder_digest,
    read_back,
    run_cli,
    save_two_file,
    tensor_bytes,
    uint8_model,
)
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx import _pipeline
from onnx_light.onnx._plan.layout import MAX_FILE_SIZE, plan_layout, plan_shards
from onnx_light.onnx._plan.planner import EXTERNAL_FATE, Fate, Kind, Mode, decide


def expected(kind: Kind, mode: Mode, moves: bool, small: bool, sparse: bool) -> Fate:
    """The rules as the docs state them, one by one."""
    if kind is Kind.EMPTY:
        return Fate.STAY  # nothing to place
    if kind is Kind.EXTERNAL:
        if small:
            return Fate.SPLICE  # inline_below brings it back inline
        if mode is Mode.KEEP:
            return Fate.KEEP  # use_external_data_location: the reference as it is
        if mode is Mode.MOVE and not sparse:
            return Fate.WEIGHTS
        return Fate.SPLICE  # save without a location, or a sparse tensor's values
    if moves:
        return Fate.WEIGHTS  # inline bytes past the threshold move out
    return Fate.SPLICE if kind is Kind.OWN else Fate.STAY


CASES = list(itertools.product(Kind, Mode, [False, True], [False, True], [False, True]))


@pytest.mark.parametrize(("kind", "mode", "moves", "small", "sparse"), CASES)
def test_the_decision_table(kind, mode, moves, small, sparse):
    assert decide(kind, mode, moves, small, sparse) is expected(kind, mode, moves, small, sparse)


def test_the_external_table_has_every_mode():
    assert set(EXTERNAL_FATE) == set(itertools.product(Mode, [False, True]))
    assert EXTERNAL_FATE[Mode.MOVE, True] is Fate.SPLICE  # onnx never loads external sparse values


def _every_kind(folder):
    """An external W (8 KiB, in w.data), an inline R (4 KiB of raw_data), a typed T
    (4 KiB of float_data), a string S."""
    w = numpy_helper.from_array(np.ones(2048, np.float32), "W")
    r = numpy_helper.from_array(np.full(1024, 2, np.float32), "R")
    t = helper.make_tensor("T", 1, [1024], np.full(1024, 3, np.float32).tolist())  # float_data
    s = helper.make_tensor("S", 8, [2], [b"a", b"b"])  # STRING
    model = helper.make_model(helper.make_graph([], "g", [], [], [w, r, t, s]))
    save_two_file(model, folder / "m.onnx", location="w.data", size_threshold=8192)
    meta = onnxl.load(folder / "m.onnx", load_external_data=False)
    names = [i.name for i in meta.graph.initializer]
    assert names == ["W", "R", "T", "S"]
    assert [bool(t.external_data) for t in meta.graph.initializer] == [True, False, False, False]
    return meta


def _where(path) -> dict[str, str]:
    """{initializer: its location, or 'inline'}."""
    model = onnxl.load(path, load_external_data=False)
    return {
        t.name: {e.key: e.value for e in t.external_data}.get("location", "inline")
        for t in model.graph.initializer
    }


def test_save_moves_what_the_table_says(tmp_path):
    meta = _every_kind(tmp_path)
    opts = onnxl.SerializeOptions(size_threshold=1024, use_external_data_location=False)
    opts.base_dir = str(tmp_path)
    # MOVE (a location given): W, R and T to the weights files, S stays
    onnxl.save(meta, tmp_path / "move.onnx", location="move.data", options=opts)
    assert _where(tmp_path / "move.onnx") == {
        "W": "move.data", "R": "move.data", "T": "move.data", "S": "inline"
    }  # fmt: skip
    # INLINE (no location): every external tensor spliced back, the others stay
    onnxl.save(meta, tmp_path / "one.onnx", options=opts)
    assert set(_where(tmp_path / "one.onnx").values()) == {"inline"}
    # KEEP: the reference as it is, R and T move past the threshold
    keep = onnxl.SerializeOptions(size_threshold=1024)
    onnxl.save(meta, tmp_path / "keep.onnx", location="keep.data", options=keep)
    assert _where(tmp_path / "keep.onnx") == {
        "W": "w.data", "R": "keep.data", "T": "keep.data", "S": "inline"
    }  # fmt: skip


# -- inputs the planner meets ------------------------------------------------------------


def test_a_string_tensor_first_does_not_stop_the_plan(tmp_path):
    """Class labels (STRING, no raw bytes) come first in the graph: the float weights
    after them still move to the weights file, the labels stay inline, values equal."""
    labels = helper.make_tensor("labels", TensorProto.STRING, [3], [b"cat", b"dog", b"eel"])
    w = numpy_helper.from_array(np.arange(1024, dtype=np.float32), "W")
    v = numpy_helper.from_array(np.ones(512, np.float32), "V")
    model = helper.make_model(helper.make_graph([], "g", [], [], [labels, w, v]))
    onnxl.save(
        model, tmp_path / "m.onnx", "m.data", options=onnxl.SerializeOptions(size_threshold=0)
    )
    assert external_offsets(tmp_path / "m.onnx") == [("m.data", 0, 4096), ("m.data", 4096, 2048)]
    saved = onnx.load(str(tmp_path / "m.onnx"))
    assert list(saved.graph.initializer[0].string_data) == [b"cat", b"dog", b"eel"]
    for got, want in zip(saved.graph.initializer, model.graph.initializer, strict=True):
        np.testing.assert_array_equal(numpy_helper.to_array(got), numpy_helper.to_array(want))


def test_external_bytes_brought_inline_count_towards_the_single_file_limit(tmp_path, monkeypatch):
    """A single-file save of a model whose two 6000-byte tensors are external (bytes
    streamed from base_dir) and one of 3000 inline: 15000 bytes of tensor data, over the
    limit (lowered to 10000 here: 2 GiB in real life), refused before writing, with the
    count of every byte."""
    src = tmp_path / "src"
    src.mkdir()
    save_two_file(uint8_model(2, 6000), src / "m.onnx", size_threshold=0)
    meta = onnxl.load(src / "m.onnx", load_external_data=False)
    meta.graph.initializer.append(numpy_helper.from_array(np.zeros(3000, np.uint8), "small"))
    monkeypatch.setattr(_pipeline, "PROTOBUF_LIMIT", 10_000)
    out = tmp_path / "out"
    out.mkdir()
    opts = onnxl.SerializeOptions(use_external_data_location=False, base_dir=src)
    with pytest.raises(ValueError) as info:
        onnxl.save(meta, out / "one.onnx", options=opts)
    assert str(info.value) == (
        f"model for '{out / 'one.onnx'}' holds 15000 bytes of tensor data, over protobuf's "
        "2 GiB limit: pass location= to store the weights in a second file"
    )
    assert os.listdir(out) == []


def test_raw_data_of_an_unknown_data_type_moves_by_its_length(tmp_path):
    """A tensor of a data type onnx does not know (99), holding 2000 raw bytes, moves to
    the weights file (its length, not dtype x dims, compared with size_threshold); one of
    500 bytes stays inline. Both keep their bytes."""
    big = onnx.TensorProto(name="big", data_type=99, dims=[2000], raw_data=bytes(range(250)) * 8)
    small = onnx.TensorProto(name="small", data_type=99, dims=[500], raw_data=b"\x07" * 500)
    model = helper.make_model(helper.make_graph([], "g", [], [], [big, small]))
    onnxl.save(
        model, tmp_path / "m.onnx", "m.data", options=onnxl.SerializeOptions(size_threshold=1024)
    )
    assert external_offsets(tmp_path / "m.onnx") == [("m.data", 0, 2000)]
    assert (tmp_path / "m.data").read_bytes() == big.raw_data
    saved = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert saved.graph.initializer[1].raw_data == small.raw_data


def test_the_planner_takes_2_63_minus_1_bytes_and_no_more():
    """The boundary itself, where no file can be built: the planner accepts a layout of
    2**63 - 1 bytes, the largest file offset, in one file or in shards, and refuses one
    byte more."""
    assert MAX_FILE_SIZE == 2**63 - 1
    assert plan_layout([2**62, 2**62 - 1], 1).total == 2**63 - 1
    assert plan_shards([2**62, 2**62 - 1], 1, max_shard_size=2**63)[0].layout.total == 2**63 - 1
    with pytest.raises(ValueError, match=rf"{2**63} bytes"):
        plan_layout([2**62, 2**62], 1)
    with pytest.raises(ValueError, match=rf"{2**63} bytes"):
        plan_shards([2**62, 2**62], 1, max_shard_size=2**63)


# -- what each writer does with empty, string, small and typed tensors -------------------


def _ort(path, feeds=None):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds or {})


def _runnable(nodes, outputs, inits, inputs=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", list(inputs), outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


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


# -- an empty tensor -------------------------------------------------------------------


def _empty_model() -> onnx.ModelProto:
    """Y = Concat(E, W): E is an empty [0, 4] float32 tensor (raw_data b"")."""
    empty = numpy_helper.from_array(np.zeros((0, 4), np.float32), "E")
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "W")
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4, 4])
    return _runnable([helper.make_node("Concat", ["E", "W"], ["Y"], axis=0)], [out], [empty, w])


def test_empty_tensor_goes_to_external_data_with_threshold_0(tmp_path):
    """size_threshold=0 moves the empty tensor too: a reference of length 0, which onnx,
    onnxruntime and we read back as an empty [0, 4] array."""
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
        tmp_path / "m.onnx", tmp_path / "a.onnx", options=onnxl.WriteOptions(size_threshold=0)
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
    float weights move."""
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


# -- inline_below at its boundary ------------------------------------------------------


@pytest.mark.parametrize("limit", [512, 2000], ids=["held in memory", "read from the file"])
def test_tensors_of_exactly_inline_below_bytes(tmp_path, limit):
    """``inline_below`` keeps inline the tensors of *fewer* bytes: one of exactly that many
    goes to the weights file (an inline one moved by size_threshold=0), or stays there (an
    external one). Tensors under 1 KiB are held in memory by the scan,
    bigger ones read from the .onnx: both paths."""
    model = _uint8([limit, limit - 1])
    onnx.save(model, str(tmp_path / "single.onnx"))
    result = onnxl.align_external_data_streaming(
        tmp_path / "single.onnx",
        tmp_path / "a.onnx",
        inline_below=limit,
        options=onnxl.WriteOptions(size_threshold=0),
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
    inline (the labels and the empty tensor have no bytes to count)."""
    model = _small_tensors_model()
    onnx.save(model, str(tmp_path / "m.onnx"))
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "a.onnx",
        alignment=64,
        options=onnxl.WriteOptions(size_threshold=0),
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
