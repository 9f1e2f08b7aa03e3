"""Turn the workers' records into the results tables, CSV and figures.

A report opens with a summary (one line per target: the measured ratio or
value at each size, the target, the result) and a figure per group of
operations (each figure over its target), then the full tables. Both are
drawn again from a report's CSV without measuring again:
``python benchmarks/report.py benchmarks/results/latest``.
"""

from __future__ import annotations

import csv
import datetime
import glob
import math
import os
import re
import statistics
import subprocess
import sys

from suite import FIGURES, GROUPS, LABELS, ROWS, SECONDS, MiB, Row

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout

from benchmarks.harness import describe_machine  # noqa: E402
from benchmarks.harness.figures import STATE_COLORS  # noqa: E402

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


def _median_of(records: list, key: str) -> float | None:
    """The median of ``key`` over the records that have it (None if none has)."""
    values = [r[key] for r in records if r is not None and r.get(key) is not None]
    return statistics.median(values) if values else None


def _per_tensor(r: dict) -> str:
    """The per-tensor cost of a result on the many-tensor sources ("" for the others):
    its value over its operation's tensors, in microseconds or bytes, the same of its
    reference beside; for a memory figure also both as a multiple of the ``.onnx``."""
    tensors, value = r.get("tensors"), r["value_raw"]
    if not tensors or math.isnan(value):
        return ""
    ref_tensors, ref = r.get("ref_tensors"), r["ref_raw"]
    onnx_bytes, ref_onnx = r.get("onnx_bytes"), r.get("ref_onnx_bytes")

    def cost(x: float, n: float, size: float | None) -> str:
        if r["fig"] in SECONDS:
            return f"{x / n * 1e6:,.1f} us per tensor"
        text = f"{x / n:,.0f} B per tensor"
        return text + (f", {x / size:.1f}x the .onnx" if size else "")

    text = cost(value, tensors, onnx_bytes)
    if ref_tensors and not math.isnan(ref):
        refs = r["ref_op"].split("+")
        name = _short(refs[0]) if len(refs) == 1 else "the reference"
        text += f"; {name}: {cost(ref, ref_tensors, ref_onnx)}"
    return text


def passes(kind: str | None, target: float | None, value: float, ref: float, ratio: float,
           onnx_size: float | None) -> bool | None:  # fmt: skip
    """Whether a result meets its row's target (None: the row has none).

    ``ratio``: the median per-round ratio; ``value`` and ``ref``: the medians;
    ``onnx_size``: the size of the ``.onnx`` files the operation read (``kind="onnx"``).
    """
    if kind == "ratio":
        return ratio <= target
    if kind == "abs":
        return value <= target
    if kind == "le":
        return value <= ref + target
    if kind == "onnx":
        return onnx_size is not None and value <= target * onnx_size
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
                onnx_size = _median_of(mine, "onnx_bytes")
                passed = passes(row.kind, row.target, value, ref, ratio, onnx_size)
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
                    "group": row.group,
                    "tensors": _median_of(mine, "tensors"),
                    "onnx_bytes": _median_of(mine, "onnx_bytes"),
                    "ref_tensors": _median_of(theirs, "tensors"),
                    "ref_onnx_bytes": _median_of(theirs, "onnx_bytes"),
                    **extra,
                }
            )
            out[-1]["per_tensor"] = _per_tensor(out[-1])
    return out


def markdown(
    results: list[dict],
    header: str,
    footer: str,
    filesystems: dict[str | None, str],
    figures: str | None = None,
) -> str:
    """The report: the summary, then one table per filesystem.

    Args:
        results: from :func:`evaluate`.
        header: text before the tables.
        footer: text after them.
        filesystems: a heading per filesystem key (None: the work dir's own),
            in the order the tables come; a filesystem without results gets
            its heading and no table (the heading says why).
        figures: the report's name (``latest``): the summary shows the
            figures :func:`plot` draws beside it (None: no figure).
    """
    lines = [header, "", summary(results, figures)]
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
        notes.update(
            dict.fromkeys(
                f"- {r['operation']} against {r['reference']}, {r['figure']}: {r['per_tensor']}."
                for r in mine
                if r.get("per_tensor")
            )
        )
        if notes:
            lines += ["", "Notes:", "", *notes]
    return "\n".join(lines + ["", footer, ""])


