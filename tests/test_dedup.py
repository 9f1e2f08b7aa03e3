"""Weights stored once: deduplicate_external_data within and across models."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from helpers import (
    external_offsets,
    external_places,
    folder_digest,
    read_back,
    save_two_file,
    write_safetensors,
)
from onnx import numpy_helper

import onnx_light.onnx as onnxl
from benchmarks.harness import make_gemm_model, model_inputs

DIM = 64


def _variant(model: onnx.ModelProto, changed: dict[str, int]) -> onnx.ModelProto:
    """A copy of ``model`` with the named initializers given new random values."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.name in changed:
            rng = np.random.default_rng(changed[init.name])
            arr = numpy_helper.to_array(init)
            new = (rng.standard_normal(arr.shape) * 0.1).astype(arr.dtype)
            init.CopyFrom(numpy_helper.from_array(new, init.name))
    return out


def _pair(folder, n=8, changed=("W0", "W1")):
    """Two two-file models of one folder sharing all weights but ``changed``."""
    folder.mkdir(exist_ok=True)
    base = make_gemm_model(n, DIM)
    save_two_file(base, folder / "a.onnx", size_threshold=0)
    save_two_file(
        _variant(base, {k: 7 + i for i, k in enumerate(changed)}),
        folder / "b.onnx",
        size_threshold=0,
    )
    return [str(folder / "a.onnx"), str(folder / "b.onnx")]


def _run(path):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, model_inputs(DIM, 2))[0]


def test_two_models_share_their_identical_weights(tmp_path):
    srcs = _pair(tmp_path / "src")
    before = folder_digest(tmp_path / "src")
    expected = [read_back(p) for p in srcs]
    outputs = [_run(p) for p in srcs]
    out = tmp_path / "out"
    out.mkdir()
    dsts = [str(out / "a.onnx"), str(out / "b.onnx")]
    result = onnxl.deduplicate_external_data(srcs, dsts, "weights.data")
    assert folder_digest(tmp_path / "src") == before  # sources untouched
    for dst, exp, y in zip(dsts, expected, outputs, strict=True):
        assert read_back(dst) == exp
        np.testing.assert_array_equal(_run(dst), y)
        onnx.checker.check_model(dst)
        assert {loc for loc, _, _ in external_offsets(dst)} == {"weights.data"}
        assert all(off % 4096 == 0 for _, off, _ in external_offsets(dst))
    # 8 weights + 8 biases per model; W0, W1 differ: 2 x 16 - 14 shared ranges
    unique = {(off, n) for d in dsts for _, off, n in external_offsets(d)}
    assert len(unique) == 18
    weight, bias = DIM * DIM * 4, DIM * 4
    assert result.bytes_before == 2 * 8 * (weight + bias)
    assert result.bytes_written == os.path.getsize(out / "weights.data")
    assert result.bytes_written <= sum(-(-n // 4096) * 4096 for _, n in unique)  # each range once
    shared = {tuple(sorted(name for _, name in g)) for g in result.groups}
    assert ("W2", "W2") in shared and ("B0", "B0") in shared
    assert not any("W0" in g for g in shared)
    assert result.unreferenced == [] and result.transposed == []


def test_identical_tensors_within_one_model_stored_once_whatever_their_names(tmp_path):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((DIM, DIM)) * 0.1).astype(np.float32)
    model = make_gemm_model(2, DIM)
    inits = model.graph.initializer
    inits[0].CopyFrom(numpy_helper.from_array(w, "W0"))
    inits[2].CopyFrom(numpy_helper.from_array(w, "W1"))  # tied: the same bytes
    # the same bytes as int32, another shape: equal bytes are stored once too
    model.graph.initializer.append(numpy_helper.from_array(w.view(np.int32).reshape(-1), "ids"))
    src = tmp_path / "m.onnx"
    onnx.save(model, src)  # one file: inline tensors take part
    result = onnxl.deduplicate_external_data([src], [tmp_path / "d.onnx"], "d.onnx.data")
    offsets = external_places(tmp_path / "d.onnx")
    assert offsets["W0"] == offsets["W1"] == offsets["ids"]
    assert os.path.getsize(tmp_path / "d.onnx.data") < 2 * DIM * DIM * 4
    assert read_back(tmp_path / "d.onnx") == read_back(src)
    assert [sorted(n for _, n in g) for g in result.groups] == [["W0", "W1", "ids"]]


def test_in_place_shares_and_lists_then_removes_the_old_files(tmp_path):
    srcs = _pair(tmp_path / "m")
    expected = [read_back(p) for p in srcs]
    result = onnxl.deduplicate_external_data(srcs, srcs, "shared.data")
    assert sorted(os.path.basename(p) for p in result.unreferenced) == [
        "a.onnx.data",
        "b.onnx.data",
    ]
    assert result.removed == []
    for p, exp in zip(srcs, expected, strict=True):
        assert read_back(p) == exp
    # again, into another file, removing what the models read before (shared.data);
    # the files the first call left are not this call's to remove
    again = onnxl.deduplicate_external_data(
        srcs, srcs, "shared2.data", options=onnxl.WriteOptions(remove_unreferenced=True)
    )
    assert [os.path.basename(p) for p in again.removed] == ["shared.data"]
    assert sorted(os.listdir(tmp_path / "m")) == [
        "a.onnx",
        "a.onnx.data",
        "b.onnx",
        "b.onnx.data",
        "shared2.data",
    ]
    for p, exp in zip(srcs, expected, strict=True):
        assert read_back(p) == exp


def test_a_failure_before_the_commit_leaves_every_file_as_it_was(tmp_path, monkeypatch):
    srcs = _pair(tmp_path / "m")
    before = folder_digest(tmp_path / "m")
    import onnx_light.onnx._write.finish as ending  # where every writer writes its .onnx

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ending, "write_pieces", broken)
    with pytest.raises(OSError, match="No space left"):
        onnxl.deduplicate_external_data(srcs, srcs, "shared.data")
    assert folder_digest(tmp_path / "m") == before  # nothing added, nothing changed


