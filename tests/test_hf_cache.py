"""Models in a Hugging Face hub cache: snapshots whose files are symlinks into blobs/.

Loaded, verified and re-aligned out as plain files, the cache untouched; a data
symlink that leaves both folders is still refused, and so is a variant that
would read blobs/ through a symlink; a single-file model linked into blobs/ is
saved self-contained.
"""

from __future__ import annotations

import os

import onnx
import pytest
from helpers import folder_digest, hf_snapshot, read_back, tensor_bytes
from helpers import uint8_model as _model

import onnx_light.onnx as onnxl
from onnx_light.cli import main

LAYOUTS = ["both-linked", "onnx-linked", "nested"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hf_snapshot_loads_and_aligns_out(tmp_path, layout, capsys):
    path, tensors = hf_snapshot(tmp_path, layout)
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
    path, _ = hf_snapshot(tmp_path, layout)
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
    path, _ = hf_snapshot(tmp_path, "both-linked")
    variant = onnxl.load(path, load_external_data=False)
    before = sorted(os.listdir(path.parent))
    with pytest.raises(onnxl.ExternalDataError, match="outside the model folder"):
        onnxl.save_model_with_shared_external_data(variant, path.parent / "variant.onnx")
    assert sorted(os.listdir(path.parent)) == before


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


@pytest.mark.parametrize("layout", ["both-linked", "onnx-linked"])
def test_hf_snapshot_in_place_is_refused_with_what_to_do(tmp_path, layout):
    """Re-aligning a cache's link onto itself: refused, saying why and what to do instead."""
    path, tensors = hf_snapshot(tmp_path, layout)
    cache_before = folder_digest(tmp_path / "models--org--name" / "blobs")
    with pytest.raises(onnxl.ExternalDataError) as info:
        onnxl.align_external_data_streaming(path, path)
    message = str(info.value)
    assert "is a symbolic link" in message and "into a folder of your own" in message
    assert "pass the source .onnx as the destination" not in message
    assert folder_digest(tmp_path / "models--org--name" / "blobs") == cache_before
    assert tensor_bytes(onnxl.load(path)) == tensors


@pytest.mark.parametrize("layout", LAYOUTS)
def test_hf_snapshot_converts_to_float16_out_and_not_in_place(tmp_path, layout):
    """The float16 converter reads a cache's links where they lead, writes plain files of
    its own (the uint8 weights copied as they are), and refuses to replace the cache's
    link, leaving the cache unchanged."""
    path, tensors = hf_snapshot(tmp_path, layout)
    cache_before = folder_digest(tmp_path / "models--org--name" / "blobs")
    out = tmp_path / "mine"
    out.mkdir()
    result = onnxl.convert_float_to_float16(path, out / "model.onnx")
    assert result.converted == 0 and read_back(out / "model.onnx") == tensors  # uint8 stays
    assert not any(os.path.islink(out / name) for name in os.listdir(out))
    onnx.checker.check_model(str(out / "model.onnx"))
    with pytest.raises(onnxl.ExternalDataError, match="symbolic link"):
        onnxl.convert_float_to_float16(path, path)
    assert folder_digest(tmp_path / "models--org--name" / "blobs") == cache_before
    assert tensor_bytes(onnxl.load(path)) == tensors
