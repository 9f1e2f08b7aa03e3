"""Unsafe, malformed and out-of-range references are refused, naming tensor and file."""

import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl


def _model_with_ref(tmp_path, entries, data=b"\0" * 4000, dims=(1000,), dtype=np.float32, **extra):
    """A model whose one tensor 'W' points at ``entries``; ``data`` is written to w.data."""
    (tmp_path / "w.data").write_bytes(data)
    t = numpy_helper.from_array(np.zeros(dims, dtype), "W")
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in entries:
        t.external_data.add(key=k, value=v)
    for k, v in extra.items():
        setattr(t, k, v)
    model = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())  # onnx.save would rewrite w.data
    return path


def _all_entry_points(path, tmp_path):
    """Run every operation that reads references; each must raise."""
    yield lambda: onnxl.load(path)
    meta = onnxl.load(path, load_external_data=False)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    opts = onnxl.SerializeOptions()
    opts.use_external_data_location = False
    opts.base_dir = tmp_path
    yield lambda: onnxl.save(meta, out / "o.onnx", "o.data", options=opts)
    yield lambda: onnxl.align_external_data_streaming(path, out / "a.onnx", "a.data")


CASES = [
    ("absolute", [("location", "/etc/passwd")], onnxl.ExternalDataError, "absolute"),
    ("dotdot", [("location", "../w.data")], onnxl.ExternalDataError, r"'\.\.'"),
    ("dotdot inner", [("location", "a/../../w.data")], onnxl.ExternalDataError, r"'\.\.'"),
    ("no location", [("offset", "0")], onnxl.ExternalDataError, "no 'location'"),
    ("empty location", [("location", "")], onnxl.ExternalDataError, "empty"),
    (
        "duplicate key",
        [("location", "w.data"), ("location", "w.data")],
        onnxl.ExternalDataError,
        "twice",
    ),
    (
        "bad offset",
        [("location", "w.data"), ("offset", "ten")],
        onnxl.ExternalDataError,
        "not an integer",
    ),
    ("negative offset", [("location", "w.data"), ("offset", "-4")], onnxl.ExternalDataError, "< 0"),
    ("negative length", [("location", "w.data"), ("length", "-4")], onnxl.ExternalDataError, "< 0"),
    (
        "past end",
        [("location", "w.data"), ("offset", "100"), ("length", "4000")],
        onnxl.ExternalDataError,
        "past the end",
    ),
    (
        "huge offset",
        [("location", "w.data"), ("offset", str(2**70))],
        onnxl.ExternalDataError,
        "past the end",
    ),
    (
        "length vs dims",
        [("location", "w.data"), ("length", "2000")],
        onnxl.ExternalDataError,
        "dtype x dims",
    ),
    ("missing file", [("location", "nope.data")], FileNotFoundError, "nope.data"),
]


@pytest.mark.parametrize("name,entries,exc,match", CASES, ids=[c[0] for c in CASES])
def test_bad_reference(tmp_path, name, entries, exc, match):
    path = _model_with_ref(tmp_path, entries)
    before = sorted([*os.listdir(tmp_path), "out"])
    for op in _all_entry_points(path, tmp_path):
        with pytest.raises(exc, match=match) as info:
            op()
        assert "'W'" in str(info.value), "the message names the tensor"
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(tmp_path / "out") == [], "nothing written"


def test_symlink_out_of_folder(tmp_path):
    (tmp_path / "outside.data").write_bytes(b"\0" * 4000)
    (tmp_path / "model").mkdir()
    path = _model_with_ref(tmp_path / "model", [("location", "link.data")])
    os.symlink(tmp_path / "outside.data", tmp_path / "model" / "link.data")
    with pytest.raises(onnxl.ExternalDataError, match="outside the model folder"):
        onnxl.load(path)


def test_symlink_inside_folder_is_fine(tmp_path):
    path = _model_with_ref(tmp_path, [("location", "link.data")])
    os.symlink(tmp_path / "w.data", tmp_path / "link.data")
    assert onnxl.load(path).graph.initializer[0].raw_data == b"\0" * 4000


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_not_a_regular_file(tmp_path, kind):
    path = _model_with_ref(tmp_path, [("location", "special")])
    if kind == "fifo":
        os.mkfifo(tmp_path / "special")
    elif kind == "folder":
        (tmp_path / "special").mkdir()
    else:
        os.symlink("/dev/zero", tmp_path / "special")
    with pytest.raises(onnxl.ExternalDataError, match="special"):
        onnxl.load(path)


def test_external_with_raw_data(tmp_path):
    path = _model_with_ref(tmp_path, [("location", "w.data")], raw_data=b"\1" * 4000)
    with pytest.raises(onnxl.ExternalDataError, match="also carries raw_data"):
        onnxl.load(path)
    with pytest.raises(onnxl.ExternalDataError, match="'W'.*also carries raw_data"):
        onnxl.load(path, load_external_data=False, skip_raw_data=True)


def test_string_tensor_external(tmp_path):
    t = helper.make_tensor("S", onnx.TensorProto.STRING, [1], [b"x"])
    del t.string_data[:]
    t.data_location = onnx.TensorProto.EXTERNAL
    t.external_data.add(key="location", value="w.data")
    (tmp_path / "w.data").write_bytes(b"abc")
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [], [t])), str(tmp_path / "m.onnx"))
    with pytest.raises(onnxl.ExternalDataError, match="string"):
        onnxl.load(tmp_path / "m.onnx")


def test_unknown_keys_are_kept(tmp_path):
    path = _model_with_ref(tmp_path, [("location", "w.data"), ("checksum", "abc"), ("custom", "1")])
    onnxl.align_external_data_streaming(path, tmp_path / "a.onnx", "a.data")
    t = onnx.load(str(tmp_path / "a.onnx"), load_external_data=False).graph.initializer[0]
    entries = {e.key: e.value for e in t.external_data}
    assert entries["checksum"] == "abc" and entries["custom"] == "1"
    assert entries["location"] == "a.data"
