"""Unsafe, malformed and out-of-range references are refused, naming tensor and file.

Offsets and lengths of thousands of digits or of 101 significant ones, digits
that are not ASCII, a sign twice or a ``+``, external_data that is not UTF-8
(the error shows the bytes), a location ending with '/', references that add up
to 2**63 bytes or more: each refused, naming the tensor. The refusals of the
reference checks (``_read/external.py``) are checked word for word, through
``load`` and ``align`` (which read references the same way), with nothing
written. Odd but safe spellings (``./w.data``, ``sub//w.data``) and offsets
written ``-0`` or zero-padded (integers to onnx's checker, ``onnx.load`` and
onnxruntime) read as onnx reads them, and a single-file model's references to
itself hold under whatever name the caller gives it (a symlink, a hard link,
``a:b.onnx``, ``C:m.onnx``).
"""

import os

import numpy as np
import onnx
import pytest
from helpers import as_options, folder_digest, read_back, tensor_bytes
from helpers import assert_clean_failure as _one_line
from helpers import external_tensor as _ext_tensor
from helpers import model_from_initializer_bytes as _raw_model
from helpers import run_cli as _cli
from helpers import uint8_model as _model
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl


def _align(src, dst, weights, **kw):
    kw = as_options(kw, keep=("alignment", "chunk_size"))  # the settings in options=
    return onnxl.align_external_data_streaming(src, dst, weights, **kw)


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


def _negative_dims_model(tmp_path, dims):
    """A model whose float32 'W' reads 4000 bytes of w.data with ``dims`` (a negative one)."""
    path = _model_with_ref(tmp_path, [("location", "w.data"), ("offset", "0"), ("length", "4000")])
    model = onnx.load(str(path), load_external_data=False)
    model.graph.initializer[0].ClearField("dims")
    model.graph.initializer[0].dims.extend(dims)
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("dims", [[-1, 1000], [-4, -250]], ids=["one", "two"])
def test_negative_dims_are_refused(tmp_path, dims):
    """onnxruntime refuses a tensor with a negative dim, whatever its length ("Out of
    bounds dimensions"); every operation that checks references refuses it too, naming
    the tensor and the file, and writes nothing."""
    path = _negative_dims_model(tmp_path, dims)
    before = sorted([*os.listdir(tmp_path), "out"])
    meta = onnxl.load(path, load_external_data=False)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    operations = [
        *_all_entry_points(path, tmp_path),
        lambda: onnxl.deduplicate_external_data([path], [out / "d.onnx"], "d.data"),
        lambda: onnxl.convert_float_to_float16(path, out / "c.onnx", "c.data"),
        lambda: onnxl.save_edited(meta, path, out / "e.onnx", "e.data"),
    ]
    for op in operations:
        with pytest.raises(onnxl.ExternalDataError, match="negative dimension") as info:
            op()
        assert "'W'" in str(info.value) and "w.data" in str(info.value), str(info.value)
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(out) == [], "nothing written"


def test_verify_refuses_negative_dims(tmp_path, capsys):
    """verify does not promise that onnxruntime loads a tensor with a negative dim."""
    path = _negative_dims_model(tmp_path, [-1, 1000])
    code, out, err = _cli(capsys, "verify", path)
    assert code == 1
    assert "'W'" in out and "w.data" in out and "negative dimension" in out, out
    assert "every reference valid" not in out
    assert "1 problem" in err


