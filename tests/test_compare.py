"""The ranking rule: a comparison is stated only when it holds beyond the spread."""

from __future__ import annotations

import pytest

from onnx_light.bench import compare


def test_rounds_that_do_not_overlap_give_a_ranking_and_its_ratio():
    c = compare("streaming", [0.10, 0.11, 0.12], "copy", [0.20, 0.22, 0.25])
    assert c.separated
    text = c.sentence()
    assert text.startswith("streaming was faster than copy: copy took 2.00x as long")
    assert "0.1-0.12 s against 0.2-0.25 s" in text


def test_the_slower_one_is_named_second_whatever_the_order():
    c = compare("copy", [0.20, 0.22, 0.25], "streaming", [0.10, 0.11, 0.12])
    assert c.sentence().startswith("streaming was faster than copy: copy took 2.00x as long")


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
    text = c.sentence()
    assert "within this machine's noise" in text and "x as" not in text


def test_too_few_rounds_give_no_ranking():
    """One or two rounds show no spread: even far apart, they are not ranked."""
    c = compare("a", [0.1], "b", [0.9, 0.95])
    assert not c.separated
    assert "too few rounds to rank" in c.sentence() and "x as" not in c.sentence()


def test_a_comparison_needs_rounds():
    with pytest.raises(ValueError, match="at least one round"):
        compare("a", [], "b", [1.0])


def test_a_zero_median_gives_no_ratio():
    c = compare("streaming", [0.0, 0.0, 0.0], "load", [90.0, 91.0, 95.0], unit="MiB")
    assert c.separated
    assert c.sentence().startswith("streaming used less than load: load used more,")
