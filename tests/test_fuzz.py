"""Fuzzing the wire scanner and the walker against protobuf's own parser.

Three properties, each with a short run by default (about 100 examples) and a
long one (10,000 examples) behind the ``slow`` marker (``make fuzz``):

- random valid models, with tensors of every kind in every place, scan
  (``skip_raw_data``) to exactly what protobuf parses once the bytes of the
  converted references are put back;
- the walker yields every TensorProto a generic traversal of the message
  finds, nothing more;
- random mutations and truncations of valid files either scan to protobuf's
  answer or raise a clean ``ValueError`` (a WireError, an ExternalDataError,
  a ValueError naming the file): never another exception, never a hang.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal

import onnx
import pytest
from helpers import make_every_kind_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onnx_light.onnx._plan.serialize import _is_repeated
from onnx_light.onnx._read.scan import parse_model
from onnx_light.onnx._read.tensors import is_external, iter_tensors
from onnx_light.onnx._read.wire import FileBuffer, encode_varint, scan_buffer

SELF = "fuzz-self.onnx"  # the location the scanner records for its own file
HANG_LIMIT = 60  # seconds for one example: the scanner must never hang (no speed claim)

SHORT = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LONG = settings(SHORT, max_examples=10_000)

# -- random valid models ------------------------------------------------------

_DTYPES = [  # (data_type, bytes per element)
    (onnx.TensorProto.UINT8, 1),
    (onnx.TensorProto.FLOAT16, 2),
    (onnx.TensorProto.FLOAT, 4),
    (onnx.TensorProto.INT64, 8),
]
_SIZES = [0, 1, 8, 63, 64, 65, 256, 1023, 1024, 1025, 3000]
_NAMES = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)


@st.composite
def tensors(draw, prefix: str) -> onnx.TensorProto:
    """A tensor stored any way a file can hold it: raw, typed, string, external."""
    t = onnx.TensorProto(name=prefix + draw(_NAMES))
    kind = draw(st.sampled_from(["raw", "raw", "raw", "typed", "string", "external", "empty"]))
    data_type, width = draw(st.sampled_from(_DTYPES))
    n = draw(st.sampled_from(_SIZES)) // width
    t.data_type = data_type
    t.dims.append(n)
    if kind == "raw":
        t.raw_data = random.Random(draw(st.integers(0, 2**16))).randbytes(n * width)
    elif kind == "typed":
        t.data_type = onnx.TensorProto.FLOAT
        t.float_data.extend([1.5] * n)
    elif kind == "string":
        t.data_type = onnx.TensorProto.STRING
        t.string_data.extend([b"s" * draw(st.integers(0, 40))] * min(n, 30))
        del t.dims[:]
        t.dims.append(min(n, 30))
    elif kind == "external":
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in [("location", "w.data"), ("offset", "4096"), ("length", str(n * width))]:
            t.external_data.add(key=key, value=value)
    if draw(st.booleans()):
        t.doc_string = "d" * draw(st.sampled_from([0, 10, 2000]))
    return t


@st.composite
def sparse_tensors(draw, prefix: str) -> onnx.SparseTensorProto:
    sp = onnx.SparseTensorProto()
    sp.dims.append(10_000)
    if draw(st.booleans()):
        sp.values.CopyFrom(draw(tensors(prefix + "v")))
    if draw(st.booleans()):
        sp.indices.CopyFrom(draw(tensors(prefix + "i")))
    return sp


@st.composite
def attributes(draw, name: str, depth: int) -> onnx.AttributeProto:
    """An attribute of any kind; tensor and graph kinds hold tensors."""
    kinds = ["t", "tensors", "sparse_tensor", "sparse_tensors", "int", "string"]
    kinds += ["g", "graphs"] if depth > 0 else []
    kind = draw(st.sampled_from(kinds))
    att = onnx.AttributeProto(name=name)
    if kind == "t":
        att.type = onnx.AttributeProto.TENSOR
        att.t.CopyFrom(draw(tensors(name)))
    elif kind == "tensors":
        att.type = onnx.AttributeProto.TENSORS
        att.tensors.extend(draw(tensors(f"{name}{i}")) for i in range(draw(st.integers(0, 3))))
    elif kind == "sparse_tensor":
        att.type = onnx.AttributeProto.SPARSE_TENSOR
        att.sparse_tensor.CopyFrom(draw(sparse_tensors(name)))
    elif kind == "sparse_tensors":
        att.type = onnx.AttributeProto.SPARSE_TENSORS
        att.sparse_tensors.extend(draw(sparse_tensors(f"{name}{i}")) for i in range(2))
    elif kind == "g":
        att.type = onnx.AttributeProto.GRAPH
        att.g.CopyFrom(draw(graphs(depth - 1)))
    elif kind == "graphs":
        att.type = onnx.AttributeProto.GRAPHS
        att.graphs.extend(draw(graphs(depth - 1)) for _ in range(draw(st.integers(1, 2))))
    elif kind == "int":
        att.type = onnx.AttributeProto.INT
        att.i = draw(st.integers(-(2**63), 2**63 - 1))
    else:
        att.type = onnx.AttributeProto.STRING
        att.s = b"x" * draw(st.sampled_from([0, 5, 3000]))
    return att


@st.composite
def nodes(draw, index: int, depth: int) -> onnx.NodeProto:
    node = onnx.NodeProto(op_type="Op", name=f"n{index}")
    node.input.append("x")
    node.attribute.extend(
        draw(attributes(f"a{index}_{j}", depth)) for j in range(draw(st.integers(0, 3)))
    )
    return node


@st.composite
def graphs(draw, depth: int = 2) -> onnx.GraphProto:
    g = onnx.GraphProto(name="g" + draw(_NAMES))
    g.initializer.extend(draw(tensors(f"init{i}")) for i in range(draw(st.integers(0, 3))))
    g.sparse_initializer.extend(
        draw(sparse_tensors(f"sp{i}")) for i in range(draw(st.integers(0, 1)))
    )
    g.node.extend(draw(nodes(i, depth)) for i in range(draw(st.integers(0, 3))))
    g.doc_string = "x" * draw(st.sampled_from([0, 100, 3000]))
    return g


@st.composite
def models(draw) -> onnx.ModelProto:
    """Models with tensors in every place the walker knows, stored every way."""
    m = onnx.ModelProto(ir_version=draw(st.integers(3, 11)))
    m.opset_import.add(domain="", version=18)
    if draw(st.integers(0, 9)):
        m.graph.CopyFrom(draw(graphs()))
    for i in range(draw(st.integers(0, 2))):
        f = m.functions.add(name=f"F{i}", domain="local")
        f.node.extend(draw(nodes(i, 1)) for i in range(draw(st.integers(0, 2))))
        f.attribute_proto.extend(
            draw(attributes(f"d{i}_{j}", 0)) for j in range(draw(st.integers(0, 2)))
        )
    if draw(st.integers(0, 3)) == 0:
        ti = m.training_info.add()
        ti.initialization.CopyFrom(draw(graphs(0)))
        if draw(st.booleans()):
            ti.algorithm.CopyFrom(draw(graphs(0)))
    return m


# -- what onnx-light sees, what protobuf sees ----------------------------------


def _light(data: bytes, threshold: int, as_file: bool) -> onnx.ModelProto:
    """Scan like ``skip_raw_data``, parse, then put the converted bytes back inline."""
    if as_file:
        fd = os.memfd_create("fuzz")
        try:
            os.write(fd, data)
            meta, converted = scan_buffer(FileBuffer(fd, len(data), SELF), SELF, threshold)
        finally:
            os.close(fd)
    else:
        meta, converted = scan_buffer(data, SELF, threshold)
    for offset, length in converted:
        assert length >= threshold
        assert offset >= 0 and offset + length <= len(data)
    model = parse_model(meta, SELF)
    spans = set(converted)
    for site in iter_tensors(model):
        t = site.tensor
        if is_external(t):
            e = {x.key: x.value for x in t.external_data}
            if e.get("location") == SELF and (int(e["offset"]), int(e["length"])) in spans:
                off, n = int(e["offset"]), int(e["length"])
                del t.external_data[:]
                t.ClearField("data_location")
                t.raw_data = data[off : off + n]
    return model


def _protobuf(data: bytes) -> onnx.ModelProto | None:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # DecodeError, or RuntimeError on some protobuf builds
        return None
    return model


def _normalized(model: onnx.ModelProto) -> bytes:
    """The model's bytes, with what a conversion legitimately changes erased.

    A converted tensor loses an explicit ``data_location: DEFAULT`` and stale
    ``external_data`` entries of a tensor that is not EXTERNAL (both mean
    nothing); everything else must be identical.
    """
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for site in iter_tensors(copy):
        t = site.tensor
        if not is_external(t):
            del t.external_data[:]
            t.ClearField("data_location")
    return copy.SerializeToString(deterministic=True)


class _Hang(Exception):
    """The scanner hung on an example (an Exception: hypothesis reports the example)."""


@contextlib.contextmanager
def _no_hang(seconds: float):
    def alarm(*_):
        raise _Hang(f"the scanner hung: no answer after {seconds} s on this example")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _check_same_or_clean_error(data: bytes, threshold: int, as_file: bool) -> str:
    """Scan ``data``: protobuf's answer, or a clean ValueError. Returns the outcome."""
    expected = _protobuf(data)
    with _no_hang(HANG_LIMIT):
        try:
            got = _light(data, threshold, as_file)
        except ValueError as e:  # WireError, ExternalDataError, "not a valid ONNX model"
            assert str(e), "an error says what is wrong"
            return "error"
    assert expected is not None, "the scanner accepted bytes protobuf refuses"
    assert _normalized(got) == _normalized(expected)
    return "same"


