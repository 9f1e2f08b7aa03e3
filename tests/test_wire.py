"""skip_raw_data: the wire scanner against protobuf's own parse.

What it keeps (unknown fields, through every writer), and its memory: a small
multiple of the metadata, however many fields it visits.
"""

import os
import textwrap

import numpy as np
import onnx
import pytest
from google.protobuf.unknown_fields import UnknownFieldSet
from helpers import (
    as_options,
    make_every_kind_model,
    peak_growth_in_subprocess,
    save_two_file,
    tensor_bytes,
)
from helpers import uint8_model as _model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._read.tensors import is_external, iter_tensors, path_to_str
from onnx_light.onnx._read.wire import WireError, encode_varint, read_varint, scan_buffer


def _align(src, dst, weights, **kw):
    kw = as_options(kw, keep=("alignment", "chunk_size"))  # the settings in options=
    return onnxl.align_external_data_streaming(src, dst, weights, **kw)


def _resolve_self_refs(meta: onnx.ModelProto, data: bytes) -> onnx.ModelProto:
    """Put back the bytes the scanner replaced by references into ``data``."""
    for site in iter_tensors(meta):
        t = site.tensor
        if is_external(t):
            e = {x.key: x.value for x in t.external_data}
            off, n = int(e["offset"]), int(e["length"])
            del t.external_data[:]
            t.ClearField("data_location")
            t.raw_data = data[off : off + n]
    return meta


def test_skip_raw_data_every_kind(tmp_path):
    model = make_every_kind_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    meta = onnxl.load(path, load_external_data=False, skip_raw_data=True)
    data = path.read_bytes()
    converted = 0
    for site in iter_tensors(meta):
        t = site.tensor
        if is_external(t):
            converted += 1
            e = {x.key: x.value for x in t.external_data}
            assert e["location"] == "m.onnx"
            assert int(e["length"]) >= 1024
            assert not t.HasField("raw_data")
    # every tensor over 1 KiB was converted, the tiny one stayed inline
    assert converted == 17
    assert meta.ByteSize() < 8192
    back = _resolve_self_refs(meta, data)
    assert tensor_bytes(back) == tensor_bytes(model)


def test_skip_raw_data_keeps_external_references(tmp_path):
    model = make_every_kind_model()
    save_two_file(model, tmp_path / "m.onnx")
    meta = onnxl.load(tmp_path / "m.onnx", load_external_data=False, skip_raw_data=True)
    plain = onnxl.load(tmp_path / "m.onnx", load_external_data=False)
    kept = 0
    for a, b in zip(iter_tensors(meta), iter_tensors(plain)):
        assert a.path == b.path
        if is_external(b.tensor):
            kept += 1
            assert a.tensor.SerializeToString() == b.tensor.SerializeToString()
        elif len(b.tensor.raw_data) >= 1024:
            assert {e.key: e.value for e in a.tensor.external_data}["location"] == "m.onnx"
    assert kept >= 10