def write_csv(results: list[dict], path: str) -> None:
    keys = COLUMNS + ["fs", "op", "ref_op", "fig", "kind", "target_raw", "value_raw", "ref_raw"]
    keys += ["ratio_raw", "rounds", "value_min", "ref_min", "values", "ref_values", "others_cpu"]
    keys += ["note", "group", "tensors", "onnx_bytes", "ref_tensors", "ref_onnx_bytes"]
    keys += ["per_tensor"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(results)


# short names for the summary and the figures (the tables keep the full LABELS)
SHORT = {
    "align": "re-align",
    "align_aligned": "re-align, source already aligned",
    "align_many": "re-align, 200,000 tensors",
    "align_single": "re-align, single-file source",
    "light_loadsave": "load + save in memory",
    "light_load2": "load (two-file)",
    "light_save": "save of a model in memory",
    "shared_save": "shared save, 1/8 new",
    "skip_load": "load(skip_raw_data=True)",
    "ort_aligned": "onnxruntime session, aligned two-file",
    "forest_scan": "scan of a tree ensemble",
    "dedup": "dedup of two models",
    "dedup_many": "dedup, 200,000 tensors",
    "info_many": "onnx-light info, 200,000 tensors",
    "verify_many": "onnx-light verify, 200,000 tensors",
    "convert": "float16 convert",
    "convert_many": "float16 convert, 200,000 tensors",
    "cold_align": "re-align, cold",
    "cold_align_drop": "re-align with drop_behind, cold",
    "cg_align": "re-align, cold, in the cgroup",
    "cg_align_drop": "re-align with drop_behind, cold, in the cgroup",
    "cg_convert": "float16 convert, cold, in the cgroup",
    # references
    "copyfile": "copyfile",
    "copyfile_aligned": "copyfile",
    "cold_cp": "cp",
    "cg_cp": "cp",
    "onnx_loadsave": "onnx",
    "onnx_load": "onnx",
    "onnx_save": "onnx",
    "onnx_load_single": "onnx",
    "onnx_load_forest": "onnx",
    "full_save": "a full save",
    "align_quarter": "a quarter of the tensors",
    "dedup_quarter": "a quarter of the tensors",
    "ort_single": "the single-file model",
    "cat_both": "cat of both files",
    "cat_copy": "cat + kernel copy",
    "floor_dedup": "the one-loop floor",
    "floor_cast": "a numpy loop",
    "ort_convert": "onnxruntime's converter",
    "quantize": "int4 quantize",
    "floor_quantize": "a loop over onnxruntime's function",
    "ort_quantize": "onnxruntime's quantizer",
}
for _op in ("ir_align", "ir_align_aligned", "ir_align_many", "ir_align_single", "ir_dedup"):
    SHORT[_op] = "onnx-ir"
SHORT.update(cold_ir="onnx-ir", cg_ir="onnx-ir")
for _op in ("floor_meta_many", "floor_meta_quarter", "floor_meta_twins", "floor_meta_twinsq"):
    SHORT[_op] = "metadata floor"
SHORT.update(
    floor_access_many="protobuf's per-tensor floor",
    floor_access_twins="protobuf's per-tensor floor",
)

# what each group's figure shows
GROUP_TITLES = {
    "align": "Re-align a two-file model (weights off their pages)",
    "align4": "Re-align a 4 GiB two-file model",
    "aligned": "Re-align a model whose weights are aligned already",
    "many": "200,000 tiny tensors: re-align, info and verify",
    "inmem": "Load + save a model in memory",
    "load": "Load a two-file model",
    "save": "Save a model held in memory",
    "shared": "Save a variant sharing the first model's weights",
    "skip": "Load a single-file model without its weights",
    "ort": "onnxruntime session of an aligned two-file model",
    "forest": "Scan a tree ensemble's metadata",
    "align1": "Re-align a single-file model",
    "dedup": "Deduplicate two models sharing 7/8 of their weights",
    "dedupmany": "Deduplicate 200,000 tiny tensors",
    "convert": "Convert to float16",
    "convertmany": "Convert 200,000 tiny tensors to float16",
    "quantize": "Quantize 1 GiB of MatMul weights to int4",
    "durable": "durable and drop_behind re-aligns",
    "cold": "Cold page cache, 4 GiB",
    "cgroup": "8 GiB in a memory cgroup of 2 GiB, cold",
    "readahead": "Readahead hints on a cold re-align",
}
_GROUP_OF = {(r.op, "+".join(r.refs), r.figure): r.group for r in ROWS}


def _group(r: dict) -> str:
    """The group of a result (read from its row in older CSVs, which lack the column)."""
    return r.get("group") or _GROUP_OF.get((r["op"], r["ref_op"], r["fig"]), "other")


def _short(op: str) -> str:
    return SHORT.get(op, LABELS.get(op, op))


def _where(r: dict) -> str:
    size = re.sub(r"(\d)([KMGT]iB)", r"\1 \2", r["size"])
    return size + (f" on {r['fs']}" if r.get("fs") else "")


def _against(r: dict) -> str:
    """What a result is measured against, in short ("" for a target on the value alone)."""
    if r["kind"] == "abs":
        return ""
    refs = [_short(op) for op in r["ref_op"].split("+")]
    return refs[0] if len(refs) == 1 else "the faster of " + " and ".join(refs)


def _measured(r: dict) -> str:
    if r["kind"] == "ratio" and not math.isnan(r["ratio_raw"]):
        ratio = r["ratio_raw"]
        return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"
    return r["value"]  # a target on the .onnx's size: the multiple is in its per-tensor cost


def _faster(r: dict, results: list[dict]) -> str | None:
    """Of a row's several references, the one whose median was the smallest (its own
    row against that reference alone says so), or None."""
    refs = r["ref_op"].split("+")
    if len(refs) < 2:
        return None
    alone = {
        x["ref_op"]: x["ref_raw"]
        for x in results
        if (x["op"], x["fig"], x["size"], x.get("fs") or "")
        == (r["op"], r["fig"], r["size"], r.get("fs") or "")
        and x["ref_op"] in refs
        and not math.isnan(x["ref_raw"])
    }
    return _short(min(alone, key=alone.get)) if alone else None


def _targeted(results: list[dict]) -> dict[str, list[dict]]:
    """The results that have a target, by group, in the order of :data:`suite.GROUPS`."""
    order = {g: i for i, g in enumerate(GROUPS)}
    out: dict[str, list[dict]] = {}
    for r in results:
        if r["kind"]:
            out.setdefault(_group(r), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))


