"""save_edited: onnx's graph tools on a model loaded without its weights.

Each tool runs twice: on the weightless proto (then ``save_edited``, sharing
the source's weights or as a compact copy) and, as onnx does it, on the
model loaded with its weights. The saved model must hold the very bytes of
the in-memory one, run the same in onnxruntime, and leave the source as it
was.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx.compose
import onnx.shape_inference
import onnx.utils
import onnx.version_converter
import pytest
from conftest import external_offsets, folder_digest, read_back, save_two_file, tensor_bytes

import onnx_light.onnx as onnxl
from onnx_light.bench import make_gemm_model

DIM = 64
N = 4


def _rename(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rename the input X and the output Y everywhere they appear."""
    names = {"X": "input", "Y": "output"}
    for value in [*model.graph.input, *model.graph.output]:
        value.name = names.get(value.name, value.name)
    for node in model.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        node.output[:] = [names.get(n, n) for n in node.output]
    return model


def _check(model: onnx.ModelProto) -> onnx.ModelProto:
    onnx.checker.check_model(model, full_check=True)
    return model


def _extract(model: onnx.ModelProto) -> onnx.ModelProto:
    """The first two Gemm nodes: W2, B2, W3, B3 are dropped."""
    inferred = onnx.shape_inference.infer_shapes(model)
    return onnx.utils.Extractor(inferred).extract_model(["X"], ["H1"])


