"""``make realworld``: every verb on real exports, each output checked, one report.

Usage::

    python -m benchmarks.realworld.run [--size small|large] [--work DIR] [--output REPORT.md]

Builds the exports (:mod:`benchmarks.realworld.models`, cached), runs every step of
:func:`benchmarks.realworld.plan.steps` in fresh processes
(:mod:`benchmarks.realworld.worker`), checks each output (:mod:`.checks`):

- ``onnx.checker.check_model(path, full_check=True)`` and ``verify_model`` find nothing;
- onnxruntime's outputs on fixed inputs: bit-identical to the source's (align, dedup,
  save_edited), or to the reference's (convert: onnxruntime's float16 converter;
  quantize: its ``MatMulNBitsQuantizer``), whose initializers must also be the
  same, byte for byte;
- 20 tokens, greedy, by optimum (``ORTModelForCausalLM``, ``ORTModelForSeq2SeqLM``)
  and by onnxruntime-genai (``og.Model``) loaded from the output folder: the same
  tokens as from the source (or the reference).

Writes the report (default ``benchmarks/proofs/results/realworld.md`` and ``.csv``):
per step its time, the worker's peak RSS (``VmHWM``) and its peaks of anonymous and
file-backed memory apart, the checks and their verdicts. Exit 1 when any check failed.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.realworld import checks, models, plan  # noqa: E402
from benchmarks.text import measured_commit, report_path, write_report  # noqa: E402

MIB = 2**20
CHECK_ENDS = ("check_model", "verify", "reference", "source", "(fails as on the source)")
# the exporter's files a loader needs beside a model (copied where a verb does not)
COMPANIONS = ("*.json", "*.txt", "*.model", "*.jinja")


def run_worker(argv: list[str], scratch: str) -> dict:
    """``argv`` in a fresh ``python -m benchmarks.realworld.worker``; its record."""
    result = os.path.join(scratch, "result.json")
    cmd = [sys.executable, "-m", "benchmarks.realworld.worker", result, *argv]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode or not os.path.exists(result):
        raise RuntimeError(f"worker {argv} failed: {done.stderr[-2000:]}")
    with open(result) as f:
        record = json.load(f)
    os.remove(result)
    return record


def measure(commands: list[list[str]], scratch: str) -> dict:
    """Each command in its own worker: times added, largest peaks, first failure."""
    total = {"seconds": 0.0, "vm_hwm": 0, "peak_anon": 0, "peak_file": 0, "error": None}
    total["lines"], total["quantized"] = 0, 0
    for argv in commands:
        r = run_worker(argv, scratch)
        if argv[0] == "quantize" and r["exit"] == 0:
            total["quantized"] += int(r["output"].split()[0])
        total["seconds"] += r["seconds"]
        for k in ("vm_hwm", "peak_anon", "peak_file"):
            total[k] = max(total[k], r[k])
        total["lines"] += len(r["output"].splitlines())
        ways = [x[5:] for x in r["output"].splitlines() if x.startswith("way: ")]
        total["ways"] = sorted(set(total.get("ways", [])) | set(ways))
        if r["exit"] != 0 and total["error"] is None:
            detail = r["error"] or r["output"].strip().splitlines()[-1:]
            total["error"] = f"exit {r['exit']}: {detail} (worker {' '.join(argv)})"
    return total


def copy_companions(src_folder: str, dst_folder: str) -> None:
    """The exporter's files (config.json, tokenizer files, ...) of ``src_folder``."""
    for pattern in COMPANIONS:
        for path in glob.glob(os.path.join(src_folder, pattern)):
            shutil.copy(path, dst_folder)


def folder_bytes(folder: str) -> int:
    return sum(
        os.path.getsize(p) for p in glob.glob(os.path.join(folder, "*")) if os.path.isfile(p)
    )