# -- valid models ----------------------------------------------------------------


def _valid_model_scans_like_protobuf(model, threshold, as_file):
    data = model.SerializeToString()
    got = _light(data, threshold, as_file)
    assert _normalized(got) == _normalized(_protobuf(data))


@SHORT
@given(models(), st.sampled_from([1, 64, 1024]), st.booleans())
def test_valid_models_scan_like_protobuf(model, threshold, as_file):
    _valid_model_scans_like_protobuf(model, threshold, as_file)


@pytest.mark.slow
@LONG
@given(models(), st.sampled_from([1, 64, 1024]), st.booleans())
def test_valid_models_scan_like_protobuf_long(model, threshold, as_file):
    _valid_model_scans_like_protobuf(model, threshold, as_file)


def _every_tensor(model: onnx.ModelProto) -> list[bytes]:
    """Every TensorProto reachable through any message field: a generic traversal."""
    found, stack = [], [model]
    while stack:
        msg = stack.pop()
        for fd, value in msg.ListFields():
            if fd.message_type is None:
                continue
            items = value if _is_repeated(fd) else [value]
            if fd.message_type.full_name == "onnx.TensorProto":
                found.extend(t.SerializeToString() for t in items)
            else:
                stack.extend(items)
    return sorted(found)


@SHORT
@given(models())
def test_walker_finds_every_tensor(model):
    walked = sorted(s.tensor.SerializeToString() for s in iter_tensors(model))
    assert walked == _every_tensor(model)


