"""Concurrency: many aligns of one source at once; saves racing to one destination;
in-place re-aligns racing with readers.

Aligns of the same source into different destinations, in threads and in
processes, must all be correct. Saves racing to the same (.onnx, weights)
destination must leave one complete result, the pair of one writer, never the
.onnx of one with the weights of another. A run copying a model out while
others re-align it in place must copy a whole pair, old or new.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest
from helpers import external_offsets, make_every_kind_model, read_back, save_two_file, tensor_bytes
from helpers import two_file_pair as _pair
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._commit import atomic as _atomic


@pytest.fixture
def source(tmp_path):
    """The every-kind model saved by onnx as a two-file model in tmp_path/src."""
    model = make_every_kind_model()
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "m.onnx"
    save_two_file(model, path, size_threshold=0)
    return path, tensor_bytes(model)


def _check_aligned(dst, tensors, alignment) -> None:
    assert read_back(dst) == tensors
    assert all(off % alignment == 0 for _, off, _ in external_offsets(dst))


ALIGNMENTS = [1, 64, 4096, 65536, 64, 4096]


def test_aligns_in_threads(source, tmp_path):
    path, tensors = source

    def align(i: int):
        dst = tmp_path / f"t{i}"
        dst.mkdir()
        onnxl.align_external_data_streaming(
            path, dst / "a.onnx", "a.data", ALIGNMENTS[i], 4096 * (i + 1)
        )
        return dst / "a.onnx"

    with ThreadPoolExecutor(len(ALIGNMENTS)) as ex:
        outputs = list(ex.map(align, range(len(ALIGNMENTS))))
    for out, alignment in zip(outputs, ALIGNMENTS):
        _check_aligned(out, tensors, alignment)


_ALIGN = textwrap.dedent(
    """
    import sys
    import onnx_light.onnx as onnxl

    src, dst, alignment = sys.argv[1:]
    onnxl.align_external_data_streaming(src, dst, "a.data", int(alignment), 8192)
    """
)


def test_aligns_in_processes(source, tmp_path):
    path, tensors = source
    procs = []
    for i, alignment in enumerate(ALIGNMENTS[:4]):
        dst = tmp_path / f"p{i}"
        dst.mkdir()
        cmd = [sys.executable, "-c", _ALIGN, str(path), str(dst / "a.onnx"), str(alignment)]
        procs.append((subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True), dst, alignment))
    for proc, dst, alignment in procs:
        assert proc.wait(120) == 0, proc.stderr.read()
        _check_aligned(dst / "a.onnx", tensors, alignment)


def test_loads_in_threads(source):
    path, tensors = source
    with ThreadPoolExecutor(4) as ex:
        models = list(ex.map(lambda _: onnxl.load(path, num_threads=2), range(8)))
    assert all(tensor_bytes(m) == tensors for m in models)


# -- saves racing to one destination --------------------------------------------


def _variant(k: int) -> onnx.ModelProto:
    """Writer ``k``'s model: its own values and sizes, so its layout is its own."""
    rng = np.random.default_rng(100 + k)
    inits = [
        numpy_helper.from_array(rng.integers(0, 255, 5000 + 3000 * k * (i + 1), np.uint8), f"W{i}")
        for i in range(3)
    ]
    return helper.make_model(helper.make_graph([], "g", [], [], inits))


VARIANTS = [tensor_bytes(_variant(k)) for k in range(4)]


def _writer_of(dst) -> int:
    """Which writer's model the (.onnx, weights) pair at ``dst`` holds; fails on a mix."""
    assert tensor_bytes(onnxl.load(dst)) == read_back(dst)
    got = read_back(dst)
    writers = [k for k, tensors in enumerate(VARIANTS) if tensors == got]
    assert len(writers) == 1, "the .onnx and its weights come from different saves"
    return writers[0]


def test_racing_saves_forced_interleaving(tmp_path, monkeypatch):
    """A replaces its weights then pauses; B saves whole meanwhile; then A finishes.

    Without a lock around the replacements the result is A's .onnx over B's
    weights, which even loads when the offsets agree: a silent mix.
    """
    real = os.replace

    def replace(src, dst):
        real(src, dst)
        if threading.current_thread().name == "A" and str(dst).endswith(".data"):
            time.sleep(0.3)

    monkeypatch.setattr(os, "replace", replace)
    dst = tmp_path / "d.onnx"
    opts = onnxl.SerializeOptions(alignment=4096)

    def save(k: int) -> None:
        onnxl.save(_variant(k), dst, "d.data", options=opts)

    a = threading.Thread(target=save, args=(1,), name="A")
    b = threading.Thread(target=save, args=(2,), name="B")
    a.start()
    time.sleep(0.1)
    b.start()
    a.join()
    b.join()
    monkeypatch.undo()
    assert _writer_of(dst) in (1, 2)


def test_racing_saves_and_aligns_in_threads(tmp_path):
    """Saves, shared saves and streaming aligns, all to the same destination pair."""
    sources = []
    for k in range(4):
        folder = tmp_path / f"s{k}"
        folder.mkdir()
        save_two_file(_variant(k), folder / "m.onnx", size_threshold=0)
        sources.append(folder / "m.onnx")
    dst = tmp_path / "d.onnx"

    def work(k: int) -> None:
        for round in range(3):
            if (k + round) % 2:
                onnxl.align_external_data_streaming(sources[k], dst, "d.data", 64, 4096)
            else:
                opts = onnxl.SerializeOptions(alignment=4096, num_threads=2)
                onnxl.save(_variant(k), dst, "d.data", options=opts)

    with ThreadPoolExecutor(4) as ex:
        list(ex.map(work, range(4)))
    _writer_of(dst)
    assert not [n for n in os.listdir(tmp_path) if n.endswith(_atomic.TMP_SUFFIX)]


_SAVE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[3])
    import onnx_light.onnx as onnxl
    from test_concurrency import _variant

    k, dst = int(sys.argv[1]), sys.argv[2]
    opts = onnxl.SerializeOptions(alignment=4096)
    for _ in range(5):
        onnxl.save(_variant(k), dst, "d.data", options=opts)
    """
)


def test_racing_saves_in_processes(tmp_path):
    dst = tmp_path / "d.onnx"
    here = os.path.dirname(__file__)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SAVE, str(k), str(dst), here], stderr=subprocess.PIPE, text=True
        )
        for k in range(4)
    ]
    for proc in procs:
        assert proc.wait(120) == 0, proc.stderr.read()
    _writer_of(dst)
    assert sorted(os.listdir(tmp_path)) == ["d.data", "d.onnx"]


def test_paused_gc_overlapping_calls_restore_the_collector():
    """Overlapping calls (aligns in threads): the collector stays off while any call is
    inside and is back on after the last one leaves."""
    import gc
    import sys
    import threading

    from onnx_light.onnx._system.gc import paused_gc

    assert gc.isenabled()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with paused_gc():
            a_in.set()
            b_in.wait()
        a_out.set()

    def b():
        a_in.wait()
        with paused_gc():
            b_in.set()
            a_out.wait()
            seen["after_a_left"] = gc.isenabled()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen["after_a_left"] is False
    assert gc.isenabled()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:

        def churn():
            for _ in range(2000):
                with paused_gc():
                    pass

        threads = [threading.Thread(target=churn) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert gc.isenabled()


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
