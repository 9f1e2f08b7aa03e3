"""The ``onnx-light`` command line: align, info, verify, errors and exit codes.

What align reports (tensors moved, or none to move), verify's problems grouped by
cause, and one line on stderr, never a traceback, whatever the file holds (negative
offsets, names that are not UTF-8) or whatever goes wrong.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import pytest
from helpers import assert_clean_failure as _one_line
from helpers import external_offsets, read_back, save_two_file, tensor_bytes
from helpers import external_tensor as _ext_tensor
from helpers import model_from_initializer_bytes as _raw_model
from helpers import run_cli as _cli
from helpers import uint8_model as _model
from onnx import helper, numpy_helper

import onnx_light
import onnx_light.onnx as onnxl
from benchmarks.harness import make_gemm_model, weights_nbytes
from onnx_light.cli import build_parser, main

N, DIM = 4, 64
NAMES = [f"{k}{i}" for i in range(N) for k in ("W", "B")]


def save_model(folder, name="m.onnx", location="m.data", external=True) -> str:
    """A fresh Gemm model saved with onnx (two files, or one when not external)."""
    path = str(folder / name)
    model = make_gemm_model(N, DIM)  # onnx.save mutates it: one model per save
    if external:
        onnx.save(model, path, save_as_external_data=True, location=location, size_threshold=0)
    else:
        onnx.save(model, path)
    return path


def arrays(path) -> dict[str, np.ndarray]:
    """Every initializer of a model read by onnx itself."""
    model = onnx.load(str(path))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def assert_same_tensors(a, b) -> None:
    ta, tb = arrays(a), arrays(b)
    assert sorted(ta) == sorted(tb) == sorted(NAMES)
    for name in ta:
        assert ta[name].dtype == tb[name].dtype
        np.testing.assert_array_equal(ta[name], tb[name])


def external_entries(path) -> dict[str, dict[str, str]]:
    model = onnxl.load(path, load_external_data=False)
    return {
        t.name: {e.key: e.value for e in t.external_data}
        for t in model.graph.initializer
        if t.data_location == onnx.TensorProto.EXTERNAL
    }


def assert_one_error_line(err: str, *words: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("onnx-light: error: ")
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0]


class TtyStringIO(io.StringIO):
    def isatty(self) -> bool:
        return True


# align ---------------------------------------------------------------------


@pytest.mark.parametrize("alignment", [4096, 65536])
def test_align_end_to_end(tmp_path, capsys, alignment):
    src = save_model(tmp_path)
    dst = str(tmp_path / "out.onnx")
    assert main(["align", src, dst, "--alignment", str(alignment)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    size = os.path.getsize(dst + ".data")
    assert f"wrote {size} bytes" in out and "8 tensors" in out and str(alignment) in out
    entries = external_entries(dst)
    assert sorted(entries) == sorted(NAMES)
    for e in entries.values():
        assert e["location"] == "out.onnx.data"
        assert int(e["offset"]) % alignment == 0
    assert_same_tensors(src, dst)
    assert os.path.exists(str(tmp_path / "m.data"))  # the source is untouched


def test_align_weights_chunk_quiet(tmp_path, capsys):
    src = save_model(tmp_path)
    dst = str(tmp_path / "out.onnx")
    argv = ["align", src, dst, "--weights", "w.bin", "--alignment", "64K"]
    assert main([*argv, "--chunk-size", "1K", "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")
    assert {e["location"] for e in external_entries(dst).values()} == {"w.bin"}
    assert all(int(e["offset"]) % 65536 == 0 for e in external_entries(dst).values())
    assert not os.path.exists(dst + ".data")
    assert_same_tensors(src, dst)


def test_align_in_place(tmp_path):
    src = save_model(tmp_path)
    before = arrays(src)
    assert main(["align", src, src, "--weights", "m.data", "-q"]) == 0
    assert all(int(e["offset"]) % 4096 == 0 for e in external_entries(src).values())
    after = arrays(src)
    for name, a in before.items():
        np.testing.assert_array_equal(a, after[name])


def test_align_size_threshold_single_file(tmp_path, capsys):
    src = save_model(tmp_path, external=False)
    dst = str(tmp_path / "out.onnx")
    assert main(["align", src, dst, "--size-threshold", "1KiB"]) == 0
    assert "4 tensors" in capsys.readouterr().out  # the 4 weights; biases stay inline
    assert sorted(external_entries(dst)) == ["W0", "W1", "W2", "W3"]
    assert_same_tensors(src, dst)


def test_align_text_progress_bar(tmp_path, capsys, monkeypatch):
    src = save_model(tmp_path)
    err = TtyStringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm -> ImportError
    assert main(["align", src, str(tmp_path / "out.onnx"), "--chunk-size", "4K"]) == 0
    text = err.getvalue()
    assert text.startswith("\ralign m.onnx [") and text.endswith("\n")
    total = os.path.getsize(tmp_path / "out.onnx.data")
    assert "100%" in text.splitlines()[-1] and "KiB" in text
    assert total > 0 and "wrote" in capsys.readouterr().out


def test_align_tqdm_progress_bar(tmp_path, monkeypatch, capsys):
    """On a terminal a tqdm bar labelled ``align m.onnx`` counts the bytes copied, one
    update per 4 KiB chunk, up to the model's tensor bytes; the summary still goes to
    stdout, and the files written hold the model's tensors at aligned offsets."""
    pytest.importorskip("tqdm")
    import onnx_light.cli._args as cli_args  # where the commands make their progress bar

    bars = []

    class Recorded(cli_args.Progress):
        def __init__(self, label):
            super().__init__(label)
            self.calls = []
            bars.append(self)

        def __call__(self, done, total):
            self.calls.append((done, total))
            super().__call__(done, total)

        def close(self):
            self.final = self.bar.n, self.bar.total
            super().close()

    monkeypatch.setattr(cli_args, "Progress", Recorded)
    src = save_model(tmp_path)
    err = TtyStringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["align", src, str(tmp_path / "out.onnx"), "--chunk-size", "4K"]) == 0
    assert "align m.onnx" in err.getvalue() and "B/s" in err.getvalue()
    (bar,) = bars
    total = weights_nbytes(N, DIM)
    assert bar.calls[-1] == (total, total) and bar.final == (total / 2**20, total / 2**20)  # MiB
    assert len(bar.calls) >= total // 4096, "one update per chunk at least"
    assert [done for done, _ in bar.calls] == sorted(done for done, _ in bar.calls)
    written = os.path.getsize(tmp_path / "out.onnx.data")
    assert f"wrote {written} bytes" in capsys.readouterr().out
    assert_same_tensors(src, tmp_path / "out.onnx")
    assert all(offset % 4096 == 0 for _, offset, _ in external_offsets(tmp_path / "out.onnx"))