class Baselines:
    """The sources' onnxruntime outputs and generated tokens, computed once each."""

    def __init__(self) -> None:
        self.outputs: dict[str, list] = {}
        self.feeds: dict[str, dict] = {}
        self.tokens: dict[tuple, list[int]] = {}
        self.checked: dict[str, str | None] = {}

    def source_check(self, src: str) -> str | None:
        """What ``check_model`` says of the exporter's own file (None: it passes)."""
        if src not in self.checked:
            self.checked[src] = _error(checks.check_model, src)
        return self.checked[src]

    def check_model(self, path: str, src: str) -> str | None:
        """``check_model`` on ``path``: None when it passes, or fails as on ``src``."""
        problem = _error(checks.check_model, path)
        return None if problem is None or problem == self.source_check(src) else problem

    def feeds_of(self, path: str) -> dict:
        if path not in self.feeds:
            self.feeds[path] = checks.feeds_for(path, models.VOCAB)
        return self.feeds[path]

    def ort(self, path: str) -> list:
        if path not in self.outputs:
            self.outputs[path] = checks.ort_outputs(path, self.feeds_of(path))
        return self.outputs[path]

    def generate(self, source: plan.Source, folder: str, names: dict, overlay=None) -> list:
        key = (folder, tuple(sorted(names.items())), overlay)
        if key not in self.tokens:
            self.tokens[key] = generate(source, folder, names, overlay)
        return self.tokens[key]


def generate(source: plan.Source, folder: str, names: dict[str, str], overlay=None) -> list:
    """The tokens the source's loader generates from ``folder`` (files named ``names``)."""
    if source.loader == "genai":
        return checks.genai_generate(folder, overlay)
    if source.loader == "seq2seq":
        keys = ["encoder_file_name", "decoder_file_name", "decoder_with_past_file_name"]
        files = {k: names[f] for k, f in zip(keys, source.files)}
        return checks.optimum_generate(folder, files, True, source.past)
    return checks.optimum_generate(folder, {"file_name": names["model.onnx"]}, False, source.past)


def _error(fn, *args) -> str | None:
    """None when ``fn(*args)`` returns None, else what it returned or raised."""
    try:
        return fn(*args)
    except Exception as e:  # the failure is the check's result
        text = str(e).strip()
        return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _try(results: list, name: str, fn) -> None:
    """Run one check: ``(name, None)`` when it passes, ``(name, what went wrong)``."""
    results.append((name, _error(fn)))


def check_step(step: plan.Step, base: Baselines) -> list[tuple[str, str | None]]:
    """Every check of a writer's outputs: ``[(check, None or the problem)]``."""
    import onnx_light.onnx as onnxl

    results = []
    reference = step.ref_out is not None
    for k, source in enumerate(step.sources):
        names = step.outputs[source.name]
        for f, name in names.items():
            path = os.path.join(step.out, name)
            src = os.path.join(source.folder, f)
            tag = f"{name}: " if len(step.sources) > 1 or len(names) > 1 else ""
            name_check = f"{tag}check_model"
            if base.source_check(src) is not None:  # the exporter's file fails it too
                name_check += " (fails as on the source)"
            _try(results, name_check, lambda p=path, s=src: base.check_model(p, s))
            _try(
                results,
                f"{tag}verify",
                lambda p=path: str(onnxl.verify_model(p).problems or "") or None,
            )
            if reference:
                ref = os.path.join(step.ref_out, f)
                _try(
                    results,
                    f"{tag}tensors = reference",
                    lambda p=path, r=ref: ", ".join(checks.tensors_differ(p, r)[:5]) or None,
                )
                _try(
                    results,
                    f"{tag}ort = reference",
                    lambda p=path, r=ref: checks.same_outputs(
                        checks.ort_outputs(p, base.feeds_of(r)), base.ort(r)
                    ),
                )
            else:
                _try(
                    results,
                    f"{tag}ort = source",
                    lambda p=path, s=src: checks.same_outputs(
                        checks.ort_outputs(p, base.feeds_of(s)), base.ort(s)
                    ),
                )
        if not source.loader:
            continue
        overlay = None
        if source.loader == "genai" and k > 0:
            overlay = f"{os.path.basename(source.folder)}_genai_config.json"
            if not os.path.exists(os.path.join(step.out, overlay)):
                results.append(("og.Model", f"no {overlay}: nothing names {list(names.values())}"))
                continue
        what = "og.Model" if source.loader == "genai" else "optimum"
        what = f"{what} {source.name}" if len(step.sources) > 1 else what
        if reference:
            ident = {f: f for f in source.files}
            try:
                expected = base.generate(source, step.ref_out, ident)
            except Exception as e:
                results.append(
                    (
                        f"{what} 20 tokens",
                        f"not compared: the reference fails too ({type(e).__name__}: {str(e).splitlines()[0][:200]})",
                    )
                )
                continue
        else:
            expected = base.generate(source, source.folder, {f: f for f in source.files})

        def same(source=source, names=names, overlay=overlay, expected=expected):
            got = generate(source, step.out, names, overlay)
            return (
                None
                if got == expected
                else f"{got[len(checks.PROMPT) :]} vs {expected[len(checks.PROMPT) :]}"
            )

        _try(results, f"{what} 20 tokens", same)
    return results


