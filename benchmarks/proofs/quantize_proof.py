"""Quantizing real exports: onnx-light's quantizer against onnxruntime's, and what each setting costs.

What it measures
----------------
The optimum exports ``make realworld`` builds from configs with random weights
(``benchmarks/realworld/models.py``, cached; nothing is downloaded): the
Llama-like decoder with past (``--llama small``: hidden size 512, 1376
intermediate, 4 layers, 8192 tokens; ``large``: about 3.5 GiB of float32),
GPT-2 with past and BERT. Each is quantized in each setting (:data:`SETTINGS`:
4 bits in blocks of 32, symmetric, at accuracy level 0 and at 4, the
onnxruntime-genai builder's CPU default; 4 bits in blocks of 128, asymmetric,
onnxruntime's quantizer's default; 8 bits in blocks of 128, asymmetric; 4 bits
in blocks of 32 with the embeddings' ``Gather`` too; with the ``Gemm`` layers
too, onnx-light alone, where the model has them) by:

* ``onnx-light``: ``onnx-light quantize SRC DST --bits B --block-size N
  [--symmetric] [--accuracy-level L] --with-files -q`` (its CLI, in process);
* ``onnxruntime``: ``MatMulNBitsQuantizer(onnx.load(SRC), bits=B,
  block_size=N, is_symmetric=S, accuracy_level=L)``, ``process()``,
  ``save_model_to_file(DST, use_external_data_format=True)``: its usual use;
  the exporter's config files copied beside it by hand.

Each run is a fresh process (``benchmarks/realworld/worker.py``'s measure:
time, the kernel's peak RSS, the peaks of anonymous and file-backed memory
apart), ``--rounds`` interleaved rounds, the source read once before (page
cache warm). Then, per model and setting: the nodes of the two outputs (type,
domain, name, inputs, outputs, attributes) and the opsets, their initializers
byte for byte, onnxruntime's outputs (CPU, one thread, fixed inputs) bit for
bit, 20 tokens generated greedily by optimum's ``ORTModelForCausalLM`` from
each folder (decoders), and the distance of the first output (the logits;
BERT's last hidden state) to the float32 source's on the same inputs: max and
mean absolute difference. With random weights, only the ordering of the
settings carries over to a trained model, not the values.

Last, onnxruntime-genai's builder folder of the same Llama (``-p fp32 -e cpu``,
``models.genai_folder``), quantized in the builder's CPU settings, against
onnxruntime's quantizer as above and against the builder's own ``-p int4``
folder: its ``genai_config.json`` (the same as the float32 one's?), its
initializers, the 20 tokens ``og.Model`` generates from each folder.

How to run it
-------------
In ``make realworld``'s venv (torch's CPU wheel, transformers, optimum,
onnxruntime), from the repository's root::

    make realworld   # once: builds .venv-realworld and the cached models
    .venv-realworld/bin/python benchmarks/proofs/quantize_proof.py --rounds 3

The repository's ``onnx_light`` is put first on the path (the report says
which one ran). It writes ``benchmarks/proofs/results/quantize_proof.md`` and
``.csv`` (``--output`` elsewhere); outputs go to ``--workdir`` (default
``/var/tmp/onnx-light-quantize``, about 1 GiB). ``--models gpt2,bert`` keeps some
models; ``--render`` writes the report again from the last run's CSV (and
``WORKDIR/facts.json``), without measuring.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.realworld import checks, models  # noqa: E402
from benchmarks.realworld.run import copy_companions  # noqa: E402
from benchmarks.text import measured_commit, report_path, write_report  # noqa: E402

MIB = 2**20
# name -> (bits, block size, symmetric, accuracy level, op types)
SETTINGS = {
    "int4 b32 sym": (4, 32, True, 0, "MatMul"),
    "int4 b32 sym acc4": (4, 32, True, 4, "MatMul"),
    "int4 b128 asym": (4, 128, False, 0, "MatMul"),
    "int8 b128 asym": (8, 128, False, 0, "MatMul"),
    "int4 b32 sym +Gather": (4, 32, True, 0, "MatMul,Gather"),
    "int4 b32 sym +Gemm": (4, 32, True, 0, "MatMul,Gemm"),
}
TOOLS = ("onnx-light", "onnxruntime")
GENAI = "int4 b32 sym acc4"  # onnxruntime-genai's builder's settings for the CPU
ORT_SKIPS = "Gemm"  # an op type onnxruntime's quantizer does not quantize: onnx-light alone


# -- the worker: one quantization in a fresh process ---------------------------


def _ort_quantize(src: str, dst: str, bits: str, block: str, sym: str, level: str, ops: str) -> int:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q = MatMulNBitsQuantizer(
        onnx.load(src),
        bits=int(bits),
        block_size=int(block),
        is_symmetric=sym == "1",
        accuracy_level=int(level),
        op_types_to_quantize=tuple(ops.split(",")),
    )
    q.process()
    q.model.save_model_to_file(dst, use_external_data_format=True)
    return 0


def worker(argv: list[str]) -> int:
    """``--worker RESULT.json ort SRC DST BITS BLOCK SYM LEVEL OPS``: onnxruntime's
    quantizer measured as ``benchmarks/realworld/worker.py`` measures a verb."""
    from benchmarks.realworld import worker as rw

    result, kind, *args = argv
    assert kind == "ort"
    from onnxruntime.quantization import matmul_nbits_quantizer  # noqa: F401

    rw._prepare = lambda _kind: _ort_quantize  # the same clock and sampling, this operation
    return rw.main([result, "ort", *args])


def run_one(tool: str, src: str, dst: str, setting: str, scratch: str) -> dict:
    """One quantization by ``tool`` in a fresh process: its worker record."""
    bits, block, sym, level, ops = SETTINGS[setting]
    shutil.rmtree(os.path.dirname(dst), ignore_errors=True)
    os.makedirs(os.path.dirname(dst))
    result = os.path.join(scratch, "result.json")
    env = dict(os.environ, PYTHONPATH=ROOT)
    if tool == "onnx-light":
        argv = ["quantize", src, dst, "--bits", str(bits), "--block-size", str(block)]
        argv += ["--symmetric"] * sym + ["--accuracy-level", str(level), "--op-types", ops]
        argv += ["--with-files", "-q"]
        cmd = [sys.executable, "-m", "benchmarks.realworld.worker", result, "cli", *argv]
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", result, "ort", src, dst]
        cmd += [str(bits), str(block), "1" if sym else "0", str(level), ops]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode or not os.path.exists(result):
        raise RuntimeError(f"{tool} {setting} on {src} failed: {done.stderr[-2000:]}")
    with open(result) as f:
        record = json.load(f)
    os.remove(result)
    if record["exit"]:
        raise RuntimeError(f"{tool} {setting} on {src}: {record['error'] or record['output']}")
    if tool == "onnxruntime":
        copy_companions(os.path.dirname(src), os.path.dirname(dst))
    return record


# -- the comparisons -------------------------------------------------------------


def node_table(path: str) -> tuple[list, list]:
    """Every node of every graph (type, domain, name, inputs, outputs, attributes)
    and the opset imports of the model at ``path``. A ``Constant``'s tensor stored in
    the weights file (BERT's position ids) is compared by value, not by its offset."""
    import onnx

    model = onnx.load(path)
    nodes = []
    for g in checks._graphs(model.graph):
        for n in g.node:
            attrs = sorted((a.name, a.SerializeToString()) for a in n.attribute)
            nodes.append((n.op_type, n.domain, n.name, tuple(n.input), tuple(n.output), attrs))
    opsets = sorted((o.domain, o.version) for o in model.opset_import)
    return nodes, opsets


def count_ops(path: str) -> dict[str, int]:
    nodes, _ = node_table(path)
    out: dict[str, int] = {}
    for n in nodes:
        out[n[0]] = out.get(n[0], 0) + 1
    return out


def initializer_mib(path: str) -> float:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(path)
    total = sum(
        numpy_helper.to_array(t).nbytes for g in checks._graphs(model.graph) for t in g.initializer
    )
    return total / MIB


def distance(ref, got) -> tuple[float, float]:
    import numpy as np

    d = np.abs(ref.astype(np.float64) - got.astype(np.float64))
    return float(d.max()), float(d.mean())


def _nodes_verdict(a: tuple, b: tuple) -> str:
    if a[0] == b[0]:
        return "same"
    if sorted(map(repr, a[0])) == sorted(map(repr, b[0])):
        return "same, in another order"
    return "differ"


def _opsets_verdict(a: tuple, b: tuple) -> str:
    if a[1] == b[1]:
        return "same"
    extra = sorted(set(b[1]) - set(a[1]))
    missing = sorted(set(a[1]) - set(b[1]))
    return f"onnxruntime's adds {extra}" if extra and not missing else f"{a[1]} vs {b[1]}"


def compare(model: str, src: str, outs: dict[str, str], setting: str, decoder: str) -> dict:
    """The tools' outputs of one setting side by side, and their distance to float32;
    ``decoder``: how the folder generates (``optimum``, ``genai``, ``none``)."""
    feeds = checks.feeds_for(src, models.VOCAB)
    ref = checks.ort_outputs(src, feeds)
    a = outs["onnx-light"]
    ops = count_ops(a)
    got_a = checks.ort_outputs(a, feeds)
    alone = "onnx-light alone"
    row = {
        "model": model,
        "setting": setting,
        "MatMulNBits": ops.get("MatMulNBits", 0),
        "GatherBlockQuantized": ops.get("GatherBlockQuantized", 0),
        "MatMul left": ops.get("MatMul", 0),
        "Gemm left": ops.get("Gemm", 0),
        "nodes": alone,
        "opsets": alone,
        "initializers": alone,
        "init_mib": round(initializer_mib(a), 2),
        "src_init_mib": round(initializer_mib(src), 2),
        "outputs": alone,
        "max_abs": distance(ref[0], got_a[0])[0],
        "mean_abs": distance(ref[0], got_a[0])[1],
        "tokens": alone if decoder != "none" else "-",
    }
    b = outs.get("onnxruntime")
    if b:
        table_a, table_b = node_table(a), node_table(b)
        differ = checks.tensors_differ(a, b)
        outputs = checks.same_outputs(got_a, checks.ort_outputs(b, feeds))
        row["nodes"] = _nodes_verdict(table_a, table_b)
        row["opsets"] = _opsets_verdict(table_a, table_b)
        row["initializers"] = "same bytes" if not differ else f"{len(differ)} differ: {differ[:3]}"
        row["outputs"] = "bit-identical" if outputs is None else outputs
    if decoder != "none":
        tok_a, tok_f = generate(a, decoder), generate(src, decoder)
        new = len(checks.PROMPT)
        if b:
            tok_b = generate(b, decoder)
            row["tokens"] = (
                "same 20" if tok_a == tok_b else f"differ: {tok_a[new:]} vs {tok_b[new:]}"
            )
        row["tokens_as_fp32"] = f"{sum(x == y for x, y in zip(tok_a[new:], tok_f[new:]))} of 20"
    if decoder == "genai":
        row.update(builder_int4(a, tok_a, new))
    return row


def generate(path: str, how: str) -> list[int]:
    """20 greedy tokens from the folder of ``path``: optimum's or onnxruntime-genai's."""
    if how == "genai":
        return checks.genai_generate(os.path.dirname(path))
    return checks.optimum_generate(os.path.dirname(path), {"file_name": "model.onnx"}, False, True)


def builder_int4(path: str, tokens: list[int], new: int) -> dict:
    """onnx-light's quantization of the builder's fp32 folder against the builder's own
    int4 folder (``-p int4 -e cpu``): its genai_config.json against the fp32 one's, the
    initializers, the tokens."""
    folder = models.genai_folder("int4", "large" if "large" in path else "small")
    src = models.genai_folder("fp32", "large" if "large" in path else "small")
    configs = []
    for f in (folder, src):
        with open(os.path.join(f, "genai_config.json")) as fh:
            configs.append(json.load(fh))
    differ = checks.tensors_differ(path, os.path.join(folder, "model.onnx"))
    theirs = checks.genai_generate(folder)
    return {
        "builder_config": "the same" if configs[0] == configs[1] else "differs",
        "builder_initializers": "same bytes" if not differ else f"{len(differ)} differ",
        "builder_tokens": f"{sum(x == y for x, y in zip(tokens[new:], theirs[new:]))} of 20",
        "builder_ops": count_ops(os.path.join(folder, "model.onnx")).get("MatMulNBits", 0),
    }


def cases(srcs: list) -> list[tuple[str, str, bool, str, tuple[str, ...]]]:
    """(label, source, how it generates, setting, tools) measured: a setting that quantizes
    an op type only onnx-light does runs where the model has that op, onnx-light alone."""
    out = []
    for label, src, decoder in srcs:
        present = count_ops(src)
        for setting, (*_, ops) in SETTINGS.items():
            if decoder == "genai" and setting != GENAI:
                continue  # the builder's folder: its own CPU settings only
            if ORT_SKIPS in ops.split(","):
                if present.get(ORT_SKIPS):
                    out.append((label, src, decoder, setting, ("onnx-light",)))
            else:
                out.append((label, src, decoder, setting, TOOLS))
    return out


def _dst(workdir: str, label: str, setting: str, tool: str) -> str:
    name = setting.replace(" ", "_").replace("+", "with_")
    return os.path.join(workdir, label, name, tool, "model.onnx")


# -- the run and the report --------------------------------------------------------


def sources(llama: str) -> list[tuple[str, str, str]]:
    """(label, model.onnx, how it generates: optimum, genai or none) of the models."""
    out = [(f"llama-{llama}", models.llama_folder(llama), "optimum")]
    out += [("gpt2", models.gpt2_folder(True), "optimum"), ("bert", models.bert_folder(), "none")]
    out += [(f"genai-fp32-{llama}", models.genai_folder("fp32", llama), "genai")]
    return [(label, os.path.join(folder, "model.onnx"), gen) for label, folder, gen in out]


def warm(path: str) -> None:
    """Read the model's files once (page cache warm for every tool alike)."""
    folder = os.path.dirname(path)
    for name in os.listdir(folder):
        if name.startswith("model.onnx"):
            with open(os.path.join(folder, name), "rb") as f:
                while f.read(16 * MIB):
                    pass


def run(args) -> tuple[list[dict], list[dict], dict]:
    srcs = [s for s in sources(args.llama) if not args.models or s[0] in args.models.split(",")]
    scratch = os.path.join(args.workdir, "scratch")
    os.makedirs(scratch, exist_ok=True)
    timings: list[dict] = []
    rng = random.Random(0)
    started = time.perf_counter()
    todo = cases(srcs)
    for r in range(args.rounds):
        order = [(c, t) for c in todo for t in c[4]]
        rng.shuffle(order)
        for (label, src, _, setting, _), tool in order:
            warm(src)
            rec = run_one(tool, src, _dst(args.workdir, label, setting, tool), setting, scratch)
            timings.append(
                {
                    "model": label,
                    "setting": setting,
                    "tool": tool,
                    "round": r,
                    "seconds": rec["seconds"],
                    "vm_hwm_mib": rec["vm_hwm"] / MIB,
                    "anon_mib": rec["peak_anon"] / MIB,
                    "file_mib": rec["peak_file"] / MIB,
                }
            )
            print(f"round {r} {label} {setting} {tool}: {rec['seconds']:.2f} s", flush=True)
    rows = []
    for label, src, decoder, setting, tools in todo:
        outs = {t: _dst(args.workdir, label, setting, t) for t in tools}
        rows.append(compare(label, src, outs, setting, decoder))
        print(f"compared {label} {setting}: {rows[-1]['outputs']}", flush=True)
    import onnx_light

    facts = {
        "commit": measured_commit(),
        "versions": models.versions(),
        "onnx_light": os.path.dirname(onnx_light.__file__),
        "minutes": (time.perf_counter() - started) / 60,
    }
    facts["src_mib"] = {label: initializer_mib(src) for label, src, _ in srcs}
    facts.update(rounds=args.rounds, llama=args.llama)
    with open(os.path.join(args.workdir, "facts.json"), "w") as f:
        json.dump(facts, f, indent=1)
    return rows, timings, facts


NUMBERS = ("max_abs", "mean_abs", "init_mib", "src_init_mib", "seconds", "vm_hwm_mib")
NUMBERS += ("anon_mib", "file_mib")


def render(args) -> tuple[list[dict], list[dict], dict]:
    """The rows, timings and facts of the last run, read back from its CSV (``--output``
    with ``.csv``) and ``WORKDIR/facts.json``: the report written again by new code."""
    import csv

    with open(os.path.splitext(args.output)[0] + ".csv", newline="") as f:
        records = list(csv.DictReader(f))
    for r in records:
        r.update({k: float(r[k]) for k in NUMBERS if r.get(k) not in (None, "")})
    with open(os.path.join(args.workdir, "facts.json")) as f:
        facts = json.load(f)
    rows = [r for r in records if r.get("round") in (None, "")]
    return rows, [r for r in records if r.get("round") not in (None, "")], facts


def _cell(values: list[float], fmt: str) -> str:
    """``median (min-max)``."""
    med, low, high = statistics.median(values), min(values), max(values)
    return f"{med:{fmt}} ({low:{fmt}}-{high:{fmt}})" if len(values) > 1 else f"{med:{fmt}}"


def report(rows: list[dict], timings: list[dict], facts: dict) -> str:
    """The report's Markdown."""
    v = facts["versions"]
    sizes = ", ".join(f"{k} {mib:.1f} MiB" for k, mib in facts["src_mib"].items())
    lines = [
        "# Quantizing real exports: onnx-light against onnxruntime's MatMulNBitsQuantizer",
        "",
        f"Measured at {facts['commit']} on {datetime.date.today().isoformat()} "
        f"(onnx-light from `{facts['onnx_light']}`), onnxruntime {v['onnxruntime']}, "
        f"onnx {v['onnx']}, optimum-onnx {v['optimum-onnx']}, transformers {v['transformers']}, "
        f"torch {v['torch']}; {facts['rounds']} interleaved rounds, each run a fresh process, "
        f"{facts['minutes']:.1f} minutes in all, on a machine of 2 cores other work kept busy. "
        f"Command: `.venv-realworld/bin/python benchmarks/proofs/quantize_proof.py "
        f"--llama {facts['llama']} --rounds {facts['rounds']}`.",
        "",
        "Models: optimum's exports built from configs with random weights "
        "(`benchmarks/realworld/models.py`), float32 initializers: "
        f"{sizes}. Settings: bits, block size (b32: 32 weights per block), symmetric or "
        "asymmetric, acc4: MatMulNBits's accuracy level 4 (int8 compute on the CPU; "
        "else level 0, not set); +Gather: the embeddings' `Gather` too "
        "(`GatherBlockQuantized`); +Gemm: the `Gemm` layers too, which onnxruntime's "
        "quantizer does not quantize (onnx-light alone, on the model that has them).",
        "",
        "## The same model as onnxruntime's quantizer",
        "",
        "Per model and setting, onnx-light's output against onnxruntime's: nodes (type, "
        "domain, name, inputs, outputs, attributes) and opsets, initializers byte for byte, "
        "onnxruntime's outputs on the same inputs, the 20 tokens optimum's "
        "`ORTModelForCausalLM` generates greedily from each folder. onnxruntime's quantizer "
        "sorts the graph's nodes again; onnx-light keeps the source's order. GPT-2's layers "
        "are `Gemm` (Conv1D) and its lm_head reads the embeddings through a `Transpose`: no "
        "`MatMul` of it has a constant weight, so onnxruntime's quantizer leaves it as it was "
        "(and adds the `com.microsoft` opset).",
        "",
        "| model | setting | MatMulNBits | GatherBlockQuantized | MatMul left | Gemm left | "
        "nodes | opsets | initializers | float32 initializers, MiB | initializers, MiB | "
        "onnxruntime outputs | tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['setting']} | {r['MatMulNBits']} | {r['GatherBlockQuantized']} | "
            f"{r['MatMul left']} | {r['Gemm left']} | {r['nodes']} | {r['opsets']} | "
            f"{r['initializers']} | {float(r['src_init_mib']):.2f} | {float(r['init_mib']):.2f} | "
            f"{r['outputs']} | {r['tokens']} |"
        )
    lines += [
        "",
        "## Time and peak memory",
        "",
        "Median of the rounds (min-max in parentheses). Peaks are absolute (the interpreter "
        "and its imports included): anonymous (private) and file-backed (mapped files) memory "
        "apart, and the kernel's peak RSS (both together).",
        "",
        "| model | setting | tool | time (s) | peak anonymous, MiB | peak file-backed, MiB | "
        "peak RSS, MiB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for tool in TOOLS:
            key = (r["model"], r["setting"], tool)
            t = [x for x in timings if (x["model"], x["setting"], x["tool"]) == key]
            if not t:
                continue
            lines.append(
                f"| {r['model']} | {r['setting']} | {tool} | "
                f"{_cell([x['seconds'] for x in t], '.2f')} | "
                f"{_cell([x['anon_mib'] for x in t], '.0f')} | "
                f"{_cell([x['file_mib'] for x in t], '.0f')} | "
                f"{_cell([x['vm_hwm_mib'] for x in t], '.0f')} |"
            )
    lines += [
        "",
        "## onnxruntime-genai's builder folder",
        "",
        "The builder's float32 folder (`-p fp32 -e cpu`) quantized in the builder's own CPU "
        "settings (4 bits, blocks of 32, symmetric, accuracy level 4), its `genai_config.json` "
        "copied by `--with-files`, against the builder's int4 folder (`-p int4 -e cpu`, the "
        "same weights): whether the builder wrote the same `genai_config.json` for int4 as "
        "for float32, the MatMulNBits of each, their initializers, and how many of the 20 "
        "tokens `og.Model` generates from onnx-light's folder are those it generates from the "
        "builder's.",
        "",
        "| model | setting | builder's int4 genai_config.json | MatMulNBits (onnx-light, builder) | "
        "initializers against the builder's int4 | tokens as the builder's int4 |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("builder_config"):
            lines.append(
                f"| {r['model']} | {r['setting']} | {r['builder_config']} as float32's | "
                f"{r['MatMulNBits']}, {r['builder_ops']} | {r['builder_initializers']} | "
                f"{r['builder_tokens']} |"
            )
    lines += [
        "",
        "## What each setting costs in accuracy",
        "",
        "The first output (the logits; BERT's last hidden state) of the quantized model "
        "(onnx-light's, bit-identical to onnxruntime's where both ran) against the float32 "
        "source's, onnxruntime on the CPU, the same fixed inputs; for the decoders, how many "
        "of the 20 greedy tokens are the float32 model's. **The weights are random**: only "
        "the ordering of the settings carries over to a trained model, not the values (a "
        "random model's logits are nearly flat: the smallest change flips its greedy tokens).",
        "",
        "| model | setting | max abs difference | mean abs difference | tokens as float32 |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['setting']} | {r['max_abs']:.4g} | {r['mean_abs']:.4g} | "
            f"{r.get('tokens_as_fp32') or '-'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        return worker(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama", default="small", choices=["small", "large"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--models", default="", help="labels to keep, comma-separated (all)")
    p.add_argument("--workdir", default="/var/tmp/onnx-light-quantize")
    p.add_argument("--output", default=report_path("quantize_proof.md"))
    p.add_argument("--render", action="store_true", help="the report again from the last run")
    args = p.parse_args(argv)
    rows, timings, facts = render(args) if args.render else run(args)
    text = report(rows, timings, facts)
    fields = list(dict.fromkeys(k for r in rows + timings for k in r))
    write_report(args.output, text, rows + timings, fields)
    return 0


if __name__ == "__main__":
    sys.exit(main())
