"""Figures of the ratios section (KPO Figs. 1 and 4): spectrum, traces, windows, runs.

All but the trace are drawn from a report document, fresh or stored, so a report JSON
plots without recomputation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ratioscope.render.figures import pyplot, save_figure

COLORS = {"token": "tab:blue", "sequence": "tab:purple", "kalman": "tab:red"}
LABELS = {
    "token": "token ratio (raw)",
    "sequence": "sequence ratio (GSPO/GMPO)",
    "kalman": "Kalman-filtered (KPO)",
}
STATE_COLORS = {"up": "tab:orange", "down": "tab:green", "on": "tab:gray"}


def _ratios(document: Mapping[str, Any]) -> Mapping[str, Any]:
    from ratioscope.errors import ReportError

    ratios = document.get("ratios")
    if not ratios:
        raise ReportError(None, "the report has no 'ratios' section to plot")
    return ratios


def _params(document: Mapping[str, Any]) -> Mapping[str, Any]:
    return document.get("params", {}).get("analysis", {})


def _footer(figure: Any, source: str) -> None:
    figure.text(0.995, 0.005, f"ratioscope · {source}", ha="right", va="bottom",
                fontsize=7, color="0.45")  # fmt: skip


def plot_spectrum(document: Mapping[str, Any], out: Path, source: str = "") -> None:
    """Mean periodogram per variant on the normalised-frequency grid, LFR band marked."""
    ratios, params = _ratios(document), _params(document)
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(8.5, 4.8), layout="constrained")
    drawn = 0
    for variant, stats in ratios.items():
        spectrum = (stats or {}).get("spectrum")
        if not spectrum or not spectrum.get("power"):
            continue
        power = [p if p and p > 0 else math.nan for p in spectrum["power"]]
        lfr = stats.get("lfr")
        label = f"{LABELS.get(variant, variant)}: LFR {lfr:.3f}" if lfr is not None else variant
        axes.plot(spectrum["frequency"], power, color=COLORS.get(variant), label=label, lw=1.8)
        drawn += 1
    cutoff = params.get("lfr_cutoff", 0.1) * 0.5
    axes.axvspan(0, cutoff, color="0.85", zorder=0,
                 label=f"low-frequency band (f <= {cutoff:g} cycles/token)")  # fmt: skip
    axes.set_yscale("log")
    axes.set_xlim(0, 0.5)
    axes.set_xlabel("frequency (cycles per token; 0.5 = Nyquist)")
    axes.set_ylabel("mean periodogram power (per token)")
    space = "log r" if params.get("space", "log") == "log" else "r"
    axes.set_title(
        f"Spectrum of the within-sequence fluctuation of {space} (KPO App. C.2)\n"
        "more power at low frequency = smoother, locally coherent ratios"
    )
    if drawn == 0:
        axes.text(0.5, 0.5, "no sequence with fluctuating ratios", transform=axes.transAxes,
                  ha="center")  # fmt: skip
    axes.legend(loc="upper right", fontsize=8)
    axes.grid(alpha=0.3, which="both")
    _footer(figure, source)
    save_figure(figure, out)


def plot_windows(document: Mapping[str, Any], out: Path, source: str = "") -> None:
    """Window-wise off-policy frequency mean ± std over window index (KPO Fig. 1)."""
    ratios, params = _ratios(document), _params(document)
    window = params.get("window", 50)
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(8.5, 4.8), layout="constrained")
    for variant, stats in ratios.items():
        curve = (stats or {}).get("window_frequency")
        if not curve or not curve["mean"]:
            continue
        index = list(range(len(curve["mean"])))
        mean = [math.nan if m is None else m for m in curve["mean"]]
        std = [math.sqrt(v) if v is not None else math.nan for v in curve["var"]]
        # a frequency lives in [0, 1]; clip the band so it does not suggest otherwise
        low = [max(m - s, 0.0) for m, s in zip(mean, std, strict=True)]
        high = [min(m + s, 1.0) for m, s in zip(mean, std, strict=True)]
        color = COLORS.get(variant)
        axes.plot(index, mean, color=color, marker="o", ms=3, label=LABELS.get(variant, variant))
        axes.fill_between(index, low, high, color=color, alpha=0.15)
    axes.set_xlabel(f"window index ({window} valid tokens per window)")
    axes.set_ylabel("off-policy frequency (share of up + down tokens)")
    axes.set_ylim(-0.02, 1.02)
    axes.set_title("Window-wise off-policy frequency: mean ± std over sequences")
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    _footer(figure, source)
    save_figure(figure, out)


def plot_runlengths(document: Mapping[str, Any], out: Path, source: str = "") -> None:
    """Pooled run-length distributions: one panel per state, one line per variant."""
    ratios = _ratios(document)
    plt = pyplot()
    figure, panels = plt.subplots(1, 3, figsize=(13, 4.3), layout="constrained", sharey=True)
    titles = {"up": "up (r > 1 + eps_high)", "down": "down (r < 1 - eps_low)", "on": "on"}
    for axes, state in zip(panels, ("up", "down", "on"), strict=True):
        for variant, stats in ratios.items():
            histogram = ((stats or {}).get("run_length_histogram") or {}).get(state) or {}
            if not histogram:
                continue
            lengths = sorted(int(k) for k in histogram)
            counts = [histogram[str(n)] for n in lengths]
            total = sum(counts)
            mean = (stats.get("run_length_mean") or {}).get(state)
            label = LABELS.get(variant, variant) + (f" (mean {mean:.3g})" if mean else "")
            axes.plot(lengths, [c / total for c in counts], marker="o", ms=3, lw=1.2,
                      color=COLORS.get(variant), label=label)  # fmt: skip
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("run length (consecutive tokens in the state)")
        axes.set_title(titles[state])
        axes.grid(alpha=0.3, which="both")
        axes.legend(fontsize=7)
    panels[0].set_ylabel("share of runs")
    figure.suptitle("Run lengths of token states (pooled over sequences)")
    _footer(figure, source)
    save_figure(figure, out)


def plot_trace(trace: Any, out: Path) -> None:
    """One sequence: raw, sequence-level and Kalman-filtered log-ratio over token position."""
    plt = pyplot()
    figure, axes = plt.subplots(figsize=(10, 4.6), layout="constrained")
    positions = list(range(len(trace.token)))
    axes.plot(positions, trace.token, color=COLORS["token"], lw=0.8, alpha=0.8,
              label=LABELS["token"])  # fmt: skip
    axes.plot(positions, trace.kalman, color=COLORS["kalman"], lw=2,
              label=f"{LABELS['kalman']}, Q/V = {trace.qv:g}")  # fmt: skip
    axes.plot(positions, trace.sequence, color=COLORS["sequence"], lw=2, ls="--",
              label=LABELS["sequence"])  # fmt: skip
    low, high = trace.on_band
    axes.axhspan(math.log1p(-low) if low < 1 else -1.0, math.log1p(high), color="0.85",
                 zorder=0, label="on-policy band")  # fmt: skip
    axes.set_xlabel("token position in the response")
    axes.set_ylabel("log importance ratio  log(pi_theta / pi_old)")
    axes.set_title(
        f"Importance ratios of one sequence (row {trace.row} of {Path(trace.source).name})"
    )
    axes.legend(fontsize=8, loc="upper right")
    axes.grid(alpha=0.3)
    _footer(figure, trace.source)
    save_figure(figure, out)
