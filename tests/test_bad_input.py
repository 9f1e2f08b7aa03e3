"""Bad input, table-driven: every entry point refuses it cleanly.

Each case runs through ``load``, ``save``, both streaming helpers and the
command line (whichever apply). Each must raise a specific exception whose
message names the tensor (when there is one) and the file; the CLI must print
one line on stderr, no traceback, and exit non-zero; nothing may appear in
the destination folder and the source files must stay as they were.

``test_references.py`` already covers the basic reference rules through
``load``/``save``/``align``; the cases here extend them (other entry points,
other spellings, special files, hostile files).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import as_options, folder_digest
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.cli import main
from onnx_light.onnx._read.wire import encode_varint

EDE = onnxl.ExternalDataError

# -- builders ------------------------------------------------------------------


def _external(name: str, entries, dims=(1000,), **fields) -> onnx.TensorProto:
    t = onnx.TensorProto(name=name, data_type=onnx.TensorProto.FLOAT, dims=dims)
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in entries:
        t.external_data.add(key=key, value=value)
    for key, value in fields.items():
        if isinstance(value, list):
            getattr(t, key).extend(value)
        else:
            setattr(t, key, value)
    return t


def _write(folder: Path, model: onnx.ModelProto, data: bytes | None = b"\0" * 4000) -> Path:
    if data is not None:
        (folder / "w.data").write_bytes(data)
    path = folder / "m.onnx"
    path.write_bytes(model.SerializeToString())  # onnx.save would rewrite w.data
    return path


def _one(entries, **fields):
    """A model whose initializer 'W' points at ``entries`` (w.data holds 4000 bytes)."""

    def build(folder: Path) -> Path:
        t = _external("W", entries, **fields)
        return _write(folder, helper.make_model(helper.make_graph([], "g", [], [], [t])))

    return build


def _then(build, setup: Callable[[Path], None]):
    """``build``, then ``setup(folder)`` to add special files next to the model."""

    def both(folder: Path) -> Path:
        path = build(folder)
        setup(folder)
        return path

    return both


def _nested(entries, dims=(1000,)):
    """The bad tensor 'deep' sits in an If branch, inside a Constant attribute."""

    def build(folder: Path) -> Path:
        deep = _external("deep", entries, dims)
        branch = helper.make_graph(
            [helper.make_node("Constant", [], ["c"], value=deep)], "branch", [], []
        )
        node = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
        return _write(folder, helper.make_model(helper.make_graph([node], "g", [], [])))

    return build


def _sparse(entries):
    """The bad tensor is the indices of a sparse initializer."""

    def build(folder: Path) -> Path:
        values = numpy_helper.from_array(np.ones(10, np.float32), "sv")
        indices = _external("sidx", entries, dims=(500,))
        indices.data_type = onnx.TensorProto.INT64
        sp = helper.make_sparse_tensor(values, indices, [10_000])
        graph = helper.make_graph([], "g", [], [], sparse_initializer=[sp])
        return _write(folder, helper.make_model(graph))

    return build


def _file(content: bytes | None = None, make: Callable[[Path], None] | None = None):
    """A model path whose file is bad itself (content, or made by ``make``)."""

    def build(folder: Path) -> Path:
        path = folder / "m.onnx"
        if content is not None:
            path.write_bytes(content)
        if make is not None:
            make(path)
        return path

    return build


def _field(number: int, payload: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(payload)) + payload


_BIG_TENSOR = _field(8, b"W") + encode_varint(2 << 3) + b"\x01" + _field(9, b"\0" * 2000)


def _deep_graphs(levels: int, tensor: bytes = _BIG_TENSOR) -> bytes:
    """A model nesting ``levels`` If subgraphs (node -> attribute.g -> graph), written by hand."""
    graph = _field(5, tensor)
    for _ in range(levels):
        graph = _field(1, _field(5, _field(6, graph)))
    return encode_varint(1 << 3) + b"\x09" + _field(7, graph)


def _deep_groups(levels: int) -> bytes:
    return encode_varint(60 << 3 | 3) * levels + encode_varint(60 << 3 | 4) * levels


def _valid_model_bytes() -> bytes:
    t = numpy_helper.from_array(np.arange(2000, dtype=np.float32), "W")
    return helper.make_model(helper.make_graph([], "g", [], [], [t])).SerializeToString()


def _link_outside(folder: Path) -> None:
    (folder.parent / "secret.data").write_bytes(b"s" * 4000)
    os.symlink(folder.parent / "secret.data", folder / "link.data")


def _hard_link(folder: Path) -> None:
    os.link(folder / "w.data", folder / "hard.data")


def _device(folder: Path) -> None:
    try:
        os.mknod(folder / "dev.data", stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot create a device node here: {e}")


# -- the table -----------------------------------------------------------------

REF = ("load", "save", "align", "shared", "cli-verify", "cli-align")
FILE = ("load", "skip", "align", "cli-info", "cli-verify", "cli-align")


@dataclass
class Case:
    id: str
    build: Callable[[Path], Path]
    exc: type[BaseException]
    match: str
    file: str  # the file (or location) the message must name; "a|b": either
    tensor: str | None = "'W'"  # the tensor the message must name
    ops: tuple[str, ...] = REF


W = [("location", "w.data")]
CASES = [
    # external_data values: integers are ASCII decimal digits, in range
    Case("offset-hex", _one([*W, ("offset", "0x10")]), EDE, "not an integer", "w.data"),
    Case("offset-space", _one([*W, ("offset", " 4")]), EDE, "not an integer", "w.data"),
    Case("offset-underscore", _one([*W, ("offset", "1_0")]), EDE, "not an integer", "w.data"),
    Case("offset-fullwidth", _one([*W, ("offset", "\uff14")]), EDE, "not an integer", "w.data"),
    Case("offset-plus", _one([*W, ("offset", "+0")]), EDE, "not an integer", "w.data"),
    Case("length-empty", _one([*W, ("length", "")]), EDE, "not an integer", "w.data"),
    Case("length-text", _one([*W, ("length", "abc")]), EDE, "not an integer", "w.data"),
    Case("length-2**64", _one([*W, ("length", str(2**64))]), EDE, "past the end", "w.data"),
    Case("offset-at-end", _one([*W, ("offset", "4000")]), EDE, "dtype x dims", "w.data"),
    Case("duplicate-offset", _one([*W, ("offset", "0"), ("offset", "0")]), EDE, "twice", "'W'"),
    Case("only-unknown-keys", _one([("checksum", "x")]), EDE, "no 'location'", "'W'"),
    # the tensor itself
    Case(
        "external-and-raw",
        _one(W, raw_data=b"\1" * 4000),
        EDE,
        "also carries raw_data",
        "w.data|m.onnx",  # the scanner names the .onnx holding the raw data
        ops=(*REF, "skip"),
    ),
    Case("external-and-float_data", _one(W, float_data=[1.0] * 1000), EDE, "float_data", "w.data"),
    Case("string-tensor", _one(W, data_type=onnx.TensorProto.STRING), EDE, "string", "w.data"),
    Case("huge-dims", _one(W, dims=(2**20, 2**20)), EDE, "dtype x dims", "w.data"),
    Case("nested-length", _nested([*W, ("length", "44")]), EDE, "dtype x dims", "w.data", "'deep'"),
    Case(
        "sparse-past-end",
        _sparse([*W, ("offset", "1"), ("length", "4000")]),
        EDE,
        "past the end",
        "w.data",
        "'sidx'",
    ),
    Case(
        "sparse-missing",
        _sparse([("location", "gone.data")]),
        FileNotFoundError,
        "does not exist",
        "gone.data",
        "'sidx'",
    ),
    # the location
    Case("drive-letter", _one([("location", "C:/w.data")]), EDE, "absolute", "C:/w.data"),
    Case("unc-path", _one([("location", "\\\\srv\\w.data")]), EDE, "absolute", "srv"),
    Case("inner-dotdot", _one([("location", "sub/../w.data")]), EDE, r"'\.\.'", "sub/../w.data"),
    Case("nul-byte", _one([("location", "w.data\0.txt")]), EDE, "NUL", "w.data"),
    Case(
        "symlink-out",
        _then(_one([("location", "link.data")]), _link_outside),
        EDE,
        "outside the model folder",
        "link.data",
    ),
    Case(
        "symlinked-parent",
        _then(_one([("location", "up/secret.data")]), lambda f: os.symlink("..", f / "up")),
        EDE,
        "outside the model folder",
        "up/secret.data",
    ),
    Case(
        "fifo",
        _then(_one([("location", "fifo.data")]), lambda f: os.mkfifo(f / "fifo.data")),
        EDE,
        "not a regular file",
        "fifo.data",
    ),
    Case(
        "device",
        _then(_one([("location", "dev.data")]), _device),
        EDE,
        "not a regular file",
        "dev.data",
    ),
    Case(
        "folder",
        _then(_one([("location", "sub")]), lambda f: (f / "sub").mkdir()),
        EDE,
        "not a regular file",
        "sub",
    ),
    Case(
        "hard-link",
        _then(_one([("location", "hard.data")]), _hard_link),
        EDE,
        "hard links",
        "hard.data",
    ),
    Case(
        "symlink-loop",
        _then(_one([("location", "loop")]), lambda f: os.symlink("loop", f / "loop")),
        OSError,
        "",
        "loop",
    ),
    Case("through-a-file", _one([("location", "w.data/x")]), NotADirectoryError, "", "w.data/x"),
    # the model file itself
    Case("missing-model", _file(), FileNotFoundError, "does not exist", "m.onnx", None, FILE),
    Case("empty-model", _file(b""), ValueError, "empty", "m.onnx", None, FILE),
    Case("folder-model", _file(make=os.mkdir), IsADirectoryError, "folder", "m.onnx", None, FILE),
    Case(
        "fifo-model", _file(make=os.mkfifo), ValueError, "not a regular file", "m.onnx", None, FILE
    ),
    Case("text-model", _file(b"hello, world\n"), ValueError, "not a valid", "m.onnx", None, FILE),
    Case(
        "png-model", _file(b"\x89PNG\r\n\x1a\n" + bytes(64)), ValueError, "", "m.onnx", None, FILE
    ),
    Case(
        "truncated-model",
        _file(_valid_model_bytes()[:5000]),
        ValueError,
        "not a valid",
        "m.onnx",
        None,
        FILE,
    ),
    Case(
        "corrupted-model",
        _file(b"\xff\xff" + _valid_model_bytes()[2:]),
        ValueError,
        "not a valid",
        "m.onnx",
        None,
        FILE,
    ),
    Case(
        "huge-length-claim",
        _file(encode_varint(7 << 3 | 2) + encode_varint(2**62) + bytes(100)),
        ValueError,
        "not a valid",
        "m.onnx",
        None,
        FILE,
    ),
    Case(
        "no-graph",
        _file(_field(100, b"x")),
        ValueError,
        "no graph",
        "m.onnx",
        None,
        ("load", "cli-info", "cli-verify"),
    ),
    Case(
        "nested-200-graphs",
        _file(_deep_graphs(200)),
        ValueError,
        "not a valid",
        "m.onnx",
        None,
        FILE,
    ),
    Case(
        "nested-20000-graphs",
        _file(_deep_graphs(20_000)),
        ValueError,
        "not a valid",
        "m.onnx",
        None,
        FILE,
    ),
    Case(
        "nested-100000-groups",
        _file(_deep_groups(100_000)),
        ValueError,
        "not a valid",
        "m.onnx",
        None,
        FILE,
    ),
]


def _cli(args: list[str], capsys) -> str:
    """Run the CLI: exit 1, one clean line on stderr. Returns all it printed."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 1, (code, err)
    assert len(lines) == 1 and lines[0].startswith("onnx-light"), err
    assert "Traceback" not in err
    return err + out


