"""``make bench``: onnx-light side by side with onnx, onnx-ir, shutil and onnxruntime.

Writes the source models once into a work dir, then for each round, for each
size: reads the sources once (warm page cache), and runs every operation in a
fresh process (``worker.py``), interleaved (every round runs each operation
once, in a new seeded order): the method of :mod:`benchmarks.harness.rounds`,
which the gallery uses too. Nothing on the machine is changed to steady the
numbers (no kernel setting, no memory touched first, no global cache drop):
a cold operation finds only the files the suite made evicted from the page
cache (:func:`benchmarks.harness.evict`). The re-align rows run again on XFS and btrfs
images, loop-mounted (as root, with mkfs.xfs / mkfs.btrfs; skipped with the
reason otherwise), with their sources copied there. The cgroup rows run only
with ``--cgroup``: each of their measurements creates a memory cgroup of its own
under ``/sys/fs/cgroup`` (root needed) and removes it after; without it, nothing
is written under ``/sys``, ``/proc/sys`` or ``/run``.
Prints the results table and writes ``benchmarks/results/<name>.md``,
``.csv`` and ``.png`` (``latest`` by default, ``smoke`` with ``--smoke``,
``partial`` when ``--only`` or ``--sizes`` filters the suite).

Exit code: 1 when a target fails or a worker crashes; with ``--smoke`` only a
crash fails (tiny sizes say nothing about the targets).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # the checkout: benchmarks.harness

import cgroup  # noqa: E402
import kernel_profile as kprofile  # noqa: E402
import report  # noqa: E402
import sources  # noqa: E402
from suite import (  # noqa: E402
    CGROUP_GROUPS,
    FLUSHED,
    GROUPS,
    OPT_IN,
    ROWS,
    TIMELINE,
    condition,
    fs_plan,
    plan,
)

from benchmarks.harness import OthersCpu, evict, warm  # noqa: E402
from benchmarks.harness.filesystems import loop_mount, unavailable  # noqa: E402
from onnx_light.onnx._write.fs import copy_policy  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=None, help="rounds (default 3, 1 with --smoke)")
    p.add_argument("--workdir", help="where the sources go (kept and reused); default: a temp dir")
    p.add_argument(
        "--filesystems",
        default="xfs,btrfs",
        help="other filesystems to re-align on, loop-mounted (default xfs,btrfs; 'none')",
    )
    p.add_argument("--smoke", action="store_true", help="tiny sizes, 1 round: the suite runs")
    p.add_argument("--only", help=f"comma-separated groups among {','.join(GROUPS)}")
    p.add_argument(
        "--cgroup",
        action="store_true",
        help="also run the cgroup rows: each creates a memory cgroup of its own under "
        "/sys/fs/cgroup, root needed (removed after it); without it nothing is written "
        "under /sys",
    )
    p.add_argument("--sizes", help="comma-separated size names to keep (e.g. 1GiB)")
    p.add_argument("--output", help="results name under benchmarks/results/")
    p.add_argument(
        "--no-profile", action="store_true", help="skip the kernel profiles (perf) of the copies"
    )
    p.add_argument("--timeout", type=float, default=3600, help="seconds per worker")
    p.add_argument("--cold-size", default="4GiB", help="model size of the cold groups (4GiB)")
    p.add_argument("--cgroup-size", default="8GiB", help="model size of the cgroup group (8GiB)")
    p.add_argument(
        "--cgroup-fraction",
        type=float,
        default=0.25,
        help="memory limit of the cgroup, as a fraction of the model (0.25)",
    )
    p.add_argument("--durable-size", default="1GiB", help="model size of the durable group")
    p.add_argument(
        "--canary-mib", type=int, default=None, help="canary size (1024; 1 with --smoke)"
    )
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = 1 if args.smoke else 3
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if args.only:
        groups = args.only.split(",")
    else:  # the opt-in groups take minutes each: only when named (or small, in --smoke)
        groups = [g for g in GROUPS if (args.smoke or g not in OPT_IN) and g not in CGROUP_GROUPS]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        p.error(f"unknown group(s) {unknown}; known: {list(GROUPS)}")
    if args.cgroup:
        groups += [g for g in CGROUP_GROUPS if g not in groups]
    asked = [g for g in groups if g in CGROUP_GROUPS]
    if asked and not args.cgroup:
        p.error(
            f"{','.join(asked)}: these rows create a memory cgroup of their own under "
            "/sys/fs/cgroup (root needed): add --cgroup"
        )
    args.groups = groups
    for opt in ("cold_size", "cgroup_size", "durable_size"):
        if getattr(args, opt) not in sources.SIZES:
            p.error(f"--{opt.replace('_', '-')}: one of {', '.join(sources.SIZES)}")
    if args.smoke:
        args.sizes_of = {"two": ["2MiB"], "large": [], "single": ["2MiB"], "pair": ["2MiB"]}
        args.sizes_of.update(durable=["2MiB"], cold=["2MiB"], cgroup=["2MiB"], matmul=["2MiB"])
    else:
        args.sizes_of = {
            "two": ["96MiB", "1GiB"],
            "large": ["4GiB"],
            "single": ["1GiB"],
            "pair": ["1GiB"],
            "durable": [args.durable_size],
            "cold": [args.cold_size],
            "cgroup": [args.cgroup_size],
            "matmul": ["1GiB"],
        }
    if args.canary_mib is None:
        args.canary_mib = 1 if args.smoke else 1024
    if args.sizes:
        keep = args.sizes.split(",")
        args.sizes_of = {k: [s for s in v if s in keep] for k, v in args.sizes_of.items()}
    args.filesystems = [f for f in args.filesystems.split(",") if f and f != "none"]
    if args.output is None:
        args.output = "smoke" if args.smoke else "partial" if args.only or args.sizes else "latest"
    return args


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_worker(op: str, workdir: str, size: str, timeout: float, extra=(), cg=None) -> dict | None:
    """Run one measurement; also record how busy the other processes kept the CPUs.

    Args:
        op, workdir, size: what ``worker.py`` measures.
        timeout: seconds.
        extra: more arguments of ``worker.py``.
        cg: a :class:`cgroup.MemoryCgroup` to run the worker in (None: none).

    Returns:
        The worker's record; one with ``failed`` when the cgroup OOM-killed it;
        None when it crashed.
    """
    cmd = [sys.executable, os.path.join(HERE, "worker.py"), op, workdir, size, *extra]
    if op in TIMELINE:
        cmd.append("--timeline")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")  # no idle BLAS threads spinning
    try:
        with OthersCpu() as others:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                preexec_fn=cg.enter if cg is not None else None,
            )
    except subprocess.TimeoutExpired:
        log(f"    {op} [{size}]: timed out after {timeout:.0f} s")
        return None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 and cg is not None and cg.oom_kills():
        log(f"    {op} [{size}]: OOM-killed in the cgroup (exit {proc.returncode})")
        return {
            "failed": f"OOM-killed (cgroup limit {cg.limit / sources.MiB:.0f} MiB)",
            "seconds": None,
            "peak": None,
            "anon": None,
            "cg_peak": cg.peak(),
        }
    if proc.returncode != 0 or not lines:
        log(f"    {op} [{size}]: worker failed (exit {proc.returncode})\n{proc.stderr[-3000:]}")
        return None
    record = json.loads(lines[-1])
    if others.share is not None:  # 0 = quiet machine, 1 = one whole CPU busy elsewhere
        record["others_cpu"] = others.share
    return record


def measure(args, todo) -> dict:
    """Run every round; return ``{(size label, op): [record or None per round]}``.

    Args:
        args: the parsed options.
        todo: ``[(size label, work dir, size, [operations])]``.
    """
    records: dict = {(label, op): [] for label, _, _, ops in todo for op in ops}
    for r in range(args.rounds):
        for label, workdir, size, ops in todo:
            paths = sources.Paths(workdir, size)
            t0 = time.perf_counter()
            n = warm(paths.files(sources.KINDS)) if any(not condition(o) for o in ops) else 0
            log(
                f"[round {r + 1}/{args.rounds}] {label}: page cache warmed "
                f"({n / sources.MiB:.0f} MiB read in {time.perf_counter() - t0:.1f} s)"
            )
            # a new order each round (seeded): an operation run right after one
            # that freed a lot of memory finds it ready and runs faster, so a
            # fixed order would always favour the same operations
            order = list(ops)
            if r:
                random.Random(r).shuffle(order)
            for op in order:
                if condition(op):
                    rec = measure_cold(args, op, workdir, size)
                    records[(label, op)].append(rec)
                    _log_record(op, rec)
                    continue
                # the sources again: an earlier operation's output may have pushed
                # some of them out of the page cache
                warm(paths.files(sources.KINDS))
                os.sync()  # no write-back of earlier outputs during this one
                extra = ["--flush"] if op in FLUSHED else []
                rec = run_worker(op, workdir, size, args.timeout, extra)
                records[(label, op)].append(rec)
                _log_record(op, rec)
    return records


def _log_record(op: str, rec: dict | None) -> None:
    if rec is None or rec.get("failed"):
        return
    extra = ""
    if rec["anon"] is not None:
        extra = f", anon +{rec['anon'] / sources.MiB:.1f} MiB, file +{rec['file'] / sources.MiB:.1f} MiB"
    for key, name in (("to_disk", "to disk"), ("canary", "canary -"), ("cg_peak", "cgroup peak")):
        if rec.get(key) is not None:
            unit = f"{rec[key]:.3f} s" if key == "to_disk" else f"{rec[key] / sources.MiB:.0f} MiB"
            extra += f", {name} {unit}"
    log(
        f"    {op:16s} {rec['seconds']:8.3f} s  cpu {rec['cpu']:7.3f} s "
        f"(user {rec.get('user', 0):.3f})  "
        f"peak +{rec['peak'] / sources.MiB:.1f} MiB{extra}  "
        f"(others: {rec.get('others_cpu', 0):.2f} CPU)"
    )


def cgroup_limit(args, size: str) -> int:
    """The cgroup's memory limit for a model of ``size``: ``--cgroup-fraction`` of it,
    at least 512 MiB (a worker's interpreter and imports alone take about 200 MiB)."""
    return max(int(args.cgroup_fraction * sources.nbytes(size)), 512 * sources.MiB)


def measure_cold(args, op: str, workdir: str, size: str) -> dict | None:
    """One cold measurement: the files the suite made for ``size`` (its sources, and
    what an earlier run left in the output folder) written back and evicted from the
    page cache, nothing else; then, in a new memory cgroup for ``cg_`` operations,
    the canary read (in the cgroup: its pages are charged there) and the worker run,
    its outputs flushed after the measure (the "time to disk")."""
    if condition(op) == "cgroup" and not args.cgroup:  # nothing under /sys without it
        raise RuntimeError(f"{op} runs in a memory cgroup of its own: only with --cgroup")
    os.sync()  # no write-back of earlier outputs during this one
    evict(_made_files(workdir, size))
    limit = cgroup_limit(args, size)
    with contextlib.ExitStack() as stack:
        cg = None
        if condition(op) == "cgroup":
            cg = stack.enter_context(cgroup.MemoryCgroup(limit))
        canary = os.path.join(workdir, sources.CANARY)
        subprocess.run(
            ["cat", canary],
            stdout=subprocess.DEVNULL,
            check=True,
            preexec_fn=cg.enter if cg is not None else None,
        )
        extra = ["--flush", "--canary", canary]
        rec = run_worker(op, workdir, size, args.timeout, extra, cg)
        if rec is not None and cg is not None and "cg_peak" not in rec:
            rec["cg_peak"] = cg.peak()
    return rec


def _made_files(workdir: str, size: str) -> list[str]:
    """The files of ``workdir`` a cold operation of ``size`` may read: the size's
    sources and whatever is left in the output folder."""
    paths = sources.Paths(workdir, size)
    made = paths.files(sources.KINDS)
    for folder, _, names in os.walk(paths.out):
        made += [os.path.join(folder, n) for n in names]
    return [f for f in made if os.path.isfile(f) and not os.path.islink(f)]


def _fs_name(path: str) -> str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return copy_policy(fd).filesystem
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    main_plan = plan(args.groups, args.sizes_of)
    other_plan = fs_plan(args.groups, args.sizes_of["single"])
    if not main_plan:
        log("nothing to run: --only/--sizes left no operation")
        return 2
    workdir = args.workdir or tempfile.mkdtemp(prefix="onnx-light-bench-", dir="/tmp")
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    load_before = os.getloadavg()
    headings = {None: f"{_fs_name(workdir)} (the work dir, {workdir})"}
    try:
        with contextlib.ExitStack() as stack:
            log(f"sources in {workdir}")
            # only the sources the selected groups read
            used = {GROUPS[g][1] for g in args.groups}
            need = {k: v if k in used else [] for k, v in args.sizes_of.items()}
            two = need["two"] + need["large"] + need["durable"] + need["cold"] + need["cgroup"]
            sources.ensure(
                workdir, two, need["single"], log, pair=need["pair"], matmul=need["matmul"]
            )
            main_plan = _cold_plan(main_plan, headings)
            if any(condition(op) for _, ops in main_plan for op in ops):
                sources.ensure_canary(workdir, args.canary_mib * sources.MiB, log)
            todo = [(size, workdir, size, ops) for size, ops in main_plan]
            for fs in args.filesystems if other_plan else []:
                root = _mount(stack, fs, workdir, args, headings)
                if root is not None:
                    todo += [(f"{size} on {fs}", root, size, ops) for size, ops in other_plan]
            records = measure(args, todo)
            profiles, profile_note = _profiles(args, todo)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    plan_labels = [(label, ops) for label, _, _, ops in todo]
    load_after = os.getloadavg()
    others = [r.get("others_cpu", 0.0) for v in records.values() for r in v if r is not None]
    others_text = (
        f"{statistics.median(others):.2f} median, {max(others):.2f} max" if others else "n/a"
    )

    results = report.evaluate(ROWS, plan_labels, records)
    command = "benchmarks/run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    machine = report.machine_line(ROOT)
    header = f"# onnx-light benchmarks ({args.output})\n\n{machine}\n\ncommand: `{command.strip()}`"
    footer = (
        f"{args.rounds} round(s), operations interleaved (a new seeded order each round), "
        "each in a fresh process; page cache "
        "warmed (every source file of the size read once) before each measurement. "
        "value / ref value: medians over rounds; ratio: median over rounds of the per-round "
        "ratio value / ref value (both measured in the same round). Memory: growth of the "
        "kernel's peak RSS (VmHWM) during the operation; RssAnon / RssFile growth sampled "
        "every ms. Load average (1 min) before / after: "
        f"{load_before[0]:.2f} / {load_after[0]:.2f}; CPUs used by other processes "
        f"during the measurements: {others_text} (of {os.cpu_count()}). Nothing on the "
        "machine was changed to steady the numbers: no kernel setting, no memory touched "
        "first, no global cache drop." + _cold_footer(args, plan_labels)
    )
    text = report.markdown(results, header, footer, headings, figures=args.output)
    if profiles or profile_note:
        text += "\n" + kprofile.markdown(profiles, profile_note)
    print(text)
    out_dir = os.path.join(HERE, "results")
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, args.output)
    with open(base + ".md", "w") as f:
        f.write(text)
    report.write_csv(results, base + ".csv")
    report.plot(results, base + ".png", machine)
    log(f"wrote {base}.md, .csv and a figure per group ({base}-GROUP.png)")

    errors = [r for r in results if r["result"] == "ERROR"]
    errors += [k for k, v in records.items() if any(x is None for x in v)]
    failed = [r for r in results if r["result"] == "FAIL"]
    if errors:
        log(f"{len(errors)} error(s): a worker failed")
        return 1
    if failed and not args.smoke:
        log(f"{len(failed)} target(s) missed")
        return 1
    return 0


