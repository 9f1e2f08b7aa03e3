"""What drop_behind's default on a cold source costs the next step.

Usage::

    .venv/bin/python benchmarks/proofs/cold_proof.py --workdir /var/tmp/bench-cold2 \\
        --size 4GiB --rounds 3

Each measurement is a pair of fresh processes, the source's two files evicted
from the page cache first (``benchmarks.harness.evict``: nothing else on the
machine is touched): a cold re-align of ``two-SIZE`` (the source of
``benchmarks/run.py``'s cold row) keeping both files cached
(``drop_behind=False``, the old default here: the copy fits the memory),
dropping both (``True``) or with the default (``None``: the source's pages
only, the source being cold), then, right after it, the step a user
takes next on the output: an onnxruntime ``InferenceSession`` or
``onnx_light.onnx.load``. Rounds interleave the four cases in a seeded
shuffle (``--defaults`` and ``--steps`` pick the cases). ``--warm N``
instead runs N interleaved rounds of the warm re-align (source read just
before) with today's default and with the memory rule alone, and prints
them: the cost of probing the cache. Writes ``benchmarks/proofs/results/cold_proof.md``
(``--output``): each figure as min (median, max).
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

from benchmarks import cgroup  # noqa: E402
from benchmarks.harness import evict  # noqa: E402
from benchmarks.text import report_path, short_commit, spread, write_report  # noqa: E402

GiB = 1024**3
# the drop_behind of each case, as the align child evaluates it
DEFAULTS = {"keep": "False", "both": "True", "new": "None"}
NAMES = {
    "keep": "keep both (`False`: the old default, the copy fits the memory)",
    "both": "drop both (`True`; what `None` did at 0093d38)",
    "new": "`None`: drops the source's pages only (`SOURCE`), the source being cold",
}

ALIGN = """
import json, os, sys, time
import onnx_light.onnx as onnxl
import onnx_light.onnx._write.shards as shards
src, dst, drop = sys.argv[1], sys.argv[2], eval(sys.argv[3])
seen = []
real = shards.drop_by_default
shards.drop_by_default = lambda *a: seen.append(real(*a)) or seen[-1]
opts = onnxl.WriteOptions(drop_behind=drop)
c0, t0 = os.times(), time.perf_counter()
onnxl.align_external_data_streaming(src, dst, "model.onnx.data", 4096, options=opts)
t1, c1 = time.perf_counter(), os.times()
fd = os.open(dst + ".data", os.O_RDONLY)
os.fsync(fd)
t2 = time.perf_counter()
from onnx_light.onnx._system.cache import resident
cached = resident(fd, 0, os.fstat(fd).st_size)
os.close(fd)
print(json.dumps({"seconds": t1 - t0, "to_disk": t2 - t0,
    "cpu": c1.user - c0.user + c1.system - c0.system,
    "dropped": seen[0] if seen else drop, "output_cached": cached}))
"""

NEXT = {
    "ort": """
import json, os, sys, time
import onnxruntime as ort
c0, t0 = os.times(), time.perf_counter()
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
t1, c1 = time.perf_counter(), os.times()
print(json.dumps({"seconds": t1 - t0, "cpu": c1.user - c0.user + c1.system - c0.system}))
""",
    "load": """
import json, os, sys, time
import onnx_light.onnx as onnxl
c0, t0 = os.times(), time.perf_counter()
m = onnxl.load(sys.argv[1])
t1, c1 = time.perf_counter(), os.times()
print(json.dumps({"seconds": t1 - t0, "cpu": c1.user - c0.user + c1.system - c0.system}))
""",
}
LABELS = {
    "ort": "onnxruntime.InferenceSession(output)",
    "load": "onnx_light.onnx.load(output) (weights read into memory)",
}


WARM = """
import json, os, sys, time
import onnx_light.onnx as onnxl
import onnx_light.onnx._write.shards as shards
from onnx_light.onnx._system.memory import available_memory
src, dst, rule = sys.argv[1], sys.argv[2], sys.argv[3]
if rule == "memory":  # the default before the cold-source rule: the memory rule alone
    shards.drop_by_default = lambda n, *a: n > (available_memory() or n)
