"""Bars for the gallery: medians of rounds, their min-max, each value written on its bar.

One palette for the whole site: each tool has its colour in every figure
(``TOOL_COLORS``), other configurations of the same tool lighter or
darker shades of it (:func:`tool_color`), and what is no tool (layouts, settings,
kinds of work, files) takes colours no tool has (``OTHER_COLORS``).
Legends stand beside the axes, never over the bars or the lines.
"""

from __future__ import annotations

import re
import statistics
import textwrap
from collections.abc import Mapping, Sequence

__all__ = [
    "OTHER_COLORS",
    "STATE_COLORS",
    "TOOL_COLORS",
    "legend_beside",
    "median_bars",
    "other_color",
    "summary_bars",
    "tool_color",
    "tool_colors",
    "tool_of",
]

#: The colour of each tool, in every figure of the site. ``floor`` is what any
#: tool must spend: the kernel's copy (``shutil.copyfile``, ``cp``, ``cat``), a
#: bare numpy loop.
TOOL_COLORS = {
    "onnx-light": "#2ca02c",
    "onnx": "#1f77b4",
    "onnx-ir": "#ff7f0e",
    "onnxruntime": "#9467bd",
    "floor": "#7f7f7f",
}
#: Colours no tool has, for what is not a tool: layouts, settings, kinds of work, files.
OTHER_COLORS = ("#17becf", "#8c564b", "#e377c2", "#bcbd22", "#393b79")
#: A state, not a tool: a target met or a tensor complete (``good``), missed or cut off (``bad``).
STATE_COLORS = {"good": "#2ca02c", "bad": "#d62728"}

# the words that name each tool in a label; the first match wins (onnx last: "onnx-light",
# "onnx-ir", "onnx.load + onnxruntime's converter" name other tools first)
_TOOL_WORDS = (
    ("onnx-light", re.compile(r"onnx[-_]light|\bonnxl\b")),
    ("onnx-ir", re.compile(r"onnx[-_]ir\b")),
    ("onnxruntime", re.compile(r"onnxruntime|\bort\b|inferencesession")),
    ("floor", re.compile(r"\bfloor\b|shutil|copyfile|\bcp\b|\bcat\b|numpy|kernel|\bcopy of\b")),
    ("onnx", re.compile(r"\bonnx\b")),
)
_SHADES = (0.0, 0.45, -0.4)  # a tool's second configuration mixes in white, its third black


def tool_of(label: str) -> str | None:
    """The tool a label names (a key of ``TOOL_COLORS``), or None.

    ``"onnx-ir DeduplicateInitializersPass"`` is onnx-ir, ``"naive (onnx)"``
    onnx, ``"copy of the export (shutil)"`` the floor.
    """
    text = label.lower()
    return next((tool for tool, words in _TOOL_WORDS if words.search(text)), None)


def tool_color(tool: str, variant: int = 0) -> str:
    """The colour of a tool, or of the tool a label names.

    Args:
        tool: a key of ``TOOL_COLORS``, or a label naming one
            (``"naive (onnx)"``, ``"copy of the export (shutil)"``).
        variant: 0 for the tool itself, 1 for a lighter shade, 2 for a darker
            one (other configurations of the same tool in one figure).

    Returns:
        A ``#rrggbb`` colour.

    Raises:
        ValueError: the label names no tool of the palette.
    """
    name = tool if tool in TOOL_COLORS else tool_of(tool)
    if name is None:
        raise ValueError(f"{tool!r} names no tool of the palette ({', '.join(TOOL_COLORS)})")
    return _shade(TOOL_COLORS[name], _SHADES[min(max(variant, 0), len(_SHADES) - 1)])


def other_color(index: int, variant: int = 0) -> str:
    """The ``index``-th colour of ``OTHER_COLORS`` (cycling); ``variant`` 1 lighter, 2 darker."""
    color = OTHER_COLORS[index % len(OTHER_COLORS)]
    return _shade(color, _SHADES[min(max(variant, 0), len(_SHADES) - 1)])


def tool_colors(labels: Sequence[str]) -> list[str]:
    """A colour per label: its tool's (another shade for the tool's next labels), else one
    of ``OTHER_COLORS`` in turn."""
    seen: dict[str, int] = {}
    others = 0
    out = []
    for label in labels:
        tool = tool_of(label)
        if tool is None:
            out.append(other_color(others))
            others += 1
        else:
            out.append(tool_color(tool, seen.get(tool, 0)))
            seen[tool] = seen.get(tool, 0) + 1
    return out


def _shade(color: str, mix: float) -> str:
    """``color`` mixed with white (``mix`` > 0) or black (``mix`` < 0)."""
    rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    target = 255 if mix > 0 else 0
    return "#" + "".join(f"{round(c + (target - c) * abs(mix)):02x}" for c in rgb)


def legend_beside(ax, **kwargs):
    """The legend of ``ax`` to the right of its axes, where it covers no bar, line or label.

    Args:
        ax: a matplotlib ``Axes``.
        kwargs: passed to ``Axes.legend`` (``fontsize``, ``ncols``...); the
            figure's ``tight_layout`` then makes room for it.

    Returns:
        The legend.
    """
    kwargs.setdefault("fontsize", 9)
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kwargs)


