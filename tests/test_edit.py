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
from helpers import external_offsets, folder_digest, read_back, save_two_file, tensor_bytes

import onnx_light.onnx as onnxl
from benchmarks.harness import make_gemm_model

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
    onnxl.save_edited(light, path, dst, options=onnxl.WriteOptions(alignment=0))
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
    size = onnxl.save_edited(
        model, path, dst, share_weights=True, options=onnxl.WriteOptions(alignment=0)
    )
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
        options=onnxl.WriteOptions(
            alignment=0,
            max_shard_size=2 * DIM * DIM * 4,
            progress=lambda done, total: calls.append((done, total)),
        ),
    )
    assert calls[-1] == (size, size)
    shards = sorted(p.name for p in tmp_path.glob("sharded-*.onnx.data"))
    assert len(shards) > 1
    assert read_back(tmp_path / "sharded.onnx") == tensor_bytes(onnx.load(str(path)))


def test_the_source_onnx_is_never_the_new_weights_file_when_sharing(tmp_path):
    """A sharing save whose weights file would be the source .onnx itself: refused."""
    import numpy as np
    from helpers import folder_digest, save_two_file

    from benchmarks.harness import make_gemm_model

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


# -- retyped tensors: the bytes follow the dtype, whatever its width ------------------

F16, BF16 = onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16


def _bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits in plain numpy: round to nearest even (NaN: its top half)."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    rounded[nan] = (bits[nan] >> 16).astype(np.uint16) | 0x40
    return rounded


def _widened(bfloat16_bits: np.ndarray) -> np.ndarray:
    return (bfloat16_bits.astype(np.uint32) << 16).view(np.float32)


def _one_weight(folder, data_type: int, raw: bytes, dims: list[int]) -> str:
    """m.onnx: Y = Identity(W), W external in m.onnx.data with ``raw`` as its bytes."""
    w = onnx.TensorProto(name="W", data_type=data_type, dims=dims, raw_data=raw)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["W"], ["Y"])],
        "g",
        [],
        [onnx.helper.make_tensor_value_info("Y", data_type, dims)],
        [w],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    path = os.path.join(folder, "m.onnx")
    onnx.save(model, path, save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    return path


def _retype(model: onnx.ModelProto, names, data_type: int) -> onnx.ModelProto:
    """What a graph tool does: the tensors' and the outputs' types changed, not the bytes."""
    for tensor in model.graph.initializer:
        if tensor.name in names:
            tensor.data_type = data_type
    for value in model.graph.output:
        value.type.tensor_type.elem_type = data_type
    return model


def _saved(path) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in onnx.load(str(path)).graph.initializer}


EDGE16 = np.array(
    [1, 2, 3, 4, 5, 6, 7, 0.0, -0.0, 65504, -65504, 6.1e-05, 6e-08, 1.0009765625, 1.005859375,
     -3.140625, np.inf, -np.inf, np.nan],
    dtype=np.float16,
)  # fmt: skip
EDGE_BF16 = _bfloat16_bits(
    np.array(
        [
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            0.0,
            -0.0,
            65504,
            65520,
            1e5,
            -3e38,
            1e-8,
            1e-40,
            1.00390625,
            -2.5,
            np.inf,
            -np.inf,
            np.nan,
        ],
        dtype=np.float32,
    )  # fmt: skip
)


