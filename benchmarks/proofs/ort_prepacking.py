"""What onnxruntime's prepacking costs and what else lowers a session's memory spike.

What it measures
----------------
A Llama-like decoder made here from a configuration with random weights (no
model can be downloaded on the machines this project runs on; the weights'
values change nothing in what is measured): TinyLlama-1.1B's shapes (hidden
size 2048, 5632 intermediate, 32 heads, 4 key-value heads, 32000 tokens)
with 4 of its 22 layers, about 1.3 GiB of float32 weights, exported by
optimum's ``main_export`` (task ``text-generation-with-past``, external data
forced as optimum writes it above 2 GiB), and an int4 copy of it made by
onnxruntime's ``MatMulNBitsQuantizer`` (4 bits, blocks of 32, symmetric:
every ``MatMul`` with a constant weight becomes ``MatMulNBits``).

For each precision, the session is created in each of these ways (the
*cases*), one fresh process per measurement:

* ``default``: onnxruntime's default options;
* ``no prepacking``: ``session.disable_prepacking=1``;
* ``device allocator``: ``session.use_device_allocator_for_initializers=1``
  (initializers allocated with malloc instead of the arena);
* ``no arena``: ``SessionOptions.enable_cpu_mem_arena = False``;
* ``env allocator``: an arena-less CPU allocator registered in the
  environment (``onnxruntime.create_and_register_allocator``) and
  ``session.use_env_allocators=1``;
* ``prepacked file``: the model saved once by onnxruntime with its prepacked
  weights in external data (``optimized_model_filepath`` with
  ``session.save_external_prepacked_constant_initializers=1`` and
  ``session.optimized_model_external_initializers_file_name``), then that
  saved model loaded with the default options;
* ``aligned``: the export re-laid out by onnx-light
  (:func:`onnx_light.onnx.align_external_data_streaming`, alignment 65536),
  default options; ``aligned, no prepacking``: the same with prepacking off
  (the loading how-to's recipe before this report).

Each measurement reports: the session's creation time; the growth of the
kernel's peak RSS (``VmHWM`` reset through ``/proc/self/clear_refs``) and the
peaks of ``RssAnon`` (private memory) and ``RssFile`` (mapped file pages)
sampled every 2 ms from ``/proc/self/status`` on a thread during the creation;
then the steady time of a decode step (one new token after 64 cached ones,
batch 1) and of a prefill (64 tokens), each the median of several runs after
one warm-up run; the memory after the runs; and the logits, compared with the
``default`` case's of the same precision (max abs difference). Rounds are
interleaved: each round measures every case once, in a new seeded order; the
files of a case are read once before it (page cache warm).

How to run it
-------------
By hand, in a venv of its own (torch, transformers and optimum are not
dependencies of onnx-light, and ``make`` does not run it)::

    python3 -m venv /tmp/ortp
    /tmp/ortp/bin/pip install torch==2.13.0   # the CPU build: see ort_alignment.py
    /tmp/ortp/bin/pip install onnxruntime==1.32.0 onnx==1.23.2 onnx-ir==1.1.0 \\
        transformers optimum optimum-onnx onnxscript
    /tmp/ortp/bin/pip install -e .
    /tmp/ortp/bin/python benchmarks/proofs/ort_prepacking.py --workdir /var/tmp/ortpack --rounds 3

It needs about 10 GiB of disk in ``--workdir`` (kept: a second run reuses the
models and their prepacked and aligned copies) and 8 GiB of RAM; making the
models takes a few minutes, each round 8 to 10 on 2 cores (the int4 sessions
without prepacking take most of it). Results go to
``benchmarks/proofs/results/ort_prepacking.md`` and ``.csv`` (``--output``
changes the name); ``--precisions fp32,int4`` keeps a subset.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout: benchmarks.*

from benchmarks.text import measured_commit, report_path, write_report  # noqa: E402

MiB = 2**20
GiB = 2**30
PAST = 64  # cached tokens before the decode step
PROMPT = 64  # tokens of the prefill
DECODE_RUNS = 5  # timed decode steps per process (after one warm-up)
PREFILL_RUNS = 2  # timed prefills per process (after one warm-up)
SAMPLE = 0.002  # seconds between two samples of /proc/self/status
ALIGNMENT = 65536
ALL_CASES = (
    "default",
    "no prepacking",
    "device allocator",
    "no arena",
    "env allocator",
    "prepacked file",
    "aligned",
    "aligned, no prepacking",
)
FEW_CASES = ("default", "no prepacking", "prepacked file")
PRECISIONS = {  # name: (how it is made, the cases measured)
    "fp32": ("optimum's export", ALL_CASES),
    "fp16": ("onnx-light convert of the fp32 export (float32 inputs and outputs)", FEW_CASES),
    "int4": (
        "MatMulNBitsQuantizer: 4 bits, block 32, symmetric, accuracy level 4 "
        "(onnxruntime-genai's builder's defaults on CPU)",
        ALL_CASES,
    ),
    "int4-acc0": (
        "the same with accuracy level 0 (the quantizer's default)",
        FEW_CASES,
    ),
}
LLAMA = dict(  # TinyLlama-1.1B's shapes, 4 of its 22 layers
    vocab_size=32000,
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=4,
    num_attention_heads=32,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    rms_norm_eps=1e-5,
)


# ---------------------------------------------------------------- models


def export_fp32(folder: Path) -> Path:
    """optimum's export of a random Llama (with past), weights as external data."""
    import torch
    from optimum.exporters.onnx import main_export
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    hf_dir = folder / "hf"
    LlamaForCausalLM(LlamaConfig(**LLAMA)).eval().save_pretrained(hf_dir)
    out = folder / "fp32"
    os.environ["FORCE_ONNX_EXTERNAL_DATA"] = "1"  # as optimum writes it above 2 GiB
    try:
        main_export(
            str(hf_dir),
            output=str(out),
            task="text-generation-with-past",
            do_validation=False,
        )
    finally:
        del os.environ["FORCE_ONNX_EXTERNAL_DATA"]
    shutil.rmtree(hf_dir)
    return out / "model.onnx"


