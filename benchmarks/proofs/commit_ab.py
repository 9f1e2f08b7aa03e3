"""The re-align at two commits, side by side: is a row's miss the code or the machine?

Usage (run by hand, not by CI)::

    .venv/bin/python benchmarks/proofs/commit_ab.py [--base a264905] [--rounds 21]
        [--workdir /var/tmp/bench-rows] [--sizes tiny,96MiB]
        [--output benchmarks/proofs/results/commit_ab.md]

``align_external_data_streaming`` of the suite's two-file sources (``make
bench`` builds them in the work dir) is measured with this tree's code and with
the code of ``--base`` (``git archive`` of its ``onnx_light`` into a temporary
folder), beside ``shutil.copyfile`` of the ``.data`` (the kernel's copy, the
row's floor). Each measurement runs in a fresh process that imports the tree it
is given (never the installed package) and re-aligns the ``tiny`` source once
before the measured call; the three run in a new seeded order each round, with
earlier writes flushed, as ``make bench`` does (nothing on the machine
changed). The
``tiny`` source (40 KiB of weights) shows what a call costs beyond its bytes.

The report gives, per source, each one's time (min, median, max), and the
per-round ratios (this tree / the base, each / the copy) with the verdict of
:func:`benchmarks.harness.compare` (ranked only when every round of one is below
every round of the other).
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
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # the checkout: benchmarks.*

from benchmarks.text import (  # noqa: E402
    measured_commit,
    ratio_line,
    report_path,
    short_commit,
    spread,
    write_report,
)

COPY = "copyfile"
_CHILD = """
import json, os, shutil, sys, tempfile, time
tree, src, tiny, out = sys.argv[1:5]
if tree != "copyfile":
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, tree)
    import onnx_light.onnx as ol
    assert ol.__file__.startswith(tree), ol.__file__

def run(source):
    folder = tempfile.mkdtemp(dir=out)
    dst = os.path.join(folder, "model.onnx")
    t, c = time.perf_counter(), time.process_time()
    if tree == "copyfile":
        shutil.copyfile(source + ".data", dst + ".data")
    else:
        ol.align_external_data_streaming(source, dst, "model.onnx.data", 4096)
    seconds, cpu = time.perf_counter() - t, time.process_time() - c
    shutil.rmtree(folder)
    return seconds, cpu

run(tiny)
seconds, cpu = run(src)
print(json.dumps({"seconds": seconds, "cpu": cpu}))
"""


def _base_tree(commit: str, folder: str) -> str:
    """``commit``'s ``onnx_light`` extracted into ``folder``; the folder."""
    archive = subprocess.run(
        ["git", "archive", commit, "onnx_light"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def _measure(tree: str, src: str, tiny: str, out: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, tree, src, tiny, out], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def _report(results: dict, names: dict, sizes: list[str], rounds: int, header: list[str]) -> str:
    lines = [*header]
    for size in sizes:
        res = results[size]
        lines += [
            "",
            f"## two-{size}",
            "",
            "| source | run | time, ms: min (median, max) | CPU, ms (median) |",
            "|---|---|---|---|",
        ]
        for key, name in names.items():
            ms = [s * 1000 for s in res[key]["seconds"]]
            cpu = statistics.median(res[key]["cpu"]) * 1000
            lines.append(f"| two-{size} | {name} | {spread(ms)} | {cpu:.1f} |")
        head, base = list(names)[:2]
        lines += [
            "",
            "| source | per-round ratio | min (median, max) | verdict |",
            "|---|---|---|---|",
        ]
        for a, b in ((head, base), (head, COPY), (base, COPY)):
            lines.append(
                ratio_line(f"two-{size}", res[a]["seconds"], res[b]["seconds"], names[a], names[b])
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", default="a264905", help="the commit to compare with")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--workdir", default="/var/tmp/bench-rows", help="make bench's sources")
    p.add_argument("--sizes", default="tiny,96MiB", help="two-file sources of the work dir")
    p.add_argument("--output", default=report_path("commit_ab.md"))
    args = p.parse_args(argv)
    from benchmarks.harness import describe_machine

    sizes = [s for s in args.sizes.split(",") if s]
    tiny = os.path.join(args.workdir, "two-tiny", "model.onnx")
    for size in sizes:
        if not os.path.exists(os.path.join(args.workdir, f"two-{size}", "model.onnx")):
            print(f"no two-{size} source in {args.workdir}: run make bench first", file=sys.stderr)
            return 2
    head = measured_commit()
    base = short_commit(args.base)
    names = {"head": "this tree", "base": "the base", COPY: "shutil.copyfile"}
    out = tempfile.mkdtemp(prefix="commit-ab-", dir=args.workdir)
    base_tree = tempfile.mkdtemp(prefix="commit-ab-base-")
    trees = {"head": ROOT, "base": base_tree, COPY: COPY}
    results = {s: {k: {"seconds": [], "cpu": []} for k in trees} for s in sizes}
    rng = random.Random(0)
    began = time.perf_counter()
    try:
        _base_tree(args.base, base_tree)
        for i in range(args.rounds):
            for size in sizes:
                src = os.path.join(args.workdir, f"two-{size}", "model.onnx")
                order = list(trees)
                rng.shuffle(order)
                for key in order:
                    os.sync()  # no write-back of an earlier output overlaps
                    rec = _measure(trees[key], src, tiny, out)
                    results[size][key]["seconds"].append(rec["seconds"])
                    results[size][key]["cpu"].append(rec["cpu"])
            print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(base_tree, ignore_errors=True)
    command = "benchmarks/proofs/commit_ab.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = [
        "# The re-align at two commits, side by side",
        "",
        f"machine: {describe_machine()} ({head}), {when}",
        "",
        f"command: `.venv/bin/python {command.strip()}` "
        f"({(time.perf_counter() - began) / 60:.1f} min)",
        "",
        f"this tree: {head}{' (+: with changes not committed)' if head.endswith('+') else ''}; "
        f"the base: {base}.",
        "",
        f"{args.rounds} rounds; in each, the three runs in a new seeded order, each in a "
        "fresh process importing its own tree, the tiny source re-aligned once first. "
        "Times are wall clock; a ratio is taken within a round.",
    ]
    text = _report(results, names, sizes, args.rounds, header)
    write_report(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
