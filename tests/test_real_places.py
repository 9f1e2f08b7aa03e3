"""Models where users keep them (issue 10): Hugging Face cache snapshots, and
weights locations relative to the destination model, as onnx means them.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from conftest import folder_digest, read_back, save_two_file, tensor_bytes, uint8_model
from onnx import helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.cli import main


def _model(n: int = 3, size: int = 5000, seed: int = 0) -> onnx.ModelProto:
    return uint8_model(n, size, seed)


def _hf_snapshot(root, layout: str):
    """A Hugging Face hub cache: snapshots/<rev>/onnx/model.onnx (+ model.onnx_data).

    ``layout``: "both-linked" (both files symlinks into blobs/), "onnx-linked"
    (the .onnx a symlink, the data a plain file beside it) or "nested" (both
    linked, one folder deeper).
    """
    model = _model()
    work = root / "work"
    work.mkdir()
    save_two_file(model, work / "model.onnx", location="model.onnx_data", size_threshold=0)
    repo = root / "models--org--name"
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    sub = "onnx/decoder" if layout == "nested" else "onnx"
    snap = repo / "snapshots" / "0123abcd" / sub
    snap.mkdir(parents=True)
    up = os.path.relpath(blobs, snap)
    os.replace(work / "model.onnx", blobs / "aaaa1111")
    os.symlink(os.path.join(up, "aaaa1111"), snap / "model.onnx")
    if layout == "onnx-linked":
        os.replace(work / "model.onnx_data", snap / "model.onnx_data")
    else:
        os.replace(work / "model.onnx_data", blobs / "bbbb2222")
        os.symlink(os.path.join(up, "bbbb2222"), snap / "model.onnx_data")
    return snap / "model.onnx", tensor_bytes(model)


LAYOUTS = ["both-linked", "onnx-linked", "nested"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hf_snapshot_loads_and_aligns_out(tmp_path, layout, capsys):
    path, tensors = _hf_snapshot(tmp_path, layout)
    cache_before = folder_digest(tmp_path / "models--org--name" / "blobs")
    assert tensor_bytes(onnxl.load(path)) == tensors
    out = tmp_path / "mine"
    out.mkdir()
    onnxl.align_external_data_streaming(path, out / "model.onnx", "model.onnx.data")
    assert read_back(out / "model.onnx") == tensors
    assert not any(os.path.islink(out / name) for name in os.listdir(out))  # plain files
    assert main(["verify", str(path)]) == 0
    assert main(["info", str(path)]) == 0
    assert main(["align", str(path), str(out / "cli.onnx"), "-q"]) == 0
    assert read_back(out / "cli.onnx") == tensors
    assert folder_digest(tmp_path / "models--org--name" / "blobs") == cache_before
    capsys.readouterr()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hf_snapshot_still_refuses_escapes(tmp_path, layout):
    """A data symlink that leaves both folders is refused, as before."""
    path, _ = _hf_snapshot(tmp_path, layout)
    secret = tmp_path / "secret"
    secret.write_bytes(bytes(5000 * 3))
    data = path.parent / "model.onnx_data"
    os.unlink(data)
    os.symlink(secret, data)
    with pytest.raises(onnxl.ExternalDataError, match="outside the model folder.*real path"):
        onnxl.load(path)
    with pytest.raises(onnxl.ExternalDataError, match="outside"):
        onnxl.align_external_data_streaming(path, tmp_path / "a.onnx", "a.data")


def test_hf_snapshot_variant_cannot_share_cache_weights(tmp_path):
    """A variant saved in the snapshot folder would read blobs/ through a symlink,
    which no reader accepts from a plain .onnx: refused before writing."""
    path, _ = _hf_snapshot(tmp_path, "both-linked")
    variant = onnxl.load(path, load_external_data=False)
    before = sorted(os.listdir(path.parent))
    with pytest.raises(onnxl.ExternalDataError, match="outside the model folder"):
        onnxl.save_model_with_shared_external_data(variant, path.parent / "variant.onnx")
    assert sorted(os.listdir(path.parent)) == before


# -- relative weights locations -----------------------------------------------------------


@pytest.mark.parametrize("how", ["save", "align", "cli"])
def test_relative_location_is_relative_to_the_model_folder(tmp_path, monkeypatch, how):
    """``sub/b.bin`` lands in <model folder>/sub/b.bin whatever the working directory."""
    model = _model()
    src = tmp_path / "src"
    src.mkdir()
    save_two_file(model, src / "m.onnx", size_threshold=0)
    dst = tmp_path / "x"
    (dst / "sub").mkdir(parents=True)
    elsewhere = tmp_path / "cwd"
    (elsewhere / "sub").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    if how == "save":
        onnxl.save(onnxl.load(src / "m.onnx"), dst / "b.onnx", "sub/b.bin")
    elif how == "align":
        onnxl.align_external_data_streaming(src / "m.onnx", dst / "b.onnx", "sub/b.bin")
    else:
        assert (
            main(["align", str(src / "m.onnx"), str(dst / "b.onnx"), "--weights", "sub/b.bin"]) == 0
        )
    assert (dst / "sub" / "b.bin").is_file() and os.listdir(elsewhere / "sub") == []
    assert read_back(dst / "b.onnx") == tensor_bytes(model)
    # the location recorded is the one onnx.save would record
    location = onnx.load(str(dst / "b.onnx"), load_external_data=False).graph.initializer[0]
    assert {e.key: e.value for e in location.external_data}["location"] == "sub/b.bin"


def test_location_outside_names_both_paths(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(
        ValueError, match=r"'\.\./w\.bin' is '.*/w\.bin'.*inside the model's folder"
    ):
        onnxl.save(_model(), tmp_path / "x" / "b.onnx", "../w.bin")
    assert sorted(os.listdir(tmp_path)) == ["x"] and os.listdir(tmp_path / "x") == []


# -- single-file models --------------------------------------------------------------------


def test_single_file_cli_moves_inline_tensors(tmp_path, capsys):
    model = _model(3, 5000)
    onnx.save(model, str(tmp_path / "single.onnx"))
    assert main(["align", str(tmp_path / "single.onnx"), str(tmp_path / "a.onnx")]) == 0
    out = capsys.readouterr().out
    assert "3 tensors" in out and "1024 bytes or more" in out and "single-file" in out
    assert os.path.getsize(tmp_path / "a.onnx.data") > 3 * 5000
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)


def test_nothing_to_move_writes_no_weights_file(tmp_path, capsys):
    small = helper.make_model(
        helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(8, np.float32), "s")])
    )
    onnx.save(small, str(tmp_path / "small.onnx"))
    assert main(["align", str(tmp_path / "small.onnx"), str(tmp_path / "a.onnx")]) == 0
    out = capsys.readouterr().out
    assert "no tensor" in out and "no weights file" in out
    assert not (tmp_path / "a.onnx.data").exists()
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(small)


_SPLICE_PEAK = """
import sys
from onnx_light.bench import PeakMemory
import onnx_light.onnx as onnxl
with PeakMemory() as m:
    onnxl.align_external_data_streaming(sys.argv[1], sys.argv[2], "a.data", size_threshold=2**40)