def quantize_int4(src: Path, dst: Path, accuracy_level: int) -> Path:
    """onnxruntime's MatMulNBitsQuantizer: 4 bits, blocks of 32, symmetric."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(src))
    quant = MatMulNBitsQuantizer(
        model, bits=4, block_size=32, is_symmetric=True, accuracy_level=accuracy_level
    )
    quant.process()
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(
        quant.model.model,
        str(dst),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx_data",
        size_threshold=1024,
    )
    return dst


def convert_fp16(src: Path, dst: Path) -> Path:
    """onnx-light's float16 conversion, float32 inputs and outputs kept."""
    import onnx_light.onnx as onnxl

    dst.parent.mkdir(parents=True, exist_ok=True)
    onnxl.convert_float_to_float16(src, dst, keep_io_types=True)
    return dst


def save_prepacked(src: Path, dst: Path) -> dict:
    """onnxruntime writes the model with its prepacked weights as external data (once)."""
    import onnxruntime as ort

    from benchmarks.harness import PeakMemory

    dst.parent.mkdir(parents=True, exist_ok=True)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(dst)
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_file_name", dst.name + ".data"
    )
    so.add_session_config_entry(
        "session.optimized_model_external_initializers_min_size_in_bytes", "1024"
    )
    so.add_session_config_entry("session.save_external_prepacked_constant_initializers", "1")
    with PeakMemory() as peak:
        sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    del sess
    return {"seconds": peak.seconds, "peak_growth": peak.growth}


def align(src: Path, dst: Path) -> None:
    import onnx_light.onnx as onnxl

    dst.parent.mkdir(parents=True, exist_ok=True)
    onnxl.align_external_data_streaming(
        src,
        dst,
        dst.name + ".data",
        alignment=ALIGNMENT,
        options=onnxl.WriteOptions(size_threshold=1024),
    )


