"""The copy engine: every way gives the same bytes; only 'unsupported' falls back."""

import errno
import os

import pytest

from onnx_light.onnx._write import copy as _copy
from onnx_light.onnx._write import runs as _runs
from onnx_light.onnx._write import writer as _writer
from onnx_light.onnx._write.copy import CopyEngine
from onnx_light.onnx._write.fs import CopyPolicy


def _enosys(*a, **k):
    raise OSError(errno.ENOSYS, "not here")


@pytest.fixture
def files(tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 123)
    (tmp_path / "src").write_bytes(data)
    src = os.open(tmp_path / "src", os.O_RDONLY)
    dst = os.open(tmp_path / "dst", os.O_RDWR | os.O_CREAT)
    yield data, src, dst, tmp_path / "dst"
    os.close(src)
    os.close(dst)


def _copy_ranges(src, dst, chunk=256 * 1024):
    calls = []
    with CopyEngine(chunk, lambda d, t: calls.append((d, t)), total=2_000_000 + 700_000) as eng:
        eng.copy(src, 1000, dst, 4096, 2_000_000, "tensor 'a' in 'src'")
        eng.copy(src, 5, dst, 3 * 1024 * 1024, 700_000, "tensor 'b' in 'src'")
        method = eng.method
    return calls, method


@pytest.mark.parametrize("broken", [(), ("copy_file_range",), ("copy_file_range", "splice")])
def test_each_way_same_bytes(files, monkeypatch, broken):
    data, src, dst, dst_path = files
    for name in broken:
        monkeypatch.setattr(os, name, _enosys)
    calls, method = _copy_ranges(src, dst)
    assert method == ["copy_file_range", "splice", "pread"][len(broken)]
    out = dst_path.read_bytes()
    assert out[4096 : 4096 + 2_000_000] == data[1000 : 1000 + 2_000_000]
    assert out[3 * 1024 * 1024 :] == data[5 : 5 + 700_000]
    assert out[:4096] == b"\0" * 4096
    # progress: at least once per chunk, last with done == total
    assert len(calls) >= (2_000_000 + 700_000) // (256 * 1024)
    assert calls[-1] == (2_700_000, 2_700_000)
    assert all(b[0] - a[0] <= 256 * 1024 for a, b in zip(calls, calls[1:]))


@pytest.mark.parametrize("code", [errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP])
def test_unsupported_errnos_fall_back(files, monkeypatch, code):
    data, src, dst, dst_path = files

    def unsupported(*a, **k):
        raise OSError(code, "unsupported")

    monkeypatch.setattr(os, "copy_file_range", unsupported)
    _, method = _copy_ranges(src, dst)
    assert method == "splice"
    assert dst_path.read_bytes()[4096 : 4096 + 2_000_000] == data[1000 : 1000 + 2_000_000]


@pytest.mark.parametrize("way", ["copy_file_range", "splice", "pread"])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_io_errors_propagate(files, monkeypatch, way, code):
    _, src, dst, _ = files

    def fail(*a, **k):
        raise OSError(code, os.strerror(code))

    order = ["copy_file_range", "splice", "pread"]
    for name in order[: order.index(way)]:
        monkeypatch.setattr(os, name, _enosys)
    monkeypatch.setattr(os, {"pread": "preadv"}.get(way, way), fail)
    with pytest.raises(OSError) as info, CopyEngine(1 << 20) as eng:
        eng.copy(src, 0, dst, 0, 100_000, "x")
    assert info.value.errno == code


def test_midway_fallback_keeps_progress(files, monkeypatch):
    """copy_file_range failing after some chunks: the rest is copied another way."""
    data, src, dst, dst_path = files
    real = os.copy_file_range
    state = {"n": 0}

    def flaky(*a, **k):
        state["n"] += 1
        if state["n"] > 2:
            raise OSError(errno.EXDEV, "cross device")
        return real(*a, **k)

    monkeypatch.setattr(os, "copy_file_range", flaky)
    with CopyEngine(100_000) as eng:
        eng.copy(src, 0, dst, 0, len(data), "x")
        assert eng.method == "splice" and eng.done == len(data)
    assert dst_path.read_bytes() == data


def test_truncated_source(files):
    data, src, dst, _ = files
    with pytest.raises(EOFError, match="tensor 'a'"), CopyEngine(1 << 20) as eng:
        eng.copy(src, len(data) - 10, dst, 0, 100, "tensor 'a' in 'src'")


def test_chunk_size_checked():
    with pytest.raises(ValueError, match="chunk_size"):
        CopyEngine(0)


def test_pwrite_all_loops_on_short_writes(tmp_path, monkeypatch):
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, off: real(fd, bytes(data)[:7], off))
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    _copy.pwrite_all(fd, b"0123456789" * 10, 3)
    os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"\0" * 3 + b"0123456789" * 10


SPLICING = CopyPolicy("test", splice=True, shares_blocks=True, block=4096)


