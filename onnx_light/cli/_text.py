"""How the command line prints: escaped names, tables, plurals, percentages, and the
lines several commands share."""

from __future__ import annotations

import os

from onnx_light._progress import human
from onnx_light.onnx import AlignResult, ConvertResult, DedupResult, SharedRange

__all__ = ["PROG", "aligned", "left_over", "percent", "plural", "printable", "sharing", "table"]


PROG = "onnx-light"


def printable(text: str) -> str:
    """``text`` with its control characters escaped.

    Names in a model come from strangers: printed raw, an escape sequence or a
    new line in them would drive the terminal or forge output lines.
    """
    return text if text.isprintable() else repr(text)[1:-1]


def table(rows: list[list[str]], right: set[int]) -> str:
    """Align ``rows`` in columns, right-justifying the column indices in ``right``."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def plural(n: int, word: str) -> str:
    """``word`` for 1, ``word + s`` otherwise."""
    return word if n == 1 else word + "s"


def percent(part: int, whole: int) -> str:
    """``part`` of ``whole`` as a percentage with the digits that matter: 43%, 4.2%, 0.38%."""
    if not whole or not part:
        return "0%"
    p = 100 * part / whole
    if p >= 10:
        return f"{p:.0f}%"
    return f"{p:.2g}%" if p < 1 else f"{p:.1f}%"


def sharing(shared: tuple[SharedRange, ...], across: str = "") -> str:
    """``N ranges are read by several tensors (M tensors, X stored once for Y of tensors)``."""
    tensors = sum(len(r.tensors) for r in shared)
    once = sum(r.length for r in shared)
    read = sum(r.length * len(r.tensors) for r in shared)
    ranges = "1 range is" if len(shared) == 1 else f"{len(shared)} ranges are each"
    return (
        f"{ranges} read by several tensors{across} ({tensors} tensors: "
        f"{human(once)} stored once for {human(read)} of tensors)"
    )


def aligned(alignment: int) -> str:
    return "dense (no alignment)" if alignment in (0, 1) else f"aligned to {alignment}"


def left_over(result: AlignResult | DedupResult | ConvertResult) -> list[str]:
    """The line about the weights files left behind by an in-place run, if any."""
    names = ", ".join(printable(os.path.basename(p)) for p in result.unreferenced)
    if result.removed:
        n = len(result.removed)
        return [f"removed {n} weights {plural(n, 'file')} no model references: {names}"]
    if result.unreferenced:
        n = len(result.unreferenced)
        return [
            f"{n} weights {plural(n, 'file')} no .onnx of the folder references any "
            f"more: {names} (--prune removes {'it' if n == 1 else 'them'})"
        ]
    return []
