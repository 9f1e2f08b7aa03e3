"""Shards, as a user sees them: how many files, which tensor in which, and their names.

Cases the suite did not build (issue 31, item 3: mutants that survived): a
dense layout whose next shard fills up exactly (it starts at offset 0, so two
tensors fit where one plus a byte would not), onnx-ir shard names for
weights paths in a subfolder two levels down, hidden names, and dotted parts
that are or are not extensions, and the exporter's shard name an in-place
re-layout keeps (beside the model or in a subfolder).
"""

from __future__ import annotations

import os

import pytest
from helpers import external_offsets, read_back, tensor_bytes, uint8_model

import onnx_light.onnx as onnxl


def _save(model, path, location, **options):
    onnxl.save(model, path, location, options=onnxl.SerializeOptions(size_threshold=0, **options))


def test_a_new_dense_shard_starts_at_0_and_fills_up_exactly(tmp_path):
    """Tensors of 60, 50 and 50 bytes, dense, at most 100 bytes a file: the first alone
    (60 + 50 > 100), then the other two together, at 0 and 50 (50 + 50 = 100 fits)."""
    model = uint8_model(3, 50)
    model.graph.initializer[0].raw_data = bytes(range(60))
    model.graph.initializer[0].dims[:] = [60]
    _save(model, tmp_path / "m.onnx", "m.onnx.data", max_shard_size=100)
    assert external_offsets(tmp_path / "m.onnx") == [
        ("m-00001-of-00002.onnx.data", 0, 60),
        ("m-00002-of-00002.onnx.data", 0, 50),
        ("m-00002-of-00002.onnx.data", 50, 50),
    ]
    assert sorted(os.listdir(tmp_path)) == [
        "m-00001-of-00002.onnx.data",
        "m-00002-of-00002.onnx.data",
        "m.onnx",
    ]
    assert os.path.getsize(tmp_path / "m-00002-of-00002.onnx.data") == 100
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


# weights path -> the names of its two shards (onnx-ir's naming: the marker goes before
# the chain of extensions, an extension being a dot then a letter, then letters, digits
# or underscores; the folder is never part of the name)
NAMES = {
    "a/b/m.onnx.data": ["a/b/m-00001-of-00002.onnx.data", "a/b/m-00002-of-00002.onnx.data"],
    "a/b/.weights": ["a/b/.weights-00001-of-00002", "a/b/.weights-00002-of-00002"],
    "a/.weights": ["a/.weights-00001-of-00002", "a/.weights-00002-of-00002"],
    "m.onnx.1": ["m.onnx.1-00001-of-00002", "m.onnx.1-00002-of-00002"],
    "m.bin-part": ["m.bin-part-00001-of-00002", "m.bin-part-00002-of-00002"],
    "m.v2": ["m-00001-of-00002.v2", "m-00002-of-00002.v2"],
    "m.w_2.data": ["m-00001-of-00002.w_2.data", "m-00002-of-00002.w_2.data"],
}


@pytest.mark.parametrize("location", NAMES)
def test_onnx_ir_shard_names(tmp_path, location):
    """Two tensors of 3000 bytes, at most 4000 a file: two shards, named from the weights
    path as listed, in its folder; every byte reads back."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    model = uint8_model(2, 3000)
    _save(model, tmp_path / "m.onnx", location, max_shard_size=4000)
    assert [loc for loc, _, _ in external_offsets(tmp_path / "m.onnx")] == NAMES[location]
    assert all((tmp_path / name).is_file() for name in NAMES[location])
    assert read_back(tmp_path / "m.onnx") == tensor_bytes(model)


@pytest.mark.parametrize("folder", ["", "w/"], ids=["beside", "subfolder"])
def test_in_place_relayout_keeps_the_exporters_shard_name(tmp_path, folder):
    """Four onnx-ir shards of ``weights.bin`` (in the model's folder, or in ``w/``) re-laid
    in place into two, no weights name given: the new shards keep the name they derive
    from, ``weights-0000k-of-00002.bin`` in the same folder (not the default
    ``m.onnx.data``); the old four are left over, listed."""
    (tmp_path / "w").mkdir()
    model = uint8_model(4, 3000)
    path = tmp_path / "m.onnx"
    _save(model, path, folder + "weights.bin", max_shard_size=4000)
    old = [f"{folder}weights-{i:05d}-of-00004.bin" for i in range(1, 5)]
    assert sorted({loc for loc, _, _ in external_offsets(path)}) == old
    result = onnxl.align_external_data_streaming(path, path, max_shard_size=8000)
    new = [f"{folder}weights-00001-of-00002.bin", f"{folder}weights-00002-of-00002.bin"]
    assert sorted({loc for loc, _, _ in external_offsets(path)}) == new
    assert result.unreferenced == [str(tmp_path / name) for name in old]
    assert read_back(path) == tensor_bytes(model)
