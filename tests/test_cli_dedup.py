"""``onnx-light dedup``, and the shared ranges ``info`` and ``verify`` report.

What a user sees: the summary (bytes before and after, groups, transposed
twins, the weights written, the old files left or pruned), models that load
with the same tensors, sources untouched, one error line and nothing written
on a bad call.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys

import numpy as np
import onnx
import pytest
from helpers import (
    external_offsets,
    folder_digest,
    for_onnxruntime,
    read_back,
    run_ort,
    save_two_file,
)
from helpers import run_cli as _cli
from helpers import uint8_model as _uint8_model
from onnx import helper, numpy_helper

import onnx_light.cli as cli
import onnx_light.cli._dedup as cli_dedup  # where dedup calls the library
import onnx_light.onnx as onnxl
from benchmarks.harness import make_gemm_model
from onnx_light._progress import human

N, DIM = 4, 64
ALL_LOAD = "(onnx, onnxruntime and onnx-ir load it)"
WEIGHT, BIAS = DIM * DIM * 4, DIM * 4


class TtyStringIO(io.StringIO):
    def isatty(self) -> bool:
        return True


def _pair(folder, changed=("W0",)) -> list[str]:
    """Two two-file models of one folder (a.onnx, b.onnx) sharing every weight but ``changed``."""
    folder.mkdir(parents=True, exist_ok=True)
    base = make_gemm_model(N, DIM)
    save_two_file(base, folder / "a.onnx", size_threshold=0)
    other = onnx.ModelProto()
    other.CopyFrom(base)
    for init in other.graph.initializer:
        if init.name in changed:
            arr = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array((arr + 1).astype(arr.dtype), init.name))
    save_two_file(other, folder / "b.onnx", size_threshold=0)
    return [str(folder / "a.onnx"), str(folder / "b.onnx")]


def _arrays(model: onnx.ModelProto) -> dict[str, bytes]:
    return {t.name: numpy_helper.to_array(t).tobytes() for t in model.graph.initializer}


def _recording(monkeypatch) -> list:
    """Keep the library's results as the command gets them."""
    results = []
    real = cli_dedup.deduplicate_external_data

    def recorded(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(cli_dedup, "deduplicate_external_data", recorded)
    return results


def _tied_model(path) -> None:
    """One model, three 2-D tensors: 'wte', 'tied' (the same bytes), 'lm_head' (its transpose)."""
    emb = (np.random.default_rng(1).standard_normal((96, 32)) * 0.1).astype(np.float32)
    inits = [
        numpy_helper.from_array(emb, "wte"),
        numpy_helper.from_array(np.ascontiguousarray(emb.T), "lm_head"),
        numpy_helper.from_array(emb, "tied"),
    ]
    out = helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [96, 32])
    graph = helper.make_graph([helper.make_node("Identity", ["wte"], ["Y"])], "g", [], [out], inits)
    onnx.save(helper.make_model(graph), str(path))


def test_dedup_out_two_models(tmp_path, capsys, monkeypatch):
    srcs = _pair(tmp_path / "src")
    before = folder_digest(tmp_path / "src")
    expected = [read_back(p) for p in srcs]
    (tmp_path / "out").mkdir()
    results = _recording(monkeypatch)
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out")
    assert code == 0, err
    assert err == ""  # not a terminal: no progress bar
    (result,) = results
    lines = out.splitlines()
    assert lines[0].startswith("deduplicated 2 models in ")
    for number in (human(result.bytes_before), human(result.bytes_written), "+ 0 B reused"):
        assert number in lines[0]
    saved = result.bytes_saved
    assert saved == result.bytes_before - result.bytes_written
    percent = 100 * saved / result.bytes_before
    assert f"{percent:.0f}% saved ({saved} of {result.bytes_before} bytes)" in out
    # W0 differs; W1..W3 and B0..B3 are shared
    assert len(result.groups) == 2 * N - 1
    assert lines[1] == f"{2 * N - 1} ranges are each read by several tensors ({4 * N - 2} tensors)"
    weights = tmp_path / "out" / "weights.data"
    assert lines[2] == f"weights: {weights} aligned to 4096"
    assert sorted(os.listdir(tmp_path / "out")) == ["a.onnx", "b.onnx", "weights.data"]
    assert result.bytes_written == os.path.getsize(weights)
    for src, exp in zip(srcs, expected, strict=True):
        dst = tmp_path / "out" / os.path.basename(src)
        assert read_back(dst) == exp
        assert _arrays(onnxl.load(dst)) == _arrays(onnx.load(src))  # loads with its weights
    assert folder_digest(tmp_path / "src") == before  # sources untouched