def summary(results: list[dict], figures: str | None = None) -> str:
    """The report's first section: a line per target, and the figures of :func:`plot`.

    A line is one target of one operation (against the same reference, for
    the same figure) with what was measured at each size: the ratio to the
    reference (the faster of them when there are several), or the value when
    the target is on the value itself. Short enough to read on a phone; the
    full tables follow.

    Args:
        results: from :func:`evaluate` or :func:`results_from_csv`.
        figures: the report's name (``latest``) to show its figures
            (``latest-<group>.png``), or None.
    """
    lines = ["## Summary", ""]
    groups = _targeted(results)
    if not groups:
        return "\n".join([*lines, "No row of this report has a target.", ""])
    lines += [
        "Each line is a target: what was measured at each size (the ratio to the peer, or "
        "to the faster of two peers, named after the size; the value itself for a target "
        "on the value), the target, and the result. The full tables below give every "
        "figure, its reference and the rounds' medians.",
        "",
        "| operation | measured | target | result |",
        "|---|---|---|---|",
    ]
    for rows in groups.values():
        lines_of: dict[tuple, list[dict]] = {}
        first = {}  # a line per target, the targets of one comparison together
        for r in rows:
            first.setdefault((r["op"], r["ref_op"], r["fig"]), len(first))
            lines_of.setdefault((r["op"], r["ref_op"], r["fig"], r["target"]), []).append(r)
        for key in sorted(lines_of, key=lambda k: first[k[:3]]):
            same = lines_of[key]
            r = same[0]
            against = _against(r)
            what = f"{_short(r['op'])}: {r['figure']}" + (f" vs {against}" if against else "")
            measured = ", ".join(
                f"{_measured(x)} ({_where(x)}"
                + (f", {faster}" if (faster := _faster(x, results)) else "")
                + (f"; {x['per_tensor']}" if x.get("per_tensor") else "")
                + ")"
                for x in same
            )
            missed = [x for x in same if x["result"] in ("FAIL", "ERROR")]
            if missed:
                verdicts = sorted({x["result"] for x in missed})
                result = " ".join(f"**{v}**" for v in verdicts)
                if len(same) > 1:
                    result += " (" + ", ".join(_where(x) for x in missed) + ")"
            else:
                result = "PASS"
            lines.append(f"| {what} | {measured} | {r['target']} | {result} |")
    if figures:
        lines += [
            "",
            "Each figure divides what was measured by its target (log scale): left of the "
            "dashed line, the target is met.",
        ]
        for group in groups:
            title = GROUP_TITLES.get(group, group)
            lines += ["", f"![{title}]({figures}-{group}.png)"]
    return "\n".join([*lines, ""])


