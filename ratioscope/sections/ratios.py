"""The ``ratios`` section: the three ratio variants side by side (docs/metrics-ratios.md).

For each variant (token, sequence, kalman) the log-space signal's distribution over
valid tokens, the PPO clip fraction, the clipped/unclipped surrogate loss, and the KPO
Table 2 token-state statistics: proportions up/down/on, run lengths, switch frequency,
window-wise off-policy frequency, low-frequency ratio with the mean periodogram, and
global and window-local variance (:mod:`ratioscope.functional.token_stats`).

Per-sequence statistics, the state proportions among them, are averaged over
sequences (Table 2: "averaged over all samples") from exact sums and counts, so chunks,
files and shard reports merge exactly. Each row has its own on-policy band
(:meth:`~ratioscope.data.params.AnalysisParams.state_band`): r = 1 up to float32 rounding for
the raw token and sequence ratios, the paper's band for the Kalman-filtered one.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.data.params import AnalysisParams
from ratioscope.functional.kalman import ClosedFormDeviation
from ratioscope.functional.ratio_rows import RatioRows, ratio_rows
from ratioscope.functional.ratio_rows import usable as ratio_rows_usable
from ratioscope.functional.surrogate import (
    Aggregates,
    AggregationSums,
    constant_ppo_row_sums,
    ppo_aggregation_of,
    ppo_aggregation_terms,
    ppo_row_sums,
)
from ratioscope.functional.token_stats import (
    SignalStatistics,
    Space,
    WindowMoments,
    constant_signal_columns,
    constant_signal_statistics,
    frequency_grid,
    host_state_shares,
    host_window_moments,
    signal_statistics,
)
from ratioscope.sections.base import Accumulator, listed
from ratioscope.sections.context import VARIANTS, Context, HostReads
from ratioscope.sections.distribution import Distribution, distribution_of
from ratioscope.sections.state import Codec, Record, mergeable
from ratioscope.sections.summaries import Counter, Histogram, Moments, Vector

#: kalman_impl='reference' is flagged where it is this far from the exact filter
REFERENCE_TOLERANCE = 1e-4  # column j of the [.., 3] state tensors is state j - 1


@dataclass(frozen=True)
class Surrogate:
    """Surrogate loss -J: clipped min(rA, clip(r)A) and unclipped rA (KPO Eq. 2)."""

    clipped: Aggregates
    unclipped: Aggregates


@dataclass(frozen=True)
class Spectrum:
    """Mean periodogram of a variant's signal (KPO's LFR is read from it)."""

    #: bin centres in cycles per token, (0, 0.5)
    frequency: list[float]
    #: mean power per bin over the sequences with energy
    power: list[float]
    #: sequences averaged
    sequences: int


@dataclass(frozen=True)
class VariantStats:
    """One row of the Table 2 layout; KPO fields are None until computed."""

    distribution: Distribution
    clip_band: tuple[float, float]
    clip_fraction: float | None
    surrogate: Surrogate | None
    #: (eps_lo, eps_hi): a token is on iff r is in [1 - eps_lo, 1 + eps_hi]; None in
    #: reports written before the band was recorded per row (params.analysis.on_band)
    on_band: tuple[float, float] | None = None
    #: state shares averaged over sequences (KPO Table 2); None where the sums behind
    #: it are missing (reports written before it: see ``proportion_pooled``)
    proportion: dict[str, float] | None = None
    #: state shares pooled over all valid tokens (what ``proportion`` was before)
    proportion_pooled: dict[str, float] | None = None
    run_length_mean: dict[str, float] | None = None
    run_length_histogram: dict[str, dict[str, int]] | None = None
    switch_frequency: float | None = None
    lfr: float | None = None
    lfr_excluded: int | None = None
    variance: dict[str, float] | None = None
    window_frequency: dict[str, list[float]] | None = None
    spectrum: Spectrum | None = None
    #: sequences shorter than ``spectral_min_length`` tokens, left out of ``lfr``,
    #: ``spectrum`` and ``window_frequency`` (None in reports written before)
    short_excluded: int | None = None
    #: the minimum length of those statistics: the window, and at least 2 / lfr_cutoff
    #: tokens so that the LFR band holds a frequency above 0
    spectral_min_length: int | None = None
    #: the kalman row with kalman_impl='reference': where the closed form leaves
    #: the exact filter on these data (None on the other rows and with the exact filter)
    closed_form_deviation: ClosedFormDeviation | None = None


def _window_lists(windows: WindowMoments) -> dict[str, list[float]]:
    return {
        "window_total": windows.total.tolist(),
        "window_total_sq": windows.total_sq.tolist(),
        "window_count": windows.count.double().tolist(),
    }


def _windows(block: dict[str, Any]) -> WindowMoments:
    total, total_sq, count = (
        torch.tensor(block.get(key, []), dtype=torch.float64)
        for key in ("window_total", "window_total_sq", "window_count")
    )
    return WindowMoments(total, total_sq, count.long())


#: the layout of reports written so far: three lists of floats beside the other sums
_WINDOW_LISTS = Codec(dump=_window_lists, load=_windows, flat=True)


def _share_sums(mine: list[float] | None, theirs: list[float] | None) -> list[float] | None:
    if mine is None and theirs is None:
        return None
    if mine is None or theirs is None:
        raise ValueError(
            "one side was written before per-sequence state proportions (no 'share_sum'); "
            "re-analyse its dumps to merge it with newer reports"
        )
    return [a + b for a, b in zip(mine, theirs, strict=True)]


#: None (written as null) in reports older than the field and their merges
_SHARE_SUMS = Codec(load=lambda v: None if v is None else [float(x) for x in v])


class _StateSums(Record):
    """Sums behind the KPO token-state statistics of one variant."""

    state_tokens = mergeable(lambda: [0, 0, 0], "sum")
    #: sum over sequences of each sequence's share per state; None for older reports
    share_sum: list[float] | None = mergeable(
        lambda: [0.0, 0.0, 0.0], _share_sums, codec=_SHARE_SUMS, legacy=lambda _: None
    )
    run_mean_sum = mergeable(lambda: [0.0, 0.0, 0.0], "sum")
    run_mean_count = mergeable(lambda: [0, 0, 0], "sum")
    run_histogram = mergeable(lambda: [Counter() for _ in range(3)], "merge")
    sequences = mergeable(int, "sum")
    switch_sum = mergeable(float, "sum", minimum=0.0)
    lfr_sum = mergeable(float, "sum", minimum=0.0)
    lfr_count = mergeable(int, "sum")
    lfr_excluded = mergeable(int, "sum")
    var_global_sum = mergeable(float, "sum", minimum=0.0)
    var_local_sum = mergeable(float, "sum", minimum=0.0)
    windows = mergeable(WindowMoments.empty, "merge", codec=_WINDOW_LISTS)
    spectrum_sum = mergeable(Vector, "merge")
    spectrum_count = mergeable(int, "sum")
    #: sequences shorter than the spectral minimum length, left out of the LFR, the
    #: spectrum and the window statistics
    short_excluded = mergeable(int, "sum", optional=True)

    def add(
        self,
        stats: SignalStatistics,
        nonempty: Tensor,
        long: Tensor | None = None,
        host: HostReads | None = None,
    ) -> None:
        """Fold the statistics of a chunk's rows in (``nonempty`` ones only; the LFR,
        spectrum and windows of the ``long`` ones only, the others counted), now or when
        ``host`` runs its folds (a device's: with the chunk's other reads).

        In numpy on the host: a dozen reductions over [B]-sized columns, where torch's
        per-call cost (several microseconds each) was most of a small step's share."""
        (host or HostReads()).later(
            self._fold,
            nonempty, nonempty if long is None else long, stats.state_counts,
            stats.runs.mean_per_sequence, stats.runs.histogram, stats.switch_frequency,
            stats.low_frequency_ratio, stats.global_variance, stats.local_variance,
            stats.window_frequency, stats.periodogram,
        )  # fmt: skip

    def _fold(self, *read: Tensor) -> None:
        """:meth:`add`'s sums, from its tensors read back to the host."""
        host = [tensor.numpy() for tensor in read]
        rows, long_rows, counts, means, histogram, switch, lfr = host[:7]
        global_variance, local_variance, window_frequency, periodogram = host[7:]
        long_rows = long_rows & rows
        self.short_excluded += int((rows & ~long_rows).sum())
        counts = counts[rows]
        shares = host_state_shares(counts).sum(axis=0)
        tokens = counts.sum(axis=0)
        means = means[rows]
        for j in range(3):
            self.state_tokens[j] += int(tokens[j])
            if self.share_sum is not None:
                self.share_sum[j] += float(shares[j])
            per_sequence = means[:, j]
            present = ~np.isnan(per_sequence)
            self.run_mean_sum[j] += float(per_sequence[present].sum())
            self.run_mean_count[j] += int(present.sum())
            lengths = np.flatnonzero(histogram[j])
            self.run_histogram[j].add_tensor(
                torch.from_numpy(lengths), torch.from_numpy(histogram[j, lengths])
            )
        self.sequences += int(rows.sum())
        self.switch_sum += float(switch[rows].sum())
        lfr = lfr[long_rows]
        finite = ~np.isnan(lfr)
        self.lfr_sum += float(lfr[finite].sum())
        self.lfr_count += int(finite.sum())
        self.lfr_excluded += int((~finite).sum())
        self.var_global_sum += float(global_variance[rows].sum())
        self.var_local_sum += float(local_variance[rows].sum())
        self.windows = self.windows.merge(host_window_moments(window_frequency[long_rows]))
        spectra = periodogram[long_rows][finite]
        self.spectrum_sum.add(torch.from_numpy(spectra.sum(axis=0)))
        self.spectrum_count += int(spectra.shape[0])

    def fields(self, frequencies: list[float]) -> dict[str, Any]:
        """The KPO fields of :class:`VariantStats`."""
        total = sum(self.state_tokens)
        if self.sequences == 0 or total == 0:
            return {}
        windows = self.windows.trimmed()
        spectrum = None
        if self.spectrum_count:
            power = (self.spectrum_sum.values / self.spectrum_count).tolist()
            spectrum = Spectrum(frequency=frequencies, power=power, sequences=self.spectrum_count)
        shares = self.share_sum
        return {
            "proportion": None
            if shares is None
            else {name: shares[j] / self.sequences for j, name in _REPORT_ORDER},
            "proportion_pooled": {name: self.state_tokens[j] / total for j, name in _REPORT_ORDER},
            "run_length_mean": {
                name: self.run_mean_sum[j] / self.run_mean_count[j]
                if self.run_mean_count[j]
                else None
                for j, name in _REPORT_ORDER
            },
            "run_length_histogram": {
                name: self.run_histogram[j].state() for j, name in _REPORT_ORDER
            },
            "switch_frequency": self.switch_sum / self.sequences,
            "lfr": self.lfr_sum / self.lfr_count if self.lfr_count else None,
            "lfr_excluded": self.lfr_excluded,
            "short_excluded": self.short_excluded,
            "variance": {
                "global": self.var_global_sum / self.sequences,
                "window_local": self.var_local_sum / self.sequences,
            },
            "window_frequency": {
                "mean": windows.mean.tolist(),
                "var": windows.var.tolist(),
                "count": windows.count.tolist(),
            },
            "spectrum": spectrum,
        }


