"""Reading the conclusions of two builds (``_doc/conclusions.py``): the same words, or not."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from benchmarks.harness import compare
from benchmarks.harness.compare import REPORT_ENV

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
_spec = importlib.util.spec_from_file_location(
    "conclusions", os.path.join(ROOT, "_doc", "conclusions.py")
)
conclusions = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conclusions)

FAST, SLOW = [1.0, 1.1, 1.2, 1.0, 1.1], [2.0, 2.1, 2.4, 2.2, 2.3]


def _report(path, *comparisons):
    entries = [c.report_entry() for c in comparisons]
    path.write_text(json.dumps({"scripts": {"plot_x.py": {"comparisons": entries}}}))
    return str(path)


@pytest.fixture
def report(tmp_path, monkeypatch):
    monkeypatch.delenv("UNITTEST_GOING", raising=False)
    path = _report(
        tmp_path / "gallery.json",
        compare("in memory (load + save)", SLOW, "streaming", FAST, script="plot_x.py"),
        compare(
            "onnx-light", [1, 2, 3], "onnx", [1.5, 2.5, 2.8], context="load", script="plot_x.py"
        ),
        compare(
            "onnx-light: align",
            FAST,
            "onnx: load + save",
            SLOW,
            context="re-align",
            script="plot_x.py",
        ),
    )
    monkeypatch.setenv(REPORT_ENV, path)
    return path


def said(name_a, a, name_b, b, **kw):
    """The sentence as a page prints it: wrapped, the next lines indented."""
    return compare(name_a, a, name_b, b, script="plot_x.py", **kw).sentence()


def read(text):
    (line,) = conclusions.logical_lines(text)
    return conclusions.read(line)


def _page(folder, sentences):
    os.makedirs(os.path.join(folder, "auto_examples", "benchmarks"), exist_ok=True)
    body = "\n".join(f"<span>{s}</span>" for s in sentences)
    path = os.path.join(folder, "auto_examples", "benchmarks", "plot_x.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            f"<html><p>otherwise the two are within this machine's noise</p>\n<pre>{body}</pre></html>"
        )


def test_every_form_of_sentence_gives_its_verdict(report):
    ranked = read(said("in memory (load + save)", SLOW, "streaming", FAST))
    noise = read(said("onnx-light", [1, 2, 3], "onnx", [2, 2, 2], context="load"))
    colon = read(said("onnx-light: align", FAST, "onnx: load + save", SLOW, context="re-align"))
    own = read(said("a", [1, 1, 1], "b", [5, 5, 5], context="save"))
    few = read(said("a", [1], "b", [2]))
    assert (ranked.pair, ranked.verdict, ranked.source) == (
        ("in memory (load + save)", "streaming"),
        "streaming first",
        "report",
    )
    assert ranked.build.startswith("This build: 2.00x, inside the report's range")
    assert (noise.context, noise.pair, noise.verdict) == ("load", ("onnx", "onnx-light"), "noise")
    assert (colon.context, colon.pair, colon.verdict) == (
        "re-align",
        ("onnx-light: align", "onnx: load + save"),
        "onnx-light: align first",
    )
    assert (own.context, own.verdict, own.source) == ("save", "a first", "this build")
    assert few.verdict == "too few rounds" and few.source == "this build"
    assert conclusions.read("peak memory: streaming at most +0.5 MiB") is None
    assert conclusions.read("else the two are within this machine's noise") is None


def test_two_builds_state_the_same_words_whatever_they_measured(report, tmp_path, capsys):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _page(a, [said("in memory (load + save)", SLOW, "streaming", FAST)])
    # another build: other numbers, outside the report's range (flagged), same words
    _page(b, [said("in memory (load + save)", [1.3, 1.4, 1.5], "streaming", [1.0, 1.1, 1.2])])
    assert conclusions.main([a, b]) == 0
    out = capsys.readouterr().out
    assert "1 conclusion(s), 0 differing between the builds" in out
    assert (
        f"{b}: 1 conclusion(s), 0 not in the report, 1 measured outside the report's range" in out
    )


def test_builds_from_other_reports_differ(report, tmp_path, monkeypatch, capsys):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _page(a, [said("in memory (load + save)", SLOW, "streaming", FAST)])
    monkeypatch.setenv(
        REPORT_ENV,
        _report(
            tmp_path / "other.json",
            compare(
                "in memory (load + save)",
                SLOW[:3] + [0.9],
                "streaming",
                FAST[:4],
                script="plot_x.py",
            ),
        ),
    )
    _page(b, [said("in memory (load + save)", SLOW, "streaming", FAST)])
    assert conclusions.main([a, b]) == 1
    out = capsys.readouterr().out
    assert "in memory (load + save) / streaming: streaming first | noise   <-- differs" in out


def test_the_builds_own_verdicts_differ_where_the_report_has_none(report, tmp_path, capsys):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _page(a, [said("x", [1, 1, 1], "y", [5, 5, 5])])
    _page(b, [said("x", [1, 5, 1], "y", [5, 1, 5])])
    assert conclusions.main([a, b]) == 1
    out = capsys.readouterr().out
    assert (
        "x / y: x first (this build only: not in the report) | noise (this build only: not in "
        "the report)   <-- differs"
    ) in out


def test_a_site_without_conclusions_fails(tmp_path, capsys):
    _page(str(tmp_path / "a"), ["nothing to see"])
    assert conclusions.main([str(tmp_path / "a")]) == 1
    assert "no gallery conclusion found" in capsys.readouterr().out
