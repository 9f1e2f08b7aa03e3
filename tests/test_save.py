"""save: one file, two files, alignment, kept or streamed references, atomicity.

Also: a model loaded with skip_raw_data saved elsewhere (the error says how), and
names that are not valid UTF-8 saved as they are.
"""

import os

import numpy as np
import onnx
import pytest
from helpers import (
    external_offsets,
    folder_digest,
    make_runnable_model,
    peak_growth_in_subprocess,
    read_back,
    run_ort,
    save_two_file,
    tensor_bytes,
)
from helpers import uint8_model as _model
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx import _pipeline
from onnx_light.onnx._write import shards as _shards


def _opts(**kw):
    opts = onnxl.SerializeOptions()
    for k, v in kw.items():
        setattr(opts, k, v)
    return opts


def test_options_are_checked():
    opts = onnxl.SerializeOptions()
    assert (opts.alignment, opts.size_threshold, opts.use_external_data_location) == (0, 1024, True)
    opts.alignment = 4096
    assert opts.alignment == 4096
    for bad, error in ((3, ValueError), (-4, ValueError), (1.0, TypeError), ("4096", TypeError)):
        with pytest.raises(error, match="alignment"):
            opts.alignment = bad
    with pytest.raises(ValueError, match="size_threshold"):
        opts.size_threshold = -1
    with pytest.raises(ValueError, match="num_threads"):
        opts.num_threads = 0


def test_one_file_round_trip(tmp_path, every_kind):
    before = every_kind.SerializeToString()
    onnxl.save(every_kind, tmp_path / "m.onnx")
    assert os.listdir(tmp_path) == ["m.onnx"]
    assert onnx.load(str(tmp_path / "m.onnx")).SerializeToString() == before
    assert every_kind.SerializeToString() == before


@pytest.mark.parametrize("alignment", [0, 1, 64, 4096, 65536])
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_two_files_aligned(tmp_path, every_kind, alignment, threads):
    before = every_kind.SerializeToString()
    onnxl.save(
        every_kind,
        tmp_path / "m.onnx",
        "w.data",
        options=_opts(alignment=alignment, num_threads=threads),
    )
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "w.data"]
    assert every_kind.SerializeToString() == before, "the caller's model changed"
    refs = external_offsets(tmp_path / "m.onnx")
    assert len(refs) == 11  # all but the 12-byte one and the 6 sparse ones (kept inline)
    step = max(alignment, 1)
    assert all(loc == "w.data" and off % step == 0 for loc, off, _ in refs)
    offsets = [off for _, off, _ in refs]
    assert offsets == sorted(offsets) and offsets[0] == 0, "walker order, first at 0"
    assert os.path.getsize(tmp_path / "w.data") == refs[-1][1] + refs[-1][2]
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(every_kind)


def test_onnxruntime_same_outputs(tmp_path, runnable):
    onnxl.save(runnable, tmp_path / "ref.onnx")
    expected = run_ort(tmp_path / "ref.onnx")
    onnxl.save(runnable, tmp_path / "m.onnx", "m.onnx.data", options=_opts(alignment=4096))
    got = run_ort(tmp_path / "m.onnx")
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)


def test_size_threshold(tmp_path, every_kind):
    onnxl.save(every_kind, tmp_path / "m.onnx", "w.data", options=_opts(size_threshold=1700))
    sizes = [n for _, _, n in external_offsets(tmp_path / "m.onnx")]
    assert sizes and min(sizes) >= 1700
    onnxl.save(every_kind, tmp_path / "z.onnx", "z.data", options=_opts(size_threshold=0))
    assert len(external_offsets(tmp_path / "z.onnx")) == 12  # sparse tensors stay inline


def test_location_with_folder(tmp_path, every_kind):
    (tmp_path / "weights").mkdir()
    onnxl.save(every_kind, tmp_path / "m.onnx", tmp_path / "weights" / "w.bin")
    assert {loc for loc, _, _ in external_offsets(tmp_path / "m.onnx")} == {"weights/w.bin"}
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(every_kind)


def test_location_outside_folder_is_refused_before_writing(tmp_path, every_kind):
    (tmp_path / "a").mkdir()
    with pytest.raises(ValueError, match="inside the model's folder"):
        onnxl.save(every_kind, tmp_path / "a" / "m.onnx", tmp_path / "w.data")
    assert os.listdir(tmp_path / "a") == [] and sorted(os.listdir(tmp_path)) == ["a"]


def test_over_protobuf_limit_asks_for_location(tmp_path, every_kind, monkeypatch):
    monkeypatch.setattr(_pipeline, "PROTOBUF_LIMIT", 10_000)
    with pytest.raises(ValueError, match="location"):
        onnxl.save(every_kind, tmp_path / "m.onnx")
    assert os.listdir(tmp_path) == []


