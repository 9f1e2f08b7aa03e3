"""read_safetensors_header: the tensors of a safetensors file from its header alone."""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from onnx_light.onnx._content.safetensors import (
    DTYPE_BITS,
    ONNX_DTYPES,
    SafetensorsTensor,
    read_safetensors_header,
)
from onnx_light.onnx._errors import ExternalDataError


def _read(path) -> list[SafetensorsTensor]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return read_safetensors_header(fd, str(path))
    finally:
        os.close(fd)


def _write(path, header: object, data: bytes = b"", *, raw: bytes | None = None) -> str:
    """A file made by hand: the u64 length, the header (JSON of ``header``, or ``raw``), ``data``."""
    text = raw if raw is not None else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    return str(path)


def test_files_saved_by_safetensors_give_each_tensor_its_exact_bytes(tmp_path):
    save_file = pytest.importorskip("safetensors.numpy").save_file
    rng = np.random.default_rng(0)
    arrays = {
        "f64": rng.standard_normal((3, 5)),
        "f32": rng.standard_normal((7, 11)).astype(np.float32),
        "f16": rng.standard_normal((13,)).astype(np.float16),
        "i64": rng.integers(-(2**62), 2**62, (4, 2, 3)),
        "u64": rng.integers(0, 2**63, (5,), dtype=np.uint64),
        "i32": rng.integers(-1000, 1000, (9, 1)).astype(np.int32),
        "u32": rng.integers(0, 2**32, (2, 2), dtype=np.uint32),
        "i16": rng.integers(-1000, 1000, (17,)).astype(np.int16),
        "u16": rng.integers(0, 2**16, (3, 3), dtype=np.uint16),
        "i8": rng.integers(-128, 128, (31,)).astype(np.int8),
        "u8": rng.integers(0, 256, (1, 29), dtype=np.uint8),
        "bool": rng.random((6, 7)) > 0.5,
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    path = tmp_path / "model.safetensors"
    save_file(arrays, str(path), metadata={"format": "np", "note": "x"})
    dtypes = {"f64": "F64", "f32": "F32", "f16": "F16", "i64": "I64", "u64": "U64",
              "i32": "I32", "u32": "U32", "i16": "I16", "u16": "U16", "i8": "I8",
              "u8": "U8", "bool": "BOOL", "scalar": "F32", "empty": "F32"}  # fmt: skip

    tensors = _read(path)

    assert sorted(t.name for t in tensors) == sorted(arrays)
    assert [t.offset for t in tensors] == sorted(t.offset for t in tensors)
    fd = os.open(path, os.O_RDONLY)
    try:
        for t in tensors:
            assert t.dtype == dtypes[t.name]
            assert t.shape == arrays[t.name].shape
            assert t.length == arrays[t.name].nbytes
            assert os.pread(fd, t.length, t.offset) == arrays[t.name].tobytes(), t.name
    finally:
        os.close(fd)
    last = max(tensors, key=lambda t: t.offset + t.length)
    assert last.offset + last.length == path.stat().st_size


def test_types_numpy_lacks_are_read_from_a_header_made_by_hand(tmp_path):
    entries = [("w.bf16", "BF16", [2, 3], 12), ("w.f8", "F8_E4M3", [5], 5),
               ("w.e5m2", "F8_E5M2", [2, 2], 4), ("w.f4", "F4", [2, 3], 3),
               ("w.c64", "C64", [1], 8)]  # fmt: skip
    header, start = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape, n in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [start, start + n]}
        start += n
    data = bytes(range(start))
    path = _write(tmp_path / "hand.safetensors", header, data)
    n_header = len(json.dumps(header).encode())

    tensors = _read(path)

    assert [(t.name, t.dtype, t.shape, t.length) for t in tensors] == [
        (name, dtype, tuple(shape), n) for name, dtype, shape, n in entries
    ]
    assert tensors[0].offset == 8 + n_header
    with open(path, "rb") as f:
        content = f.read()
    assert b"".join(content[t.offset : t.offset + t.length] for t in tensors) == data


def test_the_header_is_read_in_one_bounded_read_and_the_data_never(tmp_path, monkeypatch):
    header = {"big": {"dtype": "F32", "shape": [1 << 20], "data_offsets": [0, 4 << 20]}}
    path = _write(tmp_path / "big.safetensors", header, bytes(4 << 20))
    reads = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, off: reads.append((n, off)) or real(fd, n, off))

    (t,) = _read(path)

    n_header = len(json.dumps(header).encode())
    assert reads == [(8, 0), (n_header, 8)]
    assert (t.offset, t.length) == (8 + n_header, 4 << 20)


def test_onnx_dtypes_map_to_onnx_types_of_the_same_width():
    assert ONNX_DTYPES["F32"] == TensorProto.FLOAT
    assert ONNX_DTYPES["F16"] == TensorProto.FLOAT16
    assert ONNX_DTYPES["BF16"] == TensorProto.BFLOAT16
    assert ONNX_DTYPES["I64"] == TensorProto.INT64
    assert ONNX_DTYPES["BOOL"] == TensorProto.BOOL
    assert ONNX_DTYPES["F8_E4M3"] == TensorProto.FLOAT8E4M3FN
    assert ONNX_DTYPES["F8_E5M2"] == TensorProto.FLOAT8E5M2
    widths = {"FLOAT": 32, "FLOAT16": 16, "BFLOAT16": 16, "DOUBLE": 64, "BOOL": 8,
              "COMPLEX64": 64, "FLOAT8E8M0": 8}  # fmt: skip
    for name, code in ONNX_DTYPES.items():
        onnx_name = TensorProto.DataType.Name(code)
        expected = widths.get(onnx_name)
        if expected is None:  # INT8, UINT64, FLOAT8E4M3FN...: the width is in the name
            digits = "".join(c for c in onnx_name if c.isdigit())
            expected = 8 if onnx_name.startswith("FLOAT8") else int(digits)
        assert DTYPE_BITS[name] == expected, (name, onnx_name)
    assert set(ONNX_DTYPES) <= set(DTYPE_BITS)
    assert onnx.helper.tensor_dtype_to_np_dtype(ONNX_DTYPES["U16"]) == np.uint16


