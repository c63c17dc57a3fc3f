"""The ``ratios`` section: the three ratio variants side by side (DESIGN 3.2-3.3).

For each variant (token, sequence, kalman) the log-space signal's distribution over
valid tokens, the PPO clip fraction, the clipped/unclipped surrogate loss, and the KPO
Table 2 token-state statistics: proportions up/down/on, run lengths, switch frequency,
window-wise off-policy frequency, low-frequency ratio with the mean periodogram, and
global and window-local variance (:mod:`ratioscope.functional.token_stats`).

Per-sequence statistics are averaged over sequences (the paper's convention) from
exact sums and counts, so chunks, files and shard reports merge exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

import torch
from torch import Tensor

from ratioscope.batch import TokenBatch
from ratioscope.functional.surrogate import (
    Aggregates,
    AggregationSums,
    ppo_row_sums,
    row_aggregation_sums,
)
from ratioscope.functional.token_stats import (
    SignalStatistics,
    Space,
    WindowMoments,
    constant_signal_statistics,
    frequency_grid,
    signal_statistics,
    window_moments,
)
from ratioscope.params import AnalysisParams
from ratioscope.sections.base import Accumulator, listed
from ratioscope.sections.context import VARIANTS, Context
from ratioscope.stats import Counter, Histogram, Vector

#: --kalman-impl reference is flagged where it is this far from the exact filter
REFERENCE_TOLERANCE = 1e-4  # column j of the [.., 3] state tensors is state j - 1


@dataclass(frozen=True)
class Distribution:
    """Distribution of a log-space signal over valid tokens (quantiles from fixed bins)."""

    count: int
    mean: float
    std: float
    min: float
    max: float
    quantiles: dict[str, float]


def distribution_of(histogram: Histogram, quantiles: Sequence[float]) -> Distribution:
    """A :class:`Distribution` (exact moments, histogram quantiles) of a histogram's values."""
    moments = histogram.moments
    return Distribution(
        count=moments.count,
        mean=moments.mean if moments.count else math.nan,
        std=moments.std,
        min=moments.minimum,
        max=moments.maximum,
        quantiles=histogram.quantiles(tuple(quantiles)),
    )


@dataclass(frozen=True)
class Surrogate:
    """Surrogate loss -J: clipped min(rA, clip(r)A) and unclipped rA (KPO Eq. 2)."""

    clipped: Aggregates
    unclipped: Aggregates


@dataclass(frozen=True)
class VariantStats:
    """One row of the Table 2 layout; KPO fields are None until computed."""

    distribution: Distribution
    clip_band: tuple[float, float]
    clip_fraction: float | None
    surrogate: Surrogate | None
    proportion: dict[str, float] | None = None
    run_length_mean: dict[str, float] | None = None
    run_length_histogram: dict[str, dict[str, int]] | None = None
    switch_frequency: float | None = None
    lfr: float | None = None
    lfr_excluded: int | None = None
    variance: dict[str, float] | None = None
    window_frequency: dict[str, list[float]] | None = None
    spectrum: dict[str, list[float]] | None = None