def test_external_kept_verbatim(tmp_path, every_kind):
    onnxl.save(every_kind, tmp_path / "src.onnx", "src.onnx.data")
    meta = onnxl.load(tmp_path / "src.onnx", load_external_data=False)
    digest = folder_digest(tmp_path)
    onnxl.save(meta, tmp_path / "copy.onnx", "copy.data")
    assert external_offsets(tmp_path / "copy.onnx") == external_offsets(tmp_path / "src.onnx")
    assert not (tmp_path / "copy.data").exists(), "nothing new to write"
    assert {k: v for k, v in folder_digest(tmp_path).items() if k in digest} == digest
    assert read_back(tmp_path / "copy.onnx") == tensor_bytes(every_kind)


def test_external_kept_must_resolve_from_destination(tmp_path, every_kind):
    save_two_file(every_kind, tmp_path / "src.onnx")
    meta = onnxl.load(tmp_path / "src.onnx", load_external_data=False)
    (tmp_path / "other").mkdir()
    with pytest.raises(FileNotFoundError, match="src.onnx.data"):
        onnxl.save(meta, tmp_path / "other" / "m.onnx", "m.data")
    assert os.listdir(tmp_path / "other") == []


@pytest.mark.parametrize("threads", [1, 2])
def test_external_streamed_from_base_dir(tmp_path, every_kind, threads):
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    save_two_file(every_kind, tmp_path / "src" / "m.onnx", per_tensor=True)
    digest = folder_digest(tmp_path / "src")
    meta = onnxl.load(tmp_path / "src" / "m.onnx", load_external_data=False)
    opts = _opts(
        alignment=4096,
        use_external_data_location=False,
        base_dir=tmp_path / "src",
        num_threads=threads,
    )
    onnxl.save(meta, tmp_path / "dst" / "m.onnx", "m.data", options=opts)
    assert sorted(os.listdir(tmp_path / "dst")) == ["m.data", "m.onnx"]
    assert all(off % 4096 == 0 for _, off, _ in external_offsets(tmp_path / "dst" / "m.onnx"))
    assert read_back(tmp_path / "dst" / "m.onnx") == tensor_bytes(every_kind)
    assert folder_digest(tmp_path / "src") == digest


def test_skip_loaded_model_saved_elsewhere(tmp_path, every_kind):
    """A skip_raw_data model streams its bytes out of the source .onnx."""
    onnx.save(every_kind, str(tmp_path / "src.onnx"))
    meta = onnxl.load(tmp_path / "src.onnx", load_external_data=False, skip_raw_data=True)
    opts = _opts(use_external_data_location=False, base_dir=tmp_path, alignment=64)
    onnxl.save(meta, tmp_path / "out.onnx", "out.data", options=opts)
    assert read_back(tmp_path / "out.onnx") == tensor_bytes(every_kind)
    onnxl.save(meta, tmp_path / "single.onnx", options=opts)
    assert read_back(tmp_path / "single.onnx") == tensor_bytes(every_kind)


IN_PLACE_SAVES = [
    ("same location", "m.data", {}),
    ("another location", "w.data", {}),
    ("another alignment", "m.data", {"alignment": 4096}),
    ("bytes copied", "m.data", {"use_external_data_location": False, "alignment": 64}),
    ("shards", "m.data", {"max_shard_size": 4096}),
    ("single file", None, {}),
]


@pytest.mark.parametrize("case,location,kwargs", IN_PLACE_SAVES, ids=[c[0] for c in IN_PLACE_SAVES])
def test_save_in_place_over_the_files_it_was_loaded_from(
    tmp_path, every_kind, case, location, kwargs
):
    """load without the weights, edit the graph, save to the same path: as onnx.save does."""
    save_two_file(every_kind, tmp_path / "m.onnx", location="m.data")
    meta = onnxl.load(tmp_path / "m.onnx", load_external_data=False)
    meta.graph.doc_string = "edited"
    onnxl.save(meta, tmp_path / "m.onnx", location, options=_opts(**kwargs))
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(every_kind)
    assert onnx.load(tmp_path / "m.onnx").graph.doc_string == "edited"
    assert not [n for n in os.listdir(tmp_path) if "onnx-light" in n]
    if kwargs.get("alignment") == 4096:
        assert all(off % 4096 == 0 for _, off, _ in external_offsets(tmp_path / "m.onnx"))


