"""Two sizes for every measurement: the real one, and a quick one under ``UNITTEST_GOING=1``."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["quick_run", "sized"]


def quick_run() -> bool:
    """Whether this is a quick run: ``UNITTEST_GOING=1`` in the environment.

    The tests and CI set it: the gallery's scripts then build small models and
    measure one round (:func:`~benchmarks.harness.default_rounds`), to run in
    seconds. ``make doc`` leaves it unset and measures at full size.

    Returns:
        True when ``UNITTEST_GOING`` is ``"1"``.
    """
    return os.environ.get("UNITTEST_GOING", "0") == "1"


def sized(full: Any, quick: Any) -> Any:
    """``full``, or ``quick`` in a quick run (:func:`quick_run`).

    Example: ``N_WEIGHTS, DIM = sized((24, 1024), quick=(8, 256))``, 24
    weights of 1024 x 1024, or 8 of 256 x 256 in a quick run.

    Args:
        full: the value of a real measurement.
        quick: the value under ``UNITTEST_GOING=1``.

    Returns:
        One of the two.
    """
    return quick if quick_run() else full