def test_a_transposed_copy_is_reported_not_shared(tmp_path):
    rng = np.random.default_rng(1)
    emb = (rng.standard_normal((96, 32)) * 0.1).astype(np.float32)
    model = onnx.helper.make_model(
        onnx.helper.make_graph(
            [onnx.helper.make_node("Identity", ["wte"], ["Y"])],
            "g",
            [],
            [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [96, 32])],
            [
                numpy_helper.from_array(emb, "wte"),
                numpy_helper.from_array(np.ascontiguousarray(emb.T), "lm_head"),
            ],
        )
    )
    onnx.save(model, tmp_path / "m.onnx")
    result = onnxl.deduplicate_external_data([tmp_path / "m.onnx"], [tmp_path / "d.onnx"], "d.data")
    assert [(a[1], b[1], n) for a, b, n in result.transposed] == [("wte", "lm_head", emb.nbytes)]
    assert result.groups == []
    assert read_back(tmp_path / "d.onnx") == read_back(tmp_path / "m.onnx")


def test_tensors_held_by_a_reused_safetensors_file_point_into_it(tmp_path):
    model = make_gemm_model(4, DIM)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    arrays = {"other": np.arange(300, dtype=np.int64), "W0": weights["W0"], "W1": weights["W1"]}
    out = tmp_path / "pub"
    out.mkdir()
    write_safetensors(out / "model.safetensors", arrays)
    st_before = folder_digest(out)
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    result = onnxl.deduplicate_external_data(
        [src], [out / "model.onnx"], "model.onnx.data", reuse=[out / "model.safetensors"]
    )
    assert folder_digest(out)["model.safetensors"] == st_before["model.safetensors"]
    places = external_places(out / "model.onnx")
    assert {places[n][0] for n in ("W0", "W1")} == {"model.safetensors"}
    assert {places[n][0] for n in ("W2", "W3")} == {"model.onnx.data"}
    assert result.bytes_reused == 2 * DIM * DIM * 4
    assert os.path.getsize(out / "model.onnx.data") < 3 * DIM * DIM * 4  # W2, W3 only
    assert read_back(out / "model.onnx") == read_back(src)
    np.testing.assert_array_equal(_run(out / "model.onnx"), _run(src))


