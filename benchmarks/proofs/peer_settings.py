"""The peers at their settings: which ones the suite's peer rows call them with.

Usage (run by hand, not by CI)::

    .venv/bin/python benchmarks/proofs/peer_settings.py [--workdir /var/tmp/bench-peers]
        [--rounds 3] [--sizes 96MiB,1GiB] [--large] [--output FILE]

For each row of ``benchmarks/suite.py`` whose reference is onnx-ir (``ir_*``:
the re-align of the two-file model at 96 MiB and 1 GiB, and 4 GiB with
``--large``; of the aligned source, of the single-file model and of the
200,000-tensor model; the save of a model in memory; the dedup pair), its
operation is measured as ``ops.py`` runs it (``ir.load`` + ``ir.save`` with the
same arguments) with onnx-ir's defaults and with ``max_workers`` 1, 2 and 4 x
``max_in_flight_bytes`` 256 MiB and 1 GiB. onnx-ir 1.1 writes serially, with no
budget, for ``max_workers`` None or 1 (``_ExternalDataWriter.write``), so
``max_workers=1`` is measured once. For the 200,000-tensor model (12.8 MB of
weights, 64 bytes a tensor) the budget is never reached: workers 2 and 4 are
measured with the default budget only.

For each row whose reference is onnx (``onnx_loadsave``, ``onnx_save``),
``onnx.save`` is measured with its defaults, ``convert_attribute=True`` and
``size_threshold=0`` (the same output for these models: no tensor under
1024 bytes, no tensor attribute) and ``all_tensors_to_one_file=False`` (one
file per tensor: another layout, shown for what it costs, never chosen).

The method is the suite's (``benchmarks/run.py``): each measurement in a fresh
Python process (this script run with ``--child``: imports, a warm-up on the
``tiny`` sources, the unmeasured set-up, then the operation inside
:class:`~benchmarks.harness.PeakMemory`), in interleaved rounds (a new seeded
order each round), the sources read into the page cache and earlier writes
flushed (``sync``) before each; nothing on the machine changed.
The report gives each setting's median (min-max) over the rounds, the
median of its per-round ratio to the default, the fastest setting, and
whether it beats the default beyond the spread (every round of one below every
round of the other: :func:`benchmarks.harness.compare`).
"""

from __future__ import annotations

import argparse
import gc
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

from benchmarks import sources  # noqa: E402
from benchmarks.sources import ALIGNMENT, DATA, MODEL, Paths  # noqa: E402
from benchmarks.text import report_path, short_commit, write_report  # noqa: E402

MiB = 1024 * 1024
DEFAULT = "default"

# setting name -> keyword arguments added to the peer's call
IR_SETTINGS = {
    DEFAULT: {},
    "max_workers=1": {"max_workers": 1},
    **{
        f"max_workers={w}, max_in_flight_bytes={b // MiB} MiB": {
            "max_workers": w,
            "max_in_flight_bytes": b,
        }
        for w in (2, 4)
        for b in (256 * MiB, 1024 * MiB)
    },
}
IR_SETTINGS_MANY = {  # 64-byte tensors: the budget is never reached
    DEFAULT: {},
    "max_workers=2": {"max_workers": 2},
    "max_workers=4": {"max_workers": 4},
}
ONNX_SETTINGS = {
    DEFAULT: {},
    "convert_attribute=True": {"convert_attribute": True},
    "size_threshold=0": {"size_threshold": 0},
    "all_tensors_to_one_file=False": {"all_tensors_to_one_file": False},
}
NOT_ELIGIBLE = {"all_tensors_to_one_file=False": "another layout: one file per tensor"}

