"""References at the edges of the checks (issue 31, item 1).

Offsets written ``-0`` or zero-padded to 19 digits and more, which onnx's
checker, ``onnx.load`` and onnxruntime all read as plain integers; the boundary
of 100 significant digits; the non-UTF-8 entry of ``external_data`` named in the
error (the key or the value, whichever is not UTF-8); and a plan of exactly
2**63 bytes, one more than a file offset allows. Each test fails if the
behaviour it names breaks (the mutation audit's change is named in its
docstring).
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from helpers import external_tensor, folder_digest, model_from_initializer_bytes, read_back
from onnx import TensorProto, helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._plan.layout import MAX_FILE_SIZE, plan_layout, plan_shards

DATA = np.arange(64, dtype=np.uint8).tobytes()


def _identity_model(folder, offset: str, length: int = 16):
    """m.onnx: Y = Identity(W), W a uint8 tensor of ``length`` bytes of w.data at ``offset``
    (written as given)."""
    (folder / "w.data").write_bytes(DATA)
    node = helper.make_node("Identity", ["W"], ["Y"])
    out = helper.make_tensor_value_info("Y", TensorProto.UINT8, [length])
    graph = helper.make_graph(
        [node], "g", [], [out], [external_tensor("W", "w.data", offset, length)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def _ort(path):
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {})[0]


# what each spelling reads: the offset every reader agrees on
ODD_OFFSETS = {
    "-0": 0,
    "-00": 0,
    "0" * 19: 0,  # 19 characters: past the fast path of plain digits below 2**63
    "0" * 18 + "16": 16,
    "0" * 20 + "16": 16,
    "0" * 150 + "16": 16,  # 152 digits, 2 of them significant
    "0" * 5 + "1" + "0" * 99: None,  # exactly 100 significant digits: an integer, past the end
}


@pytest.mark.parametrize("offset", list(ODD_OFFSETS), ids=lambda o: f"{len(o)} chars {o[:3]}")
def test_offsets_that_onnx_and_onnxruntime_read_as_integers(tmp_path, offset):
    """``-0`` and zero-padded offsets are integers to onnx's checker, ``onnx.load`` and
    onnxruntime: we read the same bytes, and ``align`` writes a plain reference to them.
    A value of 100 significant digits is an integer too, refused as past the end of the
    file. (Mutants: ``raw[1:] if raw.startswith("-")`` dropped; ``value < 0`` turned
    ``<= 0``; ``digits.lstrip("0")`` dropped; ``> MAX_DIGITS`` turned ``>=``.)"""
    src = tmp_path / "src"
    src.mkdir()
    path = _identity_model(src, offset)
    onnx.checker.check_model(str(path))  # the reference checker accepts each of them
    expected = ODD_OFFSETS[offset]
    if expected is None:
        with pytest.raises(onnxl.ExternalDataError, match="'W'.*w.data.*past the end"):
            onnxl.load(path)
        return
    want = DATA[expected : expected + 16]
    assert onnx.load(str(path)).graph.initializer[0].raw_data == want
    assert _ort(path).tobytes() == want
    assert onnxl.load(path).graph.initializer[0].raw_data == want
    digest = folder_digest(src)
    out = tmp_path / "out"
    out.mkdir()
    onnxl.align_external_data_streaming(path, out / "a.onnx", alignment=64)
    t = onnx.load(str(out / "a.onnx"), load_external_data=False).graph.initializer[0]
    assert {e.key: e.value for e in t.external_data} == {
        "location": "a.onnx.data",
        "offset": "0",
        "length": "16",
    }
    assert read_back(out / "a.onnx") == {"graph.initializer[0]": want}
    assert _ort(out / "a.onnx").tobytes() == want
    assert folder_digest(src) == digest


@pytest.mark.parametrize(
    "offset,message",
    [
        ("1" + "0" * 100, "offset has 101 digits"),  # 101 significant digits
        ("0" * 50 + "1" + "0" * 100, "offset has 151 digits"),
        ("-1", "offset=-1 < 0"),
        ("-" + "0" * 30 + "1", "< 0"),
        ("--0", "not an integer"),
        ("+0", "not an integer"),
        ("0x10", "not an integer"),
    ],
)
def test_offsets_refused_at_the_boundary(tmp_path, offset, message):
    """101 significant digits is more than any offset; a negative value, a second sign, a
    ``+`` (onnxruntime refuses it) or hexadecimal are refused: each naming the tensor and
    the file, nothing written."""
    path = _identity_model(tmp_path, offset)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(onnxl.ExternalDataError, match="'W'.*w.data.*" + message):
        onnxl.load(path)
    with pytest.raises(onnxl.ExternalDataError, match="'W'.*w.data.*" + message):
        onnxl.align_external_data_streaming(path, out / "a.onnx")
    assert os.listdir(out) == []


# -- the entry that is not UTF-8 -------------------------------------------------------


@pytest.mark.parametrize("field", ["key", "value"])
def test_the_error_shows_the_entry_that_is_not_utf8(tmp_path, field):
    """external_data holds ``kk: vv``, one of them replaced by bytes that are not UTF-8:
    the error shows those bytes, not the other half of the entry (which is valid text).
    (Mutant: the key and the value swapped in ``bad = value if type(key) is str else
    key``.)"""
    (tmp_path / "w.data").write_bytes(bytes(16))
    t = external_tensor("T", "w.data", "0", 16)
    extra = t.external_data.add()
    extra.key, extra.value = "kk", "vv"
    good = "vv" if field == "key" else "kk"
    data = t.SerializeToString().replace(b"kk" if field == "key" else b"vv", b"\xff\xfe")
    path = model_from_initializer_bytes(tmp_path, data)
    out = tmp_path / "out"
    out.mkdir()
    calls = [
        lambda: onnxl.load(path),
        lambda: onnxl.align_external_data_streaming(path, out / "a.onnx"),
    ]
    for call in calls:
        with pytest.raises(onnxl.ExternalDataError) as info:
            call()
        message = str(info.value)
        assert "'T'" in message and "not valid UTF-8" in message, message
        assert repr(b"\xff\xfe") in message, message
        assert repr(good) not in message, message
    assert os.listdir(out) == []


# -- a plan of exactly 2**63 bytes -----------------------------------------------------


def test_a_plan_of_exactly_2_63_bytes_is_refused(sparse_folder):
    """Three references into a 2**62-byte sparse file add up, dense, to exactly 2**63 bytes:
    one more than a file offset allows. align and save refuse it before writing anything.
    (Mutants: the limit 2**63 - 1 turned 2**63; ``end > MAX_FILE_SIZE`` turned
    ``end > MAX_FILE_SIZE + 1``.) The destination is on the small tmpfs too, so a
    mutant that went on writing would fail at once on a full disk."""
    size = 2**62
    with open(sparse_folder / "s.data", "wb") as f:
        f.truncate(size)
    refs = [("T0", 0, size), ("T1", 1, size - 1), ("T2", 0, 1)]
    inits = [external_tensor(n, "s.data", str(o), k) for n, o, k in refs]
    model = helper.make_model(helper.make_graph([], "g", [], [], inits))
    (sparse_folder / "m.onnx").write_bytes(model.SerializeToString())
    out = sparse_folder / "out"
    out.mkdir()
    with pytest.raises(ValueError, match=rf"would hold {2**63} bytes.*2\*\*63 - 1"):
        onnxl.align_external_data_streaming(sparse_folder / "m.onnx", out / "a.onnx", alignment=1)
    opts = onnxl.SerializeOptions(use_external_data_location=False, base_dir=sparse_folder)
    meta = onnxl.load(sparse_folder / "m.onnx", load_external_data=False)
    with pytest.raises(ValueError, match=rf"would hold {2**63} bytes"):
        onnxl.save(meta, out / "a.onnx", "a.data", options=opts)
    assert os.listdir(out) == []


def test_the_planner_takes_2_63_minus_1_bytes_and_no_more():
    """The boundary itself, where no file can be built: the planner accepts a layout of
    2**63 - 1 bytes (``end > MAX_FILE_SIZE`` turned ``>=`` would refuse it), in one file
    or in shards, and refuses one byte more."""
    assert MAX_FILE_SIZE == 2**63 - 1
    assert plan_layout([2**62, 2**62 - 1], 1).total == 2**63 - 1
    assert plan_shards([2**62, 2**62 - 1], 1, max_shard_size=2**63)[0].layout.total == 2**63 - 1
    with pytest.raises(ValueError, match=rf"{2**63} bytes"):
        plan_layout([2**62, 2**62], 1)
    with pytest.raises(ValueError, match=rf"{2**63} bytes"):
        plan_shards([2**62, 2**62], 1, max_shard_size=2**63)
