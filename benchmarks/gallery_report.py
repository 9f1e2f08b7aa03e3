"""The gallery report: what every benchmark page states, measured once with more rounds.

    make gallery-report                          # every examples/benchmarks/plot_*.py
    .venv/bin/python benchmarks/gallery_report.py --only plot_convert_float16 --rounds 7

Each benchmark script of the gallery runs at full size, in a fresh
interpreter of its own (one after the other, from an empty folder), with

- ``ONNX_LIGHT_GALLERY_ROUNDS=N``: every measure a page compares (3 rounds
  or more) is measured in N rounds (a timeline or a profile of 1 round stays);
- ``ONNX_LIGHT_GALLERY_MEASURE=FILE``: every ``Comparison.sentence()`` the
  script prints records its two lists of rounds there, instead of checking
  them against the report.

From those rounds it writes ``results/gallery.json`` (per script: the
machine, the commit, the date, the rounds, the CPU share other processes used; per
comparison: the rounds, the per-round ratios, their median and range, the
verdict and the words a page states) and ``results/gallery.md`` (the same,
to read). Every build of the site then prints these words, and says where
its own ratio falls against the range (``benchmarks.harness.compare`` states
the rules). ``--only`` measures some scripts again and keeps the others'
entries, each with its own machine, commit and date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.harness import OthersCpu, describe_machine  # noqa: E402
from benchmarks.harness.compare import MEASURE_ENV, REPORT, Comparison  # noqa: E402
from benchmarks.harness.rounds import ROUNDS_ENV  # noqa: E402

SCRIPTS = os.path.join(ROOT, "examples", "benchmarks")
ROUNDS = 7
QUIET = 0.25  # CPUs other processes may use while a script runs on a quiet machine


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def commit() -> str:
    """HEAD's short hash, and whether the code measured differs from it."""
    head = _git("rev-parse", "--short", "HEAD") or "unknown"
    changed = _git("status", "--porcelain", "--", "onnx_light", "examples/benchmarks")
    n = len(changed.splitlines())
    return f"{head} + local changes in {n} file(s)" if n else head


def run_script(path: str, rounds: int) -> tuple[list[dict], float]:
    """Run one gallery script as the report measures it; its comparisons and its time."""
    env = {k: v for k, v in os.environ.items() if k != "UNITTEST_GOING"}
    env.update(MPLBACKEND="Agg", **{ROUNDS_ENV: str(rounds)})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="gallery-report-") as tmp:
        env[MEASURE_ENV] = records = os.path.join(tmp, "comparisons.jsonl")
        work = os.path.join(tmp, "cwd")
        os.mkdir(work)
        begin = time.perf_counter()
        done = subprocess.run(
            [sys.executable, path], cwd=work, env=env, capture_output=True, text=True
        )
        seconds = time.perf_counter() - begin
        if done.returncode != 0:
            raise RuntimeError(
                f"{os.path.basename(path)} exited with {done.returncode}:\n{done.stderr[-4000:]}"
            )
        if not os.path.exists(records):
            return [], seconds
        with open(records, encoding="utf-8") as f:
            found = [json.loads(line) for line in f]
    keys = [(r["context"], r["name_a"], r["name_b"], r["unit"]) for r in found]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise RuntimeError(
            f"{os.path.basename(path)} compares the same pair twice {twice}: give each "
            "comparison its own context= (compare, Rounds.compare)"
        )
    comparisons = [Comparison(**{**r, "a": tuple(r["a"]), "b": tuple(r["b"])}) for r in found]
    return [c.report_entry() for c in comparisons], seconds


def markdown(report: dict) -> str:
    """The report to read: its header, then each script's words and where they come from."""
    lines = [
        "# The gallery report: the conclusions of the benchmark pages",
        "",
        f"machine: {report['machine']} ({report['commit']}), {report['date']}",
        "",
        f"command: `{report['command']}`",
        "",
        report["note"],
        "",
        "Each benchmark page of the gallery states the words below, whatever the machine "
        "that builds the site, and says where its own measurement falls against their "
        "range (the lowest to the highest per-round ratio).",
    ]
    for name, part in sorted(report["scripts"].items()):
        lines += [
            "",
            f"**{name}**: {part['rounds']} rounds at commit {part['commit']}, {part['date']}, "
            f"in {part['seconds']:.0f} s; {_others(part)}.",
            "",
        ]
        lines += [f"- {e['words']}" for e in part["comparisons"]] or ["- (no comparison)"]
    return "\n".join(lines) + "\n"


