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
from helpers import external_offsets, read_back, save_two_file, tensor_bytes
from onnx import numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._read.tensors import iter_tensors

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


def _layout(model: onnx.ModelProto, source: str, folder, layout: str, threshold: int = 0):
    folder.mkdir()
    path = folder / "m.onnx"
    if layout == "single":
        shutil.copy(source, path)
    else:
        save_two_file(model, path, size_threshold=threshold, per_tensor=layout == "per-tensor")
    return path


def _usual(model: onnx.ModelProto, folder):
    """The model as people save it (tensors under 1 KiB inline: onnxruntime reads shapes
    from them), re-aligned with the defaults; returns the re-aligned model's path."""
    folder.mkdir()
    save_two_file(model, folder / "m.onnx")
    onnxl.align_external_data_streaming(folder / "m.onnx", folder / "a.onnx", "a.data")
    return folder / "a.onnx"


def _ort_feeds(ort, source: str):
    """A session on the package's model and the inputs the package ships for it.

    Skips, saying why, when there is nothing to compare: no test data, an operator this
    onnxruntime does not have, or fewer input files than the model has inputs.
    """
    data = os.path.join(os.path.dirname(source), "test_data_set_0")
    if not os.path.isdir(data):
        pytest.skip(f"onnx ships no test_data_set_0 for {_id(source)}")
    try:
        ref = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    except Exception as e:
        if not type(e).__module__.startswith("onnxruntime"):
            raise
        first = str(e).strip().split("\n")[0][:200]
        pytest.skip(f"onnxruntime {ort.__version__} cannot run the package's model: {first}")
    inputs = sorted(glob.glob(os.path.join(data, "input_*.pb")))
    if len(inputs) < len(ref.get_inputs()):
        pytest.skip(
            f"{len(inputs)} input files in test_data_set_0 for {len(ref.get_inputs())} inputs"
        )
    feeds = {}
    for info, file in zip(ref.get_inputs(), inputs, strict=False):
        t = onnx.TensorProto()
        with open(file, "rb") as f:
            t.ParseFromString(f.read())
        feeds[info.name] = numpy_helper.to_array(t)
    return ref, feeds


@pytest.mark.parametrize("source", MODELS, ids=_id)
def test_backend_model_in_every_layout(source, tmp_path):
    model = onnx.load(source)
    expected = tensor_bytes(model)
    for layout in LAYOUTS:
        path = _layout(model, source, tmp_path / layout, layout)
        assert tensor_bytes(onnxl.load(path)) == expected, layout
        assert onnxl.verify_model(path).problems == (), layout
        out = tmp_path / f"out-{layout}"
        out.mkdir()
        onnxl.align_external_data_streaming(
            path, out / "a.onnx", "a.data", 4096, options=onnxl.WriteOptions(size_threshold=0)
        )
        assert read_back(out / "a.onnx") == expected, layout
        assert all(offset % 4096 == 0 for _, offset, _ in external_offsets(out / "a.onnx"))
        onnx.checker.check_model(str(out / "a.onnx"))
        opts = onnxl.SerializeOptions(alignment=64, size_threshold=0)
        onnxl.save(onnxl.load(path), out / "s.onnx", "s.data", options=opts)
        assert read_back(out / "s.onnx") == expected, layout
        onnx.checker.check_model(str(out / "s.onnx"))
    assert read_back(_usual(model, tmp_path / "usual")) == expected


@pytest.mark.parametrize("source", MODELS, ids=_id)
def test_backend_model_runs_the_same_in_onnxruntime(source, tmp_path):
    """Saved as people save them and re-aligned with the defaults: onnxruntime gives the
    package's model's outputs, on the inputs the package ships."""
    ort = pytest.importorskip("onnxruntime")
    ref, feeds = _ort_feeds(ort, source)
    aligned = _usual(onnx.load(source), tmp_path / "usual")
    new = ort.InferenceSession(str(aligned), providers=["CPUExecutionProvider"])
    for a, b in zip(ref.run(None, feeds), new.run(None, feeds), strict=True):
        np.testing.assert_array_equal(a, b)
    COMPARED.append(source)


