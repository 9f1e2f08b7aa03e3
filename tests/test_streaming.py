"""align_external_data_streaming: aligned, byte-exact, never loading weights."""

import errno
import os

import numpy as np
import onnx
import pytest
from helpers import (
    as_options,
    external_offsets,
    folder_digest,
    make_every_kind_model,
    make_runnable_model,
    peak_growth_in_subprocess,
    read_back,
    run_ort,
    save_two_file,
    sha256,
    tensor_bytes,
)
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._commit import atomic as _atomic
from onnx_light.onnx._read.tensors import is_external, iter_tensors
from onnx_light.onnx._write import copy as _copy
from onnx_light.onnx._write import writer as _writer


def _check_aligned(path, alignment, weights="dst.data"):
    refs = external_offsets(path)
    assert refs, "no external tensor"
    assert all(loc == weights and off % alignment == 0 for loc, off, _ in refs)
    assert min(off for _, off, _ in refs) == 0
    return refs


@pytest.mark.parametrize("alignment", [1, 64, 4096, 65536])
@pytest.mark.parametrize("layout", ["two", "per_tensor"])
def test_align_two_and_multi_file(tmp_path, alignment, layout):
    model = make_every_kind_model()
    (tmp_path / "src").mkdir()
    save_two_file(
        model, tmp_path / "src" / "m.onnx", per_tensor=layout == "per_tensor", size_threshold=0
    )
    digest = folder_digest(tmp_path / "src")
    written = onnxl.align_external_data_streaming(
        tmp_path / "src" / "m.onnx", tmp_path / "dst.onnx", "dst.data", alignment
    )
    assert written == os.path.getsize(tmp_path / "dst.data")
    refs = _check_aligned(tmp_path / "dst.onnx", alignment)
    assert written == max(off + n for _, off, n in refs)
    assert read_back(tmp_path / "dst.onnx") == tensor_bytes(model)
    assert folder_digest(tmp_path / "src") == digest, "sources never modified"


def test_inline_tensors_stay_inline_or_move(tmp_path):
    model = make_every_kind_model()
    onnx.save(model, str(tmp_path / "single.onnx"))
    # with a threshold: single-file -> aligned two-file
    n = onnxl.align_external_data_streaming(
        tmp_path / "single.onnx",
        tmp_path / "b.onnx",
        "b.data",
        4096,
        options=onnxl.WriteOptions(size_threshold=1024),
    )
    refs = _check_aligned(tmp_path / "b.onnx", 4096, "b.data")
    assert len(refs) == 11 and n == os.path.getsize(tmp_path / "b.data")
    assert read_back(tmp_path / "b.onnx") == tensor_bytes(model)
    assert os.path.getsize(tmp_path / "b.onnx") < 20_000  # metadata and sparse tensors
    # without one, a source with no external data gets onnx.save's threshold
    n = onnxl.align_external_data_streaming(tmp_path / "single.onnx", tmp_path / "a.onnx", "a.data")
    assert n == os.path.getsize(tmp_path / "b.data")
    assert sha256(tmp_path / "a.data") == sha256(tmp_path / "b.data")
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)
    # a threshold under 1 KiB moves smaller inline tensors too
    onnxl.align_external_data_streaming(
        tmp_path / "single.onnx",
        tmp_path / "c.onnx",
        "c.data",
        64,
        options=onnxl.WriteOptions(size_threshold=0),
    )
    assert len(external_offsets(tmp_path / "c.onnx")) == 12  # sparse stay inline
    assert read_back(tmp_path / "c.onnx") == tensor_bytes(model)


def test_mixed_sources(tmp_path):
    """Some tensors external (two files), some inline: all end in one file."""
    model = make_every_kind_model()
    save_two_file(model, tmp_path / "m.onnx", size_threshold=2000)  # small ones stay inline
    before = external_offsets(tmp_path / "m.onnx")
    onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "dst.onnx",
        "dst.data",
        4096,
        options=onnxl.WriteOptions(size_threshold=1024),
    )
    after = _check_aligned(tmp_path / "dst.onnx", 4096)
    assert len(after) > len(before)
    assert read_back(tmp_path / "dst.onnx") == tensor_bytes(model)


