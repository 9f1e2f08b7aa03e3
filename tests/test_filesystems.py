"""The same re-align on ext4, tmpfs, XFS and btrfs: right bytes, and shared blocks kept shared.

XFS and btrfs are loop-mounted images (root and mkfs.xfs / mkfs.btrfs needed;
skipped with the reason otherwise). Sources come in the two shapes users have:
weights already on 4096-byte boundaries, and shifted by a small table first
(what exporters write, and when people re-align).
"""

import ctypes
import hashlib
import os
import pathlib
import platform
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
from benchmarks.harness.filesystems import loop_mount, unavailable
from onnx_light.onnx._write import copy as _copy
from onnx_light.onnx._write.fs import copy_policy

MiB = 1024 * 1024
FILESYSTEMS = ["tmp", "tmpfs", "xfs", "btrfs"]


def _policy(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        return copy_policy(fd)
    finally:
        os.close(fd)


@pytest.fixture(scope="module", params=FILESYSTEMS)
def folder(request, tmp_path_factory):
    """A folder on each filesystem (``tmp``: pytest's own, ext4 on our machines)."""
    kind = request.param
    if kind == "tmp":
        yield tmp_path_factory.mktemp("fs")
    elif kind == "tmpfs":
        if not os.path.isdir("/dev/shm") or _policy("/dev/shm").filesystem != "tmpfs":
            pytest.skip("no tmpfs at /dev/shm")
        with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
            yield pathlib.Path(d)
    else:
        reason = unavailable(kind)
        if reason:
            pytest.skip(reason)
        with loop_mount(kind, 512 * MiB, tmp_path_factory.mktemp(kind)) as mnt:
            yield pathlib.Path(mnt)


def _model(weights: int, shifted: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(np.arange(1000, dtype=np.int64), "table")] if shifted else []
    inits += [
        numpy_helper.from_array(rng.standard_normal((512, 512), dtype=np.float32), f"W{i}")
        for i in range(weights)
    ]
    nodes = [helper.make_node("Identity", [t.name], [t.name + "_y"]) for t in inits]
    outs = [helper.make_tensor_value_info(t.name + "_y", t.data_type, list(t.dims)) for t in inits]
    return helper.make_model(helper.make_graph(nodes, "g", [], outs, inits))


def _source(folder, name: str, weights: int, shifted: bool):
    """A two-file model as onnx.save writes it (shifted) or already aligned to 4096.

    Returns:
        ``(path, {tensor name: its bytes})``.
    """
    model = _model(weights, shifted)
    expected = {t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer}
    src = folder / f"{name}.onnx"
    if shifted:
        onnx.save(model, src, save_as_external_data=True, location=f"{name}.data")
    else:
        opts = onnxl.SerializeOptions()
        opts.alignment = 4096
        onnxl.save(model, src, f"{name}.data", options=opts)
    return src, expected


def _digest(*paths) -> list[str]:
    return [hashlib.sha256(open(p, "rb").read()).hexdigest() for p in paths]


def _weights(path) -> dict[str, bytes]:
    model = onnx.load(path)
    return {t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer}


@pytest.mark.parametrize("shifted", [True, False], ids=["shifted", "aligned"])
def test_align_on_each_filesystem(folder, shifted):
    name = "s" if shifted else "a"
    src, expected = _source(folder, name, 8, shifted)
    data = src.with_suffix(".data")
    before = _digest(src, data)
    dst = folder / f"{name}-out.onnx"
    onnxl.align_external_data_streaming(src, dst, f"{name}-out.data", 4096)
    assert _digest(src, data) == before
    assert _weights(dst) == expected
    meta = onnx.load(dst, load_external_data=False)
    offsets = [
        int(e.value) for t in meta.graph.initializer for e in t.external_data if e.key == "offset"
    ]
    assert offsets and all(o % 4096 == 0 for o in offsets)


def _used(folder) -> int:
    os.sync()
    st = os.statvfs(folder)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@pytest.mark.parametrize("kind", ["xfs", "btrfs"])
def test_aligned_weights_share_blocks(tmp_path, kind):
    """An aligned source re-aligned on XFS or btrfs takes no new space (a reflink);
    a shifted one takes a real copy (so the measurement can tell them apart)."""
    reason = unavailable(kind)
    if reason:
        pytest.skip(reason)
    with loop_mount(kind, 512 * MiB, tmp_path) as mnt:
        folder = pathlib.Path(mnt)
        total = 0
        for shifted in (False, True):
            name = "s" if shifted else "a"
            src, _ = _source(folder, name, 64, shifted)  # 64 MiB of weights
            total = os.path.getsize(src.with_suffix(".data"))
            used = _used(folder)
            onnxl.align_external_data_streaming(src, folder / f"{name}-o.onnx", f"{name}-o.data")
            grew = _used(folder) - used
            if shifted:
                assert grew >= total * 0.9, f"{kind}: a shifted copy cannot share blocks"
            else:
                assert grew < total * 0.1, f"{kind}: {grew} bytes used for {total} shareable"


def test_copies_go_the_way_measured_faster(folder, monkeypatch):
    """Where the policy says so, a copy that cannot share blocks is spliced (every copy
    on ext4 and tmpfs); on XFS and btrfs an aligned one goes through copy_file_range,
    which shares its blocks."""
    policy = _policy(folder)
    seen = []
    real = _copy.CopyEngine._copy

    def spy(self, order, src, src_off, dst, dst_off, length, what):
        seen.append((order[0].__name__[1:], (src_off - dst_off) % 4096 == 0, length))
        return real(self, order, src, src_off, dst, dst_off, length, what)

    monkeypatch.setattr(_copy.CopyEngine, "_copy", spy)
    for name, shifted in (("p", True), ("q", False)):
        src, _ = _source(folder, name, 4, shifted=shifted)
        onnxl.align_external_data_streaming(src, folder / f"{name}-o.onnx", f"{name}-o.data")
    weights = [s for s in seen if s[2] >= MiB]
    assert any(s[1] for s in weights) and not all(s[1] for s in weights)
    first = "splice" if policy.splice else "copy_file_range"
    assert all(s[0] == first for s in weights if not s[1])
    shared = "copy_file_range" if policy.shares_blocks or not policy.splice else "splice"
    assert all(s[0] == shared for s in weights if s[1])


def test_weights_file_is_not_truncated_to_its_own_size(folder, monkeypatch):
    """XFS flushes a truncated file when it is closed: a truncate to the size the file
    already has would make the close wait for the writeback of everything copied."""
    truncated = []
    real = os.ftruncate

    def spy(fd, size):
        truncated.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd, size)

    monkeypatch.setattr(os, "ftruncate", spy)
    for shifted in (True, False):
        name = "t" if shifted else "u"
        src, expected = _source(folder, name, 4, shifted)
        onnxl.align_external_data_streaming(src, folder / f"{name}-o.onnx", f"{name}-o.data")
        assert _weights(folder / f"{name}-o.onnx") == expected
    assert not [t for t in truncated if ".data." in os.path.basename(t)]


