"""Re-layouts a user notices: weights files left behind by an in-place re-align,
typed-field tensors moved out, small tensors brought back inline (``inline_below``),
tensors that stay inline (sparse ones, and what a reader would refuse once moved),
transformers.js shard names, the default weights path, and errors naming the user's paths."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from helpers import (
    as_options,
    external_offsets,
    folder_digest,
    make_runnable_model,
    read_back,
    save_two_file,
    tensor_bytes,
    uint8_model,
)
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import convert_model_to_external_data

import onnx_light.onnx as onnxl
from onnx_light.onnx._read.tensors import iter_tensors

KiB = 1024
SHARDS4 = [f"m-{i:05d}-of-00004.onnx.data" for i in (1, 2, 3, 4)]
TJS = ["model.onnx_data", "model.onnx_data_1", "model.onnx_data_2"]


def _session(model, options=None):
    ort = pytest.importorskip("onnxruntime")
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, options, providers=["CPUExecutionProvider"])


def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    """An opset-18 model; ``inputs``/``outputs`` are ``(name, type, shape)``."""
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "g", [info(*i) for i in inputs], [info(*o) for o in outputs], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def _locations(path) -> set[str]:
    return {location for location, _, _ in external_offsets(path)}


def _four_shards(model, path) -> None:
    save_two_file(model, path, size_threshold=0)
    first = onnxl.align_external_data_streaming(
        path, path, options=onnxl.WriteOptions(max_shard_size=8 * KiB, remove_unreferenced=True)
    )
    assert first.removed == [str(path) + ".data"] and _locations(path) == set(SHARDS4)


def _per_tensor(model, path) -> None:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    convert_model_to_external_data(copy, all_tensors_to_one_file=False, size_threshold=0)
    onnx.save(copy, str(path))


# layout name -> (how the model is saved first, the files it reads, the re-layout's arguments)
LAYOUTS = {
    "4 shards to 2": (_four_shards, SHARDS4, {"max_shard_size": 16 * KiB}),
    "shards to one file": (_four_shards, SHARDS4, {}),
    "one file per tensor to one file": (_per_tensor, ["W0", "W1", "W2", "W3"], {}),
}


@pytest.mark.parametrize("remove", [False, True], ids=["kept", "removed"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_in_place_relayout_reports_left_over_files(tmp_path, layout, remove):
    """The old weights files are listed, kept by default, deleted on request; values stay."""
    setup, old, kwargs = LAYOUTS[layout]
    model, path = uint8_model(4, 5000), tmp_path / "m.onnx"
    setup(model, path)
    old_paths = sorted(str(tmp_path / name) for name in old)
    old_bytes = {name: (tmp_path / name).read_bytes() for name in old}
    kwargs = as_options({**kwargs, "remove_unreferenced": remove}, keep=("alignment",))
    result = onnxl.align_external_data_streaming(path, path, **kwargs)
    assert sorted(result.unreferenced) == old_paths
    assert _locations(path).isdisjoint(old)
    assert sorted(result.removed) == (old_paths if remove else [])
    if not remove:
        assert {n: (tmp_path / n).read_bytes() for n in old} == old_bytes
    written = sum(os.path.getsize(p) for p in result.weights_paths)
    assert int(result) == result.bytes_written == written and result == written
    assert sorted(os.listdir(tmp_path)) == sorted(
        [*(() if remove else old), "m.onnx", *map(os.path.basename, result.weights_paths)]
    )
    assert read_back(path) == tensor_bytes(model)


def _shared_variant(model, path):
    """4 shards, and v.onnx sharing shards 2-4 (its own W0 in v.onnx.data)."""
    _four_shards(model, path)
    variant = onnxl.load(path, load_external_data=False)
    variant.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.zeros(5000, np.uint8), "W0"))
    onnxl.save_model_with_shared_external_data(variant, path.parent / "v.onnx")
    assert _locations(path.parent / "v.onnx") == {"v.onnx.data", *SHARDS4[1:]}
    return SHARDS4[:1], {"max_shard_size": 16 * KiB}


def _old_copy(model, path):
    """One file per tensor, and v.onnx: a copy of the .onnx reading them all."""
    _per_tensor(model, path)
    shutil.copy(path, path.parent / "v.onnx")
    return [], {}


@pytest.mark.parametrize("setup", [_shared_variant, _old_copy], ids=["shared-variant", "copy"])
def test_files_another_model_reads_are_kept(tmp_path, setup):
    """Weights files another .onnx of the folder reads are neither listed nor removed."""
    model, path = uint8_model(4, 5000), tmp_path / "m.onnx"
    gone, kwargs = setup(model, path)
    other = read_back(tmp_path / "v.onnx")
    kwargs = as_options({**kwargs, "remove_unreferenced": True}, keep=("alignment",))
    result = onnxl.align_external_data_streaming(path, path, **kwargs)
    assert result.unreferenced == result.removed == [str(tmp_path / n) for n in gone]
    assert not any((tmp_path / n).exists() for n in gone)
    assert read_back(tmp_path / "v.onnx") == other
    assert read_back(path) == tensor_bytes(model)


def test_new_destination_leaves_nothing_unreferenced(tmp_path):
    """Re-aligning to another .onnx lists and removes nothing: the source still uses its files."""
    model, path = uint8_model(4, 5000), tmp_path / "m.onnx"
    _four_shards(model, path)
    before = folder_digest(tmp_path)
    result = onnxl.align_external_data_streaming(
        path, tmp_path / "n.onnx", options=onnxl.WriteOptions(remove_unreferenced=True)
    )
    assert result.unreferenced == result.removed == []
    assert {k: v for k, v in folder_digest(tmp_path).items() if k in before} == before
    assert int(result) == os.path.getsize(tmp_path / "n.onnx.data")
    assert read_back(tmp_path / "n.onnx") == tensor_bytes(model)


TYPED = ("float_data", "int32_data", "int64_data", "double_data", "raw_data")
# where _typed_model's tensors hold their values (float16 in int32_data, as the spec says)
FIELDS = {"F": "float_data", "I": "int64_data", "H": "int32_data", "D": "double_data"}
FIELDS |= {"C": "float_data", "S": "float_data"}


def _typed_model():
    """Tensors in float_data, int64_data, int32_data (float16), double_data, >= 1 KiB each,
    one in a Constant, plus a small float_data one; the outputs read every one of them."""
    rng = np.random.default_rng(0)
    values = {
        "F": (TensorProto.FLOAT, rng.standard_normal(512).astype(np.float32)),
        "I": (TensorProto.INT64, rng.integers(-(2**40), 2**40, 256)),
        "H": (TensorProto.FLOAT16, rng.standard_normal(1024).astype(np.float16)),
        "D": (TensorProto.DOUBLE, rng.standard_normal(256)),
        "C": (TensorProto.FLOAT, rng.standard_normal(512).astype(np.float32)),
        "S": (TensorProto.FLOAT, rng.standard_normal(8).astype(np.float32)),  # 32 bytes
    }
    t = {n: helper.make_tensor(n, dt, v.shape, v, raw=False) for n, (dt, v) in values.items()}
    nodes = [helper.make_node("Constant", [], ["C"], value=t.pop("C"))]
    nodes += [helper.make_node("Add", ["X", n], [f"Y{n}"]) for n in "FC"]
    nodes += [helper.make_node("Identity", [n], [f"Y{n}"]) for n in "IHDS"]
    outputs = [(f"Y{n}", dt, v.shape) for n, (dt, v) in values.items()]
    model = _model(nodes, [("X", TensorProto.FLOAT, [512])], outputs, list(t.values()))
    return model, {"X": rng.standard_normal(512).astype(np.float32)}


def _storage(path) -> dict:
    """{tensor name: (data_location, data fields still set)} of the flat model at ``path``."""
    model = onnx.load(str(path), load_external_data=False)
    tensors = [
        *model.graph.initializer,
        *(n.attribute[0].t for n in model.graph.node if n.op_type == "Constant"),
    ]
    return {x.name: (x.data_location, {f for f in TYPED if getattr(x, f)}) for x in tensors}


def _assert_moved_out(path, source_outputs, feeds, model):
    storage = _storage(path)
    for name in ("F", "I", "H", "D", "C"):
        assert storage[name] == (TensorProto.EXTERNAL, set()), name
    assert storage["S"] == (TensorProto.DEFAULT, {"float_data"})
    assert read_back(path) == tensor_bytes(model)
    for got, expected in zip(_session(path).run(None, feeds), source_outputs, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_align_moves_typed_field_tensors_out(tmp_path):
    """A single-file model's typed-field tensors become aligned external data; ORT agrees."""
    model, feeds = _typed_model()
    onnx.save(model, str(tmp_path / "src.onnx"))
    assert _storage(tmp_path / "src.onnx") == {
        n: (TensorProto.DEFAULT, {f}) for n, f in FIELDS.items()
    }
    expected = _session(tmp_path / "src.onnx").run(None, feeds)
    result = onnxl.align_external_data_streaming(tmp_path / "src.onnx", tmp_path / "dst.onnx")
    assert result.typed == result.moved == 5
    assert all(offset % 4096 == 0 for _, offset, _ in external_offsets(tmp_path / "dst.onnx"))
    _assert_moved_out(tmp_path / "dst.onnx", expected, feeds, model)