@pytest.mark.parametrize("chunk", [1000, 4096, 1 << 20])
def test_chunk_sizes_and_progress(tmp_path, chunk):
    model = make_every_kind_model()
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    calls = []
    n = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "dst.onnx",
        "dst.data",
        4096,
        chunk,
        options=onnxl.WriteOptions(progress=lambda d, t: calls.append((d, t))),
    )
    total = calls[-1][1]
    assert calls[-1] == (total, total)
    payload = sum(n for _, _, n in external_offsets(tmp_path / "dst.onnx"))
    assert total == payload <= n
    assert all(b[0] - a[0] <= chunk for a, b in zip([(0, 0), *calls], calls))
    assert read_back(tmp_path / "dst.onnx") == tensor_bytes(model)


@pytest.mark.parametrize("threshold", [None, 0])
def test_same_bytes_as_in_memory_path(tmp_path, threshold):
    model = make_every_kind_model()
    if threshold is None:  # every big tensor external already
        onnxl.save(model, tmp_path / "m.onnx", "m.data")
    else:  # onnx leaves sparse and training tensors inline: they move too
        save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "s.onnx",
        "s.data",
        4096,
        options=onnxl.WriteOptions(size_threshold=threshold),
    )
    loaded = onnxl.load(tmp_path / "m.onnx")
    opts = onnxl.SerializeOptions(alignment=4096, use_external_data_location=False)
    opts.size_threshold = 1024 if threshold is None else threshold
    onnxl.save(loaded, tmp_path / "i.onnx", "i.data", options=opts)
    assert (tmp_path / "s.data").read_bytes() == (tmp_path / "i.data").read_bytes()
    assert [r[1:] for r in external_offsets(tmp_path / "s.onnx")] == [
        r[1:] for r in external_offsets(tmp_path / "i.onnx")
    ]


def test_onnxruntime_same_outputs(tmp_path):
    model = make_runnable_model()
    onnx.save(model, str(tmp_path / "ref.onnx"))
    save_two_file(model, tmp_path / "m.onnx")
    onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "a.onnx",
        "a.data",
        65536,
        options=onnxl.WriteOptions(size_threshold=1024),
    )
    for a, b in zip(run_ort(tmp_path / "ref.onnx"), run_ort(tmp_path / "a.onnx")):
        np.testing.assert_array_equal(a, b)


def test_in_place(tmp_path):
    model = make_every_kind_model()
    save_two_file(model, tmp_path / "m.onnx", location="m.data", size_threshold=0)
    n = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", tmp_path / "m.onnx", "m.data", 4096
    )
    assert sorted(os.listdir(tmp_path)) == ["m.data", "m.onnx"]
    _check_aligned(tmp_path / "m.onnx", 4096, "m.data")
    assert n == os.path.getsize(tmp_path / "m.data")
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


def test_shared_ranges_stay_shared(tmp_path):
    w = numpy_helper.from_array(np.arange(1024, dtype=np.float32), "A")
    b = numpy_helper.from_array(np.arange(1024, dtype=np.float32), "B")
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [], [w, b]))
    onnxl.save(model, tmp_path / "m.onnx", "m.data")
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    for e in meta.graph.initializer[1].external_data:
        if e.key == "offset":
            e.value = "0"  # B now points at A's bytes
    (tmp_path / "m.onnx").write_bytes(meta.SerializeToString())
    n = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", tmp_path / "d.onnx", "d.data", 4096
    )
    assert n == 4096
    assert [off for _, off, _ in external_offsets(tmp_path / "d.onnx")] == [0, 0]