@pytest.mark.parametrize(
    "before, after, raw, expected",
    [
        (F16, BF16, EDGE16, lambda: _bfloat16_bits(EDGE16.astype(np.float32))),
        (BF16, F16, EDGE_BF16, lambda: _widened(EDGE_BF16).astype(np.float16)),
    ],
    ids=["float16->bfloat16", "bfloat16->float16"],
)
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_a_retype_between_two_byte_floats_converts_the_values(
    tmp_path, before, after, raw, expected
):
    """float16 and bfloat16 have the same width: their bytes must still be converted,
    through float32, as numpy casts (to nearest even, overflow to inf, NaN stays NaN)."""
    src = _one_weight(tmp_path, before, raw.tobytes(), [len(raw)])
    model = _retype(onnxl.load(src, load_external_data=False), {"W"}, after)
    (tmp_path / "out").mkdir()
    onnxl.save_edited(model, src, tmp_path / "out" / "e.onnx")
    tensor = _saved(tmp_path / "out" / "e.onnx")["W"]
    assert tensor.data_type == after
    got = np.frombuffer(tensor.raw_data, np.uint16)
    want = expected().view(np.uint16)
    values = _widened(got) if after == BF16 else got.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(values[:7], np.arange(1, 8, dtype=np.float32))
    nan = np.isnan(values)
    assert nan.sum() == 1 and nan[-1]  # NaN stays NaN
    assert np.array_equal(got[~nan], want[~nan])  # every other value, bit for bit
    assert (values[[-3, -2]] == [np.inf, -np.inf]).all()


@pytest.mark.parametrize(
    "before, after",
    [
        (onnx.TensorProto.INT32, onnx.TensorProto.FLOAT),
        (onnx.TensorProto.FLOAT, onnx.TensorProto.UINT32),
        (onnx.TensorProto.INT16, F16),
        (BF16, onnx.TensorProto.INT16),
        (onnx.TensorProto.UINT8, onnx.TensorProto.INT8),
    ],
    ids=lambda code: onnx.TensorProto.DataType.Name(code),
)
@pytest.mark.parametrize("share", [False, True], ids=["compact", "sharing"])
def test_a_retype_of_the_same_width_the_bytes_cannot_follow_is_refused(
    tmp_path, before, after, share
):
    """Same byte length, another dtype: refused (naming the tensor, both dtypes and the
    file) rather than the bytes read as the new dtype."""
    src = _one_weight(
        tmp_path,
        before,
        bytes(range(1, 17)),
        [16 // onnxl.helper.tensor_dtype_to_np_dtype(before).itemsize],
    )
    model = _retype(onnxl.load(src, load_external_data=False), {"W"}, after)
    name = onnx.TensorProto.DataType.Name
    with pytest.raises(onnxl.ExternalDataError) as info:
        onnxl.save_edited(model, src, tmp_path / "e.onnx", share_weights=share)
    message = str(info.value)
    assert "'W'" in message and "m.onnx" in message
    assert name(before) in message and name(after) in message
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]


def test_a_retype_whose_dims_reread_the_bytes_is_refused(tmp_path):
    """float32 [16] given float16 [32]: the byte length fits the new dtype, but the
    values are the source's float32 ones: refused, not read as 32 halves."""
    src = _one_weight(
        tmp_path, onnx.TensorProto.FLOAT, np.arange(16, dtype=np.float32).tobytes(), [16]
    )
    model = _retype(onnxl.load(src, load_external_data=False), {"W"}, F16)
    model.graph.initializer[0].dims[:] = [32]
    with pytest.raises(onnxl.ExternalDataError, match=r"'W'.*does not match.*FLOAT.*FLOAT16"):
        onnxl.save_edited(model, src, tmp_path / "e.onnx")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "m.onnx.data"]


def _bias_and_table(folder) -> tuple[str, np.ndarray]:
    """A model whose float32 bias and int64 table hold the same 8 bytes, written by
    deduplicate_external_data (equal bytes are stored once, whatever the dtype)."""
    bias = np.float32([1.5, -2.0])
    table = bias.view(np.int64).copy()
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Add", ["X", "bias"], ["Y"]),
            onnx.helper.make_node("Identity", ["table"], ["T"]),
        ],
        "g",
        [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [2])],
        [
            onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [2]),
            onnx.helper.make_tensor_value_info("T", onnx.TensorProto.INT64, [1]),
        ],
        [
            onnxl.numpy_helper.from_array(table, "table"),
            onnxl.numpy_helper.from_array(bias, "bias"),
        ],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    raw = os.path.join(folder, "raw")
    os.makedirs(raw)
    onnx.save(
        model,
        os.path.join(raw, "m.onnx"),
        save_as_external_data=True,
        location="m.data",
        size_threshold=0,
    )
    dst = os.path.join(folder, "m.onnx")
    onnxl.deduplicate_external_data(
        [os.path.join(raw, "m.onnx")], [dst], options=onnxl.WriteOptions(size_threshold=0)
    )
    places = {loc_off for loc_off in external_offsets(dst)}
    assert len(places) == 1  # one range, read by both tensors
    return dst, table


