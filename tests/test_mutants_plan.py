"""The planner's decisions on inputs the suite did not build (issue 31, item 3).

Each test pins what a user sees when the planner (``_plan.py``) meets: a
string tensor before the weights (planning goes on past it), external bytes
brought back into a single ``.onnx`` (they count towards protobuf's 2 GiB
limit), and a raw tensor of a data type onnx does not know (it moves by its
length). A reference into the model file itself brought back inline is in
``test_mutants_own_file.py``.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from helpers import external_offsets, save_two_file, uint8_model
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx import _io


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
