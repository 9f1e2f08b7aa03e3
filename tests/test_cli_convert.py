"""``onnx-light convert``'s summary says what each number counts, and from which side.

A single-file source has no external tensor: the summary used to say "converted 197
external tensors" of a GPT-2 export held in one ``.onnx`` (it counted what the output
has). Each line now names its side: the source's tensors by place, those converted to
float16 and those kept (why), where they went in the output (external in the source,
or moved out of the ``.onnx``), bytes read -> written. Every number is checked
against the files themselves.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import run_cli, save_two_file
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl

F = TensorProto.FLOAT
THRESHOLD_WORDS = "(inline ones of 1024 bytes or more, --size-threshold)"


def _model(extra: bool = False) -> onnx.ModelProto:
    """Two 4 KiB float32 weights, a 256-byte float32 bias, a 1 KiB float32 scale read
    only by the node ``scale`` (kept float32 when it is blocked) and a Reshape's int64
    shape; ``extra``: a 2 KiB float32 weight and an unused 2 KiB int64 table."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 64)).astype(np.float32), "W0"),
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "B0"),
        numpy_helper.from_array(rng.standard_normal((64, 16)).astype(np.float32), "W1"),
        numpy_helper.from_array(rng.standard_normal(256).astype(np.float32), "S"),
        numpy_helper.from_array(np.array([1, 16], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("MatMul", ["X", "W0"], ["h0"], name="mm0"),
        helper.make_node("Add", ["h0", "B0"], ["h1"], name="add"),
        helper.make_node("MatMul", ["h1", "W1"], ["h2"], name="mm1"),
        helper.make_node("Reshape", ["h2", "shape"], ["h3"], name="reshape"),
        helper.make_node("ReduceSum", ["S"], ["s"], name="scale", keepdims=0),
        helper.make_node("Mul", ["h3", "s"], ["Y"], name="mul"),
    ]
    if extra:
        inits += [
            numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "W2"),
            numpy_helper.from_array(np.arange(256, dtype=np.int64), "table"),
        ]
        nodes.append(helper.make_node("MatMul", ["Y", "W2"], ["Z"], name="mm2"))
    out = "Z" if extra else "Y"
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", F, [1, 16])],
        [helper.make_tensor_value_info(out, F, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _single(folder) -> str:
    path = os.path.join(folder, "single.onnx")
    onnx.save(_model(), path)
    return path


def _external(folder) -> str:
    path = os.path.join(folder, "model.onnx")
    save_two_file(_model(), path, location="model.onnx_data")
    return path


def _mixed(folder) -> str:
    """W0, W1 and S external (saved by onnx), then W2 and the int64 table added inline."""
    path = os.path.join(folder, "mixed.onnx")
    save_two_file(_model(), path, location="mixed.onnx_data")
    model = onnx.load(path, load_external_data=False)
    extra = _model(extra=True)
    model.graph.initializer.extend(extra.graph.initializer[-2:])
    model.graph.node.append(extra.graph.node[-1])
    model.graph.output[0].name = "Z"
    onnx.save(model, path)
    return path


def _convert(capsys, src, dst, *flags) -> list[str]:
    before = {p: Path(p).read_bytes() for p in _files(src)}
    code, out, err = run_cli(capsys, "convert", src, dst, "--to", "float16", *flags)
    assert code == 0, err
    assert {p: Path(p).read_bytes() for p in _files(src)} == before  # the source untouched
    return out.splitlines()


def _files(src) -> list[str]:
    folder = os.path.dirname(src)
    return [os.path.join(folder, n) for n in os.listdir(folder) if not n.startswith("out")]


def _where(path) -> tuple[int, int]:
    """(external, inline) tensors of the model at ``path``, as ``info`` counts them."""
    info = onnxl.inspect_model(path)
    return info.external_tensors, info.inline_tensors


def test_a_single_file_source_has_no_external_tensor(tmp_path, capsys):
    src, dst = _single(tmp_path), tmp_path / "out.onnx"
    assert _where(src) == (0, 5)
    lines = _convert(capsys, src, dst)
    assert lines[0] == "source single.onnx: 5 tensors, all inline (no external data)"
    assert lines[1] == (
        "float16: 4 tensors converted (1 of them inline in out.onnx), "
        "1 kept as they were (not float32: 1 INT64)"
    )
    # W0, W1, S moved out: what the output has, said as what it is
    assert _where(dst) == (3, 2)
    assert lines[2] == (
        f"out.onnx.data: 3 tensors moved out of single.onnx {THRESHOLD_WORDS}, aligned to 4096; "
        "2 stay inline in out.onnx"
    )
    assert lines[3].startswith("9.0 KiB of weights read -> ")
    assert not any("external tensors" in line for line in lines)


def test_an_external_source_says_its_tensors_stay_external(tmp_path, capsys):
    src, dst = _external(tmp_path), tmp_path / "out.onnx"
    assert _where(src) == (3, 2)
    lines = _convert(capsys, src, dst)
    assert lines[0] == "source model.onnx: 5 tensors, 3 external, 2 inline"
    assert _where(dst) == (3, 2)
    assert lines[2] == (
        "out.onnx.data: 3 tensors, external in the source, aligned to 4096; "
        "2 stay inline in out.onnx"
    )


def test_a_mixed_source_and_a_float32_tensor_kept_by_the_rules(tmp_path, capsys):
    src, dst = _mixed(tmp_path), tmp_path / "out.onnx"
    assert _where(src) == (3, 4)
    lines = _convert(capsys, src, dst, "--node-block-list", "scale")
    assert lines[0] == "source mixed.onnx: 7 tensors, 3 external, 4 inline"
    # W0, W1, W2 and B0 converted; S read only by the blocked node stays float32
    assert lines[1] == (
        "float16: 4 tensors converted (1 of them inline in out.onnx), 3 kept as they were "
        "(1 float32 by the rules: --op-block-list, --node-block-list, inputs that stay "
        "float32; not float32: 2 INT64)"
    )
    stored = {t.name: t.data_type for t in onnx.load(str(dst)).graph.initializer}
    assert stored["S"] == TensorProto.FLOAT and stored["W2"] == TensorProto.FLOAT16
    # W2 and the int64 table moved out of the .onnx; W0, W1, S were external
    assert _where(dst) == (5, 2)
    assert lines[2] == (
        "out.onnx.data: 5 tensors: 3 external in the source, 2 moved out of mixed.onnx "
        f"{THRESHOLD_WORDS}, aligned to 4096; 2 stay inline in out.onnx"
    )


@pytest.mark.parametrize("make", [_single, _external])
def test_the_result_counts_both_sides(tmp_path, make):
    src = make(tmp_path)
    result = onnxl.convert_float_to_float16(src, tmp_path / "out.onnx")
    external = _where(src)[0]
    assert (result.source_external, result.moved_out) == (external, 3 - external)
    assert result.tensors == 5 and result.kept == {"INT64": 1}
    assert (result.converted, result.converted_inline) == (3, 1)


def test_a_source_that_stays_one_file(tmp_path, capsys):
    src, dst = _single(tmp_path), tmp_path / "out.onnx"
    lines = _convert(capsys, src, dst, "--size-threshold", "1M")
    assert _where(dst) == (0, 5) and not os.path.exists(f"{dst}.data")
    assert lines[1].startswith("float16: 4 tensors converted (4 of them inline in out.onnx)")
    assert lines[2].startswith(
        "no weights file: all 5 stay inline in out.onnx (none external, none of 1048576 bytes "
        "or more), in "
    )
