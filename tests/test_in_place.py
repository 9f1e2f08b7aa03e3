"""Re-aligning in place: the exporter's names kept, nothing written when nothing would change.

A model re-aligned in place without a weights name keeps the name of the
weights file (or of the shards, and their naming) it has, as exporters wrote
it, unless another model reads that file or bytes no tensor reads any more
would be dropped (those stay, in the old file, listed); a dedup in place does
too. ``X`` and ``X_1`` are two files, not transformers.js shards. A model
already as the align would write it is left alone (same inodes, same bytes),
unless asked to rewrite or given other settings; one that only differs in how
its entries are written, holds junk in its padding, reads its weights through
a link or holds external sparse values is rewritten.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
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
from onnx import helper, numpy_helper

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
    result = onnxl.align_external_data_streaming(
        path, path, alignment=0, options=onnxl.WriteOptions(max_shard_size=8 * KiB)
    )
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
    result = onnxl.align_external_data_streaming(
        path, path, options=onnxl.WriteOptions(max_shard_size=8000)
    )
    new = [f"{folder}weights-00001-of-00002.bin", f"{folder}weights-00002-of-00002.bin"]
    assert sorted({loc for loc, _, _ in external_offsets(path)}) == new
    assert result.unreferenced == [str(tmp_path / name) for name in old]
    assert read_back(path) == tensor_bytes(model)


# -- an in-place re-align that drops no byte ----------------------------------------------


def test_in_place_keeps_bytes_no_tensor_reads(tmp_path):
    """weights.bin holds W0 and W1; the model (cut by an edit) reads W0 only. An in-place
    re-align keeps the weights file's name only when no byte of it would be dropped: here
    W1's bytes stay, in the old file, listed as unreferenced."""
    model = uint8_model(2, 4096)
    save_two_file(model, tmp_path / "m.onnx", location="weights.bin", size_threshold=0)
    cut = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    del cut.graph.initializer[1]
    onnx.save(cut, str(tmp_path / "m.onnx"))
    before = folder_digest(tmp_path)["weights.bin"]
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx")
    assert folder_digest(tmp_path)["weights.bin"] == before  # W1's bytes are still there
    assert result.unreferenced == [str(tmp_path / "weights.bin")]
    assert result.weights_paths == [str(tmp_path / "m.onnx.data")]
    # with only padding besides the tensors read, the name is kept (nothing lost)
    whole = tmp_path / "whole"
    whole.mkdir()
    save_two_file(model, whole / "m.onnx", location="weights.bin", size_threshold=0)
    again = onnxl.align_external_data_streaming(whole / "m.onnx", whole / "m.onnx")
    assert again.weights_paths == [str(whole / "weights.bin")] and again.unreferenced == []


def test_x_and_x_1_are_not_transformers_js_shards(tmp_path):
    """``weights.bin`` and ``weights.bin_1`` are two files, not transformers.js shards of
    one: an in-place re-align without a weights name writes ``m.onnx.data``, every byte
    kept."""
    model = uint8_model(2, 3000)
    save_two_file(model, tmp_path / "m.onnx", location="weights.bin", size_threshold=0)
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    entries = {e.key: e for e in meta.graph.initializer[1].external_data}
    with open(tmp_path / "weights.bin", "rb") as f:
        f.seek(int(entries["offset"].value))
        (tmp_path / "weights.bin_1").write_bytes(f.read(3000))
    entries["location"].value, entries["offset"].value = "weights.bin_1", "0"
    onnx.save(meta, str(tmp_path / "m.onnx"))
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx")
    assert result.weights_paths == [str(tmp_path / "m.onnx.data")]
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


# -- what is not "already aligned" -------------------------------------------------------


def _aligned(folder):
    model = uint8_model(2, 3000)
    save_two_file(model, folder / "m.onnx", location="w.data", size_threshold=0)
    onnxl.align_external_data_streaming(folder / "m.onnx", folder / "m.onnx", "w.data")
    return model


def test_junk_in_the_padding_is_rewritten(tmp_path):
    """An aligned model whose padding holds bytes other than zeros is not "already
    aligned": the in-place align rewrites it, zeros in the padding."""
    model = _aligned(tmp_path)
    with open(tmp_path / "w.data", "r+b") as f:
        f.seek(3000)
        f.write(b"junk")  # between W0 (0..3000) and W1 (at 4096)
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx", "w.data")
    assert result.rewritten is True
    with open(tmp_path / "w.data", "rb") as f:
        f.seek(3000)
        assert f.read(1096) == bytes(1096)
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


def test_a_weights_file_that_is_a_link_is_rewritten_as_a_file(tmp_path):
    """An aligned model whose weights file is a symbolic link is rewritten in place as a
    plain file, which onnx loads."""
    model = _aligned(tmp_path)
    os.rename(tmp_path / "w.data", tmp_path / "blob")
    os.symlink("blob", tmp_path / "w.data")
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx", "w.data")
    assert result.rewritten is True and not os.path.islink(tmp_path / "w.data")
    assert tensor_bytes(onnx.load(str(tmp_path / "m.onnx"))) == tensor_bytes(model)


def test_an_aligned_model_with_external_sparse_values_is_rewritten(tmp_path):
    """An aligned model whose sparse values were made external (onnx never loads them so)
    is not "already aligned": the in-place align brings them back inline."""
    dense = np.zeros((64, 64), np.float32)
    dense[0, :] = 1
    flat = np.flatnonzero(dense)
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(dense.flat[flat].astype(np.float32), "S"),
        numpy_helper.from_array(flat.astype(np.int64), "S_idx"),
        [64, 64],
    )
    w = numpy_helper.from_array(np.ones(1024, np.float32), "W")
    model = helper.make_model(helper.make_graph([], "g", [], [], [w], sparse_initializer=[sparse]))
    onnx.save(model, str(tmp_path / "m.onnx"))
    onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx", "w.data")
    meta = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    values = meta.graph.sparse_initializer[0].values  # made external by hand, at a free range
    data = numpy_helper.to_array(values).tobytes()
    with open(tmp_path / "w.data", "ab") as f:
        offset = f.tell()
        f.write(data)
    values.ClearField("raw_data")
    values.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", "w.data"), ("offset", str(offset)), ("length", str(len(data)))):
        values.external_data.add(key=key, value=value)
    onnx.save(meta, str(tmp_path / "m.onnx"))
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "m.onnx", "w.data")
    assert result.rewritten is True
    after = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert not after.graph.sparse_initializer[0].values.external_data  # inline, as onnx wants