def _to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A float16 converter's work on the weightless model: every FLOAT type becomes FLOAT16."""
    for site_tensor in [*model.graph.initializer]:
        if site_tensor.data_type == onnx.TensorProto.FLOAT:
            site_tensor.data_type = F16
    for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        if value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            value.type.tensor_type.elem_type = F16
    return model


TOOLS = {
    "none": lambda m: m,
    "add_prefix": lambda m: onnx.compose.add_prefix(m, "p_"),
    "extractor": lambda m: onnx.utils.Extractor(onnx.shape_inference.infer_shapes(m)).extract_model(
        ["X"], ["Y"]
    ),
    "merge_models": lambda m: onnx.compose.merge_models(
        m, onnx.compose.add_prefix(m, "b_"), io_map=[("Y", "b_X")], outputs=["b_Y", "T", "b_T"]
    ),
}


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_a_deduplicated_model_takes_a_float16_graph(tmp_path, tool):
    """deduplicate_external_data stored the float32 bias and the int64 table once: each
    tensor's bytes are converted as the tensor itself is typed in the source, after
    a graph tool renamed or moved it."""
    src, table = _bias_and_table(tmp_path)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # merge_models runs the checker, which reads from the current folder
    try:
        model = _to_float16(TOOLS[tool](onnxl.load(src, load_external_data=False)))
    finally:
        os.chdir(cwd)
    (tmp_path / "out").mkdir()
    onnxl.save_edited(model, src, tmp_path / "out" / "m16.onnx")
    saved = _saved(tmp_path / "out" / "m16.onnx")
    biases = [t for name, t in saved.items() if name.endswith("bias")]
    tables = [t for name, t in saved.items() if name.endswith("table")]
    assert biases and all(t.data_type == F16 for t in biases)
    for t in biases:
        np.testing.assert_array_equal(onnxl.numpy_helper.to_array(t), np.float16([1.5, -2.0]))
    for t in tables:
        np.testing.assert_array_equal(onnxl.numpy_helper.to_array(t), table)


def test_a_deduplicated_table_retyped_is_refused_as_its_own_dtype(tmp_path):
    """The int64 table retyped: refused as INT64 -> FLOAT16, whichever tensor of the
    shared range the source lists first."""
    src, _ = _bias_and_table(tmp_path)
    model = _retype(onnxl.load(src, load_external_data=False), {"table"}, F16)
    (tmp_path / "out").mkdir()
    with pytest.raises(onnxl.ExternalDataError, match=r"'table'.*INT64.*FLOAT16"):
        onnxl.save_edited(model, src, tmp_path / "out" / "m16.onnx")
    assert not os.listdir(tmp_path / "out")