def _run(op: str, path: Path, out: Path, capsys) -> str:
    """Run one entry point on the bad model; it must fail. Returns the message."""
    folder = path.parent
    if op.startswith("cli-"):
        command = op[4:]
        args = [command, path] + ([out / "c.onnx"] if command == "align" else [])
        return _cli(args, capsys)
    with pytest.raises(Exception) as info:  # the type is checked by the caller
        if op == "load":
            onnxl.load(path)
        elif op == "skip":
            onnxl.load(path, load_external_data=False, skip_raw_data=True)
        elif op == "align":
            onnxl.align_external_data_streaming(path, out / "a.onnx", "a.data", 64, 1000)
        else:
            meta = onnxl.load(path, load_external_data=False)
            if op == "save":
                opts = onnxl.SerializeOptions(use_external_data_location=False, base_dir=folder)
                onnxl.save(meta, out / "o.onnx", "o.data", options=opts)
            else:
                onnxl.save_model_with_shared_external_data(meta, folder / "v.onnx")
    return info


HANG_LIMIT = 60  # seconds: hostile input gets an answer, never a hang (no speed claim)


class _Hung(BaseException):
    """Raised by the alarm: not an Exception, so no ``except Exception`` swallows it."""


@contextlib.contextmanager
def _no_hang(what: str):
    """Fail the test, saying it hung, when the block has not returned after HANG_LIMIT s."""

    def alarm(*_):
        raise _Hung

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_LIMIT)
    try:
        yield
    except _Hung:
        pytest.fail(f"{what} hung: no answer after {HANG_LIMIT} s", pytrace=False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(tmp_path, capsys, case):
    folder = tmp_path / "model"
    folder.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    path = case.build(folder)
    before = folder_digest(folder) if all(f.is_file() for f in folder.iterdir()) else None
    for op in case.ops:
        with _no_hang(op):
            result = _run(op, path, out, capsys)
        if isinstance(result, str):  # the CLI's output
            message = result
        else:
            assert result.type is case.exc or issubclass(result.type, case.exc), (
                op,
                result.value,
            )
            assert not isinstance(result.value, RecursionError | MemoryError)
            message = str(result.value)
        assert re.search(case.match, message), (op, message)
        if case.tensor is not None:
            assert case.tensor in message, f"{op}: the message does not name the tensor: {message}"
        assert any(f in message for f in case.file.split("|")), f"{op}: no file named: {message}"
        assert os.listdir(out) == [], f"{op} left files behind"
    if before is not None:
        assert folder_digest(folder) == before, "the source files changed"


# -- arguments: values and types ------------------------------------------------


@pytest.fixture
def two_file(tmp_path):
    """A small valid two-file model in tmp_path/src, and an empty tmp_path/out."""
    src = tmp_path / "src"
    src.mkdir()
    (tmp_path / "out").mkdir()
    w = numpy_helper.from_array(np.arange(3000, dtype=np.float32), "W")
    onnx.save(
        helper.make_model(helper.make_graph([], "g", [], [], [w])),
        str(src / "m.onnx"),
        save_as_external_data=True,
        location="m.data",
    )
    return src / "m.onnx", tmp_path / "out"


def _align(**kwargs):
    def run(path, out):
        args = {"alignment": 64, "chunk_size": 1000, **kwargs}
        args = as_options(args, keep=("alignment", "chunk_size"))
        onnxl.align_external_data_streaming(path, out / "a.onnx", "a.data", **args)

    return run


def _save(location="o.data", model=None, name="o.onnx", **options):
    def run(path, out):
        m = onnxl.load(path) if model is None else model
        opts = options.pop("options", None)
        if opts is None:
            opts = onnxl.SerializeOptions(**options)
        onnxl.save(m, out / name, location, options=opts)

    return run


ARGUMENTS = [
    ("load-threads-0", lambda p, o: onnxl.load(p, num_threads=0), ValueError, "num_threads"),
    ("load-threads-str", lambda p, o: onnxl.load(p, num_threads="4"), TypeError, "num_threads"),
    ("load-threads-float", lambda p, o: onnxl.load(p, num_threads=2.0), TypeError, "num_threads"),
    (
        "load-skip-and-external",
        lambda p, o: onnxl.load(p, skip_raw_data=True),
        ValueError,
        "skip_raw_data",
    ),
    ("options-alignment-3", _save(alignment=3), ValueError, "power of two"),
    ("options-alignment-str", _save(alignment="4096"), TypeError, "alignment"),
    ("options-alignment-2**31", _save(alignment=2**31), ValueError, "at most"),
    ("options-alignment-bool", _save(alignment=True), TypeError, "alignment"),
    ("options-threshold-neg", _save(size_threshold=-1), ValueError, "size_threshold"),
    ("options-threshold-float", _save(size_threshold=1.5), TypeError, "size_threshold"),
    ("options-threads-0", _save(num_threads=0), ValueError, "num_threads"),
    ("options-threads-bool", _save(num_threads=True), TypeError, "num_threads"),
    ("save-options-dict", _save(options={"alignment": 64}), TypeError, "SerializeOptions"),
    ("save-model-str", _save(model="m.onnx"), TypeError, "ModelProto"),
    ("save-location-outside", _save(location="/tmp/x.data"), ValueError, "inside"),
    ("save-location-self", _save(location="o.onnx"), ValueError, "model file itself"),
    ("save-location-empty", _save(location=""), ValueError, "not a file name"),
    ("save-location-dir", _save(location="sub/"), ValueError, "not a file name"),
    ("save-no-folder", _save(name="nope/o.onnx"), FileNotFoundError, "does not exist"),
    ("align-alignment-neg", _align(alignment=-4096), ValueError, "alignment"),
    ("align-alignment-6", _align(alignment=6), ValueError, "power of two"),
    ("align-alignment-2**40", _align(alignment=2**40), ValueError, "at most"),
    ("align-alignment-str", _align(alignment="4096"), TypeError, "alignment"),
    ("align-alignment-float", _align(alignment=64.0), TypeError, "alignment"),
    ("align-chunk-0", _align(chunk_size=0), ValueError, "chunk_size"),
    ("align-chunk-neg", _align(chunk_size=-1), ValueError, "chunk_size"),
    ("align-chunk-2**31", _align(chunk_size=2**31), ValueError, "chunk_size"),
    ("align-chunk-str", _align(chunk_size="4M"), TypeError, "chunk_size"),
    ("align-threshold-neg", _align(size_threshold=-1), ValueError, "size_threshold"),
    ("align-threshold-str", _align(size_threshold="1k"), TypeError, "size_threshold"),
    ("align-progress-int", _align(progress=5), TypeError, "progress"),
    (
        "align-weights-outside",
        lambda p, o: onnxl.align_external_data_streaming(p, o / "a.onnx", "/tmp/w.data"),
        ValueError,
        "inside",
    ),
    (
        "align-no-folder",
        lambda p, o: onnxl.align_external_data_streaming(p, o / "x" / "a.onnx", "a.data"),
        FileNotFoundError,
        "does not exist",
    ),
    (
        "align-dst-is-folder",
        lambda p, o: onnxl.align_external_data_streaming(p, o, "a.data"),
        IsADirectoryError,
        "folder",
    ),
    (
        "shared-options-str",
        lambda p, o: onnxl.save_model_with_shared_external_data(
            onnxl.load(p), o / "v.onnx", options="x"
        ),
        TypeError,
        "SerializeOptions",
    ),
    (
        "shared-model-none",
        lambda p, o: onnxl.save_model_with_shared_external_data(None, o / "v.onnx"),
        TypeError,
        "ModelProto",
    ),
]


@pytest.mark.parametrize("op,exc,match", [a[1:] for a in ARGUMENTS], ids=[a[0] for a in ARGUMENTS])
def test_bad_arguments(two_file, op, exc, match):
    path, out = two_file
    before = folder_digest(path.parent)
    with pytest.raises(exc, match=match):
        op(path, out)
    assert os.listdir(out) == [], "nothing written"
    assert folder_digest(path.parent) == before


CLI_USAGE = [
    (["align", "{src}", "{dst}", "--alignment", "3"], 2, "power of two"),
    (["align", "{src}", "{dst}", "--alignment", "x"], 2, "not a byte count"),
    (["align", "{src}", "{dst}", "--alignment", "2G"], 2, "power of two from 1 to 1 GiB"),
    (["align", "{src}", "{dst}", "--chunk-size", "0"], 2, "must be at least 1 byte"),
    (["align", "{src}", "{dst}", "--chunk-size", "2G"], 2, "must be at most 1 GiB"),
    (["align", "{src}", "{dst}", "--size-threshold", "-1"], 2, "must be at least 0 bytes"),
    (["align", "{src}", "{dst}", "--weights", "/tmp/w.data"], 1, "inside"),
    (["align", "{src}"], 2, "required"),
    (["align", "{src}", "{out}"], 1, "folder"),
    (["frobnicate", "{src}"], 2, "invalid choice"),
    (["info"], 2, "required"),
    (["verify", "{src}", "--bogus"], 2, "unrecognized"),
]


@pytest.mark.parametrize("argv,code,match", CLI_USAGE, ids=[" ".join(c[0]) for c in CLI_USAGE])
def test_cli_bad_arguments_one_line(two_file, capsys, argv, code, match):
    path, out = two_file
    names = {"src": path, "dst": out / "d.onnx", "out": out}
    assert main([a.format(**names) for a in argv]) == code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx-light"), err
    assert match in lines[0] and "Traceback" not in err
    assert os.listdir(out) == []


def test_cli_info_escapes_hostile_names(tmp_path, capsys):
    """Tensor names from a stranger's file must not drive the terminal."""
    t = numpy_helper.from_array(np.ones(4, np.float32), "evil\x1b]0;owned\x07\nfake row")
    t.external_data.add(key="location", value="x\x1b[2J.data")
    t.data_location = onnx.TensorProto.EXTERNAL
    t.ClearField("raw_data")
    path = tmp_path / "m.onnx"
    path.write_bytes(helper.make_model(helper.make_graph([], "g", [], [], [t])).SerializeToString())
    assert main(["info", str(path), "--tensors"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert not any(line.startswith("fake row") for line in out.splitlines())
    assert main(["verify", str(path)]) == 1
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err
