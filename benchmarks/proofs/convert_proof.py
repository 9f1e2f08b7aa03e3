"""Proof on real exports: float16 conversion against onnxruntime's converter.

Usage (run by hand, not by CI)::

    /tmp/rw/bin/python benchmarks/proofs/convert_proof.py [--workdir /var/tmp/convert] [--rounds 3]
        [--models gpt2,bert,t5,llama,conv,bert_xl] [--library head|tree] [--report-only]

It needs a venv with torch (CPU), transformers, optimum + optimum-onnx,
onnxscript (for torch's dynamo exporter), onnxruntime, onnx and onnx-light
(editable), e.g. one made with::

    python -m venv /tmp/rw
    /tmp/rw/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    /tmp/rw/bin/pip install transformers optimum optimum-onnx onnxruntime onnxscript
    /tmp/rw/bin/pip install -e .

Measured with torch 2.13 CPU, transformers 4.57, optimum 2.1, optimum-onnx 0.1.0,
onnxruntime 1.32, onnx 1.23.2 (the report lists the versions). It downloads
nothing: every model is built from a config with random weights (fixed seeds),
and every parameter is perturbed (``p += 0.01 * randn``; a convolution's
batch-norm statistics too) before export. Models, in ``WORKDIR/src`` (kept: a
second run reuses them), each exported in a process of its own:

- ``gpt2``: a GPT-2-like decoder (6 layers, n_embd 768, vocab 50257), optimum's
  default export (one model, past key values as inputs and outputs);
- ``bert``: a BERT-base-like encoder (12 layers, hidden 768), optimum's export;
- ``t5``: a T5-small-like seq2seq (d_model 512, 6+6 layers, vocab 32128),
  optimum's export with ``no_post_process=True``: encoder, decoder,
  decoder-with-past (three files, each converted on its own);
- ``llama``: a Llama-like decoder (hidden 512, 4 layers, vocab 32000, untied
  head), ``torch.onnx.export(dynamo=True)`` of a wrapper that takes and returns
  the past key values (external data);
- ``conv``: a convolutional network built in torch (eight convolutions, batch
  norms folded by the exporter, a bilinear and a nearest ``Resize``, a
  ``TopK`` of the class scores: TopK is on the default block list),
  ``torch.onnx.export(dynamo=True)`` (external data);
- ``bert_xl``: a BERT-XL-like encoder (24 layers, hidden 1536, about 2.7 GiB
  of float32 weights), optimum's export (external data, one file).

Each conversion runs in a fresh process (``--worker``), after its imports
(onnx, onnxruntime's converter, onnx-light), and is measured with
:class:`~benchmarks.harness.PeakMemory` (the kernel's ``VmHWM``, reset through
``/proc/self/clear_refs``; growth during the operation and the process's
absolute peak), rounds interleaved (round 1 in order, then shuffled):

- ``onnx-light``: ``onnx_light.onnx.convert_float_to_float16(src, dst, **setting)``;
- ``usual``: ``onnx.load(src)`` (with the weights),
  ``onnxruntime.transformers.float16.convert_float_to_float16(model, **setting)``,
  ``onnx.save(..., save_as_external_data=True)``;
- ``usual (path)``, for the model over 2 GiB only: the same converter given the
  path (it then runs ``infer_shapes_path``, the documented way around the 2 GiB
  limit), then ``onnx.save``.

Settings: ``default`` (every parameter at its default) and ``keep_io_types``
for every model, plus ``clip 1e-7/1e4`` (onnxconverter-common's clipping
limits) for gpt2 and bert. Checks, after round 1, in a fresh process, of
onnx-light's output against the usual recipe's (its path variant where the
usual recipe fails): every initializer (all graphs) byte-identical (name,
dtype, dims, the tensor's bytes); the multiset of op types, the nodes
themselves (op type, name, inputs, outputs, attributes; a tensor attribute by
its values, inline or external alike) and their order; the
graph's inputs and outputs (names, element types); onnxruntime's outputs
(CPU, one thread) bit-identical on the same inputs (past key values fed, of
past length 5); ``onnx.checker.check_model(path)`` and ``full_check=True`` on
both; the largest absolute difference of onnx-light's outputs against the
float32 model's; the values clipped that onnx-light reports against a count
made here with onnxruntime's own rule on the float32 tensors. Writes
``benchmarks/proofs/results/convert_proof.md`` and keeps the run's record (every
round's figures, every check) in ``WORKDIR/convert_proof.json``
(``--report-only`` rewrites the report from it). The library measured is
``onnx_light/`` as committed at HEAD (``git archive`` into ``WORKDIR/lib``, put
first on the workers' ``PYTHONPATH``), not the working tree, unless
``--library tree``. About 25 minutes on 2 cores, the exports included (4
minutes); the model over 2 GiB needs about 7 GiB of RAM (the usual recipe).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections import Counter

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# the checkout, for benchmarks.*: last, so that a worker imports onnx_light from the
# archive --library head puts first on PYTHONPATH, not from the checkout
sys.path.append(ROOT)

from benchmarks.text import report_path, spread, write_report  # noqa: E402

MIB = 2**20
MB = 1e6

# model -> (files converted, what it is)
MODELS = {
    "gpt2": (["model.onnx"], "GPT-2-like decoder with past, optimum"),
    "bert": (["model.onnx"], "BERT-base-like encoder, optimum"),
    "t5": (
        ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"],
        "T5-small-like seq2seq, optimum (no post-processing)",
    ),
    "llama": (["model.onnx"], "Llama-like decoder with past, torch.onnx.export(dynamo=True)"),
    "conv": (["model.onnx"], "convolutions, Resize and TopK, torch.onnx.export(dynamo=True)"),
    "bert_xl": (["model.onnx"], "BERT-XL-like encoder over 2 GiB, optimum, external data"),
}
SETTINGS = {
    "default": {},
    "keep_io_types": {"keep_io_types": True},
    "clip 1e-7/1e4": {"min_positive_val": 1e-7, "max_finite_val": 1e4},
}
EXTRA_SETTINGS = {"gpt2": ["clip 1e-7/1e4"], "bert": ["clip 1e-7/1e4"]}
PATH_WAY = {"bert_xl"}  # models over 2 GiB: the usual recipe's path variant too
PAST, SEQ, ENCODER = 5, 4, 7  # past length, new tokens, encoder length of the checks


def settings_of(model: str) -> list[str]:
    return ["default", "keep_io_types", *EXTRA_SETTINGS.get(model, [])]


def ways_of(model: str) -> list[str]:
    return ["onnx-light", "usual"] + (["usual (path)"] if model in PATH_WAY else [])


# -- exports (each model in a process of its own) ----------------------------------


def _perturb(model, seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
        for name, b in model.named_buffers():
            if b.is_floating_point() and name.endswith("running_var"):
                b.mul_(1 + 0.1 * torch.rand_like(b))
            elif b.is_floating_point() and name.endswith("running_mean"):
                b.add_(0.01 * torch.randn_like(b))


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=768, n_head=12, vocab_size=50257))


def _bert():
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig())


def _bert_xl():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        hidden_size=1536, num_hidden_layers=24, num_attention_heads=16, intermediate_size=6144
    )
    return BertModel(cfg)


def _t5():
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128)
    return T5ForConditionalGeneration(cfg)


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        vocab_size=32000,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(cfg)


def _conv():
    import torch
    import torch.nn.functional as F
    from torch import nn

    def block(i, o, stride=1):
        return nn.Sequential(
            nn.Conv2d(i, o, 3, stride=stride, padding=1), nn.BatchNorm2d(o), nn.ReLU()
        )

    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(
                block(3, 64), block(64, 128, 2), block(128, 256, 2), block(256, 512, 2),
                block(512, 512),
            )  # fmt: skip
            self.dec = nn.Sequential(block(512, 256), block(256, 128))
            self.seg = nn.Conv2d(128, 21, 1)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x):
            f = self.enc(x)
            scores, classes = torch.topk(self.fc(f.mean(dim=(2, 3))), 5)
            y = F.interpolate(f, scale_factor=2.0, mode="bilinear", align_corners=False)
            y = F.interpolate(self.dec(y), scale_factor=4.0, mode="nearest")
            return self.seg(y), scores, classes

    return ConvNet()


BUILDERS = {"gpt2": _gpt2, "bert": _bert, "t5": _t5, "llama": _llama, "conv": _conv}
BUILDERS["bert_xl"] = _bert_xl
SEEDS = {"gpt2": 2, "bert": 4, "t5": 1, "llama": 3, "conv": 5, "bert_xl": 6}


def _export_llama(model, folder: str) -> None:
    import torch
    from transformers import DynamicCache

    layers = model.config.num_hidden_layers
    heads = model.config.num_attention_heads
    head_dim = model.config.hidden_size // heads

    class WithPast(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, past):
            cache = DynamicCache()
            for i, (k, v) in enumerate(past):
                cache.update(k, v, i)
            out = self.m(
                input_ids=input_ids,
                attention_mask=attention_mask,
                past_key_values=cache,
                use_cache=True,
            )
            present = []
            for i in range(layers):
                k, v = out.past_key_values[i]
                present += [k, v]
            return (out.logits, *present)

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (1, SEQ), generator=g)
    past = [
        tuple(torch.randn(1, heads, PAST, head_dim, generator=g) for _ in range(2))
        for _ in range(layers)
    ]
    auto = torch.export.Dim.AUTO
    kv = [f"{i}.{x}" for i in range(layers) for x in ("key", "value")]
    torch.onnx.export(
        WithPast(model),
        (ids, torch.ones(1, PAST + SEQ, dtype=torch.int64), past),
        os.path.join(folder, "model.onnx"),
        input_names=["input_ids", "attention_mask", *[f"past_key_values.{n}" for n in kv]],
        output_names=["logits", *[f"present.{n}" for n in kv]],
        dynamic_shapes={
            "input_ids": {0: auto, 1: auto},
            "attention_mask": {0: auto, 1: auto},
            "past": [({0: auto, 2: auto}, {0: auto, 2: auto}) for _ in range(layers)],
        },
        dynamo=True,
        external_data=True,
    )


def _export_conv(model, folder: str) -> None:
    import torch

    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    torch.onnx.export(
        model,
        (x,),
        os.path.join(folder, "model.onnx"),
        input_names=["pixel_values"],
        output_names=["segmentation", "scores", "classes"],
        dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
        dynamo=True,
        external_data=True,
    )


def export(workdir: str, name: str) -> dict:
    """Export ``name`` into ``workdir/src/name`` unless done; returns {name: seconds}."""
    import torch

    folder = os.path.join(workdir, "src", name)
    if os.path.exists(os.path.join(folder, ".done")):
        return {}
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = BUILDERS[name]().eval()
    _perturb(model, SEEDS[name])
    if name == "llama":
        _export_llama(model, folder)
    elif name == "conv":
        _export_conv(model, folder)
    else:
        from optimum.exporters.onnx import onnx_export_from_model

        onnx_export_from_model(model, folder, no_post_process=name == "t5", do_validation=False)
    open(os.path.join(folder, ".done"), "w").close()
    return {name: time.perf_counter() - t0}


# -- files --------------------------------------------------------------------------


def src_path(workdir: str, model: str, file: str) -> str:
    return os.path.join(workdir, "src", model, file)


def out_path(workdir: str, way: str, setting: str, model: str, file: str) -> str:
    """A folder of its own per conversion (each run empties it first)."""
    slug = "".join(c if c.isalnum() else "_" for c in f"{way}-{setting}")
    return os.path.join(workdir, "out", slug, model, file.removesuffix(".onnx"), file)


def model_bytes(onnx_path: str) -> int:
    """Bytes of a .onnx file and of the data files it references."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    folder = os.path.dirname(onnx_path)
    files = {onnx_path}
    for t in _get_all_tensors(onnx.load(onnx_path, load_external_data=False)):
        for e in t.external_data:
            if e.key == "location":
                files.add(os.path.join(folder, e.value))
    return sum(os.path.getsize(f) for f in files)


