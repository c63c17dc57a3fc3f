"""Evaluation figures: Pass@k and UCC@k curves, and a problem's similarity heatmap.

Figures are written atomically in the format named by the suffix (.png, .svg, .pdf)
with matplotlib's Agg backend, so they work without a display.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ratioscope.figures.evaluation import MetricCurves, SimilarityPanel
from ratioscope.render.png.output import pyplot, save_figure

_CURVE_LABELS = {
    "pass_at_k": (
        "Pass@k (%)",
        "Pass@k: chance that k samples contain a correct answer",
        100.0,
    ),
    "ucc_at_k": (
        "UCC@k (expected distinct correct solutions)",
        "UCC@k: distinct correct solutions among k samples",
        1.0,
    ),
}


def plot_curves(result: MetricCurves, out: Path) -> None:
    """One line per method of the metric against k, log2 x axis.

    UCC@k figures name the clustering (threshold and linkage) the curves were made with.
    """
    plt = pyplot()
    from matplotlib.ticker import FixedLocator, NullLocator

    metric, curves = result.metric, result.curves
    y_label, title, scale = _CURVE_LABELS[metric]
    lines = list(result.notes)
    if metric == "ucc_at_k":
        lines.insert(
            0, f"TF-IDF clusters at cosine >= {result.threshold}, {result.linkage} linkage"
        )
    subtitle = "\n".join(textwrap.fill(line, 95) for line in lines)
    figure, axes = plt.subplots(figsize=(7.0, 4.6), layout="constrained")
    all_ks: set[int] = set()
    markers = "osD^v<>pXh*"
    for index, (label, curve) in enumerate(curves.items()):
        ks = sorted(curve)
        all_ks.update(ks)
        axes.plot(
            ks,
            [scale * curve[k] for k in ks],
            marker=markers[index % len(markers)],
            linewidth=1.8,
            markersize=5,
            label=label,
        )
    axes.set_xscale("log", base=2)
    ticks = sorted(all_ks)
    axes.xaxis.set_major_locator(FixedLocator(ticks))
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_xticklabels([str(k) for k in ticks])
    axes.set_xlabel("k (samples drawn per problem, log scale)")
    axes.set_ylabel(y_label)
    figure.suptitle(title, fontsize=11)
    # what was measured on what (problems, samples, the k cut): said on the figure itself
    axes.set_title(subtitle, fontsize=9, color="0.25")
    axes.grid(True, which="major", alpha=0.35)
    if metric == "pass_at_k":
        low = min((scale * v for c in curves.values() for v in c.values()), default=0.0)
        axes.set_ylim(max(0.0, low - 5.0), 100.5)
    else:
        top = max((v for c in curves.values() for v in c.values()), default=1.0)
        axes.set_ylim(0.0, 1.08 * top if top > 0 else 1.0)
    # both metrics grow with k, so the curves end high on the right: lower right is free
    axes.legend(title="method", loc="lower right", frameon=True)
    save_figure(figure, out)


#: cluster outlines: a colour that the similarity colour map never takes
CLUSTER_EDGE = "red"


def similarity_norm() -> Any:
    """Colour scale of the heatmaps: half the map for 0-0.8, the other half for 0.8-1.

    Near-duplicates sit in 0.8-1 (the default clustering threshold is 0.8), so that
    stretch gets as many colours as everything below it.
    """
    from matplotlib.colors import TwoSlopeNorm

    return TwoSlopeNorm(vmin=0.0, vcenter=0.8, vmax=1.0)


def plot_similarity(
    panels: Sequence[SimilarityPanel], out: Path, threshold: float, linkage: str
) -> None:
    """Heatmaps of pairwise TF-IDF similarity, one per method, ordered by cluster.

    The panels share their axes (one response is the same size in every panel) and
    one colour scale; a method with no correct response is left out with a note.
    """
    plt = pyplot()
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import MaxNLocator

    drawn = [panel for panel in panels if panel.similarity.shape[0]]
    skipped = [panel for panel in panels if not panel.similarity.shape[0]]
    count = len(drawn)
    figure, axes_row = plt.subplots(
        1, count, figsize=(max(4.6 * count + 1.2, 7.5), 6.0), squeeze=False, layout="constrained",
        sharex=True, sharey=True,
    )  # fmt: skip
    size = max(panel.similarity.shape[0] for panel in drawn)
    image = None
    for axes, panel in zip(axes_row[0], drawn, strict=True):
        clusters = int(panel.labels.max()) + 1
        axes.set_title(
            f"{panel.method}\n{panel.correct}/{panel.samples} correct, {clusters} cluster"
            + ("" if clusters == 1 else "s"),
            fontsize=10,
        )
        image = axes.imshow(
            panel.similarity, norm=similarity_norm(), cmap="viridis", interpolation="nearest"
        )
        for start, length in _runs(panel.labels):
            axes.add_patch(
                Rectangle((start - 0.5, start - 0.5), length, length, fill=False,
                          edgecolor=CLUSTER_EDGE, linewidth=2.0, zorder=3)
            )  # fmt: skip
        axes.set_xlabel("correct response, in cluster order")
    axes_row[0][0].set_ylabel("correct response, in cluster order")
    first = axes_row[0][0]
    first.set_xlim(-0.5, size - 0.5)
    first.set_ylim(size - 0.5, -0.5)
    first.xaxis.set_major_locator(MaxNLocator(integer=True))
    first.yaxis.set_major_locator(MaxNLocator(integer=True))
    bar = figure.colorbar(image, ax=axes_row[0].tolist(), shrink=0.85)
    bar.set_ticks([0.0, 0.2, 0.4, 0.6, 0.8, 0.85, 0.9, 0.95, 1.0])
    bar.set_label("TF-IDF cosine similarity (0.8-1 stretched)")
    title = (
        f"Problem {panels[0].problem}: pairwise TF-IDF similarity of correct responses\n"
        f"red squares = clusters (cosine >= {threshold}, {linkage} linkage)\n"
        "shared axes: one cell per response in every panel"
    )
    if skipped:
        title += "\nnot drawn, no correct response: " + ", ".join(
            f"{panel.method} (0/{panel.samples})" for panel in skipped
        )
    figure.suptitle(title, fontsize=10)
    save_figure(figure, out)


def _runs(labels: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of each block of equal consecutive labels."""
    runs = []
    start = 0
    for index in range(1, labels.size + 1):
        if index == labels.size or labels[index] != labels[start]:
            runs.append((start, index - start))
            start = index
    return runs