def test_bad_calls_are_refused_before_anything_is_written(tmp_path):
    srcs = _pair(tmp_path / "m")
    before = folder_digest(tmp_path / "m")
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    with pytest.raises(TypeError, match="lists of paths"):
        onnxl.deduplicate_external_data(srcs[0], str(tmp_path / "x" / "a.onnx"), "w.data")
    with pytest.raises(ValueError, match="one destination per source"):
        onnxl.deduplicate_external_data(srcs, [tmp_path / "x" / "a.onnx"], "w.data")
    with pytest.raises(ValueError, match="in one folder"):
        onnxl.deduplicate_external_data(
            srcs, [tmp_path / "x" / "a.onnx", tmp_path / "y" / "b.onnx"], "w.data"
        )
    with pytest.raises(ValueError, match="either every destination is its own source"):
        onnxl.deduplicate_external_data(srcs, [srcs[0], tmp_path / "m" / "c.onnx"], "w.data")
    with pytest.raises(onnxl.ExternalDataError, match="would overwrite"):
        onnxl.deduplicate_external_data(
            srcs, [tmp_path / "m" / "c.onnx", tmp_path / "m" / "d.onnx"], "a.onnx.data"
        )
    (tmp_path / "elsewhere.safetensors").write_bytes(b"")
    with pytest.raises(onnxl.ExternalDataError, match="outside the destination folder"):
        onnxl.deduplicate_external_data(
            srcs,
            [tmp_path / "x" / "a.onnx", tmp_path / "x" / "b.onnx"],
            "w.data",
            reuse=[tmp_path / "elsewhere.safetensors"],
        )
    assert folder_digest(tmp_path / "m") == before
    assert os.listdir(tmp_path / "x") == []


def test_a_cache_link_deduplicated_onto_itself_says_why_not(tmp_path):
    """Links into a Hugging Face cache's blobs/: in place is refused, saying what to do."""
    srcs = _pair(tmp_path / "blobs")
    snap = tmp_path / "snap"
    snap.mkdir()
    for name in ("a.onnx", "a.onnx.data", "b.onnx", "b.onnx.data"):
        os.symlink(tmp_path / "blobs" / name, snap / name)
    links = [str(snap / "a.onnx"), str(snap / "b.onnx")]
    before = folder_digest(tmp_path / "blobs")
    with pytest.raises(onnxl.ExternalDataError, match="is a symbolic link.*folder of your own"):
        onnxl.deduplicate_external_data(links, links, "shared.data")
    assert folder_digest(tmp_path / "blobs") == before
    assert srcs


def test_progress_covers_the_comparison_then_the_writing(tmp_path):
    srcs = _pair(tmp_path / "src")
    (tmp_path / "out").mkdir()
    calls = []
    onnxl.deduplicate_external_data(
        srcs,
        [tmp_path / "out" / "a.onnx", tmp_path / "out" / "b.onnx"],
        "w.data",
        options=onnxl.WriteOptions(progress=lambda done, total: calls.append((done, total))),
    )
    dones = [d for d, _ in calls]
    assert dones == sorted(dones) and calls[-1][0] == calls[-1][1]  # never back, ends full
    first_total = calls[0][1]
    assert any(t == first_total and d > 0 for d, t in calls)  # the comparison reported
    assert calls[-1][1] < first_total  # the total shrank once the duplicates were known


def test_a_reused_file_is_never_replaced_even_in_place(tmp_path):
    """The weights file named as the reused .safetensors: refused, in place too."""
    folder = tmp_path / "m"
    folder.mkdir()
    model = make_gemm_model(4, DIM)
    save_two_file(model, folder / "m.onnx", size_threshold=0)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    write_safetensors(folder / "model.safetensors", {"W0": weights["W0"], "W1": weights["W1"]})
    before = folder_digest(folder)
    src = str(folder / "m.onnx")
    with pytest.raises(onnxl.ExternalDataError, match="reused file.*only read"):
        onnxl.deduplicate_external_data(
            [src], [src], "model.safetensors", reuse=[folder / "model.safetensors"]
        )
    assert folder_digest(folder) == before


def test_deduplicating_again_counts_each_stored_range_once(tmp_path):
    srcs = _pair(tmp_path / "m")
    onnxl.deduplicate_external_data(srcs, srcs, "shared.data")
    stored = {(off, n) for p in srcs for _, off, n in external_offsets(p)}
    again = onnxl.deduplicate_external_data(srcs, srcs, "shared2.data")
    assert again.bytes_before == sum(n for _, n in stored)  # not each model's copy
    assert again.bytes_saved <= 0  # nothing more to share: no saving claimed


