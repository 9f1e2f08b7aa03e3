"""What ``num_threads`` buys: the measurements behind its default.

Usage (run by hand, not by CI)::

    .venv/bin/python benchmarks/proofs/threads_proof.py [--workdir /var/tmp/threads] [--rounds 7]

Every call runs in a process of its own, in interleaved rounds
(:func:`benchmarks.harness.measure_rounds`, the method of ``make bench``):

- ``load`` of models laid out one file per tensor (what
  ``onnx.save(..., all_tensors_to_one_file=False)`` writes) and as two files,
  with ``num_threads`` 1, 2 and 4 (``load`` never runs more than one reader
  per data file, so the two-file model reads with one whatever is asked),
  *warm* (the files read just before) and *cold* (the files dropped from the
  page cache by :func:`benchmarks.harness.evict` before each run);
- ``save`` of a model held in memory into two files, with
  ``SerializeOptions.num_threads`` 1, 2 and 4 writers, into an emptied folder.

It prints a Markdown table (median and min-max of the rounds, the ratio of
medians against one thread) and, for each case, whether the ranking holds
beyond the rounds' spread (:func:`benchmarks.harness.compare`), and writes it to
``benchmarks/proofs/results/threads_proof.md`` (``--output``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import onnx

import onnx_light.onnx as onnxl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # the checkout: benchmarks.*

from benchmarks.harness import (  # noqa: E402
    compare,
    describe_machine,
    empty_folder,
    evict,
    make_gemm_model,
    measure_rounds,
    weights_nbytes,
)
from benchmarks.text import report_path, short_commit, write_report  # noqa: E402

MiB = 2**20
THREADS = (1, 2, 4)


def _files(folder: str) -> list[str]:
    return [os.path.join(folder, name) for name in os.listdir(folder)]


def _layouts(workdir: str) -> dict[str, tuple[str, int]]:
    """name -> (the model's path, its weights' bytes)."""
    out = {}
    for n, dim, layout in (
        (16, 1024, "per tensor"),
        (256, 256, "per tensor"),
        (32, 2048, "per tensor"),
        (16, 1024, "two files"),
    ):
        size = weights_nbytes(n, dim)
        name = f"{layout}, {n} x {dim}x{dim} ({size // MiB} MiB)"
        folder = os.path.join(workdir, name.replace(" ", "_").replace(",", "").replace("(", ""))
        folder = folder.replace(")", "")
        path = os.path.join(folder, "model.onnx")
        if not os.path.exists(path):
            empty_folder(folder)
            model = make_gemm_model(n, dim)
            if layout == "per tensor":
                onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=False)
            else:
                onnx.save(model, path, save_as_external_data=True, location="model.onnx.data")
        out[name] = (path, size)
    return out


def _row(label: str, rounds: list[float], one: list[float]) -> str:
    """A table row: median and range of the rounds, the per-round ratio to one thread
    (median and range; both measured in the same round), and the ranking."""
    med = statistics.median(rounds)
    paired = [a / b for a, b in zip(rounds, one, strict=True)]
    faster = sum(r < 1 for r in paired)
    c = compare("this", rounds, "one thread", one)
    if label.endswith(", 1"):
        verdict = "(the reference)"
    elif c.separated:
        verdict = "faster" if c.ratio < 1 else "slower"
    else:
        verdict = "within noise"
    return (
        f"| {label} | {med:.3f} s | {min(rounds):.3f}-{max(rounds):.3f} s "
        f"| {statistics.median(paired):.2f}x ({min(paired):.2f}-{max(paired):.2f}) "
        f"| {faster} of {len(paired)} | {verdict} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="/var/tmp/threads")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--output", default=report_path("threads_proof.md"), help="the report")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    models = _layouts(args.workdir)
    load_before = os.getloadavg()[0]
    commit = short_commit()
    lines = [
        "# num_threads: load and save with 1, 2 and 4 threads",
        "",
        f"machine: {describe_machine()} ({commit or 'unknown commit'})",
        "",
        f"command: `benchmarks/proofs/threads_proof.py --workdir {args.workdir} --rounds {args.rounds}`",
        "",
        f"{args.rounds} rounds, each call in a process of its own, interleaved; "
        "vs 1 thread: the median (min-max) over rounds of the time over one thread's "
        "time in the same round; faster rounds: rounds where it beat one thread; "
        "ranking: only where every round of one is below every round of the other "
        "(benchmarks.harness.compare).",
        "",
        "| case, threads | median | min-max | vs 1 thread, per round | faster rounds "
        "| ranking vs 1 thread |",
        "|---|---|---|---|---|---|",
    ]
    for state in ("warm", "cold"):
        cases = {}
        for name, (path, _) in models.items():
            for k in THREADS:
                cases[f"load ({state}), {name}, {k} thread(s)"] = lambda p=path, k=k: onnxl.load(
                    p, num_threads=k
                )
        folder_of = {
            case: os.path.dirname(models[case.split(", ", 1)[1].rsplit(", ", 1)[0]][0])
            for case in cases
        }
        if state == "warm":
            every = [f for path, _ in models.values() for f in _files(os.path.dirname(path))]
            rounds = measure_rounds(cases, rounds=args.rounds, warm_files=every)
        else:
            rounds = measure_rounds(
                cases,
                rounds=args.rounds,
                before=lambda case, where=folder_of: evict(_files(where[case])),
            )
        for name in models:
            one = rounds.seconds(f"load ({state}), {name}, 1 thread(s)")
            for k in THREADS:
                secs = rounds.seconds(f"load ({state}), {name}, {k} thread(s)")
                lines.append(_row(f"load ({state}), {name}, {k}", secs, one))
    # saves: a model in memory into two files
    n, dim = 16, 1024
    model = make_gemm_model(n, dim)
    dst = empty_folder(os.path.join(args.workdir, "dst"))
    saves = {
        f"save, two files, {n} x {dim}x{dim}, {k} thread(s)": (
            lambda k=k: onnxl.save(
                model,
                os.path.join(dst, "model.onnx"),
                location="model.onnx.data",
                options=onnxl.SerializeOptions(alignment=4096, num_threads=k),
            )
        )
        for k in THREADS
    }
    rounds = measure_rounds(
        saves,
        rounds=args.rounds,
        before=lambda _case: empty_folder(dst),
    )
    one = rounds.seconds(f"save, two files, {n} x {dim}x{dim}, 1 thread(s)")
    for k in THREADS:
        secs = rounds.seconds(f"save, two files, {n} x {dim}x{dim}, {k} thread(s)")
        lines.append(_row(f"save (warm), two files, {n} x {dim}x{dim}, {k}", secs, one))
    lines += [
        "",
        f"Load average (1 min) before / after: {load_before:.2f} / {os.getloadavg()[0]:.2f} "
        f"(of {os.cpu_count()} CPUs).",
    ]
    write_report(args.output, "\n".join(lines))


if __name__ == "__main__":
    main()