def _cold_footer(args, plan_labels) -> str:
    """What the cold measurements did, when there were some."""
    cold = {label: [op for op in ops if condition(op)] for label, ops in plan_labels}
    if not any(cold.values()):
        return ""
    text = (
        " Cold operations (cold_*, cg_*, floor_device): before each, earlier writes "
        "flushed (sync) and the files the suite made for the size (its sources, earlier "
        "outputs) evicted from the page cache (fsync, then posix_fadvise DONTNEED), "
        f"nothing else; then a {args.canary_mib} MiB canary file read (cat); 'canary evicted' is how much "
        "of it left the page cache during the operation (fincore before and after); "
        "'time to disk' adds the fsync of the outputs after the measure."
    )
    cg_sizes = [label for label, ops in cold.items() if any(o.startswith("cg_") for o in ops)]
    if cg_sizes:
        limits = ", ".join(
            f"{cgroup_limit(args, label) / sources.MiB:.0f} MiB at {label}" for label in cg_sizes
        )
        text += (
            f" cg_* operations ran in a fresh memory cgroup (v{cgroup.version()}, its limit "
            f"counting the page cache: {limits}), the canary read inside it."
        )
    return text


def _cold_plan(main_plan, headings: dict):
    """The plan without the cold operations this machine cannot run (no
    ``posix_fadvise``; for the cgroup ones, not root or no memory cgroup); the work
    dir's heading says which were left out and why."""
    reasons = {"cold": cgroup.unavailable(), "cgroup": cgroup.cgroup_unavailable()}
    out, dropped = [], []
    for size, ops in main_plan:
        keep = [op for op in ops if not (condition(op) and reasons[condition(op)])]
        dropped += [op for op in ops if op not in keep]
        if keep:
            out.append((size, keep))
    if dropped:
        why = "; ".join(sorted({reasons[condition(op)] for op in dropped}))
        log(f"cold operations skipped ({why}): {', '.join(dropped)}")
        headings[None] += f"; cold operations skipped: {why}"
    return out