def test_a_safetensors_file_the_old_model_read_is_never_pruned(tmp_path):
    """In place, a model that pointed into model.safetensors: the file is not removed."""
    folder = tmp_path / "m"
    folder.mkdir()
    model = make_gemm_model(2, DIM)
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    write_safetensors(folder / "model.safetensors", weights)
    src = folder / "m.onnx"
    onnx.save(model, tmp_path / "single.onnx")
    onnxl.deduplicate_external_data(
        [tmp_path / "single.onnx"], [src], "m.onnx.data", reuse=[folder / "model.safetensors"]
    )
    assert {loc for loc, _, _ in external_offsets(src)} == {"model.safetensors"}
    result = onnxl.deduplicate_external_data(
        [src], [src], "w.data", options=onnxl.WriteOptions(remove_unreferenced=True)
    )
    assert result.removed == [] and result.unreferenced == []
    assert (folder / "model.safetensors").exists()
    assert read_back(src) == read_back(tmp_path / "single.onnx")


@pytest.mark.parametrize("weights", ["a.onnx", "b.onnx", "B.ONNX"])
@pytest.mark.parametrize("how", ["api", "cli"])
def test_weights_named_after_any_destination_model_is_refused_plainly(
    tmp_path, capsys, weights, how
):
    """Every destination model is checked against the weights name, not only the
    first, and the message says so (it used to blame a case-folding filesystem)."""
    from helpers import uint8_model

    from onnx_light.cli import main

    for i, name in enumerate(("a.onnx", "b.onnx")):
        save_two_file(uint8_model(2, 5000, seed=i), tmp_path / name, size_threshold=0)
    if weights == "B.ONNX" and not os.path.exists(tmp_path / "B.ONNX"):
        weights = "./b.onnx"  # a case-sensitive filesystem: another spelling of one name
    before = folder_digest(tmp_path)
    models = [str(tmp_path / "a.onnx"), str(tmp_path / "b.onnx")]
    if how == "api":
        with pytest.raises(ValueError) as info:
            onnxl.deduplicate_external_data(models, models, weights)
        message = str(info.value)
    else:
        assert main(["dedup", *models, "--in-place", "--weights", weights]) == 1
        message = capsys.readouterr().err
    assert "cannot be the model file" in message, message
    assert "upper from lower case" not in message and "one file on this" not in message
    assert folder_digest(tmp_path) == before