# (the suite's operation, size, source kind for sources.ensure)
ROWS = [
    ("ir_align", "96MiB", "two"),
    ("ir_align", "1GiB", "two"),
    ("ir_align", "4GiB", "two"),  # --large
    ("ir_align_aligned", "1GiB", "single"),
    ("ir_align_single", "1GiB", "single"),
    ("ir_align_many", "1GiB", "single"),
    ("ir_save", "96MiB", "two"),
    ("ir_save", "1GiB", "two"),
    ("ir_dedup", "1GiB", "pair"),
    ("onnx_loadsave", "96MiB", "two"),
    ("onnx_loadsave", "1GiB", "two"),
    ("onnx_save", "96MiB", "two"),
    ("onnx_save", "1GiB", "two"),
]
WHAT = {
    "ir_align": "onnx-ir: ir.load + ir.save(alignment=4096) of the two-file model",
    "ir_align_aligned": "onnx-ir: the same of the aligned source",
    "ir_align_single": "onnx-ir: the same of the single-file model",
    "ir_align_many": "onnx-ir: the same of 200,000 tensors of 64 bytes",
    "ir_save": "onnx-ir: ir.save(alignment=4096) of the two-file model in memory",
    "ir_dedup": "onnx-ir: ir.load + DeduplicateInitializersPass + ir.save, each model of the pair",
    "onnx_loadsave": "onnx: onnx.load + onnx.save(save_as_external_data=True)",
    "onnx_save": "onnx: onnx.save(save_as_external_data=True) of the model in memory",
}


def settings_of(op: str) -> dict[str, dict]:
    if op == "ir_align_many":
        return IR_SETTINGS_MANY
    return IR_SETTINGS if op.startswith("ir_") else ONNX_SETTINGS


# -- the child: one measurement --------------------------------------------------


def _files_in(folder: str) -> list[str]:
    return [os.path.join(folder, f) for f in os.listdir(folder)]


def _case(op: str, p: Paths, out: str, kw: dict):
    """(set-up done) -> the measured call, as ``ops.py`` makes it, ``kw`` added."""
    import onnx
    import onnx_ir as ir

    dst = os.path.join(out, MODEL)
    ir_args = dict(
        external_data=DATA, size_threshold_bytes=1024, alignment=ALIGNMENT, align_threshold=0
    )
    if op in ("ir_align", "ir_align_aligned", "ir_align_single", "ir_align_many"):
        src = {
            "ir_align": p.two,
            "ir_align_aligned": p.aligned,
            "ir_align_single": p.single,
            "ir_align_many": p.many,
        }[op]
        return lambda: ir.save(ir.load(src), dst, **ir_args, **kw)
    if op == "ir_save":
        model = ir.serde.deserialize_model(onnx.load(p.two))
        return lambda: ir.save(model, dst, **ir_args, **kw)
    if op == "ir_dedup":
        from onnx_ir.passes.common import DeduplicateInitializersPass

        def dedup():
            for src in p.models("pair"):
                model = ir.load(src)
                DeduplicateInitializersPass(size_limit=sys.maxsize)(model)
                name = os.path.basename(src)
                ir.save(
                    model,
                    os.path.join(out, name),
                    **{**ir_args, "external_data": name + ".data"},
                    **kw,
                )
                del model

        return dedup
    if op == "onnx_loadsave":
        return lambda: onnx.save(
            onnx.load(p.two), dst, save_as_external_data=True, location=DATA, **kw
        )
    if op == "onnx_save":
        model = onnx.load(p.two)
        return lambda: onnx.save(model, dst, save_as_external_data=True, location=DATA, **kw)
    raise ValueError(op)


def _measure_once(op: str, p: Paths, kw: dict) -> dict:
    from benchmarks.harness import PeakMemory

    out = tempfile.mkdtemp(prefix=f"{op}-", dir=p.out)
    try:
        run = _case(op, p, out, kw)
        gc.collect()
        with PeakMemory() as pm:
            cpu0 = os.times()
            run()
            cpu1 = os.times()
        return {
            "seconds": pm.seconds,
            "cpu": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
            "peak": pm.growth,
            "bytes": sum(os.path.getsize(f) for f in _files_in(out)),
            "files": len(os.listdir(out)),
        }
    finally:
        shutil.rmtree(out, ignore_errors=True)