print(m.growth, m.exact)
"""


def test_inline_weights_kept_inline_are_spliced_not_read(tmp_path):
    """64 MiB of inline weights that stay inline: copied file to file, flat memory."""
    from conftest import peak_growth_in_subprocess

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


def test_skip_raw_data_model_from_hf_cache_saved_self_contained(tmp_path):
    """A single-file model symlinked into blobs/: base_dir names the .onnx, as load would read it."""
    model = _model(3, 5000)
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    onnx.save(model, str(blobs / "cafe"))
    snap = tmp_path / "snapshots" / "rev"
    snap.mkdir(parents=True)
    os.symlink("../../blobs/cafe", snap / "model.onnx")
    meta = onnxl.load(snap / "model.onnx", load_external_data=False, skip_raw_data=True)
    opts = onnxl.SerializeOptions(use_external_data_location=False, base_dir=snap / "model.onnx")
    onnxl.save(meta, tmp_path / "mine.onnx", options=opts)
    assert tensor_bytes(onnx.load(str(tmp_path / "mine.onnx"))) == tensor_bytes(model)


# -- sparse tensors, mixed fields, grouped problems ------------------------------------------


def _sparse_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    values = numpy_helper.from_array(rng.standard_normal(600).astype(np.float32), "sv")
    indices = numpy_helper.from_array(np.arange(0, 1200, 2, dtype=np.int64), "si")
    sparse = helper.make_sparse_tensor(values, indices, [1200])
    dense = numpy_helper.from_array(rng.standard_normal(600).astype(np.float32), "dense")
    graph = helper.make_graph([], "g", [], [], [dense], sparse_initializer=[sparse])
    return helper.make_model(graph)


@pytest.mark.parametrize("how", ["save", "align"])
def test_sparse_tensors_stay_inline(tmp_path, how):
    """onnx never stores sparse tensors externally (its checker cannot read them): neither do we."""
    model = _sparse_model()
    onnx.save(model, str(tmp_path / "single.onnx"))
    if how == "save":
        onnxl.save(
            model, tmp_path / "m.onnx", "m.data", options=onnxl.SerializeOptions(size_threshold=0)
        )
    else:
        onnxl.align_external_data_streaming(
            tmp_path / "single.onnx", tmp_path / "m.onnx", "m.data", size_threshold=0
        )
    saved = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert saved.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    sparse = saved.graph.sparse_initializer[0]
    assert sparse.values.data_location != onnx.TensorProto.EXTERNAL
    assert sparse.indices.data_location != onnx.TensorProto.EXTERNAL
    onnx.checker.check_model(str(tmp_path / "m.onnx"))
    assert tensor_bytes(onnx.load(str(tmp_path / "m.onnx"))) == tensor_bytes(model)


@pytest.mark.parametrize("how", ["save", "align"])
def test_raw_data_with_a_typed_field_is_refused_when_moved(tmp_path, how):
    t = numpy_helper.from_array(np.arange(600, dtype=np.float32), "both")
    t.float_data.extend([1.0, 2.0])  # now raw_data and float_data
    model = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    onnx.save(model, str(tmp_path / "single.onnx"))
    with pytest.raises(onnxl.ExternalDataError, match="'both'.*raw_data and float_data"):
        if how == "save":
            onnxl.save(model, tmp_path / "m.onnx", "m.data")
        else:
            onnxl.align_external_data_streaming(
                tmp_path / "single.onnx", tmp_path / "m.onnx", "m.data"
            )
    assert sorted(os.listdir(tmp_path)) == ["single.onnx"]
    # kept inline, it is the caller's own business, as in onnx
    onnxl.save(model, tmp_path / "one.onnx")
    onnxl.align_external_data_streaming(
        tmp_path / "single.onnx", tmp_path / "a.onnx", "a.data", size_threshold=2**30
    )


def test_verify_groups_problems_by_cause(tmp_path, capsys):
    model = _model(20, 2000)
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    os.remove(tmp_path / "m.onnx.data")
    assert main(["verify", str(tmp_path / "m.onnx")]) == 1
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 1 and "20 tensors ('W0'" in lines[0] and "and 17 more" in lines[0]
    assert "does not exist" in lines[0]


def test_model_link_swapped_after_open_does_not_widen_the_folder(tmp_path, monkeypatch):
    """The real path of the model is taken when it is opened: a link swapped to ``/x`` after
    that cannot make ``/`` the folder data may lie in."""
    from onnx_light.onnx import _sources

    secret = tmp_path / "secret"
    secret.write_bytes(b"TOPSECRET!" * 100)
    folder = tmp_path / "m"
    folder.mkdir()
    t = onnx.TensorProto(name="w", data_type=onnx.TensorProto.UINT8, dims=[1000])
    t.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "leak"), ("offset", "0"), ("length", "1000")):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    onnx.save(helper.make_model(helper.make_graph([], "g", [], [], [t])), str(folder / "real.onnx"))
    os.symlink(secret, folder / "leak")
    os.symlink("real.onnx", folder / "model.onnx")
    real_model = _sources.SourceFiles.model

    def swap_after_open(self, path):
        source = real_model(self, path)
        os.unlink(folder / "model.onnx")
        os.symlink("/nonexistent-x.onnx", folder / "model.onnx")
        return source

    monkeypatch.setattr(_sources.SourceFiles, "model", swap_after_open)
    with pytest.raises(onnxl.ExternalDataError, match="'w'.*outside"):
        onnxl.load(folder / "model.onnx")


def test_inline_tensor_of_odd_length_stays_inline(tmp_path):
    """onnx accepts an inline raw_data that does not match dtype x dims: kept inline, it is
    copied as it is; moved to external data, it is refused (a reader would refuse it)."""
    t = onnx.TensorProto(name="odd", data_type=onnx.TensorProto.FLOAT, dims=[600])
    t.raw_data = bytes(2000)  # 2400 expected
    model = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    onnx.save(model, str(tmp_path / "single.onnx"))
    onnxl.align_external_data_streaming(
        tmp_path / "single.onnx", tmp_path / "a.onnx", "a.data", size_threshold=10**9
    )
    assert onnx.load(str(tmp_path / "a.onnx")).graph.initializer[0].raw_data == bytes(2000)
    with pytest.raises(onnxl.ExternalDataError, match="'odd'.*does not match"):
        onnxl.align_external_data_streaming(tmp_path / "single.onnx", tmp_path / "b.onnx", "b.data")