def test_onnxruntime_compared_most_models():
    """Runs after the corpus: the comparison was not skipped wholesale."""
    if len(COMPARED) == 0 and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("the corpus ran in another worker")
    pytest.importorskip("onnxruntime")
    if not COMPARED:
        pytest.skip("the corpus was deselected")
    assert len(COMPARED) >= 40, len(COMPARED)  # 41 of the 59 with inputs, onnxruntime 1.32


# -- scikit-learn models converted by skl2onnx ----------------------------------------------


def _sklearn_models():
    pytest.importorskip("skl2onnx")
    from skl2onnx import to_onnx
    from sklearn.datasets import make_classification
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.neural_network import MLPClassifier

    x, y = make_classification(400, 20, n_informative=8, random_state=0)
    x = x.astype(np.float32)
    estimators = {
        "forest": RandomForestClassifier(40, max_depth=10, random_state=0),
        "boosting": GradientBoostingClassifier(n_estimators=30, random_state=0),
        "logistic": LogisticRegression(max_iter=500),
        "mlp": MLPClassifier((256, 128), max_iter=50, random_state=0),
    }
    out = {}
    for name, est in estimators.items():
        est.fit(x, y)
        out[name] = to_onnx(est, x[:1], options={"zipmap": False})
    return out, x[:16]


@pytest.fixture(scope="module")
def sklearn_models():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _sklearn_models()


@pytest.mark.parametrize("name", ["forest", "boosting", "logistic", "mlp"])
def test_skl2onnx_model(sklearn_models, tmp_path, name):
    """Single-file conversions: scanned like onnx parses them, re-aligned, same predictions."""
    ort = pytest.importorskip("onnxruntime")
    models, x = sklearn_models
    model = models[name]
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    meta = onnxl.load(path, load_external_data=False, skip_raw_data=True)
    parsed = onnx.load(str(path))
    assert len(meta.graph.node) == len(parsed.graph.node)
    for ours, theirs in zip(meta.graph.node, parsed.graph.node, strict=True):
        assert ours.SerializeToString() == theirs.SerializeToString()  # attributes intact
    onnxl.align_external_data_streaming(path, tmp_path / "a.onnx", "a.data")
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)
    onnx.checker.check_model(str(tmp_path / "a.onnx"))
    feeds = {"X": x}
    before = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = ort.InferenceSession(str(tmp_path / "a.onnx"), providers=["CPUExecutionProvider"])
    for a, b in zip(before, sess.run(None, feeds), strict=True):
        np.testing.assert_array_equal(a, b)


# -- a transformer exported by torch (make realworld) -------------------------------------------


@pytest.mark.realworld
def test_torch_transformer_export(tmp_path):
    """A small transformer with random weights, exported by torch, in the layouts people use."""
    torch = pytest.importorskip("torch")
    ort = pytest.importorskip("onnxruntime")
    import warnings

    torch.manual_seed(0)

    class Tiny(torch.nn.Module):
        def __init__(self, vocab=1000, d=256, layers=2):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, d)
            layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, batch_first=True, dropout=0.0)
            self.enc = torch.nn.TransformerEncoder(layer, layers)
            self.head = torch.nn.Linear(d, vocab)

        def forward(self, ids):
            return self.head(self.enc(self.emb(ids)))

    net = Tiny().eval()
    ids = torch.randint(0, 1000, (1, 16))
    exported = tmp_path / "exported.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (ids,), str(exported), dynamo=False, input_names=["ids"])
    model = onnx.load(str(exported))
    feeds = {"ids": ids.numpy()}
    reference = ort.InferenceSession(str(exported), providers=["CPUExecutionProvider"])
    expected = reference.run(None, feeds)[0]
    with torch.no_grad():
        np.testing.assert_allclose(expected, net(ids).numpy(), rtol=1e-4, atol=1e-4)
    for layout in LAYOUTS:
        # onnx.save's threshold: onnxruntime reads shapes from the small tensors inline
        path = _layout(model, str(exported), tmp_path / layout, layout, threshold=1024)
        out = tmp_path / f"out-{layout}"
        out.mkdir()
        onnxl.align_external_data_streaming(path, out / "a.onnx", "a.data", 65536)
        assert read_back(out / "a.onnx") == tensor_bytes(model)
        onnx.checker.check_model(str(out / "a.onnx"))
        got = ort.InferenceSession(str(out / "a.onnx"), providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(got.run(None, feeds)[0], expected)
        assert tensor_bytes(onnxl.load(out / "a.onnx")) == tensor_bytes(model)