def test_info_and_verify_show_the_shared_ranges(tmp_path, capsys):
    srcs = _pair(tmp_path / "src")
    out = tmp_path / "out"
    out.mkdir()
    assert _cli(capsys, "dedup", *srcs, "--out", out, "-q")[0] == 0
    a, b = out / "a.onnx", out / "b.onnx"
    # one model alone reads no range twice
    code, text, _ = _cli(capsys, "info", a)
    assert code == 0 and "read by several" not in text
    assert json.loads(_cli(capsys, "info", a, "--json")[1])["shared_ranges"] == []
    # both: 7 ranges, each read by a.onnx and b.onnx
    code, text, err = _cli(capsys, "info", a, b)
    assert code == 0, err
    assert text.count(f"{2 * N} tensors, {2 * N} external") == 2  # each model's own report
    shares = f"{2 * N - 1} ranges are each read by several tensors of these models"
    assert f"{shares} ({4 * N - 2} tensors: " in text
    w1 = next(line for line in text.splitlines() if "a.onnx:W1" in line)
    assert w1.split()[0] == "weights.data" and w1.split()[-2:] == ["a.onnx:W1,", "b.onnx:W1"]
    assert not any("a.onnx:W0" in line for line in text.splitlines())
    doc = json.loads(_cli(capsys, "info", "--json", a, b)[1])
    assert [m["model"] for m in doc["models"]] == [str(a), str(b)]
    assert doc["transposed"] is None  # not looked for without --twins
    assert len(doc["shared_ranges"]) == 2 * N - 1
    places = {(e["location"], e["offset"], e["length"]) for e in doc["shared_ranges"]}
    assert len(places) == 2 * N - 1
    w1 = next(r for r in doc["shared_ranges"] if {"model": str(a), "name": "W1"} in r["tensors"])
    assert w1["tensors"] == [{"model": str(a), "name": "W1"}, {"model": str(b), "name": "W1"}]
    assert w1["location"] == "weights.data" and w1["length"] == WEIGHT
    # verify: sharing is valid, and counted
    code, text, err = _cli(capsys, "verify", a, b)
    assert code == 0 and err == ""
    assert text.splitlines() == [
        f"OK {a}: {2 * N} external tensors, every reference valid {ALL_LOAD}",
        f"OK {b}: {2 * N} external tensors, every reference valid {ALL_LOAD}",
        f"{shares} ({4 * N - 2} tensors: {human(3 * WEIGHT + 4 * BIAS)} stored once for "
        f"{human(2 * (3 * WEIGHT + 4 * BIAS))} of tensors): valid, each range is stored once",
    ]