def test_shifted_copies_start_with_splice(files, monkeypatch):
    """With a policy that splices shifted copies: shifted -> splice, congruent -> copy_file_range;
    where splice is refused, shifted copies fall back to copy_file_range."""
    data, src, dst, dst_path = files
    with CopyEngine(1 << 20, policy=SPLICING) as eng:
        eng.copy(src, 1000, dst, 4096, 2_000_000, "x")
        assert eng.method == "splice"
        eng.copy(src, 8192, dst, 3 * 1024 * 1024, 500_000, "x")
        assert eng.method == "copy_file_range"
    out = dst_path.read_bytes()
    assert out[4096 : 4096 + 2_000_000] == data[1000 : 1000 + 2_000_000]
    assert out[3 * 1024 * 1024 :] == data[8192 : 8192 + 500_000]
    monkeypatch.setattr(os, "splice", _enosys)
    with CopyEngine(1 << 20, policy=SPLICING) as eng:
        eng.copy(src, 1000, dst, 4096, 2_000_000, "x")
        assert eng.method == "copy_file_range" and eng.unsupported == {"splice"}
    assert dst_path.read_bytes()[4096 : 4096 + 2_000_000] == data[1000 : 1000 + 2_000_000]


def test_congruent_copy_splits_its_head_at_a_block_boundary(files, monkeypatch):
    """Offsets 5000 -> 9096 can share blocks from 8192 -> 12288 on: the head goes first."""
    data, src, dst, dst_path = files
    real = os.copy_file_range
    calls = []

    def spy(s, d, count, s_off, d_off):
        calls.append((s_off, d_off))
        return real(s, d, count, s_off, d_off)

    monkeypatch.setattr(os, "copy_file_range", spy)
    with CopyEngine(1 << 20, policy=SPLICING) as eng:
        eng.copy(src, 5000, dst, 9096, 2_000_000, "x")
    assert calls[0] == (5000, 9096)
    assert calls[1] == (8192, 12288)
    assert all(s % 4096 == 0 for s, _ in calls[1:])
    assert dst_path.read_bytes()[9096:] == data[5000 : 5000 + 2_000_000]


def test_preallocation_leaves_shareable_ranges_out(monkeypatch):
    """Where blocks can be shared, congruent runs are not preallocated; elsewhere the
    whole file is."""
    ranges = []
    monkeypatch.setattr(_writer, "preallocate", lambda fd, off, n: ranges.append((off, n)))
    mib = 1 << 20
    runs = [
        _runs.Run(None, 0, 0, 8 * mib, []),  # congruent: shared
        _runs.Run(None, 8 * mib + 100, 8 * mib, 4 * mib, []),  # shifted
        _runs.Run(None, 12 * mib + 100, 12 * mib + 4096, 4 * mib, []),  # shifted, next to it
    ]
    _writer._preallocate(0, 20 * mib, runs, [], SPLICING)
    assert ranges == [(8 * mib, 8 * mib + 4096)]
    ranges.clear()
    _writer._preallocate(0, 20 * mib, runs, [], CopyPolicy())
    assert ranges == [(0, 20 * mib)]


def test_progress_steps_stay_within_chunk_size_where_blocks_may_be_shared(files):
    """Large calls where blocks may be shared only when nobody watches progress."""
    data, src, dst, _ = files
    calls = []
    with CopyEngine(256 * 1024, lambda d, t: calls.append(d), len(data), SPLICING) as eng:
        eng.copy(src, 0, dst, 0, len(data), "x")
    steps = [b - a for a, b in zip([0, *calls], calls)]
    assert calls[-1] == len(data) and max(steps) <= 256 * 1024


def test_no_descriptor_for_a_pipe_falls_back(files, monkeypatch):
    """Splice first, but no descriptor left for its pipe: copy_file_range instead."""
    data, src, dst, dst_path = files

    def emfile():
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "pipe", emfile)
    with CopyEngine(1 << 20, policy=SPLICING) as eng:
        eng.copy(src, 1000, dst, 4096, 2_000_000, "x")
        assert eng.method == "copy_file_range"
    assert dst_path.read_bytes()[4096 : 4096 + 2_000_000] == data[1000 : 1000 + 2_000_000]


def test_copy_file_range_copying_nothing_is_not_a_truncated_file(files, monkeypatch):
    """copy_file_range returning 0 at the start of a range means "not done here" on some
    filesystems: the next way copies the intact file; a file that really ended still fails."""
    data, src, dst, dst_path = files
    monkeypatch.setattr(os, "copy_file_range", lambda *a: 0)
    with CopyEngine(1 << 20) as eng:
        eng.copy(src, 0, dst, 0, len(data), "tensor 'a' in 'src'")
        assert eng.method != "copy_file_range" and "copy_file_range" in eng.unsupported
    assert dst_path.read_bytes()[: len(data)] == data
    with pytest.raises(EOFError, match="tensor 'a'"), CopyEngine(1 << 20) as eng:
        eng.copy(src, len(data) - 10, dst, 0, 100, "tensor 'a' in 'src'")