def test_save_moves_typed_field_tensors_out(tmp_path):
    """save(location=...) moves typed-field tensors too, without touching the caller's model."""
    model, feeds = _typed_model()
    before = model.SerializeToString()
    onnx.save(model, str(tmp_path / "src.onnx"))
    expected = _session(tmp_path / "src.onnx").run(None, feeds)
    onnxl.save(model, tmp_path / "m.onnx", location="w.data")
    assert model.SerializeToString() == before
    assert _locations(tmp_path / "m.onnx") == {"w.data"}
    _assert_moved_out(tmp_path / "m.onnx", expected, feeds, model)


@pytest.mark.parametrize("in_place", [False, True], ids=["new", "in-place"])
def test_inline_below_lets_onnxruntime_load_external_axes(tmp_path, in_place):
    """ORT refuses ReduceMean axes stored as external data; inline_below brings them back."""
    w = np.random.default_rng(1).standard_normal(256).astype(np.float32)
    axes = np.array([1], np.int64)
    nodes = [
        helper.make_node("Add", ["X", "W"], ["H"]),
        helper.make_node("ReduceMean", ["H", "axes"], ["Y"], keepdims=0),
    ]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(axes, "axes")]
    model = _model(
        nodes, [("X", TensorProto.FLOAT, [4, 256])], [("Y", TensorProto.FLOAT, [4])], inits
    )
    src = tmp_path / "m.onnx"
    save_two_file(model, src, size_threshold=0)
    assert _storage(src)["axes"][0] == TensorProto.EXTERNAL
    with pytest.raises(Exception, match="axes"):
        _session(src)
    dst = src if in_place else tmp_path / "a.onnx"
    result = onnxl.align_external_data_streaming(src, dst, inline_below=1024)
    assert (result.inlined, result.moved, result.unreferenced) == (1, 1, [])
    inline = onnx.load(str(dst), load_external_data=False).graph.initializer[1]
    assert inline.data_location == TensorProto.DEFAULT and inline.raw_data == axes.tobytes()
    assert _locations(dst) == {dst.name + ".data"}
    x = np.random.default_rng(2).standard_normal((4, 256)).astype(np.float32)
    (y,) = _session(dst).run(None, {"X": x})
    np.testing.assert_allclose(y, (x + w).mean(axis=1), rtol=1e-5, atol=1e-6)