# -- measurements (each in a fresh process) -----------------------------------------


def convert(workdir: str, way: str, model: str, file: str, setting: str) -> dict:
    import onnx
    from onnxruntime.transformers import float16

    import onnx_light.onnx as onnxl
    from benchmarks.harness import PeakMemory

    src = src_path(workdir, model, file)
    dst = out_path(workdir, way, setting, model, file)
    shutil.rmtree(os.path.dirname(dst), ignore_errors=True)
    os.makedirs(os.path.dirname(dst))
    kwargs = SETTINGS[setting]
    location = os.path.basename(dst) + ".data"
    extra, error = {}, None
    m = PeakMemory()
    try:
        with m:
            if way == "onnx-light":
                r = onnxl.convert_float_to_float16(src, dst, **kwargs)
                extra = {
                    "converted": r.converted,
                    "converted_inline": r.converted_inline,
                    "bytes_read": r.bytes_read,
                    "bytes_written": r.bytes_written,
                    "values_clipped": r.values_clipped,
                    "clipped": r.clipped,
                }
            else:
                proto = src if way == "usual (path)" else onnx.load(src)
                converted = float16.convert_float_to_float16(proto, **kwargs)
                del proto
                onnx.save(converted, dst, save_as_external_data=True, location=location)
    except Exception as e:  # the failure is the result, and where it was raised
        frames = traceback.extract_tb(e.__traceback__)[-3:]
        where = " > ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in frames)
        error = f"{type(e).__name__}: {str(e)[:600]} (in {where})"
    return {
        "library": os.path.dirname(os.path.dirname(os.path.abspath(onnxl.__file__))),
        "seconds": m.seconds,
        "peak_growth": m.growth,
        "peak": m.peak,
        "exact": m.exact,
        "src_bytes": model_bytes(src),
        "dst_bytes": None if error else model_bytes(dst),
        "error": error,
        **extra,
    }


