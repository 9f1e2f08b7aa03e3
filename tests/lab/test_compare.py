"""What a page says of two measurements: the gallery report's words, and this build against them.

The rules (``benchmarks.harness.compare``): the report ranks two measurements
only when its rounds do not overlap; a build states the report's words, then
its own ratio, inside the report's range or outside it (flagged); it fails
only when its own rounds reverse the report's ranking beyond their spread.
"""

from __future__ import annotations

import json

import pytest

from benchmarks.harness import compare
from benchmarks.harness.compare import MEASURE_ENV, REPORT_ENV, Comparison, ContradictsReport

FAST = [1.0, 1.1, 1.2, 1.0, 1.05, 1.1, 1.2]
SLOW = [2.0, 2.1, 2.4, 2.2, 2.0, 2.3, 2.5]  # per round 1.90x-2.20x the fast one


@pytest.fixture
def report(tmp_path, monkeypatch):
    """A gallery report with two entries of plot_x.py: a ranking and a tie within the noise."""
    entries = [
        compare("streaming", FAST, "copy", SLOW, script="plot_x.py").report_entry(),
        compare(
            "a", [1, 2, 3], "b", [1.5, 2.5, 2.8], context="load", script="plot_x.py"
        ).report_entry(),
    ]
    path = tmp_path / "gallery.json"
    path.write_text(json.dumps({"scripts": {"plot_x.py": {"comparisons": entries}}}))
    monkeypatch.setenv(REPORT_ENV, str(path))
    monkeypatch.delenv("UNITTEST_GOING", raising=False)
    monkeypatch.delenv(MEASURE_ENV, raising=False)
    return entries


def build(a, b, name_a="streaming", name_b="copy", **kw) -> Comparison:
    return compare(name_a, a, name_b, b, script="plot_x.py", **kw)


def said(c: Comparison) -> str:
    """The sentence on one line (a page's output block wraps it, next lines indented)."""
    return c.sentence().replace("\n  ", " ")


# -- the rule a verdict is decided by (the report's, or a build's own without one) --


def test_rounds_that_do_not_overlap_give_a_ranking_and_its_ratio():
    c = compare("streaming", [0.10, 0.11, 0.12], "copy", [0.20, 0.22, 0.25])
    assert c.separated
    text = c.own_sentence()
    assert text.startswith("streaming was faster than copy: copy took 2.00x as long")
    assert "0.1-0.12 s against 0.2-0.25 s" in text


def test_the_slower_one_is_named_second_whatever_the_order():
    c = compare("copy", [0.20, 0.22, 0.25], "streaming", [0.10, 0.11, 0.12])
    assert c.own_sentence().startswith("streaming was faster than copy: copy took 2.00x as long")


@pytest.mark.parametrize(
    "a,b",
    [
        ([0.10, 0.12, 0.30], [0.20, 0.22, 0.25]),  # one round of a slower than one of b
        ([0.15, 0.16, 0.40], [0.17, 0.18, 0.19]),  # a median lower, one outlier
        ([0.2, 0.2, 0.2], [0.2, 0.2, 0.2]),  # equal
    ],
)
def test_overlapping_rounds_are_within_the_noise(a, b):
    c = compare("a", a, "b", b)
    assert not c.separated
    text = c.own_sentence()
    assert "within this machine's noise" in text and "x as" not in text


def test_too_few_rounds_give_no_ranking():
    """One or two rounds show no spread: even far apart, they are not ranked."""
    c = compare("a", [0.1], "b", [0.9, 0.95])
    assert not c.separated
    assert "too few rounds to rank" in c.own_sentence() and "x as" not in c.own_sentence()


def test_a_comparison_needs_rounds_and_a_context_without_a_colon():
    with pytest.raises(ValueError, match="at least one round"):
        compare("a", [], "b", [1.0])
    with pytest.raises(ValueError, match="no ': '"):
        compare("a", [1.0], "b", [1.0], context="re: align")


def test_a_zero_median_gives_no_ratio():
    c = compare("streaming", [0.0, 0.0, 0.0], "load", [90.0, 91.0, 95.0], unit="MiB")
    assert c.separated
    assert c.own_sentence().startswith("streaming used less than load: load used more,")


def test_the_script_is_the_callers_file():
    assert compare("a", [1.0], "b", [2.0]).script == "test_compare.py"


# -- the page states the report's words --


def test_two_builds_state_the_same_words_each_with_its_own_ratio(report):
    one = said(build([1.0, 1.1, 1.2, 1.1, 1.0], [2.0, 2.2, 2.3, 2.1, 2.2]))
    two = said(build([1.0, 1.2, 1.1, 1.0, 1.3], [1.95, 2.3, 2.1, 1.95, 2.6]))
    words = (
        "streaming was faster than copy: copy took 2.00x as long (gallery report: the median "
        "of 7 per-round ratios, from 1.90x to 2.20x; every round of streaming below every "
        "round of copy)."
    )
    assert one.startswith(words + " This build: ") and two.startswith(words + " This build: ")
    assert one.endswith("This build: 2.00x, inside the report's range 1.90x-2.20x.")
    assert two.endswith("This build: 1.95x, inside the report's range 1.90x-2.20x.")