def test_save_in_place_of_a_model_loaded_with_skip_raw_data(tmp_path, every_kind):
    onnxl.save(every_kind, tmp_path / "m.onnx")  # one file, its weights inline
    meta = onnxl.load(tmp_path / "m.onnx", load_external_data=False, skip_raw_data=True)
    onnxl.save(meta, tmp_path / "m.onnx")  # references into m.onnx itself: spliced back
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(every_kind)
    meta = onnxl.load(tmp_path / "m.onnx", load_external_data=False, skip_raw_data=True)
    onnxl.save(meta, tmp_path / "m.onnx", "m.data")  # moved out of the file they were in
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(every_kind)
    assert os.path.getsize(tmp_path / "m.data") > 0


def test_save_still_refuses_to_break_another_model(tmp_path, every_kind):
    save_two_file(every_kind, tmp_path / "m.onnx", location="m.data")
    digest = folder_digest(tmp_path)
    meta = onnxl.load(tmp_path / "m.onnx", load_external_data=False)
    # other.onnx would replace m.data, which m.onnx (not replaced) reads
    for opts in (_opts(), _opts(use_external_data_location=False, alignment=4096)):
        with pytest.raises(onnxl.ExternalDataError, match="overwrite.*align_external_data"):
            onnxl.save(meta, tmp_path / "other.onnx", "m.data", options=opts)
        assert folder_digest(tmp_path) == digest


def test_failure_leaves_nothing_and_keeps_existing_files(tmp_path, every_kind, monkeypatch):
    onnxl.save(make_runnable_model(seed=5), tmp_path / "m.onnx", "w.data")
    digest = folder_digest(tmp_path)

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_shards, "write_weights", boom)
    with pytest.raises(OSError, match="No space"):
        onnxl.save(every_kind, tmp_path / "m.onnx", "w.data")
    assert folder_digest(tmp_path) == digest


def test_missing_destination_folder(tmp_path, every_kind):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        onnxl.save(every_kind, tmp_path / "nope" / "m.onnx", "w.data")


def test_raw_data_not_matching_dims(tmp_path):
    t = onnx.numpy_helper.from_array(np.zeros(1000, np.float32), "bad")
    t.raw_data = t.raw_data[:-4]
    g = onnx.helper.make_graph([], "g", [], [], [t])
    with pytest.raises(ValueError, match="'bad'"):
        onnxl.save(onnx.helper.make_model(g), tmp_path / "m.onnx", "w.data")
    assert os.listdir(tmp_path) == []


def test_destination_is_a_folder(tmp_path, every_kind):
    (tmp_path / "d.onnx").mkdir()
    with pytest.raises(IsADirectoryError, match="d.onnx"):
        onnxl.save(every_kind, tmp_path / "d.onnx", "w.data")
    (tmp_path / "w.data").mkdir()
    with pytest.raises(IsADirectoryError, match="w.data"):
        onnxl.save(every_kind, tmp_path / "m.onnx", "w.data")
    assert sorted(os.listdir(tmp_path)) == ["d.onnx", "w.data"]


_SAVE_PEAK = r"""
import sys
import onnx_light.onnx as onnxl
from benchmarks.harness import PeakMemory, make_gemm_model
model = make_gemm_model(48, 1024)  # 192 MiB, tensors of 4 MiB
opts = onnxl.SerializeOptions(alignment=4096, num_threads=int(sys.argv[2]))
with PeakMemory() as m:
    onnxl.save(model, sys.argv[1], "w.data", options=opts)
print(m.growth, m.exact)
"""


@pytest.mark.parametrize("threads", [1, 4])
def test_save_memory_bounded_by_largest_tensor(tmp_path, threads):
    """save grows peak RSS by at most the largest tensor + 64 MiB, never the model size."""
    growth = peak_growth_in_subprocess(_SAVE_PEAK, tmp_path / "m.onnx", threads)
    assert growth <= 4 * 2**20 + 64 * 2**20
    assert os.path.getsize(tmp_path / "w.data") >= 192 * 2**20


def test_save_reports_progress(tmp_path):
    """save takes a progress callback as align does: monotonic, last call done == total."""
    model = make_runnable_model(seed=3)
    calls = []
    onnxl.save(
        model,
        tmp_path / "m.onnx",
        "m.data",
        options=onnxl.WriteOptions(progress=lambda d, t: calls.append((d, t))),
    )
    done = [d for d, _ in calls]
    assert calls and done == sorted(done) and calls[-1][0] == calls[-1][1] > 0
    calls.clear()
    onnxl.save(
        model,
        tmp_path / "one.onnx",
        options=onnxl.WriteOptions(progress=lambda d, t: calls.append((d, t))),
    )
    assert calls == [(0, 0)]
    with pytest.raises(TypeError, match="progress"):
        onnxl.save(model, tmp_path / "x.onnx", "x.data", options=onnxl.WriteOptions(progress=3))
    assert not (tmp_path / "x.onnx").exists()


