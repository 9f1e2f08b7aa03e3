"""The two-file load beside ``onnx.load``: the same work, or a gap?

Usage (run by hand, not by CI)::

    .venv/bin/python benchmarks/proofs/load_ab.py [--rounds 15]
        [--workdir /var/tmp/bench-rows] [--sizes 96MiB,1GiB]
        [--output benchmarks/proofs/results/load_ab.md]

The suite's load row (``onnxl.load(num_threads=2)`` of its two-file model
against ``onnx.load``; ``make bench`` builds the sources in the work dir) has
a target of parity within a run's noise. Here both loads run side by side,
each in a fresh process, in a new seeded order each round, as ``make bench``
runs them: the measured source warm, earlier writes flushed, nothing on the
machine changed. Beside the wall time, each run reports what the kernel
counted for it (``getrusage``: user and system CPU, minor page faults;
``/proc/self/io``: bytes and calls of ``read``, the two reads of that file
included): where those are equal, the two loads do the same work, and a gap
between their times is the machine's. Each process loads the ``tiny`` source
first (imports and first calls paid, as ``worker.py`` does), and the loaded
model is freed after the clock stops.

The report gives, per source, each one's figures (min, median, max of the
time; medians of the rest) and the per-round ratio with the verdict of
:func:`benchmarks.harness.compare` (ranked only when every round of one is below
every round of the other).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # the checkout: benchmarks.*

from benchmarks.text import measured_commit, ratio_line, report_path, write_report  # noqa: E402

MiB = 2**20
LOADS = {"light": "onnxl.load(num_threads=2)", "onnx": "onnx.load"}
_CHILD = """
import json, resource, sys, time
which, path, tiny = sys.argv[1:4]
import onnx
import onnx_light.onnx as onnxl

def io():
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}

def call(p):
    return onnxl.load(p, num_threads=2) if which == "light" else onnx.load(p)

call(tiny)  # imports and first-call set-up paid before, as worker.py does
r0, i0 = resource.getrusage(resource.RUSAGE_SELF), io()
t = time.perf_counter()
model = call(path)
seconds = time.perf_counter() - t
r1, i1 = resource.getrusage(resource.RUSAGE_SELF), io()
del model  # freeing it is not the load's time
print(json.dumps({
    "seconds": seconds,
    "user": r1.ru_utime - r0.ru_utime,
    "sys": r1.ru_stime - r0.ru_stime,
    "minflt": r1.ru_minflt - r0.ru_minflt,
    "rchar": i1["rchar"] - i0["rchar"],
    "syscr": i1["syscr"] - i0["syscr"],
}))
"""
FIGURES = ("seconds", "user", "sys", "minflt", "rchar", "syscr")


def _measure(which: str, path: str, tiny: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, which, path, tiny],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),  # no idle BLAS threads spinning
    )
    if done.returncode != 0:
        raise RuntimeError(f"{which}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def _seconds(values: list[float]) -> str:
    """``min (median, max)`` in seconds, to the tenth of a millisecond."""
    return f"{min(values):.4f} ({statistics.median(values):.4f}, {max(values):.4f})"


def _report(results: dict, sizes: list[str], header: list[str]) -> str:
    lines = [*header]
    for size in sizes:
        res = results[size]
        lines += [
            "",
            f"## two-{size}",
            "",
            "| source | load | time: min (median, max), s | user CPU, s | system CPU, s "
            "| minor faults | read, MiB | read calls |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, name in LOADS.items():
            r = res[key]
            med = {k: statistics.median(r[k]) for k in FIGURES}
            lines.append(
                f"| two-{size} | {name} | {_seconds(r['seconds'])} "
                f"| {med['user']:.3f} | {med['sys']:.3f} | {med['minflt']:.0f} "
                f"| {med['rchar'] / MiB:.1f} | {med['syscr']:.0f} |"
            )
        seconds = (res["light"]["seconds"], res["onnx"]["seconds"])
        lines += [
            "",
            "| source | per-round ratio | min (median, max) | verdict |",
            "|---|---|---|---|",
            ratio_line(f"two-{size}", *seconds, LOADS["light"], LOADS["onnx"]),
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--workdir", default="/var/tmp/bench-rows", help="make bench's sources")
    p.add_argument("--sizes", default="96MiB,1GiB", help="two-file sources of the work dir")
    p.add_argument("--output", default=report_path("load_ab.md"))
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    from benchmarks.harness import describe_machine, warm

    workdir = os.path.abspath(args.workdir)
    sizes = [s for s in args.sizes.split(",") if s]
    paths = {s: os.path.join(workdir, f"two-{s}", "model.onnx") for s in sizes}
    tiny = os.path.join(workdir, "two-tiny", "model.onnx")
    for size, path in {**paths, "tiny": tiny}.items():
        if not os.path.exists(path):
            print(f"no two-{size} source in {args.workdir}: run make bench first", file=sys.stderr)
            return 2
    results = {s: {k: {f: [] for f in FIGURES} for k in LOADS} for s in sizes}
    rng = random.Random(0)
    began = time.perf_counter()
    for i in range(args.rounds):
        for size, path in paths.items():
            order = list(LOADS)
            rng.shuffle(order)
            for key in order:
                warm([path, path + ".data"])
                os.sync()
                rec = _measure(key, path, tiny)
                for f in FIGURES:
                    results[size][key][f].append(rec[f])
        print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    command = "benchmarks/proofs/load_ab.py " + " ".join(argv if argv is not None else sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = [
        "# The two-file load beside onnx.load",
        "",
        f"machine: {describe_machine()} ({measured_commit()}), {when}",
        "",
        f"command: `.venv/bin/python {command.strip()}` "
        f"({(time.perf_counter() - began) / 60:.1f} min)",
        "",
        f"{args.rounds} rounds; in each, both loads in a new seeded order, each in a fresh "
        "process, the source warm. Time is wall clock, a ratio is taken within a round; "
        "CPU and minor faults come from getrusage, the bytes and calls of read from "
        "/proc/self/io (medians over the rounds).",
    ]
    text = _report(results, sizes, header)
    write_report(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