# -- mutated files ----------------------------------------------------------------

_KNOWN_FIELDS = [1, 2, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 20, 22, 23, 25]


@st.composite
def raw_fields(draw) -> bytes:
    """One encoded field, likely hostile: wrong wire types, huge lengths, groups."""
    number = draw(st.one_of(st.sampled_from(_KNOWN_FIELDS), st.integers(1, 2**29 + 5)))
    wire = draw(st.integers(0, 7))
    tag = encode_varint(number << 3 | wire)
    if wire == 0:
        return tag + encode_varint(draw(st.sampled_from([0, 1, 2, 2**31, 2**32 + 1, 2**64 - 1])))
    if wire == 1:
        return tag + bytes(8)
    if wire == 5:
        return tag + bytes(4)
    if wire == 2:
        claimed = draw(st.sampled_from([0, 1, 5, 2000, 2**31, 2**62, 2**70]))
        return tag + encode_varint(claimed) + bytes(min(claimed, draw(st.integers(0, 2100))))
    if wire == 3:
        inner = draw(st.sampled_from([b"", encode_varint(8) + b"\x01"]))
        return tag + inner + encode_varint(number << 3 | 4) * draw(st.integers(0, 1))
    return tag  # 4: a stray end of group; 6, 7: no such wire type


@st.composite
def mutations(draw):
    kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate", "field", "field"]))
    where = draw(st.floats(0, 1))
    if kind == "flip":
        return kind, where, 1 << draw(st.integers(0, 7))
    if kind == "set":
        return kind, where, draw(st.integers(0, 255))
    if kind == "insert":
        return kind, where, draw(st.binary(min_size=1, max_size=8))
    if kind == "delete":
        return kind, where, draw(st.integers(1, 16))
    if kind == "field":
        return kind, where, draw(raw_fields())
    return kind, where, None


def _mutate(data: bytes, steps) -> bytes:
    buf = bytearray(data)
    for kind, where, arg in steps:
        if not buf:
            break
        i = min(int(where * len(buf)), len(buf) - 1)
        if kind == "flip":
            buf[i] ^= arg
        elif kind == "set":
            buf[i] = arg
        elif kind in ("insert", "field"):
            buf[i:i] = arg
        elif kind == "delete":
            del buf[i : i + arg]
        else:
            del buf[i:]
    return bytes(buf)


_EVERY_KIND = make_every_kind_model().SerializeToString()