def _others(part: dict) -> str:
    """How busy the rest of the machine was while a script ran (older entries kept
    the load average instead)."""
    if "others_cpu" in part:
        return f"other processes used {part['others_cpu']:.2f} of {part['cores']} CPUs"
    return (
        f"load average {part['load'][0]:.1f} before, {part['load'][1]:.1f} after "
        f"({part['cores']} cores)"
    )


def _write_markdown(report: dict, output: str) -> int:
    md = os.path.splitext(output)[0] + ".md"
    with open(md + ".tmp", "w", encoding="utf-8") as f:
        f.write(markdown(report))
    os.replace(md + ".tmp", md)
    print(f"wrote {output} and {md}")
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds (default {ROUNDS})")
    p.add_argument("--only", default="", help="comma-separated scripts (plot_x or plot_x.py)")
    p.add_argument("--note", default="", help="a sentence about the machine, for the header")
    p.add_argument("--output", default=REPORT, help="the JSON report (the .md beside it)")
    p.add_argument("--scripts", default=SCRIPTS, help="the folder of the plot_*.py scripts")
    p.add_argument("--markdown", action="store_true", help="only write the .md again from the JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.markdown:
        with open(args.output, encoding="utf-8") as f:
            return _write_markdown(json.load(f), args.output)
    if args.rounds < 3:
        print("--rounds must be at least 3: fewer show no spread", file=sys.stderr)
        return 2
    folder = args.scripts
    scripts = sorted(f for f in os.listdir(folder) if f.startswith("plot_") and f.endswith(".py"))
    only = {x if x.endswith(".py") else x + ".py" for x in args.only.split(",") if x}
    if only - set(scripts):
        print(f"no such benchmark script: {sorted(only - set(scripts))}", file=sys.stderr)
        return 2
    try:
        with open(args.output, encoding="utf-8") as f:
            previous = json.load(f)["scripts"]
    except (OSError, ValueError, KeyError):
        previous = {}
    kept = {k: v for k, v in previous.items() if k in scripts and (only and k not in only)}
    todo = [s for s in scripts if not only or s in only]
    machine, head, failed, busy = describe_machine(), commit(), [], []
    cores = os.cpu_count() or 1
    for name in todo:
        print(f"{name}: {args.rounds} rounds ...", flush=True)
        try:
            with OthersCpu() as others:
                comparisons, seconds = run_script(os.path.join(folder, name), args.rounds)
        except RuntimeError as e:
            print(e, file=sys.stderr)
            failed.append(name)
            if name in previous:
                kept[name] = previous[name]
            continue
        busy.append(others.share or 0.0)
        kept[name] = {
            "machine": machine,
            "commit": head,
            "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "rounds": args.rounds,
            "seconds": round(seconds, 1),
            "others_cpu": round(others.share or 0.0, 2),
            "cores": cores,
            "comparisons": comparisons,
        }
        for e in comparisons:
            print(f"  {e['words']}", flush=True)
    busiest = max(busy, default=0.0)
    note = (
        f"**Measured on a shared, loaded machine** (other processes used up to {busiest:.2f} "
        f"of {cores} CPUs while a script ran): its spreads are wider than a quiet "
        "machine's, and fewer pairs are ranked. Measure it again on a quiet machine with "
        "`make gallery-report`, and commit `benchmarks/results/gallery.*`."
        if busiest > QUIET
        else f"Measured on a quiet machine (other processes used at most {busiest:.2f} of "
        f"{cores} CPUs while a script ran)."
    )
    given = sys.argv[1:] if argv is None else argv
    command = "make gallery-report" + (
        f' GALLERY_ARGS="{" ".join(shlex.quote(a) for a in given)}"' if given else ""
    )
    report = {
        "about": "The words the gallery's benchmark pages state (benchmarks.harness.compare); "
        "written by make gallery-report (benchmarks/gallery_report.py).",
        "machine": machine,
        "commit": head,
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "command": command,
        "note": " ".join(x for x in (note, args.note) if x),
        "scripts": dict(sorted(kept.items())),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    text = json.dumps(report, indent=1)  # a list of numbers on one line
    text = re.sub(
        r"\[\s*([-0-9.e, \n]+?)\s*\]",
        lambda m: "[" + " ".join(m[1].split()) + "]",
        text,
    )
    with open(args.output + ".tmp", "w", encoding="utf-8") as f:
        f.write(text + "\n")
    os.replace(args.output + ".tmp", args.output)
    _write_markdown(report, args.output)
    if failed:
        print(f"failed (their previous entries kept, if any): {failed}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
