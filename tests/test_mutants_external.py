"""The refusals of a bad external reference, word for word, and the odd names accepted.

A user who meets a bad reference reads one line: it must name the tensor, the
file or location, and say what is wrong and what is allowed. Each refusal of
``_external.py`` is checked here in full, through ``load`` and ``align``
(which read references the same way), with nothing written; and the odd but
valid locations the rules must not refuse are read. Issue 31, item 3: mutants
of the messages and of the checks that survived.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import external_tensor, model_from_initializer_bytes
from onnx import helper

import onnx_light.onnx as onnxl

W = "tensor 'W' (graph.initializer[0])"


def _model(folder, pairs, dims=10):
    """m.onnx: W, uint8 [dims], EXTERNAL with the entries ``pairs`` (in that order);
    w.data beside it holds 100 bytes 0..99."""
    (folder / "w.data").write_bytes(bytes(range(100)))
    t = external_tensor("W", "w.data", "0", dims)
    del t.external_data[:]
    for key, value in pairs:
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    model = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    (folder / "m.onnx").write_bytes(model.SerializeToString())
    return folder / "m.onnx"


def _refusals(path, out) -> list[str]:
    """The messages of load and of align into ``out``, both ExternalDataError."""
    messages = []
    for call in (
        lambda: onnxl.load(path),
        lambda: onnxl.align_external_data_streaming(path, out / "a.onnx", "a.data"),
    ):
        with pytest.raises(onnxl.ExternalDataError) as info:
            call()
        messages.append(str(info.value))
    return messages


def _entries(location="w.data", offset="0", length="10"):
    return [("location", location), ("offset", offset), ("length", length)]


CASES = {
    "empty": (_entries(location=""), f"{W}: external_data has an empty 'location'"),
    "nul": (
        _entries(location="w\x00.data"),
        f"{W}: location 'w\\x00.data' contains a NUL byte",
    ),
    "absolute": (
        _entries(location="/w.data"),
        f"{W}: location '/w.data' is absolute; external data must be relative to the "
        "model's folder",
    ),
    "drive": (
        _entries(location="C:w.data"),
        f"{W}: location 'C:w.data' is absolute; external data must be relative to the "
        "model's folder",
    ),
    "backslash-climb": (
        _entries(location="a\\..\\..\\w.data"),
        f"{W}: location 'a\\..\\..\\w.data' contains '..'; external data must stay inside "
        "the model's folder",
    ),
    "trailing-slash": (
        _entries(location="w.data/"),
        f"{W}: location 'w.data/' ends with '/': not a file name",
    ),
    "101-digits": (
        _entries(offset="1" * 101),
        f"{W} in '{{folder}}/w.data': external_data offset has 101 digits, more than any "
        "file offset (2**63 - 1)",
    ),
    "plus-sign": (
        _entries(offset="+5"),
        f"{W} in '{{folder}}/w.data': external_data offset='+5' is not an integer "
        "(decimal digits only)",
    ),
    "key-twice": (
        [("location", "w.data"), ("offset", "0"), ("length", "10"), ("length", "10")],
        f"{W}: external_data key 'length' appears twice",
    ),
    "past-the-end": (
        _entries(offset="95"),
        f"{W} in '{{folder}}/w.data': bytes [95, 105) run past the end of the file (100 bytes)",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_bad_reference_is_refused_in_one_clear_line(tmp_path, case):
    """load and align refuse it with the same message, naming the tensor and the location
    (or file) and saying what is allowed; align writes nothing."""
    pairs, expected = CASES[case]
    path = _model(tmp_path, pairs)
    out = tmp_path / "out"
    out.mkdir()
    expected = expected.format(folder=tmp_path)
    assert _refusals(path, out) == [expected, expected]
    assert os.listdir(out) == []


@pytest.mark.parametrize("field", ["key", "value"])
def test_an_entry_that_is_not_utf8_is_refused_in_one_clear_line(tmp_path, field):
    """An entry ``kk: vv`` of W whose key (or value) is the bytes ``\\xff\\xfe``: the whole
    message, showing those bytes."""
    (tmp_path / "w.data").write_bytes(bytes(10))
    t = external_tensor("W", "w.data", "0", 10)
    extra = t.external_data.add()
    extra.key, extra.value = "kk", "vv"
    data = t.SerializeToString().replace(b"kk" if field == "key" else b"vv", b"\xff\xfe")
    path = model_from_initializer_bytes(tmp_path, data)
    out = tmp_path / "out"
    out.mkdir()
    expected = (
        f"{W}: external_data holds b'\\xff\\xfe', which is not valid UTF-8 (protobuf strings "
        "must be)"
    )
    assert _refusals(path, out) == [expected, expected]


def test_a_name_with_a_colon_after_a_non_ascii_letter_is_not_a_drive(tmp_path):
    """``é:w.data`` is a file name of the folder (Windows drives are ASCII letters): read."""
    (tmp_path / "é:w.data").write_bytes(bytes(range(10)))
    path = _model(tmp_path, _entries(location="é:w.data"))
    loaded = onnxl.load(path).graph.initializer[0]
    np.testing.assert_array_equal(np.frombuffer(loaded.raw_data, np.uint8), np.arange(10))