# -- checks ---------------------------------------------------------------------------


def _graphs(graph):
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.g.node or a.g.initializer:
                yield from _graphs(a.g)
            for g in a.graphs:
                yield from _graphs(g)


def _initializers(model) -> dict:
    return {t.name: t for g in _graphs(model.graph) for t in g.initializer}


def _nodes(model) -> list:
    return [n for g in _graphs(model.graph) for n in g.node]


def _node_key(node, folder: str) -> tuple:
    """A node by what it computes: a tensor attribute by its values (inline or in the
    weights file alike), a subgraph by its name (its nodes are compared on their own)."""

    def attr(a):
        if a.type == a.TENSOR:
            return (a.name, a.t.data_type, tuple(a.t.dims), tensor_array(folder, a.t).tobytes())
        if a.type == a.TENSORS:
            return (a.name, *[(t.data_type, tuple(t.dims), tensor_array(folder, t).tobytes())
                              for t in a.tensors])  # fmt: skip
        if a.type == a.GRAPH:
            return (a.name, a.g.name)
        return (a.name, a.SerializeToString())

    attrs = tuple(sorted(attr(a) for a in node.attribute))
    return (node.op_type, node.domain, node.name, tuple(node.input), tuple(node.output), attrs)


def _external_attributes(nodes) -> int:
    from onnx.onnx_pb import TensorProto

    return sum(
        a.t.data_location == TensorProto.EXTERNAL for n in nodes for a in n.attribute if a.t.dims
    )


def tensor_array(folder: str, t) -> np.ndarray:
    """A tensor's values, read from its own file range when it is external."""
    from onnx import TensorProto, helper
    from onnx import numpy_helper as onh

    if t.data_location != TensorProto.EXTERNAL:
        return onh.to_array(t)
    info = {e.key: e.value for e in t.external_data}
    dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
    count = int(np.prod(t.dims, dtype=np.int64))
    with open(os.path.join(folder, info["location"]), "rb") as f:
        f.seek(int(info.get("offset", 0)))
        data = f.read(int(info.get("length", count * dtype.itemsize)))
    return np.frombuffer(data, dtype=dtype).reshape(tuple(t.dims))


