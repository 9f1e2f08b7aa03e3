"""What a page may say of two measurements: the report's words, and whether this build agrees.

On a shared machine one run can be 2x off, and a rule that decides from each
build's few rounds flips near its threshold from one build to the next. So
the words a gallery page states come from **the gallery report**
(``benchmarks/results/gallery.json``, written by ``make gallery-report``):
every benchmark script measured once, in fresh processes, with more rounds,
committed with its machine, commit and rounds. Two builds print the same
words by construction; each build still measures, and says where its own
ratio falls against the report's.

The rules, for a comparison of two measurements (lower is better: seconds,
bytes), each a list of rounds measured in interleaved rounds:

- **The report's verdict.** The report ranks one first only when the ranking
  holds beyond its spread: the slower one's fastest round is slower than the
  faster one's slowest round (the ranges do not overlap), in at least
  :data:`MIN_ROUNDS` rounds each; its factor is the median of the per-round
  ratios. Otherwise the two are within the machine's noise.
- **Flagged.** A build whose ratio (the median of its per-round ratios) falls
  outside the report's range (the lowest to the highest per-round ratio) says
  so on the page: "outside the report's range", with both.
- **Failed.** A build fails (:class:`ContradictsReport`, which fails
  ``make doc``) only when it contradicts the report's ranking by more than the
  machine's noise: the report ranks A first, and this build's own rounds rank
  B first beyond their spread (every round of B below every round of A, at
  least :data:`MIN_ROUNDS` each). A report that finds the two within the
  noise is never contradicted; a quick run (``UNITTEST_GOING=1``: other sizes)
  is never compared.
- **Not in the report** (a new script or comparison): the page says so and
  prints the build's own measurement, marked as such, decided by the same
  rule as the report's verdict from the build's rounds.

Environment: ``ONNX_LIGHT_GALLERY_REPORT`` names another report file;
``ONNX_LIGHT_GALLERY_MEASURE`` (set by ``benchmarks/gallery_report.py``)
names a file where every comparison is recorded instead of checked.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from .sizes import quick_run

MIN_ROUNDS = 3  # fewer rounds show no spread: no ranking from them
WIDTH = 100  # the columns of a gallery page's output block: sentences wrap there
REPORT_ENV = "ONNX_LIGHT_GALLERY_REPORT"
MEASURE_ENV = "ONNX_LIGHT_GALLERY_MEASURE"
_HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(os.path.dirname(_HERE), "results", "gallery.json")  # benchmarks/results


class ContradictsReport(AssertionError):
    """A build ranks the other way than the gallery report, beyond its own rounds' spread."""