def files_of(onnx_path: Path) -> list[Path]:
    """The .onnx and the weights files it names."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors

    proto = onnx.load(str(onnx_path), load_external_data=False)
    names = set()
    for t in _get_all_tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            names.update(e.value for e in t.external_data if e.key == "location")
    return [onnx_path, *sorted(onnx_path.parent / n for n in names)]


def matrix_weights(onnx_path: Path) -> str:
    """The element types of the constant weights of the matrix nodes (``MatMul``, ``Gemm``,
    ``MatMulNBits``...), counted: ``float16 x29``."""
    import collections

    import onnx
    from onnx.helper import tensor_dtype_to_np_dtype

    proto = onnx.load(str(onnx_path), load_external_data=False)
    types = {t.name: t.data_type for t in proto.graph.initializer}
    found = collections.Counter(
        tensor_dtype_to_np_dtype(types[name]).name
        for node in proto.graph.node
        if "MatMul" in node.op_type or "Gemm" in node.op_type
        for name in node.input[1:2]
        if name in types
    )
    return ", ".join(f"{k} x{v}" for k, v in sorted(found.items()))


def make_feeds(onnx_path: Path, npz: Path) -> None:
    """Inputs of a decode step (1 token after PAST cached ones) and of a prefill (PROMPT
    tokens), batch 1, from the graph's inputs; the cache holds seeded random values."""
    import numpy as np
    import onnx

    proto = onnx.load(str(onnx_path), load_external_data=False)
    rng = np.random.default_rng(0)
    feeds = {}
    for step, new, past in (("decode", 1, PAST), ("prefill", PROMPT, 0)):
        feeds[f"{step}/input_ids"] = rng.integers(0, 32000, size=(1, new)).astype(np.int64)
        feeds[f"{step}/attention_mask"] = np.ones((1, past + new), dtype=np.int64)
        feeds[f"{step}/position_ids"] = np.arange(past, past + new, dtype=np.int64)[None]
        for inp in proto.graph.input:
            if inp.name.startswith("past_key_values"):
                dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
                shape = (1, dims[1], past, dims[3])
                feeds[f"{step}/{inp.name}"] = rng.standard_normal(shape).astype(np.float32)
    np.savez(npz, **feeds)


# ---------------------------------------------------------------- one measurement