def child(op: str, setting: str, workdir: str, size: str) -> None:
    import numpy  # noqa: F401 - imported first, as worker.py does
    import onnx  # noqa: F401
    import onnx_ir  # noqa: F401

    kw = settings_of(op)[setting]
    _measure_once(op, Paths(workdir, "tiny"), kw)  # warm-up, not reported
    record = {"op": op, "setting": setting, "size": size}
    record.update(_measure_once(op, Paths(workdir, size), kw))
    print(json.dumps(record), flush=True)


# -- the parent: rounds ----------------------------------------------------------


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _source_files(op: str, p: Paths) -> list[str]:
    kind = {
        "ir_align_aligned": "aligned",
        "ir_align_single": "single",
        "ir_align_many": "many",
        "ir_dedup": "pair",
    }.get(op, "two")
    return p.files([kind])


def _run_child(op: str, setting: str, workdir: str, size: str) -> dict | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", op, setting, workdir, size]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")  # as benchmarks/run.py
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        _log(f"    {op} [{size}] {setting}: failed (exit {proc.returncode})\n{proc.stderr[-2000:]}")
        return None
    return json.loads(lines[-1])


def measure(workdir: str, rows: list[tuple[str, str]], rounds: int) -> dict:
    from benchmarks.harness import warm

    records: dict = {(op, size, s): [] for op, size in rows for s in settings_of(op)}
    cases = list(records)
    for r in range(rounds):
        order = list(cases)
        random.Random(r).shuffle(order)
        _log(f"[round {r + 1}/{rounds}] {len(order)} measurements")
        for op, size, setting in order:
            p = Paths(workdir, size)
            warm(_source_files(op, p))
            os.sync()
            rec = _run_child(op, setting, workdir, size)
            records[(op, size, setting)].append(rec)
            if rec:
                _log(
                    f"    {op:16s} {size:6s} {setting:45s} {rec['seconds']:7.3f} s  "
                    f"cpu {rec['cpu']:6.3f} s  peak +{rec['peak'] / MiB:7.1f} MiB"
                )
    return records


# -- the report ------------------------------------------------------------------


def _fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"