def test_progress_total_is_near_what_the_call_reads_and_writes(tmp_path):
    """A language-model pair: every per-layer weight has one length. The bar used to
    announce three times the bytes of each (the comparison's upper bound) plus the
    write: 2.7x what the call then read and wrote here. It announces each read once."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((128, 128)).astype(np.float32) for _ in range(16)]
    srcs = []
    for name in ("a", "b"):  # b: the same weights, as a decoder with past holds them
        inits = [numpy_helper.from_array(a, f"layer{i}.w") for i, a in enumerate(arrays)]
        model = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [], inits))
        save_two_file(model, tmp_path / f"{name}.onnx")
        srcs.append(tmp_path / f"{name}.onnx")
    (tmp_path / "out").mkdir()
    calls = []
    result = onnxl.deduplicate_external_data(
        srcs,
        [tmp_path / "out" / "a.onnx", tmp_path / "out" / "b.onnx"],
        options=onnxl.WriteOptions(progress=lambda done, total: calls.append((done, total))),
    )
    # what the call has to do: read each tensor of both models once, write the unique ones
    work = result.bytes_before + result.bytes_written
    assert calls[-1][0] == calls[-1][1] <= work
    assert all(total <= 1.5 * work for _, total in calls), (calls[0], work)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_with_files_are_committed_with_the_models(tmp_path, monkeypatch):
    """``with_files``: the exporter's files land beside the models in the same commit (a
    file of that name there is replaced; a failed rename puts every old file back); of two
    files with one name the first is copied, the other listed when its bytes differ."""
    import errno

    from onnx_light.onnx._commit import atomic as _atomic

    srcs = [_pair(tmp_path / "one")[0], _pair(tmp_path / "two")[1]]
    for folder, text in (("one", '{"v": 1}'), ("two", '{"v": 2}')):
        (tmp_path / folder / "genai_config.json").write_text(text)
    (tmp_path / "one" / "tokenizer.json").write_text("{}")
    extra = [
        tmp_path / "one" / "genai_config.json",
        tmp_path / "one" / "tokenizer.json",
        tmp_path / "two" / "genai_config.json",
    ]
    out = tmp_path / "out"
    out.mkdir()
    (out / "tokenizer.json").write_text("an older, truncated cop")
    dsts = [out / "a.onnx", out / "b.onnx"]
    before = folder_digest(out)
    real_replace = os.replace

    def refuse_last_onnx(a, b, *args, **kwargs):
        if str(b) == str(dsts[1]):
            raise OSError(errno.EPERM, "Operation not permitted (immutable)", str(b))
        return real_replace(a, b, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", refuse_last_onnx)
        m.setattr(_atomic, "_exchange", lambda a, b: False)
        with pytest.raises(OSError, match="immutable"):
            onnxl.deduplicate_external_data(srcs, dsts, "w.data", with_files=extra)
    assert folder_digest(out) == before  # the companion renames undone with the others
    result = onnxl.deduplicate_external_data(srcs, dsts, "w.data", with_files=extra)
    assert result.files_copied == [str(out / "genai_config.json"), str(out / "tokenizer.json")]
    assert result.files_left == [(str(extra[2]), str(extra[0]))]
    assert (out / "genai_config.json").read_text() == '{"v": 1}'
    assert (out / "tokenizer.json").read_text() == "{}"
    assert sorted(os.listdir(out)) == [
        "a.onnx",
        "b.onnx",
        "genai_config.json",
        "tokenizer.json",
        "w.data",
    ]


def test_with_files_never_copies_a_folder_a_model_or_its_weights(tmp_path):
    """with_files copies an exporter's other files: the sources' folder itself, a source
    model and a weights file a source reads are refused, each said for what it is (a
    weights file was copied beside the new weights), and so is a folder where a copy
    would go; nothing is written."""
    srcs = _pair(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    dsts = [out / "a.onnx", out / "b.onnx"]
    weights = [tmp_path / "m" / n for n in sorted(os.listdir(tmp_path / "m")) if "data" in n]
    assert weights
    folder = str(tmp_path / "m") + os.sep
    with pytest.raises(ValueError, match=r"'.*m' is a folder, not a file"):
        onnxl.deduplicate_external_data(srcs, dsts, with_files=[folder])
    for data in weights:
        model = "a.onnx" if data.name.startswith("a") else "b.onnx"
        with pytest.raises(ValueError, match=rf"{data.name}' is a weights file of model .*{model}"):
            onnxl.deduplicate_external_data(srcs, dsts, with_files=[data])
    with pytest.raises(ValueError, match=r"a.onnx' is the source model .*a.onnx"):
        onnxl.deduplicate_external_data(srcs, dsts, with_files=[srcs[0]])
    (out / "config.json").mkdir()
    with pytest.raises(ValueError, match=r"destination '.*config.json' is a folder"):
        onnxl.deduplicate_external_data(srcs, dsts, with_files=[tmp_path / "m" / "config.json"])
    assert os.listdir(out) == ["config.json"]


def test_with_files_refused_before_anything_is_written(tmp_path):
    srcs = _pair(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "elsewhere.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    dsts = [out / "a.onnx", out / "b.onnx"]
    with pytest.raises(TypeError, match="a list of paths"):
        onnxl.deduplicate_external_data(srcs, dsts, with_files=str(tmp_path / "m" / "config.json"))
    with pytest.raises(ValueError, match="not in the folder of a source model"):
        onnxl.deduplicate_external_data(srcs, dsts, with_files=[tmp_path / "elsewhere.json"])
    with pytest.raises(FileNotFoundError, match="nope.json"):
        onnxl.deduplicate_external_data(srcs, dsts, with_files=[tmp_path / "m" / "nope.json"])
    (tmp_path / "m" / "w.data").write_text("not a weights file of a.onnx or b.onnx")
    with pytest.raises(ValueError, match="which this call writes otherwise"):
        onnxl.deduplicate_external_data(
            srcs, dsts, "w.data", with_files=[tmp_path / "m" / "w.data"]
        )
    os.symlink("../elsewhere.json", tmp_path / "m" / "linked.json")
    with pytest.raises(onnxl.ExternalDataError, match="linked.json.*elsewhere.json.*outside"):
        onnxl.deduplicate_external_data(srcs, dsts, with_files=[tmp_path / "m" / "linked.json"])
    assert os.listdir(out) == []
