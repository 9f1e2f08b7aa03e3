"""onnxruntime-genai folders written elsewhere under new names: the copied
``genai_config.json`` names the new files, and ``og.Model`` generates the same
tokens from the output as from the sources."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import onnx
import pytest
from helpers import folder_digest, for_onnxruntime, save_two_file
from helpers import run_cli as _cli
from onnx import TensorProto, helper, numpy_helper

import onnx_light.onnx as onnxl
from onnx_light.onnx._commit import atomic as _atomic

VOCAB, HIDDEN, HEAD = 64, 32, 4


def _decoder(rng, embed: np.ndarray) -> onnx.ModelProto:
    """A one-layer decoder onnxruntime-genai runs: logits from the token's embedding and
    the mean of its key cache (past + new), so generation reads the cache it keeps."""
    f = TensorProto.FLOAT
    inits = [
        numpy_helper.from_array(embed, "embed"),
        numpy_helper.from_array(rng.standard_normal((HIDDEN, VOCAB)).astype(np.float32), "head"),
        numpy_helper.from_array(rng.standard_normal((VOCAB, HEAD)).astype(np.float32), "kv"),
        numpy_helper.from_array(rng.standard_normal((HEAD, VOCAB)).astype(np.float32), "mix"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    nodes = [
        helper.make_node("Gather", ["embed", "input_ids"], ["E"]),
        helper.make_node("MatMul", ["E", "head"], ["L0"]),
        helper.make_node("Gather", ["kv", "input_ids"], ["K"]),
        helper.make_node("Unsqueeze", ["K", "one"], ["K1"]),
        helper.make_node("Concat", ["past_key_values.0.key", "K1"], ["present.0.key"], axis=2),
        helper.make_node("Concat", ["past_key_values.0.value", "K1"], ["present.0.value"], axis=2),
        helper.make_node("ReduceMean", ["present.0.key"], ["S"], axes=[2], keepdims=0),
        helper.make_node("MatMul", ["S", "mix"], ["M"]),
        helper.make_node("Add", ["L0", "M"], ["logits"]),
    ]
    cache = ["batch", 1, "past", HEAD]
    graph = helper.make_graph(
        nodes,
        "decoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "all"]),
            helper.make_tensor_value_info("past_key_values.0.key", f, cache),
            helper.make_tensor_value_info("past_key_values.0.value", f, cache),
        ],
        [
            helper.make_tensor_value_info("logits", f, ["batch", "seq", VOCAB]),
            helper.make_tensor_value_info("present.0.key", f, ["batch", 1, "all", HEAD]),
            helper.make_tensor_value_info("present.0.value", f, ["batch", 1, "all", HEAD]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _config(filename: str) -> dict:
    """A genai_config.json as onnxruntime-genai's builder writes one (keys in its order)."""
    return {
        "model": {
            "bos_token_id": 1,
            "context_length": 64,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": filename,
                "head_size": HEAD,
                "hidden_size": HIDDEN,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": 1,
                "num_hidden_layers": 1,
                "num_key_value_heads": 1,
            },
            "eos_token_id": 2,
            "pad_token_id": 0,
            "type": "llama",
            "vocab_size": VOCAB,
        },
        "search": {"do_sample": False, "max_length": 24, "num_beams": 1, "top_k": 1, "top_p": 1.0},
    }


def _genai_folder(folder, seed: int, embed: np.ndarray) -> str:
    """The builder's layout: model.onnx + model.onnx.data + genai_config.json."""
    folder.mkdir(parents=True)
    model = _decoder(np.random.default_rng(seed), embed)
    save_two_file(for_onnxruntime(model), folder / "model.onnx", "model.onnx.data")
    (folder / "genai_config.json").write_text(json.dumps(_config("model.onnx"), indent=4))
    return str(folder / "model.onnx")


def _two_folders(tmp_path) -> list[str]:
    """fp32/ and tuned/: two decoders sharing their embedding, one model.onnx each."""
    embed = np.random.default_rng(0).standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    return [_genai_folder(tmp_path / "fp32", 1, embed), _genai_folder(tmp_path / "tuned", 3, embed)]


def _generate(og, where) -> list[int]:
    """Greedy tokens after the prompt [5, 9, 3]."""
    model = og.Model(where)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=24)
    generator = og.Generator(model, params)
    generator.append_tokens([5, 9, 3])
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)]


