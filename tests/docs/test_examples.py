"""Every benchmark of the gallery runs on its own, at small sizes, and prints its conclusions.

Each ``examples/benchmarks/plot_*.py`` runs in a fresh interpreter with
``UNITTEST_GOING=1`` (small models) and ``MPLBACKEND=Agg`` (no display), from
an empty temporary folder so a script that writes next to itself is caught. Its
output must hold the lines that state what it shows (:data:`CONCLUSIONS`, a
pattern per line) and at least one ranking sentence,
as ``_doc/conclusions.py`` reads them from the built site, in the words of the
committed gallery report (``benchmarks/results/gallery.json``) where it has the
comparison, and, in this quick run, without comparing its ratio with the report's.
The getting-started recipes run as a reader runs them: ``tests/docs/test_recipes.py``.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness.compare import report_entries

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = sorted(EXAMPLES.glob("benchmarks/plot_*.py"))
TIMEOUT = 600

_spec = importlib.util.spec_from_file_location(
    "conclusions", EXAMPLES.parent / "_doc" / "conclusions.py"
)
conclusions = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conclusions)

# the lines each example prints to state what it found (regular expressions, one line each)
CONCLUSIONS = {
    "plot_align_external_data_streaming.py": [
        r"\d+ tensors: offsets aligned to 4096, lengths and bytes equal",
        r"peak memory: streaming at most \+[\d.]+ MiB, in memory at least \+[\d.]+ MiB.*",
    ],
    "plot_convert_float16.py": [
        r"\d+ tensors: the same float16 bytes in both outputs",
        r"onnxruntime: outputs \(\d+, \d+\) identical; largest difference to float32: \S+",
        r"peak memory: onnx-light at most \+[\d.]+ MiB, the usual recipe at least \+[\d.]+ MiB.*",
    ],
    "plot_deduplicate_external_data.py": [
        r"[\d.]+ MiB of tensors -> [\d.]+ MiB written, \d+ groups of tensors share a range",
        r"same outputs, checker passes, for encoder_model, decoder_model, decoder_with_past_model",
    ],
    "plot_load_save_time.py": [r"load: onnx-light .*", r"save: onnx-light .*"],
    "plot_onnxruntime_loading_memory.py": [
        r"\* two files, prepacking off: created in [\d.]+ s; anonymous memory",
    ],
    "plot_profile_external_data_save.py": [
        r"checked: onnx opened files \d+ times for \d+ tensors moved out, and changed the model "
        r"it saved; onnx-light left the model unchanged, \d+ offsets aligned to 4096, the same "
        r"tensors as onnx",
    ],
    "plot_save_model_with_shared_external_data.py": [
        r"the shared save wrote [\d.]+ MiB instead of [\d.]+ MiB",
        r"first.onnx and first.onnx.data unchanged",
        r"outputs \(\d+, \d+\): shared == naive, and match numpy",
    ],
    "plot_threads_load_save.py": [r"the default num_threads=None uses at most \d+ threads? .*"],
}


def test_examples_found():
    assert SCRIPTS, f"no examples/benchmarks/plot_*.py under {EXAMPLES}"


def test_every_example_states_its_conclusions():
    """A new benchmark must say here which lines state what it shows."""
    assert sorted(s.name for s in SCRIPTS) == sorted(CONCLUSIONS)


@pytest.mark.parametrize("script", SCRIPTS, ids=[f"{s.parent.name}/{s.name}" for s in SCRIPTS])
def test_example_runs(script: Path, tmp_path: Path):
    env = dict(os.environ, UNITTEST_GOING="1", MPLBACKEND="Agg")
    root = str(EXAMPLES.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert proc.returncode == 0, (
        f"{script.name} exited with {proc.returncode}\n"
        f"--- stdout (end) ---\n{proc.stdout[-3000:]}\n"
        f"--- stderr ---\n{proc.stderr[-6000:]}"
    )
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert not leftovers, f"{script.name} left files in its working folder: {leftovers}"
    lines = [line.strip() for line in proc.stdout.splitlines()]
    for pattern in CONCLUSIONS[script.name]:
        assert any(re.fullmatch(pattern, line) for line in lines), (
            f"{script.name} did not print a line matching {pattern!r}\n"
            f"--- stdout (end) ---\n{proc.stdout[-3000:]}"
        )
    logical = conclusions.logical_lines(proc.stdout)
    stated = [c for c in map(conclusions.read, logical) if c is not None]
    assert stated, f"{script.name} printed no ranking sentence (Comparison.sentence())"
    reported = {
        (context, tuple(sorted((a, b)))): entry
        for (name, context, a, b, _), entry in report_entries().items()
        if name == script.name
    }
    for c in stated:
        entry = reported.get((c.context, c.pair))
        if entry is None:  # a comparison the report lacks: the build's own, said so
            assert c.source == "this build", c
            continue
        assert c.source == "report" and c.words == entry["words"], (
            f"{script.name} did not state the gallery report's words:\n{c.words}\n{entry['words']}"
        )
        assert "(a quick run, small sizes)" in c.build and "not compared" in c.build
