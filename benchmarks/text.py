"""Figures as the proof reports print them (no dependency: the proof venvs import it)."""

from __future__ import annotations

import statistics

__all__ = ["spread"]


def spread(values) -> str:
    """``min (median, max)`` of ``values`` to two decimals; the value alone when there is
    one, ``-`` when there is none."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{min(values):.2f} ({statistics.median(values):.2f}, {max(values):.2f})"