def test_weights_path_rules(tmp_path):
    model = make_every_kind_model()
    save_two_file(model, tmp_path / "m.onnx")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "w").mkdir()
    onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", tmp_path / "out" / "d.onnx", tmp_path / "out" / "w" / "d.bin"
    )
    assert {loc for loc, _, _ in external_offsets(tmp_path / "out" / "d.onnx")} == {"w/d.bin"}
    with pytest.raises(ValueError, match="inside"):
        onnxl.align_external_data_streaming(
            tmp_path / "m.onnx", tmp_path / "out" / "e.onnx", tmp_path / "e.data"
        )
    assert sorted(os.listdir(tmp_path / "out")) == ["d.onnx", "w"]


@pytest.mark.parametrize(
    "kwargs,match,error",
    [
        ({"alignment": -1}, "alignment", ValueError),
        ({"alignment": 3}, "alignment", ValueError),
        ({"alignment": 4096.0}, "alignment", TypeError),
        ({"chunk_size": 0}, "chunk_size", ValueError),
        ({"chunk_size": -5}, "chunk_size", ValueError),
        ({"size_threshold": -1}, "size_threshold", ValueError),
        ({"inline_below": "1K"}, "inline_below", TypeError),
        ({"shard_naming": "onnxir"}, "shard_naming", ValueError),
    ],
)
def test_validation_before_any_write(tmp_path, kwargs, match, error):
    save_two_file(make_every_kind_model(), tmp_path / "m.onnx")
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(error, match=match):
        onnxl.align_external_data_streaming(
            tmp_path / "m.onnx",
            tmp_path / "d.onnx",
            "d.data",
            **as_options(kwargs, keep=("alignment", "chunk_size")),
        )
    assert sorted(os.listdir(tmp_path)) == before


def test_missing_source_file(tmp_path):
    save_two_file(make_every_kind_model(), tmp_path / "m.onnx", location="m.data")
    os.unlink(tmp_path / "m.data")
    with pytest.raises(FileNotFoundError, match="'W0'.*m.data"):
        onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "d.onnx", "d.data")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]
    with pytest.raises(FileNotFoundError, match="nope.onnx"):
        onnxl.align_external_data_streaming(tmp_path / "nope.onnx", tmp_path / "d.onnx", "d.data")


@pytest.mark.parametrize("broken", [("copy_file_range",), ("copy_file_range", "splice")])
def test_each_copy_fallback_end_to_end(tmp_path, monkeypatch, broken):
    model = make_every_kind_model()
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)

    def enosys(*a, **k):
        raise OSError(errno.ENOSYS, "nope")

    for name in broken:
        monkeypatch.setattr(os, name, enosys)
    onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", tmp_path / "d.onnx", "d.data", 4096, 1000
    )
    assert read_back(tmp_path / "d.onnx") == tensor_bytes(model)


def test_disk_full_leaves_nothing(tmp_path, monkeypatch):
    save_two_file(make_every_kind_model(), tmp_path / "m.onnx", size_threshold=0)
    onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "d.onnx", "d.data")
    digest = folder_digest(tmp_path)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "copy_file_range", full)
    monkeypatch.setattr(os, "splice", full)
    with pytest.raises(OSError, match="No space"):
        onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "d.onnx", "d.data", 64)
    assert folder_digest(tmp_path) == digest
    assert not any(n.endswith(_atomic.TMP_SUFFIX) for n in os.listdir(tmp_path))


