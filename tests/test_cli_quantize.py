"""onnx-light quantize: the files quantize_weights writes, a summary of what was quantized and
what was left (and why); bad usage exits 2, a bad node name 1, nothing written either way."""

from __future__ import annotations

import os

import onnx
import pytest
from helpers import assert_clean_failure, folder_digest, run_cli, sha256

import onnx_light.onnx as onnxl

pytest.importorskip("onnxruntime")
from test_quantize import _gather_model, _mlp  # noqa: E402  (the same models)


def test_writes_what_the_function_writes(tmp_path, capsys, monkeypatch):
    os.mkdir(tmp_path / "src")
    src = _mlp(tmp_path / "src")
    onnxl.quantize_weights(src, str(tmp_path / "api.onnx"), block_size=32, nodes_to_exclude=["mm2"])
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(
        capsys, "quantize", src, "cli.onnx", "--block-size", "32", "--exclude", "mm2"
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(
        "quantized 4 nodes (3 weights) to 4 bits, blocks of 32, asymmetric: "
    )
    assert "written to cli.onnx.data aligned to 4096" in lines[0]
    assert lines[1] == (
        "left 2 nodes as they were: mm2 (in nodes_to_exclude); mm_act (its B 'H4T' is not "
        "an initializer)"
    )
    assert sha256(tmp_path / "cli.onnx.data") == sha256(tmp_path / "api.onnx.data")
    ours, api = onnx.load(tmp_path / "cli.onnx"), onnx.load(tmp_path / "api.onnx")
    assert ours.graph == api.graph


def test_gather_symmetric_8_bits_options(tmp_path, capsys):
    src = _gather_model(tmp_path, onnx.TensorProto.FLOAT)
    code, out, err = run_cli(
        capsys,
        "quantize",
        src,
        tmp_path / "q.onnx",
        "--bits",
        "8",
        "--symmetric",
        "--accuracy-level",
        "4",
        "--op-types",
        "MatMul,Gather",
        "-q",
    )
    assert (code, out, err) == (0, "", "")
    model = onnx.load(tmp_path / "q.onnx")
    assert [n.op_type for n in model.graph.node] == ["Gather", "MatMulNBits"]
    attrs = {a.name: a.i for a in model.graph.node[1].attribute}
    assert attrs == {"K": 96, "N": 64, "bits": 8, "block_size": 128, "accuracy_level": 4}
    assert "W_zero_points" not in {t.name for t in model.graph.initializer}


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bits", "3"], "--bits: invalid choice: 3"),
        (["--block-size", "24"], "--block-size: '24': a power of two"),
        (["--block-size", "8"], "a power of two, at least 16"),
        (["--block-size", "512"], "--block-size: '512': a power of two, at least 16, at most 256"),
        (["--accuracy-level", "5"], "--accuracy-level: invalid choice: 5"),
        (["--op-types", "MatMul,Conv"], "among MatMul, Gemm, Gather"),
    ],
)
def test_bad_usage_exits_2(tmp_path, capsys, args, message):
    src = _mlp(tmp_path)
    before = folder_digest(tmp_path)
    code, _, err = run_cli(capsys, "quantize", src, tmp_path / "q.onnx", *args)
    assert code == 2
    assert_clean_failure(code, err)
    assert message in err
    assert folder_digest(tmp_path) == before


def test_unknown_node_exits_1_naming_it(tmp_path, capsys):
    src = _mlp(tmp_path)
    before = folder_digest(tmp_path)
    code, _, err = run_cli(capsys, "quantize", src, tmp_path / "q.onnx", "--exclude", "mm9")
    assert code == 1
    assert_clean_failure(code, err)
    assert "does not have: 'mm9'" in err
    assert folder_digest(tmp_path) == before


def test_with_files_copies_the_exporter_files(tmp_path, capsys):
    """--with-files: the source folder's config and tokenizer files beside the new model
    (same bytes), named in the summary; the source folder unchanged."""
    os.mkdir(tmp_path / "export")
    src = _mlp(tmp_path / "export")
    files = {"config.json": '{"model_type": "llama"}', "tokenizer.json": '{"version": "1.0"}'}
    for name, text in files.items():
        (tmp_path / "export" / name).write_text(text)
    before = folder_digest(tmp_path / "export")
    os.mkdir(tmp_path / "out")
    code, out, err = run_cli(capsys, "quantize", src, tmp_path / "out" / "q.onnx", "--with-files")
    assert code == 0, err
    assert "copied beside it: config.json, tokenizer.json" in out
    for name, text in files.items():
        assert (tmp_path / "out" / name).read_text() == text
    assert folder_digest(tmp_path / "export") == before
    result = onnxl.quantize_weights(
        src, str(tmp_path / "out" / "api.onnx"), with_files=[tmp_path / "export" / "config.json"]
    )
    assert result.files_copied == [str(tmp_path / "out" / "config.json")]