#: report order up, down, on (docs/formats.md) with the column index of each state
_REPORT_ORDER = ((2, "up"), (0, "down"), (1, "on"))


class _VariantState(Record):
    histogram = mergeable(Histogram, "merge")
    clipped_tokens = mergeable(int, "sum")
    advantage_tokens = mergeable(int, "sum")
    clipped_loss = mergeable(AggregationSums, "merge")
    unclipped_loss = mergeable(AggregationSums, "merge")
    states = mergeable(_StateSums, "merge")

    def add_ppo(self, terms: Tensor) -> None:
        """Fold a chunk's PPO sums in (:func:`ppo_aggregation_terms`, read back)."""
        n_clipped, tokens, clipped_loss, plain_loss = ppo_aggregation_of(terms.tolist())
        self.clipped_tokens += n_clipped
        self.advantage_tokens += tokens
        self.clipped_loss = self.clipped_loss.merge(clipped_loss)
        self.unclipped_loss = self.unclipped_loss.merge(plain_loss)


class _Deviation(Record):
    """Where the closed form of kalman_impl='reference' leaves the exact filter, over all
    chunks (:class:`~ratioscope.functional.kalman.ClosedFormDeviation`)."""

    first_index: int | None = mergeable(lambda: None, "min_index", optional=True)
    #: an infinite error was written as null, read back as 0
    max_abs_error = mergeable(
        float, "max", optional=True, codec=Codec(load=lambda v: float(v or 0.0))
    )
    clamp_index: int | None = mergeable(lambda: None, "min_index", optional=True)


