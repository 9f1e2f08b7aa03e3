"""Nothing lost, in any order of events (issue 9): data loss, safety holes, crashes.

Each test names the item of the issue it covers. The four shared mechanisms
under test: which files a call may replace (``_targets``), when sources are
opened (``_sources``), how a commit is made (``_atomic``) and what the
scanner keeps (``_wire``).
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from conftest import (
    folder_digest,
    peak_growth_in_subprocess,
    read_back,
    save_two_file,
    tensor_bytes,
    uint8_model,
)
from google.protobuf.unknown_fields import UnknownFieldSet
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.cli import main
from onnx_light.onnx import _atomic, _sources, _targets
from onnx_light.onnx._wire import encode_varint

MB = 1024 * 1024


def _model(n: int = 3, size: int = 5000, seed: int = 0, prefix: str = "W") -> onnx.ModelProto:
    return uint8_model(n, size, seed, prefix)


@pytest.fixture
def pair(tmp_path):
    """A two-file model m.onnx + m.onnx.data in tmp_path/src: (path, tensors, digest)."""
    return _pair(tmp_path)


def _pair(tmp_path, n: int = 3, size: int = 5000):
    folder = tmp_path / "src"
    folder.mkdir()
    model = _model(n, size)
    save_two_file(model, folder / "m.onnx", size_threshold=0)
    return folder / "m.onnx", tensor_bytes(model), folder_digest(folder)


def _align(src, dst, weights, **kw):
    return onnxl.align_external_data_streaming(src, dst, weights, **kw)


# -- 1. a destination that is a source file ------------------------------------------


@pytest.mark.parametrize(
    ("dst", "weights"),
    [
        ("a.onnx", "m.onnx.data"),  # the weights over the data the source reads
        ("a.onnx", "m.onnx"),  # the weights over the source .onnx
        ("m.onnx.data", "a.data"),  # the new .onnx over the source's data
        ("a.onnx", "link.data"),  # a symlink to the source's data
    ],
)
def test_align_never_replaces_a_source(pair, dst, weights):
    path, tensors, _ = pair
    folder = path.parent
    os.symlink("m.onnx.data", folder / "link.data")
    before = folder_digest(folder)
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite.*in place"):
        _align(path, folder / dst, weights)
    assert folder_digest(folder) == before
    assert read_back(path) == tensors


def test_align_in_place_stays_correct(pair):
    path, tensors, _ = pair
    _align(path, path, "m.onnx.data", alignment=65536)
    assert read_back(path) == tensors
    assert tensor_bytes(onnxl.load(path)) == tensors
    # through another spelling of the same entry too
    _align(path, path.parent / ".." / "src" / "m.onnx", "m.onnx.data", alignment=64)
    assert read_back(path) == tensors


def test_save_and_shared_never_replace_a_source(pair):
    path, tensors, _ = pair
    folder = path.parent
    before = folder_digest(folder)
    meta = onnxl.load(path, load_external_data=False)
    stream = onnxl.SerializeOptions(use_external_data_location=False)
    for options in (None, stream):
        for dst, location in [("a.onnx", "m.onnx.data"), ("m.onnx.data", "x.data")]:
            with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
                onnxl.save(meta, folder / dst, location, options=options)
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        onnxl.save(meta, folder / "m.onnx.data")  # single file, over the data it reads
    meta.graph.initializer.extend(_model(1, 3000, seed=4, prefix="new").graph.initializer)
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        onnxl.save_model_with_shared_external_data(meta, folder / "m.onnx.data")
    assert folder_digest(folder) == before
    assert read_back(path) == tensors


def test_cli_never_replaces_a_source(pair, capsys):
    path, tensors, before = pair
    code = main(["align", str(path), str(path.parent / "a.onnx"), "--weights", "m.onnx.data"])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1 and "would overwrite" in err
    assert folder_digest(path.parent) == before


# -- 2. a source replaced during the call ---------------------------------------------


def test_source_swapped_after_its_check_is_not_read(pair, tmp_path, monkeypatch):
    """The data file renamed over between the checks and the copy: the checked bytes are copied."""
    path, tensors, _ = pair
    data = path.parent / "m.onnx.data"
    real = _targets.check_targets

    def swap_then_check(*args, **kwargs):
        other = path.parent / "other"
        other.write_bytes(b"\xee" * os.path.getsize(data))
        os.replace(other, data)
        return real(*args, **kwargs)

    monkeypatch.setattr("onnx_light.onnx._align.check_targets", swap_then_check)
    out = tmp_path / "out"
    out.mkdir()
    _align(path, out / "a.onnx", "a.data")
    assert read_back(out / "a.onnx") == tensors


def _per_tensor_over_budget(tmp_path, monkeypatch):
    """12 data files, and a budget of 4 descriptors: files are closed and reopened."""
    folder = tmp_path / "src"
    folder.mkdir()
    model = _model(12, 2000)
    save_two_file(model, folder / "m.onnx", per_tensor=True, size_threshold=0)
    monkeypatch.setattr(_sources, "descriptor_budget", lambda: 4)
    return folder, model


def test_reopened_file_must_be_the_same(tmp_path, monkeypatch):
    """Over the descriptor budget, a file is reopened; replaced meanwhile, the call fails."""
    folder, model = _per_tensor_over_budget(tmp_path, monkeypatch)
    out = tmp_path / "out"
    out.mkdir()
    _align(folder / "m.onnx", out / "a.onnx", "a.data")  # reopened, unchanged: fine
    assert read_back(out / "a.onnx") == tensor_bytes(model)
    real = _targets.check_targets

    def modify_then_check(*args, **kwargs):
        victim = folder / "W0"
        victim.write_bytes(b"\xee" * os.path.getsize(victim))
        os.utime(victim, ns=(1, 1))
        return real(*args, **kwargs)

    monkeypatch.setattr("onnx_light.onnx._align.check_targets", modify_then_check)
    with pytest.raises(onnxl.ExternalDataError, match="'W0'.*changed since it was checked"):
        _align(folder / "m.onnx", out / "b.onnx", "b.data")
    assert not (out / "b.onnx").exists()


_RACE = textwrap.dedent(
    """
    import sys
    import onnx_light.onnx as onnxl

    src, dst, weights, rounds = sys.argv[1:]
    for i in range(int(rounds)):
        out, data = dst.replace("#", str(i)), weights.replace("#", str(i))
        onnxl.align_external_data_streaming(src, out, data, [64, 4096, 1, 65536][i % 4])
    """
)


def test_concurrent_in_place_aligns_and_readers(tmp_path):
    """Two processes re-align one model in place while a third copies it out, again and again:
    every copy holds the model's bytes (before the fix, a copy could pair the old .onnx
    with the new weights)."""
    path, tensors, _ = _pair(tmp_path, 1000, 1024)
    out = tmp_path / "out"
    out.mkdir()

    def start(dst, weights, rounds):
        cmd = [sys.executable, "-c", _RACE, str(path), str(dst), weights, str(rounds)]
        return subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)

    writers = [start(path, "m.onnx.data", 20) for _ in range(2)]
    reader = start(out / "a#.onnx", "a#.data", 20)
    for proc in [reader, *writers]:
        assert proc.wait(240) == 0, proc.stderr.read()
    assert read_back(path) == tensors
    wrong = [i for i in range(20) if read_back(out / f"a{i}.onnx") != tensors]
    assert not wrong, f"{len(wrong)} of 20 copies hold wrong bytes"


# -- 3. a failed commit ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["exchange", "link", "rename"])
def test_failed_commit_keeps_the_old_pair(pair, monkeypatch, how):
    path, tensors, before = pair
    if how != "exchange":
        monkeypatch.setattr(_atomic, "_exchange", lambda a, b: False)
    if how == "rename":

        def no_link(*args, **kwargs):
            raise OSError(errno.EPERM, "no hard links here")

        monkeypatch.setattr(os, "link", no_link)
    real_exchange, real_replace = _atomic._exchange, os.replace

    def refuse_onnx(real):
        def call(a, b, *args, **kwargs):
            if str(b) == str(path):
                raise OSError(errno.EPERM, "Operation not permitted (immutable)", str(b))
            return real(a, b, *args, **kwargs)

        return call

    monkeypatch.setattr(_atomic, "_exchange", refuse_onnx(real_exchange))
    monkeypatch.setattr(os, "replace", refuse_onnx(real_replace))
    with pytest.raises(OSError, match="immutable"):
        _align(path, path, "m.onnx.data", alignment=65536)
    assert folder_digest(path.parent) == before
    assert read_back(path) == tensors


def test_immutable_onnx(pair):
    """A real immutable .onnx (chattr +i): the commit fails, the old pair is untouched."""
    path, tensors, before = pair
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here (needs root and ext4/xfs/btrfs)")
    try:
        with pytest.raises(OSError):
            _align(path, path, "m.onnx.data", alignment=65536)
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    assert folder_digest(path.parent) == before
    assert read_back(path) == tensors


# -- 4. a destination that is not a regular file --------------------------------------


def _special(folder, kind: str):
    node = folder / f"{kind}.node"
    if kind == "fifo":
        os.mkfifo(node)
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod of a device needs root")
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a copy of /dev/null
    return node


@pytest.mark.parametrize("kind", ["fifo", "device"])
@pytest.mark.parametrize("role", ["onnx", "weights"])
def test_special_destination_is_refused(pair, tmp_path, kind, role):
    path, _, _ = pair
    out = tmp_path / "out"
    out.mkdir()
    node = _special(out, kind)
    dst, weights = (node, "w.data") if role == "onnx" else (out / "a.onnx", node.name)
    with pytest.raises(ValueError, match="not a regular file"):
        _align(path, dst, weights)
    with pytest.raises(ValueError, match="not a regular file"):
        onnxl.save(onnxl.load(path), dst, None if role == "onnx" else weights)
    assert not stat.S_ISREG(os.lstat(node).st_mode)
    assert sorted(os.listdir(out)) == [node.name]


# -- 5. unknown fields ---------------------------------------------------------------


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


# -- 6. permissions --------------------------------------------------------------------


def test_replaced_files_keep_their_mode(pair, tmp_path):
    path, tensors, _ = pair
    data = path.parent / "m.onnx.data"
    os.chmod(path, 0o600)
    os.chmod(data, 0o640)
    _align(path, path, "m.onnx.data")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o640
    onnxl.save(onnxl.load(path), path)  # one file now, over the 0600 model
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_back(path) == tensors


def test_new_files_follow_the_umask(pair, tmp_path):
    path, _, _ = pair
    old = os.umask(0o027)
    try:
        _align(path, tmp_path / "a.onnx", "a.data")
    finally:
        os.umask(old)
    for name in ("a.onnx", "a.data"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o640


# -- 7. weights outside the destination folder through a symlinked subfolder ----------


def test_symlinked_subfolder_is_refused(pair, tmp_path, monkeypatch):
    path, _, _ = pair
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink("../elsewhere", out / "sub")
    with pytest.raises(ValueError, match="outside the model's folder"):
        _align(path, out / "a.onnx", "sub/w.data")
    with pytest.raises(ValueError, match="outside the model's folder"):
        onnxl.save(onnxl.load(path), out / "a.onnx", "sub/w.data")
    assert os.listdir(elsewhere) == [] and sorted(os.listdir(out)) == ["sub"]


def test_weights_names_load_would_refuse_are_not_written(pair, tmp_path):
    path, _, _ = pair
    for name in ("C:w.data",):
        with pytest.raises(ValueError, match="absolute"):
            _align(path, tmp_path / "a.onnx", name)
    assert not (tmp_path / "a.onnx").exists()


# -- 8. the hard-link rule on the descriptor ------------------------------------------


@pytest.mark.parametrize("link", [os.link, os.symlink], ids=["hard link", "symlink"])
def test_link_swapped_in_before_open(pair, tmp_path, monkeypatch, link):
    """A hard link or a symlink to a foreign file swapped in between the check and the open."""
    path, _, _ = pair
    secret = tmp_path / "secret"
    secret.write_bytes(b"\x42" * os.path.getsize(path.parent / "m.onnx.data"))
    real_open = os.open

    def swap_then_open(p, flags, *args, **kwargs):
        if str(p).endswith("m.onnx.data") and not os.path.islink(p) and os.stat(p).st_nlink == 1:
            os.unlink(p)
            link(secret, p)
        return real_open(p, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(onnxl.ExternalDataError, match="'W0'.*(hard link|replaced)"):
        onnxl.load(path)


def test_hard_link_on_descriptor(pair, tmp_path, monkeypatch):
    """Same inode as stat saw, but a link count of 2 on the descriptor: refused."""
    path, _, _ = pair
    data = path.parent / "m.onnx.data"
    real_open = os.open

    def link_then_open(p, flags, *args, **kwargs):
        if str(p).endswith("m.onnx.data") and not (tmp_path / "second").exists():
            os.link(data, tmp_path / "second")
        return real_open(p, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", link_then_open)
    with pytest.raises(onnxl.ExternalDataError, match="2 hard links"):
        onnxl.load(path)


# -- 9. denial of service ---------------------------------------------------------------


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


@pytest.fixture
def sparse_folder(tmp_path):
    """A folder whose filesystem holds a 2**62-byte sparse file (a small tmpfs)."""
    folder = tmp_path / "tmpfs"
    folder.mkdir()
    mounted = os.geteuid() == 0 and (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True
        ).returncode
        == 0
    )
    try:
        with open(folder / "probe", "wb") as f:
            f.truncate(2**62)
        os.unlink(folder / "probe")
    except OSError:
        pytest.skip("no filesystem here holds a 2**62-byte sparse file")
    try:
        yield folder
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


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


def test_fallocate_errors_are_not_ignored(pair, tmp_path, monkeypatch):
    from onnx_light.onnx import _files

    path, _, _ = pair

    def failing(fd, mode, offset, length):
        import ctypes

        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(_files, "libc_function", lambda name, *a: failing)
    monkeypatch.setattr("onnx_light.onnx._writer.PREALLOCATE_BYTES", 1)
    with pytest.raises(OSError) as info:
        _align(path, tmp_path / "a.onnx", "a.data")
    assert info.value.errno == errno.EIO
    assert not (tmp_path / "a.onnx").exists()


_SCAN_MEMORY = textwrap.dedent(
    """
    import os, sys
    import onnx
    from onnx_light.bench import PeakMemory
    import onnx_light.onnx as onnxl
    from onnx_light.onnx._wire import scan_file

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