def test_a_sentence_fits_a_pages_output_block(report):
    c = build([1.0, 1.1, 1.2], [1.2, 1.3, 1.5], "onnx-light: align_external_data_streaming")
    lines = c.sentence().splitlines()
    assert len(lines) > 2 and all(len(line) <= 100 for line in lines)
    assert all(line.startswith("  ") and not line.startswith("   ") for line in lines[1:])
    assert "onnx-light: align_external_data_streaming" in " ".join(x.strip() for x in lines)


def test_a_build_outside_the_range_is_flagged_not_failed(report):
    """Streaming still faster, but only 1.2x: beyond the report's spread, not reversed."""
    text = said(build([1.0, 1.1, 1.2], [1.2, 1.3, 1.5]))
    assert text.startswith("streaming was faster than copy: copy took 2.00x as long")
    assert "This build: 1.20x, outside the report's range 1.90x-2.20x (flagged" in text


def test_a_build_that_reverses_the_ranking_beyond_its_noise_fails(report):
    with pytest.raises(ContradictsReport, match=r"(?s)0\.52x.*contradicts.*make gallery-report"):
        said(build([2.0, 2.1, 2.2], [1.0, 1.1, 1.2]))
    assert issubclass(ContradictsReport, AssertionError)  # a failed example: make doc fails


def test_a_reversed_median_within_the_builds_noise_is_only_flagged(report):
    """copy's median below streaming's, but their rounds overlap: not beyond the noise."""
    text = said(build([1.0, 2.6, 2.5], [2.4, 1.2, 2.0]))
    assert "outside the report's range" in text and "flagged" in text


def test_a_report_within_the_noise_is_never_contradicted(report):
    text = said(build([1.0, 1.0, 1.0], [5.0, 5.0, 5.0], "a", "b", context="load"))
    assert text.startswith("load: a and b are within this machine's noise (gallery report: a / b ")
    assert "This build: 0.20x, outside the report's range" in text
    assert build([1.0, 1.0, 1.0], [5.0, 5.0, 5.0], "a", "b", context="load").first is None


def test_a_quick_run_states_the_words_and_is_not_compared(report, monkeypatch):
    monkeypatch.setenv("UNITTEST_GOING", "1")
    text = said(build([2.0, 2.1, 2.2], [1.0, 1.1, 1.2]))  # reversed: no error here
    assert text.startswith("streaming was faster than copy: copy took 2.00x as long")
    assert text.endswith(
        "This build (a quick run, small sizes): 0.52x, not compared with the report."
    )


def test_a_comparison_the_report_lacks_says_so_and_gives_the_builds_own(report):
    text = said(build([1.0, 1.0, 1.0], [5.0, 5.0, 5.0], "a", "b", context="save"))
    assert text.startswith("save: a / b: no entry in the gallery report")
    assert text.endswith(
        "This build's own measurement, not the report's: a was faster than b: b took 5.00x as "
        "long, median of the per-round ratios, every round of one below every round of the "
        "other (1-1 s against 5-5 s, 3 and 3 rounds)."
    )
    assert build([1.0, 1.0, 1.0], [5.0, 5.0, 5.0], "a", "b", context="save").first == "a"


def test_the_ranking_a_page_acts_on_is_the_reports(report):
    """A script that branches on a ranking (threads: "paid off") follows the report too."""
    assert build([1.0, 1.3, 1.2], [1.2, 1.4, 1.5]).first == "streaming"  # overlapping here
    assert build([1.0, 1.3, 1.2], [1.2, 1.4, 1.5], context="other").first is None  # its own


def test_while_the_report_is_measured_sentences_record_their_rounds(report, tmp_path, monkeypatch):
    records = tmp_path / "records.jsonl"
    monkeypatch.setenv(MEASURE_ENV, str(records))
    text = said(build([2.0, 2.1, 2.2], [1.0, 1.1, 1.2], context="save"))
    assert text.startswith("save: measured for the gallery report: copy was faster than streaming")
    (line,) = records.read_text().splitlines()
    got = json.loads(line)
    assert (got["name_a"], got["a"], got["context"], got["script"]) == (
        "streaming",
        [2.0, 2.1, 2.2],
        "save",
        "plot_x.py",
    )


def test_a_report_entry_holds_the_ratios_their_range_and_the_verdict(report):
    ranked, tie = report
    assert ranked["ratios"]["of"] == "copy / streaming"
    assert ranked["ratios"]["median"] == pytest.approx(2.0)
    assert (ranked["ratios"]["low"], ranked["ratios"]["high"]) == pytest.approx(
        (1.905, 2.2), abs=1e-3
    )
    assert ranked["verdict"] == "streaming first" and ranked["rounds_a"] == FAST
    assert tie["verdict"] == "within the noise" and tie["ratios"]["of"] == "a / b"
    assert ranked["words"] == said(build(FAST, SLOW)).split(" This build")[0]