def test_shared_save_options_are_keyword_only(tmp_path):
    model = make_runnable_model(seed=4)
    with pytest.raises(TypeError):
        onnxl.save_model_with_shared_external_data(
            model, tmp_path / "v.onnx", onnxl.SerializeOptions()
        )


def test_in_place_save_refuses_to_break_another_model_of_the_folder(tmp_path, every_kind):
    """A variant sharing m.data, or a view reading m.onnx's inline bytes: saving m.onnx
    in place over those files would break them; refused, nothing written."""
    save_two_file(every_kind, tmp_path / "m.onnx", location="m.data")
    meta = onnxl.load(tmp_path / "m.onnx", load_external_data=False)
    onnxl.save_model_with_shared_external_data(meta, tmp_path / "variant.onnx")
    digest = folder_digest(tmp_path)
    meta.graph.doc_string = "edited"
    with pytest.raises(onnxl.ExternalDataError, match="variant.onnx.*another model"):
        onnxl.save(meta, tmp_path / "m.onnx", "m.data")
    assert folder_digest(tmp_path) == digest
    onnxl.save(meta, tmp_path / "m.onnx", "m2.data")  # new weights: the variant keeps m.data
    assert read_back(tmp_path / "variant.onnx") == tensor_bytes(every_kind)

    one = tmp_path / "one"
    one.mkdir()
    onnxl.save(every_kind, one / "base.onnx")
    view = onnxl.load(one / "base.onnx", load_external_data=False, skip_raw_data=True)
    onnxl.save(view, one / "view.onnx")
    digest = folder_digest(one)
    with pytest.raises(onnxl.ExternalDataError, match="view.onnx.*another model"):
        onnxl.save(view, one / "base.onnx")
    assert folder_digest(one) == digest


def test_in_place_save_of_a_model_loaded_elsewhere_is_refused(tmp_path):
    """Its references name ranges the replaced model does not have: it was not loaded
    from there, and reading those ranges would take the replaced model's bytes."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    onnxl.save(make_runnable_model(seed=1), tmp_path / "a" / "m.onnx", "m.data",
               options=_opts(size_threshold=0, alignment=64))  # fmt: skip
    onnxl.save(make_runnable_model(seed=2), tmp_path / "b" / "m.onnx", "m.data",
               options=_opts(size_threshold=0, alignment=4096))  # fmt: skip
    digest = folder_digest(tmp_path / "b")
    meta = onnxl.load(tmp_path / "a" / "m.onnx", load_external_data=False)
    with pytest.raises(onnxl.ExternalDataError, match="not a tensor of"):
        onnxl.save(meta, tmp_path / "b" / "m.onnx", "m.data")
    assert folder_digest(tmp_path / "b") == digest


def test_skip_raw_data_model_saved_elsewhere(tmp_path):
    """The error says what to do; doing it gives one self-contained file."""
    model = _model(3, 5000)
    src = tmp_path / "src"
    src.mkdir()
    onnx.save(model, str(src / "single.onnx"))
    meta = onnxl.load(src / "single.onnx", load_external_data=False, skip_raw_data=True)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(FileNotFoundError, match="use_external_data_location = False.*base_dir"):
        onnxl.save(meta, out / "model.onnx")
    assert os.listdir(out) == []
    for base in (src, src / "single.onnx"):
        opts = onnxl.SerializeOptions(use_external_data_location=False, base_dir=base)
        onnxl.save(meta, out / "model.onnx", options=opts)
        assert os.listdir(out) == ["model.onnx"]
        assert tensor_bytes(onnx.load(str(out / "model.onnx"))) == tensor_bytes(model)


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


def test_default_num_threads_is_one_writer(tmp_path, monkeypatch):
    """SerializeOptions.num_threads=None writes the tensors held in memory with one
    thread (measured: more did not make a save faster)."""
    from benchmarks.harness import make_gemm_model
    from onnx_light.onnx._write import writer

    used = []
    real = writer._write_memory

    def spy(fd, jobs, threads, done):
        used.append(threads)
        return real(fd, jobs, threads, done)

    monkeypatch.setattr(writer, "_write_memory", spy)
    model = make_gemm_model(4, 256)
    onnxl.save(model, tmp_path / "a.onnx", location="a.onnx.data")
    onnxl.save(model, tmp_path / "b.onnx", location="b.onnx.data", options=_opts(num_threads=3))
    assert used == [1, 3]
