"""make realworld's runner without its exporters: what it runs, and that its checks see a change.

The run itself (torch, optimum, onnxruntime-genai) is ``make realworld``, not CI; here
the pieces that decide its verdicts run on small models made with onnx's helper: the
plan lists every verb for every kind of folder, the fixed inputs follow the session's
metadata (onnxruntime-genai's ``kv_cache_dim`` is the config's head size), and one
changed weight is named by the initializer comparison and seen in onnxruntime's outputs.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from helpers import for_onnxruntime
from onnx import TensorProto, helper, numpy_helper

from benchmarks.realworld import checks, plan


def _matmul(path, w: np.ndarray) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
    node = helper.make_node("MatMul", ["x", "W"], ["y"])
    graph = helper.make_graph([node], "g", [x], [y], [numpy_helper.from_array(w, "W")])
    onnx.save(for_onnxruntime(helper.make_model(graph)), str(path))
    return str(path)


def test_a_changed_weight_is_named_and_seen_in_the_outputs(tmp_path):
    pytest.importorskip("onnxruntime")
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    a = _matmul(tmp_path / "a.onnx", w)
    same = _matmul(tmp_path / "same.onnx", w.copy())
    w[2, 1] = np.nextafter(w[2, 1], np.float32(9))  # one ulp
    b = _matmul(tmp_path / "b.onnx", w)
    assert checks.tensors_differ(a, same) == []
    assert checks.tensors_differ(a, b) == ["W"]
    feeds = checks.feeds_for(a, vocab=100)
    assert [v.shape for v in feeds.values()] == [(checks.BATCH, 4)]
    assert (
        checks.same_outputs(checks.ort_outputs(a, feeds), checks.ort_outputs(same, feeds)) is None
    )
    problem = checks.same_outputs(checks.ort_outputs(a, feeds), checks.ort_outputs(b, feeds))
    assert problem is not None and problem.startswith("output 0: float32[1, 3]")


def test_feeds_follow_the_session_and_the_genai_config(tmp_path):
    """Token ids under the vocabulary, a mask over past and new tokens, the key/value
    cache at the builder's head size (its symbolic ``kv_cache_dim``)."""
    pytest.importorskip("onnxruntime")
    ids = helper.make_tensor_value_info(
        "input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]
    )
    mask = helper.make_tensor_value_info(
        "attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]
    )
    dims = ["batch_size", 2, "past_sequence_length", "kv_cache_dim"]
    past = helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, dims)
    inputs = [ids, mask, past]
    outs = [
        helper.make_tensor_value_info(f"o{k}", i.type.tensor_type.elem_type, None)
        for k, i in enumerate(inputs)
    ]
    nodes = [helper.make_node("Identity", [i.name], [f"o{k}"]) for k, i in enumerate(inputs)]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outs))
    onnx.save(for_onnxruntime(model), str(tmp_path / "model.onnx"))
    config = {"model": {"decoder": {"head_size": 8}}}
    (tmp_path / "genai_config.json").write_text(json.dumps(config))
    feeds = checks.feeds_for(str(tmp_path / "model.onnx"), vocab=50)
    seq, past_len = checks.SEQ, checks.PAST
    assert feeds["input_ids"].shape == (1, seq)
    assert feeds["input_ids"].min() >= 3 and feeds["input_ids"].max() < 50
    assert feeds["attention_mask"].shape == (1, past_len + seq) and feeds["attention_mask"].all()
    assert feeds["past_key_values.0.key"].shape == (1, 2, past_len, 8)


def _sources() -> list[plan.Source]:
    t5 = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")
    return [
        plan.Source("t5", "/m/t5/t5", t5, "seq2seq"),
        plan.Source("genai-fp32", "/m/g32/fp32", ("model.onnx",), "genai"),
        plan.Source("genai-int4", "/m/g4/int4", ("model.onnx",), "genai"),
    ]


def test_every_verb_on_every_folder():
    """Each file through each writer (its reference beside convert and quantize), each
    folder's files deduplicated together, and the builder folders together under the
    names dedup gives them."""
    steps = plan.steps(_sources(), "/w", with_files=True, quantize=True)
    table = [(s.verb, s.label, len(s.commands)) for s in steps]
    assert table == [
        ("info", "t5", 1),
        ("verify", "t5", 1),
        ("align", "t5", 3),
        ("convert", "t5", 3),
        ("save_edited", "t5", 3),
        ("quantize", "t5", 3),
        ("dedup", "t5", 1),
        ("info", "genai-fp32", 1),
        ("verify", "genai-fp32", 1),
        ("align", "genai-fp32", 1),
        ("convert", "genai-fp32", 1),
        ("save_edited", "genai-fp32", 1),
        ("quantize", "genai-fp32", 1),
        ("info", "genai-int4", 1),
        ("verify", "genai-int4", 1),
        ("align", "genai-int4", 1),
        ("convert", "genai-int4", 1),
        ("save_edited", "genai-int4", 1),
        ("dedup", "genai-fp32+genai-int4", 1),
    ]
    by = {(s.verb, s.label): s for s in steps}
    align = by["align", "t5"]
    assert align.commands[0] == [
        "cli", "align", "-q", "/m/t5/t5/encoder_model.onnx", "/w/align/t5/encoder_model.onnx", "--with-files"
    ]  # fmt: skip
    assert not align.copy_files and by["save_edited", "t5"].copy_files
    convert = by["convert", "genai-fp32"]
    assert convert.references == [
        ["ort_float16", "/m/g32/fp32/model.onnx", "/w/convert-reference/genai-fp32/model.onnx"]
    ]
    assert by["quantize", "t5"].references[2][0] == "ort_quantize"
    genai = by["dedup", "genai-fp32+genai-int4"]
    assert genai.commands == [
        ["cli", "dedup", "-q", "/m/g32/fp32/model.onnx", "/m/g4/int4/model.onnx", "--out", "/w/dedup/genai", "--with-files"]
    ]  # fmt: skip
    assert genai.outputs == {
        "genai-fp32": {"model.onnx": "fp32_model.onnx"},
        "genai-int4": {"model.onnx": "int4_model.onnx"},
    }


def test_without_the_newer_options_the_runner_copies_and_skips():
    """An onnx-light without align's --with-files or quantize_weights: the runner copies
    the exporter's files itself and runs no quantize step."""
    steps = plan.steps(_sources(), os.sep + "w", with_files=False, quantize=False)
    assert "quantize" not in {s.verb for s in steps}
    align = next(s for s in steps if s.verb == "align")
    assert align.copy_files and "--with-files" not in align.commands[0]