def test_one_model_tied_and_transposed(tmp_path, capsys):
    _tied_model(tmp_path / "m.onnx")
    (tmp_path / "out").mkdir()
    code, out, err = _cli(capsys, "dedup", tmp_path / "m.onnx", "--out", tmp_path / "out")
    assert code == 0, err
    assert out.startswith("deduplicated 1 model in ")
    assert "1 range is read by several tensors (2 tensors)" in out
    assert "1 transposed twin kept (12.0 KiB; sharing them needs a graph change): " in out
    assert "'wte' / 'lm_head'" in out
    assert sorted(os.listdir(tmp_path / "out")) == ["m.onnx", "m.onnx.data"]  # one model: its name
    dst = tmp_path / "out" / "m.onnx"
    assert read_back(dst) == read_back(tmp_path / "m.onnx")
    # within one model: info, info --json, verify
    code, text, _ = _cli(capsys, "info", dst)
    assert "1 range is read by several tensors (2 tensors: 12.0 KiB stored once" in text
    row = text.splitlines()[-1].split()
    assert row[0] == "m.onnx.data" and row[-2:] == ["wte,", "tied"]
    assert "transposed" not in text  # not looked for: the bytes are not read
    doc = json.loads(_cli(capsys, "info", "--json", dst)[1])
    assert doc["shared_ranges"] == [
        {"location": "m.onnx.data", "offset": 0, "length": 96 * 32 * 4, "tensors": ["wte", "tied"]}
    ]
    assert doc["transposed"] is None
    code, text, _ = _cli(capsys, "verify", dst)
    assert code == 0 and text.splitlines()[-1].startswith("1 range is read by several tensors")
    # --twins reads the bytes to look for transposed copies
    code, text, _ = _cli(capsys, "info", dst, "--twins")
    assert "transposed twins (2-D tensors stored as the transpose of another): 1" in text
    assert "  wte / lm_head: 12288 bytes each (12.0 KiB)" in text
    doc = json.loads(_cli(capsys, "info", "--json", "--twins", dst)[1])
    assert doc["transposed"] == [{"tensors": ["wte", "lm_head"], "length": 12288}]


def test_dedup_in_place_lists_then_prunes(tmp_path, capsys):
    srcs = _pair(tmp_path / "m")
    expected = [read_back(p) for p in srcs]
    code, out, err = _cli(capsys, "dedup", *srcs, "--in-place", "--weights", "shared.data")
    assert code == 0, err
    assert out.splitlines()[-1] == (
        "2 weights files no .onnx of the folder references any more: a.onnx.data, b.onnx.data "
        "(--prune removes them)"
    )
    assert sorted(os.listdir(tmp_path / "m")) == [
        "a.onnx", "a.onnx.data", "b.onnx", "b.onnx.data", "shared.data"
    ]  # fmt: skip
    for p, exp in zip(srcs, expected, strict=True):
        assert read_back(p) == exp
    code, out, err = _cli(capsys, "dedup", *srcs, "--in-place", "--prune", "--weights", "w.data")
    assert code == 0, err
    assert out.splitlines()[-1] == "removed 1 weights file no model references: shared.data"
    assert sorted(os.listdir(tmp_path / "m")) == [
        "a.onnx", "a.onnx.data", "b.onnx", "b.onnx.data", "w.data"
    ]  # fmt: skip
    for p, exp in zip(srcs, expected, strict=True):
        assert read_back(p) == exp
    # without --weights, in place: the one file both read keeps its name, nothing to prune
    before = sorted(os.listdir(tmp_path / "m"))
    code, out, err = _cli(capsys, "dedup", *srcs, "--in-place", "--prune")
    assert code == 0, err
    assert "removed" not in out and sorted(os.listdir(tmp_path / "m")) == before
    for p, exp in zip(srcs, expected, strict=True):
        assert read_back(p) == exp


def test_dedup_prune_without_in_place_is_a_note(tmp_path, capsys):
    srcs = _pair(tmp_path / "src")
    (tmp_path / "out").mkdir()
    code, out, _ = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out", "--prune")
    assert code == 0
    assert "--prune: nothing to prune, the sources were not replaced (not in place)" in out
    assert sorted(os.listdir(tmp_path / "src")) == [
        "a.onnx",
        "a.onnx.data",
        "b.onnx",
        "b.onnx.data",
    ]