def _add_model(n: int = 3, size: int = 1250):
    """``Y{i} = X + W{i}``, ``n`` float weights of ``size`` values (5000 bytes each)."""
    rng = np.random.default_rng(4)
    ws = [rng.standard_normal(size).astype(np.float32) for _ in range(n)]
    model = _model(
        [helper.make_node("Add", ["X", f"W{i}"], [f"Y{i}"]) for i in range(n)],
        [("X", TensorProto.FLOAT, [size])],
        [(f"Y{i}", TensorProto.FLOAT, [size]) for i in range(n)],
        [numpy_helper.from_array(w, f"W{i}") for i, w in enumerate(ws)],
    )
    return model, ws


def _run_like_transformers_js(folder, ws):
    """Load as transformers.js does in a browser: .onnx bytes, weights files in memory."""
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    if not hasattr(options, "add_external_initializers_from_files_in_memory"):
        pytest.skip(
            f"onnxruntime {ort.__version__} has no "
            "SessionOptions.add_external_initializers_from_files_in_memory (1.24.1 has it)"
        )
    buffers = [np.fromfile(folder / name, np.uint8) for name in TJS]
    options.add_external_initializers_from_files_in_memory(TJS, buffers, [b.size for b in buffers])
    session = _session((folder / "model.onnx").read_bytes(), options)
    x = np.linspace(-1, 1, ws[0].size, dtype=np.float32)
    for y, w in zip(session.run(None, {"X": x}), ws, strict=True):
        np.testing.assert_array_equal(y, x + w)