def test_contiguous_tensors_copied_in_one_call(tmp_path, monkeypatch):
    """Tensors that follow on in source and destination form one run, copied at once;
    small runs are then batched: one read and one write for many."""
    model = make_every_kind_model()
    onnxl.save(model, tmp_path / "m.onnx", "m.data")  # dense
    real_runs, real_copy = _writer.runs, _copy.CopyEngine.copy
    found, copies = [], []

    def runs(unique):
        out = real_runs(unique)
        found.append(len(out))
        return out

    def copy(self, src, src_off, dst, dst_off, length, what):
        copies.append(length)
        return real_copy(self, src, src_off, dst, dst_off, length, what)

    monkeypatch.setattr(_writer, "runs", runs)
    monkeypatch.setattr(_copy.CopyEngine, "copy", copy)
    onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "d.onnx", "d.data", 1)
    assert found == [1], "dense to dense: one run"
    assert read_back(tmp_path / "d.onnx") == tensor_bytes(model)
    found.clear()
    copies.clear()
    onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "e.onnx", "e.data", 4096)
    # padding breaks runs: W0 (262144 bytes, a multiple of 4096) and B0 still follow on
    assert found == [len(external_offsets(tmp_path / "e.onnx")) - 1]
    # W0+B0 is one copy; the small runs after it go in a batch, not one copy each
    assert len(copies) < found[0]
    assert read_back(tmp_path / "e.onnx") == tensor_bytes(model)


def test_truncated_mid_run_names_the_tensor(tmp_path):
    model = make_every_kind_model()
    onnxl.save(model, tmp_path / "m.onnx", "m.data")  # dense: one run
    refs = external_offsets(tmp_path / "m.onnx")
    cut = refs[3][1] + 10  # inside the fourth tensor
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    name = [s.tensor.name for s in iter_tensors(meta) if is_external(s.tensor)][3]
    assert refs[3][1] > 4096

    def truncate(done, total):
        if os.path.getsize(tmp_path / "m.data") > cut:
            os.truncate(tmp_path / "m.data", cut)

    with pytest.raises(OSError, match=f"'{name}'.*ended early"):
        onnxl.align_external_data_streaming(
            tmp_path / "m.onnx",
            tmp_path / "d.onnx",
            "d.data",
            1,
            4096,
            options=onnxl.WriteOptions(progress=truncate),
        )
    assert sorted(os.listdir(tmp_path)) == ["m.data", "m.onnx"]


_ALIGN_PEAK = r"""
import sys
import onnx_light.onnx as onnxl
from benchmarks.harness import PeakMemory
with PeakMemory() as m:
    onnxl.align_external_data_streaming(sys.argv[1], sys.argv[2], "d.data", 4096)
print(m.growth, m.exact)
"""


def test_align_memory_does_not_grow_with_model(tmp_path):
    """Re-aligning 192 MiB of weights grows peak RSS by less than 8 MiB."""
    from benchmarks.harness import make_gemm_model

    save_two_file(make_gemm_model(48, 1024), tmp_path / "m.onnx")
    growth = peak_growth_in_subprocess(_ALIGN_PEAK, tmp_path / "m.onnx", tmp_path / "d.onnx")
    assert growth < 8 * 2**20
    assert os.path.getsize(tmp_path / "d.data") >= 192 * 2**20