# The group figures are 1080 px wide (7.2 in at 150 dpi: a phone's screen at three device
# pixels per CSS pixel): shown 345 px wide (a 390 px phone less the page's margins), a
# text of 15 pt is 10 px tall there.
FIG_WIDTH, FIG_DPI = 7.2, 150
TITLE_PT, HEAD_PT, LABEL_PT = 18, 15, 15  # the group's title, a comparison, a bar


def _wrap(text: str, points: float, width_px: float, renderer, weight: str = "normal") -> str:
    """``text`` wrapped at word boundaries to lines at most ``width_px`` wide, measured
    in the font it is drawn in (a word longer than the width gets a line of its own)."""
    from matplotlib.font_manager import FontProperties

    prop = FontProperties(size=points, weight=weight)

    def width(line: str) -> float:
        return renderer.get_text_width_height_descent(line, prop, ismath=False)[0]

    lines: list[str] = []
    for word in text.split(" "):  # not at a no-break space: "<=\u00a08x" stays whole
        if lines and width(f"{lines[-1]} {word}") <= width_px:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return "\n".join(lines)


NBSP = "\u00a0"  # a target's words stay on one line: "<=\u00a08x"


def _heading(r: dict, op: str | None) -> str:
    """What a block of bars compares (one target of one operation), with the target;
    ``op``: the operation's name when the group has several (else None)."""
    against = _against(r)
    what = r["figure"] + (f" vs {against}" if against else "")
    if op:
        what = f"{op}: {what}"
    if not what.startswith("onnx"):  # a tool's name keeps its case
        what = what[0].upper() + what[1:]
    return f"{what}, target {r['target'].replace(' ', NBSP)}"


def _op_names(rows: list[dict]) -> dict[str, str] | None:
    """The operations' names in a group of several (None for one), without the words
    all of them end with (", 200,000 tensors": the group's title says it)."""
    names = {r["op"]: _short(r["op"]) for r in rows}
    if len(names) < 2:
        return None
    tails = {name.rpartition(", ")[2] for name in names.values()}
    if len(tails) == 1 and all(", " in name for name in names.values()):
        names = {op: name.rpartition(", ")[0] for op, name in names.items()}
    return names