def test_skip_with_load_external_is_error(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(make_every_kind_model(), str(path))
    with pytest.raises(ValueError, match="skip_raw_data"):
        onnxl.load(path, skip_raw_data=True)


def test_varint_roundtrip_and_errors():
    for v in [0, 1, 127, 128, 300, 2**32, 2**63 - 1]:
        enc = encode_varint(v)
        assert read_varint(enc, 0, len(enc)) == (v, len(enc))
    with pytest.raises(WireError):
        read_varint(b"\x80\x80", 0, 2)
    with pytest.raises(WireError):
        read_varint(b"\xff" * 11, 0, 11)


_DTYPES = [np.float32, np.float16, np.int64, np.uint8, np.float64]


@st.composite
def random_models(draw):
    """Models with tensors of random sizes (around the 1 KiB threshold) in random places."""
    n = draw(st.integers(1, 6))
    inits, nodes, sparse = [], [], []
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    for i in range(n):
        dtype = draw(st.sampled_from(_DTYPES))
        size = draw(st.sampled_from([0, 1, 100, 255, 256, 257, 600, 2000]))
        arr = rng.integers(0, 100, size).astype(dtype)
        t = numpy_helper.from_array(arr, f"t{i}")
        if draw(st.booleans()):
            t.doc_string = "d" * draw(st.integers(0, 3000))
        where = draw(st.sampled_from(["init", "const", "sparse", "subgraph", "function"]))
        if where == "init":
            inits.append(t)
        elif where == "const":
            nodes.append(helper.make_node("Constant", [], [f"c{i}"], value=t))
        elif where == "sparse" and size:
            idx = numpy_helper.from_array(np.arange(size, dtype=np.int64), f"i{i}")
            sparse.append(helper.make_sparse_tensor(t, idx, [size]))
        elif where == "subgraph":
            sub = helper.make_graph([], f"s{i}", [], [], [t])
            nodes.append(helper.make_node("If", ["c"], [f"o{i}"], then_branch=sub, else_branch=sub))
        else:
            inits.append(t)
    graph = helper.make_graph(nodes, "g", [], [], inits, sparse_initializer=sparse)
    graph.doc_string = "x" * draw(st.integers(0, 2000))
    return helper.make_model(graph)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_models(), st.sampled_from([1, 64, 1024]))
def test_scanner_matches_protobuf(model, threshold):
    data = model.SerializeToString()
    meta_bytes, converted = scan_buffer(data, "self.onnx", threshold)
    meta = onnx.ModelProto()
    meta.ParseFromString(meta_bytes)
    for _off, n in converted:
        assert n >= threshold
    back = _resolve_self_refs(meta, data)
    expected = onnx.ModelProto()
    expected.ParseFromString(data)
    assert {path_to_str(s.path): s.tensor.SerializeToString() for s in iter_tensors(back)} == {
        path_to_str(s.path): s.tensor.SerializeToString() for s in iter_tensors(expected)
    }
    back_graph = onnx.ModelProto()
    back_graph.CopyFrom(back)
    assert back_graph.graph.doc_string == expected.graph.doc_string


_PEAK_SCRIPT = r"""
import sys
import onnx_light.onnx as onnxl
from benchmarks.harness import PeakMemory
with PeakMemory() as m:
    model = onnxl.load(sys.argv[1], load_external_data=False, skip_raw_data=True)
print(m.growth, m.exact)
"""


def test_skip_raw_data_memory_does_not_grow_with_model(tmp_path):
    """A 256 MiB single-file model is skip-loaded with far less than 64 MiB of growth."""
    from benchmarks.harness import make_gemm_model

    path = tmp_path / "big.onnx"
    onnx.save(make_gemm_model(64, 1024), str(path))
    assert os.path.getsize(path) > 256 * 2**20
    growth = peak_growth_in_subprocess(_PEAK_SCRIPT, path)
    assert growth < 32 * 2**20


# -- skimming: what cannot hold a tensor is skipped without being decoded ----------------


def _forest(n: int) -> onnx.ModelProto:
    """A tree-ensemble-like node: a million-field kind of metadata, no weights."""
    rng = np.random.default_rng(0)
    node = helper.make_node(
        "TreeEnsembleRegressor",
        ["X"],
        ["Y"],
        domain="ai.onnx.ml",
        nodes_featureids=rng.integers(0, 2**40, n).tolist(),
        nodes_modes=[b"BRANCH_LEQ" if i % 3 else b"LEAF" for i in range(n)],
        nodes_values=rng.standard_normal(n).astype(np.float32).tolist(),
        nodes_hitrates=rng.standard_normal(n).tolist(),
    )
    const = helper.make_node(
        "Constant", [], ["c"], value=numpy_helper.from_array(rng.standard_normal(700), "c")
    )
    graph = helper.make_graph([node, const], "forest", [], [])
    return helper.make_model(graph)