def _options(case: str):
    """The session options of a case (the env allocator is registered here too)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if "no prepacking" in case:
        so.add_session_config_entry("session.disable_prepacking", "1")
    elif case == "device allocator":
        so.add_session_config_entry("session.use_device_allocator_for_initializers", "1")
    elif case == "no arena":
        so.enable_cpu_mem_arena = False
    elif case == "env allocator":
        info = ort.OrtMemoryInfo(
            "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
        )
        # arena_extend_strategy 1: kSameAsRequested (the default doubles each extension)
        ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1))
        so.add_session_config_entry("session.use_env_allocators", "1")
    return so


def _timed(sess, feeds: dict, runs: int) -> tuple[list[float], dict]:
    """One warm-up run, then ``runs`` timed ones; returns their seconds and the outputs."""
    outputs = sess.run(None, feeds)
    seconds = []
    for _ in range(runs):
        t = time.perf_counter()
        sess.run(None, feeds)
        seconds.append(time.perf_counter() - t)
    return seconds, outputs


def worker(precision: str, case: str, onnx_path: str, feeds_npz: str, out_npz: str) -> dict:
    """One session creation in this (fresh) process, then the timed runs."""
    import numpy as np
    import onnxruntime as ort

    from benchmarks.harness import PeakMemory, RssTimeline, read_status

    data = dict(np.load(feeds_npz))
    steps = {
        s: {k.split("/", 1)[1]: v for k, v in data.items() if k.startswith(s + "/")}
        for s in ("decode", "prefill")
    }
    so = _options(case)
    before = read_status()
    with PeakMemory() as peak, RssTimeline(interval=SAMPLE) as tl:
        sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
    created = read_status()
    names = [o.name for o in sess.get_outputs()]
    decode, out_decode = _timed(sess, steps["decode"], DECODE_RUNS)
    prefill, out_prefill = _timed(sess, steps["prefill"], PREFILL_RUNS)
    after = read_status()
    np.savez(
        out_npz,
        decode=out_decode[names.index("logits")],
        prefill=out_prefill[names.index("logits")],
    )
    return {
        "create_seconds": peak.seconds,
        "peak_growth": peak.growth,
        "peak_exact": peak.exact,
        "anon_peak_growth": tl.peak("anon") - before["RssAnon"],
        "file_peak_growth": tl.peak("file") - before["RssFile"],
        "samples": len(tl.samples),
        "anon_growth": created["RssAnon"] - before["RssAnon"],
        "file_growth": created["RssFile"] - before["RssFile"],
        "anon_growth_run": after["RssAnon"] - before["RssAnon"],
        "file_growth_run": after["RssFile"] - before["RssFile"],
        "decode_seconds": statistics.median(decode),
        "prefill_seconds": statistics.median(prefill),
    }


def _warm(files: list[Path]) -> None:
    """Read every file once so that the page cache holds it."""
    for p in files:
        with open(p, "rb") as f:
            while f.read(64 * MiB):
                pass


def measure(precision: str, case: str, onnx_path: Path, feeds: Path, out: Path) -> dict:
    """One measurement in a fresh process (``--worker``)."""
    _warm(files_of(onnx_path))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", precision, case]
    cmd += [str(onnx_path), str(feeds), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- the models, once


def _saved_prepacked(src: Path, dst: Path) -> dict:
    """``save_prepacked`` in a fresh process (its memory is measured); its result is kept
    beside the saved model, so that a second run reuses both."""
    record = dst.parent / "saved.json"
    if not record.exists():
        cmd = [sys.executable, str(Path(__file__).resolve()), "--save-prepacked"]
        proc = subprocess.run(cmd + [str(src), str(dst)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"saving {dst} failed:\n{proc.stderr[-4000:]}")
        record.write_text(proc.stdout.strip().splitlines()[-1])
    return json.loads(record.read_text())


def prepare(work: Path, precisions: list[str]) -> dict[str, dict]:
    """Makes (or reuses) every model; returns, per precision, each case's ``.onnx``, the
    bytes on disk of each variant, and what saving the prepacked copy cost."""
    fp32 = work / "fp32" / "model.onnx"
    if not fp32.exists():
        print("exporting...", flush=True)
        export_fp32(work)
    makers = {
        "fp16": lambda dst: convert_fp16(fp32, dst),
        "int4": lambda dst: quantize_int4(fp32, dst, accuracy_level=4),
        "int4-acc0": lambda dst: quantize_int4(fp32, dst, accuracy_level=0),
    }
    out = {}
    for prec in precisions:
        base = work / prec / "model.onnx"
        if not base.exists():
            print(f"making {prec}...", flush=True)
            makers[prec](base)
        cases = PRECISIONS[prec][1]
        paths = dict.fromkeys(cases, base)
        variants = {"as made": base}
        prepacked = work / f"{prec}-prepacked" / "model.onnx"
        saved = _saved_prepacked(base, prepacked)
        paths["prepacked file"] = variants["prepacked file"] = prepacked
        if "aligned" in cases:
            aligned = work / f"{prec}-aligned" / "model.onnx"
            if not aligned.exists():
                align(base, aligned)
            paths["aligned"] = paths["aligned, no prepacking"] = variants["aligned"] = aligned
        sizes = {k: sum(f.stat().st_size for f in files_of(v)) for k, v in variants.items()}
        weights = {k: matrix_weights(variants[k]) for k in ("as made", "prepacked file")}
        out[prec] = {"paths": paths, "sizes": sizes, "saved": saved, "weights": weights}
    return out


# ---------------------------------------------------------------- report


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for dist in ("onnxruntime", "onnx", "torch", "transformers", "optimum", "optimum-onnx"):
        try:
            out.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            out.append(f"{dist} missing")
    return ", ".join(out)


def _mib(values: list[float]) -> str:
    vals = [v / MiB for v in values]
    return f"{statistics.median(vals):.0f} ({min(vals):.0f}-{max(vals):.0f})"


def _sec(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def _times(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}x)"


def _size(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


def report(rows, models, diffs, rounds, meta, cross=()) -> str:
    """The Markdown report (every round's row goes to the CSV beside it); ``meta``: the
    measured commit, the date, the minutes taken and the load averages before and after."""
    from benchmarks.harness import compare, describe_machine

    groups: dict[tuple, list[dict]] = {}
    for r in sorted(
        rows, key=lambda r: (list(PRECISIONS).index(r["precision"]), ALL_CASES.index(r["case"]))
    ):
        groups.setdefault((r["precision"], r["case"]), []).append(r)

    def col(key, field):
        return [float(r[field]) for r in sorted(groups[key], key=lambda r: r["round"])]

    def vs_default(key, field):
        return [a / b for a, b in zip(col(key, field), col((key[0], "default"), field))]

    loads = meta["loads"]
    fp32_bytes = models["fp32"]["sizes"]["as made"]
    lines = [
        "# onnxruntime's prepacking: session memory, speed and outputs, per precision",
        "",
        f"machine: {describe_machine()}",
        "",
        f"versions: {_versions()}; onnx-light commit {meta['commit']}; kernel "
        f"{platform.release()}; {meta['date']}",
        "",
        f"command: `benchmarks/proofs/ort_prepacking.py --rounds {rounds}` "
        f"({meta['minutes']:.0f} min, the models' making included when they were made)",
        "",
        f"model: a Llama with TinyLlama-1.1B's shapes and 4 of its 22 layers, random "
        f"weights, {_size(fp32_bytes)} in float32, exported by optimum "
        "(text-generation-with-past, external data).",
        "",
        "| precision | case | session peak RSS growth, MiB | RssAnon peak, MiB | "
        "RssFile peak, MiB | RssAnon after creation, MiB | session creation (s) | "
        "decode step (s) | decode vs default | prefill (s) | prefill vs default | "
        "logits max abs diff |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in groups:
        prec, case = key
        lines.append(
            f"| {prec} | {case} | {_mib(col(key, 'peak_growth'))} | "
            f"{_mib(col(key, 'anon_peak_growth'))} | {_mib(col(key, 'file_peak_growth'))} | "
            f"{_mib(col(key, 'anon_growth'))} | {_sec(col(key, 'create_seconds'))} | "
            f"{_sec(col(key, 'decode_seconds'))} | {_times(vs_default(key, 'decode_seconds'))} | "
            f"{_sec(col(key, 'prefill_seconds'))} | "
            f"{_times(vs_default(key, 'prefill_seconds'))} | {diffs[key]} |"
        )
    lines += [
        "",
        f"{rounds} rounds, interleaved (every case once per round, a new seeded order each "
        "round), one fresh process per measurement; the case's files read once before it "
        "(page cache warm). Values: median (min-max) over the rounds. Session peak RSS "
        "growth: the kernel's `VmHWM` (reset through `/proc/self/clear_refs`) minus the RSS "
        "before `InferenceSession(...)`. RssAnon / RssFile peak: the largest value sampled "
        f"from `/proc/self/status` every {SAMPLE * 1000:.0f} ms during the creation, minus "
        "the value before (anonymous memory: copies, prepacked buffers; file-backed: pages "
        "of mapped files, shared with the page cache). RssAnon after creation: once the "
        f"session exists. Decode step: one token after {PAST} cached ones, batch 1, the "
        f"median of {DECODE_RUNS} runs after a warm-up run; prefill: {PROMPT} tokens, no "
        f"cache, the median of {PREFILL_RUNS} runs after a warm-up run. *vs default*: the "
        "ratio to the `default` case of the same precision in the same round, median "
        "(min-max) over the rounds. Logits max abs diff: the largest difference from the "
        "`default` case's logits of the same precision, over the decode step and the "
        "prefill and every round (`equal`: bit for bit). Load average (1 min) before / "
        f"after the measurements: {loads[0]:.2f} / {loads[1]:.2f} (of {os.cpu_count()} "
        "CPUs).",
        "",
        "Cases: `default` (onnxruntime's default options); `no prepacking` "
        "(`session.disable_prepacking=1`); `device allocator` "
        "(`session.use_device_allocator_for_initializers=1`); `no arena` "
        "(`enable_cpu_mem_arena=False`); `env allocator` (an arena registered by "
        "`create_and_register_allocator`, extended as requested, and "
        "`session.use_env_allocators=1`); `prepacked file` (the model saved once by "
        "onnxruntime with `session.save_external_prepacked_constant_initializers=1`, "
        "then loaded with the default options); `aligned` (re-laid out by onnx-light's "
        f"`align_external_data_streaming`, alignment {ALIGNMENT}), with and without "
        "prepacking.",
        "",
        "## After the timed runs",
        "",
        "Growth since before the session, once the runs are done (median over the rounds): "
        "the weights of a mapped file are read at their first use, into file-backed pages.",
        "",
        "| precision | case | RssAnon growth, MiB | RssFile growth, MiB |",
        "|---|---|---|---|",
        *(
            f"| {p} | {c} | {statistics.median(col((p, c), 'anon_growth_run')) / MiB:.0f} | "
            f"{statistics.median(col((p, c), 'file_growth_run')) / MiB:.0f} |"
            for (p, c) in groups
        ),
        "",
        "## The models",
        "",
        "| precision | made by | files on disk | prepacked file on disk | saving it (s) | "
        "saving it: peak RSS growth, MiB | matrix weights | in the prepacked file |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for prec, m in models.items():
        lines.append(
            f"| {prec} | {PRECISIONS[prec][0]} | {_size(m['sizes']['as made'])} | "
            f"{_size(m['sizes']['prepacked file'])} | {m['saved']['seconds']:.1f} | "
            f"{m['saved']['peak_growth'] / MiB:.0f} | {m['weights']['as made']} | "
            f"{m['weights']['prepacked file']} |"
        )
    lines += [
        "",
        "The prepacked file holds the weights and their prepacked copies "
        "(`optimized_model_filepath`, "
        "`session.optimized_model_external_initializers_file_name`, "
        "`session.optimized_model_external_initializers_min_size_in_bytes=1024`, "
        "`session.save_external_prepacked_constant_initializers=1`), written by one "
        "session creation in a fresh process; onnxruntime warns that a model saved at "
        "the default optimization level may hold optimizations for this machine's CPU. "
        "Matrix weights: the element type of the constant weight (second input) of each "
        "`MatMul`, `Gemm` or `MatMulNBits` node, counted; in the prepacked file, the graph "
        "onnxruntime optimized for this CPU.",
        "",
        *cross,
        "## Comparisons",
        "",
        "A ranking is stated only when every round of one is below every round of the "
        "other (`benchmarks.harness.compare`).",
        "",
    ]
    for field, what, unit, scale in (
        ("decode_seconds", "Decode step", "s", 1),
        ("prefill_seconds", "Prefill", "s", 1),
        ("anon_peak_growth", "RssAnon peak", "MiB", MiB),
    ):
        lines += [f"{what}:", ""]
        for prec, case in groups:
            if case == "default":
                continue
            c = compare(
                f"{prec} {case}",
                [v / scale for v in col((prec, case), field)],
                f"{prec} default",
                [v / scale for v in col((prec, "default"), field)],
                unit=unit,
                context=what.lower(),
            )
            lines.append(f"* {c.own_sentence()}")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def _max_diff(a, b) -> float:
    import numpy as np

    return max(float(np.max(np.abs(a[k] - b[k]))) for k in ("decode", "prefill"))


def _output(out_dir: Path, prec: str, case: str, r: int) -> Path:
    """Where a measurement's logits go."""
    return out_dir / f"{prec}-{case.replace(', ', '-').replace(' ', '_')}-{r}.npz"


def logits_diffs(rows: list[dict], out_dir: Path) -> dict[tuple, str]:
    """Per (precision, case): the largest logits difference from the default case's first
    round, over every round ("equal": bit for bit)."""
    import numpy as np

    diffs = {}
    for prec, case in {(x["precision"], x["case"]) for x in rows}:
        ref = np.load(_output(out_dir, prec, "default", 0))
        worst = max(
            _max_diff(ref, np.load(_output(out_dir, prec, case, int(x["round"]))))
            for x in rows
            if (x["precision"], x["case"]) == (prec, case)
        )
        diffs[(prec, case)] = "equal" if worst == 0 else f"{worst:.2g}"
    return diffs


CROSS = (  # logits compared across the two int4 models (first round)
    (("int4", "no prepacking"), ("int4-acc0", "no prepacking")),
    (("int4", "no prepacking"), ("int4-acc0", "default")),
    (("int4", "default"), ("int4-acc0", "default")),
)


def cross_lines(rows: list[dict], out_dir: Path) -> list[str]:
    """A table: the logits of int4 at accuracy level 4 against level 0's, per case."""
    import numpy as np

    have = {(x["precision"], x["case"]) for x in rows}
    lines = []
    for a, b in CROSS:
        if a in have and b in have:
            diff = _max_diff(np.load(_output(out_dir, *a, 0)), np.load(_output(out_dir, *b, 0)))
            verdict = "equal" if diff == 0 else f"{diff:.2g}"
            lines.append(f"| {a[0]} {a[1]} | {b[0]} {b[1]} | {verdict} |")
    if not lines:
        return []
    return [
        "## int4: accuracy level 4 against level 0",
        "",
        "The logits of the first round, decode step and prefill (max abs diff; `equal`: "
        "bit for bit).",
        "",
        "| session | against | logits max abs diff |",
        "|---|---|---|",
        *lines,
        "",
    ]


def render(work: Path, models: dict, path: str) -> int:
    """Rewrites a report from its CSV (``--render``), keeping what it says of its run."""
    import csv
    import re

    with open(path, encoding="utf-8") as f:
        old = f.read()
    meta = {
        "commit": re.search(r"onnx-light commit (\S+);", old).group(1),
        "date": re.search(r"; (\d{4}-\d\d-\d\d \d\d:\d\d UTC)", old).group(1),
        "minutes": float(re.search(r"--rounds \d+` \((\d+) min", old).group(1)),
        "loads": tuple(
            float(x) for x in re.search(r"measurements: ([\d.]+) / ([\d.]+)", old).groups()
        ),
    }
    with open(os.path.splitext(path)[0] + ".csv", encoding="utf-8") as f:
        rows = [
            {k: v if k in ("precision", "case") else json.loads(v.lower()) for k, v in r.items()}
            for r in csv.DictReader(f)
        ]
    rounds = len({r["round"] for r in rows})
    diffs = logits_diffs(rows, work / "outputs")
    cross = cross_lines(rows, work / "outputs")
    write_report(path, report(rows, models, diffs, rounds, meta, cross), rows)
    return 0


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default="/var/tmp/ortpack")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--output", default="ort_prepacking")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--render",
        action="store_true",
        help="rewrite the report from its CSV and the outputs kept in --workdir, with "
        "the commit, date, minutes and load averages it states (measures nothing)",
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    work = Path(args.workdir)
    precisions = [p for p in args.precisions.split(",") if p]
    models = prepare(work, precisions)
    if args.render:
        return render(work, models, report_path(f"{args.output}.md"))
    feeds = work / "feeds.npz"
    if not feeds.exists():
        make_feeds(work / "fp32" / "model.onnx", feeds)
    cases = [(p, c) for p in precisions for c in PRECISIONS[p][1]]

    rng = random.Random(args.seed)
    out_dir = work / "outputs"
    out_dir.mkdir(exist_ok=True)
    rows = []
    load_before = os.getloadavg()[0]
    # Not measured: brings onnxruntime's library and Python's modules into the page cache.
    prec0 = precisions[0]
    measure(prec0, "default", models[prec0]["paths"]["default"], feeds, out_dir / "warm.npz")
    for r in range(args.rounds):
        order = list(cases)
        rng.shuffle(order)
        for prec, case in order:
            out = _output(out_dir, prec, case, r)
            res = measure(prec, case, models[prec]["paths"][case], feeds, out)
            print(
                f"round {r} {prec:9s} {case:24s} peak {res['peak_growth'] / MiB:7.0f} "
                f"anon {res['anon_peak_growth'] / MiB:7.0f} file "
                f"{res['file_peak_growth'] / MiB:7.0f} MiB, create {res['create_seconds']:.2f} s,"
                f" decode {res['decode_seconds']:.3f} s, prefill {res['prefill_seconds']:.3f} s",
                flush=True,
            )
            rows.append({"precision": prec, "case": case, "round": r, **res})
    diffs = logits_diffs(rows, out_dir)
    meta = {
        "commit": measured_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "minutes": (time.perf_counter() - t0) / 60,
        "loads": (load_before, os.getloadavg()[0]),
    }
    path = report_path(f"{args.output}.md")
    cross = cross_lines(rows, out_dir)
    write_report(path, report(rows, models, diffs, args.rounds, meta, cross), rows)
    print(f"wrote {path} and its .csv")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        print(json.dumps(worker(*argv[1:6])))
        return 0
    if argv and argv[0] == "--save-prepacked":
        print(json.dumps(save_prepacked(Path(argv[1]), Path(argv[2]))))
        return 0
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
