"""Rankings that hold beyond the spread: when a page may say "faster" or "1.8x".

On a shared machine one run can be 2x off. A comparison of two measurements,
each a list of rounds, is stated only when it holds beyond their spread: the
slower one's fastest round is slower than the faster one's slowest round
(the ranges do not overlap), each measured in at least :data:`MIN_ROUNDS`
rounds. Otherwise the two are said to be within this machine's noise (or
measured too few times to rank), and no ratio is printed.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_ROUNDS = 3  # fewer rounds show no spread: no ranking from them


@dataclass(frozen=True)
class Comparison:
    """Two measurements (lower is better: seconds, bytes) and what may be said of them.

    Attributes:
        name_a: what the first one measures.
        name_b: what the second one measures.
        a: rounds of the first.
        b: rounds of the second.
        unit: the unit of the values, for sentences ("s", "MiB").
    """

    name_a: str
    name_b: str
    a: tuple[float, ...]
    b: tuple[float, ...]
    unit: str = "s"

    @property
    def ratio(self) -> float:
        """Median of ``a`` over median of ``b`` (infinite when only ``b``'s is 0)."""
        a, b = statistics.median(self.a), statistics.median(self.b)
        if b == 0:
            return 1.0 if a == 0 else float("inf")
        return a / b

    @property
    def separated(self) -> bool:
        """True when the ranges of the rounds do not overlap (and there are enough of
        them to show a spread): the ranking holds."""
        if min(len(self.a), len(self.b)) < MIN_ROUNDS:
            return False
        return max(self.a) < min(self.b) or max(self.b) < min(self.a)

    def sentence(self) -> str:
        """One sentence a page may print: a ranking with its ratio only when it holds."""
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
        low, high = (self.name_a, self.name_b) if self.ratio < 1 else (self.name_b, self.name_a)
        factor = self.ratio if self.ratio >= 1 else (1 / self.ratio if self.ratio else float("inf"))
        beyond = (
            f"median over median, every round of one below every round of the other "
            f"({spread_a} against {spread_b}, {rounds})"
        )
        if factor == float("inf"):
            return f"{low} used less than {high}: {high} used more, {beyond}."
        if self.unit == "s":
            return f"{low} was faster than {high}: {high} took {factor:.2f}x as long, {beyond}."
        return f"{low} used less than {high}: {high} used {factor:.2f}x as much, {beyond}."


def compare(
    name_a: str, a: Sequence[float], name_b: str, b: Sequence[float], unit: str = "s"
) -> Comparison:
    """Compare two lists of rounds (see :class:`Comparison`).

    Raises:
        ValueError: a list is empty.
    """
    if not a or not b:
        raise ValueError("compare needs at least one round of each measurement")
    return Comparison(name_a, name_b, tuple(a), tuple(b), unit)
