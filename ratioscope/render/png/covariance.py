"""Objective-side figures: CW-GRPO's cumulative covariance share and kernel-weight histogram.

Figures are drawn from the report's typed ``covariance`` section (a fresh analysis or a
stored report JSON read with ``Report.from_dict`` alike) with matplotlib's Agg backend
and written atomically in the format named by the suffix (.png, .svg, .pdf).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.render.png.output import check_figure_path, pyplot, save_figure
from ratioscope.render.terminal.tables import known

if TYPE_CHECKING:
    from ratioscope.sections.covariance import CovarianceSection

__all__ = ["check_figure_path", "plot_covariance"]


def plot_covariance(section: CovarianceSection, out: Path, source: str = "") -> None:
    """Two panels: Fig. 3 cumulative share of sum |c| (log x) and the kernel-weight histogram.

    Args:
        section: the report's ``covariance`` section (``report.covariance``).
        out: .png, .svg or .pdf.
        source: what was analysed, for the title.
    """
    check_figure_path(out)
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4.9), layout="constrained")
    _cumulative_panel(left, section)
    _weight_panel(right, section)
    scope = {"group": "per GRPO group", "batch": "per batch (file)"}.get(
        section.scope, "mixed scopes"
    )
    title = (
        f"CW-GRPO token covariance c = (log pi - mean)(A - mean), {scope}: "
        f"{section.tokens:,} valid tokens"
    )
    if source:
        title += f"\n{source}"
    figure.suptitle(title, fontsize=11)
    save_figure(figure, out)


def _cumulative_panel(axes: Any, section: CovarianceSection) -> None:
    from matplotlib.ticker import FuncFormatter

    curve = section.cumulative_curve
    tokens = max(int(section.tokens), 1)
    # below one token of N the curve is flat (the top token): start the axis there
    points = [
        (100 * x, 100 * s)
        for x, s in zip(curve.fraction, curve.share, strict=True)
        if s is not None and math.isfinite(s) and x >= min(1.0, 1.0 / tokens)
    ]
    if points:
        xs, ys = zip(*points, strict=True)
        axes.plot(xs, ys, color="tab:red", marker="o", markersize=3, label="tokens ranked by |c|")
        axes.plot(xs, xs, color="0.5", linestyle="--", label="if every token had the same |c|")
        for fraction, value in section.cumulative_share.items():
            share = known(value)
            x = 100 * float(fraction)
            if share is None or x < xs[0] or float(fraction) not in (0.01, 0.2):
                continue
            # the curve rises to the right, so above-left of its point is free: the label
            # sits there, with a ring on the point and an arrow from the label to it
            axes.plot([x], [100 * share], marker="o", ms=8, mfc="none", mec="black", mew=1.2,
                      zorder=4)  # fmt: skip
            axes.annotate(
                f"top {x:g}% hold {100 * share:.1f}%",
                xy=(x, 100 * share),
                xytext=(-14, 22),
                textcoords="offset points",
                ha="right",
                va="bottom",
                fontsize=9,
                arrowprops={"arrowstyle": "->", "color": "black", "lw": 0.8, "shrinkB": 5},
            )
        axes.legend(loc="upper left", fontsize=9)
    else:
        axes.text(0.5, 0.5, "every c is 0", ha="center", va="center", transform=axes.transAxes)
    axes.set_xscale("log")
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}%"))
    axes.set_ylim(0, 102)
    axes.set_xlabel("top x of tokens by |c| (% of valid tokens, log scale)")
    axes.set_ylabel("share of the total |c| they hold (%)")
    axes.set_title("Cumulative contribution of covariance (CW-GRPO Fig. 3)", fontsize=10)
    axes.grid(True, which="both", alpha=0.3)


def _weight_panel(axes: Any, section: CovarianceSection) -> None:
    histogram = section.weight_histogram
    edges, counts = histogram.edges, histogram.counts
    widths = [high - low for low, high in itertools.pairwise(edges)]
    axes.bar(
        edges[:-1],
        counts,
        width=widths,
        align="edge",
        color="tab:blue",
        edgecolor="white",
        linewidth=0.4,
        label="tokens",
    )
    axes.set_yscale("log" if max(counts, default=0) > 0 else "linear")
    below = section.weights.fraction_below
    for threshold, style in (("0.5", "--"), ("0.1", ":")):
        if known(below.get(threshold)) is None:
            continue
        axes.axvline(
            float(threshold),
            color="tab:orange",
            linestyle=style,
            label=f"w < {threshold}: {100 * below[threshold]:.2f}% of tokens",
        )
    mean = section.weights.distribution.mean
    removed = known(section.advantage_mass.removed)
    # text-only legend entries keep the notes out of the bars' way
    axes.plot([], [], " ", label=f"mean w = {mean:.3f}")
    if removed is not None:
        axes.plot([], [], " ", label=f"advantage mass sum|A| removed by w: {100 * removed:.1f}%")
    axes.set_xlim(0, 1)
    axes.set_xlabel("kernel weight w = exp(-c² / (2σ²)),  σ = std of c per scope")
    axes.set_ylabel(f"tokens per bin of width {widths[0]:g} (log scale)")
    axes.set_title("Gaussian-kernel weight distribution (before renormalising)", fontsize=10)
    axes.legend(loc="upper left", fontsize=9, framealpha=0.9)
    axes.grid(True, axis="y", which="both", alpha=0.3)
