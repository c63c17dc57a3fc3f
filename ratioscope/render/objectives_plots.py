"""``plot objectives``: each method's coefficient along one sequence, and the concentration
curves of all methods over the run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.render.figures import check_figure_path, pyplot, save_figure

if TYPE_CHECKING:
    from ratioscope.figures.objectives import CoefficientTrace
    from ratioscope.objectives import ObjectivesReport

#: one colour per method family, varied by line style inside a family
_FAMILY_COLOURS = {
    "clip": "tab:blue",
    "advantage": "tab:purple",
    "paper": "tab:green",
    "correction": "tab:orange",
}
_STYLES = ("-", "--", ":", "-.")


def plot_objectives(
    trace: CoefficientTrace, result: ObjectivesReport, out: Path, source: str = ""
) -> None:
    """Left: one small panel per method with its coefficient along the chosen sequence
    (tokens where one of its rules binds marked in red); right: the share of the total
    |coefficient| held by the top fraction of tokens, every method on one axis."""
    check_figure_path(out)
    plt = pyplot()
    names = [name for name in result.methods if name in trace.values]
    rows = max(len(names), 1)
    figure = plt.figure(figsize=(14.0, max(5.5, 0.85 * rows + 1.6)), layout="constrained")
    grid = figure.add_gridspec(rows, 2, width_ratios=(1.35, 1.0))
    first: Any = None
    for position, name in enumerate(names):
        axes = figure.add_subplot(grid[position, 0], sharex=first)
        first = first or axes
        _trace_panel(axes, trace, name, last=position == rows - 1)
    _curves_panel(figure.add_subplot(grid[:, 1]), result)
    advantage = "" if trace.advantage is None else f", advantage {trace.advantage:+.3g}"
    correct = "" if trace.correct is None else (", correct" if trace.correct else ", incorrect")
    title = (
        f"Per-token policy-gradient coefficient dJ/d log pi(y_t) of each method: sequence "
        f"{trace.index} ({Path(trace.source).name} row {trace.row}{advantage}{correct})"
    )
    if trace.chosen_because:
        title += f"\n{trace.chosen_because}"
    if source:
        title += f"\n{source}"
    figure.suptitle(title, fontsize=10.5)
    save_figure(figure, out)


def _trace_panel(axes: Any, trace: CoefficientTrace, name: str, last: bool) -> None:
    values = trace.values[name]
    positions = list(range(len(values)))
    axes.axhline(0.0, color="0.6", linewidth=0.6)
    axes.plot(positions, values, color="tab:blue", linewidth=0.9)
    bound = [p for p, b in zip(positions, trace.bound.get(name, []), strict=False) if b]
    if bound:
        axes.plot(
            bound, [values[p] for p in bound], "o", color="tab:red", markersize=2.5,
            label="a rule binds",
        )  # fmt: skip
    label = trace.labels[name]
    if bound:
        label += f": a rule binds on {len(bound)} of {len(values)} tokens"
    elif values and all(v == 0 for v in values):
        label += ": 0 everywhere (zero advantage)"
    axes.set_title(label, loc="right", fontsize=8, pad=2)
    axes.tick_params(labelsize=7)
    axes.yaxis.get_offset_text().set_fontsize(7)
    axes.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    if last:
        axes.set_xlabel("token position in the response (valid tokens)")
    else:
        axes.tick_params(labelbottom=False)
    axes.grid(True, alpha=0.25)


def _curves_panel(axes: Any, result: ObjectivesReport) -> None:
    from matplotlib.ticker import FuncFormatter

    fractions = [float(f) for f in result.params["curve_fractions"]]
    seen: dict[str, int] = {}
    tokens = max((s.tokens for s in result.methods.values()), default=1)
    for summary in result.methods.values():
        points = [
            (100 * f, 100 * v)
            for f, v in zip(fractions, summary.curve, strict=True)
            if v is not None and math.isfinite(v) and f >= 1.0 / max(tokens, 1)
        ]
        if not points:
            continue
        index = seen.get(summary.family, 0)
        seen[summary.family] = index + 1
        xs, ys = zip(*points, strict=True)
        axes.plot(
            xs, ys, color=_FAMILY_COLOURS.get(summary.family, "0.3"),
            linestyle=_STYLES[index % len(_STYLES)], linewidth=1.3,
            alpha=1.0 if index < len(_STYLES) else 0.6,
            label=f"{summary.label}: top 1% hold {100 * summary.top_share:.1f}%",
        )  # fmt: skip
    grid = [100 * f for f in fractions if f >= 1.0 / max(tokens, 1)]
    axes.plot(grid, grid, color="0.5", linestyle=(0, (1, 3)), label="every token the same")
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}%"))
    axes.set_ylim(0, 102)
    axes.set_xlabel("top x of tokens by |coefficient| (% of valid tokens, log scale)")
    axes.set_ylabel("share of the total |coefficient| they hold (%)")
    axes.set_title(
        "Concentration over the run (higher = gradient carried by fewer tokens)\n"
        "blue: clipping family, purple: advantage, green: papers, orange: corrections",
        fontsize=9,
    )
    axes.legend(loc="upper left", fontsize=7.5, framealpha=0.9)
    axes.grid(True, which="both", alpha=0.3)
