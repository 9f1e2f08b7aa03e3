"""Proof on real models: weights stored once across and within exported models.

Usage (run by hand, not by CI)::

    /tmp/ortv/bin/python benchmarks/proofs/dedup_proof.py [--workdir /var/tmp/dedup] [--rounds 3]

It needs a venv with torch (CPU), transformers, optimum + optimum-onnx,
onnxruntime, onnx, onnx-ir and onnx-light (editable), e.g. one made with::

    python -m venv /tmp/ortv
    /tmp/ortv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    /tmp/ortv/bin/pip install transformers optimum optimum-onnx onnxruntime onnx-ir safetensors
    /tmp/ortv/bin/pip install -e .

Measured with torch 2.13 CPU, transformers 4.57, optimum 2.1, optimum-onnx 0.1.0,
onnxruntime 1.32, onnx 1.23.2, onnx-ir 1.1.0 (the report lists the versions).
It downloads nothing: every model is built from a config with random weights
(fixed seeds), and every parameter is perturbed (``p += 0.01 * randn``) before
export, since default init makes all LayerNorm weights equal, which exporters
already merge. Models, in ``WORKDIR/src`` (kept: a second run reuses them):

- ``t5``: a T5-small-like model (d_model 512, 6+6 layers, vocab 32128, tied
  embedding), optimum's export with ``no_post_process=True``: encoder,
  decoder, decoder-with-past (three one-file models);
- ``t5_merged``: those three and optimum's default merged decoder
  (``merge_decoders(strict=False)``, what its post-processing writes);
- ``gpt2_pair``: a GPT-2-like model (6 layers, n_embd 768, vocab 50257, tied
  embedding), the old two-file split (decoder, decoder-with-past) through
  optimum's ``export_models``, no post-processing;
- ``gpt2``: the same weights, optimum's default export (one model with past);
- ``gpt2_dynamo``: the same weights, ``torch.onnx.export(dynamo=True)``
  (logits only, external data);
- ``llama``: a Llama-like model (hidden 512, 4 layers, vocab 32000, untied
  head), optimum's default export;
- ``t5_untied``: the T5 weights with the tie broken (the encoder's and the
  decoder's embeddings deep copies of ``shared``, as a checkpoint that stores
  each writes them), exported whole by ``torch.onnx.export(dynamo=True)``:
  one model holding the same embedding twice.

Each model's ``save_pretrained(safe_serialization=True)`` goes to
``WORKDIR/st/NAME/model.safetensors``. Each measurement runs in a fresh
process (``--worker``), after its imports, and is timed with
:class:`~benchmarks.harness.PeakMemory` (the kernel's ``VmHWM``, reset through
``/proc/self/clear_refs``; the report gives the growth during the operation
and the process's absolute peak):

- ``onnx-light``: ``deduplicate_external_data`` of every model of the set
  into a new folder, one ``weights.data``;
- ``merge_decoders``: ``optimum.onnx.merge_decoders`` on the decoder pair
  (the T5 set keeps its encoder beside the merged decoder);
- ``onnx-ir``: per model, ``onnx_ir.load``, ``DeduplicateInitializersPass``
  (default ``size_limit``: 1024 elements) and
  ``DeduplicateHashedInitializersPass``, ``onnx_ir.save`` with external data;
  ``onnx-ir raised``: the same with ``DeduplicateInitializersPass(size_limit)``
  raised above every tensor;
- ``reuse``: ``deduplicate_external_data(..., reuse=[model.safetensors])``
  with the model's safetensors file copied into the destination folder
  first (unmeasured), per model and for the T5 set.

Checks, each in a fresh process: the outputs of every model written
(onnxruntime, CPU, one thread) ``np.array_equal`` to its source's on fixed
inputs (past key values built from the inputs' metadata; a merged decoder's
with-past branch against the decoder-with-past, its no-past branch against
the decoder); ``onnx.checker.check_model(path)``, ``onnx.load(path)`` and
``onnx_ir.load(path)``. Unique bytes of a set are counted independently
(SHA-256 of every initializer of at least 1024 bytes). Writes
``benchmarks/proofs/results/dedup_proof.md`` and ``.csv``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # the checkout: benchmarks.*

from benchmarks.text import report_path, spread, write_report  # noqa: E402

MB = 1e6
MIB = 2**20

# set -> source folder, model files (in order)
SETS = {
    "t5": ("t5", ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"]),
    "t5_merged": (
        "t5_merged",
        [
            "encoder_model.onnx",
            "decoder_model.onnx",
            "decoder_with_past_model.onnx",
            "decoder_model_merged.onnx",
        ],
    ),
    "gpt2_pair": ("gpt2_pair", ["decoder_model.onnx", "decoder_with_past_model.onnx"]),
    "gpt2": ("gpt2", ["model.onnx"]),
    "gpt2_dynamo": ("gpt2_dynamo", ["model.onnx"]),
    "llama": ("llama", ["model.onnx"]),
    "t5_untied": ("t5_untied", ["model.onnx"]),
}
SAFETENSORS = {  # set -> the safetensors file of its weights
    "t5": "t5",
    "t5_merged": "t5",
    "gpt2_pair": "gpt2",
    "gpt2": "gpt2",
    "gpt2_dynamo": "gpt2",
    "llama": "llama",
}
# the measured operations: (way, set)
DEDUP_SETS = ["t5", "t5_merged", "gpt2_pair", "gpt2", "gpt2_dynamo", "llama", "t5_untied"]
MERGE_SETS = ["t5", "gpt2_pair"]
IR_SETS = ["t5", "t5_merged", "gpt2_pair", "t5_untied"]
# reuse cases: label -> (set, model files or None for the whole set)
REUSE = {
    "t5 (3 files)": ("t5", None),
    "t5 encoder": ("t5", ["encoder_model.onnx"]),
    "t5 decoder": ("t5", ["decoder_model.onnx"]),
    "t5 decoder-with-past": ("t5", ["decoder_with_past_model.onnx"]),
    "gpt2 legacy decoder": ("gpt2_pair", ["decoder_model.onnx"]),
    "gpt2 optimum default": ("gpt2", None),
    "gpt2 dynamo": ("gpt2_dynamo", None),
    "llama optimum default": ("llama", None),
}
WAYS = ["onnx-light", "merge_decoders", "onnx-ir", "onnx-ir raised"]


# -- exports ----------------------------------------------------------------------


def _perturb(model, seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))


def _t5():
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8, vocab_size=32128)
    model = T5ForConditionalGeneration(cfg).eval()
    _perturb(model, 1)
    return model


def _gpt2():
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=768, n_head=12, vocab_size=50257))
    model.eval()
    _perturb(model, 2)
    return model


def _llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=8,
        vocab_size=32000,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).eval()
    _perturb(model, 3)
    return model


def export_all(workdir: str) -> dict:
    """Export every set not yet in ``workdir/src``; returns {step: seconds}."""
    import copy
    from pathlib import Path

    import torch
    from optimum.exporters.onnx import onnx_export_from_model
    from optimum.exporters.onnx.convert import export_models
    from optimum.exporters.onnx.model_configs import GPT2OnnxConfig
    from optimum.onnx import merge_decoders

    src, st = os.path.join(workdir, "src"), os.path.join(workdir, "st")
    times = {}

    def done(name):
        return os.path.exists(os.path.join(src, name, ".done"))

    def mark(name, t0):
        open(os.path.join(src, name, ".done"), "w").close()
        times[name] = time.perf_counter() - t0

    def safetensors(name, model):
        folder = os.path.join(st, name)
        if not os.path.exists(os.path.join(folder, "model.safetensors")):
            model.save_pretrained(folder, safe_serialization=True)

    t5 = _t5()
    safetensors("t5", t5)
    if not done("t5"):
        t0 = time.perf_counter()
        onnx_export_from_model(
            t5, os.path.join(src, "t5"), no_post_process=True, do_validation=False
        )
        mark("t5", t0)
    if not done("t5_merged"):
        t0 = time.perf_counter()
        folder = os.path.join(src, "t5_merged")
        os.makedirs(folder, exist_ok=True)
        for name in SETS["t5"][1]:
            if not os.path.exists(os.path.join(folder, name)):
                os.link(os.path.join(src, "t5", name), os.path.join(folder, name))
        merge_decoders(
            os.path.join(src, "t5", "decoder_model.onnx"),
            os.path.join(src, "t5", "decoder_with_past_model.onnx"),
            save_path=os.path.join(folder, "decoder_model_merged.onnx"),
            strict=False,
        )
        mark("t5_merged", t0)
    if not done("t5_untied"):
        t0 = time.perf_counter()
        untied = _t5()  # the same weights; not the exported model (optimum patched it)
        untied.encoder.embed_tokens = copy.deepcopy(untied.shared)
        untied.decoder.embed_tokens = copy.deepcopy(untied.shared)

        class Seq2Seq(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, decoder_input_ids):
                return self.m(
                    input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False
                ).logits

        folder = os.path.join(src, "t5_untied")
        os.makedirs(folder, exist_ok=True)
        ids = torch.randint(0, 1000, (1, 8), generator=torch.Generator().manual_seed(0))
        torch.onnx.export(
            Seq2Seq(untied),
            (ids, ids[:, :4]),
            os.path.join(folder, "model.onnx"),
            input_names=["input_ids", "decoder_input_ids"],
            output_names=["logits"],
            dynamo=True,
            external_data=True,
        )
        mark("t5_untied", t0)
    del t5

    gpt2 = _gpt2()
    safetensors("gpt2", gpt2)
    if not done("gpt2_pair"):
        t0 = time.perf_counter()
        # optimum-onnx 0.1.0 exports decoders as one model: the old split, by hand
        config = gpt2.config
        no_past = GPT2OnnxConfig(
            config, task="text-generation", use_past=True, use_past_in_inputs=False
        )
        with_past = GPT2OnnxConfig(
            config, task="text-generation", use_past=True, use_past_in_inputs=True
        )
        export_models(
            {"decoder_model": (gpt2, no_past), "decoder_with_past_model": (gpt2, with_past)},
            Path(src, "gpt2_pair"),
        )
        mark("gpt2_pair", t0)
    if not done("gpt2"):
        t0 = time.perf_counter()
        onnx_export_from_model(gpt2, os.path.join(src, "gpt2"), do_validation=False)
        mark("gpt2", t0)
    if not done("gpt2_dynamo"):
        t0 = time.perf_counter()

        class Logits(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(
                    input_ids=input_ids, attention_mask=attention_mask, use_cache=False
                ).logits

        folder = os.path.join(src, "gpt2_dynamo")
        os.makedirs(folder, exist_ok=True)
        ids = torch.randint(0, 1000, (1, 8), generator=torch.Generator().manual_seed(0))
        batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
        torch.onnx.export(
            Logits(gpt2),
            (ids, torch.ones_like(ids)),
            os.path.join(folder, "model.onnx"),
            input_names=["input_ids", "attention_mask"],
            output_names=["logits"],
            dynamic_shapes={
                "input_ids": {0: batch, 1: seq},
                "attention_mask": {0: batch, 1: seq},
            },
            dynamo=True,
            external_data=True,
        )
        mark("gpt2_dynamo", t0)
    del gpt2

    llama = _llama()
    safetensors("llama", llama)
    if not done("llama"):
        t0 = time.perf_counter()
        onnx_export_from_model(llama, os.path.join(src, "llama"), do_validation=False)
        mark("llama", t0)
    record = os.path.join(src, "export_seconds.json")  # kept for the next runs' report
    if os.path.exists(record):
        with open(record) as f:
            times = {**json.load(f), **times}
    with open(record, "w") as f:
        json.dump(times, f)
    return times


# -- files ------------------------------------------------------------------------


def set_paths(workdir: str, name: str, files=None) -> list[str]:
    folder, names = SETS[name]
    return [os.path.join(workdir, "src", folder, f) for f in (files or names)]


def model_files(onnx_path: str) -> list[str]:
    """The .onnx file and the external data files it references."""
    import onnx

    model = onnx.load(onnx_path, load_external_data=False)
    folder = os.path.dirname(onnx_path)
    out = [onnx_path]
    from onnx.external_data_helper import _get_all_tensors

    for t in _get_all_tensors(model):
        for e in t.external_data:
            if e.key == "location":
                p = os.path.join(folder, e.value)
                if p not in out:
                    out.append(p)
    return out


def disk_bytes(onnx_paths: list[str], skip=()) -> int:
    """Bytes of the models and the data files they reference, each file once."""
    files = []
    for p in onnx_paths:
        for f in model_files(p):
            if f not in files and os.path.basename(f) not in skip:
                files.append(f)
    return sum(os.path.getsize(f) for f in files)


# -- measurements (each in a fresh process) ---------------------------------------


def _fresh(folder: str) -> str:
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    return folder


def out_folder(workdir: str, way: str, label: str) -> str:
    return os.path.join(workdir, "out", way.replace(" ", "_"), label.replace(" ", "_"))


def op_onnx_light(workdir, label, name, files=None, reuse=None):
    from benchmarks.harness import PeakMemory
    from onnx_light.onnx import deduplicate_external_data

    srcs = set_paths(workdir, name, files)
    way = "reuse" if reuse else "onnx-light"
    out = _fresh(out_folder(workdir, way, label))
    dsts = [os.path.join(out, os.path.basename(p)) for p in srcs]
    reused = []
    if reuse:
        st = os.path.join(workdir, "st", reuse, "model.safetensors")
        shutil.copyfile(st, os.path.join(out, "model.safetensors"))
        reused = [os.path.join(out, "model.safetensors")]
    with PeakMemory() as m:
        r = deduplicate_external_data(srcs, dsts, "weights.data", reuse=reused)
    return (
        m,
        dsts,
        {
            "bytes_pointing_reused": sum(_bytes_in(d, "model.safetensors") for d in dsts),
            "bytes_before": r.bytes_before,
            "bytes_written": r.bytes_written,
            "bytes_reused": r.bytes_reused,
            "groups": [[(os.path.basename(d), n) for d, n in g] for g in r.groups],
            "transposed": [
                [os.path.basename(a[0]), a[1], os.path.basename(b[0]), b[1], size]
                for a, b, size in r.transposed
            ],
        },
    )


def _bytes_in(onnx_path: str, location: str) -> int:
    """Bytes of the tensors of a model that point into ``location``."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    total = 0
    for t in _get_all_tensors(onnx.load(onnx_path, load_external_data=False)):
        e = {x.key: x.value for x in t.external_data}
        if e.get("location") == location:
            total += int(e["length"])
    return total


