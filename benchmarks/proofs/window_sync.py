"""Where the re-align in a memory cgroup spends its time: the drop-behind window's sync.

Usage (run by hand as root, not by CI; the cold groups of ``make bench`` build
the source)::

    .venv/bin/python benchmarks/proofs/window_sync.py [--workdir /var/tmp/bench-cold]
        [--size 8GiB] [--rounds 3] [--fraction 0.25]
        [--output benchmarks/proofs/results/window_sync.md]

The ``cgroup`` row of the cold report re-aligns an 8 GiB model in a memory
cgroup of a quarter of it. The default copy then drops both files behind it
(the copy exceeds the cgroup's room): every 64 MiB window of the destination
is written to the disk (``fdatasync``) before it is dropped, and the copy
waits for it. ``cp`` leaves its write-back to the kernel, which writes while
``cp`` reads. This script measures that split, as the suite measures the row
(the source's files evicted from the page cache, nothing else; the canary
read in a fresh cgroup, then the run in it, its outputs flushed after the
measure), for four runs in a new seeded order each round:

- ``cp``: coreutils ``cp`` of the ``.data``;
- ``default``: ``align_external_data_streaming(4096)`` (here ``drop_behind=True``);
- ``source``: the same with only the source's ranges dropped (no ``fdatasync``:
  the setting the default takes for a cold source that fits in the memory);
- ``keep``: the same with ``drop_behind=False``.

Each run reports its time, its time to disk (the ``fsync`` of the outputs
added), the time its threads spent in ``fdatasync`` (``os.fdatasync`` wrapped
in the child: the copy engine looks it up at each call), how much of the
canary left the page cache, and the cgroup's peak.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # the checkout: benchmarks.*

from benchmarks import cgroup, sources  # noqa: E402
from benchmarks.text import report_path, spread, write_report  # noqa: E402

RUNS = ("cp", "default", "source", "keep")
NAMES = {
    "cp": "cp of the .data",
    "default": "align (default: drop_behind=True here)",
    "source": "align, the source's ranges dropped only",
    "keep": "align, drop_behind=False",
}
_CHILD = """
import json, os, subprocess, sys, time
run, src, out = sys.argv[1:4]
synced = {"n": 0, "s": 0.0}
real = os.fdatasync

def timed(fd):
    t = time.perf_counter()
    try:
        return real(fd)
    finally:
        synced["n"] += 1
        synced["s"] += time.perf_counter() - t

os.fdatasync = timed
model, data = os.path.join(out, "model.onnx"), os.path.join(out, "model.onnx.data")
if run != "cp":
    import onnx_light.onnx as ol
    from onnx_light.onnx._system.memory import SOURCE
    opts = ol.WriteOptions()
    # the engine's own value for "the source's pages only", set as it is (not a bool)
    opts.drop_behind = {"default": None, "source": SOURCE, "keep": False}[run]
t = time.perf_counter()
if run == "cp":
    subprocess.run(["cp", src + ".data", data], check=True)
else:
    ol.align_external_data_streaming(src, model, "model.onnx.data", 4096, options=opts)
seconds = time.perf_counter() - t
for path in (model, data):
    if os.path.exists(path):
        fd = os.open(path, os.O_RDONLY)
        try:
            real(fd)
        finally:
            os.close(fd)
print(json.dumps({"seconds": seconds, "to_disk": time.perf_counter() - t,
                  "sync_s": synced["s"], "sync_n": synced["n"]}))