def _f32(name="w", start=0, end=8, shape=(2,)):
    return {name: {"dtype": "F32", "shape": list(shape), "data_offsets": [start, end]}}


# (case, how to write the file, words the message holds besides the file name)
BAD = [
    ("empty file", lambda p: p.write_bytes(b""), ["0 bytes"]),
    ("5 bytes", lambda p: p.write_bytes(b"\x01\x00\x00\x00\x00"), ["5 bytes"]),
    ("header over 100 MB", lambda p: p.write_bytes(struct.pack("<Q", 100_000_001) + b"{}"),
     ["100000001", "limit"]),
    ("huge length", lambda p: p.write_bytes(b"\xff" * 8 + b"{}"), ["limit"]),
    ("header past the end", lambda p: p.write_bytes(struct.pack("<Q", 64) + b"{}"),
     ["past the end of the file"]),
    ("not UTF-8", lambda p: _write(p, None, raw=b'{"\xe9": 1}'), ["not UTF-8"]),
    ("not JSON", lambda p: _write(p, None, raw=b'{"w": '), ["not valid JSON"]),
    ("empty header", lambda p: _write(p, None, raw=b""), ["not valid JSON"]),
    ("JSON list", lambda p: _write(p, [1, 2]), ["not an object"]),
    ("metadata not strings", lambda p: _write(p, {"__metadata__": {"a": 1}}), ["__metadata__"]),
    ("metadata a list", lambda p: _write(p, {"__metadata__": ["a"]}), ["__metadata__"]),
    ("entry not an object", lambda p: _write(p, {"w": [1]}), ["'w'", "not an object"]),
    ("no dtype", lambda p: _write(p, {"w": {"shape": [], "data_offsets": [0, 0]}}),
     ["'w'", "'dtype'"]),
    ("no shape", lambda p: _write(p, {"w": {"dtype": "F32", "data_offsets": [0, 4]}}),
     ["'w'", "'shape'"]),
    ("no offsets", lambda p: _write(p, {"w": {"dtype": "F32", "shape": []}}),
     ["'w'", "'data_offsets'"]),
    ("unknown dtype", lambda p: _write(p, {"w": {"dtype": "F128", "shape": [1],
                                                 "data_offsets": [0, 16]}}, bytes(16)),
     ["'w'", "unknown dtype 'F128'"]),
    ("shape of floats", lambda p: _write(p, _f32(shape=(2.0,)), bytes(8)), ["'w'", "shape"]),
    ("negative dim", lambda p: _write(p, _f32(shape=(-2,)), bytes(8)), ["'w'", "shape"]),
    ("shape of booleans", lambda p: _write(p, _f32(shape=(True,)), bytes(8)), ["'w'", "shape"]),
    ("three offsets", lambda p: _write(p, {"w": {"dtype": "F32", "shape": [2],
                                                 "data_offsets": [0, 8, 8]}}, bytes(8)),
     ["'w'", "data_offsets"]),
    ("negative offset", lambda p: _write(p, _f32(start=-8, end=0)), ["'w'", "data_offsets"]),
    ("end before start", lambda p: _write(p, _f32(start=8, end=0), bytes(8)),
     ["'w'", "end before"]),
    ("length not shape x itemsize", lambda p: _write(p, _f32(end=12), bytes(12)),
     ["'w'", "12 bytes", "needs 8"]),
    ("half a byte", lambda p: _write(p, {"w": {"dtype": "F4", "shape": [3],
                                               "data_offsets": [0, 2]}}, bytes(2)),
     ["'w'", "whole bytes"]),
    ("range past the end", lambda p: _write(p, _f32(start=0, end=8), bytes(4)),
     ["'w'", "past the end", "truncated"]),
    ("overlap", lambda p: _write(p, {**_f32("a", 0, 8), **_f32("b", 4, 12)}, bytes(12)),
     ["'b'", "overlap", "'a'"]),
    ("hole", lambda p: _write(p, {**_f32("a", 0, 8), **_f32("b", 12, 20)}, bytes(20)),
     ["'b'", "belong to no tensor"]),
    ("trailing bytes", lambda p: _write(p, _f32(), bytes(12)), ["4 bytes", "no tensor"]),
    ("duplicate name", lambda p: _write(
        p, None, raw=b'{"w": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
                     b'"w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}',
    ), ["'w' twice"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "words"), BAD, ids=[b[0] for b in BAD])
def test_a_malformed_file_is_refused_with_a_message_naming_it(tmp_path, case, make, words):
    path = tmp_path / "bad model.safetensors"
    make(path)

    with pytest.raises(ExternalDataError) as info:
        _read(path)

    message = str(info.value)
    assert f"'{path}'" in message
    for word in words:
        assert word in message, (case, message)


def test_a_file_name_that_is_not_utf8_is_shown_escaped(tmp_path):
    path = os.path.join(os.fsencode(tmp_path), b"caf\xe9.safetensors")
    with open(path, "wb") as f:
        f.write(b"\x00")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ExternalDataError, match=r"caf\\xe9\.safetensors"):
            read_safetensors_header(fd, os.fsdecode(path))
    finally:
        os.close(fd)