@pytest.mark.parametrize("writer", ["align", "align model.onnx_data", "save"])
def test_transformers_js_shard_names(tmp_path, writer):
    """Shards are model.onnx_data, _1, _2, and load from memory as transformers.js loads them."""
    model, ws = _add_model()
    out = tmp_path / "out"
    out.mkdir()
    if writer == "save":
        opts = onnxl.SerializeOptions(max_shard_size=8 * KiB, shard_naming="transformers.js")
        onnxl.save(model, out / "model.onnx", "model.onnx_data", options=opts)
    else:
        onnx.save(model, str(tmp_path / "src.onnx"))
        weights = writer.split()[1:] or [None]
        result = onnxl.align_external_data_streaming(
            tmp_path / "src.onnx",
            out / "model.onnx",
            *weights,
            options=onnxl.WriteOptions(max_shard_size=8 * KiB, shard_naming="transformers.js"),
        )
        assert result.weights_paths == [str(out / n) for n in TJS]
    assert sorted(os.listdir(out)) == sorted(["model.onnx", *TJS])
    assert _locations(out / "model.onnx") == set(TJS)
    _run_like_transformers_js(out, ws)


@pytest.mark.parametrize("name", ["w.data", "model.onnx.data"])
def test_transformers_js_refuses_other_weights_names(tmp_path, name):
    """A weights name transformers.js would not look for is a ValueError; nothing is written."""
    model, _ = _add_model()
    onnx.save(model, str(tmp_path / "src.onnx"))
    before = folder_digest(tmp_path)
    with pytest.raises(ValueError, match="model.onnx_data"):
        onnxl.align_external_data_streaming(
            tmp_path / "src.onnx",
            tmp_path / "model.onnx",
            name,
            options=onnxl.WriteOptions(shard_naming="transformers.js"),
        )
    opts = onnxl.SerializeOptions(shard_naming="transformers.js")
    with pytest.raises(ValueError, match="model.onnx_data"):
        onnxl.save(model, tmp_path / "model.onnx", name, options=opts)
    assert folder_digest(tmp_path) == before


@pytest.mark.parametrize("dst", ["model.onnx", "m.onnx"], ids=["new", "in-place"])
def test_transformers_js_over_100_files_fails_before_writing(tmp_path, dst):
    """101 shards are refused (transformers.js loads 100) with the folder left as it was."""
    save_two_file(uint8_model(101, 100), tmp_path / "m.onnx", size_threshold=0)
    before = folder_digest(tmp_path)
    with pytest.raises(ValueError, match="101 weights files"):
        onnxl.align_external_data_streaming(
            tmp_path / "m.onnx",
            tmp_path / dst,
            options=onnxl.WriteOptions(max_shard_size=100, shard_naming="transformers.js"),
        )
    assert folder_digest(tmp_path) == before


