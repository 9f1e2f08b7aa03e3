"""The quantizer's memory does not grow with the model: the same peak at 4x the weights, and
an 8 GiB model quantized in a 2 GiB memory cgroup where onnxruntime's quantizer is killed.

Usage (run by hand, not by CI)::

    .venv/bin/python benchmarks/proofs/quantize_memory.py [--rounds 3]
        [--workdir /var/tmp/onnxl-quant-memory] [--sizes 256MiB,1GiB]
        [--cgroup] [--cgroup-size 8GiB] [--cgroup-limit-mib 2048] [--sparse-rows N]
        [--remove-sources]
        [--output benchmarks/proofs/results/quantize_memory.md]

The sources are chains of MatMul on float32 ``[4096, 4096]`` weights (64 MiB each:
4 of them at 256 MiB, 16 at 1 GiB, 128 at 8 GiB), written tensor by tensor into the
work dir by ``benchmarks/sources.py`` when missing. ``onnxl.quantize_weights`` runs
with its defaults (onnxruntime's: 4 bits, blocks of 128, asymmetric) as ``make bench``
runs it (``benchmarks/worker.py quantize WORKDIR SIZE --timeline``: a fresh process,
the ``tiny`` source first, the kernel's peak RSS growth (``VmHWM``), ``RssAnon`` and
``RssFile`` sampled every millisecond), the sizes in a new seeded order each round,
each source read once just before (page cache warm). The bound is 64 MiB plus the
largest weight's quantized parts (packed values, scales, zero points).

With ``--cgroup`` (root; nothing else on the machine is changed): the ``--cgroup-size``
source quantized by onnx-light and by onnxruntime's ``MatMulNBitsQuantizer``
(``onnx.load``, ``process()``, ``save_model_to_file(use_external_data_format=True)``),
each in a memory cgroup of its own under ``/sys/fs/cgroup`` (``benchmarks/cgroup.py``:
its limit counts the page cache, no swap; removed after), the source's pages
evicted from the page cache first (only those: ``posix_fadvise``), so each reads it
through its cgroup. The report says which completed and which the kernel killed
(the cgroup's OOM-kill count), and the cgroup's peak usage. ``--remove-sources``
deletes the sources at the end (the 8 GiB one takes as much disk). With
``--sparse-rows N``, the cgroup's source is written sparse (each weight's first ``N``
rows random, the rest a hole of the data file: zeros, read as any other bytes), for a
disk without 8 GiB to spare.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, ROOT)  # the checkout: benchmarks.*
sys.path.insert(1, BENCH)  # the suite's modules, as worker.py imports them

import cgroup  # noqa: E402
import sources  # noqa: E402

from benchmarks.harness import describe_machine, evict, warm  # noqa: E402
from benchmarks.text import measured_commit, report_path, write_report  # noqa: E402

MiB = 2**20
SLACK = 64 * MiB  # the bound: this plus the largest weight's quantized parts
SAME = 4 * MiB  # "the same peak": the larger model's median within this of the smaller's


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workdir", default="/var/tmp/onnxl-quant-memory")
    p.add_argument("--sizes", default="256MiB,1GiB", help="two sizes of sources.MATMUL")
    p.add_argument("--cgroup", action="store_true", help="also the cgroup part (root)")
    p.add_argument("--cgroup-size", default="8GiB")
    p.add_argument("--cgroup-limit-mib", type=int, default=2048)
    p.add_argument(
        "--sparse-rows",
        type=int,
        default=0,
        help="the cgroup's source stored sparse: each weight's first N rows random, the "
        "rest zeros in holes of its file (0: dense)",
    )
    p.add_argument("--remove-sources", action="store_true")
    p.add_argument("--output", default=report_path("quantize_memory.md"))
    args = p.parse_args(argv)
    args.sizes = args.sizes.split(",")
    for size in [*args.sizes, args.cgroup_size]:
        if size not in sources.MATMUL:
            p.error(f"{size}: one of {', '.join(sources.MATMUL)}")
    if args.cgroup and cgroup.cgroup_unavailable():
        p.error(f"--cgroup: {cgroup.cgroup_unavailable()}")
    return args


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _worker(op: str, workdir: str, size: str, cg=None) -> tuple[dict | None, str]:
    """One measurement in a fresh process: its record (None when it failed) and stderr."""
    done = subprocess.run(
        [sys.executable, os.path.join(BENCH, "worker.py"), op, workdir, size, "--timeline"],
        capture_output=True,
        text=True,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),  # no idle BLAS threads spinning
        preexec_fn=cg.enter if cg is not None else None,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return None, f"exit {done.returncode}: {done.stderr[-2000:]}"
    return json.loads(lines[-1]), ""


def write_sparse(paths, dense_rows: int) -> None:
    """The cgroup's source, ``sources.MATMUL[paths.size]`` weights of ``[dim, dim]``, stored
    sparse: each weight's first ``dense_rows`` rows random, the rest a hole of its data
    file (zeros to every reader, no disk space)."""
    import numpy as np
    from onnx import TensorProto, helper, save

    n, dim = sources.MATMUL[paths.size]
    folder = os.path.dirname(paths.matmul)
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(43)
    nbytes = dim * dim * 4
    inits, nodes, x = [], [], "X"
    with open(paths.matmul_data, "wb") as f:
        for i in range(n):
            f.seek(i * nbytes)
            dense = rng.standard_normal((dense_rows, dim), dtype=np.float32)
            f.write((dense * np.float32(dim**-0.5)).tobytes())
            t = TensorProto(name=f"W{i}", data_type=TensorProto.FLOAT, dims=[dim, dim])
            sources._external(t, sources.DATA, i * nbytes, nbytes)
            inits.append(t)
            y = "Y" if i == n - 1 else f"H{i}"
            nodes.append(helper.make_node("MatMul", [x, f"W{i}"], [y], name=f"matmul{i}"))
            x = y
        f.truncate(n * nbytes)
    graph = helper.make_graph(
        nodes,
        "matmul_chain",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    save(model, paths.matmul)


def largest_parts() -> int:
    """Bytes of the quantized parts of one ``[4096, 4096]`` float32 weight (4 bits, blocks
    of 128, asymmetric): what the writer holds of a weight at once."""
    from onnx_light.onnx._dtypes import FLOAT
    from onnx_light.onnx._write.quantize import Quantization

    q = Quantization("MatMulNBits", FLOAT, (4096, 4096), 4, 128, False)
    return sum(q.nbytes(part) for part in q.outputs())


def weights_mib(size: str) -> float:
    n, dim = sources.MATMUL[size]
    return n * dim * dim * 4 / MiB


def _mib(x) -> str:
    return "-" if x is None else f"{x / MiB:.1f}"


def measure_sizes(args) -> list[dict]:
    rows = []
    for r in range(args.rounds):
        order = list(args.sizes)
        random.Random(r).shuffle(order)
        for size in order:
            paths = sources.Paths(args.workdir, size)
            warm(paths.files(["matmul"]))
            os.sync()
            rec, err = _worker("quantize", args.workdir, size)
            if rec is None:
                raise RuntimeError(f"quantize [{size}] failed: {err}")
            log(
                f"  round {r + 1} {size}: peak +{_mib(rec['peak'])} MiB (anon "
                f"+{_mib(rec['anon'])}, file +{_mib(rec['file'])}), {rec['seconds']:.1f} s"
            )
            rows.append({"part": "sizes", "round": r + 1, "size": size, "tool": "onnx-light"})
            rows[-1].update({k: rec[k] for k in ("seconds", "cpu", "peak", "anon", "file")})
            rows[-1]["exact"] = rec["exact"]
    return rows


def measure_cgroup(args) -> list[dict]:
    rows = []
    limit = args.cgroup_limit_mib * MiB
    paths = sources.Paths(args.workdir, args.cgroup_size)
    for op, tool in (("quantize", "onnx-light"), ("ort_quantize", "onnxruntime")):
        os.sync()
        evict(paths.files(["matmul"]))  # only the source's pages
        with cgroup.MemoryCgroup(limit, "onnx-light-quantize") as cg:
            t0 = time.perf_counter()
            rec, err = _worker(op, args.workdir, args.cgroup_size, cg)
            wall = time.perf_counter() - t0
            kills, peak = cg.oom_kills(), cg.peak()
        outcome = "completed" if rec is not None else "OOM-killed" if kills else "failed"
        log(f"  cgroup {tool}: {outcome} after {wall:.0f} s, cgroup peak {_mib(peak)} MiB")
        if rec is None and not kills:
            log(err)
        row = {"part": "cgroup", "round": 1, "size": args.cgroup_size, "tool": tool}
        row.update(outcome=outcome, process_seconds=round(wall, 1), cg_peak=peak, oom_kills=kills)
        if rec is not None:
            row.update({k: rec[k] for k in ("seconds", "cpu", "peak", "anon", "file", "exact")})
        rows.append(row)
    return rows


def render(args, rows: list[dict], parts: int, command: str, started: str) -> tuple[str, bool]:
    bound = SLACK + parts
    lines = [
        "# The quantizer's memory does not grow with the model",
        "",
        f"measured at {measured_commit()}, {started} UTC; {describe_machine()}",
        "",
        f"command: `{command}`",
        "",
        "Sources: chains of MatMul on float32 `[4096, 4096]` weights (64 MiB each), two "
        "files; `onnxl.quantize_weights(src, dst)` with its defaults (4 bits, blocks of 128, "
        "asymmetric) in a fresh process per run (`benchmarks/worker.py quantize`), the "
        f"sizes in a new seeded order each round ({args.rounds} rounds), each source read "
        "once just before. The machine was busy with other work during the runs (2 CPUs "
        "shared): the times say little, the memory figures are the kernel's.",
        "",
        f"Bound: 64 MiB plus the largest weight's quantized parts ({parts / MiB:.2f} MiB) "
        f"= {bound / MiB:.2f} MiB of peak RSS growth.",
        "",
        "| size | weights (MiB) | round | peak RSS growth (MiB) | RssAnon growth | "
        "RssFile growth | time (s) | CPU (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sized = [r for r in rows if r["part"] == "sizes"]
    for r in sorted(sized, key=lambda r: (weights_mib(r["size"]), r["round"])):
        lines.append(
            f"| {r['size']} | {weights_mib(r['size']):.0f} | {r['round']} | {_mib(r['peak'])} "
            f"| {_mib(r['anon'])} | {_mib(r['file'])} | {r['seconds']:.1f} | {r['cpu']:.1f} |"
        )
    medians = {s: statistics.median(r["peak"] for r in sized if r["size"] == s) for s in args.sizes}
    small, large = sorted(args.sizes, key=weights_mib)
    peaks = [r["peak"] for r in sized]
    under = max(peaks) <= bound
    same = abs(medians[large] - medians[small]) <= SAME
    lines += [
        "",
        f"- Median peak growth: {medians[small] / MiB:.1f} MiB at {small}, "
        f"{medians[large] / MiB:.1f} MiB at {large} ({weights_mib(large) / weights_mib(small):g}x "
        f"the weights): {'the same' if same else 'NOT the same'} (within "
        f"{SAME // MiB} MiB: {abs(medians[large] - medians[small]) / MiB:.1f} MiB apart).",
        f"- Highest peak growth of every run: {max(peaks) / MiB:.1f} MiB, "
        f"{'under' if under else 'OVER'} the bound of {bound / MiB:.2f} MiB.",
        f"- The kernel's peak (`VmHWM` reset through `clear_refs`) in every run: "
        f"{all(r['exact'] for r in sized)}.",
    ]
    ok = under and same
    cg_rows = [r for r in rows if r["part"] == "cgroup"]
    if cg_rows:
        lines += [
            "",
            f"## {args.cgroup_size} of float32 weights in a {args.cgroup_limit_mib} MiB memory "
            "cgroup",
            "",
            "Each tool in a memory cgroup of its own (the limit counts the page cache, no "
            "swap; made for the run, removed after), the source's pages evicted first so "
            "each reads it through its cgroup; one run each."
            + (
                f" The source is stored sparse (the disk had no room for it): each weight's "
                f"first {args.sparse_rows} rows are random, the rest are zeros read from holes "
                "of its data file; every reader sees, reads and quantizes all its bytes."
                if args.sparse_rows
                else ""
            ),
            "",
            "| tool | outcome | process time (s) | peak RSS growth (MiB) | cgroup peak (MiB) "
            "| OOM kills |",
            "|---|---|---|---|---|---|",
        ]
        for r in cg_rows:
            lines.append(
                f"| {r['tool']} | {r['outcome']} | {r['process_seconds']} | "
                f"{_mib(r.get('peak'))} | {_mib(r['cg_peak'])} | {r['oom_kills']} |"
            )
        light, ort = cg_rows
        cg_ok = light["outcome"] == "completed" and ort["outcome"] == "OOM-killed"
        lines += [
            "",
            f"- onnx-light {light['outcome']}, onnxruntime's quantizer {ort['outcome']}: "
            f"{'as claimed' if cg_ok else 'NOT as claimed'}.",
        ]
        ok = ok and cg_ok
    lines += ["", f"Verdict: {'the claim holds' if ok else 'the claim does NOT hold'}."]
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    command = "benchmarks/proofs/quantize_memory.py " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    os.makedirs(args.workdir, exist_ok=True)
    sources.ensure(args.workdir, [], [], log, matmul=args.sizes)
    need = list(args.sizes)
    if args.cgroup:
        need.append(args.cgroup_size)
        if args.sparse_rows:
            write_sparse(sources.Paths(args.workdir, args.cgroup_size), args.sparse_rows)
        else:
            sources.ensure(args.workdir, [], [], log, matmul=[args.cgroup_size])
    try:
        rows = measure_sizes(args)
        if args.cgroup:
            rows += measure_cgroup(args)
    finally:
        if args.remove_sources:
            for size in need:
                shutil.rmtree(os.path.join(args.workdir, f"matmul-{size}"), ignore_errors=True)
    text, ok = render(args, rows, largest_parts(), command.strip(), started)
    fields = ["part", "round", "size", "tool", "outcome", "seconds", "process_seconds", "cpu"]
    fields += ["peak", "anon", "file", "exact", "cg_peak", "oom_kills"]
    write_report(args.output, text, rows, fields)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