t0 = time.perf_counter()
onnxl.align_external_data_streaming(src, dst, "model.onnx.data", 4096)
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def warm_ab(src: str, folder: str, rounds: int) -> dict[str, list[float]]:
    """The warm re-align with today's default and with the memory rule alone,
    interleaved, the source read before each (it stays cached)."""
    times: dict[str, list[float]] = {"now": [], "memory": []}
    rng = random.Random(292)
    for r in range(rounds):
        for rule in rng.sample(list(times), 2) if r else list(times):
            shutil.rmtree(folder, ignore_errors=True)
            os.makedirs(folder)
            os.sync()
            with open(src + ".data", "rb") as f:
                while f.read(8 << 20):
                    pass
            rec = child(WARM, src, os.path.join(folder, "model.onnx"), rule)
            times[rule].append(rec["seconds"])
            print(f"[warm {r + 1}/{rounds}] {rule:6} {rec['seconds']:.3f} s", flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return times


def child(code: str, *args: str) -> dict:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def one(src: str, folder: str, default: str, step: str) -> dict:
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    os.sync()
    evict([src, src + ".data"])
    dst = os.path.join(folder, "model.onnx")
    rec = {"align": child(ALIGN, src, dst, DEFAULTS[default])}
    rec["next"] = child(NEXT[step], dst)
    shutil.rmtree(folder, ignore_errors=True)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--size", default="4GiB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", default="ort,load")
    ap.add_argument("--defaults", default=",".join(DEFAULTS), help="of " + ", ".join(DEFAULTS))
    ap.add_argument("--warm", type=int, default=0, help="instead: N rounds of the warm A/B")
    ap.add_argument("--output", default=report_path("cold_proof.md"))
    args = ap.parse_args(argv)
    if args.warm:
        src = os.path.join(args.workdir, f"two-{args.size}", "model.onnx")
        times = warm_ab(src, os.path.join(args.workdir, "out", "warm_ab"), args.warm)
        for rule, values in times.items():
            print(f"warm re-align, {rule}: {spread(values)} s")
        return 0
    reason = cgroup.unavailable()
    if reason:
        print(f"cannot measure cold: {reason}", file=sys.stderr)
        return 2
    src = os.path.join(args.workdir, f"two-{args.size}", "model.onnx")
    steps = args.steps.split(",")
    defaults = args.defaults.split(",")
    cases = [(d, s) for s in steps for d in defaults]
    records: dict[tuple[str, str], list[dict]] = {c: [] for c in cases}
    rng = random.Random(29)
    for r in range(args.rounds):
        order = list(cases) if r == 0 else rng.sample(cases, len(cases))
        for default, step in order:
            rec = one(src, os.path.join(args.workdir, "out", "cold_proof"), default, step)
            records[default, step].append(rec)
            a, n = rec["align"], rec["next"]
            print(
                f"[{r + 1}/{args.rounds}] {default:3} {step:4} align {a['seconds']:.2f} s "
                f"(disk {a['to_disk']:.2f}, cpu {a['cpu']:.2f}, dropped {a['dropped']}, "
                f"out cached {a['output_cached']:.2f}); next {n['seconds']:.2f} s "
                f"(cpu {n['cpu']:.2f})",
                flush=True,
            )
    write_report(args.output, report(args, records, steps, defaults))
    return 0


def report(args, records, steps, defaults) -> str:
    def s(values):
        return spread(values) + " s"

    lines = [
        "# The cold re-align's default and the step after it",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {short_commit()}"
        f", {os.cpu_count()} cores; source `two-{args.size}` of `{args.workdir}`; "
        f"{args.rounds} rounds, fresh processes, cases interleaved (seeded shuffle); "
        "before each pair: `sync`, the source's two files evicted from the page cache "
        "(fsync, then posix_fadvise DONTNEED; nothing else on the machine touched).",
        "",
        "command: `benchmarks/proofs/cold_proof.py --workdir "
        f"{args.workdir} --size {args.size} --rounds {args.rounds}`",
        "",
        "Figures: min (median, max).",
        "",
        "| drop_behind | next step | re-align | re-align to disk | re-align CPU "
        "| share of the output cached after | next step | next step CPU | re-align + next step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for step in steps:
        for default in defaults:
            recs = records[default, step]
            al = [r["align"] for r in recs]
            nx = [r["next"] for r in recs]
            cached = [a["output_cached"] for a in al if a["output_cached"] is not None]
            lines.append(
                f"| {NAMES[default]} | {LABELS[step]} | {s([a['seconds'] for a in al])} "
                f"| {s([a['to_disk'] for a in al])} | {s([a['cpu'] for a in al])} "
                f"| {spread(cached)} "
                f"| {s([n['seconds'] for n in nx])} | {s([n['cpu'] for n in nx])} "
                f"| {s([a['seconds'] + n['seconds'] for a, n in zip(al, nx, strict=True)])} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
