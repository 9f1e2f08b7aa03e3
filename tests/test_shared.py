"""save_model_with_shared_external_data: a variant reusing the first model's weights."""

import os
import shutil

import numpy as np
import onnx
import pytest
from helpers import DIM, external_offsets, folder_digest, make_runnable_model, read_back, run_ort
from onnx import numpy_helper

import onnx_light.onnx as onnxl


@pytest.fixture
def first(tmp_path):
    """A first model saved with its weights in base.data."""
    onnxl.save(make_runnable_model(), tmp_path / "base.onnx", "base.data")
    return tmp_path / "base.onnx"


def _variant(first):
    """The first model with a new head: W0 replaced by new inline weights."""
    model = onnxl.load(first, load_external_data=False)
    new = np.full((DIM, DIM), 0.01, np.float32)
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(new, "W0"))
    return model, new


def test_variant_writes_only_new_weights(tmp_path, first):
    digest = folder_digest(tmp_path)
    model, new = _variant(first)
    opts = onnxl.SerializeOptions(alignment=4096)
    n = onnxl.save_model_with_shared_external_data(model, tmp_path / "variant.onnx", options=opts)
    assert n == new.nbytes == os.path.getsize(tmp_path / "variant.onnx.data")
    assert {k: v for k, v in folder_digest(tmp_path).items() if k in digest} == digest
    refs = external_offsets(tmp_path / "variant.onnx")
    assert ("variant.onnx.data", 0, new.nbytes) in refs
    assert sum(loc == "base.data" for loc, _, _ in refs) == len(refs) - 1
    # the caller's model now points at the new file
    t = model.graph.initializer[0]
    assert t.data_location == onnx.TensorProto.EXTERNAL and not t.HasField("raw_data")
    # onnx and onnxruntime read the variant
    loaded = onnx.load(str(tmp_path / "variant.onnx"))
    np.testing.assert_array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), new)
    expected = make_runnable_model()
    expected.graph.initializer[0].CopyFrom(numpy_helper.from_array(new, "W0"))
    onnx.save(expected, str(tmp_path / "expected.onnx"))
    for a, b in zip(run_ort(tmp_path / "expected.onnx"), run_ort(tmp_path / "variant.onnx")):
        np.testing.assert_array_equal(a, b)


def test_nothing_new_creates_no_file(tmp_path, first):
    model = onnxl.load(first, load_external_data=False)
    assert onnxl.save_model_with_shared_external_data(model, tmp_path / "same.onnx") == 0
    assert not (tmp_path / "same.onnx.data").exists()
    assert read_back(tmp_path / "same.onnx") == read_back(first)


def test_references_must_resolve_from_destination(tmp_path, first):
    model, _ = _variant(first)
    before = model.SerializeToString()
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(FileNotFoundError, match="base.data"):
        onnxl.save_model_with_shared_external_data(model, tmp_path / "elsewhere" / "v.onnx")
    assert os.listdir(tmp_path / "elsewhere") == []
    assert model.SerializeToString() == before, "untouched on failure"


def test_subfolder_variant_with_relative_location(tmp_path, first):
    """A variant in a subfolder can point up only if the location says so; '..' is refused."""
    model, _ = _variant(first)
    for site_tensor in model.graph.initializer[1:]:
        for e in site_tensor.external_data:
            if e.key == "location":
                e.value = "../base.data"
    (tmp_path / "sub").mkdir()
    with pytest.raises(onnxl.ExternalDataError, match=r"\.\."):
        onnxl.save_model_with_shared_external_data(model, tmp_path / "sub" / "v.onnx")


def test_refuses_to_overwrite_shared_file(tmp_path, first):
    model, _ = _variant(first)
    digest = folder_digest(tmp_path)
    for t in model.graph.initializer[1:]:
        for e in t.external_data:
            if e.key == "location":
                e.value = "base.onnx.data"
    shutil.copyfile(tmp_path / "base.data", tmp_path / "base.onnx.data")  # one link each
    with pytest.raises(onnxl.ExternalDataError, match="overwrite"):
        onnxl.save_model_with_shared_external_data(model, tmp_path / "base.onnx")
    assert {k: v for k, v in folder_digest(tmp_path).items() if k in digest} == digest