def _spread(rounds: Sequence[Sequence[float]]) -> tuple[list[float], list[list[float]]]:
    """Medians, and the distances down to each minimum and up to each maximum."""
    mids = [statistics.median(r) for r in rounds]
    low = [m - min(r) for m, r in zip(mids, rounds)]
    high = [max(r) - m for m, r in zip(mids, rounds)]
    return mids, [low, high]


def summary_bars(
    labels: Sequence[str],
    values: Sequence[float] | Mapping[str, Sequence[float]],
    unit: str,
    title: str,
    reference: float | None = None,
    reference_label: str | None = None,
    colors: Sequence[str] | None = None,
):
    """A horizontal bar per label, the value and unit written at its end.

    Made to be read small (large fonts, few bars): the first figure of each
    gallery example, which sphinx-gallery also uses as its thumbnail. A bar
    whose value rounds to zero still shows its number. Given rounds, a bar is
    their median and a black line spans their min-max. Long labels and the
    title are wrapped to fit the figure; the reference line's label sits
    above the first bar, where no bar is.

    Args:
        labels: one per bar, top to bottom.
        values: the bars' lengths, one per label, or ``{label: rounds}``
            (e.g. :meth:`~benchmarks.harness.Rounds.seconds` of each).
        unit: what the values count, shown after each value and on the axis.
        title: the figure's title.
        reference: an optional vertical dashed line (e.g. the model's size).
        reference_label: its label, written beside it.
        colors: one per label (None: each tool's colour, :func:`tool_colors`).

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    if isinstance(values, Mapping):
        rounds = [list(values[label]) for label in labels]
        mids, err = _spread(rounds)
        texts = [f"{m:.3g} {unit}" for m in mids]  # the spread is the line, not more text
        top_value = max(max(r) for r in rounds)
    else:
        mids, err = list(values), None
        texts = [f"{v:.3g} {unit}" for v in mids]
        top_value = max(mids, default=0)
    fig, ax = plt.subplots(figsize=(7, 0.55 * len(labels) + 1.9))
    y = list(range(len(labels)))
    top = max(top_value, reference or 0, 1e-12)
    colors = list(colors) if colors else tool_colors(labels)
    bars = ax.barh(y, mids, color=colors)
    if err is None:
        ax.bar_label(bars, labels=texts, padding=4, fontsize=12)
    else:  # the value after the end of its min-max line, where the line cannot hide it
        ax.errorbar(mids, y, xerr=err, fmt="none", ecolor="black", capsize=4, lw=1.2)
        for yi, m, hi, text in zip(y, mids, err[1], texts):
            ax.text(m + hi + 0.02 * top, yi, text, va="center", fontsize=12)
    wrapped = [
        textwrap.fill(label, 26, break_long_words=False, break_on_hyphens=False) for label in labels
    ]
    ax.set_yticks(y, wrapped, fontsize=12)
    ax.set_ylim(len(labels) - 0.5, -0.5 if reference is None else -1.3)  # top to bottom
    fig.suptitle(textwrap.fill(title, 60), fontsize=13)
    ax.set_xlabel(unit if err is None else f"{unit} (median; line: min-max)", fontsize=12)
    ax.set_xlim(0, top * 1.4)
    if reference is not None:  # its label in the free row above the bars
        ax.axvline(reference, color="k", ls="--", lw=1)
        if reference_label:
            right = reference > 0.7 * top * 1.4
            text = f"{reference_label} " if right else f" {reference_label}"
            ha = "right" if right else "left"
            ax.text(reference, -0.9, text, ha=ha, va="center", fontsize=11)
    fig.tight_layout()
    return fig


def median_bars(
    ax,
    values: Mapping[str, Sequence[float]],
    unit: str,
    title: str,
    colors: Sequence[str] | None = None,
):
    """On ``ax``, a vertical bar per label: the median of its rounds, a line over their min-max.

    One panel of a figure that puts several measures side by side (time,
    peak memory, bytes written); each bar's median and ``unit`` are written
    above its line, long labels are wrapped.

    Args:
        ax: a matplotlib ``Axes``.
        values: ``{label: rounds}``, left to right (a single value is a
            list of one).
        unit: what the values count, after each value and on the axis.
        title: the panel's title.
        colors: one per label (None: each tool's colour, :func:`tool_colors`).

    Returns:
        The bars (a matplotlib ``BarContainer``).

    Raises:
        ValueError: a label has no value.
    """
    if not all(values.values()):
        raise ValueError("median_bars needs at least one value per label")
    mids, err = _spread([list(v) for v in values.values()])
    labels = [
        textwrap.fill(label, 18, break_long_words=False, break_on_hyphens=False) for label in values
    ]
    colors = list(colors) if colors else tool_colors(list(values))
    bars = ax.bar(labels, mids, yerr=err, capsize=4, color=colors)
    for bar, m, high in zip(bars, mids, err[1]):  # above the min-max line, which cannot hide it
        x = bar.get_x() + bar.get_width() / 2
        ax.annotate(
            f"{m:.3g} {unit}",
            (x, m + high),
            (0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.margins(y=0.15)
    ax.set_ylabel(f"{unit} (median, line: min-max)")
    ax.set_title(title)
    ax.tick_params(axis="x", labelsize=8)
    return bars