def _merge(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model chained with a renamed copy of itself: both read the same weights."""
    second = onnx.compose.add_prefix(model, "b_")
    return onnx.compose.merge_models(model, second, io_map=[("Y", "b_X")])


def _metadata(model: onnx.ModelProto) -> onnx.ModelProto:
    onnx.helper.set_model_props(model, {"author": "test", "edited": "yes"})
    model.doc_string = "edited without its weights"
    return model


EDITS = {
    "infer_shapes": onnx.shape_inference.infer_shapes,
    "check_model": _check,
    "convert_version": lambda m: onnx.version_converter.convert_version(m, 21),
    "extractor": _extract,
    "merge_models": _merge,
    "rename": _rename,
    "metadata": _metadata,
}


@pytest.fixture
def source(tmp_path):
    """model.onnx + model.onnx.data in tmp_path/src, every tensor external, dense
    (no weight on a page boundary): ``(path, digest of the folder)``."""
    folder = tmp_path / "src"
    folder.mkdir()
    save_two_file(make_gemm_model(N, DIM), folder / "model.onnx", size_threshold=0)
    return folder / "model.onnx", folder_digest(folder)


def _unchanged(path, digest) -> None:
    now = folder_digest(path.parent)
    assert {name: now[name] for name in digest} == digest  # every source file as it was


def _outputs(model_or_path) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    data = model_or_path
    if isinstance(model_or_path, onnx.ModelProto):
        data = model_or_path.SerializeToString()
    else:
        data = str(model_or_path)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    feeds = {i.name: rng.standard_normal((2, DIM)).astype(np.float32) for i in sess.get_inputs()}
    return sess.run(None, feeds)


def _edit_both(path, name):
    """``(edited weightless proto, the same edit on the model loaded with its weights)``.

    Run from the source's folder: onnx's checker (also run by ``merge_models``)
    looks for the weights files of a weightless proto relative to the current folder.
    """
    edit = EDITS[name]
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        light = edit(onnxl.load(path, load_external_data=False))
        full = edit(onnx.load(str(path)))
    finally:
        os.chdir(cwd)
    return light, full


def _assert_same_run(dst, full) -> None:
    for got, expected in zip(_outputs(dst), _outputs(full), strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", sorted(EDITS))
def test_compact_copy_holds_only_what_the_edit_references(name, source, tmp_path):
    path, digest = source
    light, full = _edit_both(path, name)
    before = light.SerializeToString()
    (tmp_path / "out").mkdir()
    dst = tmp_path / "out" / "edited.onnx"
    size = onnxl.save_edited(light, path, dst)
    assert light.SerializeToString() == before  # the caller's model is not modified
    assert read_back(dst) == tensor_bytes(full)
    places = external_offsets(dst)
    assert places and all(loc == "edited.onnx.data" and off % 4096 == 0 for loc, off, _ in places)
    assert size == os.path.getsize(tmp_path / "out" / "edited.onnx.data")
    _unchanged(path, digest)
    _assert_same_run(dst, full)


@pytest.mark.parametrize("name", sorted(EDITS))
def test_sharing_copy_reads_the_source_weights(name, source):
    path, digest = source
    light, full = _edit_both(path, name)
    dst = path.parent / "edited.onnx"
    assert onnxl.save_edited(light, path, dst, share_weights=True) == 0
    assert read_back(dst) == tensor_bytes(full)
    assert {loc for loc, _, _ in external_offsets(dst)} == {"model.onnx.data"}
    assert not (path.parent / "edited.onnx.data").exists()  # no new tensor, no new file
    _unchanged(path, digest)
    _assert_same_run(dst, full)


def test_unreferenced_weights_are_left_out(source, tmp_path):
    """Extractor keeps two of four Gemm nodes: the compact file holds their bytes only."""
    path, _ = source
    light, _ = _edit_both(path, "extractor")
    dst = tmp_path / "half.onnx"
    onnxl.save_edited(light, path, dst, alignment=0)
    kept = {name.split(".")[-1] for name in read_back(dst)}
    assert len(external_offsets(dst)) == 4
    assert os.path.getsize(tmp_path / "half.onnx.data") == 2 * (DIM * DIM + DIM) * 4
    assert os.path.getsize(tmp_path / "half.onnx.data") < os.path.getsize(str(path) + ".data")
    assert not any("W2" in k or "W3" in k for k in kept)


def test_a_range_two_tensors_share_is_copied_once(source, tmp_path):
    """merge_models of a model with its prefixed copy: both halves read the same
    ranges, which the compact copy writes once."""
    path, _ = source
    light, _ = _edit_both(path, "merge_models")
    identity, _ = _edit_both(path, "metadata")
    merged = onnxl.save_edited(light, path, tmp_path / "merged.onnx")
    single = onnxl.save_edited(identity, path, tmp_path / "single.onnx")
    assert merged == single
    assert len(external_offsets(tmp_path / "merged.onnx")) == 2 * 2 * N


def test_new_inline_tensor_goes_to_a_new_small_file(source):
    """A layer added by hand: its weight is the only tensor the sharing copy writes."""
    path, digest = source
    model = onnxl.load(path, load_external_data=False)
    w = np.random.default_rng(5).standard_normal((DIM, DIM)).astype(np.float32)
    model.graph.initializer.append(onnxl.numpy_helper.from_array(w, "W_new"))
    model.graph.node.append(onnx.helper.make_node("MatMul", ["Y", "W_new"], ["Z"]))
    model.graph.output[0].name = "Z"
    dst = path.parent / "extended.onnx"
    size = onnxl.save_edited(model, path, dst, share_weights=True, alignment=0)
    assert size == w.nbytes == os.path.getsize(path.parent / "extended.onnx.data")
    locations = [loc for loc, _, _ in external_offsets(dst)]
    assert locations.count("extended.onnx.data") == 1
    assert locations.count("model.onnx.data") == 2 * N
    assert model.graph.initializer[-1].HasField("raw_data")  # the caller's model as it was
    _unchanged(path, digest)
    full = onnx.load(str(path))
    expected = _outputs(full)[0] @ w
    np.testing.assert_allclose(_outputs(dst)[0], expected, rtol=1e-5, atol=1e-5)


def test_single_file_source_loaded_with_skip_raw_data(tmp_path):
    """References into the source .onnx itself (skip_raw_data) are copied like the others."""
    model = make_gemm_model(N, DIM)
    path = tmp_path / "single.onnx"
    onnx.save(model, str(path))
    light = _rename(onnxl.load(path, load_external_data=False, skip_raw_data=True))
    onnxl.save_edited(light, path, tmp_path / "renamed.onnx")
    assert read_back(tmp_path / "renamed.onnx") == tensor_bytes(_rename(model))
    onnxl.save_edited(light, path, tmp_path / "beside.onnx", share_weights=True)
    assert {loc for loc, _, _ in external_offsets(tmp_path / "beside.onnx")} == {"single.onnx"}
    assert read_back(tmp_path / "beside.onnx") == tensor_bytes(_rename(model))


def test_onnx_checker_looks_for_weights_from_the_current_folder(source, tmp_path, monkeypatch):
    """What the how-to warns about: check a weightless proto from its folder, or the path."""
    path, _ = source
    model = onnxl.load(path, load_external_data=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(onnx.checker.ValidationError, match="model.onnx.data"):
        onnx.checker.check_model(model)
    onnx.checker.check_model(str(path))
    monkeypatch.chdir(path.parent)
    onnx.checker.check_model(model)


def test_sharing_outside_the_source_folder_is_refused(source, tmp_path):
    path, _ = source
    model = onnxl.load(path, load_external_data=False)
    with pytest.raises(ValueError, match="share_weights=False"):
        onnxl.save_edited(model, path, tmp_path / "elsewhere.onnx", share_weights=True)
    assert not (tmp_path / "elsewhere.onnx").exists()


@pytest.mark.parametrize("share", [False, True])
def test_the_source_is_never_the_destination(source, share):
    path, digest = source
    model = _metadata(onnxl.load(path, load_external_data=False))
    with pytest.raises(ValueError, match="is the source model"):
        onnxl.save_edited(model, path, path, share_weights=share)
    _unchanged(path, digest)


def test_the_source_weights_are_never_a_destination(source):
    """A compact copy beside the source, asked to write over the source's weights."""
    path, digest = source
    model = _extract(onnxl.load(path, load_external_data=False))
    with pytest.raises(onnxl.ExternalDataError, match="model.onnx.data"):
        onnxl.save_edited(model, path, path.parent / "half.onnx", "model.onnx.data")
    _unchanged(path, digest)
    assert not (path.parent / "half.onnx").exists()


def test_a_missing_weights_file_names_the_tensor_and_file(source, tmp_path):
    path, _ = source
    model = onnxl.load(path, load_external_data=False)
    os.remove(str(path) + ".data")
    for share, dst in ((False, tmp_path / "copy.onnx"), (True, path.parent / "beside.onnx")):
        with pytest.raises(FileNotFoundError, match=r"tensor 'W0'.*model\.onnx\.data"):
            onnxl.save_edited(model, path, dst, share_weights=share)
        assert not dst.exists()


def test_a_model_loaded_from_another_source_is_caught(source, tmp_path):
    """References past the end of the source's weights name the tensor and the file."""
    path, _ = source
    model = onnxl.load(path, load_external_data=False)
    other = tmp_path / "other"
    other.mkdir()
    save_two_file(make_gemm_model(1, DIM), other / "model.onnx", size_threshold=0)
    with pytest.raises(onnxl.ExternalDataError, match=r"tensor 'W1'.*past the end"):
        onnxl.save_edited(model, other / "model.onnx", tmp_path / "wrong.onnx")
    assert not (tmp_path / "wrong.onnx").exists()


def test_progress_and_shards(source, tmp_path):
    path, _ = source
    model = onnxl.load(path, load_external_data=False)
    calls = []
    size = onnxl.save_edited(
        model,
        path,
        tmp_path / "sharded.onnx",
        alignment=0,
        max_shard_size=2 * DIM * DIM * 4,
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls[-1] == (size, size)
    shards = sorted(p.name for p in tmp_path.glob("sharded-*.onnx.data"))
    assert len(shards) > 1
    assert read_back(tmp_path / "sharded.onnx") == tensor_bytes(onnx.load(str(path)))


def test_the_source_onnx_is_never_the_new_weights_file_when_sharing(tmp_path):
    """A sharing save whose weights file would be the source .onnx itself: refused."""
    import numpy as np
    from conftest import folder_digest, save_two_file

    from onnx_light.bench import make_gemm_model

    save_two_file(make_gemm_model(2, 64), tmp_path / "m.onnx", size_threshold=0)
    before = folder_digest(tmp_path)
    model = onnxl.load(tmp_path / "m.onnx", load_external_data=False)
    extra = np.ones((64, 64), np.float32)
    model.graph.initializer.append(onnxl.numpy_helper.from_array(extra, "extra"))
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        onnxl.save_edited(
            model, tmp_path / "m.onnx", tmp_path / "e.onnx", "m.onnx", share_weights=True
        )
    assert folder_digest(tmp_path) == before


def test_sharing_a_single_file_export_loaded_with_its_weights_is_refused(tmp_path):
    """optimum writes models under 2 GB as one file: loaded with load_external_data=False
    alone, every weight is in memory, and share_weights=True would share nothing.
    It says so, and the recipe's skip_raw_data=True shares."""
    model = make_gemm_model(N, DIM)
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    before = folder_digest(tmp_path)
    loaded = _rename(onnxl.load(path, load_external_data=False))
    with pytest.raises(ValueError, match="would share nothing.*skip_raw_data=True"):
        onnxl.save_edited(loaded, path, tmp_path / "renamed.onnx", share_weights=True)
    assert folder_digest(tmp_path) == before  # nothing written
    light = _rename(onnxl.load(path, load_external_data=False, skip_raw_data=True))
    assert onnxl.save_edited(light, path, tmp_path / "renamed.onnx", share_weights=True) == 0
    assert sorted(os.listdir(tmp_path)) == ["model.onnx", "renamed.onnx"]
    assert read_back(tmp_path / "renamed.onnx") == tensor_bytes(_rename(model))


def test_sharing_with_only_new_tensors_and_no_weights_is_fine(tmp_path):
    """A model without any weight to share writes nothing and is not refused."""
    model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    meta = onnxl.load(path, load_external_data=False)
    assert onnxl.save_edited(meta, path, tmp_path / "copy.onnx", share_weights=True) == 0
