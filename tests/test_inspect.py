"""info and verify in Python: inspect_model, inspect_models, verify_model, verify_models.

A script gets what ``onnx-light info`` and ``onnx-light verify`` print, as
frozen objects: per tensor, per file, per shared range, per loader; the
command formats these objects and nothing else (its JSON carries the same
values).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as onh
import pytest
from helpers import run_cli as _cli

import onnx_light.onnx as onnxl


def _model(n: int = 4, dim: int = 32, seed: int = 0) -> onnx.ModelProto:
    """``n`` float32 [dim, dim] weights, and a small int64 one and a named Constant."""
    rng = np.random.default_rng(seed)
    inits = [
        onh.from_array(rng.standard_normal((dim, dim)).astype(np.float32), f"W{i}")
        for i in range(n)
    ]
    inits.append(onh.from_array(np.arange(3, dtype=np.int64), "small"))
    nodes, x = [], "X"
    for i in range(n):
        nodes.append(oh.make_node("MatMul", [x, f"W{i}"], [f"h{i}"]))
        x = f"h{i}"
    value = onh.from_array(np.ones(4, np.float32))
    nodes.append(oh.make_node("Constant", [], ["c"], name="const", value=value))
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, dim])],
        [oh.make_tensor_value_info(x, onnx.TensorProto.FLOAT, [1, dim])],
        inits,
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])


def _two_file(folder, name="m.onnx", location="m.onnx.data", model=None) -> str:
    path = os.path.join(folder, name)
    onnx.save(
        model or _model(),
        path,
        save_as_external_data=True,
        location=location,
        size_threshold=100,
    )
    return path


def test_a_sharded_model_lists_its_shards_and_their_tensors(tmp_path):
    options = onnxl.SerializeOptions()
    options.max_shard_size = 2 * 32 * 32 * 4  # two weights a shard
    options.alignment = 4096
    onnxl.save(_model(), tmp_path / "m.onnx", location="m.onnx.data", options=options)
    info = onnxl.inspect_model(tmp_path / "m.onnx")
    assert info.model == str(tmp_path / "m.onnx")
    assert [t.name for t in info.tensors] == ["W0", "W1", "W2", "W3", "small", "const.value"]
    assert (info.external_tensors, info.inline_tensors, info.inline_bytes) == (4, 2, 24 + 16)
    shards = [f for f in info.files if f.location is not None]
    assert len(shards) == 2 and all(not f.missing for f in shards)
    for f in shards:
        assert f.tensor_count == 2 and f.tensor_bytes == 2 * 4096
        assert f.file_size == os.path.getsize(tmp_path / f.location)
    w1 = info.tensors[1]
    assert (w1.dtype, w1.shape, w1.location, w1.length) == (
        "FLOAT",
        (32, 32),
        shards[0].location,
        4096,
    )
    assert w1.offset == 4096 and w1.offset_pow2 == 4096
    assert info.alignment == 4096 and info.aligned_to(4096) and not info.aligned_to(65536)
    assert info.shared_ranges == () and info.missing_files == ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.alignment = 1


def test_a_single_file_model_has_only_inline_tensors(tmp_path):
    onnx.save(_model(), str(tmp_path / "single.onnx"))
    info = onnxl.inspect_model(str(tmp_path / "single.onnx"))
    assert info.external_tensors == 0 and info.alignment is None
    assert info.aligned_to(4096)  # nothing external is misaligned
    (inline,) = info.files
    assert inline.location is None and inline.file_size is None and inline.tensor_count == 6
    assert all(t.location is None and t.offset is None for t in info.tensors)
    check = onnxl.verify_model(tmp_path / "single.onnx")
    assert (check.external_tensors, check.problems, check.valid, check.loadable) == (
        0,
        (),
        True,
        True,
    )


def test_a_missing_weights_file_shows_in_both(tmp_path):
    path = _two_file(tmp_path)
    os.remove(tmp_path / "m.onnx.data")
    info = onnxl.inspect_model(path)
    assert info.missing_files == ("m.onnx.data",)
    (data,) = [f for f in info.files if f.location is not None]
    assert data.missing and data.file_size is None and data.tensor_count == 4
    check = onnxl.verify_model(path)
    assert not check.valid and check.external_tensors == 4
    (problem,) = check.problems  # the four tensors share one line: one cause
    assert problem.startswith("4 tensors (") and "m.onnx.data" in problem


def test_a_truncated_weights_file_is_one_problem_per_tensor(tmp_path):
    path = _two_file(tmp_path)
    with open(tmp_path / "m.onnx.data", "r+b") as f:
        f.truncate(32 * 32 * 4 + 10)
    report = onnxl.verify_models([path])
    assert not report.valid
    (check,) = report.models
    assert len(check.problems) == 3 and all("'W" in p for p in check.problems)


def test_a_model_that_cannot_be_read_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        onnxl.verify_model(tmp_path / "nothere.onnx")
    with pytest.raises(FileNotFoundError):
        onnxl.inspect_model(tmp_path / "nothere.onnx")
    (tmp_path / "garbage.onnx").write_bytes(b"\xff" * 100)
    with pytest.raises(ValueError):
        onnxl.verify_model(tmp_path / "garbage.onnx")
    with pytest.raises(ValueError):
        onnxl.inspect_models([tmp_path / "garbage.onnx"])


def test_shared_ranges_within_and_across_models(tmp_path):
    model = _model()
    model.graph.initializer[1].CopyFrom(
        onh.from_array(onh.to_array(model.graph.initializer[0]), "W1")
    )
    a, b = (
        _two_file(tmp_path, "a.onnx", "a.data", model),
        _two_file(tmp_path, "b.onnx", "b.data", model),
    )
    out = tmp_path / "out"
    out.mkdir()
    onnxl.deduplicate_external_data([a, b], [out / "a.onnx", out / "b.onnx"], out / "w.data")
    paths = [str(out / "a.onnx"), str(out / "b.onnx")]
    (within,) = onnxl.inspect_model(paths[0]).shared_ranges
    assert within.tensors == ((paths[0], "W0"), (paths[0], "W1")) and within.length == 4096
    report = onnxl.inspect_models(paths)
    assert report.transposed is None  # not looked for
    assert [len(r.tensors) for r in report.shared_ranges] == [4, 2, 2]  # W0 = W1, W2, W3
    assert {m for r in report.shared_ranges for m, _ in r.tensors} == set(paths)
    checked = onnxl.verify_models(paths)
    assert checked.valid and checked.shared_ranges == report.shared_ranges


def test_transposed_twins_are_found_when_asked(tmp_path):
    w = np.random.default_rng(1).standard_normal((16, 48)).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("Identity", ["E"], ["y"])],
        "g",
        [],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [16, 48])],
        [onh.from_array(w, "E"), onh.from_array(np.ascontiguousarray(w.T), "ET")],
    )
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)])
    path = _two_file(tmp_path, model=model, location="m.data")
    report = onnxl.inspect_models([pathlib.Path(path)], transposed=True)
    assert report.transposed == (((path, "E"), (path, "ET"), w.nbytes),)


def test_each_loader_verdict_on_a_cache_snapshot(tmp_path):
    """A Hugging Face cache snapshot: every file a link into blobs/. Valid for onnx-light
    and onnxruntime; onnx refuses the links, onnx-ir a file outside the folder."""
    blobs, snap = tmp_path / "blobs", tmp_path / "snap"
    blobs.mkdir()
    snap.mkdir()
    _two_file(blobs, "m.onnx", "m.onnx.data")
    os.rename(blobs / "m.onnx", blobs / "a1")
    os.rename(blobs / "m.onnx.data", blobs / "b2")
    os.symlink("../blobs/a1", snap / "m.onnx")
    os.symlink("../blobs/b2", snap / "m.onnx.data")
    check = onnxl.verify_model(snap / "m.onnx")
    assert check.valid and not check.loadable
    verdicts = {v.loader: v for v in check.loaders}
    assert list(verdicts) == ["onnx", "onnxruntime", "onnx-ir"]
    assert verdicts["onnx"].reasons == ("m.onnx.data is a symbolic link",)
    assert verdicts["onnx"].rule == "onnx >= 1.21" and not verdicts["onnx"].accepts
    assert verdicts["onnxruntime"].accepts and verdicts["onnxruntime"].reasons == ()
    assert not verdicts["onnx-ir"].accepts


def test_the_command_prints_these_objects(tmp_path, capsys):
    """``info --json`` and ``verify --json`` carry the values of the objects."""
    path = _two_file(tmp_path)
    info = onnxl.inspect_model(path)
    code, out, _ = _cli(capsys, "info", "--json", path)
    doc = json.loads(out)
    assert code == 0 and doc["model"] == info.model
    assert [(t["name"], t["offset"], t["length"], t["offset_pow2"]) for t in doc["tensors"]] == [
        (t.name, t.offset, t.length, t.offset_pow2) for t in info.tensors
    ]
    assert [(f["location"], f["tensors"], f["bytes"]) for f in doc["files"]] == [
        (f.location, f.tensor_count, f.tensor_bytes) for f in info.files
    ]
    check = onnxl.verify_model(path)
    code, out, _ = _cli(capsys, "verify", "--json", path)
    (entry,) = json.loads(out)["models"]
    assert code == 0 and entry["external_tensors"] == check.external_tensors
    assert [(v["loader"], v["accepts"]) for v in entry["loaders"]] == [
        (v.loader, v.accepts) for v in check.loaders
    ]