@st.composite
def mutated_files(draw) -> bytes:
    data = _EVERY_KIND if draw(st.booleans()) else draw(models()).SerializeToString()
    return _mutate(data, draw(st.lists(mutations(), min_size=1, max_size=4)))


@SHORT
@given(mutated_files(), st.sampled_from([1, 64, 1024]), st.booleans())
def test_mutated_files_scan_like_protobuf_or_fail_cleanly(data, threshold, as_file):
    _check_same_or_clean_error(data, threshold, as_file)


@pytest.mark.slow
@LONG
@given(mutated_files(), st.sampled_from([1, 64, 1024]), st.booleans())
def test_mutated_files_scan_like_protobuf_or_fail_cleanly_long(data, threshold, as_file):
    _check_same_or_clean_error(data, threshold, as_file)


def test_mutations_exercise_both_outcomes():
    """The mutation test is not vacuous: some mutants parse, some are refused."""
    rng = random.Random(6)
    outcomes = set()
    for _ in range(300):
        steps = [
            (rng.choice(["flip", "set", "truncate"]), rng.random(), rng.choice([1, 0x80, 0]))
            for _ in range(rng.randint(1, 2))
        ]
        outcomes.add(_check_same_or_clean_error(_mutate(_EVERY_KIND, steps), 1024, False))
    assert outcomes == {"same", "error"}


# -- hand-written hostile encodings -------------------------------------------


def _field(number: int, payload: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return encode_varint(number << 3) + encode_varint(value)


_RAW = _field(8, b"W") + _varint_field(2, 2) + _varint_field(7, 2000) + _field(9, b"\x07" * 2000)


@pytest.mark.parametrize(
    "tensor",
    [
        pytest.param(_RAW + _varint_field(13, 5), id="external_data-with-wire-type-0"),
        pytest.param(_RAW + _field(13, _field(1, b"location") + _field(2, b"x")), id="stale-entry"),
        pytest.param(_RAW + _varint_field(14, 1) + _varint_field(14, 0), id="location-1-then-0"),
        pytest.param(_RAW + _varint_field(14, 2**32 + 1), id="location-wraps-to-1"),
        pytest.param(_RAW + _varint_field(14, 1) + _varint_field(14, 7), id="unknown-enum-kept"),
        pytest.param(_RAW + encode_varint(50 << 3 | 3) + encode_varint(50 << 3 | 4), id="group"),
        pytest.param(_field(9, b"\x01" * 10) + _RAW, id="two-raw-data-last-wins"),
    ],
)
def test_tensor_encodings_read_as_protobuf_reads_them(tensor):
    data = _field(7, _field(5, tensor))
    assert _protobuf(data) is not None
    for as_file in (False, True):
        _check_same_or_clean_error(data, 64, as_file)


@pytest.mark.parametrize(
    "attribute",
    [
        pytest.param(_field(5, _RAW) + _field(5, _field(8, b"W2")), id="t-then-name"),
        pytest.param(_field(5, _RAW) + _field(5, _varint_field(14, 0)), id="t-then-default"),
        pytest.param(_field(5, _field(9, b"\x01" * 10)) + _field(5, _RAW), id="small-then-big"),
        pytest.param(_field(5, _RAW) + _field(5, _field(9, b"\x01" * 10)), id="big-then-small"),
        pytest.param(
            _field(22, _field(1, _RAW)) + _field(22, _field(2, _RAW)), id="sparse-split-in-two"
        ),
    ],
)
def test_repeated_singular_fields_are_merged_as_protobuf_does(attribute):
    """Protobuf merges repeated occurrences of a singular message: so must the scanner."""
    data = _field(7, _field(1, _field(5, _field(1, b"a") + attribute)))
    assert _protobuf(data) is not None
    assert _check_same_or_clean_error(data, 64, False) == "same"


def test_tensor_at_depth_100_stays_inline():
    """A reference at depth 100 would nest its entries at 101, which protobuf refuses."""
    graph = _field(1, _field(5, _field(5, _RAW)))  # node.attribute.t: tensor at graph + 3
    for _ in range(32):
        graph = _field(1, _field(5, _field(6, graph)))
    data = _field(7, graph)  # the tensor sits at depth 1 + 3 * 32 + 3 = 100
    assert _protobuf(data) is not None
    meta, converted = scan_buffer(data, SELF, 64)
    assert converted == [] and meta == data
    deeper = _field(7, _field(1, _field(5, _field(6, graph))))
    assert _protobuf(deeper) is None
    with pytest.raises(ValueError, match="nested deeper than 100"):
        scan_buffer(deeper, SELF, 64)