def test_onnx_ir_shards_load_with_onnx_ir(tmp_path):
    """Default (onnx-ir) shard names load with onnx_ir.load, every value equal."""
    ir = pytest.importorskip("onnx_ir")
    model, ws = _add_model()
    onnx.save(model, str(tmp_path / "src.onnx"))
    result = onnxl.align_external_data_streaming(
        tmp_path / "src.onnx",
        tmp_path / "m.onnx",
        options=onnxl.WriteOptions(max_shard_size=8 * KiB),
    )
    names = [f"m-{i:05d}-of-00003.onnx.data" for i in (1, 2, 3)]
    assert result.weights_paths == [str(tmp_path / n) for n in names]
    loaded = ir.load(str(tmp_path / "m.onnx"))
    for i, w in enumerate(ws):
        np.testing.assert_array_equal(loaded.graph.initializers[f"W{i}"].const_value.numpy(), w)


def test_default_weights_path_is_beside_destination(tmp_path, monkeypatch):
    """With no weights path, the weights go to DST.data beside DST, not in the working folder."""
    model = uint8_model(3, 5000)
    save_two_file(model, tmp_path / "m.onnx", "shared.bin")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    result = onnxl.align_external_data_streaming("m.onnx", os.path.join("sub", "x.onnx"))
    assert result.weights_paths == [str(tmp_path / "sub" / "x.onnx.data")]
    assert sorted(os.listdir(tmp_path / "sub")) == ["x.onnx", "x.onnx.data"]
    assert _locations(tmp_path / "sub" / "x.onnx") == {"x.onnx.data"}
    assert read_back(tmp_path / "sub" / "x.onnx") == tensor_bytes(model)


@contextlib.contextmanager
def _read_only(folder):
    """Make ``folder`` unwritable: chmod 0o555, or ``chattr +i`` for root (who ignores modes)."""
    root = os.geteuid() == 0
    lock, unlock = (
        (["chattr", "+i"], ["chattr", "-i"]) if root else (["chmod", "555"], ["chmod", "755"])
    )
    if (root and not shutil.which("chattr")) or subprocess.run(
        [*lock, str(folder)], capture_output=True
    ).returncode:
        pytest.skip("cannot make a folder read-only here (root, without chattr +i)")
    try:
        yield
    finally:
        subprocess.run([*unlock, str(folder)], check=True)


@pytest.mark.parametrize("weights", ["w.data", None], ids=["weights", "onnx-only"])
def test_read_only_destination_error_names_the_users_path(tmp_path, weights):
    """PermissionError names the file the user asked for, never an onnx-light temporary."""
    model = uint8_model(3, 5000 if weights else 100)
    onnx.save(model, str(tmp_path / "src.onnx"))
    ro = tmp_path / "ro"
    ro.mkdir()
    dst = ro / "a.onnx"
    with _read_only(ro), pytest.raises(PermissionError) as info:
        onnxl.align_external_data_streaming(tmp_path / "src.onnx", dst, weights)
    message = str(info.value)
    assert str(ro / weights if weights else dst) in message
    assert "onnx-light-tmp" not in message and "onnx-light-tmp" not in str(info.value.filename)
    assert os.listdir(ro) == []


def test_result_counts_every_tensor_left_inline(tmp_path):
    """``inline`` counts the small tensors too, raw or typed, and those brought back inline."""
    big = numpy_helper.from_array(np.zeros(1024, np.float32), "big")
    raw = numpy_helper.from_array(np.ones(8, np.float32), "raw")
    typed = helper.make_tensor("typed", TensorProto.FLOAT, [8], [1.0] * 8)
    graph = helper.make_graph([], "g", [], [], [big, raw, typed])
    onnx.save(helper.make_model(graph), str(tmp_path / "m.onnx"))
    result = onnxl.align_external_data_streaming(tmp_path / "m.onnx", tmp_path / "a.onnx")
    assert (result.moved, result.inline, result.inlined) == (1, 2, 0)
    back = onnxl.align_external_data_streaming(
        tmp_path / "a.onnx", tmp_path / "b.onnx", inline_below=8192
    )
    assert (back.moved, back.inline, back.inlined) == (0, 3, 1)