@pytest.mark.parametrize("window", [1 << 20, 4099])
@pytest.mark.parametrize("prefilter", [True, False])
def test_forest_scans_to_protobufs_answer(monkeypatch, window, prefilter):
    """Runs of varints, floats, doubles and short strings skipped in one step, across
    window edges; the Constant's weights after them still become a reference."""
    from onnx_light.onnx._read import skim as _skim

    monkeypatch.setattr(_skim, "WINDOW", window)
    if not prefilter:  # every message decoded: the runs are what keeps it fast
        monkeypatch.setattr(_skim.RawDataFilter, "may_hold", lambda self, spans: True)
    data = _forest(30_000).SerializeToString()
    meta, converted = scan_buffer(data, "self.onnx", 1024)
    assert len(converted) == 1
    back = _resolve_self_refs(onnx.load_from_string(meta), data)
    assert back.SerializeToString() == onnx.load_from_string(data).SerializeToString()


def test_overlong_raw_data_tag_is_still_read_right():
    """A raw_data tag in an overlong varint form: found, or kept inline: never misread."""
    t = numpy_helper.from_array(np.arange(600, dtype=np.float32), "t")
    plain = t.SerializeToString()
    head = encode_varint(9 << 3 | 2)
    overlong = plain.replace(head + encode_varint(2400), b"\xca\x80\x00" + encode_varint(2400), 1)
    graph = helper.make_graph([], "g", [], [])
    body = graph.SerializeToString() + encode_varint(5 << 3 | 2) + encode_varint(len(overlong))
    body += overlong
    model = helper.make_model(graph).SerializeToString()
    model = model.replace(
        encode_varint(7 << 3 | 2)
        + encode_varint(len(graph.SerializeToString()))
        + graph.SerializeToString(),
        encode_varint(7 << 3 | 2) + encode_varint(len(body)) + body,
    )
    expected = onnx.load_from_string(model)
    assert expected.graph.initializer[0].raw_data == t.raw_data
    meta, converted = scan_buffer(model, "self.onnx", 1024)
    back = _resolve_self_refs(onnx.load_from_string(meta), model)
    assert back.graph.initializer[0].raw_data == t.raw_data


