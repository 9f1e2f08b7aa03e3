"""Turn the workers' records into the results table, CSV and plot."""

from __future__ import annotations

import csv
import datetime
import math
import statistics
import subprocess
import textwrap

from suite import FIGURES, LABELS, SECONDS, MiB, Row

from onnx_light.bench import describe_machine

COLUMNS = [
    "operation",
    "size",
    "figure",
    "value",
    "reference",
    "ref value",
    "ratio",
    "target",
    "result",
]


def _git_commit(root: str) -> str:
    try:
        out = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def machine_line(root: str) -> str:
    """One line: CPU, cores, RAM, kernel, Python, library versions, commit, date."""
    return (
        f"machine: {describe_machine()} ({_git_commit(root)}), "
        f"{datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}"
    )


def fmt(figure: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if figure in SECONDS:
        return f"{value:.3f} s"
    return f"{value / MiB:.1f} MiB"


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return 0.0 if a == 0 else math.inf
    return a / b


FS_SEP = " on "  # a size label on another filesystem: "1GiB on xfs"


def split_label(label: str) -> tuple[str, str | None]:
    """``"1GiB on xfs"`` -> ``("1GiB", "xfs")``; ``"1GiB"`` -> ``("1GiB", None)``."""
    size, _, fs = label.partition(FS_SEP)
    return size, fs or None


def _reference(rounds: list, figure: str):
    """Round by round, the smallest figure of the references (None if one is missing).

    A reference that failed by design (a record with ``failed``: OOM-killed in a
    cgroup) is left out of the minimum; one that crashed (None) makes it None.
    """
    out = []
    for recs in zip(*rounds):
        live = [r for r in recs if r is None or not r.get("failed")]
        values = [r.get(figure) for r in live if r is not None and r.get(figure) is not None]
        out.append(min(values) if values and len(values) == len(live) else None)
    return out


def _failure(records: list) -> str | None:
    """What stopped an operation in every round (``failed`` of its records), or None."""
    reasons = {r.get("failed") for r in records if r is not None}
    if records and None not in records and len(reasons) == 1 and None not in reasons:
        return reasons.pop()
    return None


def evaluate(rows: list[Row], plan, records: dict) -> list[dict]:
    """One result per (row, size label) whose operations were measured.

    Args:
        rows: the rows to evaluate.
        plan: ``[(size label, operations)]`` that was run.
        records: ``{(size label, op): [record or None per round]}`` (None: the
            worker failed).

    Returns:
        Dicts with the table's columns plus raw numbers (``value_raw``,
        ``ref_raw``, ``ratio_raw``, ``rounds``, ``passed``) and ``fs``.
    """
    out = []
    for label, ops in plan:
        size, fs = split_label(label)
        for row in rows:
            if row.op not in ops or any(r not in ops for r in row.refs):
                continue
            if row.sizes is not None and size not in row.sizes:
                continue
            mine = records[(label, row.op)]
            theirs_rounds = [records[(label, r)] for r in row.refs]
            reference = _reference(theirs_rounds, row.figure)
            theirs = [r for rs in theirs_rounds for r in rs]
            pairs = [
                (a[row.figure], b)
                for a, b in zip(mine, reference)
                if a is not None and b is not None and a.get(row.figure) is not None
            ]
            failed = [f for f in (_failure(mine), _failure(theirs)) if f]
            if not pairs and failed:
                value = ref = ratio = math.nan
                extra = {}
                passed = None if row.kind is None else False
                verdict = "info" if row.kind is None else "FAIL"
            elif not pairs:
                value = ref = ratio = math.nan
                extra = {}
                passed = None if row.kind is None else False
                verdict = "ERROR" if row.kind else "info"
            else:
                extra = {
                    "value_min": min(a for a, _ in pairs),
                    "ref_min": min(b for _, b in pairs),
                    "values": " ".join(f"{a:.6g}" for a, _ in pairs),
                    "ref_values": " ".join(f"{b:.6g}" for _, b in pairs),
                    "others_cpu": max(
                        (r or {}).get("others_cpu", 0.0) for r in list(mine) + theirs
                    ),
                }
                value = statistics.median(a for a, _ in pairs)
                ref = statistics.median(b for _, b in pairs)
                ratio = statistics.median(_ratio(a, b) for a, b in pairs)
                passed = None
                if row.kind == "ratio":
                    passed = ratio <= row.target
                elif row.kind == "abs":
                    passed = value <= row.target
                elif row.kind == "le":
                    passed = value <= ref + row.target
                verdict = "info" if passed is None else ("PASS" if passed else "FAIL")
            mine_failed, ref_failed = _failure(mine), _failure(theirs_rounds[0])
            out.append(
                {
                    "operation": LABELS[row.op],
                    "size": size,
                    "fs": fs,
                    "figure": FIGURES[row.figure],
                    "value": mine_failed or fmt(row.figure, value),
                    "reference": row.ref_label(),
                    "ref value": (ref_failed if len(row.refs) == 1 else None)
                    or fmt(row.figure, ref),
                    "ratio": "n/a" if math.isnan(ratio) else f"{ratio:.3f}",
                    "target": row.target_text(),
                    "result": verdict,
                    "op": row.op,
                    "ref_op": "+".join(row.refs),
                    "fig": row.figure,
                    "kind": row.kind,
                    "target_raw": row.target,
                    "value_raw": value,
                    "ref_raw": ref,
                    "ratio_raw": ratio,
                    "rounds": len(pairs),
                    "passed": passed,
                    "note": row.note or "",
                    **extra,
                }
            )
    return out


def markdown(
    results: list[dict], header: str, footer: str, filesystems: dict[str | None, str]
) -> str:
    """The report: one table per filesystem.

    Args:
        results: from :func:`evaluate`.
        header: text before the tables.
        footer: text after them.
        filesystems: a heading per filesystem key (None: the work dir's own),
            in the order the tables come; a filesystem without results gets
            its heading and no table (the heading says why).
    """
    lines = [header]
    for fs, heading in filesystems.items():
        lines += ["", f"## {heading}", ""]
        mine = [r for r in results if r["fs"] == fs]
        if not mine:
            continue
        lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        for r in mine:
            cells = [str(r[c]) for c in COLUMNS]
            if r["result"] in ("FAIL", "ERROR"):
                cells[-1] = f"**{cells[-1]}**"
            lines.append("| " + " | ".join(cells) + " |")
        notes = dict.fromkeys(
            f"- {r['operation']} against {r['reference']}: {r['note']}."
            for r in mine
            if r.get("note")
        )
        if notes:
            lines += ["", "Notes:", "", *notes]
    return "\n".join(lines + ["", footer, ""])


def write_csv(results: list[dict], path: str) -> None:
    keys = COLUMNS + ["fs", "op", "ref_op", "fig", "kind", "target_raw", "value_raw", "ref_raw"]
    keys += ["ratio_raw", "rounds", "value_min", "ref_min", "values", "ref_values", "others_cpu"]
    keys += ["note"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(results)


def plot(results: list[dict], path: str, title: str) -> None:
    """Each targeted figure as a fraction of its target (1 = just meets it), log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if r["kind"] and not math.isnan(r["value_raw"])]
    labels, values, colors = [], [], []
    for r in rows:
        measured = r["ratio_raw"] if r["kind"] == "ratio" else r["value_raw"]
        shown = r["ratio"] + "x" if r["kind"] == "ratio" else r["value"]
        what = r["operation"].replace("onnxl.", "").replace("_external_data_streaming", "")
        where = r["size"] + (f" on {r['fs']}" if r["fs"] else "")
        label = f"{what}, {r['figure']}, {where}: {shown} (target {r['target']})"
        if r["kind"] == "ratio":
            label += f" against {r['reference']}"
        labels.append("\n".join(textwrap.wrap(label, 90)))
        values.append(max(measured / r["target_raw"], 1e-3))
        colors.append("tab:green" if r["passed"] else "tab:red")
    lines = sum(label.count("\n") + 1 for label in labels)
    fig, ax = plt.subplots(figsize=(12, 0.3 * lines + 0.25 * len(rows) + 1.6))
    y = range(len(rows))
    ax.barh(list(y), values, color=colors)
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xscale("log")
    ax.set_yticks(list(y), labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("measured / target  (left of the dashed line = target met)")
    ax.set_xlim(left=1e-3)
    fig.suptitle("\n".join(textwrap.wrap(title, 150)), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def results_from_csv(path: str) -> list[dict]:
    """The results a report's CSV holds, as :func:`plot` takes them (to draw it again)."""
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            for key in ("target_raw", "value_raw", "ref_raw", "ratio_raw"):
                row[key] = float(row[key]) if row[key] not in ("", "nan") else math.nan
            row["passed"] = row["result"] == "PASS"
            out.append(row)
    return out


if __name__ == "__main__":  # redraw a report's figure from its CSV: report.py results/latest
    import sys

    base = sys.argv[1]
    with open(base + ".md", encoding="utf-8") as f:
        title = next((line.strip() for line in f if line.startswith("machine:")), base)
    plot(results_from_csv(base + ".csv"), base + ".png", title)