def op_merge(workdir, label, name):
    from optimum.onnx import merge_decoders

    from benchmarks.harness import PeakMemory

    srcs = set_paths(workdir, name)
    out = _fresh(out_folder(workdir, "merge_decoders", label))
    dec = [p for p in srcs if os.path.basename(p) == "decoder_model.onnx"][0]
    past = [p for p in srcs if os.path.basename(p) == "decoder_with_past_model.onnx"][0]
    merged = os.path.join(out, "decoder_model_merged.onnx")
    others = [p for p in srcs if p not in (dec, past)]
    for p in others:  # the encoder stays beside the merged decoder (not measured)
        os.link(p, os.path.join(out, os.path.basename(p)))
    with PeakMemory() as m:
        merge_decoders(dec, past, save_path=merged, strict=name.startswith("gpt2"))
    return m, [os.path.join(out, os.path.basename(p)) for p in others] + [merged], {}


def op_ir(workdir, label, name, raised: bool):
    import onnx_ir as ir
    from onnx_ir.passes.common import (
        DeduplicateHashedInitializersPass,
        DeduplicateInitializersPass,
    )

    from benchmarks.harness import PeakMemory

    srcs = set_paths(workdir, name)
    way = "onnx-ir raised" if raised else "onnx-ir"
    out = _fresh(out_folder(workdir, way, label))
    dsts = [os.path.join(out, os.path.basename(p)) for p in srcs]
    removed = 0
    with PeakMemory() as m:
        for src, dst in zip(srcs, dsts, strict=True):
            model = ir.load(src)
            before = sum(len(g.initializers) for g in model.graphs())
            limit = 2**62 if raised else 1024
            DeduplicateInitializersPass(size_limit=limit)(model)
            DeduplicateHashedInitializersPass()(model)
            removed += before - sum(len(g.initializers) for g in model.graphs())
            ir.save(model, dst, external_data=os.path.basename(dst) + ".data")
            del model
    return m, dsts, {"initializers_removed": removed}