def _write_safetensors(path, arrays: dict[str, np.ndarray]) -> None:
    """A float32 .safetensors file, written as the format says."""
    header, offset, blobs = {}, 0, []
    for name, arr in arrays.items():
        data = np.ascontiguousarray(arr, dtype=np.float32).tobytes()
        header[name] = {
            "dtype": "F32",
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_dedup_reuse_safetensors(tmp_path, capsys, monkeypatch):
    srcs = _pair(tmp_path / "src")
    weights = {t.name: numpy_helper.to_array(t) for t in onnx.load(srcs[0]).graph.initializer}
    out = tmp_path / "pub"
    out.mkdir()
    _write_safetensors(out / "model.safetensors", {n: weights[n] for n in ("W1", "W2")})
    st = folder_digest(out)
    results = _recording(monkeypatch)
    argv = ["dedup", *srcs, "--out", out, "--reuse", out / "model.safetensors"]
    code, text, err = _cli(capsys, *argv)
    assert code == 0, err
    (result,) = results
    assert result.bytes_reused == 2 * WEIGHT  # W1 and W2, read by both models, counted once
    assert f"+ {human(2 * WEIGHT)} reused" in text.splitlines()[0]
    # what reuse avoids writing is saved too: before - written
    saved = result.bytes_before - result.bytes_written
    assert result.bytes_saved == saved > 2 * WEIGHT
    assert f"saved ({saved} of {result.bytes_before} bytes)" in text.splitlines()[0]
    assert folder_digest(out)["model.safetensors"] == st["model.safetensors"]
    for src in srcs:
        dst = out / os.path.basename(src)
        assert read_back(dst) == read_back(src)
        places = {
            t.name: {e.key: e.value for e in t.external_data}["location"]
            for t in onnx.load(str(dst), load_external_data=False).graph.initializer
        }
        assert places["W1"] == places["W2"] == "model.safetensors"
        assert places["W3"] == "weights.data"


def test_dedup_progress_bar_on_a_terminal(tmp_path, capsys, monkeypatch):
    srcs = _pair(tmp_path / "src")
    (tmp_path / "out").mkdir()
    err = TtyStringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setitem(sys.modules, "tqdm", None)  # the text bar
    assert cli.main(["dedup", *srcs, "--out", str(tmp_path / "out"), "--chunk-size", "4K"]) == 0
    text = err.getvalue()
    assert text.startswith("\rdedup 2 models [") and text.endswith("\n")
    assert "100%" in text.splitlines()[-1]
    assert "deduplicated" in capsys.readouterr().out
    err.truncate(0)
    err.seek(0)
    assert cli.main(["dedup", *srcs, "--out", str(tmp_path / "out"), "-q"]) == 0
    assert err.getvalue() == "" and capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("case", "code", "message"),
    [
        ("same name", 1, "would both be written as m.onnx: give each model its own name"),
        ("names count", 1, "--names gives 1 name for 2 models"),
        ("names with a folder", 1, "--names sub/a.onnx: a file name ending in .onnx"),
        ("names in place", 1, "--names names the models written with --out"),
        ("missing folder", 1, "does not exist (create the folder first)"),
        ("neither", 2, "one of the arguments --out --in-place is required"),
        ("both", 2, "not allowed with argument"),
        ("out is the sources' folder", 1, "pass --in-place instead"),
        ("bad shard size", 2, "--max-shard-size"),
        ("reuse outside the folder", 1, "outside the destination folder"),
        ("weights outside the folder", 1, "must lie inside the model's folder"),
    ],
)
def test_dedup_bad_calls_write_nothing(tmp_path, capsys, case, code, message):
    srcs = _pair(tmp_path / "src")
    other = _pair(tmp_path / "other")
    (tmp_path / "out").mkdir()
    (tmp_path / "x.safetensors").write_bytes(b"")
    before = {d: folder_digest(tmp_path / d) for d in ("src", "other", "out")}
    out = ["--out", str(tmp_path / "out")]
    argv = {
        "same name": [srcs[0], other[0], *out, "--names", "m.onnx", "m.onnx"],
        "names count": [*srcs, *out, "--names", "x.onnx"],
        "names with a folder": [*srcs, *out, "--names", "sub/a.onnx", "b.onnx"],
        "names in place": [*srcs, "--in-place", "--names", "x.onnx", "y.onnx"],
        "missing folder": [*srcs, "--out", str(tmp_path / "nope")],
        "neither": srcs,
        "both": [*srcs, *out, "--in-place"],
        "out is the sources' folder": [*srcs, "--out", str(tmp_path / "src")],
        "bad shard size": [*srcs, *out, "--max-shard-size", "0"],
        "reuse outside the folder": [*srcs, *out, "--reuse", str(tmp_path / "x.safetensors")],
        "weights outside the folder": [*srcs, *out, "--weights", "../w.data"],
    }[case]
    got, text, err = _cli(capsys, "dedup", *argv)
    assert got == code and text == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onnx-light: error: "), err
    assert message in lines[0] and "Traceback" not in err
    assert {d: folder_digest(tmp_path / d) for d in ("src", "other", "out")} == before
    assert not (tmp_path / "nope").exists() and not (tmp_path / "w.data").exists()


