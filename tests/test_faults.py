"""Faults: a full disk, a file size limit, I/O errors, read-only and missing folders,
a process killed mid-copy, a source file truncated or replaced while being read.

Each must end in a clean ``OSError`` (or a library error): nothing appears under
the destination names, files already there are unchanged, and the sources stay
byte-identical (by sha256). A killed process may leave temporary files, always
named ``.<final name>.<8 hex digits>.onnx-light-tmp``. A failed preallocation is
an error, never ignored; a full disk's error names the destination.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading

import onnx
import pytest
from helpers import as_options, folder_digest, read_back, save_two_file, tensor_bytes, uint8_model
from helpers import assert_clean_failure as _one_line
from helpers import run_cli as _cli
from helpers import two_file_pair as _pair

import onnx_light.onnx as onnxl
from onnx_light.cli import main
from onnx_light.onnx._commit import atomic as _atomic
from onnx_light.onnx._errors import TruncatedFileError

TMP_NAME = re.compile(r"^\.(?P<final>.+)\.[0-9a-f]{8}" + re.escape(_atomic.TMP_SUFFIX) + "$")
MB = 1024 * 1024


def _align(src, dst, weights, **kw):
    kw = as_options(kw, keep=("alignment", "chunk_size"))  # the settings in options=
    return onnxl.align_external_data_streaming(src, dst, weights, **kw)


def _model(n: int = 4, size: int = MB // 2, seed: int = 0) -> onnx.ModelProto:
    """``n`` uint8 initializers of ``size`` random bytes (2 MiB by default)."""
    return uint8_model(n, size, seed)


@pytest.fixture
def src(tmp_path):
    """A 2 MiB two-file model in tmp_path/src: (model path, tensors, sha256 of the folder)."""
    folder = tmp_path / "src"
    folder.mkdir()
    model = _model()
    save_two_file(model, folder / "m.onnx", size_threshold=0)
    return folder / "m.onnx", tensor_bytes(model), folder_digest(folder)


def _old_pair(folder) -> dict:
    """A small older model already at the destination names d.onnx / d.data."""
    save_two_file(_model(2, 1000, seed=9), folder / "d.onnx", "d.data", size_threshold=0)
    return folder_digest(folder)


def _unchanged(dst_folder, dst_before, src_path, src_before) -> None:
    assert folder_digest(dst_folder) == dst_before, "the destination folder changed"
    assert folder_digest(src_path.parent) == src_before, "the sources changed"


def _mount(*args) -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _umount(path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs at tmp_path/full, holding an older d.onnx / d.data pair."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        yield mnt, _old_pair(mnt)
    finally:
        _umount(mnt)


@pytest.fixture
def readonly(tmp_path):
    """A read-only bind mount at tmp_path/ro, holding an older pair and a two-file model."""
    ro = tmp_path / "ro"
    ro.mkdir()
    _old_pair(ro)
    save_two_file(_model(2, 5000, seed=3), ro / "m.onnx", size_threshold=0)
    if not (_mount("--bind", str(ro), str(ro)) and _mount("-o", "remount,bind,ro", str(ro))):
        _umount(ro)
        pytest.skip("cannot make a read-only bind mount here (needs root)")
    try:
        with pytest.raises(OSError):
            (ro / "probe").write_bytes(b"x")  # root too: the mount is read-only
        yield ro, folder_digest(ro)
    finally:
        _umount(ro)


def _enosys(*args, **kwargs):
    raise OSError(errno.ENOSYS, "not here")


def _force_method(monkeypatch, method: str) -> None:
    """Make the copy engine use ``method`` (the other in-kernel ways report ENOSYS)."""
    for name in ("copy_file_range", "splice"):
        if name != method:
            monkeypatch.setattr(os, name, _enosys)


# -- a full disk -----------------------------------------------------------------


@pytest.mark.parametrize("method", ["copy_file_range", "splice", "pread"])
def test_disk_full_mid_copy(src, full_disk, monkeypatch, method):
    path, _, src_before = src
    dst, dst_before = full_disk
    _force_method(monkeypatch, method)
    with pytest.raises(OSError) as info:
        onnxl.align_external_data_streaming(path, dst / "d.onnx", "d.data", 4096, 64 * 1024)
    assert info.value.errno == errno.ENOSPC
    _unchanged(dst, dst_before, path, src_before)


@pytest.mark.parametrize("threads", [1, 4])
def test_disk_full_save(src, full_disk, threads):
    path, _, src_before = src
    dst, dst_before = full_disk
    model = onnxl.load(path)
    opts = onnxl.SerializeOptions(alignment=4096, num_threads=threads)
    with pytest.raises(OSError) as info:
        onnxl.save(model, dst / "d.onnx", "d.data", options=opts)
    assert info.value.errno == errno.ENOSPC
    with pytest.raises(OSError, match="No space"):
        onnxl.save(model, dst / "d.onnx")  # one file: the .onnx itself does not fit
    _unchanged(dst, dst_before, path, src_before)


def test_disk_full_shared(full_disk):
    dst, _ = full_disk
    first = dst / "d.onnx"
    variant = onnxl.load(first, load_external_data=False)
    variant.graph.initializer.extend(_model(3, 600 * 1024, seed=5).graph.initializer)
    before = folder_digest(dst)
    with pytest.raises(OSError) as info:
        onnxl.save_model_with_shared_external_data(variant, dst / "v.onnx")
    assert info.value.errno == errno.ENOSPC
    assert folder_digest(dst) == before


_FSIZE_SCRIPT = textwrap.dedent(
    """
    import json, resource, signal, sys
    import onnx_light.onnx as onnxl

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit returns EFBIG
    limit = 512 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    what, src, dst = sys.argv[1:]
    try:
        if what == "align":
            onnxl.align_external_data_streaming(src, dst, "d.data", 4096, 64 * 1024)
        else:
            opts = onnxl.SerializeOptions(alignment=4096, num_threads=2)
            onnxl.save(onnxl.load(src), dst, "d.data", options=opts)
    except OSError as e:
        print(json.dumps({"type": type(e).__name__, "errno": e.errno, "message": str(e)}))
    else:
        print(json.dumps({"type": None}))
    """
)


@pytest.mark.parametrize("what", ["align", "save"])
def test_file_too_large(src, tmp_path, what):
    """RLIMIT_FSIZE in a subprocess: the write past the limit fails with EFBIG."""
    path, _, src_before = src
    dst = tmp_path / "dst"
    dst.mkdir()
    dst_before = _old_pair(dst)
    out = subprocess.run(
        [sys.executable, "-c", _FSIZE_SCRIPT, what, str(path), str(dst / "d.onnx")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["errno"] == errno.EFBIG, result
    _unchanged(dst, dst_before, path, src_before)


# -- I/O errors ------------------------------------------------------------------


def _fail_after(real, calls: int, code: int = errno.EIO):
    """``real``, until it has been called ``calls`` times; then OSError(code)."""
    state = {"n": 0}
    lock = threading.Lock()

    def flaky(*args, **kwargs):
        with lock:
            state["n"] += 1
            n = state["n"]
        if n > calls:
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    return flaky


@pytest.mark.parametrize(
    "method,function",
    [("copy_file_range", "copy_file_range"), ("splice", "splice"), ("pread", "pwrite")],
)
def test_eio_mid_copy(src, tmp_path, monkeypatch, method, function):
    path, _, src_before = src
    dst = tmp_path / "dst"
    dst.mkdir()
    dst_before = _old_pair(dst)
    _force_method(monkeypatch, method)
    monkeypatch.setattr(os, function, _fail_after(getattr(os, function), 3))
    with pytest.raises(OSError) as info:
        onnxl.align_external_data_streaming(path, dst / "d.onnx", "d.data", 4096, 64 * 1024)
    assert info.value.errno == errno.EIO
    monkeypatch.undo()
    _unchanged(dst, dst_before, path, src_before)


def test_eio_in_a_writer_thread(src, tmp_path, monkeypatch):
    path, _, src_before = src
    dst = tmp_path / "dst"
    dst.mkdir()
    dst_before = _old_pair(dst)
    model = onnxl.load(path)
    monkeypatch.setattr(os, "pwrite", _fail_after(os.pwrite, 2))
    opts = onnxl.SerializeOptions(alignment=4096, num_threads=4)
    with pytest.raises(OSError) as info:
        onnxl.save(model, dst / "d.onnx", "d.data", options=opts)
    assert info.value.errno == errno.EIO
    monkeypatch.undo()
    _unchanged(dst, dst_before, path, src_before)


@pytest.mark.parametrize("threads", [1, 4])
def test_eio_reading(src, monkeypatch, threads):
    path, _, _ = src
    monkeypatch.setattr(os, "pread", _fail_after(os.pread, 1))
    with pytest.raises(OSError) as info:
        onnxl.load(path, num_threads=threads)
    assert info.value.errno == errno.EIO
    monkeypatch.setattr(os, "pread", _fail_after(os.pread, 0))
    with pytest.raises(OSError):  # the scanner reads the .onnx with pread too
        onnxl.load(path, load_external_data=False, skip_raw_data=True)


# -- read-only and missing destination folders -----------------------------------


def test_read_only_destination(src, readonly):
    path, _, src_before = src
    ro, ro_before = readonly
    ops = {
        "align": lambda: onnxl.align_external_data_streaming(path, ro / "d.onnx", "d.data"),
        "save": lambda: onnxl.save(onnxl.load(path), ro / "d.onnx", "d.data"),
        "save one file": lambda: onnxl.save(onnxl.load(path), ro / "d.onnx"),
        "shared": lambda: onnxl.save_model_with_shared_external_data(
            _model(1, 5000), ro / "v.onnx"
        ),
        "in place": lambda: onnxl.align_external_data_streaming(
            ro / "m.onnx", ro / "m.onnx", "m.onnx.data", 64
        ),
    }
    for name, op in ops.items():
        with pytest.raises(OSError) as info:
            op()
        assert info.value.errno == errno.EROFS, name
    _unchanged(ro, ro_before, path, src_before)
    assert read_back(ro / "m.onnx")  # the model there still loads


def test_missing_destination_folder(src, tmp_path):
    path, _, src_before = src
    missing = tmp_path / "nope"
    ops = [
        lambda: onnxl.align_external_data_streaming(path, missing / "d.onnx", "d.data"),
        lambda: onnxl.save(onnxl.load(path), missing / "d.onnx", "d.data"),
        lambda: onnxl.save(onnxl.load(path), missing / "d.onnx"),
        lambda: onnxl.save_model_with_shared_external_data(_model(1, 5000), missing / "v.onnx"),
    ]
    for op in ops:
        with pytest.raises(FileNotFoundError, match="nope.* does not exist: create it first"):
            op()
    assert not missing.exists()
    assert folder_digest(path.parent) == src_before


def test_missing_destination_folder_on_the_command_line(src, tmp_path, capsys):
    """The command says how to create the folder, and creates nothing."""
    path, _, src_before = src
    missing = tmp_path / "nope"
    code, _, err = _cli(capsys, "align", path, missing / "d.onnx", "-q")
    assert code == 1 and "Traceback" not in err
    assert f"destination folder '{missing}' does not exist: create it first" in err
    assert "mkdir -p" in err and not missing.exists()
    assert folder_digest(path.parent) == src_before


# -- killed mid-copy ---------------------------------------------------------------

_SLOW_ALIGN = textwrap.dedent(
    """
    import sys, time
    import onnx_light.onnx as onnxl

    def progress(done, total):
        print(done, total, flush=True)
        time.sleep(0.05)

    src, dst, weights = sys.argv[1:]
    onnxl.align_external_data_streaming(
        src, dst, weights, 4096, 64 * 1024, options=onnxl.WriteOptions(progress=progress),
        rewrite=True
    )
    print("finished", flush=True)
    """
)


def _kill_mid_copy(src_path, dst_path, weights: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_ALIGN, str(src_path), str(dst_path), weights],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(3):  # a few chunks are copied, many are left
            line = proc.stdout.readline()
            assert line and line != "finished\n", "the copy ended before it was killed"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def _leftovers(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(_atomic.TMP_SUFFIX))


def test_sigkill_mid_copy(src, tmp_path):
    path, tensors, src_before = src
    dst = tmp_path / "dst"
    dst.mkdir()
    dst_before = _old_pair(dst)
    _kill_mid_copy(path, dst / "d.onnx", "d.data")
    leftovers = _leftovers(dst)
    assert leftovers, "the temporary weights file is left behind"
    for name in leftovers:  # the weights being written, the .onnx reserved (empty)
        match = TMP_NAME.match(name)
        assert match and match["final"] in ("d.data", "d.onnx"), name
    assert {k: v for k, v in folder_digest(dst).items() if k not in leftovers} == dst_before
    assert folder_digest(path.parent) == src_before
    # the next run is not disturbed by them, and they are safe to delete
    onnxl.align_external_data_streaming(path, dst / "d.onnx", "d.data")
    assert read_back(dst / "d.onnx") == tensors
    for name in leftovers:
        os.remove(dst / name)
    assert read_back(dst / "d.onnx") == tensors


def test_sigkill_mid_copy_in_place(src):
    """Re-aligning in place, killed: the original pair is intact."""
    path, tensors, src_before = src
    _kill_mid_copy(path, path, "m.onnx.data")
    leftovers = _leftovers(path.parent)
    assert leftovers and all(TMP_NAME.match(n) for n in leftovers)
    assert {k: v for k, v in folder_digest(path.parent).items() if k not in leftovers} == src_before
    assert read_back(path) == tensors


# -- a source changing under the reader ------------------------------------------


@pytest.mark.parametrize("method", ["copy_file_range", "splice", "pread"])
def test_source_truncated_while_copying(src, tmp_path, monkeypatch, method):
    path, _, _ = src
    data = path.parent / "m.onnx.data"
    dst = tmp_path / "dst"
    dst.mkdir()
    dst_before = _old_pair(dst)
    _force_method(monkeypatch, method)

    def progress(done, total):
        if done and os.path.getsize(data) > MB:
            os.truncate(data, MB)  # cut in the middle of the third tensor

    with pytest.raises(TruncatedFileError) as info:
        onnxl.align_external_data_streaming(
            path,
            dst / "d.onnx",
            "d.data",
            4096,
            64 * 1024,
            options=onnxl.WriteOptions(progress=progress),
        )
    assert isinstance(info.value, OSError) and isinstance(info.value, EOFError)
    assert "'W2'" in str(info.value) and "m.onnx.data" in str(info.value)
    assert folder_digest(dst) == dst_before


def test_source_truncated_while_copying_cli(src, tmp_path, monkeypatch, capsys):
    path, _, _ = src
    data = path.parent / "m.onnx.data"
    real = os.copy_file_range

    def truncating(*args, **kwargs):
        if os.path.getsize(data) > MB:
            os.truncate(data, MB)
        return real(*args, **kwargs)

    _force_method(monkeypatch, "copy_file_range")
    monkeypatch.setattr(os, "copy_file_range", truncating)
    dst = tmp_path / "d.onnx"
    assert main(["align", str(path), str(dst), "--chunk-size", "64K"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "ended early" in err and "'W2'" in err
    assert not dst.exists() and not _leftovers(tmp_path)


def test_source_replaced_while_copying(src, tmp_path):
    """The source replaced by another file mid-copy: the copy reads the file it opened."""
    path, tensors, _ = src
    data = path.parent / "m.onnx.data"
    other = path.parent / "other"
    other.write_bytes(b"\xee" * os.path.getsize(data))
    dst = tmp_path / "dst"
    dst.mkdir()

    def progress(done, total):
        if other.exists():
            os.replace(other, data)

    onnxl.align_external_data_streaming(
        path,
        dst / "d.onnx",
        "d.data",
        4096,
        64 * 1024,
        options=onnxl.WriteOptions(progress=progress),
    )
    assert read_back(dst / "d.onnx") == tensors


def _truncate_on_first_pread(monkeypatch, victim, size: int) -> None:
    real = os.pread
    state = {"done": False}

    def pread(fd, n, offset):
        if not state["done"]:
            state["done"] = True
            os.truncate(victim, size)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", pread)


@pytest.mark.parametrize("threads", [1, 4])
def test_data_file_truncated_while_loading(src, monkeypatch, threads):
    path, _, _ = src
    _truncate_on_first_pread(monkeypatch, path.parent / "m.onnx.data", MB + 10)
    with pytest.raises(TruncatedFileError, match="'W2'.*m.onnx.data.*ended early"):
        onnxl.load(path, num_threads=threads)


def test_model_file_truncated_while_scanning(tmp_path, monkeypatch):
    path = tmp_path / "one.onnx"
    onnx.save(_model(), str(path))
    _truncate_on_first_pread(monkeypatch, path, 100)
    with pytest.raises((TruncatedFileError, ValueError), match="one.onnx"):
        onnxl.load(path, load_external_data=False, skip_raw_data=True)


def test_fallocate_errors_are_not_ignored(pair, tmp_path, monkeypatch):
    from onnx_light.onnx._system import files as _files

    path, _, _ = pair

    def failing(fd, mode, offset, length):
        import ctypes

        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(_files, "libc_function", lambda name, *a: failing)
    monkeypatch.setattr("onnx_light.onnx._write.writer.PREALLOCATE_BYTES", 1)
    with pytest.raises(OSError) as info:
        _align(path, tmp_path / "a.onnx", "a.data")
    assert info.value.errno == errno.EIO
    assert not (tmp_path / "a.onnx").exists()


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
