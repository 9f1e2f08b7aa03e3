"""Figures as the proof reports print them (no dependency: the proof venvs import it)."""

from __future__ import annotations

import statistics

__all__ = ["ratio_line", "spread"]


def spread(values) -> str:
    """``min (median, max)`` of ``values`` to two decimals; the value alone when there is
    one, ``-`` when there is none."""
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{min(values):.2f} ({statistics.median(values):.2f}, {max(values):.2f})"


def ratio_line(source: str, a: list[float], b: list[float], name_a: str, name_b: str) -> str:
    """A report's table row: the per-round ratios ``a / b`` (:func:`spread`) and the verdict
    of :func:`onnx_light.bench.compare` (ranked only beyond the rounds' spread)."""
    from onnx_light.bench import compare  # only where onnx-light is importable

    ratios = [x / y for x, y in zip(a, b, strict=True)]
    c = compare(name_a, a, name_b, b, "s")
    faster = name_a if c.ratio < 1 else name_b
    verdict = f"{faster} faster, beyond the spread" if c.separated else "within the spread"
    return f"| {source} | {name_a} vs {name_b} | {spread(ratios)} | {verdict} |"