def _values(path) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnxl.load(path).graph.initializer}


def _gemm(tmp_path, name="m.onnx", location="m.onnx.data"):
    model = make_runnable_model(seed=7)
    onnxl.save(model, tmp_path / name, location, options=onnxl.SerializeOptions(size_threshold=0))
    return tmp_path / name


def test_prune_never_deletes_a_model(tmp_path):
    """A view saved from a skip_raw_data load reads base.onnx's inline bytes: re-laying
    the view out leaves base.onnx unreferenced by it, and it is still never deleted."""
    onnxl.save(make_runnable_model(seed=2), tmp_path / "base.onnx")
    view = onnxl.load(tmp_path / "base.onnx", load_external_data=False, skip_raw_data=True)
    onnxl.save(view, tmp_path / "view.onnx")
    before = _values(tmp_path / "base.onnx")
    result = onnxl.align_external_data_streaming(
        tmp_path / "view.onnx",
        tmp_path / "view.onnx",
        options=onnxl.WriteOptions(remove_unreferenced=True),
    )
    assert result.unreferenced == result.removed == []
    assert _values(tmp_path / "base.onnx").keys() == before.keys()


@pytest.mark.parametrize("where", ["Variant.ONNX", "sub/other.onnx"])
def test_prune_keeps_files_read_by_models_named_otherwise_or_below(tmp_path, where):
    """A model with an upper-case extension, or in a subfolder, reading an old file keeps it."""
    (tmp_path / "sub").mkdir()
    path = _gemm(tmp_path / "sub" if "/" in where else tmp_path, "m.onnx", "m.onnx.data")
    if "/" in where:  # the model re-laid out is the one above, its weights in sub/
        onnxl.align_external_data_streaming(path, tmp_path / "top.onnx", "sub/w.data")
        path = tmp_path / "top.onnx"
        reader_location, old = "w.data", tmp_path / "sub" / "w.data"
    else:
        reader_location, old = "m.onnx.data", tmp_path / "m.onnx.data"
    reader = onnxl.load(path, load_external_data=False)
    for site in iter_tensors(reader):
        if site.tensor.external_data:
            site.tensor.external_data[0].value = reader_location
    onnx.save(reader, str(tmp_path / where))
    expected = _values(tmp_path / where)
    result = onnxl.align_external_data_streaming(
        path, path, "new.data", options=onnxl.WriteOptions(remove_unreferenced=True)
    )
    assert str(old) not in result.unreferenced and old.exists()
    for name, value in _values(tmp_path / where).items():
        np.testing.assert_array_equal(value, expected[name])


def test_in_place_align_refuses_to_replace_weights_another_model_reads(tmp_path):
    """variant.onnx shares m.onnx.data: re-aligning m.onnx in place over it would break
    the variant; the same call with a new weights name works and leaves it intact."""
    path = _gemm(tmp_path)
    variant = onnxl.load(path, load_external_data=False)
    onnxl.save_model_with_shared_external_data(variant, tmp_path / "variant.onnx")
    expected = _values(tmp_path / "variant.onnx")
    digest = folder_digest(tmp_path)
    with pytest.raises(onnxl.ExternalDataError, match="variant.onnx.*another model"):
        onnxl.align_external_data_streaming(path, path, alignment=64)
    assert folder_digest(tmp_path) == digest
    onnxl.align_external_data_streaming(path, path, "m2.onnx.data", alignment=64)
    for name, value in _values(tmp_path / "variant.onnx").items():
        np.testing.assert_array_equal(value, expected[name])