PROFILED = ("copyfile", "align", "copyfile_aligned", "align_aligned")


def _profiles(args, todo) -> tuple[dict, str | None]:
    """Kernel profiles of the copies at the single-file size, on each filesystem."""
    if args.no_profile or args.smoke:
        return {}, None
    note = kprofile.unavailable()
    if note:
        return {}, note
    out: dict = {}
    for label, workdir, size, ops in todo:
        if size not in args.sizes_of["single"]:
            continue
        fs = report.split_label(label)[1] or _fs_name(workdir)
        for op in (o for o in PROFILED if o in ops):
            log(f"    profiling {op} [{label}]")
            out.setdefault(fs, {})[op] = kprofile.kernel_profile(op, workdir, size)
    return out, None


def _mount(stack, fs: str, workdir: str, args, headings: dict) -> str | None:
    """Loop-mount a ``fs`` image under the work dir and copy the sources in.

    Returns:
        The work dir on it, or None (the heading then says why it was skipped).
    """
    reason = unavailable(fs)
    if reason is None:
        try:
            size = 8 * 1024**3 if not args.smoke else 0
            mnt = stack.enter_context(loop_mount(fs, size, workdir))
        except RuntimeError as e:
            reason = str(e)
    if reason is not None:
        log(f"{fs}: skipped ({reason})")
        headings[fs] = f"{fs}: skipped ({reason})"
        return None
    headings[fs] = f"{fs} (a loop-mounted image, direct I/O, on the work dir's disk)"
    root = os.path.join(mnt, "bench")
    sources.copy_into(workdir, root, args.sizes_of["single"], ["two", "aligned"], log)
    return root


if __name__ == "__main__":
    sys.exit(main())
