"""Re-aligning in place: the exporter's names kept, nothing written when nothing would change.

A model re-aligned in place without a weights name keeps the name of the
weights file (or of the shards, and their naming) it has, as exporters wrote
it, unless another model reads that file; a dedup in place does too. A model
already as the align would write it is left alone (same inodes, same bytes),
unless asked to rewrite or given other settings; one that only differs in how
its entries are written is rewritten.
"""

from __future__ import annotations

import os
import shutil

import onnx
import pytest
from helpers import (
    external_offsets,
    folder_digest,
    make_runnable_model,
    read_back,
    run_cli,
    save_two_file,
    tensor_bytes,
    uint8_model,
)

import onnx_light.onnx as onnxl

KiB = 1024


@pytest.mark.parametrize("how", ["api", "cli"])
def test_in_place_keeps_the_weights_name_the_model_has(tmp_path, capsys, how):
    """optimum's model.onnx + model.onnx_data, re-aligned in place without a weights name:
    the data keeps its name (it used to become model.onnx.data, doubling the disk use
    until --prune)."""
    model = make_runnable_model(seed=3)
    save_two_file(model, tmp_path / "model.onnx", location="model.onnx_data")
    path = tmp_path / "model.onnx"
    if how == "api":
        result = onnxl.align_external_data_streaming(path, path, alignment=65536)
        assert result.weights_paths == [str(tmp_path / "model.onnx_data")]
        assert result.unreferenced == []
    else:
        code, _, err = run_cli(capsys, "align", path, path, "--alignment", "64K")
        assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == ["model.onnx", "model.onnx_data"]
    assert {loc for loc, _, _ in external_offsets(path)} == {"model.onnx_data"}
    assert all(off % 65536 == 0 for _, off, _ in external_offsets(path))
    assert read_back(path) == tensor_bytes(model)


def test_in_place_keeps_the_shard_names_and_naming(tmp_path):
    """Shards named as transformers.js names them stay so, re-sharded in place."""
    model = make_runnable_model(seed=4)
    opts = onnxl.SerializeOptions(
        size_threshold=0, max_shard_size=8 * KiB, shard_naming="transformers.js"
    )
    onnxl.save(model, tmp_path / "model.onnx", "model.onnx_data", options=opts)
    before = sorted(os.listdir(tmp_path))
    assert "model.onnx_data_1" in before
    path = tmp_path / "model.onnx"
    result = onnxl.align_external_data_streaming(path, path, alignment=0, max_shard_size=8 * KiB)
    assert sorted(os.listdir(tmp_path)) == before and result.unreferenced == []
    assert read_back(path) == tensor_bytes(model)


def test_in_place_names_a_new_file_when_another_model_reads_the_old_one(tmp_path):
    """The name stays only when nothing else reads the file: a variant sharing it keeps it."""
    model = make_runnable_model(seed=5)
    save_two_file(model, tmp_path / "model.onnx", location="model.onnx_data")
    shutil.copy(tmp_path / "model.onnx", tmp_path / "variant.onnx")
    path = tmp_path / "model.onnx"
    result = onnxl.align_external_data_streaming(path, path)
    assert result.weights_paths == [str(tmp_path / "model.onnx.data")]
    assert read_back(tmp_path / "variant.onnx") == tensor_bytes(model)
    assert read_back(path) == tensor_bytes(model)


def test_dedup_in_place_keeps_the_weights_name(tmp_path, capsys):
    model = make_runnable_model(seed=6)
    save_two_file(model, tmp_path / "model.onnx", location="model.onnx_data")
    path = tmp_path / "model.onnx"
    code, _, err = run_cli(capsys, "dedup", path, "--in-place")
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == ["model.onnx", "model.onnx_data"]
    assert read_back(path) == tensor_bytes(model)


@pytest.mark.parametrize("how", ["api", "cli"])
def test_re_aligning_an_aligned_model_in_place_writes_nothing(tmp_path, capsys, how):
    """The second in-place align finds the files as it would write them: nothing is
    written (the files keep their inode and bytes), unless asked to rewrite."""
    model = make_runnable_model(seed=8)
    save_two_file(model, tmp_path / "model.onnx", location="model.onnx_data")
    path = tmp_path / "model.onnx"
    onnxl.align_external_data_streaming(path, path, alignment=4096)
    before = folder_digest(tmp_path)
    inodes = {n: os.stat(tmp_path / n).st_ino for n in os.listdir(tmp_path)}
    if how == "api":
        result = onnxl.align_external_data_streaming(path, path, alignment=4096)
        assert result.rewritten is False and result.weights_paths == [str(path) + "_data"]
    else:
        code, out, err = run_cli(capsys, "align", path, path)
        assert code == 0, err
        assert "is already as this align would write it" in out and "nothing written" in out
    assert folder_digest(tmp_path) == before
    assert {n: os.stat(tmp_path / n).st_ino for n in os.listdir(tmp_path)} == inodes
    # another alignment, or --rewrite: written again
    again = onnxl.align_external_data_streaming(path, path, alignment=4096, rewrite=True)
    assert again.rewritten is True and os.stat(path).st_ino != inodes["model.onnx"]
    other = onnxl.align_external_data_streaming(path, path, alignment=65536)
    assert other.rewritten is True
    assert all(off % 65536 == 0 for _, off, _ in external_offsets(path))
    assert read_back(path) == tensor_bytes(model)


def test_a_model_aligned_but_with_other_entries_is_rewritten(tmp_path):
    """Same offsets, but an offset written '0004096': the entries differ, so it is rewritten."""
    model = make_runnable_model(seed=9)
    save_two_file(model, tmp_path / "m.onnx")
    path = tmp_path / "m.onnx"
    onnxl.align_external_data_streaming(path, path, alignment=4096)
    meta = onnx.load(str(path), load_external_data=False)
    for t in meta.graph.initializer:
        for e in t.external_data:
            if e.key == "offset" and e.value != "0":
                e.value = "000" + e.value
    onnx.save(meta, str(path))
    result = onnxl.align_external_data_streaming(path, path, alignment=4096)
    assert result.rewritten is True
    assert not any(
        e.value.startswith("0") and e.value != "0"
        for t in onnx.load(str(path), load_external_data=False).graph.initializer
        for e in t.external_data
        if e.key == "offset"
    )


@pytest.mark.parametrize("folder", ["", "w/"], ids=["beside", "subfolder"])
def test_in_place_relayout_keeps_the_exporters_shard_name(tmp_path, folder):
    """Four onnx-ir shards of ``weights.bin`` (in the model's folder, or in ``w/``) re-laid
    in place into two, no weights name given: the new shards keep the name they derive
    from, ``weights-0000k-of-00002.bin`` in the same folder (not the default
    ``m.onnx.data``); the old four are left over, listed."""
    (tmp_path / "w").mkdir()
    model = uint8_model(4, 3000)
    path = tmp_path / "m.onnx"
    opts = onnxl.SerializeOptions(size_threshold=0, max_shard_size=4000)
    onnxl.save(model, path, folder + "weights.bin", options=opts)
    old = [f"{folder}weights-{i:05d}-of-00004.bin" for i in range(1, 5)]
    assert sorted({loc for loc, _, _ in external_offsets(path)}) == old
    result = onnxl.align_external_data_streaming(path, path, max_shard_size=8000)
    new = [f"{folder}weights-00001-of-00002.bin", f"{folder}weights-00002-of-00002.bin"]
    assert sorted({loc for loc, _, _ in external_offsets(path)}) == new
    assert result.unreferenced == [str(tmp_path / name) for name in old]
    assert read_back(path) == tensor_bytes(model)