@dataclass
class _StateSums:
    """Sums behind the KPO token-state statistics of one variant."""

    state_tokens: list[int] = field(default_factory=lambda: [0, 0, 0])
    run_mean_sum: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    run_mean_count: list[int] = field(default_factory=lambda: [0, 0, 0])
    run_histogram: list[Counter] = field(default_factory=lambda: [Counter() for _ in range(3)])
    sequences: int = 0
    switch_sum: float = 0.0
    lfr_sum: float = 0.0
    lfr_count: int = 0
    lfr_excluded: int = 0
    var_global_sum: float = 0.0
    var_local_sum: float = 0.0
    windows: WindowMoments = field(default_factory=WindowMoments.empty)
    spectrum_sum: Vector = field(default_factory=Vector)
    spectrum_count: int = 0

    def add(self, stats: SignalStatistics, nonempty: Tensor) -> None:
        """Fold the statistics of a chunk's rows in (``nonempty`` ones only)."""
        rows = nonempty
        counts = stats.state_counts[rows].sum(dim=0)
        for j in range(3):
            self.state_tokens[j] += int(counts[j])
            per_sequence = stats.runs.mean_per_sequence[rows, j]
            present = ~torch.isnan(per_sequence)
            self.run_mean_sum[j] += float(per_sequence[present].sum())
            self.run_mean_count[j] += int(present.sum())
            histogram = stats.runs.histogram[j]
            lengths = histogram.nonzero().flatten()
            self.run_histogram[j].add_tensor(lengths, histogram[lengths])
        self.sequences += int(rows.sum())
        self.switch_sum += float(stats.switch_frequency[rows].sum())
        lfr = stats.low_frequency_ratio[rows]
        finite = ~torch.isnan(lfr)
        self.lfr_sum += float(lfr[finite].sum())
        self.lfr_count += int(finite.sum())
        self.lfr_excluded += int((~finite).sum())
        self.var_global_sum += float(stats.global_variance[rows].sum())
        self.var_local_sum += float(stats.local_variance[rows].sum())
        self.windows = self.windows.merge(window_moments(stats.window_frequency[rows]).cpu())
        spectra = stats.periodogram[rows][finite]
        self.spectrum_sum.add(spectra.sum(dim=0))
        self.spectrum_count += int(spectra.shape[0])

    def merge(self, other: _StateSums) -> None:
        for j in range(3):
            self.state_tokens[j] += other.state_tokens[j]
            self.run_mean_sum[j] += other.run_mean_sum[j]
            self.run_mean_count[j] += other.run_mean_count[j]
            self.run_histogram[j].merge(other.run_histogram[j])
        for name in ("sequences", "switch_sum", "lfr_sum", "lfr_count", "lfr_excluded"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("var_global_sum", "var_local_sum", "spectrum_count"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.windows = self.windows.merge(other.windows)
        self.spectrum_sum.merge(other.spectrum_sum)

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for key, value in vars(self).items():
            if isinstance(value, Vector):
                state[key] = value.state()
            elif key == "run_histogram":
                state[key] = [c.state() for c in value]
            elif key == "windows":
                # the layout of reports written so far: three lists of floats
                state["window_total"] = value.total.tolist()
                state["window_total_sq"] = value.total_sq.tolist()
                state["window_count"] = value.count.double().tolist()
            else:
                state[key] = value
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _StateSums:
        sums = cls()
        window_keys = ("window_total", "window_total_sq", "window_count")
        for key, value in state.items():
            if key in window_keys:
                continue
            current = getattr(sums, key)
            if isinstance(current, Vector):
                setattr(sums, key, Vector.from_state(value))
            elif key == "run_histogram":
                sums.run_histogram = [Counter.from_state(c) for c in value]
            else:
                setattr(sums, key, value)
        total, total_sq, count = (
            torch.tensor(state.get(k, []), dtype=torch.float64) for k in window_keys
        )
        sums.windows = WindowMoments(total, total_sq, count.long())
        return sums

    def fields(self, frequencies: list[float]) -> dict[str, Any]:
        """The KPO fields of :class:`VariantStats`."""
        total = sum(self.state_tokens)
        if self.sequences == 0 or total == 0:
            return {}
        windows = self.windows.trimmed()
        spectrum = None
        if self.spectrum_count:
            power = (self.spectrum_sum.values / self.spectrum_count).tolist()
            spectrum = {"frequency": frequencies, "power": power, "sequences": self.spectrum_count}
        return {
            "proportion": {name: self.state_tokens[j] / total for j, name in _REPORT_ORDER},
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


#: report order up, down, on (DESIGN 4) with the column index of each state
_REPORT_ORDER = ((2, "up"), (0, "down"), (1, "on"))


@dataclass
class _VariantState:
    histogram: Histogram = field(default_factory=Histogram)
    clipped_tokens: int = 0
    advantage_tokens: int = 0
    clipped_loss: AggregationSums = field(default_factory=AggregationSums)
    unclipped_loss: AggregationSums = field(default_factory=AggregationSums)
    states: _StateSums = field(default_factory=_StateSums)

    def merge(self, other: _VariantState) -> None:
        self.histogram.merge(other.histogram)
        self.clipped_tokens += other.clipped_tokens
        self.advantage_tokens += other.advantage_tokens
        self.clipped_loss = self.clipped_loss.merge(other.clipped_loss)
        self.unclipped_loss = self.unclipped_loss.merge(other.unclipped_loss)
        self.states.merge(other.states)

    def state(self) -> dict[str, Any]:
        return {
            "histogram": self.histogram.state(),
            "clipped_tokens": self.clipped_tokens,
            "advantage_tokens": self.advantage_tokens,
            "clipped_loss": asdict(self.clipped_loss),
            "unclipped_loss": asdict(self.unclipped_loss),
            "states": self.states.state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _VariantState:
        return cls(
            histogram=Histogram.from_state(state["histogram"]),
            clipped_tokens=int(state["clipped_tokens"]),
            advantage_tokens=int(state["advantage_tokens"]),
            clipped_loss=AggregationSums(**state["clipped_loss"]),
            unclipped_loss=AggregationSums(**state["unclipped_loss"]),
            states=_StateSums.from_state(state["states"]),
        )


class RatiosAccumulator(Accumulator):
    """Distribution, clip fraction and surrogate per ratio variant."""

    name = "ratios"

    def __init__(self, params: AnalysisParams, variants: tuple[str, ...] = VARIANTS) -> None:
        super().__init__(params)
        self.variants = {v: _VariantState() for v in variants}
        self.no_advantages: list[str] = []
        self.not_policy_ratio: list[str] = []  # files whose z is old vs engine
        # --kalman-impl reference: where the authors' closed form leaves the exact filter
        self.deviation_index: int | None = None
        self.deviation_max = 0.0
        self.deviation_clamp: int | None = None

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
            signal = ctx.signal(variant, self.params)
            state.histogram.add(signal[ctx.mask])
            columns.update(self._token_states(ctx, variant, signal, state))
            if advantages is None:
                continue
            clipped, clipped_sums, plain_sums = ppo_row_sums(
                signal, advantages, ctx.mask, self.band(variant)
            )
            state.clipped_tokens += int(clipped.sum())
            state.advantage_tokens += int(ctx.lengths.sum())
            state.clipped_loss = state.clipped_loss.merge(
                row_aggregation_sums(clipped_sums, ctx.lengths)
            )
            state.unclipped_loss = state.unclipped_loss.merge(
                row_aggregation_sums(plain_sums, ctx.lengths)
            )
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
        self.deviation_max = max(self.deviation_max, deviation.max_abs_error)
        self.deviation_index = _min_index(self.deviation_index, deviation.first_index)
        self.deviation_clamp = _min_index(self.deviation_clamp, deviation.clamp_index)

    def _token_states(
        self, ctx: Context, variant: str, signal: Tensor, state: _VariantState
    ) -> dict[str, Tensor]:
        p = self.params
        # AnalysisParams admits only the values of SPACES
        space = cast("Space", p.space)
        if variant == "sequence":
            # constant within each sequence: the statistics follow from one value per row
            stats = constant_signal_statistics(
                ctx.sequence_mean_z, ctx.lengths, on_band=p.on_band, window=p.window
            )
        else:
            stats = signal_statistics(
                signal,
                ctx.mask,
                on_band=p.on_band,
                window=p.window,
                cutoff=p.lfr_cutoff,
                space=space,
            )
        state.states.add(stats, ctx.nonempty)
        return {
            f"{variant}_switch_frequency": stats.switch_frequency,
            f"{variant}_lfr": stats.low_frequency_ratio,
            f"{variant}_var_global": stats.global_variance,
            f"{variant}_var_window": stats.local_variance,
        }

    def merge(self, other: Accumulator) -> None:
        assert isinstance(other, RatiosAccumulator)
        self.merge_base(other)
        self.deviation_max = max(self.deviation_max, other.deviation_max)
        self.deviation_index = _min_index(self.deviation_index, other.deviation_index)
        self.deviation_clamp = _min_index(self.deviation_clamp, other.deviation_clamp)
        for variant, state in self.variants.items():
            state.merge(other.variants[variant])
        self.no_advantages.extend(other.no_advantages)
        self.not_policy_ratio.extend(other.not_policy_ratio)

    def state(self) -> dict[str, Any]:
        return {
            **self.base_state(),
            "variants": {v: s.state() for v, s in self.variants.items()},
            "no_advantages": self.no_advantages,
            "not_policy_ratio": self.not_policy_ratio,
            "reference_deviation": {
                "first_index": self.deviation_index,
                "max_abs_error": self.deviation_max,
                "clamp_index": self.deviation_clamp,
            },
        }

    @classmethod
    def from_state(cls, params: AnalysisParams, state: dict[str, Any]) -> RatiosAccumulator:
        acc = cls(params, tuple(state["variants"]))
        acc.restore_base(state)
        acc.variants = {v: _VariantState.from_state(s) for v, s in state["variants"].items()}
        acc.no_advantages = list(state.get("no_advantages", []))
        acc.not_policy_ratio = list(state.get("not_policy_ratio", []))
        deviation = state.get("reference_deviation", {})
        acc.deviation_index = deviation.get("first_index")
        acc.deviation_max = float(deviation.get("max_abs_error") or 0.0)
        acc.deviation_clamp = deviation.get("clamp_index")
        return acc

    def result(self) -> dict[str, VariantStats] | None:
        if all(state.histogram.count == 0 for state in self.variants.values()):
            return None
        return {variant: self._variant(variant, s) for variant, s in self.variants.items()}

    def _variant(self, variant: str, state: _VariantState) -> VariantStats:
        distribution = distribution_of(state.histogram, self.params.quantiles)
        has_adv = state.advantage_tokens > 0
        return VariantStats(
            **state.states.fields(_frequency_grid()),
            distribution=distribution,
            clip_band=self.band(variant),
            clip_fraction=state.clipped_tokens / state.advantage_tokens if has_adv else None,
            # the report holds losses, -J, as trainers log them
            surrogate=Surrogate(
                clipped=state.clipped_loss.aggregates().negated(),
                unclipped=state.unclipped_loss.aggregates().negated(),
            )
            if has_adv
            else None,
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
        if self.deviation_index is not None:
            p = self.params
            clamp = (
                f"; its clamps bind from token {self.deviation_clamp} on"
                if self.deviation_clamp is not None
                else ""
            )
            messages.append(
                "ratios.kalman: --kalman-impl reference (the authors' closed form) deviates "
                f"from the exact filter by more than {REFERENCE_TOLERANCE:g} from token "
                f"{self.deviation_index} on (max error {self.deviation_max:.3g}) at "
                f"Q/V = {p.kalman_q / p.kalman_v:g}{clamp}; use the default --kalman-impl scan"
            )
        return messages


def _min_index(a: int | None, b: int | None) -> int | None:
    present = [i for i in (a, b) if i is not None]
    return min(present) if present else None


def _frequency_grid() -> list[float]:
    return frequency_grid().tolist()


@dataclass(frozen=True)
class RatioTrace:
    """One sequence's three ratio signals over its valid tokens (for ``plot ratios``)."""

    source: str
    row: int
    token: list[float]
    sequence: list[float]
    kalman: list[float]
    on_band: tuple[float, float]
    qv: float
    ratio_pair: str = "current/old"


def ratio_trace(
    paths: Any, index: int, params: AnalysisParams | None = None, load_options: Any = None
) -> RatioTrace:
    """The log-ratio, its sequence mean and its Kalman filter for sequence ``index``
    (counted over all files in order).

    Raises:
        UsageError: ``index`` is past the last sequence.
    """
    from ratioscope.errors import UsageError
    from ratioscope.io.loaders import LoadOptions, expand_paths, load_file

    params = params or AnalysisParams()
    seen = 0
    for path in expand_paths(list(paths)):
        batch = load_file(path, load_options or LoadOptions())
        if index < seen + batch.num_sequences:
            row = index - seen
            ctx = Context(batch.select_rows(row, row + 1), params)
            valid = ctx.mask[0]  # holes inside the sequence (masked turns) are left out
            signals = {v: ctx.signal(v)[0][valid].double().tolist() for v in VARIANTS}
            return RatioTrace(
                source=str(path),
                row=row,
                on_band=params.on_band,
                qv=params.kalman_q / params.kalman_v,
                ratio_pair=batch.ratio_pair,
                **signals,
            )
        seen += batch.num_sequences
    raise UsageError(f"--sequence {index} is out of range: the input has {seen} sequences")