def test_inline_below_keeps_small_inline_tensors_inline(tmp_path):
    """size_threshold=0 moves every inline tensor, but not those under inline_below."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    w = numpy_helper.from_array(np.ones((4, 256), np.float32), "W")
    node = helper.make_node("ReduceMean", ["W", "axes"], ["y"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", [], [out], [w, axes])
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]),
        str(tmp_path / "m.onnx"),
    )
    result = onnxl.align_external_data_streaming(
        tmp_path / "m.onnx",
        tmp_path / "o.onnx",
        inline_below=1024,
        options=onnxl.WriteOptions(size_threshold=0),
    )
    assert (result.moved, result.inline) == (1, 1)
    meta = onnx.load(str(tmp_path / "o.onnx"), load_external_data=False)
    kinds = {t.name: t.data_location for t in meta.graph.initializer}
    assert kinds == {"W": TensorProto.EXTERNAL, "axes": TensorProto.DEFAULT}


def _sparse_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    values = numpy_helper.from_array(rng.standard_normal(600).astype(np.float32), "sv")
    indices = numpy_helper.from_array(np.arange(0, 1200, 2, dtype=np.int64), "si")
    sparse = helper.make_sparse_tensor(values, indices, [1200])
    dense = numpy_helper.from_array(rng.standard_normal(600).astype(np.float32), "dense")
    graph = helper.make_graph([], "g", [], [], [dense], sparse_initializer=[sparse])
    return helper.make_model(graph)


@pytest.mark.parametrize("how", ["save", "align"])
def test_sparse_tensors_stay_inline(tmp_path, how):
    """onnx never stores sparse tensors externally (its checker cannot read them): neither do we."""
    model = _sparse_model()
    onnx.save(model, str(tmp_path / "single.onnx"))
    if how == "save":
        onnxl.save(
            model, tmp_path / "m.onnx", "m.data", options=onnxl.SerializeOptions(size_threshold=0)
        )
    else:
        onnxl.align_external_data_streaming(
            tmp_path / "single.onnx",
            tmp_path / "m.onnx",
            "m.data",
            options=onnxl.WriteOptions(size_threshold=0),
        )
    saved = onnx.load(str(tmp_path / "m.onnx"), load_external_data=False)
    assert saved.graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    sparse = saved.graph.sparse_initializer[0]
    assert sparse.values.data_location != onnx.TensorProto.EXTERNAL
    assert sparse.indices.data_location != onnx.TensorProto.EXTERNAL
    onnx.checker.check_model(str(tmp_path / "m.onnx"))
    assert tensor_bytes(onnx.load(str(tmp_path / "m.onnx"))) == tensor_bytes(model)


@pytest.mark.parametrize("how", ["save", "align"])
def test_raw_data_with_a_typed_field_is_refused_when_moved(tmp_path, how):
    t = numpy_helper.from_array(np.arange(600, dtype=np.float32), "both")
    t.float_data.extend([1.0, 2.0])  # now raw_data and float_data
    model = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    onnx.save(model, str(tmp_path / "single.onnx"))
    with pytest.raises(onnxl.ExternalDataError, match="'both'.*raw_data and float_data"):
        if how == "save":
            onnxl.save(model, tmp_path / "m.onnx", "m.data")
        else:
            onnxl.align_external_data_streaming(
                tmp_path / "single.onnx", tmp_path / "m.onnx", "m.data"
            )
    assert sorted(os.listdir(tmp_path)) == ["single.onnx"]
    # kept inline, it is the caller's own business, as in onnx
    onnxl.save(model, tmp_path / "one.onnx")
    onnxl.align_external_data_streaming(
        tmp_path / "single.onnx",
        tmp_path / "a.onnx",
        "a.data",
        options=onnxl.WriteOptions(size_threshold=2**30),
    )


def test_inline_tensor_of_odd_length_stays_inline(tmp_path):
    """onnx accepts an inline raw_data that does not match dtype x dims: kept inline, it is
    copied as it is; moved to external data, it is refused (a reader would refuse it)."""
    t = onnx.TensorProto(name="odd", data_type=onnx.TensorProto.FLOAT, dims=[600])
    t.raw_data = bytes(2000)  # 2400 expected
    model = helper.make_model(helper.make_graph([], "g", [], [], [t]))
    onnx.save(model, str(tmp_path / "single.onnx"))
    onnxl.align_external_data_streaming(
        tmp_path / "single.onnx",
        tmp_path / "a.onnx",
        "a.data",
        options=onnxl.WriteOptions(size_threshold=10**9),
    )
    assert onnx.load(str(tmp_path / "a.onnx")).graph.initializer[0].raw_data == bytes(2000)
    with pytest.raises(onnxl.ExternalDataError, match="'odd'.*does not match"):
        onnxl.align_external_data_streaming(tmp_path / "single.onnx", tmp_path / "b.onnx", "b.data")


def _identity_model(value: float):
    w = numpy_helper.from_array(np.full(1000, value, np.float32), "w")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1000])
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_files_a_model_above_reads_are_kept_and_never_replaced(tmp_path):
    """a.onnx keeps its weights in sub/w.data (a location onnx-light writes): pruning
    sub/m.onnx keeps it, and saving sub/new.onnx over it is refused."""
    (tmp_path / "sub").mkdir()
    onnxl.save(_identity_model(1.0), tmp_path / "a.onnx", "sub/w.data")
    shared = onnxl.load(tmp_path / "a.onnx", load_external_data=False)
    shared.graph.initializer[0].external_data[0].value = "w.data"
    onnx.save(shared, str(tmp_path / "sub" / "m.onnx"))
    result = onnxl.align_external_data_streaming(
        tmp_path / "sub" / "m.onnx",
        tmp_path / "sub" / "m.onnx",
        options=onnxl.WriteOptions(remove_unreferenced=True),
    )
    assert result.removed == [] and (tmp_path / "sub" / "w.data").exists()
    digest = folder_digest(tmp_path / "sub")
    with pytest.raises(onnxl.ExternalDataError, match="a.onnx.*another model"):
        onnxl.save(_identity_model(7.0), tmp_path / "sub" / "new.onnx", "w.data")
    assert folder_digest(tmp_path / "sub") == digest
    assert (_values(tmp_path / "a.onnx")["w"] == 1.0).all()


def test_the_result_prints_as_the_number_it_was(tmp_path):
    """str() and f-strings of the result give the bytes written, as the int did."""
    path = _gemm(tmp_path)
    result = onnxl.align_external_data_streaming(path, tmp_path / "o.onnx")
    assert str(result) == f"{result}" == str(result.bytes_written) and "bytes_written=" in repr(
        result
    )


def test_numpy_integers_are_accepted(tmp_path):
    path = _gemm(tmp_path)
    result = onnxl.align_external_data_streaming(
        path, tmp_path / "o.onnx", alignment=np.int64(64), chunk_size=np.int32(65536)
    )
    assert all(off % 64 == 0 for _, off, _ in external_offsets(tmp_path / "o.onnx"))
    assert result > 0


def test_external_sparse_values_come_back_inline(tmp_path):
    """Sparse values loaded with skip_raw_data are references: copied, they come back
    inline (onnx never loads external sparse values)."""
    values = numpy_helper.from_array(np.arange(600, dtype=np.float32), "values")
    indices = numpy_helper.from_array(np.arange(600, dtype=np.int64) * 2, "indices")
    sparse = helper.make_sparse_tensor(values, indices, [1200])
    graph = helper.make_graph([], "g", [], [], sparse_initializer=[sparse])
    onnx.save(helper.make_model(graph), str(tmp_path / "m.onnx"))
    view = onnxl.load(tmp_path / "m.onnx", load_external_data=False, skip_raw_data=True)
    (tmp_path / "out").mkdir()
    opts = onnxl.SerializeOptions(use_external_data_location=False, base_dir=tmp_path / "m.onnx")
    onnxl.save(view, tmp_path / "out" / "m.onnx", "m.onnx.data", options=opts)
    onnx.save(view, str(tmp_path / "view.onnx"))
    onnxl.align_external_data_streaming(tmp_path / "view.onnx", tmp_path / "out" / "a.onnx")
    for name in ("m.onnx", "a.onnx"):
        got = onnx.load(str(tmp_path / "out" / name)).graph.sparse_initializer[0].values
        assert got.data_location == TensorProto.DEFAULT
        np.testing.assert_array_equal(numpy_helper.to_array(got), np.arange(600, dtype=np.float32))
