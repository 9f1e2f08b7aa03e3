"""Element widths of every ONNX data type, and typed fields turned into raw_data.

Widths: every data type the installed onnx defines (but UNDEFINED and STRING)
must have one, equal to onnx's own (its numpy / ml_dtypes dtype, and the byte
count of its packing), so that a wrong external ``length`` is caught for each.

typed_raw_bytes: for each data type, typed tensors (bit patterns written into
the typed field, and values through ``helper.make_tensor``) must become the
bytes the ONNX spec gives for raw_data, decode to bit-identical arrays, and run
identically in onnxruntime.

Sub-byte types (4 and 2 bits, an odd count of values) keep their bytes through
align and save.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import as_options, save_two_file
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._read.tensors import _BITS, _onnx_bits, tensor_nbytes, typed_raw_bytes


def _align(src, dst, weights, **kw):
    kw = as_options(kw, keep=("alignment", "chunk_size"))  # the settings in options=
    return onnxl.align_external_data_streaming(src, dst, weights, **kw)


ALL = [(n, c) for n, c in TensorProto.DataType.items() if n not in ("UNDEFINED", "STRING")]
NAMES = [n for n, _ in ALL]
# the packed types, with their bits by the spec, that the installed onnx defines
_SPEC_PACKED = (("FLOAT6E2M3", 6), ("FLOAT6E3M2", 6), ("INT4", 4), ("UINT4", 4))
_SPEC_PACKED += (("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
PACKED = {n: b for n, b in _SPEC_PACKED if n in dict(TensorProto.DataType.items())}
SIGNED = {"INT8", "INT16", "INT32", "INT64"}


def _code(name: str) -> int:
    return TensorProto.DataType.Value(name)


# -- widths ----------------------------------------------------------------------


def test_every_data_type_has_a_width():
    missing = [n for n, c in ALL if c not in _BITS]
    assert not missing, f"data types without a width: {missing}"
    for _, code in ALL:
        assert tensor_nbytes(TensorProto(data_type=code, dims=[3])) is not None


def test_string_and_undefined_have_no_width():
    for code in (TensorProto.STRING, TensorProto.UNDEFINED):
        assert code not in _BITS
        assert tensor_nbytes(TensorProto(data_type=code, dims=[3])) is None


@pytest.mark.parametrize("name", NAMES)
def test_width_is_onnx_own(name):
    assert _BITS[_code(name)] == _onnx_bits(_code(name))


@pytest.mark.parametrize("name", NAMES)
def test_nbytes_matches_onnx_packing(name):
    code = _code(name)
    dtype = helper.tensor_dtype_to_np_dtype(code)
    for n in range(10):
        raw = numpy_helper.from_array(np.zeros((n,), dtype=dtype)).raw_data
        assert tensor_nbytes(TensorProto(data_type=code, dims=[n])) == len(raw), n
    assert tensor_nbytes(TensorProto(data_type=code, dims=[3, 0, 5])) == 0


def _external_model(folder: Path, code: int, n: int, length: int) -> Path:
    t = TensorProto(name="W", data_type=code, dims=[n])
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.data"), ("offset", "0"), ("length", str(length))):
        t.external_data.add(key=key, value=value)
    (folder / "w.data").write_bytes(b"\0" * 64)
    path = folder / "m.onnx"
    path.write_bytes(helper.make_model(helper.make_graph([], "g", [], [], [t])).SerializeToString())
    return path


@pytest.mark.parametrize("name", list(PACKED))
@pytest.mark.parametrize("n", [1, 6, 7])
def test_verify_checks_packed_length(tmp_path, name, n):
    code = _code(name)
    good = (n * PACKED[name] + 7) // 8  # ceil(n * bits / 8)
    result = onnxl.verify_model(_external_model(tmp_path, code, n, good))
    assert (result.external_tensors, result.problems) == (1, ())
    for wrong in {n, good + 1, good - 1} - {good}:  # one byte per element: the usual slip
        result = onnxl.verify_model(_external_model(tmp_path, code, n, wrong))
        count, problems = result.external_tensors, result.problems
        assert count == 1 and len(problems) == 1, (wrong, problems)
        assert "dtype x dims" in problems[0] and "'W'" in problems[0], problems


# -- typed_raw_bytes: bit patterns ---------------------------------------------


def _float_data(tensor: TensorProto, bits: np.ndarray) -> None:
    """Set float_data to exact float32 bit patterns (through the wire, so that
    signaling NaNs are not quieted by a trip through Python floats)."""
    payload = bits.astype("<u4").tobytes()
    n = len(payload)
    varint = bytearray()
    while True:
        varint.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    tensor.MergeFromString(b"\x22" + bytes(varint) + payload)  # field 4, packed


def _pack6(codes: np.ndarray) -> bytes:
    """The spec's 6-bit packing: an LSB-first bitstream, ceil(6 n / 8) bytes."""
    stream = sum(int(c) << (6 * i) for i, c in enumerate(codes))
    return stream.to_bytes((6 * len(codes) + 7) // 8, "little")


def _special(bits: int) -> list[int]:
    """Patterns worth having for a float of ``bits`` bits: zeros, NaNs, infinities."""
    top = 1 << (bits - 1)
    return [0, top, top - 1, (1 << bits) - 1, top + 1, top - 2, 1]


def _patterns(name: str, rng) -> tuple[TensorProto, bytes]:
    """A typed tensor of ``name`` holding odd bit patterns, and its raw_data by the spec."""
    code = _code(name)
    bits = _BITS[code]
    t = TensorProto(name="t", data_type=code)
    if name in ("FLOAT", "COMPLEX64"):
        u = np.array(
            [0, 0x80000000, 0x7F800001, 0xFFA00001, 0x7FC12345, 0x7F800000, 0xFF800000, 1],
            dtype=np.uint32,
        )
        u = np.concatenate([u, rng.integers(0, 2**32, 200, dtype=np.uint32)])
        _float_data(t, u)
        t.dims.append(len(u) // (2 if name == "COMPLEX64" else 1))
        return t, u.astype("<u4").tobytes()
    if name in ("DOUBLE", "COMPLEX128"):
        u = np.array([0, 1 << 63, 0x7FF0000000000001, 0xFFF8000000000ABC, 1], dtype=np.uint64)
        u = np.concatenate([u, rng.integers(0, 2**64, 201, dtype=np.uint64)])
        t.double_data.extend(u.view(np.float64).tolist())  # Python floats are doubles: exact
        t.dims.append(len(u) // (2 if name == "COMPLEX128" else 1))
        return t, u.astype("<u8").tobytes()
    if name in ("INT64", "UINT64", "UINT32"):
        u = rng.integers(0, 2**bits, 100, dtype=np.uint64)
        u[:2] = [0, 2**bits - 1]
        field = t.int64_data if name == "INT64" else t.uint64_data
        field.extend(u.view(np.int64).tolist() if name == "INT64" else u.tolist())
        t.dims.append(len(u))
        return t, u.astype(f"<u{bits // 8}").tobytes()
    # int32_data
    if bits in (2, 4):  # 4 or 2 values packed in each entry
        per = 8 // bits
        entries = rng.integers(0, 256, 50, dtype=np.uint32)
        n = len(entries) * per - (per - 1)  # a partial last byte
        t.int32_data.extend(entries.tolist())
        t.dims.append(n)
        expected = bytearray(entries.astype(np.uint8).tobytes())
        expected[-1] &= (1 << (bits * (n % per or per))) - 1  # padding bits are zero
        return t, bytes(expected)
    if bits == 6:  # one 6-bit code per entry
        codes = np.concatenate([np.arange(64), rng.integers(0, 64, 7)])  # 71: not a multiple of 4
        t.int32_data.extend(codes.tolist())
        t.dims.append(len(codes))
        return t, _pack6(codes)
    if name == "BOOL":
        u = rng.integers(0, 2, 99, dtype=np.uint32)
    elif bits == 8:
        u = np.arange(256, dtype=np.uint32)  # every float8 / int8 pattern
    else:
        u = np.concatenate(
            [np.array(_special(bits), dtype=np.uint32), rng.integers(0, 2**bits, 500)]
        ).astype(np.uint32)
    stored = u.astype(np.int64)
    if name in SIGNED:  # signed integers are stored by value, sign-extended
        stored = np.where(stored >= 2 ** (bits - 1), stored - 2**bits, stored)
    t.int32_data.extend(stored.tolist())
    t.dims.append(len(u))
    return t, u.astype(f"<u{bits // 8}").tobytes()


def _raw_twin(typed: TensorProto, raw: bytes) -> TensorProto:
    return TensorProto(name=typed.name, data_type=typed.data_type, dims=typed.dims, raw_data=raw)


def _assert_same(typed: TensorProto, raw: bytes) -> None:
    assert len(raw) == tensor_nbytes(typed)
    a = numpy_helper.to_array(typed)
    b = numpy_helper.to_array(_raw_twin(typed, raw))
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()  # bit-identical, NaN payloads and -0.0 included


@pytest.mark.parametrize("name", NAMES)
def test_typed_raw_bytes_bit_patterns(name):
    typed, expected = _patterns(name, np.random.default_rng(0))
    raw = typed_raw_bytes(typed)
    assert raw == expected
    _assert_same(typed, raw)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dims", [[], [1], [3], [2, 5]])
def test_typed_raw_bytes_make_tensor(name, dims):
    code = _code(name)
    n = int(np.prod(dims))
    if name == "BOOL":
        vals = [bool(i % 2) for i in range(n)]
    elif name in ("INT4", "INT2", "INT8", "INT16", "INT32", "INT64"):
        lo = -(2 ** (_BITS[code] - 1))
        vals = [lo + (5 * i) % (2 ** _BITS[code]) for i in range(n)]
    elif name.startswith("UINT"):
        vals = [(7 * i) % (2 ** _BITS[code]) for i in range(n)]
    elif name.startswith("COMPLEX"):
        vals = [complex(-0.0 if i == 0 else i / 4, -i) for i in range(n)]
    else:  # floats: negative zero, halves, a NaN
        vals = [[-0.0, 0.5, -1.5, float("nan"), 2.0, -0.25][i % 6] for i in range(n)]
        if name == "FLOAT8E8M0":  # powers of two only, no sign
            vals = [[0.5, 1.0, 2.0, 0.25][i % 4] for i in range(n)]
    typed = helper.make_tensor("t", code, dims, vals, raw=False)
    assert not typed.HasField("raw_data")
    raw = typed_raw_bytes(typed)
    if n == 0:
        assert raw is None  # nothing in the typed field
        return
    _assert_same(typed, raw)


def test_typed_raw_bytes_bool_nonzero_is_true():
    t = TensorProto(name="b", data_type=TensorProto.BOOL, dims=[6])
    t.int32_data.extend([0, 1, 2, 256, -1, 0])
    assert typed_raw_bytes(t) == b"\0\1\1\1\1\0"  # to_array would give 0 2 0 255 bytes


def test_typed_raw_bytes_none():
    t = numpy_helper.from_array(np.arange(3, dtype=np.float32))
    assert typed_raw_bytes(t) is None  # raw_data already
    assert typed_raw_bytes(TensorProto(data_type=TensorProto.FLOAT, dims=[0])) is None
    s = TensorProto(data_type=TensorProto.STRING, dims=[1], string_data=[b"x"])
    assert typed_raw_bytes(s) is None
    assert typed_raw_bytes(TensorProto(data_type=TensorProto.UNDEFINED, dims=[1])) is None
    e = TensorProto(data_type=TensorProto.FLOAT, dims=[1], float_data=[1.0])
    e.data_location = TensorProto.EXTERNAL
    e.external_data.add(key="location", value="w.data")
    assert typed_raw_bytes(e) is None
    # a field other than the type's own: not this type's typed data
    assert (
        typed_raw_bytes(TensorProto(data_type=TensorProto.FLOAT, dims=[1], int32_data=[1])) is None
    )


@pytest.mark.parametrize(
    ("code", "field", "values"),
    [
        (TensorProto.FLOAT, "float_data", [1.0, 2.0]),
        (TensorProto.COMPLEX64, "float_data", [1.0, 2.0, 3.0]),  # 1.5 complex values
        (TensorProto.INT4, "int32_data", [1, 2, 3]),  # 6 values > 3 or 4 elements
        (TensorProto.INT64, "int64_data", [1, 2, 3, 4]),
    ],
)
def test_typed_raw_bytes_wrong_count(code, field, values):
    t = TensorProto(name="w", data_type=code, dims=[3])
    getattr(t, field).extend(values)
    with pytest.raises(ValueError, match="'w'.*dtype x dims"):
        typed_raw_bytes(t)


# -- onnxruntime: typed and raw run the same -----------------------------------

ORT_CASES = {
    "float32": (
        TensorProto.FLOAT,
        np.array(
            [0, 0x80000000, 0x7FC12345, 0x7F800001, 0x7F800000, 0x3F800000, 1], np.uint32
        ).view(np.float32),
    ),
    "float16": (
        TensorProto.FLOAT16,
        np.array([0, 0x8000, 0x7E01, 0x7C01, 0x7C00, 0x3C00, 1], np.uint16).view(np.float16),
    ),
    "int64": (TensorProto.INT64, np.array([0, -1, 2**63 - 1, -(2**63), 5], np.int64)),
    "bool": (TensorProto.BOOL, np.array([True, False, True, True], np.bool_)),
}


def _run_ort(tensor: TensorProto, constant: bool) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    out = helper.make_tensor_value_info("y", tensor.data_type, list(tensor.dims))
    if constant:
        nodes = [helper.make_node("Constant", [], ["c"], value=tensor)]
        inits = []
    else:
        nodes, inits = [], [tensor]
    nodes.append(helper.make_node("Identity", ["c"], ["y"]))
    tensor.name = "c"
    model = helper.make_model(
        helper.make_graph(nodes, "g", [], [out], inits),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {})[0]


@pytest.mark.parametrize("constant", [False, True], ids=["initializer", "constant"])
@pytest.mark.parametrize("case", list(ORT_CASES))
def test_onnxruntime_typed_equals_raw(case, constant):
    code, array = ORT_CASES[case]
    typed = TensorProto(name="c", data_type=code, dims=array.shape)
    if code == TensorProto.FLOAT:
        _float_data(typed, array.view(np.uint32))
    elif code == TensorProto.INT64:
        typed.int64_data.extend(array.tolist())
    else:  # float16 bit patterns, bools as 0 / 1
        typed.int32_data.extend(array.view(f"u{array.itemsize}").astype(np.int64).tolist())
    raw = typed_raw_bytes(typed)
    assert raw == array.astype(array.dtype.newbyteorder("<")).tobytes()
    a = _run_ort(typed, constant)
    b = _run_ort(_raw_twin(typed, raw), constant)
    assert a.dtype == b.dtype == array.dtype
    assert (
        a.view(np.uint8).tobytes() == b.view(np.uint8).tobytes() == array.view(np.uint8).tobytes()
    )


def test_onnxruntime_reads_nonzero_bools_as_true():
    typed = TensorProto(name="c", data_type=TensorProto.BOOL, dims=[5])
    typed.int32_data.extend([0, 1, 2, 256, -1])
    expected = _run_ort(typed, False)
    raw = typed_raw_bytes(typed)
    assert raw == expected.view(np.uint8).tobytes()
    assert _run_ort(_raw_twin(typed, raw), False).tolist() == expected.tolist()


def test_float_data_bits_survive_the_wire():
    t = TensorProto(data_type=TensorProto.FLOAT, dims=[1])
    _float_data(t, np.array([0x7F800001], np.uint32))  # a signaling NaN
    assert struct.unpack("<I", typed_raw_bytes(t))[0] == 0x7F800001


@pytest.mark.parametrize("dtype", ["INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2"])
def test_sub_byte_types_keep_their_bytes(tmp_path, dtype):
    data_type = getattr(onnx.TensorProto, dtype)
    count = 4097  # odd: the last byte is half (or a quarter) used
    bits = 2 if dtype.endswith("INT2") else 4
    raw = np.random.default_rng(1).integers(0, 255, (count * bits + 7) // 8, np.uint8).tobytes()
    t = onnx.TensorProto(name="q", data_type=data_type, dims=[count], raw_data=raw)
    model = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    _align(tmp_path / "m.onnx", tmp_path / "a.onnx", "a.data", alignment=64)
    onnxl.save(onnxl.load(tmp_path / "a.onnx"), tmp_path / "b.onnx", "b.data")
    for name in ("m.onnx", "a.onnx", "b.onnx"):
        assert onnx.load(str(tmp_path / name)).graph.initializer[0].raw_data == raw
        assert onnxl.load(tmp_path / name).graph.initializer[0].raw_data == raw