def test_align_no_bar_when_quiet_or_not_a_tty(tmp_path, capsys, monkeypatch):
    src = save_model(tmp_path)
    assert main(["align", src, str(tmp_path / "a.onnx")]) == 0
    assert capsys.readouterr().err == ""
    err = TtyStringIO()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["align", src, str(tmp_path / "b.onnx"), "--quiet"]) == 0
    assert err.getvalue() == ""


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--alignment", "3", "power of two"),
        ("--alignment", "5", "power of two"),
        ("--alignment", "2G", "power of two from 1 to 1 GiB"),
        ("--alignment", "-4096", "power of two from 1 to 1 GiB"),
        ("--chunk-size", "0", "must be at least 1 byte"),
        ("--chunk-size", "-1", "must be at least 1 byte"),
        ("--chunk-size", "2G", "must be at most 1 GiB"),
        ("--chunk-size", "lots", "not a byte count"),
        ("--max-shard-size", "0", "must be at least 1 byte"),
        ("--size-threshold", "-1", "must be at least 0 bytes"),
        # ASCII digits and a unit only, though int() takes the rest
        ("--alignment", "\u0664", "not a byte count"),  # ARABIC-INDIC DIGIT FOUR
        ("--alignment", "1_024", "not a byte count"),
        ("--chunk-size", "\uff14K", "not a byte count"),  # FULLWIDTH DIGIT FOUR
        ("--chunk-size", "4\u212a", "not a byte count"),  # KELVIN SIGN, 'k' when case-folded
        ("--chunk-size", "4iB", "not a byte count"),
        ("--size-threshold", "+1", "not a byte count"),
        ("--size-threshold", "", "not a byte count"),
        ("--size-threshold", "K", "not a byte count"),
    ],
)
def test_align_bad_usage_exit_2(tmp_path, capsys, option, value, message):
    src = save_model(tmp_path)
    dst = tmp_path / "out.onnx"
    assert main(["align", src, str(dst), option, value]) == 2
    assert_one_error_line(capsys.readouterr().err, option, message)
    assert not dst.exists()


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--alignment", "4096", 4096),
        ("--alignment", "64K", 65536),
        ("--alignment", "1GiB", 2**30),  # the largest alignment
        ("--alignment", "1gib", 2**30),
        ("--chunk-size", "4M", 4 * 2**20),
        ("--chunk-size", "1G", 2**30),  # the largest chunk
        ("--chunk-size", "1", 1),
        ("--chunk-size", "64kb", 65536),
        ("--chunk-size", "512B", 512),
        ("--max-shard-size", "2G", 2 * 2**30),  # no upper bound
        ("--max-shard-size", "1Ti", 2**40),
        ("--size-threshold", "0", 0),
    ],
)
def test_align_sizes_accepted(option, value, expected):
    args = build_parser().parse_args(["align", "a.onnx", "b.onnx", option, value])
    assert getattr(args, option[2:].replace("-", "_")) == expected


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--max-finite-val", "1e6", "above 65504"),
        ("--max-finite-val", "inf", "above 65504"),
        ("--max-finite-val", "65505", "above 65504"),
        ("--min-positive-val", "1e-9", "below 5.96e-08"),
        ("--min-positive-val", "0", "positive"),
        ("--max-finite-val", "nan", "positive"),
    ],
)
def test_convert_limits_out_of_range_exit_2(tmp_path, capsys, option, value, message):
    """A clipping limit outside float16's range is bad usage: exit 2, naming the option,
    before anything is read or written."""
    src = save_model(tmp_path)
    dst = tmp_path / "out.onnx"
    assert main(["convert", src, str(dst), "--to", "float16", option, value]) == 2
    assert_one_error_line(capsys.readouterr().err, f"argument {option}", repr(value), message)
    assert sorted(os.listdir(tmp_path)) == ["m.data", "m.onnx"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--max-finite-val", "65504"),
        ("--max-finite-val", "1e4"),
        ("--min-positive-val", "5.96e-08"),
    ],
)
def test_convert_limits_in_range_accepted(option, value):
    args = build_parser().parse_args(
        ["convert", "a.onnx", "b.onnx", "--to", "float16", option, value]
    )
    assert getattr(args, option[2:].replace("-", "_")) == float(value)


