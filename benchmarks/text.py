"""Figures, commits and files as the proof reports print them, and the one writer of those
reports (no dependency: the proofs' own venvs import it).

Every proof of ``benchmarks/proofs/`` builds its report as Markdown text and hands it to
:func:`write_report`, which prints it and writes it (and, given rows, their CSV beside
it) into ``benchmarks/proofs/results/`` by default (:data:`RESULTS`).
"""

from __future__ import annotations

import csv
import os
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "proofs", "results")  # the proofs' reports

__all__ = [
    "RESULTS",
    "measured_commit",
    "ratio_line",
    "report_path",
    "short_commit",
    "spread",
    "write_report",
]


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
    of :func:`benchmarks.harness.compare` (ranked only beyond the rounds' spread)."""
    from benchmarks.harness import compare  # only where onnx-light is importable

    ratios = [x / y for x, y in zip(a, b, strict=True)]
    c = compare(name_a, a, name_b, b, "s")
    faster = name_a if c.ratio < 1 else name_b
    verdict = f"{faster} faster, beyond the spread" if c.separated else "within the spread"
    return f"| {source} | {name_a} vs {name_b} | {spread(ratios)} | {verdict} |"


def short_commit(commit: str = "HEAD") -> str:
    """``commit``'s short hash in this repository."""
    return subprocess.run(
        ["git", "rev-parse", "--short", commit], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()


def measured_commit() -> str:
    """The commit a report measures: HEAD's short hash, ``+`` when ``onnx_light`` has
    changes not committed."""
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "onnx_light"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return short_commit() + ("+" if dirty else "")


def report_path(name: str) -> str:
    """Where a proof's report goes by default: ``benchmarks/proofs/results/NAME``."""
    return os.path.join(RESULTS, name)


def write_report(
    path: str, text: str, rows: list[dict] | None = None, fields: list[str] | None = None
) -> None:
    """Print a proof report and write it to ``path`` (Markdown, ending with one newline).

    Args:
        path: the report's ``.md`` path (its folder is made if missing).
        text: the report.
        rows: the records behind it, one dict each: also written as CSV beside the
            report (``path`` with ``.csv``).
        fields: the CSV's columns (default: the first row's keys); a row's missing
            ones are left empty, its others left out.
    """
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n")
    if rows is not None:
        with open(os.path.splitext(path)[0] + ".csv", "w", newline="", encoding="utf-8") as f:
            columns = fields or (list(rows[0]) if rows else [])
            w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
