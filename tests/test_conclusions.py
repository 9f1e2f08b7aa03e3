"""Reading the computed conclusions of two builds (``_doc/conclusions.py``)."""

from __future__ import annotations

import importlib.util
import os

from onnx_light.bench import compare

ROOT = os.path.join(os.path.dirname(__file__), "..")
_spec = importlib.util.spec_from_file_location(
    "conclusions", os.path.join(ROOT, "_doc", "conclusions.py")
)
conclusions = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conclusions)


def _page(folder, sentences):
    os.makedirs(os.path.join(folder, "auto_examples", "benchmarks"), exist_ok=True)
    body = "\n".join(f"<span>{s}</span>" for s in sentences)
    path = os.path.join(folder, "auto_examples", "benchmarks", "plot_x.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"<html><pre>{body}</pre></html>")


def test_every_form_of_sentence_gives_its_verdict():
    ranked = compare("in memory (load + save)", [3, 3.1, 3.2], "streaming", [1, 1.1, 1.2])
    noise = compare("load: onnx-light", [1, 2, 3], "onnx", [1.5, 2.5, 3.5])
    few = compare("a", [1], "b", [2])
    memory = compare("x", [1, 1, 1], "y", [5, 5, 5], unit="MiB")
    assert conclusions.verdict(ranked.sentence()) == (
        ("in memory (load + save)", "streaming"),
        "streaming first",
    )
    assert conclusions.verdict(noise.sentence()) == (("load: onnx-light", "onnx"), "noise")
    assert conclusions.verdict(few.sentence()) == (("a", "b"), "too few rounds")
    assert conclusions.verdict(memory.sentence()) == (("x", "y"), "x first")
    assert conclusions.verdict("peak memory: streaming at most +0.5 MiB") is None


def test_two_builds_that_agree_and_two_that_do_not(tmp_path, capsys):
    a, b, c = (str(tmp_path / n) for n in "abc")
    first = compare("streaming", [1, 1.1, 1.2], "copy", [2, 2.1, 2.2]).sentence()
    again = compare("streaming", [1.3, 1.4, 1.5], "copy", [2.5, 2.6, 2.7]).sentence()
    noise = compare("streaming", [1, 2, 3], "copy", [1.5, 2.5, 3.5]).sentence()
    _page(a, [f"re-align: {first}"])
    _page(b, [f"re-align: {again}"])  # other numbers, same conclusion
    _page(c, [f"re-align: {noise}"])
    assert conclusions.main([a, b]) == 0
    assert conclusions.main([a, c]) == 1
    out = capsys.readouterr().out
    assert "streaming first | noise   <-- differs" in out