def report(records: dict, rows, args, load: tuple[float, float], minutes: float) -> str:
    from benchmarks.harness import compare, describe_machine

    commit = short_commit()
    command = f"benchmarks/proofs/peer_settings.py --workdir {args.workdir} --rounds {args.rounds}"
    if args.sizes:
        command += f" --sizes {args.sizes}"
    if args.large:
        command += " --large"
    lines = [
        "# The peers at their settings: onnx-ir's save and onnx's save",
        "",
        f"machine: {describe_machine()} ({commit or 'unknown commit'})",
        "",
        f"command: `.venv/bin/python {command}` ({minutes:.1f} min)",
        "",
        f"{args.rounds} rounds, each measurement in a fresh process, interleaved (a new "
        "seeded order each round), page cache warm (the row's sources read just before), "
        "earlier writes flushed. Each cell: median (min-max) of the rounds' wall time; "
        "vs default: the median (min-max) of the per-round ratio to the default; "
        "beyond the spread: every round of one below every round of the other "
        "(benchmarks.harness.compare, at least 3 rounds each). onnx-ir 1.1 writes serially "
        "for max_workers None or 1 (the budget then unused); for the 200,000 tensors of "
        "64 bytes the budget is never reached (the default 1 GiB kept).",
        "",
    ]
    chosen = []
    for op, size in rows:
        settings = settings_of(op)
        base = [r["seconds"] for r in records[(op, size, DEFAULT)] if r]
        lines += [
            f"## {op}, {size}: {WHAT[op]}",
            "",
            "| setting | time | vs default, per round | CPU (median) | peak RSS growth "
            "(median) | bytes written | vs default |",
            "|---|---|---|---|---|---|---|",
        ]
        best, best_med = DEFAULT, statistics.median(base) if base else float("inf")
        base_bytes = {r["bytes"] for r in records[(op, size, DEFAULT)] if r}
        verdicts = {}
        for s in settings:
            recs = [r for r in records[(op, size, s)] if r]
            if not recs:
                lines.append(f"| {s} | failed | | | | | |")
                continue
            secs = [r["seconds"] for r in recs]
            full = [r for r in records[(op, size, s)]]
            pairs = [
                a["seconds"] / b["seconds"]
                for a, b in zip(full, records[(op, size, DEFAULT)], strict=True)
                if a and b
            ]
            nbytes = sorted({r["bytes"] for r in recs})
            same = "" if set(nbytes) == base_bytes else " (differs)"
            if s == DEFAULT:
                verdict = "(the default)"
            else:
                c = compare(s, secs, DEFAULT, base, "s")
                if c.separated:
                    verdict = (
                        "faster, beyond the spread" if c.ratio < 1 else "slower, beyond the spread"
                    )
                else:
                    verdict = "within the spread"
                verdicts[s] = (c.separated and c.ratio < 1, statistics.median(secs))
            if s in NOT_ELIGIBLE:
                verdict += f"; {NOT_ELIGIBLE[s]}, not eligible"
            elif s != DEFAULT and statistics.median(secs) < best_med:
                best, best_med = s, statistics.median(secs)
            ratio = (
                f"{statistics.median(pairs):.2f}x ({min(pairs):.2f}-{max(pairs):.2f})"
                if pairs
                else "-"
            )
            lines.append(
                f"| {s} | {_fmt(secs)} | {ratio} "
                f"| {statistics.median([r['cpu'] for r in recs]):.3f} s "
                f"| {statistics.median([r['peak'] for r in recs]) / MiB:.1f} MiB "
                f"| {nbytes[0] / MiB:.1f} MiB{same} | {verdict} |"
            )
        beats = best != DEFAULT and verdicts.get(best, (False,))[0]
        pick = best if beats else DEFAULT
        lines += [
            "",
            f"Fastest (median): {best}."
            + (
                f" It beats the default beyond the spread: chosen, {best}."
                if beats
                else " The default is kept: no setting beats it beyond the spread."
                if best != DEFAULT
                else " The default is kept."
            ),
            "",
        ]
        chosen.append(f"| {op} | {size} | {pick} |")
    lines += ["## Chosen", "", "| row | size | setting |", "|---|---|---|", *chosen, ""]
    lines += [
        f"Load average (1 min) before / after: {load[0]:.2f} / {load[1]:.2f} "
        f"(of {os.cpu_count()} CPUs).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        child(*argv[1:5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="/var/tmp/bench-peers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", help="comma-separated size names to keep (96MiB, 1GiB, 4GiB)")
    ap.add_argument("--large", action="store_true", help="also the 4 GiB re-align (minutes)")
    ap.add_argument("--ops", help="comma-separated operations to keep (e.g. ir_align,ir_save)")
    ap.add_argument("--smoke", action="store_true", help="every row at 2MiB, nothing written")
    ap.add_argument(
        "--output", help="the report (default: benchmarks/proofs/results/peer_settings.md)"
    )
    args = ap.parse_args(argv)
    if args.output is None and not args.smoke:
        args.output = report_path("peer_settings.md")
    keep = set(args.sizes.split(",")) if args.sizes else None
    ops = set(args.ops.split(",")) if args.ops else None
    todo = [
        (op, size, kind)
        for op, size, kind in ROWS
        if (size != "4GiB" or args.large)
        and (keep is None or size in keep)
        and (ops is None or op in ops)
    ]
    if args.smoke:
        todo = list(dict.fromkeys((op, "2MiB", kind) for op, _, kind in todo))
    if not todo:
        _log("nothing to run: --sizes/--ops left no row")
        return 2
    need = {k: sorted({s for _, s, kind in todo if kind == k}) for k in ("two", "single", "pair")}
    sources.ensure(args.workdir, need["two"], need["single"], _log, pair=need["pair"])
    rows = [(op, size) for op, size, _ in todo]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    records = measure(args.workdir, rows, args.rounds)
    minutes = (time.perf_counter() - t0) / 60
    text = report(records, rows, args, (load0, os.getloadavg()[0]), minutes)
    if args.output:
        write_report(args.output, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