def _lf(number: int, payload: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


@pytest.mark.parametrize(
    "tag", [b"\x4a", b"\xca\x00", b"\xca\x80\x80\x80\x00", b"\xca" + b"\x80" * 5 + b"\x00"]
)
def test_overlong_tags_read_as_protobuf_reads_them(tag):
    """Tags in up to 5 bytes are read (and converted); longer ones are refused, as protobuf does."""
    raw = bytes(range(256)) * 8
    tensor = _lf(8, b"w") + b"\x08\x80\x10\x10\x02" + tag + encode_varint(len(raw)) + raw
    model = b"\x08\x08" + _lf(7, _lf(5, tensor) + _lf(2, b"g"))
    try:
        expected = onnx.load_from_string(model)
    except Exception:
        with pytest.raises(WireError):
            scan_buffer(model, "self.onnx", 1024)
        return
    meta, converted = scan_buffer(model, "self.onnx", 1024)
    back = _resolve_self_refs(onnx.load_from_string(meta), model)
    assert back.graph.initializer[0].raw_data == expected.graph.initializer[0].raw_data


def test_dropped_external_data_entries_are_checked():
    """A converted tensor's old external_data entries are not written again: a corrupt one is
    still refused, as protobuf refuses it."""
    raw = bytes(2048)
    tensor = _lf(8, b"w") + b"\x08\x80\x10\x10\x02" + _lf(13, b"abc") + _lf(9, raw)
    model = b"\x08\x08" + _lf(7, _lf(5, tensor))
    with pytest.raises(Exception):  # noqa: B017  (protobuf's DecodeError)
        onnx.load_from_string(model)
    with pytest.raises(WireError, match="external_data"):
        scan_buffer(model, "self.onnx", 1024)


def test_many_tensors_scan_in_linear_work(monkeypatch):
    """The raw_data filter keeps its clean intervals merged: its work per tensor is constant."""
    from onnx_light.onnx._read import skim as _skim

    sizes = []
    real = _skim.RawDataFilter._add_clean

    def spy(self, start, end):
        real(self, start, end)
        sizes.append(len(self._starts))

    monkeypatch.setattr(_skim.RawDataFilter, "_add_clean", spy)
    inits = [numpy_helper.from_array(np.full(300, i, np.float32), f"w{i}") for i in range(3000)]
    data = helper.make_model(helper.make_graph([], "g", [], [], inits)).SerializeToString()
    meta, converted = scan_buffer(data, "self.onnx", 1024)
    assert len(converted) == 3000
    assert len(sizes) <= 3 * 3000 + 10  # a bounded number of searches per tensor


def _with_unknown(model: onnx.ModelProto) -> onnx.ModelProto:
    extra = encode_varint(900 << 3 | 2) + encode_varint(3) + b"new"
    out = onnx.ModelProto()
    graph = onnx.GraphProto()
    tensor = onnx.TensorProto()
    tensor.ParseFromString(model.graph.initializer[0].SerializeToString() + extra)
    graph.ParseFromString(model.graph.SerializeToString() + extra)
    graph.initializer[0].CopyFrom(tensor)
    out.ParseFromString(model.SerializeToString() + extra)
    out.graph.CopyFrom(graph)
    return out


def _unknown(msg) -> list:
    return [(f.field_number, f.data) for f in UnknownFieldSet(msg)]


@pytest.mark.parametrize("writer", ["save", "save-single", "shared", "align"])
def test_unknown_fields_are_kept(tmp_path, writer):
    model = _with_unknown(_model())
    new = [(900, b"new")]
    assert _unknown(model) == _unknown(model.graph) == _unknown(model.graph.initializer[0]) == new
    dst = tmp_path / "out.onnx"
    if writer == "save":
        onnxl.save(model, dst, "out.data")
    elif writer == "save-single":
        onnxl.save(model, dst)
    elif writer == "shared":
        onnxl.save_model_with_shared_external_data(model, dst)
    else:
        onnx.save(model, str(tmp_path / "src.onnx"))
        _align(tmp_path / "src.onnx", dst, "out.data", size_threshold=0)
    back = onnx.load(str(dst), load_external_data=False)
    assert _unknown(back) == _unknown(back.graph) == _unknown(back.graph.initializer[0]) == new


MB = 1024 * 1024


_SCAN_MEMORY = textwrap.dedent(
    """
    import os, sys
    import onnx
    from benchmarks.harness import PeakMemory
    import onnx_light.onnx as onnxl
    from onnx_light.onnx._read.wire import scan_file

    path, what = sys.argv[1:]
    with PeakMemory() as peak:
        if what == "scan":
            fd = os.open(path, os.O_RDONLY)
            scan_file(fd, os.fstat(fd).st_size, "x")
        elif what == "load":
            onnxl.load(path, load_external_data=False, skip_raw_data=True)
        else:
            onnx.load(path)
    print(peak.growth, peak.exact)
    """
)


def test_scanner_memory_is_bounded_by_the_metadata(tmp_path):
    """2 MB of two-byte fields in one attribute (which the scanner must visit): flat memory."""
    ints = helper.make_attribute("ids", [1] * MB)  # unpacked: one field per value
    node = helper.make_node("Custom", [], ["y"], domain="custom")
    node.attribute.append(ints)
    model = helper.make_model(helper.make_graph([node], "g", [], []))
    path = tmp_path / "fields.onnx"
    onnx.save(model, str(path))
    size = os.path.getsize(path)
    scan = peak_growth_in_subprocess(_SCAN_MEMORY, path, "scan")
    assert scan < 3 * size, f"scan: {scan / MB:.0f} MiB for {size / MB:.0f} MB of metadata"
    # the whole load parses the same ModelProto as onnx.load, and no more
    ours = peak_growth_in_subprocess(_SCAN_MEMORY, path, "load")
    theirs = peak_growth_in_subprocess(_SCAN_MEMORY, path, "onnx")
    assert ours < theirs + 2 * size, (ours, theirs)