MACOS_SAVE = """
import ctypes, sys
sys.platform = "darwin"  # macOS as the package sees it: struct statfs is 2,168 bytes there
calls = []
real = ctypes.CDLL
class Recording(real):
    def __getattr__(self, name):
        calls.append(name)
        return super().__getattr__(name)
ctypes.CDLL = Recording

import numpy as np, onnx
from onnx import helper, numpy_helper
import onnx_light.onnx as onnxl

w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "W")
graph = helper.make_graph(
    [helper.make_node("MatMul", ["X", "W"], ["Y"])], "g",
    [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 64])],
    [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, 64])], [w])
onnxl.save(helper.make_model(graph), sys.argv[1], "m.data")
onnxl.align_external_data_streaming(sys.argv[1], sys.argv[2], "a.data")
print(" ".join(sorted(set(calls))))
"""


def test_the_filesystem_is_asked_only_where_its_struct_is_known(tmp_path):
    """``fstatfs`` fills a ``struct statfs`` whose size and layout differ per system
    (2,168 bytes on macOS, 120 on 64-bit Linux): off Linux it is never called, so
    no buffer of the wrong size is handed to it, and the files are still written."""
    out = subprocess.run(
        [sys.executable, "-c", MACOS_SAVE, str(tmp_path / "m.onnx"), str(tmp_path / "a.onnx")],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "fstatfs" not in out.stdout.split()
    np.testing.assert_array_equal(
        numpy_helper.to_array(onnx.load(str(tmp_path / "a.onnx")).graph.initializer[0]),
        np.arange(4096, dtype=np.float32).reshape(64, 64),
    )


_WORD = ctypes.c_uint if platform.machine() == "s390x" else ctypes.c_long
_COUNTS = ("f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree")


class _LinuxStatfs(ctypes.Structure):
    """glibc's ``struct statfs`` on this machine's Linux ABI (bits/statfs.h)."""

    _fields_ = [
        ("f_type", _WORD),
        ("f_bsize", _WORD),
        *[(name, ctypes.c_ulong) for name in _COUNTS],
        ("f_fsid", ctypes.c_int * 2),
        ("f_namelen", _WORD),
        ("f_frsize", _WORD),
        ("f_flags", _WORD),
        ("f_spare", _WORD * 4),
    ]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's struct statfs")
def test_the_statfs_buffer_holds_this_platforms_struct():
    from onnx_light.onnx._write import fs

    assert ctypes.sizeof(_LinuxStatfs) <= fs._STATFS_SIZE
    fd = os.open(".", os.O_RDONLY)
    try:
        expected = os.statvfs(".").f_bsize
        assert fs._fstatfs(fd)[1] == expected
    finally:
        os.close(fd)
