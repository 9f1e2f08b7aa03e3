"""``make gallery-report`` (``benchmarks/gallery_report.py``): the words the gallery states.

Run on a folder of two small gallery-like scripts: the report holds, per
script, the machine, the commit and the rounds, and per comparison the rounds,
the per-round ratios' median and range, the verdict and the words; a build of
the script then prints those words and where its own ratio falls.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "gallery_report", ROOT / "benchmarks" / "gallery_report.py"
)
gallery_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gallery_report)

SCRIPT = """
import time
from benchmarks.harness import compare, measure_rounds
r = measure_rounds(
    {"fast": lambda: time.sleep(0.002), "slow": lambda: time.sleep(0.03)}, rounds=3
)
print(r.compare("fast", "slow").sentence())
print(compare("fast", r.seconds("fast"), "slow", r.seconds("fast"), context="same").sentence())
"""


@pytest.fixture
def scripts(tmp_path, monkeypatch):
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "plot_one.py").write_text(SCRIPT)
    (folder / "plot_two.py").write_text(SCRIPT.replace('context="same"', 'context="again"'))
    monkeypatch.setenv("UNITTEST_GOING", "1")  # the report measures at full size anyway
    return folder


def _run(scripts, out, *args):
    return gallery_report.main(["--scripts", str(scripts), "--output", str(out), *args])


def test_the_report_holds_what_a_reader_needs_to_trust_it(scripts, tmp_path):
    out = tmp_path / "results" / "gallery.json"
    assert _run(scripts, out, "--rounds", "4", "--note", "Re-run me.") == 0
    report = json.loads(out.read_text())
    assert set(report["scripts"]) == {"plot_one.py", "plot_two.py"}
    one = report["scripts"]["plot_one.py"]
    assert one["rounds"] == 4 and one["machine"] and one["commit"] and one["date"]
    ranked, same = one["comparisons"]
    assert len(ranked["rounds_a"]) == 4  # measure_rounds(rounds=3) measured in the report's 4
    assert ranked["verdict"] == "fast first" and ranked["ratios"]["of"] == "slow / fast"
    assert ranked["ratios"]["low"] <= ranked["ratios"]["median"] <= ranked["ratios"]["high"]
    assert ranked["words"].startswith("fast was faster than slow: slow took ")
    assert same["verdict"] == "within the noise" and same["context"] == "same"
    assert report["note"].endswith("Re-run me.") and "other processes used" in report["note"]
    md = (tmp_path / "results" / "gallery.md").read_text()
    assert (
        md.count("machine: ") == 1 and "**plot_one.py**: 4 rounds" in md and ranked["words"] in md
    )
    (md_path := tmp_path / "results" / "gallery.md").unlink()
    assert _run(scripts, out, "--markdown") == 0 and md_path.read_text() == md  # from the JSON


@pytest.mark.parametrize("share, said", [(0.02, "quiet machine"), (0.9, "make gallery-report")])
def test_the_header_says_how_busy_the_rest_of_the_machine_was(
    scripts, tmp_path, monkeypatch, share, said
):
    """Quiet or loaded is decided by the CPU the other processes used (not the load
    average, which counts the report's own scripts); a loaded one says how to redo it."""

    class Busy:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.share = share

    monkeypatch.setattr(gallery_report, "OthersCpu", Busy)
    out = tmp_path / "gallery.json"
    assert _run(scripts, out, "--rounds", "3") == 0
    report = json.loads(out.read_text())
    assert said in report["note"] and f"{share:.2f} of" in report["note"]
    assert report["scripts"]["plot_one.py"]["others_cpu"] == share
    assert f"other processes used {share:.2f} of" in (tmp_path / "gallery.md").read_text()


def test_a_build_prints_the_reports_words_and_its_own_ratio(scripts, tmp_path):
    out = tmp_path / "gallery.json"
    assert _run(scripts, out, "--rounds", "3") == 0
    words = json.loads(out.read_text())["scripts"]["plot_one.py"]["comparisons"][0]["words"]
    env = dict(os.environ, ONNX_LIGHT_GALLERY_REPORT=str(out), PYTHONPATH=str(ROOT))
    env.pop("UNITTEST_GOING")
    done = subprocess.run(
        [sys.executable, str(scripts / "plot_one.py")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    first = done.stdout.replace("\n  ", " ").splitlines()[0]  # a sentence wraps
    assert first.startswith(words + " This build: ") and "the report's range" in first


def test_only_measures_some_scripts_again_and_keeps_the_others(scripts, tmp_path):
    out = tmp_path / "gallery.json"
    assert _run(scripts, out, "--rounds", "3") == 0
    before = json.loads(out.read_text())["scripts"]
    assert _run(scripts, out, "--rounds", "5", "--only", "plot_two") == 0
    after = json.loads(out.read_text())["scripts"]
    assert after["plot_one.py"] == before["plot_one.py"]
    assert after["plot_two.py"]["rounds"] == 5


def test_a_pair_compared_twice_without_a_context_is_refused(scripts, tmp_path, capsys):
    (scripts / "plot_two.py").write_text(SCRIPT.replace(', context="same"', ""))
    assert _run(scripts, tmp_path / "gallery.json", "--rounds", "3") == 1
    assert "compares the same pair twice" in capsys.readouterr().err
    report = json.loads((tmp_path / "gallery.json").read_text())
    assert set(report["scripts"]) == {"plot_one.py"}  # what could be measured is kept


def test_fewer_than_three_rounds_show_no_spread(scripts, tmp_path):
    assert _run(scripts, tmp_path / "gallery.json", "--rounds", "2") == 2