def _bar_label(r: dict, results: list[dict]) -> str:
    """A bar's name: where it was measured, what, and the result."""
    faster = _faster(r, results)
    measured = _measured(r) + (f" ({faster})" if faster else "")
    if r["kind"] == "onnx" and r.get("onnx_bytes"):
        measured += f", {r['value_raw'] / r['onnx_bytes']:.1f}x the .onnx"
    return f"{_where(r)}: {measured}, {r['result']}"


def _over_target(r: dict) -> float:
    """What a result measured, divided by its target (1: just met)."""
    measured = r["ratio_raw"] if r["kind"] == "ratio" else r["value_raw"]
    if r["kind"] == "le":
        measured = r["value_raw"] - r["ref_raw"]
    if r["kind"] == "onnx":
        measured = r["value_raw"] / r["onnx_bytes"] if r.get("onnx_bytes") else math.inf
    return max(measured / r["target_raw"], 1e-3)


def plot(results: list[dict], path: str, title: str) -> list[str]:
    """One figure per group: each targeted figure over its target (1: just met), log scale.

    Laid out for a phone as well as a page: the bars span the figure's width,
    each comparison (an operation's figure against its reference, and the
    target) is a heading over its bars, each bar is named above it by its size
    and what was measured. Every text is wrapped to the figure's width, and no
    text is smaller than :data:`LABEL_PT` (10 px at 345 px wide).

    Args:
        results: from :func:`evaluate` or :func:`results_from_csv`.
        path: the report's figure path, ``results/latest.png``: the figures
            are ``results/latest-<group>.png``. Figures of groups this
            report no longer has, and the single figure of older reports,
            are removed.
        title: the machine line: kept in each PNG's metadata (``Description``);
            the report's text gives it beside the figures.

    Returns:
        The paths written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    stem = path[: -len(".png")] if path.endswith(".png") else path
    written = []
    left, right = 0.12, 0.22  # inches beside the axes (the last tick label overhangs)
    width_px = (FIG_WIDTH - left - right) * FIG_DPI
    for group, rows in _targeted(results).items():
        rows = [r for r in rows if not math.isnan(r["value_raw"])]
        if not rows:
            continue
        blocks: dict[tuple, list[dict]] = {}  # one target of one comparison, as in the summary
        for r in rows:
            blocks.setdefault((r["op"], r["ref_op"], r["fig"], r["target"]), []).append(r)
        ops = _op_names(rows)
        fig = plt.figure(figsize=(FIG_WIDTH, 4), dpi=FIG_DPI)
        renderer = fig.canvas.get_renderer()

        def lines_in(text: str, points: float) -> float:
            return (text.count("\n") + 1) * points / 72 * 1.3  # inches

        # top to bottom, in inches from the top of the axes
        heading_text, label_text, bar_y = [], [], []
        y = 0.05
        for block in blocks.values():
            head = _heading(block[0], ops and ops[block[0]["op"]])
            heading = _wrap(head, HEAD_PT, width_px, renderer, "bold")
            heading_text.append((y, heading))
            y += lines_in(heading, HEAD_PT) + 0.04
            for r in block:
                label = _wrap(_bar_label(r, results), LABEL_PT, width_px, renderer)
                label_text.append((y, label))
                y += lines_in(label, LABEL_PT) + 0.02
                bar_y.append((y + 0.15, r))
                y += 0.3 + 0.1
            y += 0.12
        heading_title = _wrap(GROUP_TITLES.get(group, group), TITLE_PT, width_px, renderer)
        top = 0.1 + lines_in(heading_title, TITLE_PT) + 0.08
        xlabel = _wrap(
            "measured / target, log scale: left of the dashed line, met",
            LABEL_PT,
            width_px,
            renderer,
        )
        bottom = 0.1 + LABEL_PT / 72 * 1.6 + lines_in(xlabel, LABEL_PT) + 0.05
        height = top + y + bottom
        fig.set_size_inches(FIG_WIDTH, height)
        ax = fig.add_axes(
            (left / FIG_WIDTH, bottom / height, 1 - (left + right) / FIG_WIDTH, y / height)
        )
        values = [_over_target(r) for _, r in bar_y]
        finite = [v for v in values if math.isfinite(v)]
        high = max(3.0, 1.5 * max(finite, default=1.0))
        values = [high if math.isinf(v) else v for v in values]  # a reference of 0 s
        ax.barh(
            [b for b, _ in bar_y],
            values,
            height=0.3,
            color=[STATE_COLORS["good" if r["passed"] else "bad"] for _, r in bar_y],
            zorder=2,
        )
        ax.set_xscale("log")
        ax.set_xlim(1e-3, high)
        ax.set_ylim(y, 0)
        ax.axvline(1.0, color="black", linestyle="--", linewidth=1.2, zorder=3)
        decades = [10.0**k for k in range(-3, math.floor(math.log10(high)) + 1)]
        ax.xaxis.set_major_locator(FixedLocator(decades))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.xaxis.get_majorticklabels()[0].set_horizontalalignment("left")  # inside
        ax.tick_params(axis="x", labelsize=LABEL_PT)
        ax.set_yticks([])
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        ax.grid(axis="x", alpha=0.3, which="major", zorder=0)
        ax.set_xlabel(xlabel, fontsize=LABEL_PT)
        box = {"facecolor": "white", "edgecolor": "none", "pad": 1.0}
        place = ax.get_yaxis_transform()  # x in axes fraction, y in inches from the top
        for at, text in heading_text:
            ax.text(0, at, text, transform=place, fontsize=HEAD_PT, weight="bold",
                    va="top", ha="left", bbox=box, zorder=4)  # fmt: skip
        for at, text in label_text:
            ax.text(0, at, text, transform=place, fontsize=LABEL_PT,
                    va="top", ha="left", bbox=box, zorder=4)  # fmt: skip
        fig.text(left / FIG_WIDTH, 1 - 0.1 / height, heading_title, fontsize=TITLE_PT,
                 va="top", ha="left")  # fmt: skip
        out = f"{stem}-{group}.png"
        fig.savefig(out, dpi=FIG_DPI, metadata={"Description": title})
        plt.close(fig)
        written.append(out)
    stale = [stem + ".png"] + glob.glob(glob.escape(stem) + "-*.png")
    for old in stale:
        group = old[len(stem) + 1 : -len(".png")]
        stale_group = old == stem + ".png" or group in GROUPS
        if old not in written and stale_group and os.path.exists(old):
            os.remove(old)
    return written


def results_from_csv(path: str) -> list[dict]:
    """The results a report's CSV holds, as :func:`plot` takes them (to draw it again)."""
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            for key in ("target_raw", "value_raw", "ref_raw", "ratio_raw"):
                row[key] = float(row[key]) if row[key] not in ("", "nan") else math.nan
            for key in ("tensors", "onnx_bytes", "ref_tensors", "ref_onnx_bytes"):
                row[key] = float(row[key]) if row.get(key) else None
            row["per_tensor"] = _per_tensor(row)
            row["passed"] = row["result"] == "PASS"
            out.append(row)
    return out