def run(
    size: str, work: str, only: list[str] | None = None, keep: bool = False
) -> tuple[list[dict], dict]:
    """Build, run every step, check; returns the report's rows and the run's facts.

    Args:
        size: the Llama's size (``small`` or ``large``).
        work: the folder of the outputs (emptied first).
        only: the names of the sources to run (default: all), e.g. ``llama-large``.
        keep: keep every output (by default each step's are deleted once checked).
    """
    import onnx_light.onnx as onnxl

    t0 = time.perf_counter()
    facts = {"size": size, "versions": models.versions(), "commit": measured_commit()}
    srcs = [s for s in plan.sources(size) if not only or s.name in only]
    facts["build_seconds"] = time.perf_counter() - t0
    help_text = subprocess.run(
        [sys.executable, "-m", "onnx_light", "align", "--help"], capture_output=True, text=True
    ).stdout
    facts["with_files"] = "--with-files" in help_text
    facts["quantize"] = hasattr(onnxl, "quantize_weights")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    base = Baselines()
    rows = []
    for step in plan.steps(srcs, work, facts["with_files"], facts["quantize"]):
        for folder in (step.out, step.ref_out):
            if folder:
                os.makedirs(folder, exist_ok=True)
        m = measure(step.commands, work)
        row = _row(step, step.verb, m)
        refrow = None
        if step.references:
            r = measure(step.references, work)
            name = "float16 converter" if step.verb == "convert" else "MatMulNBitsQuantizer"
            refrow = _row(step, f"{step.verb}: onnxruntime's {name}", r)
            refrow["checks"] = "; ".join(["the reference", *r.get("ways", [])])
            refrow["result"] = "ok" if not r["error"] else f"FAILED: {r['error']}"
        if step.copy_files and step.out:
            for s in step.sources:
                copy_companions(s.folder, step.out)
        if step.ref_out:
            for s in step.sources:
                copy_companions(s.folder, step.ref_out)
        if m["error"]:
            row["result"] = f"FAILED: {m['error']}"
        elif step.out:
            results = check_step(step, base)
            row["checks"] = _summary([n for n, p in results if p is None])
            if step.verb == "quantize":
                row["checks"] = f"{m['quantized']} weights quantized; " + row["checks"]
            bad = [f"{n}: {p}" for n, p in results if p is not None]
            row["result"] = "ok" if not bad else "FAILED: " + " | ".join(bad)
            row["out_mib"] = round(folder_bytes(step.out) / MIB, 1)
        else:
            row["checks"] = f"exit 0, {m['lines']} lines"
            row["result"] = "ok"
        if not keep:  # the outputs of a large model take gigabytes each
            for folder in (step.out, step.ref_out):
                if folder:
                    shutil.rmtree(folder, ignore_errors=True)
        print(
            f"{row['model']:28} {row['verb']:44} {row['seconds']:7.2f} s {row['result'][:200]}",
            flush=True,
        )
        rows.append(row)
        if refrow:
            rows.append(refrow)
    facts["seconds"] = time.perf_counter() - t0
    facts["refused"] = {k: v for k, v in base.checked.items() if v is not None}
    return rows, facts


def _summary(passed: list[str]) -> str:
    """The checks passed, each once with its count (``verify x3``), files left out."""
    counts: dict[str, int] = {}
    for name in passed:
        key = name.split(": ", 1)[-1] if name.endswith(tuple(CHECK_ENDS)) else name
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{k} x{n}" if n > 1 else k for k, n in counts.items())


def _row(step: plan.Step, verb: str, m: dict) -> dict:
    return {
        "model": step.label,
        "verb": verb,
        "files": len(step.commands)
        if step.verb != "dedup"
        else sum(len(s.files) for s in step.sources),
        "seconds": round(m["seconds"], 2),
        "vm_hwm_mib": round(m["vm_hwm"] / MIB, 1),
        "anon_mib": round(m["peak_anon"] / MIB, 1),
        "file_mib": round(m["peak_file"] / MIB, 1),
        "out_mib": "",
        "checks": "",
        "result": "",
    }