@pytest.mark.parametrize("argv", [["-"], ["out.onnx", "--weights", "-"]])
def test_align_to_stdout_refused_exit_2(tmp_path, capsys, monkeypatch, argv):
    src = save_model(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["align", src, *argv]) == 2
    assert_one_error_line(capsys.readouterr().err, "stdout is not supported", "./-")
    assert sorted(os.listdir(tmp_path)) == ["m.data", "m.onnx"]


def test_align_to_a_file_named_dash(tmp_path, monkeypatch):
    src = save_model(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["align", src, "./-", "--weights", "./-.w", "-q"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["-", "-.w", "m.data", "m.onnx"]
    assert_same_tensors(src, tmp_path / "-")


# info ----------------------------------------------------------------------


def test_info_table(tmp_path, capsys):
    src = save_model(tmp_path)
    assert main(["info", src, "--tensors"]) == 0
    out = capsys.readouterr().out
    assert "8 tensors, 8 external" in out
    header = next(line for line in out.splitlines() if line.startswith("name"))
    for col in ("dtype", "shape", "location", "offset", "length", "offset 2^k"):
        assert col in header
    w1 = next(line for line in out.splitlines() if line.startswith("W1 "))
    # onnx.save packs tensors back to back: W1 follows W0 (16384) and B0 (256)
    assert w1.split() == ["W1", "FLOAT", "[64,", "64]", "m.data", "16640", "16384", "256"]
    b0 = next(line for line in out.splitlines() if line.startswith("B0 "))
    assert b0.split()[-3:] == ["16384", "256", "16384"]
    total = weights_nbytes(N, DIM)
    assert any(line.split()[:3] == ["m.data", "8", str(total)] for line in out.splitlines())
    assert "aligned to 4096: no" in out and "aligned to 65536: no" in out

    dst = str(tmp_path / "out.onnx")
    assert main(["align", src, dst, "--alignment", "65536", "-q"]) == 0
    assert main(["info", dst]) == 0
    out = capsys.readouterr().out
    assert "aligned to 4096: yes" in out and "aligned to 65536: yes" in out


def test_info_json(tmp_path, capsys):
    src = save_model(tmp_path)
    assert main(["info", src, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in doc["tensors"]] == [n for i in range(N) for n in (f"W{i}", f"B{i}")]
    w1 = doc["tensors"][2]
    assert w1 == {
        "name": "W1",
        "path": "graph.initializer[2]",
        "dtype": "FLOAT",
        "shape": [64, 64],
        "location": "m.data",
        "offset": 16640,
        "length": 16384,
        "offset_pow2": 256,
    }
    assert doc["tensors"][0]["offset_pow2"] is None  # offset 0: any power of two
    total = weights_nbytes(N, DIM)
    assert doc["files"] == [
        {"location": "m.data", "tensors": 8, "bytes": total, "file_size": total, "missing": False}
    ]
    assert doc["external_tensors"] == 8
    assert doc["alignment"] == 256
    assert doc["aligned"] == {"4096": False, "65536": False}

    dst = str(tmp_path / "out.onnx")
    assert main(["align", src, dst, "-q"]) == 0
    assert main(["info", "--json", dst]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["aligned"] == {"4096": True, "65536": False}
    assert doc["alignment"] == 4096
    assert doc["files"][0]["file_size"] == os.path.getsize(dst + ".data")


def test_info_inline_model(tmp_path, capsys):
    src = save_model(tmp_path, external=False)
    assert main(["info", src, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["external_tensors"] == 0
    assert all(t["location"] is None and t["offset"] is None for t in doc["tensors"])
    assert doc["tensors"][0]["length"] == DIM * DIM * 4
    assert doc["files"] == [
        {"location": None, "tensors": 8, "bytes": weights_nbytes(N, DIM), "file_size": None}
    ]
    assert main(["info", src]) == 0
    out = capsys.readouterr().out
    assert "inline" in out and "aligned to 4096: yes (no external tensors)" in out


def test_info_does_not_read_weights(tmp_path, capsys):
    src = save_model(tmp_path)
    os.remove(tmp_path / "m.data")
    assert main(["info", src, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["tensors"]) == 8 and doc["files"][0]["file_size"] is None


# verify --------------------------------------------------------------------


def test_verify_ok(tmp_path, capsys):
    src = save_model(tmp_path)
    assert main(["verify", src]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK ") and "8 external tensors" in out


def corrupt(path, changes: dict[str, dict[str, str]]) -> None:
    """Rewrite some external_data entries of a model, its weights untouched."""
    model = onnx.load(path, load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key in changes.get(t.name, {}):
                e.value = changes[t.name][e.key]
    with open(path, "wb") as f:
        f.write(model.SerializeToString())


def test_verify_corrupted_references(tmp_path, capsys):
    src = save_model(tmp_path)
    corrupt(
        src,
        {
            "W1": {"offset": "1000000"},  # past the end of the file
            "B2": {"length": "128"},  # does not match dtype x dims
            "W3": {"location": "missing.data"},
            "B3": {"location": "../escape.data"},
        },
    )
    assert main(["verify", src]) == 1
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 4, captured.out
    for line, name, word in zip(
        lines, ["W1", "B2", "W3", "B3"], ["past the end", "128", "missing.data", ".."], strict=True
    ):
        assert f"'{name}'" in line and word in line
    assert_one_error_line(captured.err, "4 problems with external references")


# errors, help, version -----------------------------------------------------


@pytest.mark.parametrize("command", ["info", "verify", "align"])
def test_missing_model_exit_1(tmp_path, capsys, command):
    missing = str(tmp_path / "nope.onnx")
    argv = [command, missing] + ([str(tmp_path / "out.onnx")] if command == "align" else [])
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_one_error_line(captured.err, "nope.onnx", "does not exist")


def test_not_an_onnx_file_exit_1(tmp_path, capsys):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff" * 100)
    assert main(["info", str(bad)]) == 1
    assert_one_error_line(capsys.readouterr().err, "bad.onnx")


def test_info_json_failure_prints_json(tmp_path, capsys, monkeypatch):
    missing = str(tmp_path / "nope.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff" * 100)
    for path, word in [(missing, "does not exist"), (str(bad), "bad.onnx")]:
        assert main(["info", "--json", path]) == 1
        captured = capsys.readouterr()
        doc = json.loads(captured.out)
        assert sorted(doc) == ["error", "model"] and doc["model"] == path
        assert word in doc["error"]
        assert_one_error_line(captured.err, word)
        assert doc["error"] in captured.err

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("onnx_light.cli._info.inspect_models", boom)
    assert main(["info", missing, "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"error": "unexpected RuntimeError: boom", "model": missing}
    assert_one_error_line(captured.err, "unexpected RuntimeError: boom")


def test_align_missing_weights_file_exit_1(tmp_path, capsys):
    src = save_model(tmp_path)
    os.remove(tmp_path / "m.data")
    dst = tmp_path / "out.onnx"
    assert main(["align", src, str(dst)]) == 1
    assert_one_error_line(capsys.readouterr().err, "m.data")
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]  # nothing left behind


def test_align_weights_outside_folder_exit_1(tmp_path, capsys):
    src = save_model(tmp_path)
    (tmp_path / "sub").mkdir()
    dst = str(tmp_path / "sub" / "out.onnx")
    assert main(["align", src, dst, "--weights", str(tmp_path / "w.data")]) == 1
    assert_one_error_line(capsys.readouterr().err, "inside the model's folder")


def test_align_destination_is_a_folder_exit_1(tmp_path, capsys):
    src = save_model(tmp_path)
    (tmp_path / "d.onnx").mkdir()
    assert main(["align", src, str(tmp_path / "d.onnx")]) == 1
    assert_one_error_line(capsys.readouterr().err, "d.onnx", "is a folder")
    assert sorted(os.listdir(tmp_path)) == ["d.onnx", "m.data", "m.onnx"]


def test_help_and_version(capsys):
    for command in ("align", "info", "verify"):
        assert main([command, "--help"]) == 0
        assert capsys.readouterr().out.startswith(f"usage: onnx-light {command}")
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"onnx-light {onnx_light.__version__}"
    assert main([]) == 2
    assert "required" in capsys.readouterr().err
    help_text = build_parser().format_help()
    assert all(c in help_text for c in ("align", "info", "verify"))


def test_python_m_onnx_light(tmp_path):
    run = [sys.executable, "-m", "onnx_light"]
    proc = subprocess.run([*run, "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: onnx-light")
    assert all(c in proc.stdout for c in ("align", "info", "verify"))
    missing = str(tmp_path / "nope.onnx")
    proc = subprocess.run([*run, "verify", missing], capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert_one_error_line(proc.stderr, "nope.onnx")


def test_align_prune_reports_then_removes_left_over_files(tmp_path, capsys):
    """In place from one file per tensor to one file: the old files are listed, or pruned."""
    template = tmp_path / "template"
    template.mkdir()
    model = make_gemm_model(N, DIM)
    onnx.save(model, str(template / "m.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=False, size_threshold=0)  # fmt: skip
    before = arrays(template / "m.onnx")
    old = sorted(set(os.listdir(template)) - {"m.onnx"})
    assert len(old) == len(NAMES)
    listed = shutil.copytree(template, tmp_path / "listed")
    assert main(["align", str(listed / "m.onnx"), str(listed / "m.onnx")]) == 0
    out = capsys.readouterr().out
    assert f"{len(old)} weights files no .onnx of the folder references" in out
    assert "--prune" in out
    assert set(old) <= set(os.listdir(listed)), "never deleted without --prune"
    # with a second model of the folder that still reads one of them
    pruned = shutil.copytree(template, tmp_path / "pruned")
    keep = old[0]
    variant = onnx.load(str(pruned / "m.onnx"), load_external_data=False)
    del variant.graph.initializer[:]
    variant.graph.initializer.append(
        next(t for t in model.graph.initializer if t.external_data[0].value == keep)
    )
    onnx.save(variant, str(pruned / "v.onnx"))
    assert main(["align", str(pruned / "m.onnx"), str(pruned / "m.onnx"), "--prune"]) == 0
    out = capsys.readouterr().out
    assert f"removed {len(old) - 1} weights files" in out
    assert sorted(os.listdir(pruned)) == sorted(["m.onnx", "m.onnx.data", "v.onnx", keep])
    after = arrays(pruned / "m.onnx")
    assert after.keys() == before.keys()
    for name, value in after.items():
        np.testing.assert_array_equal(value, before[name])


def test_align_moves_typed_field_tensors(tmp_path, capsys):
    """A single-file model whose weights sit in float_data: they move, and the summary says so."""
    model = make_gemm_model(N, DIM)
    for t in model.graph.initializer:
        values = numpy_helper.to_array(t)
        t.ClearField("raw_data")
        t.float_data.extend(values.ravel().tolist())
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert main(["align", str(tmp_path / "m.onnx"), str(tmp_path / "a.onnx")]) == 0
    out = capsys.readouterr().out
    assert f"for {N} tensors ({N} from typed fields" in out  # the biases: 256 bytes
    assert len(external_entries(tmp_path / "a.onnx")) == N
    assert_same_tensors(tmp_path / "m.onnx", tmp_path / "a.onnx")


def test_align_shard_naming_and_inline_below(tmp_path, capsys):
    """transformers.js names (model.onnx_data, model.onnx_data_1...) and small tensors inline."""
    src = save_model(tmp_path)
    dst = tmp_path / "out" / "model.onnx"
    dst.parent.mkdir()
    bias = DIM * 4  # the B tensors: 256 bytes, inline with --inline-below 1K
    argv = ["align", src, str(dst), "--shard-naming", "transformers.js", "--max-shard-size",
            str(DIM * DIM * 4), "--inline-below", "1K"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"{N} small external tensors written inline" in out
    expected = ["model.onnx", "model.onnx_data"] + [f"model.onnx_data_{i}" for i in range(1, N)]
    assert sorted(os.listdir(dst.parent)) == sorted(expected)
    entries = external_entries(dst)
    assert sorted(entries) == sorted(f"W{i}" for i in range(N))
    assert all(int(e["length"]) > bias for e in entries.values())
    assert_same_tensors(src, dst)


def test_alignment_0_means_dense_everywhere(tmp_path):
    """One meaning for alignment 0 in save, align and the command line: no padding."""
    src = save_model(tmp_path)
    onnxl.align_external_data_streaming(src, tmp_path / "a.onnx", alignment=0)
    onnxl.align_external_data_streaming(src, tmp_path / "b.onnx", alignment=1)
    assert main(["align", src, str(tmp_path / "c.onnx"), "--alignment", "0", "-q"]) == 0
    opts = onnxl.SerializeOptions(alignment=0, size_threshold=0)
    onnxl.save(onnxl.load(src), tmp_path / "d.onnx", "d.onnx.data", options=opts)
    data = {n: (tmp_path / f"{n}.onnx.data").read_bytes() for n in "abcd"}
    assert data["a"] == data["b"] == data["c"] == data["d"]
    assert len(data["a"]) == weights_nbytes(N, DIM)


def test_info_with_negative_and_positive_offsets(tmp_path, capsys):
    (tmp_path / "w.data").write_bytes(bytes(100))
    model = helper.make_model(
        helper.make_graph(
            [],
            "g",
            [],
            [],
            [_ext_tensor("A", "w.data", "-4", 4), _ext_tensor("B", "w.data", "8", 4)],
        )
    )
    onnx.save(model, str(tmp_path / "m.onnx"))
    for json_flag in (["--tensors"], ["--json"]):
        code, out, err = _cli(capsys, "info", tmp_path / "m.onnx", *json_flag)
        assert code == 0, err
        assert "-4" in out
    code, out, err = _cli(capsys, "verify", tmp_path / "m.onnx")
    assert code == 1 and "'A'" in out and "< 0" in out


def _bad_utf8_name_model(folder):
    t = numpy_helper.from_array(np.arange(4, dtype=np.uint8), "zz")
    data = t.SerializeToString().replace(b"zz", b"\xff\xfe")
    return _raw_model(folder, data)


@pytest.mark.parametrize("command", ["info", "info --json", "verify", "align"])
def test_cli_on_a_tensor_name_that_is_not_utf8(tmp_path, capsys, command):
    """The name b"\\xff\\xfe" is shown escaped, the model is read as it is, never changed,
    and ``align`` writes it with its name and bytes as they were."""
    path = _bad_utf8_name_model(tmp_path)
    before = path.read_bytes()
    if command == "align":
        args = ["align", path, tmp_path / "a.onnx", "--size-threshold", "0"]
    elif command == "info":
        args = ["info", path, "--tensors"]
    else:
        args = [*command.split()[:1], path, *command.split()[1:]]
    code, out, err = _cli(capsys, *args)
    assert code == 0 and err == "", err
    assert path.read_bytes() == before, "the source model is unchanged"
    escaped = "\\xff\\xfe"
    if command == "info":
        assert "1 tensor, 0 external" in out
        row = next(line for line in out.splitlines() if line.startswith(escaped))
        assert row.split() == [escaped, "UINT8", "[4]", "inline", "-", "4", "-"]
    elif command == "info --json":
        (tensor,) = json.loads(out)["tensors"]
        assert (tensor["name"], tensor["dtype"], tensor["shape"]) == (escaped, "UINT8", [4])
        assert (tensor["location"], tensor["length"]) == (None, 4)
    elif command == "verify":
        assert out.startswith("OK ") and "0 external tensors, every reference valid" in out
    else:
        assert "for 1 tensors" in out and "a.onnx.data" in out
        assert sorted(os.listdir(tmp_path)) == ["a.onnx", "a.onnx.data", "m.onnx"]
        assert (tmp_path / "a.onnx.data").read_bytes() == bytes(range(4))
        (t,) = onnx.load(str(tmp_path / "a.onnx"), load_external_data=False).graph.initializer
        assert t.name == b"\xff\xfe" and t.data_location == onnx.TensorProto.EXTERNAL
        loaded = onnxl.load(tmp_path / "a.onnx").graph.initializer[0]
        assert loaded.raw_data == bytes(range(4))


def test_cli_never_prints_a_traceback(tmp_path, capsys, monkeypatch):
    """A bug anywhere (here: a TypeError) is still one line and exit code 1."""

    def broken(*args, **kwargs):
        raise TypeError("'<' not supported")

    monkeypatch.setattr("onnx_light.cli._info.inspect_models", broken)
    onnx.save(_model(), str(tmp_path / "m.onnx"))
    code, _, err = _cli(capsys, "info", tmp_path / "m.onnx")
    _one_line(code, err)
    assert "TypeError" in err


def test_single_file_cli_moves_inline_tensors(tmp_path, capsys):
    model = _model(3, 5000)
    onnx.save(model, str(tmp_path / "single.onnx"))
    assert main(["align", str(tmp_path / "single.onnx"), str(tmp_path / "a.onnx")]) == 0
    out = capsys.readouterr().out
    assert "3 tensors" in out and "1024 bytes or more" in out and "single-file" in out
    assert os.path.getsize(tmp_path / "a.onnx.data") > 3 * 5000
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(model)


def test_nothing_to_move_writes_no_weights_file(tmp_path, capsys):
    small = helper.make_model(
        helper.make_graph([], "g", [], [], [numpy_helper.from_array(np.ones(8, np.float32), "s")])
    )
    onnx.save(small, str(tmp_path / "small.onnx"))
    assert main(["align", str(tmp_path / "small.onnx"), str(tmp_path / "a.onnx")]) == 0
    out = capsys.readouterr().out
    assert "no tensor" in out and "no weights file" in out
    assert not (tmp_path / "a.onnx.data").exists()
    assert read_back(tmp_path / "a.onnx") == tensor_bytes(small)


def test_verify_groups_problems_by_cause(tmp_path, capsys):
    model = _model(20, 2000)
    save_two_file(model, tmp_path / "m.onnx", size_threshold=0)
    os.remove(tmp_path / "m.onnx.data")
    assert main(["verify", str(tmp_path / "m.onnx")]) == 1
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 1 and "20 tensors ('W0'" in lines[0] and "and 17 more" in lines[0]
    assert "does not exist" in lines[0]


def test_prune_not_in_place_says_there_is_nothing_to_prune(tmp_path, capsys):
    src = save_model(tmp_path)
    assert main(["align", src, str(tmp_path / "o.onnx"), "--prune", "--alignment", "0"]) == 0
    out = capsys.readouterr().out
    assert "nothing to prune" in out and "dense (no alignment)" in out


def test_ctrl_c_while_the_command_imports_is_one_line():
    """A Ctrl-C during the first tenth of a second (the CLI importing onnx) prints the
    short line and exits 130, as one during the run does, never a traceback."""
    code = textwrap.dedent(
        """
        import sys

        class Interrupt:
            def find_spec(self, name, path=None, target=None):
                if name == "onnx_light.cli":
                    raise KeyboardInterrupt
                return None

        sys.meta_path.insert(0, Interrupt())
        from onnx_light._command import main
        sys.exit(main(["info", "m.onnx"]))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 130
    assert proc.stderr == "onnx-light: interrupted\n" and proc.stdout == ""


def test_the_installed_command_uses_the_light_entry_point():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts == {"onnx-light": "onnx_light._command:main"}


@pytest.mark.parametrize(
    ("part", "whole", "shown"),
    [(0, 100, "0%"), (43, 100, "43%"), (42, 1000, "4.2%"), (499712, 130510848, "0.38%")],
)
def test_percentages_show_the_digits_that_matter(part, whole, shown):
    from onnx_light.cli._text import percent

    assert percent(part, whole) == shown
