"""``plot compare``: two timelines as small multiples, or two reports as one bar chart."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from ratioscope.figures.compare import CompareFigure, ComparePanel
from ratioscope.render.png.output import pyplot, save_figure
from ratioscope.render.png.series import at_noise, finish_axes, power_of_ten

COLUMNS = 3
COLOR_A = "tab:blue"
COLOR_B = "tab:orange"
COLOR_DIVERGING = "tab:red"


def plot_compare(figure_data: CompareFigure, out: Path) -> None:
    """Draw ``figure_data`` to ``out``: panels for timelines, bars for reports."""
    if figure_data.kind == "timelines":
        _plot_timelines(figure_data, out)
    else:
        _plot_reports(figure_data, out)


def _header(figure: Any, height: float, title: str, subtitle: str) -> None:
    top = 1 - 0.12 / height
    figure.text(0.01, top, title, fontsize=13, va="top")
    figure.text(0.01, top - 0.3 / height, subtitle, fontsize=9, color="0.3", va="top")


def _plot_timelines(figure_data: CompareFigure, out: Path) -> None:
    plt = pyplot()
    panels = figure_data.panels
    rows = max(1, math.ceil(len(panels) / COLUMNS))
    height = 2.7 * rows + 1.2  # inches: the panels, a header and the legend
    figure, axes = plt.subplots(
        rows, COLUMNS, figsize=(4.6 * COLUMNS, height), squeeze=False, sharex=True
    )
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.set_visible(False)
            continue
        _panel(ax, panels[index], figure_data)
        if index + COLUMNS >= len(panels):  # the lowest panel of its column
            ax.set_xlabel("training step")
            ax.xaxis.set_tick_params(labelbottom=True)
    if not panels:
        axes.flat[0].set_visible(True)
        axes.flat[0].text(0.5, 0.5, "no headline has data", ha="center", va="center")
        axes.flat[0].set_axis_off()
    _header(figure, height, "Two runs: headline quantities per training step", figure_data.subtitle)
    handles = [
        plt.Line2D([], [], color=COLOR_A, marker="o", markersize=3.5, label=figure_data.label_a),
        plt.Line2D([], [], color=COLOR_B, marker="o", markersize=3.5, label=figure_data.label_b),
        plt.Line2D([], [], color=COLOR_DIVERGING, ls="--", label="diverging step"),
    ]
    figure.legend(
        handles=handles, loc="upper right", ncol=3, fontsize=8.5, frameon=False,
        bbox_to_anchor=(0.99, 1 - 0.55 / height),
    )  # fmt: skip
    figure.tight_layout(rect=(0, 0, 1, 1 - 1.1 / height))
    save_figure(figure, out)


def _panel(ax: Any, panel: ComparePanel, figure_data: CompareFigure) -> None:
    values = (*panel.values_a, *panel.values_b)
    noise = at_noise(values, panel.noise_floor)
    exponent = power_of_ten(values, panel.noise_floor)
    factor = 10.0**-exponent
    for step in panel.diverging:
        ax.axvline(step, color=COLOR_DIVERGING, lw=0.8, ls="--", alpha=0.6)
    for steps, values, color, label in (
        (panel.steps_a, panel.values_a, COLOR_A, figure_data.label_a),
        (panel.steps_b, panel.values_b, COLOR_B, figure_data.label_b),
    ):
        ax.plot(steps, [v * factor for v in values], marker="o", markersize=3.5, color=color,
                lw=1.4, label=label)  # fmt: skip
    finish_axes(ax, panel.title, panel.unit, exponent, panel.noise_floor, noise)


def _plot_reports(figure_data: CompareFigure, out: Path) -> None:
    plt = pyplot()
    bars = figure_data.bars
    height = 0.42 * max(1, len(bars)) + 1.6
    figure, ax = plt.subplots(figsize=(12.5, height))
    from matplotlib.transforms import blended_transform_factory

    column = blended_transform_factory(ax.transAxes, ax.transData)
    positions = list(range(len(bars)))
    widths = [bar.rel_diff * 100 if bar.rel_diff is not None else 0.0 for bar in bars]
    colors = [COLOR_DIVERGING if bar.diverges else "0.6" for bar in bars]
    ax.barh(positions, widths, color=colors, height=0.65)
    for position, bar, width in zip(positions, bars, widths, strict=True):
        text = "n/a" if bar.rel_diff is None else f"{round(width, 1) + 0.0:+.1f} %"  # no "-0.0 %"
        ax.text(width, position, f" {text} ", va="center", fontsize=8,
                ha="left" if width >= 0 else "right")  # fmt: skip
        # the values themselves, in a column right of the axes: a relative difference
        # alone hides whether both sides are large, tiny, or at float noise
        values = f"{_value(bar.a)} → {_value(bar.b)}" + (" (float noise)" if bar.at_noise else "")
        ax.text(1.02, position, values, transform=column, va="center", fontsize=8)
    ax.text(1.02, -0.9, "A → B", transform=column, va="center", fontsize=8.5,
            fontweight="bold")  # fmt: skip
    ax.set_yticks(positions)
    ax.set_yticklabels(["\n".join(textwrap.wrap(bar.label, 48)) for bar in bars], fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0, color="0.2", lw=0.8)
    ax.set_xlabel("(B − A) / |A|  (%)")
    ax.grid(axis="x", alpha=0.3)
    ax.margins(x=0.15)
    ax.tick_params(axis="x", labelsize=8)
    _header(figure, height, "Two runs: relative difference per headline", figure_data.subtitle)
    figure.tight_layout(rect=(0, 0, 0.8, 1 - 0.7 / height))  # the A → B column at the right
    save_figure(figure, out)


def _value(value: float | None) -> str:
    """A headline value for the A → B column: 4 significant digits, a value just below 1
    as 1 − its distance (an ESS of 0.9999999999998 reads "1 − 2e-13")."""
    if value is None:
        return "—"
    if 0.0 < 1.0 - value < 1e-3:
        return f"1 − {1.0 - value:.3g}"
    return f"{value:.4g}"