def _tiny_tensors_model(n: int) -> onnx.ModelProto:
    """``n`` tensors of 12 bytes behind a 100-byte table: no tensor starts on a page."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.arange(25, dtype=np.float32), "table")]
    inits += [
        numpy_helper.from_array(rng.standard_normal(3, dtype=np.float32), f"t{i}") for i in range(n)
    ]
    graph = onnx.helper.make_graph([], "g", [], [], inits)
    return onnx.helper.make_model(graph)


@pytest.mark.parametrize("alignment", [64, 4096])
def test_thousands_of_tiny_tensors_in_few_system_calls(tmp_path, monkeypatch, alignment):
    """Small runs are batched: one read and one write per few megabytes, bytes unchanged."""
    model = _tiny_tensors_model(3000)
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    calls = {"pwrite": 0, "copy": 0}
    real_pwrite, real_copy = os.pwrite, _copy.CopyEngine.copy

    def pwrite(*a):
        calls["pwrite"] += 1
        return real_pwrite(*a)

    def copy(self, *a):
        calls["copy"] += 1
        return real_copy(self, *a)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(_copy.CopyEngine, "copy", copy)
    onnxl.align_external_data_streaming(
        tmp_path / "m.onnx", tmp_path / "d.onnx", "d.data", alignment
    )
    assert calls["pwrite"] + calls["copy"] < 20
    assert read_back(tmp_path / "d.onnx") == tensor_bytes(model)
    assert all(off % alignment == 0 for _, off, _ in external_offsets(tmp_path / "d.onnx"))


def test_batches_that_grow_keep_their_bytes_and_buffers_fit_them(tmp_path, monkeypatch):
    """The batch buffers grow with the batches (a few KiB first, then megabytes), never
    beyond what a batch needs: every tensor's bytes unchanged, padding zero."""
    from onnx_light.onnx._write import runs as _runs

    rng = np.random.default_rng(3)
    sizes = [12] * 20 + [70_000] + [40_000] * 60 + [300] * 10  # small, one run, large batch
    inits = [
        numpy_helper.from_array(rng.integers(0, 255, n, dtype=np.uint8), f"t{i}")
        for i, n in enumerate(sizes)
    ]
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [], inits))
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    seen = []
    real = _runs.Scratch.fit

    def fit(self, read, write):
        real(self, read, write)
        seen.append((read, write, len(self.read), len(self.write)))

    monkeypatch.setattr(_runs.Scratch, "fit", fit)
    onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "d.onnx", "d.data", 4096)
    assert read_back(tmp_path / "d.onnx") == tensor_bytes(model)
    first_read, first_write = seen[0][2], seen[0][3]  # 20 tensors of 12 bytes, 4096 apart
    assert first_read == 64 * 1024 and first_write == 128 * 1024
    assert max(s[3] for s in seen) > 1024 * 1024  # a later batch: megabytes
    assert all(
        r <= nr <= _runs.BATCH_BYTES and w <= nw <= _runs.BATCH_BYTES for r, w, nr, nw in seen
    )
    data = (tmp_path / "d.data").read_bytes()
    placed = sorted((off, n) for _, off, n in external_offsets(tmp_path / "d.onnx"))
    gaps = [(off + n, nxt) for (off, n), (nxt, _) in zip(placed, placed[1:])]
    assert all(data[end:nxt] == bytes(nxt - end) for end, nxt in gaps)  # padding is zeros


def test_truncated_source_in_a_batch_names_the_tensor(tmp_path, monkeypatch):
    """A source that ends early inside a batch names the first tensor whose bytes are missing."""
    from onnx_light.onnx._write import runs as _runs

    save_two_file(_tiny_tensors_model(50), tmp_path / "m.onnx", size_threshold=0)
    real = _runs.read_upto
    # the table (100 bytes) and t0..t9 (12 bytes each) are there, t10 is cut
    monkeypatch.setattr(
        _runs, "read_upto", lambda fd, buf, off: min(real(fd, buf, off), 100 + 12 * 10 + 5)
    )
    with pytest.raises(EOFError, match="'t10'"):
        onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "d.onnx", "d.data", 64)
    assert not (tmp_path / "d.onnx").exists()


_SPLICE_PEAK = """
import sys
from benchmarks.harness import PeakMemory
import onnx_light.onnx as onnxl
with PeakMemory() as m:
    opts = onnxl.WriteOptions(size_threshold=2**40)
    onnxl.align_external_data_streaming(sys.argv[1], sys.argv[2], "a.data", options=opts)
print(m.growth, m.exact)
"""


def test_inline_weights_kept_inline_are_spliced_not_read(tmp_path):
    """64 MiB of inline weights that stay inline: copied file to file, flat memory."""
    from helpers import peak_growth_in_subprocess

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.integers(0, 255, 16 * 2**20, dtype=np.uint8), f"W{i}")
        for i in range(4)
    ]
    model = helper.make_model(helper.make_graph([], "g", [], [], inits))
    onnx.save(model, str(tmp_path / "single.onnx"))
    growth = peak_growth_in_subprocess(_SPLICE_PEAK, tmp_path / "single.onnx", tmp_path / "a.onnx")
    assert growth < 8 * 2**20, f"{growth / 2**20:.1f} MiB"
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)
    assert not (tmp_path / "a.data").exists()