"""


def _measure(run: str, src: str, out: str, canary: str, limit: int, evict) -> dict:
    """One cold run in a fresh memory cgroup of ``limit`` bytes."""
    os.sync()
    evict([src, src + ".data"])
    with cgroup.MemoryCgroup(limit) as cg:
        subprocess.run(["cat", canary], stdout=subprocess.DEVNULL, check=True, preexec_fn=cg.enter)
        before = cgroup.resident(canary)
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, run, src, out],
            capture_output=True,
            text=True,
            preexec_fn=cg.enter,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{run}: {done.stderr[-3000:]}")
        rec = json.loads(done.stdout.splitlines()[-1])
        after = cgroup.resident(canary)
        rec["canary"] = None if None in (before, after) else (before - after) / sources.MiB
        rec["cg_peak"] = (cg.peak() or 0) / sources.MiB
    for name in os.listdir(out):
        os.unlink(os.path.join(out, name))
    return rec


def _ms(values: list[float]) -> str:
    return spread(values) if values and None not in values else "-"


def _report(results: dict, header: list[str]) -> str:
    lines = [
        *header,
        "",
        "| run | time (s) | time to disk (s) | in fdatasync (s) | fdatasync calls "
        "| canary evicted (MiB) | cgroup peak (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in RUNS:
        r = results[run]
        calls = statistics.median(r["sync_n"])
        lines.append(
            f"| {NAMES[run]} | {_ms(r['seconds'])} | {_ms(r['to_disk'])} | {_ms(r['sync_s'])} "
            f"| {calls:.0f} | {_ms(r['canary'])} | {_ms(r['cg_peak'])} |"
        )
    lines += [
        "",
        "| run | per-round ratio to cp's | time: min (median, max) | time to disk |",
        "|---|---|---|---|",
    ]
    cp = results["cp"]
    for run in RUNS[1:]:
        r = results[run]
        ratios = [a / b for a, b in zip(r["seconds"], cp["seconds"], strict=True)]
        disk = [a / b for a, b in zip(r["to_disk"], cp["to_disk"], strict=True)]
        lines.append(f"| {NAMES[run]} | vs cp | {spread(ratios)} | {spread(disk)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workdir", default="/var/tmp/bench-cold", help="the cold groups' sources")
    p.add_argument("--size", default="8GiB", help="the two-file source of the work dir")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fraction", type=float, default=0.25, help="cgroup limit / model size")
    p.add_argument("--output", default=report_path("window_sync.md"))
    args = p.parse_args(argv)
    why = cgroup.cgroup_unavailable()
    if why:
        print(f"cannot measure: {why}", file=sys.stderr)
        return 2
    from benchmarks.harness import describe_machine, evict

    src = os.path.join(args.workdir, f"two-{args.size}", sources.MODEL)
    canary = os.path.join(args.workdir, sources.CANARY)
    if not (os.path.exists(src) and os.path.exists(canary)):
        print(f"no two-{args.size} source or canary in {args.workdir}", file=sys.stderr)
        print("run: benchmarks/run.py --only cgroup --cgroup --workdir ... first", file=sys.stderr)
        return 2
    limit = max(int(args.fraction * sources.nbytes(args.size)), 512 * sources.MiB)  # as run.py
    keys = ("seconds", "to_disk", "sync_s", "sync_n", "canary", "cg_peak")
    results = {r: {k: [] for k in keys} for r in RUNS}
    out = tempfile.mkdtemp(prefix="window-sync-", dir=args.workdir)
    rng = random.Random(0)
    began = time.perf_counter()
    try:
        for i in range(args.rounds):
            order = list(RUNS)
            rng.shuffle(order)
            for run in order:
                rec = _measure(run, src, out, canary, limit, evict)
                for k in keys:
                    results[run][k].append(rec[k])
            print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(out)
    command = "benchmarks/proofs/window_sync.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = [
        "# The re-align in a memory cgroup: where its time goes",
        "",
        f"machine: {describe_machine()}, {when}",
        "",
        f"command: `.venv/bin/python {command.strip()}` "
        f"({(time.perf_counter() - began) / 60:.1f} min)",
        "",
        f"two-{args.size} source; cgroup limit {limit / sources.MiB:.0f} MiB (page cache "
        f"included). {args.rounds} rounds; in each, the four runs in a new seeded order, "
        "each cold (earlier writes flushed, the source's files evicted from the page "
        "cache, nothing else), the 1 GiB canary read in a fresh cgroup, then the run in it. Each cell: "
        "min (median, max) over the rounds; a ratio is taken within a round. 'in "
        "fdatasync': the time the run's threads spent waiting in it, summed.",
    ]
    text = _report(results, header)
    write_report(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