def test_dedup_help(capsys):
    code, text, _ = _cli(capsys, "dedup", "--help")
    assert code == 0 and text.startswith("usage: onnx-light dedup")
    for option in ("--out", "--in-place", "--weights", "--reuse", "--prune", "--max-shard-size"):
        assert option in text
    assert "weights.data" in text and "model.onnx.data" in text  # the default weights names
    assert "dedup" in cli.build_parser().format_help()
    code, text, _ = _cli(capsys, "info", "--help")
    assert "--twins" in text


# -- exporters' folders: optimum's config files, onnxruntime-genai's one model per folder ----


def _genai_folder(folder, shared: np.ndarray, own_seed: int) -> None:
    """onnxruntime-genai's layout: model.onnx + model.onnx.data + genai_config.json."""
    folder.mkdir(parents=True)
    own = np.random.default_rng(own_seed).standard_normal((DIM, DIM)).astype(np.float32)
    inits = [numpy_helper.from_array(shared, "embed"), numpy_helper.from_array(own, "head")]
    nodes = [
        onnx.helper.make_node("MatMul", ["X", "embed"], ["H"]),
        onnx.helper.make_node("MatMul", ["H", "head"], ["Y"]),
    ]
    graph = onnx.helper.make_graph(
        nodes,
        "g",
        [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, DIM])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [1, DIM])],
        inits,
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    save_two_file(for_onnxruntime(model), folder / "model.onnx", "model.onnx.data")
    config = {"model": {"decoder": {"filename": "model.onnx"}, "type": "llama"}}
    (folder / "genai_config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")


