"""Evaluation figures: Pass@k and UCC@k curves, and a problem's similarity heatmap.

Figures are written atomically in the format named by the suffix (.png, .svg, .pdf)
with matplotlib's Agg backend, so they work without a display.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ratioscope.figures.evaluation import MetricCurves, SimilarityPanel
from ratioscope.render.figures import pyplot, save_figure

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
    subtitle = ""
    if metric == "ucc_at_k":
        subtitle = f"TF-IDF clusters at cosine >= {result.threshold}, {result.linkage} linkage"
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
    axes.set_title(title + (f"\n{subtitle}" if subtitle else ""), fontsize=11)
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


def plot_similarity(
    panels: Sequence[SimilarityPanel], out: Path, threshold: float, linkage: str
) -> None:
    """Heatmaps of pairwise TF-IDF similarity, one per method, ordered by cluster."""
    plt = pyplot()
    from matplotlib.patches import Rectangle

    count = len(panels)
    figure, axes_row = plt.subplots(
        1, count, figsize=(4.6 * count + 1.2, 4.9), squeeze=False, layout="constrained"
    )
    image = None
    for axes, panel in zip(axes_row[0], panels, strict=True):
        size = panel.similarity.shape[0]
        clusters = int(panel.labels.max()) + 1 if size else 0
        axes.set_title(
            f"{panel.method}\n{panel.correct}/{panel.samples} correct, {clusters} cluster"
            + ("" if clusters == 1 else "s"),
            fontsize=10,
        )
        if size == 0:
            axes.text(0.5, 0.5, "no correct response", ha="center", va="center")
            axes.set_axis_off()
            continue
        image = axes.imshow(
            panel.similarity, vmin=0.0, vmax=1.0, cmap="viridis", interpolation="nearest"
        )
        for start, length in _runs(panel.labels):
            axes.add_patch(
                Rectangle(
                    (start - 0.5, start - 0.5),
                    length,
                    length,
                    fill=False,
                    edgecolor="white",
                    linewidth=1.4,
                )
            )
        _label_axes(axes, panel)
    if image is not None:
        bar = figure.colorbar(image, ax=axes_row[0].tolist(), shrink=0.85)
        bar.set_label("TF-IDF cosine similarity")
    figure.suptitle(
        f"Problem {panels[0].problem}: pairwise TF-IDF similarity of correct responses\n"
        f"white squares = clusters (cosine >= {threshold}, {linkage} linkage)",
        fontsize=11,
    )
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


_MAX_LABELLED = 32


def _label_axes(axes: Any, panel: SimilarityPanel) -> None:
    """Small matrices name each row by its sample index; large ones show rank positions."""
    size = panel.similarity.shape[0]
    if size <= _MAX_LABELLED:
        ticks = list(range(size))
        names = [str(i) for i in panel.sample_index.tolist()]
        text = "sample index (ordered by cluster)"
        crowded = size > 12
        axes.set_xticks(ticks, names, fontsize=7 if crowded else 10, rotation=90 if crowded else 0)
        axes.set_yticks(ticks, names, fontsize=7 if crowded else 10)
    else:
        text = "correct response, ordered by cluster"
    axes.set_xlabel(text)
    axes.set_ylabel(text)
