"""drop_behind=None: a cold source leaves the page cache behind the copy, a warm one stays.

A cold source's pages are dropped as the copy goes and the destination's
kept (the next step reads them); a warm source keeps the cache of both.

The source is made cold with ``posix_fadvise(POSIX_FADV_DONTNEED)`` after a
``sync`` (dirty pages cannot be dropped) and warm by reading it; the tests
assert the decision the writers take, never a timing.
"""

from __future__ import annotations

import os

import pytest
from helpers import read_back, save_two_file

import onnx_light.onnx as onnxl
import onnx_light.onnx._dedup as dedup_module
import onnx_light.onnx._system.cache as cache
import onnx_light.onnx._system.memory as memory
import onnx_light.onnx._write.copy as copy_module
import onnx_light.onnx._write.shards as shards
from benchmarks import harness as bench
from benchmarks.harness import make_gemm_model

MiB = 2**20

linux = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise")


def evict(path) -> None:
    """``path`` out of the page cache (the benchmarks' own :func:`benchmarks.harness.evict`)."""
    assert bench.evict([path])


def share(path) -> float | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        return cache.resident(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def warm(path) -> None:
    with open(path, "rb") as f:
        while f.read(8 * MiB):
            pass


@pytest.fixture(params=["cachestat", "mincore"])
def method(request, monkeypatch):
    """Each way of reading residency on its own (cachestat skipped where the kernel has none)."""
    if request.param == "mincore":
        monkeypatch.setattr(cache, "_cachestat", lambda *a: None)
    else:
        probe = os.open(__file__, os.O_RDONLY)
        try:
            if cache._cachestat(probe, 0, cache.PAGE) is None:
                pytest.skip("no cachestat(2) here (Linux < 6.5)")
        finally:
            os.close(probe)
        monkeypatch.setattr(cache, "_mincore", lambda *a: pytest.fail("mincore asked"))
    return request.param


@pytest.fixture
def model(tmp_path, monkeypatch):
    """A 24 MiB two-file model; copies from 1 MiB up are decided by residency."""
    monkeypatch.setattr(memory, "SMALL", MiB)
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "m.onnx"
    save_two_file(make_gemm_model(6, 1024), path)
    return path


def decisions(monkeypatch, module) -> list[bool]:
    """The drop_behind the writers of ``module`` decide, call after call."""
    seen: list[bool] = []
    real = module.drop_by_default

    def spy(*args):
        seen.append(real(*args))
        return seen[-1]

    monkeypatch.setattr(module, "drop_by_default", spy)
    return seen


@linux
def test_residency_of_an_evicted_file_then_of_the_same_file_read(tmp_path, method):
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(4 * MiB))
    evict(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert cache.resident(fd, 0, 4 * MiB) < 0.1
        os.pread(fd, MiB, MiB)  # the second MiB (and what readahead brings)
        assert cache.resident(fd, MiB, MiB) == 1.0
        warm(path)
        assert cache.resident(fd, 0, 4 * MiB) == 1.0
        assert cache.resident(fd, 1000, 3) == 1.0  # widened to its page
        assert cache.resident(fd, 3 * MiB, 10 * MiB) == 1.0  # none past the end
    finally:
        os.close(fd)


@linux
def test_align_drops_behind_a_cold_source_and_keeps_a_warm_one(
    model, tmp_path, monkeypatch, method
):
    seen = decisions(monkeypatch, shards)
    evict(model.parent / "m.onnx.data")
    (tmp_path / "cold").mkdir()
    onnxl.align_external_data_streaming(model, tmp_path / "cold" / "m.onnx")
    warm(model.parent / "m.onnx.data")
    (tmp_path / "warm").mkdir()
    onnxl.align_external_data_streaming(model, tmp_path / "warm" / "m.onnx")
    assert seen == [memory.SOURCE, False]
    assert read_back(tmp_path / "cold" / "m.onnx") == read_back(model)


@linux
def test_a_cold_source_leaves_the_cache_and_the_copy_stays(model, tmp_path, monkeypatch):
    monkeypatch.setattr(copy_module, "DROP_WINDOW", MiB)  # many drops in 24 MiB
    data = model.parent / "m.onnx.data"
    evict(data)
    (tmp_path / "out").mkdir()
    onnxl.align_external_data_streaming(model, tmp_path / "out" / "m.onnx")
    assert share(data) < 0.1  # read once, dropped behind the copy
    assert share(tmp_path / "out" / "m.onnx.data") == 1.0  # what the next step reads


@linux
def test_a_small_copy_keeps_the_cache_even_cold(model, tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "SMALL", 64 * MiB)
    seen = decisions(monkeypatch, shards)
    evict(model.parent / "m.onnx.data")
    (tmp_path / "out").mkdir()
    onnxl.align_external_data_streaming(model, tmp_path / "out" / "m.onnx")
    assert seen == [False]  # 24 MiB: below one drop window


@linux
def test_dedup_drops_behind_cold_sources(model, tmp_path, monkeypatch):
    seen = decisions(monkeypatch, dedup_module)
    evict(model.parent / "m.onnx.data")
    (tmp_path / "out").mkdir()
    onnxl.deduplicate_external_data([model], [tmp_path / "out" / "m.onnx"], "w.data")
    assert seen == [memory.SOURCE]
    assert read_back(tmp_path / "out" / "m.onnx") == read_back(model)


def test_where_residency_cannot_be_read_only_the_memory_rule_decides(model, tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "resident", lambda *a: None)  # not Linux, or not allowed
    seen = decisions(monkeypatch, shards)
    if hasattr(os, "posix_fadvise"):
        evict(model.parent / "m.onnx.data")
    (tmp_path / "a").mkdir()
    onnxl.align_external_data_streaming(model, tmp_path / "a" / "m.onnx")
    monkeypatch.setattr(memory, "available_memory", lambda: MiB)
    (tmp_path / "b").mkdir()
    onnxl.align_external_data_streaming(model, tmp_path / "b" / "m.onnx")
    assert seen == [False, True]  # 24 MiB fits this machine's memory; not a 1 MiB room


def test_mincore_is_not_asked_about_a_file_of_another_user(tmp_path, monkeypatch):
    """The kernel would report only this process's own mappings: not a cold file."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 8192)
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(path).st_uid + 1)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert cache._mincore(fd, 0, 8192) is None
    finally:
        os.close(fd)


def test_an_explicit_drop_behind_is_never_second_guessed(model, tmp_path, monkeypatch):
    seen = decisions(monkeypatch, shards)
    for flag in (True, False):
        (tmp_path / str(flag)).mkdir()
        onnxl.align_external_data_streaming(
            model, tmp_path / str(flag) / "m.onnx", options=onnxl.WriteOptions(drop_behind=flag)
        )
    assert seen == []