def test_dedup_genai_folders_in_one_command(tmp_path, capsys):
    """Every genai model is model.onnx in its own folder: --out names each after its
    folder, one weights file holds the shared embedding once, and --with-files brings the
    configs (never a weights file)."""
    shared = np.random.default_rng(0).standard_normal((DIM, DIM)).astype(np.float32)
    _genai_folder(tmp_path / "fp32", shared, 1)
    _genai_folder(tmp_path / "tuned", shared, 2)
    srcs = [tmp_path / "fp32" / "model.onnx", tmp_path / "tuned" / "model.onnx"]
    expected = [read_back(p) for p in srcs]
    (tmp_path / "out").mkdir()
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out", "--with-files")
    assert code == 0, err
    assert sorted(os.listdir(tmp_path / "out")) == [
        "fp32_model.onnx", "genai_config.json", "tokenizer.json", "tuned_genai_config.json",
        "tuned_model.onnx", "weights.data",
    ]  # fmt: skip
    assert f"written as: {srcs[0]} -> fp32_model.onnx, {srcs[1]} -> tuned_model.onnx" in out
    assert "copied beside them: genai_config.json, tokenizer.json, tuned_genai_config.json" in out
    # each folder's config names its model under its new name, the rest as it was
    assert "genai_config.json names fp32_model.onnx (was model.onnx)" in out
    assert "tuned_genai_config.json names tuned_model.onnx (was model.onnx)" in out
    assert "config.overlay(open(" in out
    for config, name in (("genai_config.json", "fp32"), ("tuned_genai_config.json", "tuned")):
        written = json.loads((tmp_path / "out" / config).read_text())
        assert written == {
            "model": {"decoder": {"filename": f"{name}_model.onnx"}, "type": "llama"}
        }
    for folder in ("fp32", "tuned"):  # the sources' configs unchanged
        source = json.loads((tmp_path / folder / "genai_config.json").read_text())
        assert source["model"]["decoder"]["filename"] == "model.onnx"
    for src, name, exp in zip(srcs, ("fp32_model.onnx", "tuned_model.onnx"), expected):
        dst = tmp_path / "out" / name
        assert read_back(dst) == exp
        assert {loc for loc, _, _ in external_offsets(dst)} == {"weights.data"}
        x = {"X": np.ones((1, DIM), np.float32)}
        a = run_ort(src, x)[0]
        b = run_ort(dst, x)[0]
        assert a.tobytes() == b.tobytes()
    assert os.path.getsize(tmp_path / "out" / "weights.data") < 4 * WEIGHT  # embed once


def test_dedup_out_says_the_exporter_files_stay_behind(tmp_path, capsys):
    """optimum's folder holds config.json: without it ORTModel cannot load DIR; the
    summary says so, and --with-files copies it."""
    srcs = _pair(tmp_path / "src")
    (tmp_path / "src" / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "src" / "generation_config.json").write_text("{}")
    (tmp_path / "out").mkdir()
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out")
    assert code == 0, err
    assert "also holds config.json, generation_config.json, which loaders" in out
    assert "--with-files copies them" in out
    assert "config.json" not in os.listdir(tmp_path / "out")
    (tmp_path / "out2").mkdir()
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out2", "--with-files")
    assert code == 0, err
    assert sorted(os.listdir(tmp_path / "out2")) == [
        "a.onnx", "b.onnx", "config.json", "generation_config.json", "weights.data"
    ]  # fmt: skip
    assert (tmp_path / "out2" / "config.json").read_text() == '{"model_type": "gpt2"}'


def test_dedup_out_never_replaces_a_file_under_an_invented_name(tmp_path, capsys):
    """``dedup --out`` never replaces an existing file under a name it made up (it says to
    name the outputs with ``--names``); ``--with-files`` replaces a stale copy of a file it
    copies, and says which one it did not copy (a second one of the same name)."""
    for name in ("text", "vision"):
        (tmp_path / name).mkdir()
        save_two_file(_uint8_model(2, 3000, seed=len(name)), tmp_path / name / "model.onnx")
        (tmp_path / name / "genai_config.json").write_text(f'{{"model": "{name}"}}')
    (tmp_path / "out").mkdir()
    onnxl.save(_uint8_model(1, 100), tmp_path / "out" / "text_model.onnx")  # someone's model
    before = folder_digest(tmp_path / "out")
    srcs = [tmp_path / "text" / "model.onnx", tmp_path / "vision" / "model.onnx"]
    code, _, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out")
    assert code == 1 and "which exists: name the outputs with --names" in err
    assert folder_digest(tmp_path / "out") == before
    os.remove(tmp_path / "out" / "text_model.onnx")
    (tmp_path / "out" / "genai_config.json").write_text("stale")
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out", "--with-files")
    assert code == 0, err
    assert "copied beside them: genai_config.json" in out
    assert (tmp_path / "out" / "genai_config.json").read_text() == '{"model": "text"}'
    # two folders, two configs of one name: the first is copied, the second said
    (tmp_path / "out2").mkdir()
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out2", "--with-files")
    assert code == 0, err
    assert (tmp_path / "out2" / "genai_config.json").read_text() == '{"model": "text"}'
    assert f"not copied: {tmp_path / 'vision' / 'genai_config.json'}" in out


