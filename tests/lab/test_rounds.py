"""The measuring method of the gallery and ``make bench`` (``benchmarks.harness.rounds``)."""

from __future__ import annotations

import os

import pytest

from benchmarks.harness import Rounds, measure_rounds, summary_bars

MiB = 2**20
STATE = []


def test_each_run_is_a_process_of_its_own_that_changes_nothing_here():
    pids = []

    def mutate():
        STATE.append(os.getpid())  # the child's copy only
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")

    log = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"rounds-{os.getpid()}.log")
    try:
        rounds = measure_rounds({"a": mutate, "b": mutate}, rounds=3)
        with open(log) as f:
            pids = [int(x) for x in f.read().split()]
    finally:
        if os.path.exists(log):
            os.remove(log)
    assert STATE == []
    assert len(pids) == 6 and len(set(pids)) == 6 and os.getpid() not in pids
    assert len(rounds.runs) == 6


def test_rounds_are_interleaved_every_case_once_per_round():
    order = []
    rounds = measure_rounds(
        {name: (lambda: None) for name in "abcd"}, rounds=4, before=order.append
    )
    assert order[:4] == list("abcd")  # the first round in the given order
    for r in range(4):
        assert sorted(order[4 * r : 4 * r + 4]) == list("abcd")
    assert order[4:] != list("abcd") * 3  # later rounds shuffled
    assert rounds.names == list("abcd")
    assert [len(rounds.seconds(n)) for n in "abcd"] == [4] * 4


def test_peak_memory_comes_from_the_kernel_for_each_run():
    def allocate():
        block = bytearray(64 * MiB)
        block[::4096] = b"\1" * len(block[::4096])

    rounds = measure_rounds({"allocate": allocate, "nothing": lambda: None}, rounds=3)
    assert min(rounds.peaks("allocate")) >= 60
    assert max(rounds.peaks("nothing")) < 16
    c = rounds.compare("nothing", "allocate", what="peak")
    assert c.separated and c.own_sentence().startswith("nothing used less than allocate")
    assert c.unit == "MiB" and c.script == "test_rounds.py"  # its key in the gallery report


def test_while_the_gallery_report_is_measured_a_compared_measure_gets_its_rounds(monkeypatch):
    """make gallery-report sets ONNX_LIGHT_GALLERY_ROUNDS: every measure a page compares
    (3 rounds or more, or the default) gets them; a timeline or a profile of 1 keeps 1."""
    monkeypatch.setenv("ONNX_LIGHT_GALLERY_ROUNDS", "4")
    monkeypatch.setenv("UNITTEST_GOING", "1")  # a quick run would measure 1 by default
    case = {"a": lambda: None}
    assert len(measure_rounds(case).seconds("a")) == 4
    assert len(measure_rounds(case, rounds=3).seconds("a")) == 4
    assert len(measure_rounds(case, rounds=1).seconds("a")) == 1
    monkeypatch.delenv("ONNX_LIGHT_GALLERY_ROUNDS")
    assert len(measure_rounds(case).seconds("a")) == 1
    assert len(measure_rounds(case, rounds=3).seconds("a")) == 3


def test_rounds_compare_keeps_the_rounds_in_order_and_the_context():
    rounds = measure_rounds({"a": lambda: None, "b": lambda: None}, rounds=3)
    c = rounds.compare("a", "b", context="load")
    assert list(c.a) == rounds.seconds("a") and list(c.b) == rounds.seconds("b")
    assert c.context == "load" and c.sentence().startswith("load: a / b: no entry in the gallery")


def test_a_failing_case_raises_with_its_traceback():
    def fails():
        raise ValueError("tensor 'w' in model.onnx.data: boom")

    with pytest.raises(RuntimeError, match="(?s)'fails'.*ValueError: tensor 'w'"):
        measure_rounds({"fails": fails}, rounds=1)


def test_a_case_that_kills_its_process_raises():
    with pytest.raises(RuntimeError, match="(?s)'dies'.*exit status 3"):
        measure_rounds({"dies": lambda: os._exit(3)}, rounds=1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least one case"):
        measure_rounds({})
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        measure_rounds({"a": lambda: None}, rounds=0)


def test_summary_and_figure_show_the_spread():
    rounds = measure_rounds({"a": lambda: None}, rounds=3, timeline=True)
    assert isinstance(rounds, Rounds)
    (row,) = rounds.summary()
    assert row["operation"] == "a" and row["rounds"] == 3
    low, high = (float(x) for x in row["seconds (min-max)"].split("-"))
    assert (
        low <= float(f"{row['seconds (median)']:.3g}") <= high
    )  # the range is rounded to 3 digits
    assert rounds.samples("a")
    fig = summary_bars(["a"], {"a": rounds.seconds("a")}, "s", "title")
    ax = fig.axes[0]
    assert "min-max" in ax.get_xlabel()
    assert [t.get_text().endswith(" s") for t in ax.texts] == [True]  # the median written
    assert ax.get_xlim()[1] > max(rounds.seconds("a"))  # the whole line shows


def test_what_a_case_returns_is_kept_when_json_can_carry_it():
    rounds = measure_rounds(
        {"numbers": lambda: {"create_s": 0.5, "anon": [1, 2]}, "object": lambda: object()},
        rounds=2,
    )
    assert rounds.values("numbers") == [{"create_s": 0.5, "anon": [1, 2]}] * 2
    assert rounds.values("object") == [None, None]