def test_a_deduplicated_tensor_renamed_beyond_recognition(tmp_path):
    """Renamed and moved, the bias matches no source tensor by name or place: it is
    converted from the one dtype of the shared bytes that converts to its new one, and
    a dtype none converts to is refused, naming the source's tensors and their dtypes."""
    src, _ = _bias_and_table(tmp_path)
    model = onnxl.load(src, load_external_data=False)
    bias = model.graph.initializer[1]
    moved = onnx.TensorProto()
    moved.CopyFrom(bias)
    moved.name = "b"
    del model.graph.initializer[1]
    model.graph.initializer.append(moved)  # graph.initializer[1] again, after the table
    model.graph.initializer.insert(
        0, onnx.TensorProto(name="first", data_type=onnx.TensorProto.FLOAT, dims=[0])
    )
    model.graph.node[0].input[1] = "b"
    moved = model.graph.initializer[2]
    moved.data_type = BF16
    (tmp_path / "out").mkdir()
    onnxl.save_edited(model, src, tmp_path / "out" / "e.onnx")
    saved = _saved(tmp_path / "out" / "e.onnx")
    assert np.frombuffer(saved["b"].raw_data, np.uint16).tolist() == [0x3FC0, 0xC000]
    moved.data_type = onnx.TensorProto.INT32
    with pytest.raises(
        onnxl.ExternalDataError, match=r"'b'.*'table' \(INT64\).*'bias' \(FLOAT\).*INT32"
    ):
        onnxl.save_edited(model, src, tmp_path / "out" / "bad.onnx")