def test_an_inline_tensor_with_negative_dims_does_not_move_out(tmp_path):
    """Moving it to a weights file would write a reference no loader accepts: refused,
    naming the tensor and the model file."""
    t = onnx.TensorProto(name="W", data_type=onnx.TensorProto.FLOAT, dims=[-1, 1000])
    t.raw_data = bytes(4000)
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(helper.make_graph([], "g", [], [], [t])).SerializeToString())
    with pytest.raises(onnxl.ExternalDataError, match="negative dimension") as info:
        _align(path, tmp_path / "a.onnx", "a.data", size_threshold=1024)
    assert "'W'" in str(info.value) and "m.onnx" in str(info.value)
    with pytest.raises(onnxl.ExternalDataError, match="negative dimension"):
        onnxl.save(onnxl.load(path), tmp_path / "s.onnx", "s.data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


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


# -- each refusal in full, as the user reads it --------------------------------------


W_NAMED = "tensor 'W' (graph.initializer[0])"


def _model_with_entries(folder, pairs, dims=10):
    """m.onnx: W, uint8 [dims], EXTERNAL with the entries ``pairs`` (in that order);
    w.data beside it holds 100 bytes 0..99."""
    (folder / "w.data").write_bytes(bytes(range(100)))
    t = _ext_tensor("W", "w.data", "0", dims)
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


REFUSALS = {
    "empty": (_entries(location=""), f"{W_NAMED}: external_data has an empty 'location'"),
    "nul": (
        _entries(location="w\x00.data"),
        f"{W_NAMED}: location 'w\\x00.data' contains a NUL byte",
    ),
    "absolute": (
        _entries(location="/w.data"),
        f"{W_NAMED}: location '/w.data' is absolute; external data must be relative to the "
        "model's folder",
    ),
    "drive": (
        _entries(location="C:w.data"),
        f"{W_NAMED}: location 'C:w.data' is absolute; external data must be relative to the "
        "model's folder",
    ),
    "backslash-climb": (
        _entries(location="a\\..\\..\\w.data"),
        f"{W_NAMED}: location 'a\\..\\..\\w.data' contains '..'; external data must stay inside "
        "the model's folder",
    ),
    "trailing-slash": (
        _entries(location="w.data/"),
        f"{W_NAMED}: location 'w.data/' ends with '/': not a file name",
    ),
    "101-digits": (
        _entries(offset="1" * 101),
        f"{W_NAMED} in '{{folder}}/w.data': external_data offset has 101 digits, more than any "
        "file offset (2**63 - 1)",
    ),
    "plus-sign": (
        _entries(offset="+5"),
        f"{W_NAMED} in '{{folder}}/w.data': external_data offset='+5' is not an integer "
        "(decimal digits only)",
    ),
    "key-twice": (
        [("location", "w.data"), ("offset", "0"), ("length", "10"), ("length", "10")],
        f"{W_NAMED}: external_data key 'length' appears twice",
    ),
    "past-the-end": (
        _entries(offset="95"),
        f"{W_NAMED} in '{{folder}}/w.data': bytes [95, 105) run past the end of the file (100 bytes)",
    ),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_bad_reference_is_refused_in_one_clear_line(tmp_path, case):
    """load and align refuse it with the same message, naming the tensor and the location
    (or file) and saying what is allowed; align writes nothing."""
    pairs, expected = REFUSALS[case]
    path = _model_with_entries(tmp_path, pairs)
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
    t = _ext_tensor("W", "w.data", "0", 10)
    extra = t.external_data.add()
    extra.key, extra.value = "kk", "vv"
    data = t.SerializeToString().replace(b"kk" if field == "key" else b"vv", b"\xff\xfe")
    path = _raw_model(tmp_path, data)
    out = tmp_path / "out"
    out.mkdir()
    expected = (
        f"{W_NAMED}: external_data holds b'\\xff\\xfe', which is not valid UTF-8 (protobuf strings "
        "must be)"
    )
    assert _refusals(path, out) == [expected, expected]


def test_a_name_with_a_colon_after_a_non_ascii_letter_is_not_a_drive(tmp_path):
    """``é:w.data`` is a file name of the folder (Windows drives are ASCII letters): read."""
    (tmp_path / "é:w.data").write_bytes(bytes(range(10)))
    path = _model_with_entries(tmp_path, _entries(location="é:w.data"))
    loaded = onnxl.load(path).graph.initializer[0]
    np.testing.assert_array_equal(np.frombuffer(loaded.raw_data, np.uint8), np.arange(10))


# -- integers, text and odd spellings --------------------------------------------------


@pytest.mark.parametrize("field", ["key", "value"])
def test_external_data_not_utf8(tmp_path, capsys, field):
    (tmp_path / "w.data").write_bytes(bytes(16))
    t = _ext_tensor("T", "w.data", "0", 16)
    extra = t.external_data.add()
    extra.key, extra.value = "kk", "vv"
    data = t.SerializeToString().replace(b"kk" if field == "key" else b"vv", b"\xff\xfe")
    path = _raw_model(tmp_path, data)
    out = tmp_path / "out"
    out.mkdir()
    calls = [
        lambda: onnxl.load(path),
        lambda: _align(path, out / "a.onnx", "a.data"),
        lambda: onnxl.save(onnxl.load(path, load_external_data=False), out / "b.onnx"),
        lambda: onnxl.save_model_with_shared_external_data(
            onnxl.load(path, load_external_data=False), tmp_path / "c.onnx"
        ),
    ]
    for call in calls:
        with pytest.raises(onnxl.ExternalDataError, match="'T'.*not valid UTF-8"):
            call()
    code, stdout, err = _cli(capsys, "verify", path)
    assert code == 1 and "'T'" in stdout and "UTF-8" in stdout
    code, _, err = _cli(capsys, "align", path, out / "d.onnx")
    _one_line(code, err)
    assert os.listdir(out) == []


@pytest.mark.parametrize("key", ["offset", "length"])
def test_huge_integers_name_the_tensor(tmp_path, capsys, key):
    (tmp_path / "w.data").write_bytes(bytes(16))
    t = _ext_tensor("T", "w.data", "0", 16)
    for entry in t.external_data:
        if entry.key == key:
            entry.value = "9" * 5000
    model = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises(onnxl.ExternalDataError, match=f"'T'.*w.data.*{key} has 5000 digits"):
        onnxl.load(tmp_path / "m.onnx")
    code, _, err = _cli(capsys, "align", tmp_path / "m.onnx", tmp_path / "a.onnx")
    _one_line(code, err)
    code, out, err = _cli(capsys, "info", tmp_path / "m.onnx")
    assert code == 0, err


def test_unicode_digits_in_an_inline_offset(tmp_path, capsys):
    """ "²" is a digit to str.isdigit(), not an integer: an error naming the tensor."""
    model = _model(1, 3000)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    meta = onnx.load(str(path))
    t = _ext_tensor("T", "m.onnx", "²", 16)
    meta.graph.initializer.append(t)
    onnx.save(meta, str(path))
    with pytest.raises(onnxl.ExternalDataError, match="'T'.*not an integer"):
        _align(path, tmp_path / "a.onnx", "a.data")
    code, out, err = _cli(capsys, "verify", path)
    assert code == 1 and "'T'" in out
    code, out, err = _cli(capsys, "info", path)
    assert code == 0, err


@pytest.mark.parametrize("location", ["w.data/", "w.data/.", "sub/w.data/"])
def test_trailing_slash_is_refused(tmp_path, capsys, location):
    (tmp_path / "sub").mkdir()
    for f in ("w.data", "sub/w.data"):
        (tmp_path / f).write_bytes(bytes(16))
    model = helper.make_model(
        helper.make_graph([], "g", [], [], [_ext_tensor("T", location, "0", 16)])
    )
    onnx.save(model, str(tmp_path / "m.onnx"))
    with pytest.raises((onnxl.ExternalDataError, OSError), match="'T'"):
        onnxl.load(tmp_path / "m.onnx")
    code, out, _ = _cli(capsys, "verify", tmp_path / "m.onnx")
    assert code == 1 and "'T'" in out


@pytest.mark.parametrize("location", ["./w.data", "sub//w.data", "per%20cent.data", "e\u0301.data"])
def test_odd_but_safe_locations_read_as_onnx_reads_them(tmp_path, location):
    (tmp_path / "sub").mkdir()
    data = np.arange(16, dtype=np.uint8).tobytes()
    (tmp_path / location).write_bytes(data)
    model = helper.make_model(
        helper.make_graph([], "g", [], [], [_ext_tensor("T", location, "0", 16)])
    )
    onnx.save(model, str(tmp_path / "m.onnx"))
    ours = onnxl.load(tmp_path / "m.onnx").graph.initializer[0].raw_data
    theirs = onnx.load(str(tmp_path / "m.onnx")).graph.initializer[0].raw_data
    assert ours == theirs == data


@pytest.mark.parametrize("how", ["symlink", "hardlink", "colon", "drive-like"])
@pytest.mark.parametrize("threshold", [None, 1024])
def test_single_file_model_as_the_caller_names_it(tmp_path, capsys, how, threshold):
    model = _model(3, 5000)
    store = tmp_path / "blobs"
    store.mkdir()
    snap = tmp_path / "snapshot"
    snap.mkdir()
    names = {
        "symlink": "m.onnx",
        "hardlink": "m.onnx",
        "colon": "a:b.onnx",
        "drive-like": "C:m.onnx",
    }
    path = snap / names[how]
    if how == "symlink":
        onnx.save(model, str(store / "sha256"))
        os.symlink(store / "sha256", path)
    elif how == "hardlink":
        onnx.save(model, str(store / "sha256"))
        os.link(store / "sha256", path)
    else:
        onnx.save(model, str(path))
    out = tmp_path / "out"
    out.mkdir()
    _align(path, out / "a.onnx", "a.data", size_threshold=threshold)
    assert read_back(out / "a.onnx") == tensor_bytes(model)
    code, stdout, err = _cli(capsys, "verify", path)
    assert code == 0, stdout + err
    code, stdout, err = _cli(capsys, "info", path)
    assert code == 0, err


DATA = np.arange(64, dtype=np.uint8).tobytes()


def _identity_model(folder, offset: str, length: int = 16):
    """m.onnx: Y = Identity(W), W a uint8 tensor of ``length`` bytes of w.data at ``offset``
    (written as given)."""
    (folder / "w.data").write_bytes(DATA)
    node = helper.make_node("Identity", ["W"], ["Y"])
    out = helper.make_tensor_value_info("Y", TensorProto.UINT8, [length])
    graph = helper.make_graph([node], "g", [], [out], [_ext_tensor("W", "w.data", offset, length)])
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
    file."""
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


@pytest.mark.parametrize("field", ["key", "value"])
def test_the_error_shows_the_entry_that_is_not_utf8(tmp_path, field):
    """external_data holds ``kk: vv``, one of them replaced by bytes that are not UTF-8:
    the error shows those bytes, not the other half of the entry (which is valid text)."""
    (tmp_path / "w.data").write_bytes(bytes(16))
    t = _ext_tensor("T", "w.data", "0", 16)
    extra = t.external_data.add()
    extra.key, extra.value = "kk", "vv"
    good = "vv" if field == "key" else "kk"
    data = t.SerializeToString().replace(b"kk" if field == "key" else b"vv", b"\xff\xfe")
    path = _raw_model(tmp_path, data)
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


# -- references that add up past any file size ---------------------------------------


def _external_model(folder, refs: list[tuple[str, int, int]], data_file: str, size: int):
    """A model whose uint8 tensors point at (location, offset, length) in a sparse file."""
    with open(folder / data_file, "wb") as f:
        f.truncate(size)
    inits = []
    for i, (location, offset, length) in enumerate(refs):
        inits.append(_ext_tensor(f"T{i}", location, str(offset), length))
    model = helper.make_model(helper.make_graph([], "g", [], [], inits))
    onnx.save(model, str(folder / "m.onnx"))
    return folder / "m.onnx"


def test_planned_file_over_int64_is_refused(sparse_folder, tmp_path):
    size = 2**62
    refs = [("s.data", k, size - k) for k in range(3)]  # three spans: 3 * 2**62 > 2**63
    path = _external_model(sparse_folder, refs, "s.data", size)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError, match="2\\*\\*63"):
        _align(path, out / "a.onnx", "a.data")
    with pytest.raises(ValueError, match="2\\*\\*63"):
        opts = onnxl.SerializeOptions(use_external_data_location=False, base_dir=sparse_folder)
        onnxl.save(
            onnxl.load(path, load_external_data=False), out / "a.onnx", "a.data", options=opts
        )
    assert os.listdir(out) == []


def test_a_plan_of_exactly_2_63_bytes_is_refused(sparse_folder):
    """Three references into a 2**62-byte sparse file add up, dense, to exactly 2**63 bytes:
    one more than a file offset allows. align and save refuse it before writing anything.
    The destination is on the small tmpfs too, so a call that went on writing would fail
    at once on a full disk."""
    size = 2**62
    with open(sparse_folder / "s.data", "wb") as f:
        f.truncate(size)
    refs = [("T0", 0, size), ("T1", 1, size - 1), ("T2", 0, 1)]
    inits = [_ext_tensor(n, "s.data", str(o), k) for n, o, k in refs]
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