# -- --with-files: which files it copies, and how ---------------------------------


def _with_files_pair(tmp_path) -> list[str]:
    """Two models of src/ with an exporter's config.json and tokenizer.json beside them."""
    srcs = _pair(tmp_path / "src")
    (tmp_path / "src" / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "src" / "tokenizer.json").write_bytes(os.urandom(2 * 1024 * 1024))
    (tmp_path / "out").mkdir()
    return srcs


@pytest.mark.parametrize("link", ["absolute", "relative", "hard"])
def test_dedup_with_files_refuses_a_file_from_elsewhere(tmp_path, capsys, link):
    """A model folder whose tokenizer.json links to a file elsewhere on the machine: the
    copy would hand that file out in the output folder. Refused by name (where it
    points, what to do), before anything is written."""
    srcs = _pair(tmp_path / "src")
    (tmp_path / "src" / "config.json").write_text("{}")
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("the host's secret")
    stray = tmp_path / "src" / "tokenizer.json"
    if link == "absolute":
        os.symlink(secret, stray)
    elif link == "relative":
        os.symlink("../elsewhere/secret.txt", stray)
    else:
        os.link(secret, stray)
    (tmp_path / "out").mkdir()
    before = folder_digest(tmp_path / "src")
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out", "--with-files")
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "tokenizer.json" in lines[0]
    if link == "hard":
        assert "2 hard links" in lines[0] and "copy the file" in lines[0]
    else:
        assert str(secret) in lines[0] and "outside the model folder" in lines[0]
        assert "put a copy of it there in place of the link" in lines[0]
    assert os.listdir(tmp_path / "out") == []  # not the models either
    assert folder_digest(tmp_path / "src") == before


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling", "devnull"])
def test_dedup_with_files_refuses_a_companion_that_is_no_file(tmp_path, capsys, kind):
    """tokenizer.json a FIFO, a folder, a link to nothing or to /dev/null: --with-files
    refuses it by name before anything is written (it was left out of the copy, exit 0,
    nothing said)."""
    srcs = _with_files_pair(tmp_path)
    stray = tmp_path / "src" / "tokenizer.json"
    stray.unlink()
    if kind == "fifo":
        os.mkfifo(stray)
    elif kind == "folder":
        stray.mkdir()
    else:
        os.symlink("missing.json" if kind == "dangling" else os.devnull, stray)
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out", "--with-files")
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "tokenizer.json" in lines[0]
    reason = {
        "fifo": "is not a regular file",
        "folder": "is a folder, not a file",
        "dangling": "is a link to 'missing.json', which does not exist",
        "devnull": "outside the model folder",
    }[kind]
    assert reason in lines[0]
    assert os.listdir(tmp_path / "out") == []


def _hf_repo_snapshot(tmp_path) -> tuple[list[str], dict[str, bytes]]:
    """A Hugging Face cache repo: snapshots/<rev>/onnx/ holds two models, their data and
    the exporter's files, every one a link into the repo's blobs/."""
    work = tmp_path / "work"
    srcs = _pair(work)
    (work / "config.json").write_text('{"model_type": "gpt2"}')
    (work / "tokenizer.json").write_text('{"version": "1.0"}')
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    snap = repo / "snapshots" / "0123abcd" / "onnx"
    snap.mkdir(parents=True)
    up = os.path.relpath(repo / "blobs", snap)
    files = {}
    for k, name in enumerate(sorted(os.listdir(work))):
        files[name] = (work / name).read_bytes()
        os.replace(work / name, repo / "blobs" / f"{k:04d}beef")
        os.symlink(os.path.join(up, f"{k:04d}beef"), snap / name)
    return [str(snap / os.path.basename(s)) for s in srcs], files