def _one_range(folder, tensors: list[tuple[str, int, list[int]]], raw: bytes) -> str:
    """dd/m.onnx: ``(name, dtype, dims)`` tensors that each hold ``raw``, read from one
    range of dd/m.onnx.data (deduplicate_external_data stored the equal bytes once)."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", [name], [f"{name}_o"]) for name, _, _ in tensors],
        "g",
        [],
        [onnx.helper.make_tensor_value_info(f"{n}_o", t, d) for n, t, d in tensors],
        [onnx.TensorProto(name=n, data_type=t, dims=d, raw_data=raw) for n, t, d in tensors],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    raw_folder = os.path.join(folder, "raw")
    os.makedirs(raw_folder)
    first = os.path.join(raw_folder, "m.onnx")
    onnx.save(model, first, save_as_external_data=True, location="m.data", size_threshold=0)
    os.makedirs(os.path.join(folder, "dd"))
    dst = os.path.join(folder, "dd", "m.onnx")
    onnxl.deduplicate_external_data([first], [dst], options=onnxl.WriteOptions(size_threshold=0))
    assert len(set(external_offsets(dst))) == 1  # one range, read by every tensor
    return dst


def _prefixed_to_bfloat16(src: str) -> onnx.ModelProto:
    """onnx.compose.add_prefix, then every FLOAT16 tensor retyped BFLOAT16."""
    model = onnx.compose.add_prefix(onnxl.load(src, load_external_data=False), "p_")
    for tensor in model.graph.initializer:
        if tensor.data_type == F16:
            tensor.data_type = BF16
    return model


FLOAT = onnx.TensorProto.FLOAT
HALVES = (np.arange(512, dtype=np.float16) - 256) / np.float16(7)


def test_a_renamed_tensor_whose_name_and_place_disagree_is_refused(tmp_path):
    """FLOAT16 'w' and BFLOAT16 'p_w' read one range; add_prefix renames 'w' to 'p_w'
    and the FLOAT16 tensors become BFLOAT16. Its place says 'w' (convert), its name
    'p_w' (keep): refused, naming both and their dtypes, nothing written. Saved in two
    steps, as the message says, the values are the float16 ones in bfloat16."""
    src = _one_range(tmp_path, [("w", F16, [512]), ("p_w", BF16, [512])], HALVES.tobytes())
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(onnxl.ExternalDataError) as info:
        onnxl.save_edited(_prefixed_to_bfloat16(src), src, out / "e.onnx")
    message = str(info.value)
    assert message.startswith("tensor 'p_w' (graph.initializer[0])")
    assert "'w' (FLOAT16)" in message and "'p_w' (BFLOAT16)" in message
    assert "does not guess" in message and "save the dtype changes and the renames" in message
    assert not os.listdir(out)

    model = onnxl.load(src, load_external_data=False)  # the dtype change alone
    model.graph.initializer[0].data_type = BF16
    onnxl.save_edited(model, src, out / "step.onnx")
    renamed = onnx.compose.add_prefix(onnxl.load(out / "step.onnx", load_external_data=False), "p_")
    onnxl.save_edited(renamed, out / "step.onnx", out / "e.onnx")
    saved = _saved(out / "e.onnx")
    expected = _bfloat16_bits(HALVES.astype(np.float32))
    assert np.frombuffer(saved["p_w"].raw_data, np.uint16).tolist() == expected.tolist()
    assert saved["p_p_w"].raw_data == HALVES.tobytes()  # BFLOAT16 in the source: kept


def test_a_renamed_tensor_is_known_by_what_its_dims_can_hold(tmp_path):
    """FLOAT 'w' [512] and FLOAT16 'p_w' [1024] read one 2048-byte range; the same edit:
    the new 'p_w' (FLOAT [512]) can only be the float32 'w' (as FLOAT16 its dims would
    hold 1024 bytes), kept as it is; 'p_p_w' is converted from FLOAT16."""
    halves = np.concatenate([HALVES, -HALVES])
    src = _one_range(tmp_path, [("w", FLOAT, [512]), ("p_w", F16, [1024])], halves.tobytes())
    (tmp_path / "out").mkdir()
    onnxl.save_edited(_prefixed_to_bfloat16(src), src, tmp_path / "out" / "e.onnx")
    saved = _saved(tmp_path / "out" / "e.onnx")
    assert saved["p_w"].data_type == FLOAT and saved["p_w"].raw_data == halves.tobytes()
    expected = _bfloat16_bits(halves.astype(np.float32))
    assert np.frombuffer(saved["p_p_w"].raw_data, np.uint16).tolist() == expected.tolist()


def _reference(folder, entries: list[tuple[str, str]]) -> str:
    """m.onnx whose FLOAT [16] tensor W has these external_data entries into w.data."""
    values = np.arange(16, dtype=np.float32) + 0.5
    (folder / "w.data").write_bytes(values.tobytes())
    w = onnx.TensorProto(name="W", data_type=FLOAT, dims=[16])
    w.data_location = onnx.TensorProto.EXTERNAL
    for key, value in entries:
        w.external_data.add(key=key, value=value)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["W"], ["Y"])],
        "g",
        [],
        [onnx.helper.make_tensor_value_info("Y", FLOAT, [16])],
        [w],
    )
    path = str(folder / "m.onnx")
    onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)]), path)
    return path


REFERENCES = {
    "no length": ([("location", "w.data"), ("offset", "0")], None),
    "./w.data": ([("location", "w.data"), ("offset", "0"), ("length", "64")], "./w.data"),
}


@pytest.mark.parametrize("case", sorted(REFERENCES))
def test_a_reference_spelled_otherwise_is_still_its_source_tensor(tmp_path, case):
    """A source reference without 'length' (to the end of the file), or an edited one
    whose location reads './w.data': the tensor is still the FLOAT one, so FLOAT16 [16]
    is converted, and FLOAT16 [32] (the float32 bytes read as 32 halves) refused."""
    entries, location = REFERENCES[case]
    src = _reference(tmp_path, entries)
    (tmp_path / "out").mkdir()
    for dims in ([16], [32]):
        model = onnxl.load(src, load_external_data=False)
        w = model.graph.initializer[0]
        w.data_type, w.dims[:] = F16, dims
        if location:
            w.external_data[0].value = location
        if dims == [16]:
            onnxl.save_edited(model, src, tmp_path / "out" / "e.onnx")
            got = onnxl.numpy_helper.to_array(_saved(tmp_path / "out" / "e.onnx")["W"])
            assert got.dtype == np.float16 and got.tolist() == (np.arange(16) + 0.5).tolist()
        else:
            with pytest.raises(onnxl.ExternalDataError, match=r"'W'.*FLOAT, .*FLOAT16"):
                onnxl.save_edited(model, src, tmp_path / "out" / "bad.onnx")
            assert not (tmp_path / "out" / "bad.onnx").exists()
