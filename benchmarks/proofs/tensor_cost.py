"""The cost of a tensor: where re-aligning a model of many tiny tensors spends its time.

Usage (run by hand, not by CI)::

    .venv/bin/python benchmarks/proofs/tensor_cost.py [--tensors 200000] [--rounds 5]
        [--workdir /var/tmp/tensor-cost] [--output benchmarks/proofs/results/tensor_cost.md]

On a model of ``--tensors`` float32 tensors of 64 bytes
(:func:`benchmarks.harness.make_many_tensors_model`), each variant runs in a
process of its own, in interleaved rounds (a new order each round), and
reports its CPU time (``time.process_time``: less disturbed by other
processes than the clock) per tensor:

- three floors, each a plain loop that keeps nothing per tensor:

  - *metadata*: protobuf parses the ``.onnx``, serializes it, writes it;
  - *access*: the same, plus for every tensor what any tool that rewrites its
    reference through protobuf's Python objects must do: read its entries
    (key and value), its dtype and dims, write a new offset;
  - *checked*: the same, plus the checks ``align`` makes of every reference
    (no data of its own, offset and length plain integers, the length equal
    to dtype x dims, the range inside the file);

- ``align_external_data_streaming`` itself, split by stage: the scan (parse),
  the planner (walk, resolve and check every reference, decide its fate),
  the layout (offsets and files), the copy of the bytes, and the rest (each
  reference placed, the ``.onnx`` serialized and written, the commit).

The report gives the median and the range of the rounds, per tensor, and
each figure as a multiple of the metadata floor.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # the checkout: benchmarks.*

from benchmarks.text import report_path, short_commit, spread, write_report  # noqa: E402

VARIANTS = ("metadata", "access", "checked", "align")
STAGES = ("scan", "planner", "layout", "copy", "rest")


def _floor(model_path: str, out: str, level: str) -> dict:
    import onnx

    from onnx_light.onnx._read.tensors import tensor_nbytes

    start = time.process_time()
    with open(model_path, "rb") as f:
        data = f.read()
    size = os.path.getsize(model_path + ".data")
    model = onnx.ModelProto()
    model.ParseFromString(data)
    del data
    if level != "metadata":
        offset = 0
        for tensor in model.graph.initializer:
            entries = tensor.external_data[:]
            found = {entry.key: entry.value for entry in entries}
            dtype, dims = tensor.data_type, tensor.dims[:]
            if level == "checked":
                carries = (
                    tensor.HasField("raw_data")
                    or (tensor.float_data or tensor.int32_data or tensor.string_data)
                    or (tensor.int64_data or tensor.double_data or tensor.uint64_data)
                )
                at, length = found["offset"], found["length"]
                ok = at.isascii() and at.isdigit() and length.isascii() and length.isdigit()
                at, length = int(at), int(length)
                nbytes = tensor_nbytes(tensor)
                if carries or not ok or dtype == 8 or nbytes != length or at + length > size:
                    raise ValueError(f"tensor {tensor.name}: a bad reference")
            del dims
            entries[1].value = str(offset)
            offset += 4096
    with open(os.path.join(out, "m.onnx"), "wb") as f:
        f.write(model.SerializeToString())
    return {"total": time.process_time() - start}


def _align(model_path: str, out: str) -> dict:
    import onnx_light.onnx as onnxl
    from onnx_light.onnx import _align
    from onnx_light.onnx._plan import source_plan
    from onnx_light.onnx._write import shards

    spent = dict.fromkeys(STAGES, 0.0)

    def timed(stage, function):
        def run(*args, **kwargs):
            start = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[stage] += time.process_time() - start

        return run

    source_plan.scan_model = timed("scan", source_plan.scan_model)
    source_plan.plan_tensors = timed("planner", source_plan.plan_tensors)
    _align.WeightsFiles = timed("layout", shards.WeightsFiles)
    shards.WeightsFiles.write = timed("copy", shards.WeightsFiles.write)
    start = time.process_time()
    onnxl.align_external_data_streaming(model_path, os.path.join(out, "m.onnx"), alignment=4096)
    total = time.process_time() - start
    spent["rest"] = total - sum(spent[s] for s in STAGES if s != "rest")
    spent["total"] = total
    return spent


def _child(variant: str, model_path: str, out: str) -> None:
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    result = _align(model_path, out) if variant == "align" else _floor(model_path, out, variant)
    print(json.dumps(result))


def _run(variant: str, model_path: str, out: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--model", model_path, "--out", out],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _report(results: dict, tensors: int, rounds: int, machine: str, command: str) -> str:
    per = {v: [r["total"] * 1e6 / tensors for r in results[v]] for v in VARIANTS}
    floor = sorted(per["metadata"])[len(per["metadata"]) // 2]
    lines = [
        "# The cost of a tensor: re-aligning many tiny tensors, stage by stage",
        "",
        f"machine: {machine}",
        "",
        f"command: `{command}`",
        "",
        f"{tensors:,} float32 tensors of 64 bytes; {rounds} rounds, each variant in a "
        "process of its own, interleaved; CPU time (`time.process_time`) per tensor, "
        "min (median, max) of the rounds, and the median as a multiple of the metadata floor.",
        "",
        "| what | CPU per tensor (us) | x metadata floor |",
        "|---|---|---|",
    ]
    names = {
        "metadata": "floor: parse + serialize + write the .onnx",
        "access": "floor: + each tensor's entries, dtype, dims read, an offset written",
        "checked": "floor: + align's checks of each reference",
        "align": "align_external_data_streaming, in all",
    }
    for v in VARIANTS:
        median = sorted(per[v])[len(per[v]) // 2]
        lines.append(f"| {names[v]} | {spread(per[v])} | {median / floor:.1f}x |")
    for stage in STAGES:
        values = [r[stage] * 1e6 / tensors for r in results["align"]]
        median = sorted(values)[len(values) // 2]
        lines.append(f"| align: {stage} | {spread(values)} | {median / floor:.1f}x |")
    lines += [
        "",
        "Stages of align: *scan*, the `.onnx` parsed (no weight read); *planner*, every "
        "tensor walked, its reference resolved and checked, its fate decided; *layout*, the "
        "offsets and files planned; *copy*, the bytes copied; *rest*, each reference placed, "
        "the `.onnx` serialized and written, the commit.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tensors", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workdir", default="/var/tmp/tensor-cost")
    p.add_argument("--output", default=report_path("tensor_cost.md"))
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _child(args.child, args.model, args.out)
        return 0
    from benchmarks.harness import describe_machine, make_many_tensors_model

    folder = os.path.join(args.workdir, f"many-{args.tensors}")
    model_path = os.path.join(folder, "model.onnx")
    if not os.path.exists(model_path):
        os.makedirs(folder, exist_ok=True)
        make_many_tensors_model(args.tensors, folder)
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    rng = random.Random(0)
    for i in range(args.rounds):
        order = list(VARIANTS)
        rng.shuffle(order)
        for variant in order:
            results[variant].append(_run(variant, model_path, os.path.join(args.workdir, "out")))
        print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    command = "benchmarks/proofs/tensor_cost.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    commit = short_commit()
    machine = f"{describe_machine()} ({commit or 'unknown commit'}), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    text = _report(results, args.tensors, args.rounds, machine, command.strip())
    write_report(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