# -- 10. no traceback from the CLI, whatever the file holds -------------------------------


def _raw_model(folder, tensor_bytes_: bytes, name: str = "m.onnx"):
    """Write a model whose single initializer is given as serialized bytes."""
    graph = helper.make_graph([], "g", [], [])
    model = helper.make_model(graph)
    data = model.SerializeToString()
    init = encode_varint(5 << 3 | 2) + encode_varint(len(tensor_bytes_)) + tensor_bytes_
    graph_bytes = graph.SerializeToString() + init
    model_bytes = data.replace(
        encode_varint(7 << 3 | 2)
        + encode_varint(len(graph.SerializeToString()))
        + graph.SerializeToString(),
        encode_varint(7 << 3 | 2) + encode_varint(len(graph_bytes)) + graph_bytes,
    )
    path = folder / name
    path.write_bytes(model_bytes)
    return path


def _ext_tensor(name: str, location: str, offset: str, length: int) -> onnx.TensorProto:
    t = onnx.TensorProto(name=name, data_type=onnx.TensorProto.UINT8, dims=[length])
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", str(length))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


def _cli(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(code: int, err: str) -> None:
    assert code in (1, 2), code
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_info_with_negative_and_positive_offsets(tmp_path, capsys):
    (tmp_path / "w.data").write_bytes(bytes(100))
    model = helper.make_model(
        helper.make_graph(
            [],
            "g",
            [],
            [],
            [_ext_tensor("A", "w.data", "-4", 4), _ext_tensor("B", "w.data", "8", 4)],
        )
    )
    onnx.save(model, str(tmp_path / "m.onnx"))
    for json_flag in ([], ["--json"]):
        code, out, err = _cli(capsys, "info", tmp_path / "m.onnx", *json_flag)
        assert code == 0, err
        assert "-4" in out
    code, out, err = _cli(capsys, "verify", tmp_path / "m.onnx")
    assert code == 1 and "'A'" in out and "< 0" in out


def _bad_utf8_name_model(folder):
    t = numpy_helper.from_array(np.arange(4, dtype=np.uint8), "zz")
    data = t.SerializeToString().replace(b"zz", b"\xff\xfe")
    return _raw_model(folder, data)


@pytest.mark.parametrize("args", [["info"], ["info", "--json"], ["verify"]])
def test_cli_on_a_tensor_name_that_is_not_utf8(tmp_path, capsys, args):
    path = _bad_utf8_name_model(tmp_path)
    code, out, err = _cli(capsys, *args, path)
    assert code == 0, err
    assert "Traceback" not in err


def test_cli_never_prints_a_traceback(tmp_path, capsys, monkeypatch):
    """A bug anywhere (here: a TypeError) is still one line and exit code 1."""

    def broken(*args, **kwargs):
        raise TypeError("'<' not supported")

    monkeypatch.setattr("onnx_light.cli.model_info", broken)
    onnx.save(_model(), str(tmp_path / "m.onnx"))
    code, _, err = _cli(capsys, "info", tmp_path / "m.onnx")
    _one_line(code, err)
    assert "TypeError" in err


# -- 11. external_data that is not UTF-8 -------------------------------------------------


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


# -- 12. offsets of thousands of digits -----------------------------------------------------


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


# -- 13. the caller's own model is not a hostile reference --------------------------------------


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


# -- 14. more data files than file descriptors ----------------------------------------------------

_FEW_FDS = textwrap.dedent(
    """
    import resource, sys
    import onnx
    import onnx_light.onnx as onnxl

    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    src, out = sys.argv[1:]
    onnx.load(src)  # onnx reads it under this limit: so must onnx-light
    model = onnxl.load(src)
    onnxl.align_external_data_streaming(src, out + "/a.onnx", "a.data")
    meta = onnxl.load(src, load_external_data=False)
    opts = onnxl.SerializeOptions(use_external_data_location=False, base_dir=src.rsplit("/", 1)[0])
    onnxl.save(meta, out + "/b.onnx", "b.data", options=opts)
    onnxl.save(model, out + "/c.onnx", "c.data")
    print("ok")
    """
)


def test_more_data_files_than_descriptors(tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    model = _model(150, 100)
    save_two_file(model, folder / "m.onnx", per_tensor=True, size_threshold=0)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", _FEW_FDS, str(folder / "m.onnx"), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.strip() == "ok", proc.stderr
    for name in ("a.onnx", "b.onnx", "c.onnx"):
        assert read_back(out / name) == tensor_bytes(model)


# -- 15. long legal names -------------------------------------------------------------------------


def test_long_destination_names(pair, tmp_path):
    path, tensors, _ = pair
    name = "n" * 240 + ".onnx"  # 245 bytes, NAME_MAX is 255
    _align(path, tmp_path / name, "w" * 250 + ".data")
    assert read_back(tmp_path / name) == tensors
    onnxl.save(onnxl.load(path), tmp_path / name, "x" * 254)
    assert read_back(tmp_path / name) == tensors
    assert not [n for n in os.listdir(tmp_path) if n.endswith(_atomic.TMP_SUFFIX)]


# -- 16. file names that are not UTF-8 ----------------------------------------------------------


def test_file_names_not_utf8(tmp_path, capsys):
    folder = os.fsencode(tmp_path)
    src = os.path.join(folder, b"mod\xe9l.onnx")  # latin-1
    model = _model(3, 5000)
    data = onnx.ModelProto()
    data.CopyFrom(model)
    with open(src, "wb") as f:
        f.write(data.SerializeToString())
    out = os.path.join(folder, b"out\xe9")
    os.mkdir(out)
    dst = os.path.join(out, b"a\xe9.onnx")
    _align(src, dst, "a.data", size_threshold=1024)
    assert read_back(os.fsdecode(dst)) == tensor_bytes(model)
    assert tensor_bytes(onnxl.load(src)) == tensor_bytes(model)
    with pytest.raises(ValueError, match="mod\\\\xe9l.onnx.*not valid UTF-8"):
        onnxl.load(src, load_external_data=False, skip_raw_data=True)
    with pytest.raises(ValueError, match="not valid UTF-8"):
        _align(src, dst, b"w\xe9.data")  # a location must be recorded as UTF-8
    for args in (["info", src], ["info", "--json", src], ["verify", src]):
        code, _, err = _cli(capsys, *[os.fsdecode(a) for a in args])
        assert code == 0, err
    code, _, err = _cli(capsys, "align", os.fsdecode(src), os.fsdecode(dst), "--weights", "a.data")
    assert code == 0, err
    # the default weights name (a\xe9.onnx.data) cannot be recorded: one clear line
    code, _, err = _cli(capsys, "align", os.fsdecode(src), os.fsdecode(dst))
    _one_line(code, err)
    assert r"a\xe9.onnx.data" in err and "UTF-8" in err


# -- 17. a full disk names the destination -----------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True
        ).returncode
    ):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_disk_names_the_destination(tmp_path, small_disk, capsys):
    path, _, _ = _pair(tmp_path, 4, MB // 2)
    with pytest.raises(OSError, match="No space left on device while writing.*d.data"):
        _align(path, small_disk / "d.onnx", "d.data")
    with pytest.raises(OSError, match="No space left on device while writing.*e.onnx"):
        onnxl.save(onnxl.load(path), small_disk / "e.onnx")
    code, _, err = _cli(capsys, "align", path, small_disk / "d.onnx", "--weights", "d.data")
    _one_line(code, err)
    assert "d.data" in err and "No space" in err
    assert os.listdir(small_disk) == []


# -- 18. one model, one reading --------------------------------------------------------------------


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


# -- what must keep holding ---------------------------------------------------------------------


def test_session_opened_before_an_in_place_align_keeps_working(tmp_path, runnable):
    from conftest import run_ort

    ort = pytest.importorskip("onnxruntime")
    path = tmp_path / "m.onnx"
    save_two_file(runnable, path, size_threshold=0)
    before = run_ort(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    feeds = {"X": rng.standard_normal((2, 256)).astype(np.float32), "cond": np.array(True)}
    first = session.run(None, feeds)
    _align(path, path, "m.onnx.data", alignment=65536)
    again = session.run(None, feeds)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(before, run_ort(path), strict=True))


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


# -- found by a second attack on the mechanisms ------------------------------------------------


def test_weights_equal_to_the_model_through_a_symlinked_folder(pair, tmp_path):
    """``same -> .``: ``same/a.onnx`` is ``a.onnx``. Refused, never a hang or a lost file."""
    path, tensors, before = pair
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(".", out / "same")
    with pytest.raises(ValueError, match="cannot be the model file itself"):
        _align(path, out / "a.onnx", "same/a.onnx")
    with pytest.raises(ValueError, match="cannot be the model file itself"):
        onnxl.save(onnxl.load(path), out / "a.onnx", "same/a.onnx")
    os.symlink(".", path.parent / "same")
    with pytest.raises(ValueError, match="cannot be the model file itself"):
        _align(path, path, "same/m.onnx")
    assert sorted(os.listdir(out)) == ["same"]
    assert read_back(path) == tensors


def test_commit_through_two_spellings_of_one_folder(pair, tmp_path):
    """Weights in ``same/`` (a link to the model's folder): one lock, no deadlock."""
    path, tensors, _ = pair
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(".", out / "same")
    _align(path, out / "a.onnx", "same/w.data")  # two names of one folder: one lock
    assert read_back(out / "a.onnx") == tensors
    # a folder that is itself reached through a link is fine as a destination
    link = tmp_path / "link"
    os.symlink(out, link)
    _align(path, link / "a.onnx", "a.data")
    assert read_back(out / "a.onnx") == tensors


@pytest.mark.parametrize("how", ["symlink", "hardlink"])
def test_in_place_through_another_name_is_not_in_place(pair, how):
    """``current.onnx -> m.onnx`` re-aligned "in place" must not break m.onnx."""
    path, tensors, _ = pair
    other = path.parent / "current.onnx"
    if how == "symlink":
        os.symlink("m.onnx", other)
    else:
        os.link(path, other)
    before = folder_digest(path.parent) if how == "hardlink" else None
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        _align(other, other, "m.onnx.data", alignment=4096)
    assert read_back(path) == tensors
    if before is not None:
        assert folder_digest(path.parent) == before
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        _align(other, other, "current.data")  # the .onnx entry reads m.onnx: refused too
    if how == "hardlink":  # m.onnx itself has two names: not in place either
        with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
            _align(path, path, "m.onnx.data")
    os.unlink(other)
    _align(path, path, "m.onnx.data", alignment=4096)  # one name: in place
    assert read_back(path) == tensors


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


def test_names_not_utf8_are_saved(tmp_path):
    t = numpy_helper.from_array(np.arange(600, dtype=np.float32), "zz")
    graph = helper.make_graph([], "gg", [], [], [t])
    data = helper.make_model(graph).SerializeToString()
    model = onnx.ModelProto()
    model.ParseFromString(data.replace(b"zz", b"\xff\xfe").replace(b"gg", b"\xfe\xff"))
    onnxl.save(model, tmp_path / "o.onnx", "o.data")
    back = onnxl.load(tmp_path / "o.onnx")
    assert back.graph.name == b"\xfe\xff" and back.graph.initializer[0].name == b"\xff\xfe"
    assert back.graph.initializer[0].raw_data == t.raw_data


def test_file_edited_with_its_mtime_set_back_is_noticed(tmp_path, monkeypatch):
    folder, _ = _per_tensor_over_budget(tmp_path, monkeypatch)
    real = _targets.check_targets

    def edit_then_check(*args, **kwargs):
        victim = folder / "W0"
        st = os.stat(victim)
        with open(victim, "r+b") as f:
            f.write(b"\xee" * 16)
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back
        return real(*args, **kwargs)

    monkeypatch.setattr("onnx_light.onnx._align.check_targets", edit_then_check)
    with pytest.raises(onnxl.ExternalDataError, match="'W0'.*changed since it was checked"):
        _align(folder / "m.onnx", tmp_path / "b.onnx", "b.data")


def test_destination_with_a_trailing_slash(pair, tmp_path):
    path, _, _ = pair
    with pytest.raises(IsADirectoryError, match="not a file name"):
        _align(path, str(tmp_path / "a.onnx") + "/", "a.data")
    assert not (tmp_path / "a.onnx").exists()
