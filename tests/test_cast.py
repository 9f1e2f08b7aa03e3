"""The bytes follow the dtype: save_edited converts external bytes a graph tool retyped.

A model loaded without its weights, its external tensors given another
``data_type`` (what a float16 converter does), is saved with the bytes
converted while they stream: float32 -> float16 / bfloat16, float16 / bfloat16
-> float32, float64 -> float32, each as numpy (or ml_dtypes) casts, bit for bit.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest
from helpers import for_onnxruntime

import onnx_light.onnx as onnxl
from benchmarks.harness import file_digests
from onnx_light.onnx._dtypes import BFLOAT16, DOUBLE, FLOAT, FLOAT16, Conversion
from onnx_light.onnx._write import convert as convert_module
from onnx_light.onnx._write.convert import convert

ml_dtypes = pytest.importorskip("ml_dtypes")

EDGES32 = np.array(
    [
        0.0,
        -0.0,
        1.0,
        -1.0,
        np.nan,
        -np.nan,
        np.inf,
        -np.inf,
        65504.0,
        65519.996,
        65520.0,
        -65520.0,
        1e30,
        -1e30,
        3.4028235e38,
        5.96e-08,
        2.98e-08,
        2.9802322e-08,  # half the smallest float16 subnormal: a tie, to 0
        1e-9,
        -1e-9,
        1e-45,  # a float32 subnormal
        6.1e-05,
        1.0009765625,  # 1 + 2**-10: float16 exact
        1.00048828125,  # a tie in float16: to even
        1.00390625,  # 1 + 2**-8: bfloat16 exact
        1.001953125,  # a tie in bfloat16: to even
    ],
    dtype=np.float32,
)
PAYLOADS = np.array([0x7FC00001, 0xFFC12345, 0x7F800001, 0x7FBFFFFF], dtype=np.uint32).view(
    np.float32
)  # NaNs with payloads, quiet and signalling


def _edges32() -> np.ndarray:
    rng = np.random.default_rng(0)
    scale = rng.choice(np.float32([1e-9, 1e-6, 1e-3, 1, 1e3, 1e5, 1e38]), 4096)
    noise = (rng.standard_normal(4096) * scale).astype(np.float32)
    return np.concatenate([EDGES32, PAYLOADS, noise])


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}")


@pytest.mark.parametrize(
    "src, dst, reference",
    [
        (FLOAT, FLOAT16, lambda x: x.astype(np.float16)),
        (FLOAT, BFLOAT16, lambda x: x.astype(ml_dtypes.bfloat16)),
        (DOUBLE, FLOAT, lambda x: x.astype(np.float64).astype(np.float32)),
    ],
)
def test_each_conversion_is_the_library_cast_bit_for_bit(src, dst, reference):
    values = _edges32()
    with np.errstate(over="ignore", invalid="ignore"):
        data = values.astype(np.float64).tobytes() if src == DOUBLE else values.tobytes()
        expected = np.asarray(reference(values))
        out, clipped = convert(data, Conversion(src, dst))
    if dst == BFLOAT16:
        out = out.view(ml_dtypes.bfloat16)
    assert clipped == 0
    nan = np.isnan(values)
    assert np.array_equal(_bits(out)[~nan], _bits(expected)[~nan])
    assert np.isnan(out.astype(np.float32)[nan]).all()  # NaN stays NaN
    assert np.array_equal(np.signbit(out.astype(np.float32)), np.signbit(values))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_widening_is_exact():
    half = _edges32().astype(np.float16)
    out, _ = convert(half.tobytes(), Conversion(FLOAT16, FLOAT))
    assert np.array_equal(_bits(out), _bits(half.astype(np.float32)))
    brain = _edges32().astype(ml_dtypes.bfloat16)
    out, _ = convert(brain.tobytes(), Conversion(BFLOAT16, FLOAT))
    assert np.array_equal(_bits(out), _bits(brain.astype(np.float32)))


def test_clipping_is_onnxruntimes_bit_for_bit():
    float16 = pytest.importorskip("onnxruntime.transformers.float16")
    values = _edges32()
    expected = float16.convert_np_to_float16(values.copy(), 5.96e-08, 65504.0)
    out, clipped = convert(
        bytearray(values.tobytes()), Conversion(FLOAT, FLOAT16, 5.96e-08, 65504.0)
    )
    assert np.array_equal(_bits(out), _bits(expected))
    magnitude = np.abs(values)
    changed = ((magnitude > 0) & (magnitude < np.float32(5.96e-08))) | (
        (magnitude > 65504) & np.isfinite(magnitude)
    )
    assert clipped == int(changed.sum()) > 0
    assert not np.isinf(out[np.isfinite(values)]).any()  # nothing finite overflowed


# -- save_edited ---------------------------------------------------------------------


def _model(folder, weights: dict[str, np.ndarray]) -> str:
    """Y = X @ W + B (float32, external), saved with every tensor in src.data."""
    W, B = weights["W"], weights["B"]
    dtype = oh.np_dtype_to_tensor_dtype(W.dtype)
    graph = oh.make_graph(
        [oh.make_node("MatMul", ["X", "W"], ["XW"]), oh.make_node("Add", ["XW", "B"], ["Y"])],
        "g",
        [oh.make_tensor_value_info("X", dtype, [2, W.shape[0]])],
        [oh.make_tensor_value_info("Y", dtype, [2, W.shape[1]])],
        [onh.from_array(W, "W"), onh.from_array(B, "B")],
    )
    model = for_onnxruntime(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    path = os.path.join(folder, "src.onnx")
    onnx.save(model, path, save_as_external_data=True, location="src.data", size_threshold=0)
    return path


def _retyped(path: str, data_type: int, names=("W", "B")) -> onnx.ModelProto:
    model = onnxl.load(path, load_external_data=False, skip_raw_data=True)
    for t in model.graph.initializer:
        if t.name in names:
            t.data_type = data_type
    for v in (*model.graph.input, *model.graph.output):
        v.type.tensor_type.elem_type = data_type
    return model


@pytest.fixture
def weights():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((64, 48)).astype(np.float32)
    W.flat[:8] = EDGES32[:8]
    return {"W": W, "B": rng.standard_normal(48).astype(np.float32)}


def test_float32_weights_follow_a_float16_graph(tmp_path, weights):
    ort = pytest.importorskip("onnxruntime")
    src = _model(tmp_path, weights)
    before = file_digests(tmp_path)
    edited = _retyped(src, onnx.TensorProto.FLOAT16)
    out = tmp_path / "out"
    out.mkdir()
    size = onnxl.save_edited(edited, src, out / "m16.onnx")
    assert {k: v for k, v in file_digests(tmp_path).items() if k != "out"} == before  # untouched
    model = onnx.load(out / "m16.onnx")
    for name, array in weights.items():
        tensor = next(t for t in model.graph.initializer if t.name == name)
        assert tensor.data_type == onnx.TensorProto.FLOAT16
        with np.errstate(over="ignore"):
            assert np.array_equal(_bits(onh.to_array(tensor)), _bits(array.astype(np.float16)))
    loaded = onnx.load(out / "m16.onnx", load_external_data=False)
    for t in loaded.graph.initializer:
        assert int(dict((e.key, e.value) for e in t.external_data)["offset"]) % 4096 == 0
    assert size == os.path.getsize(out / "m16.onnx.data")
    onnx.checker.check_model(str(out / "m16.onnx"))
    x = np.random.default_rng(2).standard_normal((2, 64)).astype(np.float16)
    got = ort.InferenceSession(str(out / "m16.onnx")).run(None, {"X": x})[0]
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(np.float32) @ weights["W"].astype(np.float16).astype(np.float32)
    assert got.shape == (2, 48) and np.isnan(got).any() == np.isnan(expected).any()


@pytest.mark.parametrize(
    "dtype, to, reference",
    [
        (np.float32, onnx.TensorProto.BFLOAT16, lambda a: a.astype(ml_dtypes.bfloat16)),
        (np.float16, onnx.TensorProto.FLOAT, lambda a: a.astype(np.float32)),
        (np.float64, onnx.TensorProto.FLOAT, lambda a: a.astype(np.float32)),
    ],
)
def test_other_conversions_through_save_edited(tmp_path, dtype, to, reference):
    rng = np.random.default_rng(3)
    arrays = {
        "W": rng.standard_normal((32, 16)).astype(dtype),
        "B": rng.standard_normal(16).astype(dtype),
    }
    src = _model(tmp_path, arrays)
    onnxl.save_edited(_retyped(src, to), src, tmp_path / "dst.onnx")
    model = onnx.load(tmp_path / "dst.onnx")
    for name, array in arrays.items():
        tensor = next(t for t in model.graph.initializer if t.name == name)
        assert tensor.data_type == to
        assert np.array_equal(_bits(onh.to_array(tensor)), _bits(reference(array)))


def test_a_tensor_spanning_many_chunks(tmp_path, monkeypatch):
    """Chunks cut at whole values, written at the right offsets, on several threads."""
    monkeypatch.setattr(convert_module, "CAST_CHUNK", 4096 + 4)  # not a power of two
    rng = np.random.default_rng(4)
    arrays = {"W": rng.standard_normal((301, 77)).astype(np.float32), "B": np.ones(77, np.float32)}
    src = _model(tmp_path, arrays)
    onnxl.save_edited(_retyped(src, onnx.TensorProto.FLOAT16), src, tmp_path / "dst.onnx")
    tensor = onnx.load(tmp_path / "dst.onnx").graph.initializer[0]
    assert np.array_equal(_bits(onh.to_array(tensor)), _bits(arrays["W"].astype(np.float16)))


def test_one_range_read_as_two_dtypes_is_written_twice(tmp_path, weights):
    """Two tensors on one source range: retyped, one converted copy; one retyped and one
    not, a copy of each."""
    src = _model(tmp_path, weights)
    model = onnxl.load(src, load_external_data=False, skip_raw_data=True)
    twin = model.graph.initializer.add()
    twin.CopyFrom(model.graph.initializer[0])
    twin.name = "W2"
    model.graph.node.append(oh.make_node("Identity", ["W2"], ["W2out"]))
    model.graph.output.append(oh.make_tensor_value_info("W2out", onnx.TensorProto.FLOAT, [64, 48]))
    model.graph.initializer[0].data_type = onnx.TensorProto.FLOAT16
    onnxl.save_edited(model, src, tmp_path / "mixed.onnx")
    saved = {t.name: t for t in onnx.load(tmp_path / "mixed.onnx").graph.initializer}
    assert np.array_equal(_bits(onh.to_array(saved["W2"])), _bits(weights["W"]))
    with np.errstate(over="ignore"):
        assert np.array_equal(
            _bits(onh.to_array(saved["W"])), _bits(weights["W"].astype(np.float16))
        )
    twin.data_type = onnx.TensorProto.FLOAT16
    size = onnxl.save_edited(model, src, tmp_path / "both.onnx")
    assert size == 4096 * 2 + 48 * 4  # W and W2 share one float16 copy (6144 bytes, padded)


def test_sharing_writes_converted_tensors_as_new_bytes(tmp_path, weights):
    src = _model(tmp_path, weights)
    before = file_digests(tmp_path)
    model = _retyped(src, onnx.TensorProto.FLOAT16, names=("W",))
    model.graph.node[0].output[0] = "XW16"
    model.graph.node.insert(1, oh.make_node("Cast", ["XW16"], ["XW"], to=onnx.TensorProto.FLOAT))
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    onnxl.save_edited(model, src, tmp_path / "variant.onnx", share_weights=True)
    loaded = onnx.load(tmp_path / "variant.onnx", load_external_data=False)
    where = {
        t.name: dict((e.key, e.value) for e in t.external_data)["location"]
        for t in loaded.graph.initializer
    }
    assert where == {"W": "variant.onnx.data", "B": "src.data"}
    assert {k: v for k, v in file_digests(tmp_path).items() if k in before} == before
    everything = _retyped(src, onnx.TensorProto.FLOAT16)
    with pytest.raises(ValueError, match="change dtype"):
        onnxl.save_edited(everything, src, tmp_path / "nothing.onnx", share_weights=True)
    assert not (tmp_path / "nothing.onnx").exists()


def test_a_dtype_the_bytes_cannot_take_is_refused_naming_the_tensor(tmp_path, weights):
    src = _model(tmp_path, weights)
    model = _retyped(src, onnx.TensorProto.INT16, names=("W",))
    with pytest.raises(onnxl.ExternalDataError, match=r"'W'.*FLOAT bytes.*as INT16"):
        onnxl.save_edited(model, src, tmp_path / "bad.onnx")
    model = _retyped(src, onnx.TensorProto.FLOAT16, names=("W",))
    model.graph.initializer[0].dims[0] = 63  # fits neither dtype x dims
    with pytest.raises(onnxl.ExternalDataError, match=r"'W'.*does not match"):
        onnxl.save_edited(model, src, tmp_path / "bad.onnx")
    assert not (tmp_path / "bad.onnx").exists()


def test_a_truncated_source_fails_before_anything_is_written(tmp_path, weights):
    src = _model(tmp_path, weights)
    model = _retyped(src, onnx.TensorProto.FLOAT16)
    os.truncate(tmp_path / "src.data", os.path.getsize(tmp_path / "src.data") - 4)
    with pytest.raises(onnxl.ExternalDataError, match="'B'"):
        onnxl.save_edited(model, src, tmp_path / "dst.onnx")
    assert sorted(os.listdir(tmp_path)) == ["src.data", "src.onnx"]


def test_inline_tensors_the_tool_converted_stay_as_written(tmp_path, weights):
    src = _model(tmp_path, weights)
    model = _retyped(src, onnx.TensorProto.FLOAT16)
    small = onh.from_array(np.float16([1.5, -2.25]), "S")
    model.graph.initializer.append(small)
    onnxl.save_edited(model, src, tmp_path / "dst.onnx")
    saved = {t.name: t for t in onnx.load(tmp_path / "dst.onnx").graph.initializer}
    assert saved["S"].raw_data == small.raw_data


def _many(folder, n: int, lead: int = 100) -> tuple[str, np.ndarray]:
    """``n`` float32 tensors of 16 values, following on in one data file after a table."""
    rng = np.random.default_rng(5)
    values = rng.standard_normal((n, 16)).astype(np.float32)
    inits = []
    for i in range(n):
        t = onnx.TensorProto(name=f"t{i}", data_type=onnx.TensorProto.FLOAT, dims=[16])
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (
            ("location", "m.data"),
            ("offset", str(lead + 64 * i)),
            ("length", "64"),
        ):
            t.external_data.add(key=key, value=value)
        inits.append(t)
    out = oh.make_tensor_value_info("t0", onnx.TensorProto.FLOAT, [16])
    model = oh.make_model(oh.make_graph([], "many", [], [out], inits))
    with open(os.path.join(folder, "m.data"), "wb") as f:
        f.write(bytes(lead) + values.tobytes())
    path = os.path.join(folder, "m.onnx")
    onnx.save(model, path)
    return path, values


@pytest.mark.parametrize("alignment", [4096, 0])
def test_small_tensors_batched_between_copied_ones(tmp_path, alignment):
    """Tiny tensors are converted in batches; a tensor that is copied, not cast, placed
    between two cast ones (the layout follows the model's order, not the source's) is
    never overwritten by a batch's span."""
    src, values = _many(tmp_path, 700)
    model = onnxl.load(src, load_external_data=False)
    tensors = list(model.graph.initializer)
    cast, copied = tensors[:600], tensors[600:]  # the first 600 follow on in the source
    for t in cast:
        t.data_type = onnx.TensorProto.FLOAT16
    order = []
    for i, t in enumerate(cast):
        order.append(t)
        if i % 6 == 5:
            order.append(copied[i // 6])
    del model.graph.initializer[:]
    model.graph.initializer.extend(order)
    onnxl.save_edited(
        model, src, tmp_path / "out.onnx", options=onnxl.WriteOptions(alignment=alignment)
    )
    saved = {t.name: onh.to_array(t) for t in onnx.load(tmp_path / "out.onnx").graph.initializer}
    for i in range(700):
        expected = values[i].astype(np.float16) if i < 600 else values[i]
        assert saved[f"t{i}"].tobytes() == expected.tobytes(), i


def test_clipped_counts_per_tensor_inside_a_batch(tmp_path):
    src, values = _many(tmp_path, 40)
    with open(tmp_path / "m.data", "r+b") as f:  # t5 holds two overflows, t9 one underflow
        f.seek(100 + 64 * 5)
        f.write(np.float32([1e5, -2e5]).tobytes())
        f.seek(100 + 64 * 9 + 8)
        f.write(np.float32([1e-9]).tobytes())
    result = onnxl.convert_float_to_float16(
        src, tmp_path / "out.onnx", force_fp16_initializers=True
    )
    assert result.converted == 40
    assert result.clipped == {"t5": 2, "t9": 1}


def _sparse(folder) -> str:
    """m.onnx: a sparse initializer whose float32 values and int64 indices are external."""
    values, indices = np.arange(8, dtype=np.float32) + 0.25, np.arange(0, 32, 4, dtype=np.int64)
    with open(os.path.join(folder, "w.data"), "wb") as f:
        f.write(values.tobytes() + indices.tobytes())

    def external(name, data_type, offset, length):
        t = onnx.TensorProto(name=name, data_type=data_type, dims=[8])
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", "w.data"), ("offset", offset), ("length", length)):
            t.external_data.add(key=key, value=str(value))
        return t

    sparse = oh.make_sparse_tensor(
        external("v", onnx.TensorProto.FLOAT, 0, 32),
        external("i", onnx.TensorProto.INT64, 32, 64),
        [32],
    )
    graph = oh.make_graph([], "g", [], [], sparse_initializer=[sparse])
    path = os.path.join(folder, "m.onnx")
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("weights_path", [None, "out.data"])
def test_a_sparse_tensors_retyped_values_are_converted_inline(tmp_path, weights_path):
    """A compact copy writes sparse tensors inline: their retyped float32 values are
    converted to float16 in memory (they used to be refused with a hint that could not
    be followed); the indices are copied as they are."""
    src = _sparse(tmp_path)
    model = onnxl.load(src, load_external_data=False)
    model.graph.sparse_initializer[0].values.data_type = onnx.TensorProto.FLOAT16
    out = tmp_path / "out"
    out.mkdir()
    weights = None if weights_path is None else out / weights_path
    onnxl.save_edited(model, src, out / "c.onnx", weights)
    sparse = onnx.load(out / "c.onnx").graph.sparse_initializer[0]
    assert sparse.values.data_location == onnx.TensorProto.DEFAULT  # inline
    assert sparse.values.data_type == onnx.TensorProto.FLOAT16
    assert onh.to_array(sparse.values).tolist() == (np.arange(8) + 0.25).tolist()
    assert onh.to_array(sparse.indices).tolist() == list(range(0, 32, 4))
    assert sorted(os.listdir(out)) == ["c.onnx"]


def test_an_inline_tensor_retyped_without_its_bytes_is_refused(tmp_path, weights):
    """Loaded with skip_raw_data, a small tensor stays inline: retyped float32 -> float16,
    its raw_data still holds float32 bytes. Refused, naming it, nothing written (it was
    written as 32 float32 bytes under FLOAT16 [8])."""
    small = {"W": weights["W"], "B": np.arange(8, dtype=np.float32)}
    small["W"] = small["W"][:, :8].copy()
    src = _model(tmp_path, small)
    inline = onnxl.load(src, load_external_data=True)
    onnx.save(inline, tmp_path / "single.onnx")  # one file: B (32 bytes) stays inline
    model = onnxl.load(tmp_path / "single.onnx", load_external_data=False, skip_raw_data=True)
    held = {t.name: t.data_location for t in model.graph.initializer}
    assert held == {"W": onnx.TensorProto.EXTERNAL, "B": onnx.TensorProto.DEFAULT}
    for t in model.graph.initializer:
        t.data_type = onnx.TensorProto.FLOAT16
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(onnxl.ExternalDataError) as info:
        onnxl.save_edited(model, tmp_path / "single.onnx", out / "x.onnx")
    message = str(info.value)
    assert message.startswith("tensor 'B' (graph.initializer[1])")
    assert "32 bytes" in message and "FLOAT16 x [8] is 16 bytes" in message
    assert not os.listdir(out)
