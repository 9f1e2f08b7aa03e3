"""The planner's decision table (``_plan/planner.py``), and the writers following it.

Every combination of where a tensor's bytes are, what the writer does with
external tensors, and the three size facts, against the rules written out
independently here; then one model with a tensor of every kind, planned
under each mode, lands where the table says. Then the inputs a user may hand
the planner: a string tensor before the weights (planning goes on past it),
external bytes brought back into a single ``.onnx`` (they count towards
protobuf's 2 GiB limit), and a raw tensor of a data type onnx does not know
(it moves by its length), and the largest layout a file can hold (2**63 - 1
bytes).
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import onnx
import pytest
from helpers import external_offsets, save_two_file, uint8_model
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx import _io
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
    monkeypatch.setattr(_io, "PROTOBUF_LIMIT", 10_000)
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