def with_summary(text: str, section: str) -> str:
    """A report's Markdown with ``section`` as its summary: in place of the one it has,
    else before its first ``##`` heading."""
    old = re.search(r"^## Summary\n.*?(?=^## |\Z)", text, re.M | re.S)
    if old:
        return text[: old.start()] + section + "\n" + text[old.end() :]
    first = re.search(r"^## ", text, re.M)
    at = first.start() if first else len(text)
    return text[:at] + section + "\n" + text[at:]


def _table_line(r: dict) -> str:
    """A result's line in the report's tables, as :func:`markdown` writes it."""
    cells = [str(r[c]) for c in COLUMNS]
    if r["result"] in ("FAIL", "ERROR"):
        cells[-1] = f"**{cells[-1]}**"
    return "| " + " | ".join(cells) + " |"


def retarget(results: list[dict]) -> list[dict]:
    """The results of a committed report under the suite's targets of today.

    A result whose row (operation, reference, figure, size) now has another
    target, or none, gets it: its ``kind``, ``target``, ``target_raw``,
    ``result`` and ``passed`` come from :data:`suite.ROWS` and its measured
    medians, which stay as they were. A result whose row the suite no longer
    has is kept as it is.

    Returns:
        The results that changed, as dicts with the new values and ``old``,
        the result as it was.
    """
    changed = []
    for r in results:
        row = next(
            (
                x
                for x in ROWS
                if (x.op, "+".join(x.refs), x.figure) == (r["op"], r["ref_op"], r["fig"])
                and (x.sizes is None or r["size"] in x.sizes)
            ),
            None,
        )
        if row is None:
            continue
        kind, target = row.kind or "", row.target_text()
        if (r.get("kind") or "", r["target"]) == (kind, target):
            continue
        old = dict(r)
        if math.isnan(r["value_raw"]):
            passed = None if row.kind is None else False
            verdict = (
                "info"
                if row.kind is None
                else (r["result"] if r["result"] in ("FAIL", "ERROR") else "ERROR")
            )
        else:
            passed = passes(row.kind, row.target, r["value_raw"], r["ref_raw"], r["ratio_raw"],
                            r.get("onnx_bytes"))  # fmt: skip
            verdict = "info" if passed is None else ("PASS" if passed else "FAIL")
        r.update(kind=kind, target=target, target_raw=row.target, result=verdict, passed=passed)
        changed.append({**r, "old": old})
    return changed