def worker(args: list[str]) -> dict:
    import onnx  # noqa: F401  (imports before measuring)
    import onnx_ir  # noqa: F401
    import optimum.onnx  # noqa: F401

    import onnx_light.onnx  # noqa: F401

    op, workdir, label = args[:3]
    if op == "onnx-light":
        m, dsts, extra = op_onnx_light(workdir, label, label)
    elif op == "reuse":
        name, files = REUSE[label]
        m, dsts, extra = op_onnx_light(workdir, label, name, files, reuse=SAFETENSORS[name])
    elif op == "merge_decoders":
        m, dsts, extra = op_merge(workdir, label, label)
    elif op in ("onnx-ir", "onnx-ir raised"):
        m, dsts, extra = op_ir(workdir, label, label, op == "onnx-ir raised")
    else:
        raise ValueError(op)
    name = REUSE[label][0] if op == "reuse" else label
    files = REUSE[label][1] if op == "reuse" else None
    return {
        "op": op,
        "label": label,
        "seconds": m.seconds,
        "peak_growth": m.growth,
        "peak": m.peak,
        "exact": m.exact,
        "disk_before": disk_bytes(set_paths(workdir, name, files)),
        "disk_after": disk_bytes(dsts, skip=("model.safetensors",)),
        "outputs": dsts,
        **extra,
    }


