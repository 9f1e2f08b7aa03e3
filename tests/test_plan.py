"""The planner's decision table (``_plan.decide``), and plan_tensors following it.

Every combination of where a tensor's bytes are, what the writer does with
external tensors, and the three size facts, against the rules written out
independently here; then one model with a tensor of every kind, planned
under each mode, lands where the table says.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import save_two_file
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
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
