"""``plot timeline``: small multiples of the headline quantities over training steps."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ratioscope.figures.timeline import TimelineFigure, TimelinePanel
from ratioscope.render.png.output import pyplot, save_figure
from ratioscope.render.png.series import at_noise, finish_axes, power_of_ten

COLUMNS = 3


def plot_timeline(figure_data: TimelineFigure, out: Path) -> None:
    """One panel per headline: the series over steps, changes marked in red."""
    plt = pyplot()
    panels = figure_data.panels
    rows = max(1, math.ceil(len(panels) / COLUMNS))
    height = 2.7 * rows + 0.9  # inches: the panels and a header of 0.9 in
    figure, axes = plt.subplots(
        rows, COLUMNS, figsize=(4.6 * COLUMNS, height), squeeze=False, sharex=True
    )
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.set_visible(False)
            continue
        _panel(ax, panels[index], figure_data.levels)
        if index + COLUMNS >= len(panels):  # the lowest panel of its column
            ax.set_xlabel("training step")
            ax.xaxis.set_tick_params(labelbottom=True)
    top = 1 - 0.12 / height
    figure.text(0.01, top, "Headline quantities per training step", fontsize=13, va="top")
    figure.text(0.01, top - 0.3 / height, figure_data.subtitle, fontsize=9, color="0.3",
                va="top")  # fmt: skip
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.8 / height))
    save_figure(figure, out)


#: the shading of a step by the verdict after it
LEVEL_SHADES = {"yellow": "#f3d36b", "red": "#e57373"}


def _shade_levels(ax: Any, levels: tuple[tuple[int, str], ...]) -> None:
    """A band behind each yellow or red step, half-way to its neighbours."""
    steps = [step for step, _ in levels]
    for index, (step, level) in enumerate(levels):
        if level not in LEVEL_SHADES:
            continue
        left = (step + steps[index - 1]) / 2 if index > 0 else step - 0.5
        right = (step + steps[index + 1]) / 2 if index + 1 < len(steps) else step + 0.5
        ax.axvspan(left, right, color=LEVEL_SHADES[level], alpha=0.35, lw=0, zorder=0)


def _panel(ax: Any, panel: TimelinePanel, levels: tuple[tuple[int, str], ...] = ()) -> None:
    _shade_levels(ax, levels)
    noise = at_noise(panel.values, panel.noise_floor)
    # the power of ten goes into the axis label, not over the title
    exponent = power_of_ten(panel.values, panel.noise_floor)
    factor = 10.0**-exponent
    values = [v * factor for v in panel.values]
    ax.plot(panel.steps, values, marker="o", markersize=3.5, color="tab:blue", lw=1.4)
    flagged = set(panel.flagged)
    for step, value in zip(panel.steps, values, strict=True):
        if step in flagged:
            ax.axvline(step, color="tab:red", lw=0.8, ls="--", alpha=0.6)
            ax.plot([step], [value], marker="o", markersize=8, color="tab:red", zorder=3)
    finish_axes(ax, panel.title, panel.unit, exponent, panel.noise_floor, noise)