# -- checks -----------------------------------------------------------------------

DIMS = {"past": 5, "encoder": 7, "seq": 4}


def _dim(d, has_past: bool) -> int:
    if isinstance(d, int):
        return d
    if d is None:
        return DIMS["seq"]
    if "+" in d:
        return sum(_dim(x.strip(), has_past) for x in d.split("+"))
    if "batch" in d:
        return 1
    if "past" in d:
        return DIMS["past"] if has_past else 0
    if "encoder" in d:
        return DIMS["encoder"]
    return DIMS["seq"]


def feeds(sess, use_cache: bool | None = None) -> dict:
    """Fixed inputs from a session's input metadata (past key values of the right shapes)."""
    rng = np.random.default_rng(0)
    inputs = sess.get_inputs()
    has_past = any("past" in i.name for i in inputs) and use_cache is not False
    out = {}
    for i in inputs:
        shape = [_dim(d, has_past) for d in i.shape]
        if i.name == "use_cache_branch":
            out[i.name] = np.array([bool(use_cache)])
        elif i.type == "tensor(int64)" and "mask" in i.name:
            out[i.name] = np.ones(shape, dtype=np.int64)
        elif i.name == "position_ids":
            start = DIMS["past"] if has_past else 0
            out[i.name] = np.broadcast_to(
                np.arange(start, start + shape[-1], dtype=np.int64), shape
            ).copy()
        elif i.type == "tensor(int64)":
            out[i.name] = rng.integers(0, 1000, shape, dtype=np.int64)
        elif i.type == "tensor(float)":
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            raise TypeError(f"{i.name}: {i.type}")
    return out


