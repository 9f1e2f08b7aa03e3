"""drop_behind: a copy leaves the page cache as it was, and the bytes as they should be.

The window between two drops is lowered to 1 MiB so a 24 MiB model crosses
many; residency is read with util-linux's ``fincore`` (``mincore(2)``).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from helpers import read_back, save_two_file

import onnx_light.onnx as onnxl
import onnx_light.onnx._write.copy as copy_module
from benchmarks.harness import make_gemm_model

MiB = 2**20


def resident(path) -> int:
    """Bytes of ``path`` in the page cache."""
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.split()[0])


@pytest.fixture
def model(tmp_path, monkeypatch):
    monkeypatch.setattr(copy_module, "DROP_WINDOW", MiB)
    (tmp_path / "src").mkdir()
    save_two_file(make_gemm_model(6, 1024), tmp_path / "src" / "m.onnx")  # 24 MiB
    os.sync()  # a model on disk for a while: its pages clean (dirty ones cannot be dropped)
    return tmp_path / "src" / "m.onnx"


def _warm(path) -> None:
    with open(path, "rb") as f:
        while f.read(8 * MiB):
            pass


@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) is missing")
@pytest.mark.parametrize("dedup", [False, True], ids=["align", "dedup"])
def test_drop_behind_leaves_neither_file_in_the_page_cache(model, tmp_path, dedup):
    data = str(model) + ".data"
    expected = read_back(model)
    results = {}
    for drop in (False, True):
        out = tmp_path / f"out-{drop}"
        out.mkdir()
        _warm(data)
        assert resident(data) > 20 * MiB  # the source sits in the cache
        if dedup:
            onnxl.deduplicate_external_data(
                [model],
                [out / "m.onnx"],
                "m.onnx.data",
                options=onnxl.WriteOptions(drop_behind=drop),
            )
        else:
            onnxl.align_external_data_streaming(
                model, out / "m.onnx", options=onnxl.WriteOptions(drop_behind=drop)
            )
        results[drop] = (resident(data), resident(out / "m.onnx.data"))
        assert read_back(out / "m.onnx") == expected
    kept_src, kept_dst = results[False]
    dropped_src, dropped_dst = results[True]
    assert kept_dst > 20 * MiB and kept_src > 20 * MiB  # without it, both stay cached
    assert dropped_dst < 2 * MiB and dropped_src < 2 * MiB  # with it, neither does


def test_drop_behind_gives_the_same_bytes_with_every_copy_method(model, tmp_path, monkeypatch):
    expected = read_back(model)
    for method in ("copy_file_range", "splice", "pread"):
        out = tmp_path / method
        out.mkdir()
        with monkeypatch.context() as m:
            for other in {"copy_file_range", "splice"} - {method}:
                m.delattr(os, other, raising=False)
            onnxl.align_external_data_streaming(
                model, out / "m.onnx", options=onnxl.WriteOptions(drop_behind=True)
            )
        assert read_back(out / "m.onnx") == expected, method
    plain = tmp_path / "plain"
    plain.mkdir()
    onnxl.align_external_data_streaming(model, plain / "m.onnx")
    for method in ("copy_file_range", "splice", "pread"):
        with (
            open(plain / "m.onnx.data", "rb") as a,
            open(tmp_path / method / "m.onnx.data", "rb") as b,
        ):
            assert a.read() == b.read(), method


@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) is missing")
def test_the_command_line_flag_drops_behind(model, tmp_path):
    from onnx_light.cli import main

    (tmp_path / "out").mkdir()
    _warm(str(model) + ".data")
    assert main(["align", str(model), str(tmp_path / "out" / "m.onnx"), "--drop-behind", "-q"]) == 0
    assert resident(str(model) + ".data") < 2 * MiB
    assert resident(tmp_path / "out" / "m.onnx.data") < 2 * MiB
    assert read_back(tmp_path / "out" / "m.onnx") == read_back(model)


def test_by_default_a_copy_is_dropped_only_when_it_exceeds_the_memory_available(
    model, tmp_path, monkeypatch
):
    import onnx_light.onnx._write.shards as shards

    seen = []
    real = shards.write_weights

    def spy(*args):
        seen.append(args[-1])  # drop_behind as decided
        return real(*args)

    monkeypatch.setattr(shards, "write_weights", spy)
    (tmp_path / "a").mkdir()
    onnxl.align_external_data_streaming(model, tmp_path / "a" / "m.onnx")
    monkeypatch.setattr(shards, "drop_by_default", lambda nbytes, *_: nbytes > 1 * MiB)
    (tmp_path / "b").mkdir()
    onnxl.align_external_data_streaming(model, tmp_path / "b" / "m.onnx")
    assert seen == [False, True]  # 24 MiB fits this machine's memory; not a 1 MiB room


def test_the_memory_available_reads_meminfo_and_the_cgroup():
    from onnx_light.onnx._system.memory import available_memory, drop_by_default

    room = available_memory()
    assert room is not None and room > 0
    assert not drop_by_default(1 * MiB) and drop_by_default(1 << 50)


@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) is missing")
def test_dedup_drops_what_it_only_read_to_compare(model, tmp_path):
    """Two identical models: the second's bytes are read to compare, never copied."""
    folder = model.parent
    shutil.copy(folder / "m.onnx", folder / "b.onnx")
    shutil.copy(folder / "m.onnx.data", folder / "b.onnx.data")
    with open(folder / "b.onnx", "rb") as f:
        raw = f.read()
    with open(folder / "b.onnx", "wb") as f:  # b.onnx reads b.onnx.data
        f.write(raw.replace(b"m.onnx.data", b"b.onnx.data"))
    os.sync()
    for name in ("m.onnx.data", "b.onnx.data"):
        _warm(folder / name)
    (tmp_path / "out").mkdir()
    onnxl.deduplicate_external_data(
        [model, folder / "b.onnx"],
        [tmp_path / "out" / "m.onnx", tmp_path / "out" / "b.onnx"],
        "w.data",
        options=onnxl.WriteOptions(drop_behind=True),
    )
    assert resident(folder / "b.onnx.data") < 2 * MiB  # compared, then dropped
    assert resident(folder / "m.onnx.data") < 2 * MiB
    assert read_back(tmp_path / "out" / "b.onnx") == read_back(model)