class RatiosAccumulator(Accumulator):
    """Distribution, clip fraction and surrogate per ratio variant."""

    name = "ratios"

    variants: dict[str, _VariantState] = mergeable(dict, "merge")
    no_advantages: list[str] = mergeable(list, "extend", optional=True)
    not_policy_ratio: list[str] = mergeable(list, "extend", optional=True)  # z: old vs engine
    #: kalman_impl='reference': where the closed form leaves the exact filter
    deviation = mergeable(_Deviation, "merge", key="reference_deviation", optional=True)

    def __init__(self, params: AnalysisParams, variants: tuple[str, ...] = VARIANTS) -> None:
        super().__init__(params)
        self.variants = {v: _VariantState() for v in variants}

    def band(self, variant: str) -> tuple[float, float]:
        return self.params.clip if variant == "token" else self.params.seq_clip

    def begin_file(self, batch: TokenBatch) -> bool:
        if not super().begin_file(batch):
            return False
        if batch.ratio_pair == "old/engine":
            self.not_policy_ratio.append(batch.source)
        elif batch.advantages is None:
            self.no_advantages.append(batch.source)
        return True

    def update(self, ctx: Context) -> dict[str, Tensor]:
        columns: dict[str, Tensor] = {}
        advantages = ctx.batch.advantages
        if ctx.batch.ratio_pair == "old/engine":
            # the train/inference ratio is no PPO ratio: no update clips it
            advantages = None
        for variant, state in self.variants.items():
            constant = variant == "sequence"
            # The sequence variant is constant within each row: its histogram and PPO
            # sums follow from one value per row, without building its [B, T] signal.
            signal = None if constant else ctx.signal(variant, self.params)
            rows = None
            if signal is None:
                # summed on the host from [B] values read back: a few dozen launches on
                # [B] rows fewer on a GPU
                add = functools.partial(_add_constant_rows, state.histogram)
                ctx.host.later(add, ctx.sequence_mean_z, ctx.lengths)
            elif ratio_rows_usable(signal, advantages):
                # histogram, moments and PPO sums in one compiled pass over the rows
                rows = ratio_rows(signal, advantages, ctx.mask, self.band(variant))
                kernel = [] if rows.summary is None else [rows.summary]
                ctx.host.later(functools.partial(_add_rows, state.histogram, rows), *kernel)
            else:
                state.histogram.add(signal[ctx.mask])
            columns.update(self._token_states(ctx, variant, signal, state))
            if advantages is None:
                continue
            if signal is None:
                clipped, clipped_sums, plain_sums = constant_ppo_row_sums(
                    ctx.sequence_mean_z, ctx.advantage_sums, self.band(variant)
                )
            elif rows is not None and rows.ppo is not None:
                clipped, clipped_sums, plain_sums = rows.ppo
            else:
                clipped, clipped_sums, plain_sums = ppo_row_sums(
                    signal, advantages, ctx.mask, self.band(variant)
                )
            terms = ppo_aggregation_terms(clipped, clipped_sums, plain_sums, ctx.lengths)
            ctx.host.later(state.add_ppo, terms)
            columns[f"{variant}_clip_fraction"] = clipped / ctx.lengths.clamp_min(1)
        columns["sequence_weight"] = torch.exp(ctx.sequence_mean_z.double())
        if self.params.kalman_impl == "reference" and "kalman" in self.variants:
            self._check_reference(ctx)
        return columns

    def _check_reference(self, ctx: Context) -> None:
        from ratioscope.functional.kalman import closed_form_deviation

        p = self.params
        deviation = closed_form_deviation(
            ctx.z, ctx.mask, p.kalman_q, p.kalman_v, p.kalman_p0, p.kalman_rho0,
            atol=REFERENCE_TOLERANCE,
        )  # fmt: skip
        found = _Deviation()
        found.first_index = deviation.first_index
        found.max_abs_error = deviation.max_abs_error
        found.clamp_index = deviation.clamp_index
        self.deviation.merge(found)

    def _token_states(
        self, ctx: Context, variant: str, signal: Tensor | None, state: _VariantState
    ) -> dict[str, Tensor]:
        p = self.params
        # AnalysisParams admits only the values of SPACES
        space = cast("Space", p.space)
        band = p.state_band(variant)
        long = ctx.lengths >= spectral_min_length(p)
        if variant == "sequence":
            # constant within each sequence: the statistics follow from one value and the
            # length per row, and are summed on the host from those [B] read back (on a
            # GPU some thirty launches on [B] rows and a read of the widest row less);
            # the columns need no value at all
            add = functools.partial(_add_constant_states, state.states, band, p.window)
            ctx.host.later(add, ctx.sequence_mean_z, ctx.lengths, long)
            switch, lfr, global_variance, local_variance = constant_signal_columns(ctx.lengths)
        else:
            assert signal is not None  # only the sequence variant goes without
            stats = signal_statistics(
                signal,
                ctx.mask,
                on_band=band,
                window=p.window,
                cutoff=p.lfr_cutoff,
                space=space,
            )
            state.states.add(stats, ctx.nonempty, long, ctx.host)
            switch, lfr = stats.switch_frequency, stats.low_frequency_ratio
            global_variance, local_variance = stats.global_variance, stats.local_variance
        nan = torch.full((), math.nan, dtype=lfr.dtype)
        return {
            f"{variant}_switch_frequency": switch,
            f"{variant}_lfr": torch.where(long, lfr, nan),
            f"{variant}_var_global": global_variance,
            f"{variant}_var_window": local_variance,
        }

    def result(self) -> dict[str, VariantStats] | None:
        if all(state.histogram.count == 0 for state in self.variants.values()):
            return None
        return {variant: self._variant(variant, s) for variant, s in self.variants.items()}

    def brief_result(self) -> dict[str, VariantStats] | None:
        """The token row alone: the only one the verdict reads (each row's spectra and
        quantiles are most of the section's reading)."""
        token = self.variants.get("token")
        if token is None or token.histogram.count == 0:
            return self.result()
        return {"token": self._variant("token", token)}

    def _variant(self, variant: str, state: _VariantState) -> VariantStats:
        distribution = distribution_of(state.histogram, self.params.quantiles)
        has_adv = state.advantage_tokens > 0
        return VariantStats(
            **state.states.fields(_frequency_grid()),
            distribution=distribution,
            clip_band=self.band(variant),
            on_band=self.params.state_band(variant),
            clip_fraction=state.clipped_tokens / state.advantage_tokens if has_adv else None,
            # the report holds losses, -J, as trainers log them
            surrogate=Surrogate(
                clipped=state.clipped_loss.aggregates().negated(),
                unclipped=state.unclipped_loss.aggregates().negated(),
            )
            if has_adv
            else None,
            closed_form_deviation=self.closed_form_deviation() if variant == "kalman" else None,
            spectral_min_length=spectral_min_length(self.params),
        )

    def closed_form_deviation(self) -> ClosedFormDeviation | None:
        """With kalman_impl='reference', where its closed form leaves the exact filter on
        the data fed so far (differences over :data:`REFERENCE_TOLERANCE`); else None."""
        p = self.params
        if p.kalman_impl != "reference" or "kalman" not in self.variants:
            return None
        found = self.deviation
        return ClosedFormDeviation(
            q=p.kalman_q,
            v=p.kalman_v,
            first_index=found.first_index,
            max_abs_error=found.max_abs_error,
            clamp_index=found.clamp_index,
            atol=REFERENCE_TOLERANCE,
        )

    def warnings(self) -> list[str]:
        messages = []
        if self.no_advantages:
            messages.append(
                "ratios.*.clip_fraction and surrogate: need 'advantages', missing in "
                f"{listed(self.no_advantages)}"
            )
        if self.not_policy_ratio:
            messages.append(
                "ratios: z is the train/inference mismatch (old policy / inference engine) in "
                f"{listed(self.not_policy_ratio)}, which hold no current-policy log-probs; "
                "clip fraction and surrogate apply to the policy ratio and are left out there"
            )
        deviation = self.closed_form_deviation()
        if deviation is not None and deviation.first_index is not None:
            clamp = (
                f"; its clamps bind from token {deviation.clamp_index} on"
                if deviation.clamp_index is not None
                else ""
            )
            messages.append(
                "ratios.kalman: kalman_impl='reference' (the cumulative-product closed form) "
                "deviates "
                f"from the exact filter by more than {REFERENCE_TOLERANCE:g} from token "
                f"{deviation.first_index} on (max error {deviation.max_abs_error:.3g}) at "
                f"Q/V = {deviation.q / deviation.v:g}{clamp}; the default, "
                "kalman_impl='scan', is exact"
            )
        return messages


