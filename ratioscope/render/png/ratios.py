"""Figures of the ratios section (KPO Figs. 1 and 4): spectrum, traces, windows, runs.

All but the trace are drawn from a :class:`~ratioscope.report.model.Report`, fresh or read
from a report JSON, so a stored report plots without recomputation. Legends sit outside
the axes, so they never hide data.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ratioscope.data.params import AnalysisParams
from ratioscope.render.png.output import pyplot, save_figure
from ratioscope.render.terminal.tables import known

if TYPE_CHECKING:
    from ratioscope.figures.ratios import RatioTrace
    from ratioscope.report.model import Report
    from ratioscope.sections.ratios import VariantStats

COLORS = {"token": "tab:blue", "sequence": "tab:purple", "kalman": "tab:red"}
LABELS = {
    "token": "token ratio (raw)",
    "sequence": "sequence ratio (GSPO/GMPO)",
    "kalman": "Kalman-filtered (KPO)",
}
STATE_COLORS = {"up": "tab:orange", "down": "tab:green", "on": "tab:gray"}
MARKERS = {"token": "o", "sequence": "s", "kalman": "D"}
HATCHES = {"token": "///", "sequence": "\\\\\\", "kalman": "..."}

#: windows reached by fewer sequences than this share are drawn faded, without a band
SPARSE_WINDOW_SHARE = 0.1


def _ratios(report: Report, source: str = "") -> Mapping[str, VariantStats | None]:
    """The report's ratios section; none is an error naming ``source`` (the report's file,
    when the figure is drawn from one)."""
    from ratioscope.errors import ReportError

    if not report.ratios:
        raise ReportError(source or None, "the report has no 'ratios' section to plot")
    return report.ratios


def _params(report: Report) -> Mapping[str, Any]:
    analysis: Mapping[str, Any] = report.params.get("analysis", {})
    return analysis


def _figure(plt: Any, figsize: tuple[float, float], **subplots: Any) -> tuple[Any, Any]:
    return plt.subplots(figsize=figsize, layout="constrained", **subplots)


def _footer(figure: Any, source: str, note: str | None = None) -> None:
    """The source under everything: as the figure's x label, the layout keeps room for it;
    a ``note`` (sequences left out) leads it, off the data."""
    text = f"ratioscope · {source}" if not note else f"{note}  ·  ratioscope · {source}"
    figure.supxlabel(text, x=0.995, ha="right", fontsize=7, color="0.45")


def _legend_under(
    axes: Any, handles: Sequence[Any], labels: Sequence[str], columns: int, **options: Any
) -> Any:
    """A legend under the x label of ``axes``, off the data.

    Anchored a fixed distance below the axes (not a fraction of its height), so it
    clears the tick labels and the x label of short and tall axes alike; constrained
    layout counts it as part of the axes and makes room, the footer goes under it.
    """
    from matplotlib.transforms import ScaledTranslation

    below = ScaledTranslation(0, -0.5, axes.figure.dpi_scale_trans)
    return axes.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                       bbox_transform=axes.transAxes + below, ncols=columns, fontsize=8,
                       frameon=False, **options)  # fmt: skip


def _note_short_sequences(ratios: Mapping[str, Any]) -> str | None:
    """How many sequences were too short to be drawn (for the footer: in a corner of the
    axes it lay over the Kalman row's line at 0)."""
    from ratioscope.render.terminal.report import short_sequences_note

    return short_sequences_note(list(ratios.items())) or None


def plot_spectrum(report: Report, out: Path, source: str = "") -> None:
    """Mean periodogram per variant on the normalised-frequency grid, LFR band marked."""
    ratios, params = _ratios(report, source), _params(report)
    plt = pyplot()
    figure, axes = _figure(plt, (8.5, 5.2))
    drawn = 0
    dropped: list[str] = []
    for variant, stats in ratios.items():
        spectrum = None if stats is None else stats.spectrum
        if stats is None or spectrum is None or not spectrum.power:
            dropped.append(_why_no_spectrum(variant, stats is None))
            continue
        power = [p if p and p > 0 else math.nan for p in spectrum.power]
        lfr = known(stats.lfr)
        name = LABELS.get(variant, variant)
        label = f"{name}: LFR {lfr:.3f}" if lfr is not None else name
        axes.plot(spectrum.frequency, power, color=COLORS.get(variant), label=label, lw=1.8)
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
    axes.grid(alpha=0.3, which="both")
    handles, labels = axes.get_legend_handles_labels()
    for reason in dropped:  # a legend line without a mark: what is not drawn, and why
        handles.append(plt.Line2D([], [], color="none"))
        labels.append(reason)
    _legend_under(axes, handles, labels, columns=1 if dropped else 2)
    _footer(figure, source, _note_short_sequences(ratios))
    save_figure(figure, out)


def _why_no_spectrum(variant: str, not_computed: bool) -> str:
    """The legend line of a variant without a spectrum."""
    name = LABELS.get(variant, variant)
    if not_computed:
        return f"not drawn: {name} (not in the report)"
    if variant == "sequence":
        # GSPO's ratio is one number per sequence, repeated at each of its tokens
        return f"not drawn: {name}, one value per sequence: no fluctuation within a sequence"
    return f"not drawn: {name}, no sequence long enough with fluctuating ratios"


def _sequence_count(report: Report, counts: Sequence[int]) -> int:
    """Sequences analysed (from ``inputs``), else the most that reached any window."""
    total = sum(info.sequences for info in report.inputs)
    return total or max(counts, default=0)


def window_reach(counts: Sequence[int], sequences: int) -> list[bool]:
    """Per window index: whether at least ``SPARSE_WINDOW_SHARE`` of the sequences reach it.

    >>> window_reach([500, 120, 49, 3], 500)
    [True, True, False, False]
    """
    return [sequences > 0 and c >= SPARSE_WINDOW_SHARE * sequences for c in counts]


def plot_windows(report: Report, out: Path, source: str = "") -> None:
    """Window-wise off-policy frequency mean ± std over window index (KPO Fig. 1).

    A thin lower panel shows how many sequences reach each window; windows reached by
    fewer than 10% of the sequences (the labelled dotted line) are faded and have no
    band, since their mean rests on few sequences. The sequence row is drawn without a
    band: each of its windows is all off or all on, so its std is near 0.5 everywhere.
    """
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    ratios, params = _ratios(report, source), _params(report)
    window = params.get("window", 50)
    plt = pyplot()
    figure, (axes, count_axes) = _figure(
        plt, (8.5, 6.2), nrows=2, sharex=True, gridspec_kw={"height_ratios": [4, 1.2]}
    )
    curves = {
        variant: stats.window_frequency
        for variant, stats in ratios.items()
        if stats is not None and stats.window_frequency and stats.window_frequency.get("mean")
    }
    first: Mapping[str, Any] = next(iter(curves.values()), {"mean": [], "count": []})
    counts = [int(c or 0) for c in first.get("count") or [0] * len(first["mean"])]
    sequences = _sequence_count(report, counts)
    reached = window_reach(counts, sequences)
    handles: list[Any] = []
    labels: list[str] = []
    for variant, curve in curves.items():
        banded = variant != "sequence"
        handles.append(_window_curve(axes, variant, curve, reached, band=banded))
        labels.append(
            f"{LABELS.get(variant, variant)}: mean ± std"
            if banded
            else f"{LABELS.get(variant, variant)}: mean only (no band: a sequence's windows "
            "are all off or all on, so its std is that of a coin flip)"
        )
    if not all(reached):
        handles.append(Line2D([], [], color="0.5", alpha=0.4, ls="--", marker="o", ms=3))
        labels.append(
            f"faded: window reached by < {SPARSE_WINDOW_SHARE:.0%} of the sequences (no band)"
        )
    axes.set_ylabel("off-policy frequency\n(share of up + down tokens)")
    axes.set_ylim(-0.02, 1.02)
    axes.set_title(
        "Window-wise off-policy frequency: mean (line) ± std over sequences (band)", fontsize=11
    )
    axes.grid(alpha=0.3)
    if not curves:
        axes.text(0.5, 0.5, "no sequence has a full window", transform=axes.transAxes,
                  ha="center")  # fmt: skip
    _count_panel(count_axes, counts, reached, sequences)
    count_axes.set_xlabel(f"window index ({window} valid tokens per window)")
    count_axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    _legend_under(count_axes, handles, labels, columns=1,
                  handler_map={tuple: HandlerTuple(ndivide=None, pad=0.0)})  # fmt: skip
    _footer(figure, source, _note_short_sequences(ratios))
    save_figure(figure, out)


def _count_panel(axes: Any, counts: list[int], reached: list[bool], sequences: int) -> None:
    """Bars: sequences that reach each window, with the 10% line that separates faded ones."""
    colors = ["0.55" if ok else "0.85" for ok in reached]
    bars = axes.bar(range(len(counts)), counts, width=0.7, color=colors)
    if len(counts) <= 30:  # past that the numbers would overlap; the bars still show it
        axes.bar_label(bars, fontsize=7, padding=1)
    level = SPARSE_WINDOW_SHARE * sequences
    axes.axhline(level, color="0.3", ls=":", lw=0.8)
    axes.text(0.005, level, f"{SPARSE_WINDOW_SHARE:.0%} of the sequences ({level:.0f}): "
              "windows under this line are faded", transform=axes.get_yaxis_transform(),
              va="bottom", ha="left", fontsize=7, color="0.2",
              bbox={"facecolor": "white", "alpha": 0.85, "lw": 0, "pad": 1})  # fmt: skip
    axes.set_ylim(0, 1.3 * max(counts, default=1) or 1)
    axes.set_ylabel(f"sequences\n(of {sequences})", fontsize=9)
    axes.grid(alpha=0.3, axis="y")


def _window_curve(
    axes: Any, variant: str, curve: Mapping[str, Any], reached: list[bool], band: bool = True
) -> Any:
    """Mean line with markers and a hatched ±std band edged in the variant's colour.

    Returns the legend handle: (band, line) drawn as one entry, or the line alone when
    ``band`` is false (the sequence row, whose 0/1 windows give a band that swamps all).
    """
    import numpy as np
    from matplotlib.colors import to_rgba

    color = COLORS.get(variant, "0.3")
    marker = MARKERS.get(variant, "o")
    mean = np.array([math.nan if m is None else m for m in curve["mean"]], dtype=float)
    std = np.sqrt(np.array([math.nan if v is None else v for v in curve["var"]], dtype=float))
    index = np.arange(mean.size)
    solid = np.array(reached[: mean.size], dtype=bool)
    # a frequency lives in [0, 1]; clip the band so it does not suggest otherwise
    low, high = np.clip(mean - std, 0.0, 1.0), np.clip(mean + std, 0.0, 1.0)
    line = axes.plot(np.where(solid, mean, np.nan), color=color, marker=marker, ms=4, lw=1.8,
                     label=LABELS.get(variant, variant))[0]  # fmt: skip
    # the faded part starts at the last solid window so that the curve stays one line
    faded = ~solid
    faded[:-1] |= solid[:-1] & ~solid[1:]
    if (~solid).any():
        axes.plot(index[faded], mean[faded], color=color, alpha=0.4, lw=1.2, ls="--",
                  marker=marker, ms=3)  # fmt: skip
    if not band:
        return line
    shade = axes.fill_between(index, np.where(solid, low, np.nan), np.where(solid, high, np.nan),
                             facecolor=to_rgba(color, 0.1), edgecolor=to_rgba(color, 0.55),
                             hatch=HATCHES.get(variant), lw=0.8, ls=":")  # fmt: skip
    return (shade, line)


def _band_text(band: tuple[float, float], exact: str) -> str:
    """The on-policy band of one row as a reader sees it: ``r = 1`` or ``r in [...]``."""
    low, high = float(band[0]), float(band[1])
    if max(low, high) <= 2.0**-20:  # float32 rounding only: on means exactly 1
        return exact
    return f"r in [1 - {low:.3g}, 1 + {high:.3g}]"


def runlength_caption(params: AnalysisParams) -> str:
    """What up, down and on mean for each drawn row, and why the sequence row is absent."""
    token = _band_text(params.token_on_band, "r = 1 up to float32 rounding")
    kalman = _band_text(params.on_band, "r = 1")
    return (
        f"on: raw rows {token} (token_on_band), Kalman rows {kalman} (on_band); "
        "up: r above that band, down: r below it.\n"
        "The sequence ratio (GSPO/GMPO) is left out: it is one constant per sequence, "
        "so its run lengths are just sequence lengths."
    )


def plot_runlengths(report: Report, out: Path, source: str = "") -> None:
    """Pooled run-length distributions: one panel per state, one marker series per variant.

    Every run length is a marker, never joined by a line, for every row alike. The
    sequence-level row is not drawn: a sequence ratio is constant along its sequence,
    so its runs are the sequences themselves (the caption says so).
    """
    from matplotlib.lines import Line2D

    ratios = {k: v for k, v in _ratios(report, source).items() if k != "sequence"}
    plt = pyplot()
    figure, panels = _figure(plt, (13, 5.4), ncols=3, sharey=True)
    titles = {
        "up": "up: r above the on band",
        "down": "down: r below the on band",
        "on": "on: r inside the on band",
    }
    for axes, state in zip(panels, ("up", "down", "on"), strict=True):
        entries: list[Line2D] = []
        texts: list[str] = []  # the entries' labels: Line2D.get_label() is typed object
        empty: list[bool] = []
        for variant, stats in ratios.items():
            if stats is None:
                continue
            histogram = (stats.run_length_histogram or {}).get(state) or {}
            name = LABELS.get(variant, variant)
            color = COLORS.get(variant)
            marker = MARKERS.get(variant, "o")
            empty.append(not histogram)
            if not histogram:
                texts.append(f"{name}: no {state} runs")
                entries.append(Line2D([], [], ls="none", label=texts[-1]))
                continue
            runs = {int(k): int(v) for k, v in histogram.items()}
            total = sum(runs.values())
            share = {n: c / total for n, c in runs.items()}
            axes.scatter(list(share), list(share.values()), s=16, marker=marker, color=color,
                         alpha=0.85, zorder=3)  # fmt: skip
            mean = known((stats.run_length_mean or {}).get(state))
            texts.append(f"{name}: {total} runs" + (f", mean {mean:.3g}" if mean else ""))
            entries.append(
                Line2D([], [], color=color, marker=marker, ms=4, ls="none", label=texts[-1])
            )
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("run length (consecutive tokens in the state)")
        axes.set_title(titles[state])
        axes.grid(alpha=0.3, which="both")
        legend = _legend_under(axes, entries, texts, columns=1,
                               handlelength=1.5)  # fmt: skip
        for text, none in zip(legend.get_texts(), empty, strict=True):
            if none:
                text.set_color("0.45")
    panels[0].set_ylabel("share of runs")
    figure.suptitle(
        "Run lengths of token states (pooled over sequences)\n"
        + runlength_caption(AnalysisParams.from_dict(_params(report))),
        fontsize=10,
    )
    _footer(figure, source)
    save_figure(figure, out)


def _zoom_limit(values: Sequence[float], band: tuple[float, float]) -> float:
    """Half-height of the zoomed panel: the smooth signals and the on-policy band fit."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    top = max([*finite, band[0], band[1]], default=1e-3)
    return 1.35 * top if top > 0 else 1e-3


#: the y-axis of a trace by what its log-ratio compares (ratioscope.data.batch.RATIO_PAIRS)
_LOG_RATIO_LABELS = {
    "current/old": "log(pi_theta / pi_old)",
    "current/engine": "log(pi_theta / pi_engine)",
    "old/engine": "log(pi_old / pi_engine): train/inference",
}


def _raw_rule(trace: RatioTrace) -> str:
    """How the raw token and sequence rows' states were read, for the legend."""
    from ratioscope.functional.token_stats import EXACT_ON_BAND

    bands = {trace.token_on_band, trace.seq_on_band} - {None}
    if bands <= {EXACT_ON_BAND}:
        return "raw and sequence ratios: on iff r = 1 (float32 rounding, 2^-24)"
    shown = ", ".join(
        f"{name} ({-math.log1p(-b[0]):.1e}, +{math.log1p(b[1]):.1e})"
        for name, b in (("raw", trace.token_on_band), ("sequence", trace.seq_on_band))
        if b is not None
    )
    return f"bands of {shown}"


def plot_trace(trace: RatioTrace, out: Path) -> None:
    """One sequence: raw, sequence-level and Kalman-filtered log-ratio over token position.

    The lower panel zooms on the Kalman and sequence-level signals: raw spikes are
    orders of magnitude larger than the on-policy band, which would otherwise be a
    line of zero height. In the upper panel the raw line is drawn last, thin and with a
    dot per token, so the wide smooth lines never hide it where they coincide.
    """
    plt = pyplot()
    figure, (full, zoom) = _figure(
        plt, (10, 6.6), nrows=2, sharex=True, gridspec_kw={"height_ratios": [1, 1]}
    )
    positions = list(range(len(trace.token)))
    low, high = trace.on_band
    band = (-math.log1p(-low) if low < 1 else 1.0, math.log1p(high))
    label = (
        f"on-policy band of the filtered ratio ({-band[0]:.1e}, +{band[1]:.1e}); {_raw_rule(trace)}"
    )
    for axes in (full, zoom):
        axes.axhspan(-band[0], band[1], color="0.85", zorder=0, label=label)
        axes.axhline(0.0, color="0.6", lw=0.6, zorder=1)
        axes.grid(alpha=0.3)
    full.plot(positions, trace.token, color=COLORS["token"], lw=0.8, marker=".", ms=2.5,
              zorder=4, label=LABELS["token"])  # fmt: skip
    for axes in (full, zoom):
        axes.plot(positions, trace.kalman, color=COLORS["kalman"], lw=2, alpha=0.75,
                  zorder=3, label=f"{LABELS['kalman']}, Q/V = {trace.qv:g}")  # fmt: skip
        axes.plot(positions, trace.sequence, color=COLORS["sequence"], lw=2, ls="--",
                  alpha=0.75, zorder=2, label=LABELS["sequence"])  # fmt: skip
    limit = _zoom_limit([*trace.kalman, *trace.sequence], band)
    zoom.set_ylim(-limit, limit)
    zoom.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    outside = sum(1 for v in trace.token if abs(v) > limit)
    zoom.set_title(
        f"zoom on the smooth signals and the on-policy band (raw token ratios not drawn: "
        f"{outside} of {len(trace.token)} lie outside this range)",
        fontsize=9,
    )
    quantity = _LOG_RATIO_LABELS.get(getattr(trace, "ratio_pair", "current/old"), "log ratio")
    full.set_ylabel(quantity)
    zoom.set_ylabel(f"{quantity}, zoomed")
    zoom.set_xlabel("token position in the response")
    title = (
        f"Importance ratios of sequence {trace.index} (row {trace.row} of "
        f"{Path(trace.source).name})"
    )
    if trace.chosen_because:
        # the default sequence is chosen, not row 0: say which rule chose it
        why = f"chosen for {trace.chosen_because} (--sequence N draws another)"
        title += "\n" + "\n".join(textwrap.wrap(why, 110))
    full.set_title(title, fontsize=10)
    handles, labels = full.get_legend_handles_labels()
    order = [1, 2, 3, 0]  # signals first, the band last
    _legend_under(zoom, [handles[i] for i in order], [labels[i] for i in order], columns=2)
    _footer(figure, trace.source)
    save_figure(figure, out)
