"""Figures a reader can read: one colour per tool, legends off the data, titles that fit,
and a benchmark report whose summary and figures follow its CSV.

The gallery's scripts take every colour from the palette of
``benchmarks.harness.figures`` and put their legends beside the axes
(checked on their source); the report's summary and its figures are drawn
again from a report's CSV without measuring (``benchmarks/report.py``), and
the committed reports hold the summary their CSV gives.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import matplotlib
import pytest

from benchmarks.harness import legend_beside, other_color, summary_bars, tool_color, tool_colors
from benchmarks.harness.figures import OTHER_COLORS, TOOL_COLORS, tool_of

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
report = pytest.importorskip("report")


def test_each_tool_has_its_colour_whatever_the_label():
    labels = {
        "onnx-light deduplicate": "onnx-light",
        "shared (onnx-light)": "onnx-light",
        "onnxl.load + onnxl.save": "onnx-light",
        "onnx-ir DeduplicateInitializersPass": "onnx-ir",
        "onnx_ir load + save": "onnx-ir",
        "naive (onnx)": "onnx",
        "onnx: load + save": "onnx",
        "onnxruntime's converter": "onnxruntime",
        "onnx.load + onnxruntime's converter + onnx.save": "onnxruntime",
        "copy of the export (shutil)": "floor",
        "numpy loop (floor)": "floor",
        "in memory (load + save)": None,
    }
    assert {label: tool_of(label) for label in labels} == labels
    assert tool_color("naive (onnx)") == tool_color("onnx") == TOOL_COLORS["onnx"]
    # the second label of a tool another shade of it, a label naming no tool no tool's colour
    colors = tool_colors(["onnx-light a", "onnx-light b", "one file", "two files"])
    assert colors[0] == TOOL_COLORS["onnx-light"] and colors[1] != colors[0]
    assert colors[2:] == [OTHER_COLORS[0], OTHER_COLORS[1]]
    assert not set(OTHER_COLORS) & set(TOOL_COLORS.values())
    assert len({tool_color("onnx-light", v) for v in (0, 1, 2)}) == 3
    assert other_color(len(OTHER_COLORS)) == other_color(0)
    with pytest.raises(ValueError, match="names no tool"):
        tool_color("in memory (load + save)")


def _inside(fig, artist) -> bool:
    box = artist.get_window_extent(fig.canvas.get_renderer())
    width, height = fig.canvas.get_width_height()
    return box.x0 >= -1 and box.y0 >= -1 and box.x1 <= width + 1 and box.y1 <= height + 1


def test_summary_bars_title_labels_and_reference_fit_and_cover_no_bar():
    import matplotlib.pyplot as plt

    labels = ["onnx-light: align_external_data_streaming", "onnx-ir: load + save", "onnx"]
    title = "re-align to 4096, 128 MiB of weights, a title longer than the axes above the bars"
    fig = summary_bars(labels, [0.05, 0.07, 0.19], "s", title, reference=0.1, reference_label="x")
    fig.canvas.draw()
    ax = fig.axes[0]
    assert _inside(fig, fig._suptitle), "the title is cut"
    assert all(_inside(fig, t) for t in ax.get_yticklabels()), "a label is cut"
    assert all(_inside(fig, t) for t in ax.texts)
    (reference,) = [t for t in ax.texts if t.get_text().strip() == "x"]
    assert reference.get_position()[1] < -0.5, "the reference's label sits above every bar"
    assert [b.get_facecolor() for b in ax.patches] == [
        matplotlib.colors.to_rgba(c) for c in tool_colors(labels)
    ]
    plt.close(fig)


def test_a_legend_beside_covers_no_data():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot([0, 1], [0, 1], label="a line")
    legend = legend_beside(ax)
    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1
    assert _inside(fig, legend)
    plt.close(fig)


SCRIPTS = sorted((ROOT / "examples").glob("*/plot_*.py"))
COLOUR_LITERAL = re.compile(r"""["'](?:C\d|#[0-9a-fA-F]{6}|tab:\w+)["']|f["']C\{""")


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_gallery_scripts_take_colours_from_the_palette_and_legends_beside(script):
    """A colour typed in a script drifts from the palette: a tool in two colours."""
    text = script.read_text()
    assert not COLOUR_LITERAL.findall(text), f"{script.name}: use tool_color / other_color"
    for call in re.findall(r"\b(?:ax\w*|axes\[-?\d\])\.legend\(([^)]*)\)", text):
        assert "bbox_to_anchor" in call, f"{script.name}: a legend inside the axes ({call})"


def _committed(name: str) -> list[dict]:
    return report.results_from_csv(str(RESULTS / f"{name}.csv"))


@pytest.mark.parametrize("name", ["latest", "cold", "dedup"])
def test_committed_reports_open_with_the_summary_their_csv_gives(name):
    text = (RESULTS / f"{name}.md").read_text(encoding="utf-8")
    assert report.summary(_committed(name), name) in text, (
        f"run: python benchmarks/report.py benchmarks/results/{name}"
    )
    assert text.index("## Summary") < text.index("\n## ", text.index("## Summary") + 1)
    for figure in re.findall(rf"\]\(({name}-\w+\.png)\)", text):
        assert (RESULTS / figure).exists(), figure
    assert not (RESULTS / f"{name}.png").exists(), "one figure per group replaced it"


def test_summary_gives_each_target_and_names_the_faster_peer():
    results = _committed("cold")
    text = report.summary(results)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    targeted = {(r["op"], r["ref_op"], r["fig"], r["target"]) for r in results if r["kind"]}
    assert len(rows) - 1 == len(targeted)  # the header, then a line per target
    failed = [row for row in rows if "FAIL" in row]
    missed = {
        (r["op"], r["ref_op"], r["fig"], r["target"]) for r in results if r["result"] == "FAIL"
    }
    assert len(failed) == len(missed)
    for row in failed:  # the ratio, at its size, to the faster peer, named
        assert re.search(r"\d\.\d\dx \(\d+ [MG]iB, (cp|onnx-ir|copyfile)\)", row), row
        assert "<= 1.05x" in row
    assert all(len(row.split(" | ")) == 4 for row in rows), "four columns: fits a phone"


def test_one_figure_per_group_readable_and_stale_ones_removed(tmp_path):
    from PIL import Image

    results = _committed("latest")
    (tmp_path / "latest.png").write_bytes(b"old")
    (tmp_path / "latest-readahead.png").write_bytes(b"old")  # a group this report lacks
    written = report.plot(results, str(tmp_path / "latest.png"), "machine: test")
    groups = {r["group"] if r.get("group") else report._group(r) for r in results if r["kind"]}
    assert sorted(Path(p).name for p in written) == sorted(f"latest-{g}.png" for g in groups)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(Path(p).name for p in written)
    for path in written:  # at most a page's width; no figure taller than two screens
        width, height = Image.open(path).size
        assert width <= 1200 and height <= 2 * width, (path, width, height)


def _drawn_figures(monkeypatch, results, path):
    """The figures :func:`report.plot` draws, each as it is when saved: [(name, figure)]."""
    import matplotlib.figure

    seen = []
    save = matplotlib.figure.Figure.savefig

    def keep(fig, out, *args, **kwargs):
        fig.canvas.draw()
        seen.append((Path(str(out)).name, fig, _texts(fig)))
        return save(fig, out, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    report.plot(results, path, "machine: a machine line as long as the reports' own, " * 3)
    return seen


def _texts(fig):
    """Every non-empty visible text of a figure: (text, its box in pixels, its size in px)."""
    import matplotlib.text

    renderer = fig.canvas.get_renderer()
    hidden = set()  # the labels of ticks outside the axes' limits are not drawn
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            low, high = sorted(limits)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if not low <= tick.get_loc() <= high:
                    hidden |= {id(tick.label1), id(tick.label2)}
    out = []
    for t in fig.findobj(matplotlib.text.Text):
        if t.get_visible() and t.get_text().strip() and id(t) not in hidden:
            box = t.get_window_extent(renderer)
            out.append((t.get_text(), box, t.get_fontsize() * fig.dpi / 72))
    return out


PHONE = 345  # CSS px of a figure on a phone's screen (390 px less the page's margins)


@pytest.mark.parametrize("name", ["latest", "cold", "dedup", "smoke"])
def test_every_group_figure_fits_its_texts_readable_on_a_phone(name, monkeypatch, tmp_path):
    """Each group's title and every label inside the figure, none over another or over a
    bar, none under 9 px when the figure is shown 345 px wide (no machine footnote: the
    report's text gives the machine; smoke's report exists once make bench-smoke ran:
    it is git-ignored)."""
    if not (RESULTS / f"{name}.csv").exists():
        pytest.skip(f"no {name} report here (benchmarks/run.py writes it)")
    results = report.results_from_csv(str(RESULTS / f"{name}.csv"))
    drawn = _drawn_figures(monkeypatch, results, str(tmp_path / f"{name}.png"))
    assert drawn
    for figure, fig, texts in drawn:
        width, height = fig.canvas.get_width_height()
        title = report.GROUP_TITLES[figure[len(name) + 1 : -len(".png")]]
        assert any(" ".join(t.split()) == title for t, _, _ in texts), (figure, "no title")
        for text, box, _ in texts:
            assert box.x0 >= -1 and box.y0 >= -1, (figure, text, "cut")
            assert box.x1 <= width + 1 and box.y1 <= height + 1, (figure, text, "cut")
    for figure, fig, texts in drawn:
        width, height = fig.canvas.get_width_height()
        for text, _, px in texts:
            assert px * PHONE / width >= 9, (figure, text, f"{px * PHONE / width:.1f} px")
        boxes = [box for _, box, _ in texts]
        bars = [p.get_window_extent() for ax in fig.axes for p in ax.patches]
        for i, (text, box, _) in enumerate(texts):
            others = [b for j, b in enumerate(boxes) if j != i] + bars
            assert not any(box.overlaps(b) for b in others), (figure, text, "overlaps")
        assert height <= 2 * width, figure


def test_a_long_title_is_wrapped_inside_the_figure(monkeypatch, tmp_path):
    results = [r for r in _committed("latest") if report._group(r) == "aligned"]
    long = "A title much longer than the figure is wide, " * 4 + "at any group"
    monkeypatch.setitem(report.GROUP_TITLES, "aligned", long)
    ((_, fig, texts),) = _drawn_figures(monkeypatch, results, str(tmp_path / "x.png"))
    width, _ = fig.canvas.get_width_height()
    (title,) = [(t, box) for t, box, _ in texts if " ".join(t.split()) == long]
    assert title[0].count("\n") >= 2 and title[1].x1 <= width + 1


def test_redraw_is_idempotent(tmp_path):
    for ext in (".md", ".csv"):
        (tmp_path / f"dedup{ext}").write_bytes((RESULTS / f"dedup{ext}").read_bytes())
    base = str(tmp_path / "dedup")
    report.redraw(base)
    once = (tmp_path / "dedup.md").read_text()
    report.redraw(base)
    assert (tmp_path / "dedup.md").read_text() == once
    assert once.count("## Summary") == 1
    assert os.path.exists(base + "-dedup.png")


@pytest.mark.parametrize("name", ["latest", "cold", "dedup"])
def test_committed_reports_show_the_suites_targets(name):
    """A target changed in the suite is shown on the committed reports too (their values
    stay the run's): ``python benchmarks/report.py benchmarks/results/NAME`` applies it."""
    changed = report.retarget(_committed(name))
    assert not changed, [(r["op"], r["ref_op"], r["fig"], r["size"]) for r in changed][:5]


def test_redraw_applies_a_changed_target_to_the_tables_and_the_csv(tmp_path, monkeypatch):
    """The cost of a tensor given a target again, then none: the report's line and CSV
    row follow each time, and the measured values never change."""
    for ext in ("md", "csv"):
        (tmp_path / f"latest.{ext}").write_bytes((RESULTS / f"latest.{ext}").read_bytes())
    base = str(tmp_path / "latest")
    key = ("align_many", "floor_meta_many", "seconds")
    judged = [
        report.Row("many", key[0], key[2], key[1], "ratio", 8.0)
        if (r.op, r.ref, r.figure) == key
        else r
        for r in report.ROWS
    ]
    monkeypatch.setattr(report, "ROWS", judged)
    report.redraw(base)
    (row,) = [
        r for r in report.results_from_csv(base + ".csv") if (r["op"], r["ref_op"], r["fig"]) == key
    ]
    assert (row["target"], row["result"]) == ("<= 8x", "FAIL")
    text = (tmp_path / "latest.md").read_text(encoding="utf-8")
    assert f"| {row['ratio']} | <= 8x | **FAIL** |" in text
    assert re.search(r"^targets: the suite's of \d{4}-\d\d-\d\d, applied again", text, re.M)
    monkeypatch.undo()
    report.redraw(base)
    assert (tmp_path / "latest.csv").read_bytes() == (RESULTS / "latest.csv").read_bytes()
    assert f"| {row['ratio']} |  | info |" in (tmp_path / "latest.md").read_text(encoding="utf-8")
