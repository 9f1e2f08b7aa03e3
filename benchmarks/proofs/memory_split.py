"""A peak RSS split into anonymous and file-backed memory, for the rows whose peer maps.

Usage (run by hand, not by CI)::

    .venv/bin/python benchmarks/proofs/memory_split.py [--rounds 3]
        [--workdir /var/tmp/memsplit] [--size 1GiB] [--ops dedup,ir_dedup]
        [--output benchmarks/proofs/results/memory_split.md]

The suite's memory rows give the kernel's peak RSS growth (``VmHWM``), which
counts anonymous pages (the process's own: weights read into it) and
file-backed ones (pages of mapped files, the page cache's, shared and
reclaimable) together, as ``/usr/bin/time``'s maximum RSS does. onnx-light's
writers map no weights, and onnx reads them into the process, so their peaks
are anonymous memory; onnx-ir reads external data through ``mmap``, so its
peak may hold file-backed pages. Here each operation runs as ``make bench``
runs it (``benchmarks/worker.py OP WORKDIR SIZE --timeline``: a fresh process,
the ``tiny`` source first, the kernel's peak and ``RssAnon`` / ``RssFile``
sampled every millisecond), in a new seeded order each round, and the report
gives the three figures apart. The sources are ``make bench``'s, written into
the work dir (``benchmarks/sources.py``) when missing.
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
BENCH = os.path.join(ROOT, "benchmarks")
sys.path.insert(0, ROOT)  # the checkout: benchmarks.*
sys.path.insert(1, BENCH)  # the suite's modules, as worker.py imports them

from benchmarks.text import measured_commit, report_path, write_report  # noqa: E402

MiB = 2**20
FIGURES = {
    "peak": "peak RSS growth (VmHWM)",
    "anon": "RssAnon growth (sampled peak)",
    "file": "RssFile growth (sampled peak)",
}


def _measure(op: str, workdir: str, size: str) -> dict:
    done = subprocess.run(
        [sys.executable, os.path.join(BENCH, "worker.py"), op, workdir, size, "--timeline"],
        capture_output=True,
        text=True,
        env=dict(os.environ, OPENBLAS_NUM_THREADS="1"),  # no idle BLAS threads spinning
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{op}: {done.stderr[-3000:]}")
    return json.loads(lines[-1])


def _cell(values: list[float]) -> str:
    """``median (min-max)`` in MiB."""
    mib = [v / MiB for v in values]
    return f"{statistics.median(mib):.1f} ({min(mib):.1f}-{max(mib):.1f})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workdir", default="/var/tmp/memsplit", help="make bench's sources")
    p.add_argument("--size", default="1GiB")
    p.add_argument("--ops", default="dedup,ir_dedup", help="benchmarks/ops.py's operations")
    p.add_argument("--output", default=report_path("memory_split.md"))
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    import sources
    from ops import OPS

    from benchmarks.harness import describe_machine

    ops = [op for op in args.ops.split(",") if op]
    unknown = [op for op in ops if op not in OPS]
    if unknown:
        p.error(f"unknown operations {unknown}; known: {', '.join(OPS)}")
    workdir = os.path.abspath(args.workdir)
    sources.ensure(
        workdir, [args.size], [], pair=[args.size], log=lambda m: print(m, file=sys.stderr)
    )
    results = {op: {f: [] for f in FIGURES} for op in ops}
    rng = random.Random(0)
    began = time.perf_counter()
    for i in range(args.rounds):
        order = list(ops)
        rng.shuffle(order)
        for op in order:
            rec = _measure(op, workdir, args.size)
            for f in FIGURES:
                results[op][f].append(rec[f])
        print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    command = "benchmarks/proofs/memory_split.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# Peak memory, anonymous and file-backed apart",
        "",
        f"machine: {describe_machine()} ({measured_commit()}), {when}",
        "",
        f"command: `.venv/bin/python {command.strip()}` "
        f"({(time.perf_counter() - began) / 60:.1f} min)",
        "",
        f"| operation | size | {' | '.join(f'{name}, MiB' for name in FIGURES.values())} |",
        "|---|---|---|---|---|",
    ]
    for op in ops:
        cells = " | ".join(_cell(results[op][f]) for f in FIGURES)
        lines.append(f"| {op} | {args.size} | {cells} |")
    lines += [
        "",
        f"{args.rounds} rounds; in each, every operation once in a new seeded order, each in a "
        "fresh process (`benchmarks/worker.py OP WORKDIR SIZE --timeline`, as `make bench` "
        "runs it; the operations are `benchmarks/ops.py`'s). Values: median (min-max) over "
        "the rounds. Peak RSS growth: the kernel's `VmHWM`, reset through "
        "`/proc/self/clear_refs`, minus the RSS before the call: anonymous and file-backed "
        "pages together. RssAnon / RssFile growth: the highest of `/proc/self/status`'s "
        "values sampled every millisecond during the call, minus the first sample: the "
        "process's own memory, and the pages of files it maps (the page cache's: shared, "
        "dropped by the kernel under pressure). A sampled peak can miss a spike shorter "
        "than a millisecond; the two sampled peaks need not fall at the same moment, so "
        "they need not add up to the kernel's.",
    ]
    write_report(args.output, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