def test_dedup_with_files_from_a_hf_snapshot(tmp_path, capsys):
    """In a Hugging Face snapshot every file is a link into blobs/, the folder of the
    models' real paths: the exporter's files are copied, as plain files; a link from
    the snapshot to another file of the repo (refs/main) is refused all the same."""
    srcs, files = _hf_repo_snapshot(tmp_path)
    snap = os.path.dirname(srcs[0])
    os.symlink("../../../refs/main", os.path.join(snap, "revision.txt"))
    out = tmp_path / "out"
    out.mkdir()
    code, text, err = _cli(capsys, "dedup", *srcs, "--out", out, "--with-files")
    assert code == 1 and "revision.txt" in err and "refs/main" in err, err
    assert os.listdir(out) == []
    os.unlink(os.path.join(snap, "revision.txt"))
    code, text, err = _cli(capsys, "dedup", *srcs, "--out", out, "--with-files")
    assert code == 0, err
    assert "copied beside them: config.json, tokenizer.json" in text
    assert sorted(os.listdir(out)) == [
        "a.onnx", "b.onnx", "config.json", "tokenizer.json", "weights.data"
    ]  # fmt: skip
    for name in ("config.json", "tokenizer.json"):
        assert not os.path.islink(out / name)
        assert (out / name).read_bytes() == files[name]
    assert _arrays(onnxl.load(out / "b.onnx")) == _arrays(onnxl.load(srcs[1]))


_CLI = "import sys; from onnx_light.cli import main; sys.exit(main(sys.argv[1:]))"
_FSIZE_CLI = (
    """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit returns EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, 1024 * 1024))
"""
    + _CLI
)


def _mounted_tmpfs(folder, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    )
    return done.returncode == 0


@pytest.mark.parametrize("limit", ["file size limit", "full tmpfs"])
def test_dedup_with_files_full_disk_leaves_nothing(tmp_path, limit):
    """The models fit, a 2 MiB tokenizer.json does not: the command fails and leaves
    no file under its final name (no truncated tokenizer.json a retry would keep), and
    no temporary file."""
    srcs = _with_files_pair(tmp_path)
    out = tmp_path / "out"
    argv = ["dedup", *srcs, "--out", str(out), "--with-files"]
    if limit == "full tmpfs":
        if not _mounted_tmpfs(out, "1m"):
            pytest.skip("cannot mount a small tmpfs here (needs root)")
        try:
            done = subprocess.run(
                [sys.executable, "-c", _CLI, *argv], capture_output=True, text=True
            )
            names = os.listdir(out)
        finally:
            subprocess.run(["umount", "-l", str(out)], capture_output=True)
        assert "No space left" in done.stderr, done.stderr
    else:
        done = subprocess.run(
            [sys.executable, "-c", _FSIZE_CLI, *argv], capture_output=True, text=True
        )
        names = os.listdir(out)
        assert "File too large" in done.stderr, done.stderr
    assert done.returncode == 1, done.stderr
    assert "tokenizer.json" in done.stderr and "Traceback" not in done.stderr
    assert names == []


def test_dedup_with_files_replaces_a_stale_copy(tmp_path, capsys):
    """A retry over a folder where a copy was cut short: the truncated tokenizer.json is
    replaced by the whole file, not kept as "already there"."""
    srcs = _with_files_pair(tmp_path)
    whole = (tmp_path / "src" / "tokenizer.json").read_bytes()
    (tmp_path / "out" / "tokenizer.json").write_bytes(whole[:938_000])
    (tmp_path / "out" / "config.json").write_text('{"model_type": "older"}')
    code, out, err = _cli(capsys, "dedup", *srcs, "--out", tmp_path / "out", "--with-files")
    assert code == 0, err
    assert "kept" not in out and "copied beside them: config.json, tokenizer.json" in out
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == whole
    assert (tmp_path / "out" / "config.json").read_text() == '{"model_type": "gpt2"}'
    assert sorted(os.listdir(tmp_path / "out")) == [
        "a.onnx", "b.onnx", "config.json", "tokenizer.json", "weights.data"
    ]  # fmt: skip
