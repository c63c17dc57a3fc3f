"""``plot objectives``: each method's coefficient along one sequence, and the concentration
curves of all methods over the run."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.figures.objectives import SAME_TRACE
from ratioscope.render.png.output import check_figure_path, pyplot, save_figure

if TYPE_CHECKING:
    from ratioscope.figures.objectives import CoefficientTrace
    from ratioscope.objective_family.side_by_side import ObjectivesReport

#: one colour per method family, varied by line style inside a family
_FAMILY_COLOURS = {
    "clip": "tab:blue",
    "advantage": "tab:purple",
    "paper": "tab:green",
    "correction": "tab:orange",
}
_STYLES = ("-", "--", ":", "-.")
#: lines of one panel, distinguished by colour
_LINE_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink")
#: curves closer than this (percentage points, at every fraction) are one legend entry
SAME_CURVE = 0.5
#: a panel holds traces within this factor of its largest |coefficient|, at most
#: _PANEL_LINES of them: each panel keeps one readable scale
PANEL_RANGE = 10.0
_PANEL_LINES = 4


def plot_objectives(
    trace: CoefficientTrace, result: ObjectivesReport, out: Path, source: str = ""
) -> None:
    """Left: the methods' coefficients along the chosen sequence, methods of one scale in
    one panel (its y axis labelled with the power of ten), identical traces as one line
    named by all their methods, tokens where a rule binds marked; right: the share of the
    total |coefficient| held by the top fraction of tokens, near-identical curves as one
    legend entry."""
    check_figure_path(out)
    plt = pyplot()
    names = [name for name in result.methods if name in trace.values]
    lines = trace_lines(trace, names)
    panels = scale_panels([line for line in lines if line.magnitude > 0])
    zero = [line for line in lines if line.magnitude == 0]
    rows = max(len(panels) + (1 if zero else 0), 1)
    figure = plt.figure(figsize=(15.0, max(6.0, 2.1 * rows + 1.4)), layout="constrained")
    grid = figure.add_gridspec(rows, 2, width_ratios=(1.3, 1.0))
    first: Any = None
    for position, panel in enumerate(panels):
        axes = figure.add_subplot(grid[position, 0], sharex=first)
        first = first or axes
        _trace_panel(axes, panel, last=position == rows - 1)
    if zero:
        axes = figure.add_subplot(grid[rows - 1, 0])
        axes.set_axis_off()
        named = ", ".join(line.label for line in zero)
        axes.text(0.0, 0.5, "\n".join(textwrap.wrap(f"0 on every token of this sequence "
                  f"(clipped or masked away): {named}", 90)), fontsize=9, va="center")  # fmt: skip
    _curves_panel(figure.add_subplot(grid[:, 1]), result)
    advantage = "" if trace.advantage is None else f", advantage {trace.advantage:+.3g}"
    correct = "" if trace.correct is None else (", correct" if trace.correct else ", incorrect")
    title = (
        f"Per-token policy-gradient coefficient dJ/d log pi(y_t) of each method: sequence "
        f"{trace.index} ({Path(trace.source).name} row {trace.row}{advantage}{correct})"
    )
    if trace.chosen_because:
        title += f"\n{trace.chosen_because}"
    if trace.left_out:
        title += (
            f"\nnot drawn: {', '.join(trace.left_out)} (the sequence's group is short of the "
            "trainer's group size after joining its step's files, left out as in objectives)"
        )
    if trace.notes:
        title += "\n" + "\n".join(textwrap.wrap("; ".join(trace.notes), 170))
    if source:
        title += f"\n{source}"
    figure.suptitle(title, fontsize=10.5)
    save_figure(figure, out)


@dataclass(frozen=True)
class TraceLine:
    """One line of the left panels: the methods whose coefficients along the sequence
    are the same (within :data:`SAME_TRACE`), their values [T] and binding tokens."""

    names: tuple[str, ...]
    label: str
    values: tuple[float, ...]
    bound: tuple[bool, ...]
    magnitude: float


def trace_lines(trace: CoefficientTrace, names: list[str]) -> list[TraceLine]:
    """The methods' traces, identical ones (values within :data:`SAME_TRACE` of the
    larger magnitude, the same binding tokens) merged into one line, in method order."""
    lines: list[TraceLine] = []
    for name in names:
        values = tuple(trace.values[name])
        bound = tuple(trace.bound.get(name, [False] * len(values)))
        magnitude = max((abs(v) for v in values), default=0.0)
        for index, line in enumerate(lines):
            scale = max(line.magnitude, magnitude)
            if line.bound == bound and all(
                abs(a - b) <= SAME_TRACE * scale for a, b in zip(line.values, values, strict=True)
            ):
                lines[index] = TraceLine(
                    (*line.names, name), f"{line.label} = {trace.labels[name]}", line.values,
                    line.bound, line.magnitude,
                )  # fmt: skip
                break
        else:
            lines.append(TraceLine((name,), trace.labels[name], values, bound, magnitude))
    return lines


def scale_panels(lines: list[TraceLine]) -> list[list[TraceLine]]:
    """Lines grouped so that each panel's lines lie within :data:`PANEL_RANGE` of its
    largest magnitude, at most :data:`_PANEL_LINES` a panel; largest first."""
    panels: list[list[TraceLine]] = []
    for line in sorted(lines, key=lambda item: -item.magnitude):
        last = panels[-1] if panels else None
        if last and len(last) < _PANEL_LINES and last[0].magnitude <= PANEL_RANGE * line.magnitude:
            last.append(line)
        else:
            panels.append([line])
    return panels


def _trace_panel(axes: Any, panel: list[TraceLine], last: bool) -> None:
    biggest = panel[0].magnitude
    exponent = math.floor(math.log10(biggest))
    factor = 10.0**-exponent
    values = [v for line in panel for v in line.values]
    if min(values) < 0 < max(values):  # a sign change: the zero line; else the axis zooms in
        axes.axhline(0.0, color="0.6", linewidth=0.6)
    axes.ticklabel_format(axis="y", style="plain", useOffset=False)
    for index, line in enumerate(panel):
        colour = _LINE_COLOURS[index % len(_LINE_COLOURS)]
        positions = list(range(len(line.values)))
        scaled = [v * factor for v in line.values]
        label = "\n".join(textwrap.wrap(line.label, 60))
        binds = sum(line.bound)
        if binds:
            label += f" (a rule binds on {binds} of {len(scaled)} tokens: x)"
        axes.plot(positions, scaled, color=colour, linewidth=1.0,
                  linestyle=_STYLES[index % len(_STYLES)], label=label)  # fmt: skip
        marked = [p for p in positions if line.bound[p]]
        if marked:
            axes.plot(marked, [scaled[p] for p in marked], "x", color=colour, markersize=3.5)
    axes.set_ylabel(f"dJ/d log pi\n(×1e{exponent})", fontsize=8)
    axes.tick_params(labelsize=7.5)
    axes.legend(loc="best", fontsize=7, framealpha=0.85)
    if last:
        axes.set_xlabel("token position in the response (valid tokens)")
    else:
        axes.tick_params(labelbottom=False)
    axes.grid(True, alpha=0.25)


def _curves_panel(axes: Any, result: ObjectivesReport) -> None:
    from matplotlib.ticker import FuncFormatter

    fractions = [float(f) for f in result.params["curve_fractions"]]
    tokens = max((s.tokens for s in result.methods.values()), default=1)
    shown = [f >= 1.0 / max(tokens, 1) for f in fractions]
    # near-identical curves: one entry naming all their methods (the first one's style)
    groups: list[tuple[list[float | None], list[Any]]] = []
    for summary in result.methods.values():
        curve = [v if v is not None and math.isfinite(v) else None for v in summary.curve]
        for first_curve, members in groups:
            if _same_curve(first_curve, curve, shown):
                members.append(summary)
                break
        else:
            groups.append((curve, [summary]))
    seen: dict[str, int] = {}
    for curve, members in groups:
        drawn = [
            (100 * f, 100 * v)
            for f, v, keep in zip(fractions, curve, shown, strict=True)
            if keep and v is not None
        ]
        if not drawn:
            continue
        family = members[0].family
        index = seen.get(family, 0)
        seen[family] = index + 1
        xs, ys = zip(*drawn, strict=True)
        names = ", ".join(member.label for member in members)
        share = 100 * members[0].top_share
        label = "\n".join(textwrap.wrap(f"{names}: top 1% hold {share:.1f}%", 52))
        axes.plot(
            xs, ys, color=_FAMILY_COLOURS.get(family, "0.3"),
            linestyle=_STYLES[index % len(_STYLES)], linewidth=1.3,
            alpha=1.0 if index < len(_STYLES) else 0.6, label=label,
        )  # fmt: skip
    grid = [100 * f for f, keep in zip(fractions, shown, strict=True) if keep]
    axes.plot(grid, grid, color="0.5", linestyle=(0, (1, 3)), label="every token the same")
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}%"))
    axes.set_ylim(0, 102)
    axes.set_xlabel("top x of tokens by |coefficient| (% of valid tokens, log scale)")
    axes.set_ylabel("share of the total |coefficient| they hold (%)")
    axes.set_title(
        "Concentration over the run (higher = gradient carried by fewer tokens)\n"
        "blue: clipping family, purple: advantage, green: papers, orange: corrections;\n"
        f"methods whose curves lie within {SAME_CURVE:g} points share one line",
        fontsize=9,
    )
    axes.legend(loc="upper left", fontsize=7.5, framealpha=0.9)
    axes.grid(True, which="both", alpha=0.3)


def _same_curve(a: list[float | None], b: list[float | None], shown: list[bool]) -> bool:
    """Whether two concentration curves lie within :data:`SAME_CURVE` points wherever
    both are drawn (and are missing at the same fractions)."""
    for x, y, keep in zip(a, b, shown, strict=True):
        if not keep:
            continue
        if (x is None) != (y is None):
            return False
        if x is not None and y is not None and abs(100 * (x - y)) > SAME_CURVE:
            return False
    return True
