"""Bars for the gallery: medians of rounds, their min-max, each value written on its bar."""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Mapping, Sequence

__all__ = ["median_bars", "summary_bars"]


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
):
    """A horizontal bar per label, the value and unit written at its end.

    Made to be read small (large fonts, few bars): the first figure of each
    gallery example, which sphinx-gallery also uses as its thumbnail. A bar
    whose value rounds to zero still shows its number. Given rounds, a bar is
    their median and a black line spans their min-max.

    Args:
        labels: one per bar, top to bottom.
        values: the bars' lengths, one per label, or ``{label: rounds}``
            (e.g. :meth:`~onnx_light.bench.Rounds.seconds` of each).
        unit: what the values count, shown after each value and on the axis.
        title: the figure's title.
        reference: an optional vertical dashed line (e.g. the model's size).
        reference_label: its legend.

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
    fig, ax = plt.subplots(figsize=(7, 0.55 * len(labels) + 1.6))
    y = list(range(len(labels)))
    top = max(top_value, reference or 0, 1e-12)
    bars = ax.barh(y, mids, color=[f"C{i % 10}" for i in y])
    if err is None:
        ax.bar_label(bars, labels=texts, padding=4, fontsize=12)
    else:  # the value after the end of its min-max line, where the line cannot hide it
        ax.errorbar(mids, y, xerr=err, fmt="none", ecolor="black", capsize=4, lw=1.2)
        for yi, m, hi, text in zip(y, mids, err[1], texts):
            ax.text(m + hi + 0.02 * top, yi, text, va="center", fontsize=12)
    ax.set_yticks(y, labels, fontsize=12)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=13)
    xlabel = unit if err is None else f"{unit} (median, line: min-max over rounds)"
    ax.set_xlabel(xlabel, fontsize=12)
    ax.set_xlim(0, top * 1.4)
    if reference is not None:
        ax.axvline(reference, color="k", ls="--", lw=1, label=reference_label)
        ax.legend(fontsize=11, loc="lower right")
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
        colors: one per label (None: matplotlib's colour cycle).

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
    colors = list(colors) if colors else [f"C{i % 10}" for i in range(len(labels))]
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