def _ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-round ratios ``a[i] / b[i]`` (rounds are interleaved: round i of each was
    measured in the same round); the ratio of medians when the counts differ."""
    pairs = (
        zip(a, b, strict=True)
        if len(a) == len(b)
        else [(statistics.median(a), statistics.median(b))]
    )
    return [(1.0 if x == 0 else math.inf) if y == 0 else x / y for x, y in pairs]


def _separated(a: Sequence[float], b: Sequence[float]) -> bool:
    if min(len(a), len(b)) < MIN_ROUNDS:
        return False
    return max(a) < min(b) or max(b) < min(a)


def _x(value: float) -> str:
    return f"{value:.2f}x" if math.isfinite(value) else "no ratio (a zero)"


@dataclass(frozen=True)
class Comparison:
    """Two measurements (lower is better: seconds, bytes) and what may be said of them.

    Attributes:
        name_a: what the first one measures.
        name_b: what the second one measures.
        a: rounds of the first, in round order.
        b: rounds of the second, in round order.
        unit: the unit of the values, for sentences ("s", "MiB").
        context: what the pair is compared in ("load", "save, one file"), when a
            script compares the same names more than once; printed first.
        script: the gallery script that made the comparison (its file name): with
            ``context``, the names and the unit, its key in the report.
    """

    name_a: str
    name_b: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    unit: str = "s"
    context: str = ""
    script: str = ""

    @property
    def ratio(self) -> float:
        """Median of ``a`` over median of ``b`` (infinite when only ``b``'s is 0)."""
        a, b = statistics.median(self.a), statistics.median(self.b)
        if b == 0:
            return 1.0 if a == 0 else float("inf")
        return a / b

    @property
    def separated(self) -> bool:
        """True when this build's rounds do not overlap (and there are enough of
        them to show a spread): this build alone would rank them."""
        return _separated(self.a, self.b)

    @property
    def reported(self) -> dict | None:
        """The report's entry for this comparison, or None when the report has none."""
        entries = report_entries()
        return entries.get((self.script, self.context, self.name_a, self.name_b, self.unit))

    @property
    def first(self) -> str | None:
        """The name the page ranks first, ``name_a`` or ``name_b``, or None.

        It is the gallery report's verdict, or, when the report has no entry for this
        comparison, this build's own by the same rule; None when the two are within
        the noise. A script that draws its own conclusion from the ranking (which one
        to recommend) reads it here, so its words are the report's too.
        """
        entry = self.reported
        a, b = (entry["rounds_a"], entry["rounds_b"]) if entry else (self.a, self.b)
        if not _separated(a, b):
            return None
        return self.name_a if max(a) < min(b) else self.name_b

    def own_sentence(self) -> str:
        """What this build's rounds alone say, by the report's rule, with their spreads.

        Not what a gallery page prints (:meth:`sentence` states the report's words):
        for a report that is itself the measurement (``benchmarks/ort_alignment.py``),
        and for the rounds :meth:`sentence` records or has no report entry for.

        Returns:
            A ranking ("A was faster than B: B took 2.00x as long, median of the
            per-round ratios, ...") when every round of one is below every round of
            the other, at least 3 rounds each; else that the two are within this
            machine's noise, or were measured in too few rounds.
        """
        spread_a = f"{min(self.a):.3g}-{max(self.a):.3g} {self.unit}"
        spread_b = f"{min(self.b):.3g}-{max(self.b):.3g} {self.unit}"
        rounds = f"{len(self.a)} and {len(self.b)} rounds"
        if min(len(self.a), len(self.b)) < MIN_ROUNDS:
            return (
                f"{self.name_a} ({spread_a}) and {self.name_b} ({spread_b}) were measured "
                f"in too few rounds to rank them ({rounds}; at least {MIN_ROUNDS} each)."
            )
        if not self.separated:
            return (
                f"{self.name_a} ({spread_a}) and {self.name_b} ({spread_b}) are within this "
                f"machine's noise: their rounds overlap ({rounds})."
            )
        low, high = (
            (self.name_a, self.name_b) if max(self.a) < min(self.b) else (self.name_b, self.name_a)
        )
        factor = statistics.median(
            _ratios(self.b, self.a) if low == self.name_a else _ratios(self.a, self.b)
        )
        beyond = (
            f"median of the per-round ratios, every round of one below every round of the "
            f"other ({spread_a} against {spread_b}, {rounds})"
        )
        return _ranked(low, high, factor, self.unit) + f", {beyond}."

    def sentence(self) -> str:
        """The sentence a page prints: the gallery report's words, then where this build falls.

        The words are the report's (``benchmarks/results/gallery.json``, measured
        once by ``make gallery-report``), so every build prints the same ones: a
        ranking when the report's rounds do not overlap (its factor the median of
        its per-round ratios), else "within this machine's noise". Then this
        build's own ratio (the median of its per-round ratios, in the same
        direction): inside the report's range (its lowest to highest per-round
        ratio), or outside it, flagged on the page. Outside is an error only when
        this build contradicts the report's ranking by more than the machine's
        noise: its own rounds rank the other one first, every round of it below
        every round of the report's first, in at least 3 rounds each. A quick run
        (``UNITTEST_GOING=1``) measures other sizes and is not compared. Without a
        report entry (a new comparison), the page says so and prints this build's
        own measurement, marked as such.

        Returns:
            ``[context: ]`` the report's verdict and its numbers, then ``This build:
            R, inside the report's range L-H.`` (or outside it, flagged); without a
            report entry, that the report has none and this build's own
            measurement. Wrapped at 100 columns (a page's output block),
            the lines after the first indented by two spaces.

        Raises:
            AssertionError: a ``ContradictsReport``: this build contradicts the
                report's ranking by more than its own noise (it fails ``make doc``).
        """
        return _wrap(self._sentence())

    def _sentence(self) -> str:
        lead = f"{self.context}: " if self.context else ""
        if os.environ.get(MEASURE_ENV):
            self._record(os.environ[MEASURE_ENV])
            return f"{lead}measured for the gallery report: {self.own_sentence()}"
        entry = self.reported
        if entry is None:
            return (
                f"{lead}{self.name_a} / {self.name_b}: no entry in the gallery report (a "
                "comparison it has not measured; make gallery-report measures it). This "
                f"build's own measurement, not the report's: {self.own_sentence()}"
            )
        words = stated(entry)
        top, bottom = self._orientation()
        mine = statistics.median(_ratios(top, bottom))
        if quick_run():
            return (
                f"{words} This build (a quick run, small sizes): {_x(mine)}, not compared "
                "with the report."
            )
        ranked = self.first
        if (
            ranked is not None
            and self.separated
            and (max(self.a) < min(self.b)) != (ranked == self.name_a)
        ):
            raise ContradictsReport(
                f"{words} This build: {_x(mine)}, and its own rounds rank the other first "
                f"beyond their spread ({self.name_a}: {list(self.a)}, {self.name_b}: "
                f"{list(self.b)}): it contradicts the report's ranking by more than this "
                "machine's noise. If the change is real, measure the report again "
                "(make gallery-report) and commit it."
            )
        low, high = _range(entry)
        span = f"{_x(low)}-{_x(high)}"
        if round(low, 2) <= round(mine, 2) <= round(high, 2):
            return f"{words} This build: {_x(mine)}, inside the report's range {span}."
        return (
            f"{words} This build: {_x(mine)}, outside the report's range {span} (flagged: it "
            "disagrees beyond the report's spread, without reversing its ranking beyond "
            "this build's own noise)."
        )

    def report_entry(self) -> dict:
        """This comparison as an entry of the gallery report (what ``make gallery-report``
        writes to ``benchmarks/results/gallery.json``).

        Returns:
            A dict: the names, unit, context and rounds; ``ratios`` (the per-round
            ratios, the slower over the faster when ranked, their median, lowest and
            highest: the range a build's ratio is checked against); ``verdict`` ("A
            first" or "within the noise"); ``words``, the sentence every page then
            states.
        """
        e = {
            "context": self.context,
            "a": self.name_a,
            "b": self.name_b,
            "unit": self.unit,
            "rounds_a": list(self.a),
            "rounds_b": list(self.b),
        }
        first = _first(e)
        top, bottom = (self.b, self.a) if first == self.name_a else (self.a, self.b)
        low, high = _range(e)
        e["ratios"] = {
            "of": f"{self.name_b} / {self.name_a}"
            if first == self.name_a
            else f"{self.name_a} / {self.name_b}",
            "per round": _ratios(top, bottom),
            "median": statistics.median(_ratios(top, bottom)),
            "low": low,
            "high": high,
        }
        e["verdict"] = f"{first} first" if first else "within the noise"
        e["words"] = stated(e)
        return e

    def _orientation(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(numerator, denominator) of this build's ratio, as the report states its own
        (:func:`_range`): the slower over the faster when it ranks them, else ``a`` over ``b``."""
        return (self.b, self.a) if self.first == self.name_a else (self.a, self.b)

    def _record(self, path: str) -> None:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(asdict(self)) + "\n")


def _wrap(text: str) -> str:
    """``text`` in lines of at most :data:`WIDTH` columns, the next ones indented by two
    spaces; joining them back with single spaces gives ``text`` (``_doc/conclusions.py``)."""
    return textwrap.fill(
        text, WIDTH, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )


def _ranked(low: str, high: str, factor: float, unit: str) -> str:
    verb = "was faster than" if unit == "s" else "used less than"
    if not math.isfinite(factor):
        return f"{low} {verb} {high}: {high} used more"
    much = "took {:.2f}x as long" if unit == "s" else "used {:.2f}x as much"
    return f"{low} {verb} {high}: {high} " + much.format(factor)


def _range(entry: dict) -> tuple[float, float]:
    """The report's lowest and highest per-round ratio: the slower over the faster when it
    ranks them, else ``a`` over ``b``."""
    a, b = entry["rounds_a"], entry["rounds_b"]
    ratios = _ratios(b, a) if _first(entry) == entry["a"] else _ratios(a, b)
    return min(ratios), max(ratios)


def _first(entry: dict) -> str | None:
    a, b = entry["rounds_a"], entry["rounds_b"]
    if not _separated(a, b):
        return None
    return entry["a"] if max(a) < min(b) else entry["b"]


def stated(entry: dict) -> str:
    """The words a page states for one entry of the report (the same in every build).

    Args:
        entry: one comparison of the report: ``context``, ``a``, ``b``, ``unit``,
            ``rounds_a``, ``rounds_b`` (the report's rounds, in round order).
    """
    lead = f"{entry['context']}: " if entry.get("context") else ""
    a, b, n = entry["a"], entry["b"], min(len(entry["rounds_a"]), len(entry["rounds_b"]))
    first = _first(entry)
    low, high = _range(entry)
    if first is None:
        median = statistics.median(_ratios(entry["rounds_a"], entry["rounds_b"]))
        return (
            f"{lead}{a} and {b} are within this machine's noise (gallery report: {a} / {b} "
            f"{_x(median)}, the median of {n} per-round ratios, from {_x(low)} to {_x(high)}; "
            "their rounds overlap)."
        )
    slow = b if first == a else a
    rounds_fast, rounds_slow = (
        (entry["rounds_a"], entry["rounds_b"])
        if first == a
        else (entry["rounds_b"], entry["rounds_a"])
    )
    factor = statistics.median(_ratios(rounds_slow, rounds_fast))
    return (
        f"{lead}{_ranked(first, slow, factor, entry['unit'])} (gallery report: the median of "
        f"{n} per-round ratios, from {_x(low)} to {_x(high)}; every round of {first} below "
        f"every round of {slow})."
    )


_cache: dict[tuple[str, float], dict] = {}


def report_entries(path: str | None = None) -> dict:
    """``{(script, context, a, b, unit): entry}`` of the gallery report (empty: no file).

    Args:
        path: the report (None: ``ONNX_LIGHT_GALLERY_REPORT``, else the committed
            ``benchmarks/results/gallery.json``).
    """
    path = os.environ.get(REPORT_ENV, REPORT) if path is None else path
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return {}
    if (path, mtime) not in _cache:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
        _cache[(path, mtime)] = {
            (script, e.get("context", ""), e["a"], e["b"], e["unit"]): e
            for script, part in report["scripts"].items()
            for e in part["comparisons"]
        }
    return _cache[(path, mtime)]


def _calling_script() -> str:
    """The file name of the first caller outside this package (the gallery script)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _HERE:
        frame = frame.f_back
    return os.path.basename(frame.f_code.co_filename) if frame is not None else ""


def compare(
    name_a: str,
    a: Sequence[float],
    name_b: str,
    b: Sequence[float],
    unit: str = "s",
    context: str = "",
    script: str | None = None,
) -> Comparison:
    """Compare two lists of rounds; :meth:`Comparison.sentence` states the gallery report's
    verdict and checks these rounds against it.

    Args:
        name_a: what the first one measures.
        a: its rounds, in round order.
        name_b: what the second one measures.
        b: its rounds, in round order.
        unit: "s" or "MiB".
        context: what they are compared in, when a script compares the same names
            more than once (part of the report's key, printed first; without ": ").
        script: the script's file name in the report (None: the file of the caller).

    Raises:
        ValueError: a list is empty, or ``context`` holds ": ".
    """
    if not a or not b:
        raise ValueError("compare needs at least one round of each measurement")
    if ": " in context:
        raise ValueError(
            f"a context holds no ': ' (it ends where the sentence starts): {context!r}"
        )
    script = _calling_script() if script is None else script
    return Comparison(name_a, name_b, tuple(a), tuple(b), unit, context, script)
