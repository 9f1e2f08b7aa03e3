"""What a user's tools say of a model written by a verb: onnx, onnxruntime, optimum, genai.

- :func:`check_model`: ``onnx.checker.check_model(path, full_check=True)``;
- :func:`ort_outputs`: onnxruntime's outputs (CPU, one thread) on fixed inputs made
  from the session's own input metadata (:func:`feeds_for`), compared bit for bit
  by :func:`same_outputs`;
- :func:`tensors_differ`: the initializers of two models (every graph) that differ in
  name, dtype, dims or bytes;
- :func:`optimum_generate`: 20 tokens, greedy, by optimum's ``ORTModelForCausalLM`` or
  ``ORTModelForSeq2SeqLM`` loaded from a folder;
- :func:`genai_generate`: 20 tokens, greedy, by onnxruntime-genai's ``og.Model``.
"""

from __future__ import annotations

import json
import os

import numpy as np

BATCH, SEQ, PAST, ENCODER = 1, 5, 3, 7  # the fixed inputs' sizes
NEW_TOKENS = 20
PROMPT = [5, 17, 42, 7, 99, 123]

__all__ = [
    "check_model",
    "feeds_for",
    "genai_generate",
    "optimum_generate",
    "ort_outputs",
    "same_outputs",
    "tensors_differ",
]

_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(int32)": np.int32,
    "tensor(bool)": np.bool_,
}


def check_model(path: str) -> None:
    """``onnx.checker.check_model(path, full_check=True)``: raises what onnx raises."""
    import onnx

    onnx.checker.check_model(path, full_check=True)


def _session(path: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def _dim(name: str, value, dim) -> int:
    """A symbolic dimension's size, from its name and the input it belongs to."""
    if isinstance(dim, int):
        return dim
    d = str(dim).lower()
    if d == "kv_cache_dim":  # onnxruntime-genai's builder: the head size
        return value["head_size"]
    if "batch" in d:
        return BATCH
    if "past" in d and "total" not in d and "+" not in d:
        return PAST
    if "encoder" in d or "encoder" in name:
        return ENCODER
    if "mask" in name and value["has_past"]:
        return PAST + SEQ
    return SEQ


def feeds_for(path: str, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Fixed inputs for the model at ``path``, from its session's input metadata: token
    ids below ``vocab``, masks of ones, positions counting past the cache, past key
    values and hidden states drawn from a seeded normal distribution."""
    rng = np.random.default_rng(seed)
    inputs = _session(path).get_inputs()
    context = {"has_past": any("past" in i.name for i in inputs)}
    genai = os.path.join(os.path.dirname(path), "genai_config.json")
    if os.path.exists(genai):
        with open(genai) as f:
            context["head_size"] = json.load(f)["model"]["decoder"]["head_size"]
    feeds = {}
    for i in inputs:
        shape = [_dim(i.name, context, d) for d in i.shape]
        dtype = _NUMPY[i.type]
        if i.name in ("input_ids", "decoder_input_ids"):
            feeds[i.name] = rng.integers(3, vocab, shape).astype(dtype)
        elif "mask" in i.name:
            feeds[i.name] = np.ones(shape, dtype)
        elif i.name == "position_ids":
            start = PAST if context["has_past"] else 0
            feeds[i.name] = np.arange(start, start + shape[-1], dtype=dtype)[None].repeat(
                shape[0], 0
            )
        elif np.issubdtype(dtype, np.integer):
            feeds[i.name] = np.zeros(shape, dtype)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def ort_outputs(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs of the model at ``path`` on ``feeds`` (CPU, one thread)."""
    return _session(path).run(None, feeds)


def same_outputs(a: list[np.ndarray], b: list[np.ndarray]) -> str | None:
    """None when both lists hold the same arrays bit for bit, else what differs."""
    if len(a) != len(b):
        return f"{len(a)} outputs against {len(b)}"
    for k, (x, y) in enumerate(zip(a, b)):
        if x.dtype != y.dtype or x.shape != y.shape or x.tobytes() != y.tobytes():
            diff = np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)), initial=0)
            return f"output {k}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}, max |diff| {diff:.3g}"
    return None


def _graphs(graph):
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g)
            for g in a.graphs:
                yield from _graphs(g)


def tensors_differ(a_path: str, b_path: str) -> list[str]:
    """The initializers (every graph) of two models that differ in name, dtype, dims or
    bytes, or are in one only; empty when both hold the same tensors in the same order."""
    import onnx
    from onnx import numpy_helper

    def table(path):
        model = onnx.load(path)
        return [
            (t.name, t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes())
            for g in _graphs(model.graph)
            for t in g.initializer
        ]

    ta, tb = table(a_path), table(b_path)
    names_b = {t[0]: t for t in tb}
    out = [t[0] for t in ta if names_b.get(t[0]) != t]
    out += sorted({t[0] for t in tb} - {t[0] for t in ta})
    if not out and [t[0] for t in ta] != [t[0] for t in tb]:
        out.append("(the same tensors in another order)")
    return out


def optimum_generate(folder: str, files: dict[str, str], seq2seq: bool, past: bool) -> list[int]:
    """20 new tokens, greedy, by optimum loaded from ``folder`` (its ``config.json``).

    Args:
        folder: the model's folder.
        files: the file names optimum is given: ``{"file_name": ...}`` for a decoder,
            ``{"encoder_file_name": ..., "decoder_file_name": ...,
            "decoder_with_past_file_name": ...}`` for a seq2seq model.
        seq2seq: ``ORTModelForSeq2SeqLM`` rather than ``ORTModelForCausalLM``.
        past: the export takes the key/value cache (``use_cache``).

    Returns:
        The generated sequence's token ids.
    """
    import torch
    from optimum.onnxruntime import ORTModelForCausalLM, ORTModelForSeq2SeqLM

    cls = ORTModelForSeq2SeqLM if seq2seq else ORTModelForCausalLM
    extra = {"use_merged": False} if seq2seq else {}
    model = cls.from_pretrained(
        folder,
        use_cache=past,
        use_io_binding=False,
        provider="CPUExecutionProvider",
        **files,
        **extra,
    )
    ids = torch.tensor([PROMPT])
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        num_beams=1,
    )
    return [int(t) for t in out[0]]


def genai_generate(folder: str, overlay: str | None = None) -> list[int]:
    """20 new tokens, greedy, by ``og.Model`` on ``folder`` (its ``genai_config.json``,
    with the JSON file ``overlay`` applied over it when given)."""
    import onnxruntime_genai as og

    config = og.Config(folder)
    if overlay:
        with open(os.path.join(folder, overlay)) as f:
            config.overlay(f.read())
    model = og.Model(config)
    params = og.GeneratorParams(model)
    length = len(PROMPT) + NEW_TOKENS
    params.set_search_options(max_length=length, min_length=length, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(PROMPT)
    while not generator.is_done():
        generator.generate_next_token()
    return [int(t) for t in generator.get_sequence(0)]
