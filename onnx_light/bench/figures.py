"""One-picture summaries for the gallery: a few bars, each with its value written on it."""

from __future__ import annotations

from collections.abc import Sequence


def summary_bars(
    labels: Sequence[str],
    values: Sequence[float],
    unit: str,
    title: str,
    reference: float | None = None,
    reference_label: str | None = None,
):
    """A horizontal bar per label, the value and unit written at its end.

    Made to be read small (large fonts, few bars): the first figure of each
    gallery example, which sphinx-gallery also uses as its thumbnail. A bar
    whose value rounds to zero still shows its number.

    Args:
        labels: one per bar, top to bottom.
        values: the bars' lengths.
        unit: what the values count, shown after each value and on the axis.
        title: the figure's title.
        reference: an optional vertical dashed line (e.g. the model's size).
        reference_label: its legend.

    Returns:
        The matplotlib figure.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.55 * len(labels) + 1.6))
    y = list(range(len(labels)))
    bars = ax.barh(y, values, color=[f"C{i % 10}" for i in y])
    ax.bar_label(bars, labels=[f"{v:.3g} {unit}" for v in values], padding=4, fontsize=12)
    ax.set_yticks(y, labels, fontsize=12)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=13)
    ax.set_xlabel(unit, fontsize=12)
    top = max([*values, reference or 0, 1e-12])
    ax.set_xlim(0, top * 1.35)
    if reference is not None:
        ax.axvline(reference, color="k", ls="--", lw=1, label=reference_label)
        ax.legend(fontsize=11, loc="lower right")
    fig.tight_layout()
    return fig