def _ort_rule_count(a: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Values onnxruntime's ``convert_np_to_float16`` changes (its own comparisons):
    [raised to ``lo`` in magnitude, lowered to ``hi``]."""
    inf = float("inf")
    under = ((a > 0) & (a < lo)) | ((a > -lo) & (a < 0))
    over = ((a > hi) & (a < inf)) | ((a > -inf) & (a < -hi))
    return np.array([under.sum(), over.sum()], dtype=np.int64)


def compare_weights(ours_path: str, ref_path: str) -> dict:
    import onnx

    a = _initializers(onnx.load(ours_path, load_external_data=False))
    b = _initializers(onnx.load(ref_path, load_external_data=False))
    fa, fb = os.path.dirname(ours_path), os.path.dirname(ref_path)
    diff = []
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name]
        if x.data_type != y.data_type or list(x.dims) != list(y.dims):
            diff.append(f"{name}: dtype/dims {x.data_type}{list(x.dims)} vs "
                        f"{y.data_type}{list(y.dims)}")  # fmt: skip
        elif tensor_array(fa, x).tobytes() != tensor_array(fb, y).tobytes():
            diff.append(f"{name}: bytes differ")
    only = sorted(set(a) ^ set(b))
    diff += [f"{n}: only in {'onnx-light' if n in a else 'usual'}" for n in only]
    return {"total": len(set(a) | set(b)), "identical": len(set(a) | set(b)) - len(diff),
            "diff": diff[:10]}  # fmt: skip


def compare_graphs(ours_path: str, ref_path: str) -> dict:
    import onnx

    a = onnx.load(ours_path, load_external_data=False)
    b = onnx.load(ref_path, load_external_data=False)
    na, nb = _nodes(a), _nodes(b)
    ka = [_node_key(n, os.path.dirname(ours_path)) for n in na]
    kb = [_node_key(n, os.path.dirname(ref_path)) for n in nb]
    types_a, types_b = Counter(n.op_type for n in na), Counter(n.op_type for n in nb)
    out = {
        "nodes": [len(na), len(nb)],
        "op_types_same": types_a == types_b,
        "op_types_diff": {
            k: [types_a.get(k, 0), types_b.get(k, 0)]
            for k in set(types_a) | set(types_b)
            if types_a.get(k, 0) != types_b.get(k, 0)
        },
        "nodes_same": Counter(ka) == Counter(kb),
        "only_ours": [f"{k[0]} {k[2]}" for k in (Counter(ka) - Counter(kb))][:5],
        "only_usual": [f"{k[0]} {k[2]}" for k in (Counter(kb) - Counter(ka))][:5],
        "order_same": ka == kb,
        "order_moved": sum(x != y for x, y in zip(ka, kb, strict=False)),
    }

    def io(m):
        return [
            [(v.name, v.type.tensor_type.elem_type) for v in m.graph.input],
            [(v.name, v.type.tensor_type.elem_type) for v in m.graph.output],
        ]

    out["io_same"] = io(a) == io(b)
    out["external_attributes"] = [_external_attributes(na), _external_attributes(nb)]
    if ka != kb:  # where the order differs: the first node out of place in each
        first = next((i for i, (x, y) in enumerate(zip(ka, kb, strict=False)) if x != y), None)
        if first is not None:
            out["first_moved"] = [first, f"{ka[first][0]} {ka[first][2]}",
                                  f"{kb[first][0]} {kb[first][2]}"]  # fmt: skip
    return out


def count_clipped(src: str, ours_path: str, lo: float, hi: float) -> tuple[list[int], list]:
    """Values onnxruntime's rule changes in the float32 tensors onnx-light made float16
    (initializers by name, attribute tensors by their node's first output):
    [under ``lo``, over ``hi``], and where values over ``hi`` are (tensor, the values)."""
    import onnx
    from onnx.onnx_pb import TensorProto

    FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16
    s = onnx.load(src, load_external_data=False)
    o = onnx.load(ours_path, load_external_data=False)
    folder = os.path.dirname(src)
    mine = _initializers(o)
    total = np.zeros(2, dtype=np.int64)
    over_at = []

    def add(label, a):
        nonlocal total
        counts = _ort_rule_count(a, lo, hi)
        total += counts
        if counts[1]:
            big = a[np.isfinite(a) & (np.abs(a) > hi)]
            over_at.append([label, sorted({float(x) for x in big})[:3]])

    for name, t in _initializers(s).items():
        if t.data_type == FLOAT and name in mine and mine[name].data_type == FLOAT16:
            add(f"initializer {name}", tensor_array(folder, t))
    by_output = {n.output[0]: n for n in _nodes(o) if n.output}
    for n in _nodes(s):
        other = by_output.get(n.output[0]) if n.output else None
        if other is None:
            continue
        theirs = {a.name: a for a in other.attribute}
        for a in n.attribute:
            converted = a.name in theirs and theirs[a.name].t.data_type == FLOAT16
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == FLOAT and converted:
                add(f"{n.op_type} {n.name or n.output[0]}", tensor_array(folder, a.t))
    return [int(x) for x in total], over_at


def _dim(d, name: str, axis: int) -> int:
    """Sizes for the checks: optimum's dim names, or by input name for dynamo's."""
    if isinstance(d, int):
        return d
    d = d or ""
    if d.startswith("s") and d[1:].isdigit() or not d:  # dynamo: sN
        if axis == 0:
            return 1
        if name.startswith("past"):
            return PAST
        return PAST + SEQ if name == "attention_mask" else SEQ
    if "+" in d:
        return sum(_dim(x.strip(), name, axis) for x in d.split("+"))
    if "batch" in d:
        return 1
    if "past" in d:
        return PAST
    if "encoder" in d:
        return ENCODER
    return SEQ


def feeds(session) -> dict:
    """Fixed float32 / int64 inputs from a session's input metadata."""
    rng = np.random.default_rng(0)
    out = {}
    for i in session.get_inputs():
        shape = [_dim(d, i.name, k) for k, d in enumerate(i.shape)]
        if "mask" in i.name:
            out[i.name] = np.ones(shape, dtype=np.int64)
        elif "token_type" in i.name:
            out[i.name] = np.zeros(shape, dtype=np.int64)
        elif i.name == "position_ids":
            out[i.name] = np.broadcast_to(np.arange(PAST, PAST + shape[-1]), shape).copy()
        elif i.type == "tensor(int64)":
            out[i.name] = rng.integers(0, 1000, shape, dtype=np.int64)
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def run_ort(path: str, inputs: dict | None = None) -> tuple[dict, dict]:
    """Outputs by name on ``inputs`` (None: built from the session's metadata), cast to
    float16 where the model takes float16; returns (outputs, inputs)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    types = {i.name: i.type for i in session.get_inputs()}
    inputs = feeds(session) if inputs is None else inputs
    feed = {
        k: (v.astype(np.float16) if types[k] == "tensor(float16)" else v)
        for k, v in inputs.items()
        if k in types
    }
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feed), strict=True)), inputs


def _typed_apart(path: str) -> list[str]:
    """Initializers whose value_info gives another element type than their own."""
    import onnx

    model = onnx.load(path, load_external_data=False)
    out = []
    for g in _graphs(model.graph):
        inits = {t.name: t.data_type for t in g.initializer}
        for v in g.value_info:
            if v.name in inits and v.type.tensor_type.elem_type != inits[v.name]:
                out.append(f"{v.name} ({inits[v.name]} vs {v.type.tensor_type.elem_type})")
    return out


def check(workdir: str, model: str, file: str, setting: str, ref_way: str, clipped: int):
    import onnx

    src = src_path(workdir, model, file)
    ours = out_path(workdir, "onnx-light", setting, model, file)
    ref = out_path(workdir, ref_way, setting, model, file)
    res = {"ref": ref_way}

    for key, path in (("checker_ours", ours), ("checker_usual", ref)):
        verdict = []
        for full in (False, True):
            try:
                onnx.checker.check_model(path, full_check=full)
                verdict.append("ok")
            except Exception as e:
                verdict.append(f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
        res[key] = verdict
    res["weights"] = compare_weights(ours, ref)
    res["graph"] = compare_graphs(ours, ref)
    kwargs = SETTINGS[setting]
    lo, hi = kwargs.get("min_positive_val", 5.96e-08), kwargs.get("max_finite_val", 65504.0)
    counted, res["over_at"] = count_clipped(src, ours, lo, hi)
    res["clipped"] = [clipped, *counted]

    res["value_info_vs_initializer"] = [_typed_apart(ours), _typed_apart(ref)]
    want, inputs = run_ort(src)
    got, _ = run_ort(ours, inputs)
    usual, _ = run_ort(ref, inputs)
    res["ort_identical"] = [
        sum(got[k].dtype == usual[k].dtype and got[k].tobytes() == usual[k].tobytes() for k in got),
        len(got),
    ]
    res["ort_dtypes"] = sorted({str(v.dtype) for v in got.values()})
    worst = ["", 0.0, 0.0]
    nonfinite = 0
    for k, v in got.items():
        if not np.issubdtype(v.dtype, np.floating):
            exact = np.array_equal(v, want[k])
            res.setdefault("int_outputs", []).append([k, "equal" if exact else "differ"])
            continue
        a, b = v.astype(np.float64), want[k].astype(np.float64)
        nonfinite += int((~np.isfinite(a)).sum())
        d = float(np.nanmax(np.abs(a - b))) if a.size else 0.0
        if d > worst[1] or not worst[0]:
            worst = [k, d, float(np.nanmax(np.abs(b))) if b.size else 0.0]
    res["max_diff"] = worst
    res["nonfinite"] = nonfinite
    return res


# -- driver ---------------------------------------------------------------------------


def spawn(args: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", *args],
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        how = f"exit {proc.returncode}" if proc.returncode >= 0 else f"signal {-proc.returncode}"
        return {"error": f"worker {how}: " + (proc.stderr or proc.stdout)[-1200:]}
    return json.loads(lines[-1])


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default="/var/tmp/convert")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--worker", nargs="+")
    parser.add_argument(
        "--library",
        choices=["head", "tree"],
        default="head",
        help="measure onnx_light/ as committed at HEAD (a git archive in WORKDIR/lib), "
        "or the working tree",
    )
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite the report from the last run's record"
    )
    args = parser.parse_args()
    if args.worker:
        kind, rest = args.worker[0], args.worker[1:]
        if kind == "export":
            out = export(*rest)
        elif kind == "convert":
            out = convert(*rest)
        elif kind == "check":
            out = check(*rest[:5], int(rest[5]))
        else:
            raise ValueError(kind)
        print(json.dumps(out))
        return

    workdir = os.path.abspath(args.workdir)
    if args.report_only:
        with open(os.path.join(workdir, "convert_proof.json")) as f:
            report(json.load(f))
        return
    models = args.models.split(",")
    os.makedirs(workdir, exist_ok=True)
    record = os.path.join(workdir, "src", "export_seconds.json")
    exported = {}
    if os.path.exists(record):
        with open(record) as f:
            exported = json.load(f)
    for name in models:
        res = spawn(["export", workdir, name])
        if "error" in res:
            sys.exit(f"export of {name} failed:\n{res['error']}")
        exported.update(res)
        with open(record, "w") as f:
            json.dump(exported, f)
        print(f"export {name}: {exported.get(name, 0):.0f} s", flush=True)

    commit = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "--", "onnx_light")
    if args.library == "head":  # the committed library, whatever the tree holds now
        lib = os.path.join(workdir, "lib", commit)
        if not os.path.exists(os.path.join(lib, "onnx_light")):
            os.makedirs(lib, exist_ok=True)
            archive = subprocess.run(
                ["git", "archive", commit, "onnx_light"], cwd=ROOT,
                capture_output=True, check=True,
            )  # fmt: skip
            subprocess.run(["tar", "-x", "-C", lib], input=archive.stdout, check=True)
        os.environ["PYTHONPATH"] = os.pathsep.join([lib, os.environ.get("PYTHONPATH", "")])
        dirty = (
            f"not measured: {len(dirty.splitlines())} files changed in the tree" if dirty else ""
        )
    units = [(m, f, s) for m in models for f in MODELS[m][0] for s in settings_of(m)]
    ops = [(w, *u) for u in units for w in ways_of(u[0])]
    rows, checks = [], {}
    load = [os.getloadavg()[0]]
    rng = np.random.default_rng(0)
    for r in range(args.rounds):
        order = list(ops) if r == 0 else [ops[i] for i in rng.permutation(len(ops))]
        for way, model, file, setting in order:
            res = spawn(["convert", workdir, way, model, file, setting])
            res.update(way=way, model=model, file=file, setting=setting, round=r + 1)
            rows.append(res)
            if "seconds" not in res or res.get("error"):
                print(f"round {r + 1} {way} {model}/{file} {setting}: FAILED "
                      f"{res['error'][-300:]}", flush=True)  # fmt: skip
            else:
                print(
                    f"round {r + 1} {way:13s} {model:7s} {file:28s} {setting:14s} "
                    f"{res['seconds']:7.2f} s  peak +{res['peak_growth'] / MIB:6.0f} MiB "
                    f"(abs {res['peak'] / MIB:6.0f})",
                    flush=True,
                )
            if r == 0 and way == ways_of(model)[-1]:
                checks[(model, file, setting)] = _check(workdir, rows, model, file, setting)
                print("   check:", json.dumps(checks[(model, file, setting)]), flush=True)
    load.append(os.getloadavg()[0])
    run = {"models": models, "exported": exported, "rows": rows, "load": load,
           "library": sorted({r["library"] for r in rows if "library" in r}),
           "commit": commit, "dirty": dirty, "rounds": args.rounds,
           "checks": [[list(k), c] for k, c in checks.items()]}  # fmt: skip
    with open(os.path.join(workdir, "convert_proof.json"), "w") as f:
        json.dump(run, f)
    report(run)


def report(run: dict) -> None:
    """Write ``convert_proof.md`` from a run's record."""
    checks = {tuple(k): c for k, c in run["checks"]}
    dirty = run["dirty"]
    if run.get("library"):
        dirty = f"imported from {', '.join(run['library'])}" + (f"; {dirty}" if dirty else "")
    text = report_text(run["models"], run["exported"], run["rows"], checks, run["load"],
                       run["commit"], dirty, run["rounds"])  # fmt: skip
    write_report(report_path("convert_proof.md"), text)


def _check(workdir, rows, model, file, setting) -> dict:
    """Check round 1's outputs: against the usual recipe's, or its path variant's."""
    mine = [r for r in rows if (r["way"], r["model"], r["file"], r["setting"])
            == ("onnx-light", model, file, setting)]  # fmt: skip
    if not mine or mine[0].get("error") or "seconds" not in mine[0]:
        return {"error": "onnx-light's conversion failed"}
    for way in ways_of(model)[1:]:
        theirs = [r for r in rows if (r["way"], r["model"], r["file"], r["setting"])
                  == (way, model, file, setting)]  # fmt: skip
        if theirs and "seconds" in theirs[0] and not theirs[0].get("error"):
            clipped = mine[0].get("values_clipped", 0)
            return spawn(["check", workdir, model, file, setting, way, str(clipped)])
    return {"error": "no output of the usual recipe to compare with"}


# -- report ---------------------------------------------------------------------------


def _mib(values) -> str:
    if not values:
        return "-"
    v = [x / MIB for x in values]
    return f"{min(v):,.0f}" if len(v) == 1 else f"{min(v):,.0f} ({max(v):,.0f})"


def versions() -> str:
    import importlib.metadata as md

    names = ["torch", "transformers", "optimum", "optimum-onnx", "onnxscript", "onnxruntime"]
    names += ["onnx", "numpy", "onnx-light"]
    out = []
    for n in names:
        try:
            out.append(f"{n} {md.version(n)}")
        except md.PackageNotFoundError:
            out.append(f"{n} missing")
    return ", ".join(out)


def _ok(verdict: list[str]) -> str:
    """path / full check verdicts, a message given once when both say it."""
    short = ["ok" if v == "ok" else f"**{v[:110].strip()}**" for v in verdict]
    return short[0] + " (both)" if len(set(short)) == 1 and short[0] != "ok" else " / ".join(short)


def _check_cells(c: dict) -> list[str]:
    if "error" in c:
        return [f"**{c['error'][-300:].strip()}**"] + [""] * 6
    w, g = c["weights"], c["graph"]
    weights = f"{w['identical']}/{w['total']}" + ("" if not w["diff"] else " **differ**")
    nodes = "same types" if g["op_types_same"] else f"**types differ** {g['op_types_diff']}"
    nodes += ", same nodes" if g["nodes_same"] else ", **nodes differ**"
    nodes += ", same order" if g["order_same"] else f", order differs ({g['order_moved']} moved)"
    nodes += "" if g["io_same"] else ", **inputs/outputs differ**"
    same, n = c["ort_identical"]
    ort = f"{same}/{n}" + ("" if same == n else " **differ**")
    name, diff, scale = c["max_diff"]
    worst = f"{diff:.3g} (`{name}`, max abs {scale:.3g})"
    if c.get("nonfinite"):
        worst += f", {c['nonfinite']} non-finite"
    reported, under, over = c["clipped"]
    clipped = f"{reported} / {under + over}" + ("" if reported == under + over else " **differ**")
    clipped += f" ({over} above the maximum)" if over else ""
    return [weights, nodes, ort, _ok(c["checker_ours"]), _ok(c["checker_usual"]), worst, clipped]


def _runs(rows, way, model, file, setting) -> tuple[list, list]:
    """The successful runs of a conversion, and the failed ones."""
    rs = [r for r in rows if (r["way"], r["model"], r["file"], r["setting"])
          == (way, model, file, setting)]  # fmt: skip
    ok = [r for r in rs if "seconds" in r and not r.get("error")]
    return ok, [r for r in rs if r not in ok]


def _passes(c: dict) -> list[str]:
    """The checks a conversion failed (empty: all passed)."""
    if "error" in c:
        return [c["error"][:80]]
    failed = []
    if c["weights"]["diff"]:
        failed.append("weights")
    g = c["graph"]
    if not (g["op_types_same"] and g["nodes_same"] and g["io_same"]):
        failed.append("nodes")
    if c["ort_identical"][0] != c["ort_identical"][1]:
        failed.append("onnxruntime outputs")
    if c["checker_ours"][0] != "ok":
        failed.append("checker")
    if c["checker_ours"][1] != "ok":
        failed.append("full check")
    if c["clipped"][0] != c["clipped"][1] + c["clipped"][2]:
        failed.append("clipped count")
    return failed


def summary_lines(models, rows, checks) -> list[str]:
    """One line per file converted with the default setting: the figures side by side."""
    L = ["## Summary (default setting; medians over the rounds)\n"]
    L.append("| model | file | fp32 (MB) | onnx-light (s) | usual (s) | usual / onnx-light | "
             "onnx-light peak growth (MiB) | usual peak growth (MiB) | checks failed |")  # fmt: skip
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---|")
    for model in models:
        for file in MODELS[model][0]:
            ours, _ = _runs(rows, "onnx-light", model, file, "default")
            usual, bad = _runs(rows, "usual", model, file, "default")
            if not ours:
                L.append(f"| {model} | {file} | | failed | | | | | |")
                continue
            t_ours = statistics.median(r["seconds"] for r in ours)
            g_ours = max(r["peak_growth"] for r in ours) / MIB
            if usual:
                t_usual = statistics.median(r["seconds"] for r in usual)
                times = f"{t_usual:.2f} | {t_usual / t_ours:.1f}x"
                growth = f"{max(r['peak_growth'] for r in usual) / MIB:,.0f}"
            else:
                err = bad[0]["error"].split(":")[0] if bad else "not run"
                times, growth = f"failed ({err}) | -", "-"
                if bad and "peak_growth" in bad[0]:
                    growth = f"{max(r['peak_growth'] for r in bad) / MIB:,.0f} (at the failure)"
                path, _ = _runs(rows, "usual (path)", model, file, "default")
                if path:
                    t_path = statistics.median(r["seconds"] for r in path)
                    times = (f"failed ({err}); given the path: {t_path:.2f} | "
                             f"{t_path / t_ours:.1f}x (given the path)")  # fmt: skip
                    growth += f"; given the path: {max(r['peak_growth'] for r in path) / MIB:,.0f}"
            failed = _passes(checks.get((model, file, "default"), {"error": "not checked"}))
            L.append(f"| {model} | {file} | {ours[0]['src_bytes'] / MB:,.1f} | {t_ours:.2f} | "
                     f"{times} | {g_ours:,.0f} | {growth} | {', '.join(failed) or 'none'} |")  # fmt: skip
    L.append("")
    return L


def seen_lines(models, rows, checks) -> list[str]:
    """What the figures and checks show, counted from them."""
    L = ["## What was seen\n"]
    cs = {k: c for k, c in checks.items() if k[0] in models}
    good = [k for k, c in cs.items() if "error" not in c]
    L.append(f"- Conversions checked: {len(good)} of {len(cs)} (model, file, setting).")

    def count(pred):
        return sum(1 for k in good if pred(cs[k]))

    L.append(
        f"- Against the usual recipe's output: weights byte-identical in "
        f"{count(lambda c: not c['weights']['diff'])}, the same nodes (and op types, inputs "
        f"and outputs) in {count(lambda c: c['graph']['nodes_same'] and c['graph']['io_same'])}, "
        "onnxruntime's outputs bit-identical in "
        f"{count(lambda c: c['ort_identical'][0] == c['ort_identical'][1])}; the values "
        "clipped that onnx-light reports equal the count made with onnxruntime's rule in "
        f"{count(lambda c: c['clipped'][0] == c['clipped'][1] + c['clipped'][2])}."
    )
    path_ok = count(lambda c: c["checker_ours"][0] == "ok")
    full_ok = count(lambda c: c["checker_ours"][1] == "ok")
    L.append(f"- `onnx.checker.check_model(path)` passes on onnx-light's output in {path_ok} of "
             f"{len(good)}; with `full_check=True` in {full_ok}.")  # fmt: skip
    for k in good:
        c = cs[k]
        if c["checker_ours"][1] != "ok":
            apart = c.get("value_info_vs_initializer", [[], []])
            L.append(
                f"  - {'/'.join(k)}: `{c['checker_ours'][1]}`. Initializers whose value_info "
                f"says another element type: onnx-light {apart[0]}, the usual recipe "
                f"{apart[1]}; the usual recipe's full check: `{c['checker_usual'][1]}`."
            )
    usual_bad = {}
    for k in good:
        v = cs[k]["checker_usual"][0]
        if v != "ok":
            usual_bad.setdefault(v.split(", however")[0], []).append("/".join(k))
    L.append(f"- The usual recipe's output fails `check_model(path)` in "
             f"{sum(map(len, usual_bad.values()))} of {len(good)}:")  # fmt: skip
    for message, where in usual_bad.items():
        L.append(f"  - `{message}`: {', '.join(where)}.")
    moved = [k for k in good if not cs[k]["graph"]["order_same"]]
    L.append(f"- Node order differs from the usual recipe's (same nodes) in {len(moved)}: "
             + ", ".join("/".join(k) + f" (first at index {cs[k]['graph']['first_moved'][0]}: "
                         f"onnx-light `{cs[k]['graph']['first_moved'][1]}`)"
                         for k in moved if cs[k]["graph"].get("first_moved"))
             + ".")  # fmt: skip
    ext = [k for k in good if len(set(cs[k]["graph"]["external_attributes"])) > 1]
    if ext:
        L.append("- onnx-light writes tensor attributes (Constant values) of at least "
                 "`size_threshold` bytes into the weights file; `onnx.save` keeps them in the "
                 "`.onnx` (its `convert_attribute=False`): "
                 + ", ".join(f"{'/'.join(k)} {cs[k]['graph']['external_attributes'][0]}"
                             for k in ext)
                 + " tensors. Their values are equal (compared in the nodes).")  # fmt: skip
    over = [(k, cs[k]["clipped"][2]) for k in good if cs[k]["clipped"][2]]
    places = {}
    for k in good:
        for label, values in cs[k].get("over_at", []):
            places.setdefault((label.split()[0], tuple(values)), []).append("/".join(k[:2]))
    clipped = [cs[k]["clipped"][0] for k in good]
    L.append(f"- Values clipped per conversion: {min(clipped)} to {max(clipped)}; above the "
             "maximum (lowered to it): "
             + (", ".join(f"{'/'.join(k)} {n}" for k, n in over) if over else "none")
             + ", the rest under `min_positive_val` (raised to it).")  # fmt: skip
    for (kind, values), where in places.items():
        L.append(f"  - above the maximum: values {list(values)} in {kind} tensors of "
                 f"{', '.join(dict.fromkeys(where))}.")  # fmt: skip
    diffs = [(cs[k]["max_diff"][1], k) for k in good]
    lo, hi = min(diffs), max(diffs)
    L.append(f"- Largest absolute difference against the float32 model's outputs: from "
             f"{lo[0]:.3g} ({'/'.join(lo[1])}) to {hi[0]:.3g} ({'/'.join(hi[1])}).")  # fmt: skip
    ratios, growth, usual_growth = [], [], []
    for model in models:
        for file in MODELS[model][0]:
            for setting in settings_of(model):
                ours, _ = _runs(rows, "onnx-light", model, file, setting)
                usual, _ = _runs(rows, "usual", model, file, setting)
                growth += [r["peak_growth"] for r in ours]
                if ours and usual:
                    t = statistics.median(r["seconds"] for r in usual)
                    ratios.append(t / statistics.median(r["seconds"] for r in ours))
                    usual_growth += [r["peak_growth"] / r["src_bytes"] for r in usual]
    if ratios:
        L.append(f"- Median time of the usual recipe over onnx-light's: {min(ratios):.1f}x "
                 f"to {max(ratios):.1f}x. Peak RSS growth: onnx-light at most "
                 f"{max(growth) / MIB:.0f} MiB in every run; the usual recipe "
                 f"{min(usual_growth):.1f}x to {max(usual_growth):.1f}x the float32 "
                 "model's size.")  # fmt: skip
    for model in models:
        for file in MODELS[model][0]:
            for setting in settings_of(model):
                for way in ways_of(model)[1:]:
                    ok, bad = _runs(rows, way, model, file, setting)
                    if bad:
                        b = bad[0]
                        figures = (f" after {b['seconds']:.1f} s, peak growth "
                                   f"{b['peak_growth'] / MIB:,.0f} MiB"
                                   if "seconds" in b else "")  # fmt: skip
                        L.append(f"- {way} failed on {model}/{file}/{setting} in {len(bad)} of "
                                 f"{len(ok) + len(bad)} runs{figures}: `{b['error'][:500]}`")  # fmt: skip
    L.append("")
    return L


def report_text(models, exported, rows, checks, load, commit, dirty, rounds) -> str:
    from benchmarks.harness import describe_machine

    def of(way, model, file, setting):
        return [r for r in rows if (r["way"], r["model"], r["file"], r["setting"])
                == (way, model, file, setting)]  # fmt: skip

    L = ["# float16 conversion on real exports\n"]
    L.append(
        f"Generated by `benchmarks/proofs/convert_proof.py` on "
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}, at commit {commit}"
        + (f" (onnx_light: {dirty})" if dirty else "")
        + ".\n"
    )
    L.append(f"- Machine: {describe_machine()}")
    L.append(f"- Versions: {versions()}")
    L.append(
        f"- Rounds: {rounds} per conversion, each in a fresh process after its imports, "
        "interleaved (round 1 in order, then shuffled). Times: min (median, max) in seconds. "
        "Peak RSS: the kernel's VmHWM reset before the conversion, min (max) over the rounds "
        "in MiB: the growth during the conversion, and the process's absolute peak "
        "(which includes the imports of onnx, onnxruntime and onnx-light). Page cache warm. "
        f"Load average (1 min) {load[0]:.1f} before, {load[1]:.1f} after: the machine is "
        "shared, so times spread; sizes and peaks do not."
    )
    L.append(
        "- `onnx-light`: `convert_float_to_float16(src, dst, **setting)`; `usual`: "
        "`onnx.load(src)` -> `onnxruntime.transformers.float16.convert_float_to_float16"
        "(model, **setting)` -> `onnx.save(..., save_as_external_data=True)`; "
        "`usual (path)`: the same converter given the path (`infer_shapes_path`). Sizes: the "
        "`.onnx` and the data files it references, MB = 10^6 bytes.\n"
    )
    spent = ", ".join(f"{k} {v:.0f}" for k, v in exported.items() if k in models)
    L.append(f"Export times (s, when the models were made): {spent}.\n")
    L += summary_lines(models, rows, checks)
    L += seen_lines(models, rows, checks)

    for model in models:
        files, what = MODELS[model]
        L.append(f"## {model}: {what}\n")
        L.append("| file | setting | way | fp32 (MB) | fp16 (MB) | seconds | peak growth (MiB) "
                 "| absolute peak (MiB) | result |")  # fmt: skip
        L.append("|---|---|---|---:|---:|---:|---:|---:|---|")
        for file in files:
            for setting in settings_of(model):
                for way in ways_of(model):
                    rs = of(way, model, file, setting)
                    ok = [r for r in rs if "seconds" in r and not r.get("error")]
                    bad = [r for r in rs if r not in ok]
                    src_mb = (
                        f"{rs[0]['src_bytes'] / MB:,.1f}" if rs and "src_bytes" in rs[0] else ""
                    )
                    if ok:
                        r0 = ok[-1]
                        result = ""
                        if way == "onnx-light":
                            result = (f"{r0['converted']} external + {r0['converted_inline']} "
                                      f"inline tensors converted, {r0['values_clipped']} "
                                      "values clipped")  # fmt: skip
                        L.append(
                            f"| {file} | {setting} | {way} | {src_mb} | "
                            f"{r0['dst_bytes'] / MB:,.1f} | {spread([r['seconds'] for r in ok])} "
                            f"| {_mib([r['peak_growth'] for r in ok])} "
                            f"| {_mib([r['peak'] for r in ok])} | {result} |"
                        )
                    if bad:
                        b = bad[0]
                        err = b["error"].replace("|", "\\|").replace("\n", " ")[-400:]
                        figures = "| | |"
                        if "seconds" in b:
                            figures = (f"after {spread([r['seconds'] for r in bad])} "
                                       f"| {_mib([r['peak_growth'] for r in bad])} "
                                       f"| {_mib([r['peak'] for r in bad])} |")  # fmt: skip
                        L.append(f"| {file} | {setting} | {way} | {src_mb} | failed "
                                 f"({len(bad)}/{len(rs)}) | {figures} `{err}` |")  # fmt: skip
        L.append("")
        L.append("| file | setting | compared with | weights identical | nodes | "
                 "onnxruntime bit-identical | checker ours (path / full) | "
                 "checker usual (path / full) | max abs diff vs fp32 | values clipped "
                 "(reported / counted) |")  # fmt: skip
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for file in files:
            for setting in settings_of(model):
                c = checks.get((model, file, setting), {"error": "not checked"})
                L.append(f"| {file} | {setting} | {c.get('ref', '')} | "
                         + " | ".join(_check_cells(c)) + " |")  # fmt: skip
        details = []
        for file in files:
            for setting in settings_of(model):
                c = checks.get((model, file, setting), {})
                g, w = c.get("graph", {}), c.get("weights", {})
                if w.get("diff"):
                    details.append(f"- {file} / {setting}: weights: {w['diff']}")
                if g and not g["nodes_same"]:
                    details.append(f"- {file} / {setting}: nodes only in onnx-light's "
                                   f"{g['only_ours']}, only in the usual {g['only_usual']}")  # fmt: skip
                for k, verdict in c.get("int_outputs", []):
                    details.append(f"- {file} / {setting}: integer output `{k}` {verdict} "
                                   "to the float32 model's")  # fmt: skip
                ext = g.get("external_attributes", [0, 0])
                if ext[0] != ext[1]:
                    details.append(f"- {file} / {setting}: attribute tensors (Constant values) "
                                   f"in the weights file: onnx-light {ext[0]}, usual {ext[1]} "
                                   "(same values)")  # fmt: skip
                if g.get("first_moved"):
                    i, x, y = g["first_moved"]
                    details.append(f"- {file} / {setting}: node lists ({g['nodes'][0]} nodes) "
                                   f"first differ at index {i}: onnx-light `{x}`, "
                                   f"usual `{y}`")  # fmt: skip
        if details:
            L.append("")
            L += details
        L.append("")
    return "\n".join(L)


if __name__ == "__main__":
    main()