def _add_rows(histogram: Histogram, rows: RatioRows, *summary: Tensor) -> None:
    """Add :func:`ratio_rows`'s counts and moments (from its kernel's ``summary`` read
    back, where it ran the Triton kernel)."""
    counts, moments = rows.histogram(*summary)
    histogram.counts += counts
    histogram.moments.merge(Moments(*moments))


def _add_constant_states(
    states: _StateSums,
    band: tuple[float, float] | float,
    window: int,
    values: Tensor,
    lengths: Tensor,
    long: Tensor,
) -> None:
    """Add the token-state statistics of a signal that is ``values[i]`` ([B]) on each of
    the ``lengths[i]`` valid tokens of row i (``long``: the rows long enough for the
    spectra and the windows), from :func:`constant_signal_statistics`."""
    stats = constant_signal_statistics(values, lengths, on_band=band, window=window)
    states.add(stats, lengths > 0, long)


def _add_constant_rows(histogram: Histogram, values: Tensor, lengths: Tensor) -> None:
    """Add a signal that is ``values[i]`` on each of the ``lengths[i]`` valid tokens of
    row i: the histogram's counts and moments of those tokens, from [B] values.

    Equal to ``histogram.add(values[:, None].expand(B, T)[mask])`` up to the rounding of
    the moments (weighted sums instead of sums over repeated values); counts are exact.
    The section runs it on the host, on the [B] values read back with the chunk.
    """
    from ratioscope.functional.histogram import NUM_BINS, bin_index

    present = lengths > 0
    if not bool(present.any()):
        return
    row_values = values[present].double()
    weights = lengths[present].double()
    counts = torch.bincount(bin_index(row_values), weights=weights, minlength=NUM_BINS)
    histogram.counts += counts.round().long().cpu()
    tokens = float(weights.sum())
    mean = float((weights * row_values).sum()) / tokens
    m2 = float((weights * (row_values - mean).square()).sum())
    low, high = float(row_values.min()), float(row_values.max())
    histogram.moments.merge(Moments(int(tokens), mean, m2, low, high))


def spectral_min_length(params: AnalysisParams) -> int:
    """The fewest valid tokens a sequence needs for the LFR, the spectrum and the window
    statistics: the window W, and at least 2 / f_c so that the LFR band
    ``k_c = floor(f_c L / 2)`` holds a frequency above 0 (below it the band is the mean
    alone, which the LFR removes: 0 up to rounding, the "1e-17" of short responses)."""
    return max(int(params.window), math.ceil(2.0 / params.lfr_cutoff - 1e-9))


def _frequency_grid() -> list[float]:
    return frequency_grid().tolist()
