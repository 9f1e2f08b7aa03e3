"""Real models that ship inside installed packages, in the layouts people keep them.

Every model of onnx's backend test data that holds a tensor (initializers,
attribute tensors, subgraphs), as one file, with one data file, and with one
file per tensor: ``load`` gives onnx's bytes, ``verify`` finds nothing,
``align`` and ``save`` write models whose bytes are the same, whose offsets are
aligned and that ``onnx.checker`` accepts; where the package ships inputs and
outputs, onnxruntime gives the same outputs on the re-aligned model.
"""

from __future__ import annotations

import glob
import os
import shutil

import numpy as np
import onnx
import pytest
from conftest import external_offsets, read_back, save_two_file, tensor_bytes
from onnx import numpy_helper

import onnx_light.onnx as onnxl
from onnx_light._inspect import verify_model
from onnx_light.onnx._tensors import iter_tensors

BACKEND = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


def _backend_models() -> list[str]:
    paths = sorted(glob.glob(os.path.join(BACKEND, "**", "*.onnx"), recursive=True))
    keep = []
    for path in paths:
        model = onnx.load(path, load_external_data=False)
        if any(True for _ in iter_tensors(model)):
            keep.append(path)
    return keep


MODELS = _backend_models()
LAYOUTS = ["single", "one-file", "per-tensor"]
COMPARED: list[str] = []  # models whose onnxruntime outputs were compared


def _id(path: str) -> str:
    return os.path.relpath(path, BACKEND).replace(os.sep, "/").removesuffix("/model.onnx")


def test_the_corpus_is_there():
    assert len(MODELS) >= 50, "onnx's backend test models were not found"


def _layout(model: onnx.ModelProto, source: str, folder, layout: str):
    folder.mkdir()
    path = folder / "m.onnx"
    if layout == "single":
        shutil.copy(source, path)
    else:
        save_two_file(model, path, size_threshold=0, per_tensor=layout == "per-tensor")
    return path


def _ort_check(source: str, aligned) -> None:
    """Same outputs from the package's model and the re-aligned one, on its own inputs."""
    ort = pytest.importorskip("onnxruntime")
    data = os.path.join(os.path.dirname(source), "test_data_set_0")
    if not os.path.isdir(data):
        return
    try:
        ref = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    except Exception:  # an operator this onnxruntime does not have
        return
    feeds = {}
    inputs = sorted(glob.glob(os.path.join(data, "input_*.pb")))
    for info, file in zip(ref.get_inputs(), inputs, strict=False):
        t = onnx.TensorProto()
        with open(file, "rb") as f:
            t.ParseFromString(f.read())
        feeds[info.name] = numpy_helper.to_array(t)
    if len(feeds) != len(ref.get_inputs()):
        return
    new = ort.InferenceSession(str(aligned), providers=["CPUExecutionProvider"])
    for a, b in zip(ref.run(None, feeds), new.run(None, feeds), strict=True):
        np.testing.assert_array_equal(a, b)
    COMPARED.append(source)


@pytest.mark.parametrize("source", MODELS, ids=_id)
def test_backend_model_in_every_layout(source, tmp_path):
    model = onnx.load(source)
    expected = tensor_bytes(model)
    for layout in LAYOUTS:
        path = _layout(model, source, tmp_path / layout, layout)
        assert tensor_bytes(onnxl.load(path)) == expected, layout
        assert verify_model(str(path))[1] == [], layout
        out = tmp_path / f"out-{layout}"
        out.mkdir()
        onnxl.align_external_data_streaming(path, out / "a.onnx", "a.data", 4096, size_threshold=0)
        assert read_back(out / "a.onnx") == expected, layout
        assert all(offset % 4096 == 0 for _, offset, _ in external_offsets(out / "a.onnx"))
        onnx.checker.check_model(str(out / "a.onnx"))
        opts = onnxl.SerializeOptions(alignment=64, size_threshold=0)
        onnxl.save(onnxl.load(path), out / "s.onnx", "s.data", options=opts)
        assert read_back(out / "s.onnx") == expected, layout
        onnx.checker.check_model(str(out / "s.onnx"))
    # as people save them (tensors under 1 KiB inline: onnxruntime reads shapes from
    # them), re-aligned with the defaults: onnxruntime gives the same outputs
    path = tmp_path / "usual" / "m.onnx"
    path.parent.mkdir()
    save_two_file(model, path)
    onnxl.align_external_data_streaming(path, tmp_path / "usual" / "a.onnx", "a.data")
    assert read_back(tmp_path / "usual" / "a.onnx") == expected
    _ort_check(source, tmp_path / "usual" / "a.onnx")


def test_onnxruntime_compared_most_models():
    """Runs after the corpus: the comparison was not skipped wholesale."""
    if len(COMPARED) == 0 and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("the corpus ran in another worker")
    pytest.importorskip("onnxruntime")
    if not COMPARED:
        pytest.skip("the corpus was deselected")
    assert len(COMPARED) >= 40, len(COMPARED)  # 41 of the 59 with inputs, onnxruntime 1.32