def _session(path: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def compare(src: str, dst: str, use_cache: bool | None) -> str:
    """Run both on the source's fixed inputs (plus what only ``dst`` takes: a merged
    decoder's ``use_cache_branch`` and, for its no-past branch, empty past key values)."""
    a, b = _session(src), _session(dst)
    f = {**feeds(b, use_cache), **feeds(a, use_cache)}
    got = {}
    for sess, key in ((a, "want"), (b, "got")):
        names = [i.name for i in sess.get_inputs()]
        outs = sess.run(None, {k: f[k] for k in names})
        got[key] = dict(zip([o.name for o in sess.get_outputs()], outs, strict=True))
    common = [k for k in got["want"] if k in got["got"]]
    same = all(np.array_equal(got["want"][k], got["got"][k]) for k in common)
    return f"{'identical' if same else 'DIFFERENT'} ({len(common)} outputs)"


def check(workdir: str, op: str, label: str, outputs: list[str]) -> dict:
    """onnxruntime outputs equal to the sources', checker, onnx.load, onnx_ir.load."""
    import onnx
    import onnx_ir

    name, files = REUSE[label] if op == "reuse" else (label, None)
    srcs = {os.path.basename(p): p for p in set_paths(workdir, name, files)}
    result = {"ort": [], "checker": [], "onnx.load": [], "onnx_ir.load": []}
    for dst in outputs:
        base = os.path.basename(dst)
        for key, fn in (
            ("checker", lambda p: onnx.checker.check_model(p)),
            ("onnx.load", onnx.load),
            ("onnx_ir.load", onnx_ir.load),
        ):
            try:
                fn(dst)
                result[key].append([base, "ok"])
            except Exception as e:  # reported, not raised
                result[key].append([base, f"{type(e).__name__}: {str(e)[:200]}"])
        pairs = []
        if base == "decoder_model_merged.onnx" and base not in srcs:
            # optimum's merge: each branch against the model it came from
            folder = os.path.dirname(next(iter(srcs.values())))
            pairs = [
                (os.path.join(folder, "decoder_with_past_model.onnx"), True, "with past"),
                (os.path.join(folder, "decoder_model.onnx"), False, "no past"),
            ]
        else:
            merged = base == "decoder_model_merged.onnx"
            pairs = [(srcs[base], True, "with past")] if merged else [(srcs[base], None, "")]
            if merged:
                pairs.append((srcs[base], False, "no past"))
        for src, use_cache, branch in pairs:
            try:
                verdict = compare(src, dst, use_cache)
            except Exception as e:
                verdict = f"{type(e).__name__}: {str(e)[:200]}"
            result["ort"].append([base + (f" [{branch}]" if branch else ""), verdict])
    return result


def unique_bytes(workdir: str, name: str) -> dict:
    """Tensor bytes of a set's initializers of at least 1024 bytes, all and distinct."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    seen, total, distinct = set(), 0, 0
    for path in set_paths(workdir, name):
        model = onnx.load(path)
        for t in _get_all_tensors(model):
            data = onnx.numpy_helper.to_array(t).tobytes()
            if len(data) < 1024:
                continue
            total += len(data)
            key = hashlib.sha256(data).digest()
            if key not in seen:
                seen.add(key)
                distinct += len(data)
        del model
    return {"tensor_bytes": total, "unique_bytes": distinct}


# -- driver -----------------------------------------------------------------------


def spawn(args: list[str]) -> dict:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", *args],
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        return {"error": (proc.stderr or proc.stdout)[-1500:]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default="/var/tmp/dedup")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs="+")
    args = parser.parse_args()
    if args.worker:
        kind = args.worker[0]
        if kind == "export":
            out = export_all(args.worker[1])
        elif kind == "check":
            op, workdir, label = args.worker[1:4]
            out = check(workdir, op, label, json.loads(args.worker[4]))
        elif kind == "unique":
            out = unique_bytes(args.worker[1], args.worker[2])
        else:
            out = worker(args.worker)
        print(json.dumps(out))
        return

    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    t0 = time.perf_counter()
    exported = spawn(["export", workdir])
    if "error" in exported:
        sys.exit("export failed:\n" + exported["error"])
    print(f"exports: {exported} ({time.perf_counter() - t0:.0f} s)", flush=True)

    sets = {}
    for name in SETS:
        u = spawn(["unique", workdir, name])
        sets[name] = {
            "files": SETS[name][1],
            "disk": disk_bytes(set_paths(workdir, name)),
            "file_bytes": {f: disk_bytes(set_paths(workdir, name, [f])) for f in SETS[name][1]},
            **u,
        }
        print(name, sets[name], flush=True)

    ops = [("onnx-light", s) for s in DEDUP_SETS]
    ops += [("merge_decoders", s) for s in MERGE_SETS]
    ops += [(w, s) for w in ("onnx-ir", "onnx-ir raised") for s in IR_SETS]
    ops += [("reuse", label) for label in REUSE]
    rows, checks = [], {}
    load = [os.getloadavg()[0]]
    rng = np.random.default_rng(0)
    for r in range(args.rounds):
        order = list(ops) if r == 0 else [ops[i] for i in rng.permutation(len(ops))]
        for op, label in order:
            res = spawn([op, workdir, label])
            res.update(op=op, label=label, round=r + 1)
            rows.append(res)
            if "error" in res:
                print(f"round {r + 1} {op} {label}: ERROR {res['error'][-400:]}", flush=True)
                continue
            print(
                f"round {r + 1} {op:15s} {label:22s} {res['seconds']:7.2f} s "
                f"peak +{res['peak_growth'] / MIB:7.0f} MiB (abs {res['peak'] / MIB:5.0f}) "
                f"{res['disk_before'] / MB:6.0f} -> {res['disk_after'] / MB:6.0f} MB",
                flush=True,
            )
            if (op, label) not in checks:  # the first round's outputs, checked at once
                checks[(op, label)] = spawn(
                    ["check", op, workdir, label, json.dumps(res["outputs"])]
                )
                print("   check:", checks[(op, label)], flush=True)
    load.append(os.getloadavg()[0])
    text = report(workdir, args.rounds, exported, sets, rows, checks, load)
    write_report(report_path("dedup_proof.md"), text, rows, CSV_FIELDS)


# -- report -----------------------------------------------------------------------


def _mb(n) -> str:
    return f"{n / MB:,.1f}"


def _gib(values) -> str:
    if not values:
        return "-"
    v = [x / 2**30 for x in values]
    if len(v) == 1:
        return f"{v[0]:.2f}"
    return f"{min(v):.2f} ({max(v):.2f})"


# the columns of dedup_proof.csv: every round of every measurement
CSV_FIELDS = [
    "op", "label", "round", "seconds", "peak_growth", "peak", "exact", "disk_before",
    "disk_after", "bytes_before", "bytes_written", "bytes_reused", "bytes_pointing_reused",
    "initializers_removed",
    "error",
]  # fmt: skip


def report(workdir, rounds, exported, sets, rows, checks, load) -> str:
    """The Markdown report (the rows go to the CSV beside it)."""
    from benchmarks.harness import describe_machine

    def of(op, label):
        return [r for r in rows if r["op"] == op and r["label"] == label and "error" not in r]

    def versions():
        import importlib.metadata as md

        names = ["torch", "transformers", "optimum", "optimum-onnx", "onnxruntime", "onnx"]
        names += ["onnx-ir", "onnxscript", "safetensors", "onnx-light"]
        out = []
        for n in names:
            try:
                out.append(f"{n} {md.version(n)}")
            except md.PackageNotFoundError:
                out.append(f"{n} missing")
        return ", ".join(out)

    L = []
    L.append("# Weights stored once on real models\n")
    L.append(
        f"Generated by `benchmarks/proofs/dedup_proof.py` on "
        f"{datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}.\n"
    )
    L.append(f"- Machine: {describe_machine()}")
    L.append(f"- Versions: {versions()}")
    L.append(
        f"- Rounds: {rounds} per measurement, each in a fresh process, interleaved "
        "(round 1 in order, then shuffled). Times: min (median, max) in seconds; peak RSS: "
        "the kernel's VmHWM, reset before the operation, min (max) over the rounds in GiB: "
        "growth during the operation, and the process's absolute peak (which includes what "
        "the imports of onnx, onnx-ir, optimum.onnx and onnx-light hold, about 0.29 GiB). "
        "Page cache warm (the sources were just written or read). Load average (1 min) "
        f"{load[0]:.1f} before the measurements, {load[1]:.1f} after: the machine is shared, "
        "so the times spread; the bytes and the peaks do not."
    )
    L.append(
        "- Bytes on disk: the .onnx files and the data files they reference (apparent "
        "sizes, MB = 10^6 bytes). Sources are optimum/torch exports of random "
        "weights, every parameter perturbed (seeded).\n"
    )
    spent = ", ".join(f"{k} {v:.0f}" for k, v in exported.items())
    L.append(f"Export times (s, when the models were made): {spent}.\n")

    L.append("## The sets\n")
    L.append("| set | models | bytes on disk (MB) | tensor bytes (MB) | unique (MB) | copies |")
    L.append("|---|---|---:|---:|---:|---:|")
    for name, s in sets.items():
        copies = 1 - s["unique_bytes"] / s["tensor_bytes"] if s["tensor_bytes"] else 0
        per = ", ".join(f"{f.removesuffix('.onnx')} {_mb(b)}" for f, b in s["file_bytes"].items())
        L.append(
            f"| {name} | {per} | {_mb(s['disk'])} | {_mb(s['tensor_bytes'])} | "
            f"{_mb(s['unique_bytes'])} | {copies:.0%} |"
        )
    L.append(
        "\n`unique`: distinct byte strings (SHA-256) among the initializers of at least "
        "1024 bytes, counted by loading every model with onnx; `copies`: the share of tensor "
        "bytes that repeat another.\n"
    )

    L.append("## Bytes on disk, before and after\n")
    L.append("| set | before (MB) | unique (MB) | " + " | ".join(f"{w} (MB)" for w in WAYS) + " |")
    L.append("|---|---:|---:|" + "---:|" * len(WAYS))
    for name in SETS:
        cells = []
        for w in WAYS:
            rs = of(w, name)
            cells.append(_mb(rs[-1]["disk_after"]) if rs else "-")
        L.append(
            f"| {name} | {_mb(sets[name]['disk'])} | {_mb(sets[name]['unique_bytes'])} | "
            + " | ".join(cells)
            + " |"
        )
    L.append(
        "\n`merge_decoders`: the merged decoder (with, for T5, the encoder beside it); "
        "`onnx-ir`: each model saved on its own with its data file, after "
        "`DeduplicateInitializersPass()` (size_limit 1024 elements) and "
        "`DeduplicateHashedInitializersPass()`; `onnx-ir raised`: size_limit 2^62. "
        "onnx-light's weights file counts its 4096-byte alignment padding.\n"
    )

    L.append("## Time and peak RSS\n")
    L.append("| way | set | seconds | peak growth (GiB) | absolute peak (GiB) | result |")
    L.append("|---|---|---:|---:|---:|---|")
    for w in WAYS:
        for name in SETS:
            rs = of(w, name)
            if not rs:
                errs = [r for r in rows if r["op"] == w and r["label"] == name]
                if errs:
                    L.append(f"| {w} | {name} | failed | | | {errs[0]['error'][-200:]!r} |")
                continue
            r0 = rs[-1]
            if w == "onnx-light":
                extra = (
                    f"{_mb(r0['bytes_before'])} MB of tensors -> {_mb(r0['bytes_written'])} MB "
                    f"written, {len(r0['groups'])} groups"
                )
            elif w.startswith("onnx-ir"):
                extra = f"{r0['initializers_removed']} initializers removed"
            else:
                extra = ""
            L.append(
                f"| {w} | {name} | {spread([r['seconds'] for r in rs])} | "
                f"{_gib([r['peak_growth'] for r in rs])} | {_gib([r['peak'] for r in rs])} | "
                f"{extra} |"
            )

    L.append("\n## Checks\n")
    L.append(
        "onnxruntime (CPU, one thread) on fixed inputs, every output `np.array_equal` to the "
        "source's; `onnx.checker.check_model(path)`; `onnx.load(path)`; `onnx_ir.load(path)`.\n"
    )
    L.append("| way | set | onnxruntime | checker | onnx.load | onnx_ir.load |")
    L.append("|---|---|---|---|---|---|")
    bad = []
    for (op, label), c in checks.items():
        if "error" in c:
            L.append(f"| {op} | {label} | check failed: {c['error'][-200:]!r} | | | |")
            continue
        cells = []
        for key in ("ort", "checker", "onnx.load", "onnx_ir.load"):
            ok = [v for _, v in c[key] if v == "ok" or v.startswith("identical")]
            cells.append(f"{len(ok)}/{len(c[key])} " + ("ok" if len(ok) == len(c[key]) else "FAIL"))
            bad += [(op, label, key, m, v) for m, v in c[key] if v not in ok]
        L.append(f"| {op} | {label} | " + " | ".join(cells) + " |")
    if bad:
        L.append("\nFailures:\n")
        for op, label, key, m, v in bad:
            L.append(f"- {op} / {label} / {key} / {m}: {v}")
    L.append("")

    L.append("## Transposed twins (not shared: a graph change would be needed)\n")
    L.append("| set | tensor | its transposed copy | size (MB) | share of the copy's model file |")
    L.append("|---|---|---|---:|---:|")
    for name in DEDUP_SETS:
        rs = of("onnx-light", name)
        if not rs:
            continue
        for model_a, a, model_b, b, size in rs[-1]["transposed"]:
            share = size / sets[name]["file_bytes"][model_b]
            L.append(
                f"| {name} | {model_a}: `{a}` | {model_b}: `{b}` | {_mb(size)} | {share:.0%} |"
            )
    L.append("")

    L.append("## Tied weights duplicated inside one model\n")
    L.append("| set | model | tensors stored once | size (MB) |")
    L.append("|---|---|---|---:|")
    found = False
    for name in DEDUP_SETS:
        rs = of("onnx-light", name)
        if not rs:
            continue
        for g in rs[-1]["groups"]:
            models = [m for m, _ in g]
            for model in dict.fromkeys(models):
                names = [n for m, n in g if m == model]
                if len(names) > 1:
                    found = True
                    size = _group_size(workdir, name, model, names[0])
                    L.append(
                        f"| {name} | {model} | {', '.join(f'`{n}`' for n in names)} | {_mb(size)} |"
                    )
    if not found:
        L.append("| (none found) | | | |")
    L.append(
        "\noptimum's torch.onnx (TorchScript) exports merge equal initializers, and "
        "`merge_decoders` merges equal ones across its two branches: the duplicate above is "
        "from the dynamo exporter, given a model whose embeddings were untied copies.\n"
    )

    L.append("## Reuse of model.safetensors\n")
    L.append(
        "`deduplicate_external_data(..., reuse=[model.safetensors])`, the file "
        "(`save_pretrained(safe_serialization=True)` of the same weights) copied into the "
        "destination folder first. `pointing into model.safetensors`: the tensors of the "
        "models written that now read their bytes from it, each model's copy counted; "
        "`share`: that over the tensor bytes; `bytes_reused`: `DedupResult.bytes_reused` "
        "(each reused range once).\n"
    )
    L.append(
        "| models | tensor bytes (MB) | pointing into model.safetensors (MB) | share | "
        "bytes_reused (MB) | written (MB) | seconds |"
    )
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    for label in REUSE:
        rs = of("reuse", label)
        if not rs:
            L.append(f"| {label} | failed | | | | |")
            continue
        r0 = rs[-1]
        share = r0["bytes_pointing_reused"] / r0["bytes_before"] if r0["bytes_before"] else 0
        L.append(
            f"| {label} | {_mb(r0['bytes_before'])} | {_mb(r0['bytes_pointing_reused'])} | "
            f"{share:.0%} | {_mb(r0['bytes_reused'])} | {_mb(r0['bytes_written'])} | "
            f"{spread([r['seconds'] for r in rs])} |"
        )
    L.append("")
    return "\n".join(L)


def _group_size(workdir, name, model, tensor) -> int:
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    path = [p for p in set_paths(workdir, name) if os.path.basename(p) == model][0]
    for t in _get_all_tensors(onnx.load(path, load_external_data=False)):
        if t.name == tensor:
            e = {x.key: x.value for x in t.external_data}
            return int(e["length"]) if "length" in e else len(t.raw_data)
    return 0


if __name__ == "__main__":
    main()