def test_dedup_genai_folders_generate_the_same_tokens(tmp_path, capsys):
    """Two builder folders deduplicated into one: og.Model(out) loads the first folder's
    model (its config names fp32_model.onnx), the second's config, overlaid, the second;
    each generates the tokens its source generates."""
    og = pytest.importorskip(
        "onnxruntime_genai",
        reason="onnxruntime-genai is not installed (pip install onnxruntime-genai; the dev extra has it from Python 3.11)",
    )
    srcs = _two_folders(tmp_path)
    expected = [_generate(og, os.path.dirname(s)) for s in srcs]
    assert len(expected[0]) > 4 and expected[0] != expected[1]  # generates, and differently
    out = tmp_path / "out"
    out.mkdir()
    code, text, err = _cli(capsys, "dedup", *srcs, "--out", out, "--with-files")
    assert code == 0, err
    assert "genai_config.json names fp32_model.onnx (was model.onnx)" in text
    assert _generate(og, str(out)) == expected[0]
    config = og.Config(str(out))
    config.overlay((out / "tuned_genai_config.json").read_text())
    assert _generate(og, config) == expected[1]
    assert "1 range is read by several tensors (2 tensors)" in text  # the embedding, once


def test_the_copied_config_names_the_new_files_and_keeps_the_rest(tmp_path):
    """Every ``filename`` naming a renamed model is replaced (the decoder's, a
    pipeline's), nothing else: keys in their order, values, the final newline."""
    srcs = _two_folders(tmp_path)
    config = _config("model.onnx")
    config["model"]["decoder"]["pipeline"] = [
        {"embeddings": {"filename": "./model.onnx", "inputs": ["input_ids"]}},
        {"other": {"filename": "other.onnx", "run_on_prompt": False}},
    ]
    text = json.dumps(config, indent=4) + "\n"
    (tmp_path / "fp32" / "genai_config.json").write_text(text)
    out = tmp_path / "out"
    out.mkdir()
    dsts = [out / "a.onnx", out / "b.onnx"]
    files = [os.path.join(os.path.dirname(s), "genai_config.json") for s in srcs]
    result = onnxl.deduplicate_external_data(srcs, dsts, with_files=files)
    assert result.files_copied == [
        str(out / "genai_config.json"),
        str(out / "tuned_genai_config.json"),
    ]
    assert result.files_rewritten == {
        str(out / "genai_config.json"): {"model.onnx": "a.onnx", "./model.onnx": "a.onnx"},
        str(out / "tuned_genai_config.json"): {"model.onnx": "b.onnx"},
    }
    config["model"]["decoder"]["filename"] = "a.onnx"
    config["model"]["decoder"]["pipeline"][0]["embeddings"]["filename"] = "a.onnx"
    assert (out / "genai_config.json").read_text() == json.dumps(config, indent=4) + "\n"
    assert (tmp_path / "fp32" / "genai_config.json").read_text() == text  # the source kept
    assert json.loads((out / "tuned_genai_config.json").read_text()) == _config("b.onnx")


def test_a_config_that_is_not_json_is_refused_when_it_must_name_new_files(tmp_path):
    """Renamed models, a genai_config.json that is not JSON: refused by name before
    anything is written (a copy naming model.onnx would not load); copied as it is when
    the models keep their names."""
    srcs = _two_folders(tmp_path)
    (tmp_path / "fp32" / "genai_config.json").write_text('{"model": ')
    out = tmp_path / "out"
    out.mkdir()
    files = [tmp_path / "fp32" / "genai_config.json"]
    with pytest.raises(ValueError, match=r"genai_config.json' is not JSON .*model.onnx -> m.onnx"):
        onnxl.align_external_data_streaming(srcs[0], out / "m.onnx", with_files=files)
    assert os.listdir(out) == []
    result = onnxl.align_external_data_streaming(srcs[0], out / "model.onnx", with_files=files)
    assert result.files_rewritten == {}
    assert (out / "genai_config.json").read_text() == '{"model": '


def test_the_rewritten_config_is_committed_with_the_models(tmp_path, monkeypatch):
    """A failed rename at the commit leaves the destination folder as it was: no
    rewritten config under its final name (a stale one stays the stale one)."""
    srcs = _two_folders(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "genai_config.json").write_text("stale")
    before = folder_digest(out)
    dsts = [out / "fp32_model.onnx", out / "tuned_model.onnx"]
    files = [os.path.join(os.path.dirname(s), "genai_config.json") for s in srcs]
    real_replace = os.replace

    def refuse_last(a, b, *args, **kwargs):
        if str(b) == str(dsts[1]):
            raise OSError(errno.EPERM, "Operation not permitted (immutable)", str(b))
        return real_replace(a, b, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(os, "replace", refuse_last)
        m.setattr(_atomic, "_exchange", lambda a, b: False)
        with pytest.raises(OSError, match="immutable"):
            onnxl.deduplicate_external_data(srcs, dsts, with_files=files)
    assert folder_digest(out) == before