def redraw(base: str) -> list[str]:
    """Draw again the figures and the summary of a committed report from its CSV.

    Nothing is measured: ``base.csv`` gives the results, under the suite's
    targets of today (:func:`retarget`); ``base.md`` keeps its header, footer
    and tables, the lines of the results whose target changed rewritten, and
    gets the new summary and a line saying which targets it shows. The CSV's
    target and result columns follow.

    Args:
        base: the report's path without extension (``benchmarks/results/latest``).

    Returns:
        The figures written.
    """
    results = results_from_csv(base + ".csv")
    changed = retarget(results)
    with open(base + ".md", encoding="utf-8") as f:
        text = f.read()
    title = next((line.strip() for line in text.splitlines() if line.startswith("machine:")), base)
    if changed:
        for r in changed:
            text = text.replace(_table_line(r["old"]), _table_line(r))
        today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        note = (
            f"targets: the suite's of {today}, applied again to the measured values "
            "(`benchmarks/report.py`); the values are the run's."
        )
        old_note = re.search(r"^targets: .*$", text, re.M)
        if old_note:
            text = text[: old_note.start()] + note + text[old_note.end() :]
        else:
            command = re.search(r"^command: .*$", text, re.M)
            at = command.end() if command else text.find("\n") + 1
            text = text[:at] + "\n\n" + note + text[at:]
        _retarget_csv(base + ".csv", {_key(r) for r in changed}, results)
    written = plot(results, base + ".png", title)
    text = with_summary(text, summary(results, os.path.basename(base)))
    with open(base + ".md", "w", encoding="utf-8") as f:
        f.write(text)
    return written


def _key(r: dict) -> tuple:
    return (r["op"], r["ref_op"], r["fig"], r["size"], r.get("fs") or "")


def _retarget_csv(path: str, keys: set, results: list[dict]) -> None:
    """The CSV's target columns of the results whose target changed; every other
    cell as it was written."""
    new = {_key(r): r for r in results if _key(r) in keys}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = reader.fieldnames, list(reader)
    for row in rows:
        r = new.get(_key(row))
        if r is not None:
            row.update(
                kind=r["kind"] or "",
                target=r["target"],
                target_raw="" if r["target_raw"] is None else f"{r['target_raw']}",
                result=r["result"],
            )
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fields)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":  # report.py results/latest [results/cold ...]: redraw from the CSVs
    import sys

    for base in sys.argv[1:]:
        for path in redraw(base):
            print(path)