def report(rows: list[dict], facts: dict) -> str:
    """The report's Markdown."""
    failed = [r for r in rows if r["result"] != "ok"]
    versions = ", ".join(f"{k} {v}" for k, v in facts["versions"].items())
    started = ""
    if facts.get("started"):
        minutes = (time.time() - facts["started"]) / 60
        started = f" took {minutes:.1f} min in all (its venv, installs, exports, checks)"
    lines = [
        "# make realworld: every verb on real exports, checked by their loaders",
        "",
        f"Measured at {facts['commit']} on {datetime.date.today().isoformat()}, "
        f"{os.cpu_count()} cores, with {versions}; models `{facts['size']}` "
        f"(`benchmarks/realworld/models.py`, random weights, nothing downloaded). "
        f"Command: `make realworld`{started}; the runner took {facts['seconds'] / 60:.1f} min "
        f"(the exports {facts['build_seconds']:.0f} s, nothing when cached, then every step "
        "and its checks).",
        "",
        "Each verb ran in a fresh process (`benchmarks/realworld/worker.py`); its time and "
        "memory are the operation's, after its imports. Memory is the process's peak, "
        "absolute (the interpreter and onnx included): `VmHWM` (the kernel's), and the "
        "peaks of anonymous and file-backed memory apart (`RssAnon`, `RssFile`, sampled "
        "every millisecond): file-backed pages are the files' bytes mapped or the "
        "libraries, which the kernel can drop; anonymous memory is what the process "
        "holds. A step over several files adds their times and keeps their largest peaks.",
        "",
        f"`align` and `convert` {'copied the exporter files themselves (`--with-files`)' if facts['with_files'] else 'had no `--with-files`: the runner copied config.json and the tokenizer files beside their outputs'}; "
        "`save_edited` (an API, a metadata entry added) and `quantize` have no such option: "
        "the runner copied them. "
        + (
            "`quantize` ran (`onnx_light.onnx.quantize_weights`, its defaults, against "
            "`MatMulNBitsQuantizer`'s defaults)."
            if facts["quantize"]
            else "`quantize` did not run: `onnx_light.onnx.quantize_weights` did not exist."
        ),
        "",
        f"**{len(rows) - len(failed)} of {len(rows)} steps passed every check.**",
        "",
        "| model | verb | files | s | VmHWM MiB | anon MiB | file MiB | output MiB | checks passed | result |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        result = r["result"] if len(r["result"]) < 80 else r["result"][:77] + "..."
        lines.append(
            f"| {r['model']} | {r['verb']} | {r['files']} | {r['seconds']:.2f} | {r['vm_hwm_mib']} "
            f"| {r['anon_mib']} | {r['file_mib']} | {r['out_mib']} | {r['checks']} | {result} |"
        )
    if facts["refused"]:
        lines += [
            "",
            "`check_model (fails as on the source)`: onnx's full check refuses the exporter's "
            "own file, and the output with the same error, no other:",
            "",
        ]
        for path, problem in sorted(facts["refused"].items()):
            short = os.path.relpath(path, models.cache_root())
            lines.append(f"- `{short}`: {problem}")
    if failed:
        lines += ["", "## Failures", ""]
        lines += [f"- {r['model']} {r['verb']}: {r['result']}" for r in failed]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=["small", "large"], default=models.default_size())
    p.add_argument("--work", default=os.path.join(models.cache_root(), "run"))
    p.add_argument(
        "--output", default=None, help="the report (default: in benchmarks/proofs/results)"
    )
    p.add_argument("--keep", action="store_true", help="keep the outputs under --work")
    p.add_argument("--only", default=None, help="sources, comma-separated (default: all)")
    p.add_argument("--started", type=float, default=None, help="when make started (epoch s)")
    args = p.parse_args(argv)
    output = args.output or report_path(
        "realworld.md" if args.size == "small" else "realworld_large.md"
    )
    only = args.only.split(",") if args.only else None
    rows, facts = run(args.size, args.work, only, args.keep)
    facts["started"] = args.started
    write_report(output, report(rows, facts), rows)
    return 1 if any(r["result"] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
