"""The ``ratios`` section: the three ratio variants side by side (DESIGN 3.2-3.3).

For each variant (token, sequence, kalman) the log-space signal's distribution over
valid tokens, the PPO clip fraction and the clipped/unclipped surrogate loss. The KPO
token-state statistics (proportions, run lengths, switch frequency, LFR, variances,
window-wise frequency) are added by :mod:`ratioscope.sections.token_states`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ratioscope.functional.surrogate import ppo_clip_mask, ppo_objective_terms, sequence_means
from ratioscope.params import AnalysisParams
from ratioscope.sections.base import Accumulator
from ratioscope.sections.context import VARIANTS, Context
from ratioscope.stats import Histogram


@dataclass(frozen=True)
class Distribution:
    """Distribution of a log-space signal over valid tokens (quantiles from fixed bins)."""

    count: int
    mean: float
    std: float
    min: float
    max: float
    quantiles: dict[str, float]


@dataclass(frozen=True)
class Aggregates:
    """A loss under the two aggregations GRPO-family trainers use."""

    token_mean: float
    seq_mean_token_mean: float


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
class _LossSums:
    """Sums behind the two aggregations of one per-token quantity."""

    token_sum: float = 0.0
    tokens: int = 0
    seq_mean_sum: float = 0.0
    sequences: int = 0

    def add(self, terms: Tensor, mask: Tensor) -> None:
        self.token_sum += float(terms.sum())
        self.tokens += int(mask.sum())
        means = sequence_means(terms, mask)[mask.any(dim=1)]
        self.seq_mean_sum += float(means.sum())
        self.sequences += int(means.numel())

    def merge(self, other: _LossSums) -> None:
        self.token_sum += other.token_sum
        self.tokens += other.tokens
        self.seq_mean_sum += other.seq_mean_sum
        self.sequences += other.sequences

    def aggregates(self) -> Aggregates:
        # the report holds losses, -J, as trainers log them
        return Aggregates(
            token_mean=-self.token_sum / self.tokens if self.tokens else math.nan,
            seq_mean_token_mean=-self.seq_mean_sum / self.sequences if self.sequences else math.nan,
        )


@dataclass
class _VariantState:
    histogram: Histogram = field(default_factory=Histogram)
    clipped_tokens: int = 0
    advantage_tokens: int = 0
    clipped_loss: _LossSums = field(default_factory=_LossSums)
    unclipped_loss: _LossSums = field(default_factory=_LossSums)

    def merge(self, other: _VariantState) -> None:
        self.histogram.merge(other.histogram)
        self.clipped_tokens += other.clipped_tokens
        self.advantage_tokens += other.advantage_tokens
        self.clipped_loss.merge(other.clipped_loss)
        self.unclipped_loss.merge(other.unclipped_loss)

    def state(self) -> dict[str, Any]:
        return {
            "histogram": self.histogram.state(),
            "clipped_tokens": self.clipped_tokens,
            "advantage_tokens": self.advantage_tokens,
            "clipped_loss": vars(self.clipped_loss),
            "unclipped_loss": vars(self.unclipped_loss),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _VariantState:
        return cls(
            histogram=Histogram.from_state(state["histogram"]),
            clipped_tokens=int(state["clipped_tokens"]),
            advantage_tokens=int(state["advantage_tokens"]),
            clipped_loss=_LossSums(**state["clipped_loss"]),
            unclipped_loss=_LossSums(**state["unclipped_loss"]),
        )


class RatiosAccumulator(Accumulator):
    """Distribution, clip fraction and surrogate per ratio variant."""

    name = "ratios"

    def __init__(self, params: AnalysisParams) -> None:
        super().__init__(params)
        self.variants = {v: _VariantState() for v in VARIANTS}
        self.no_advantages: list[str] = []

    def band(self, variant: str) -> tuple[float, float]:
        return self.params.clip if variant == "token" else self.params.seq_clip

    def update(self, ctx: Context) -> dict[str, Tensor]:
        columns: dict[str, Tensor] = {}
        advantages = ctx.batch.advantages
        if advantages is None and ctx.batch.row_offset == 0:
            self.no_advantages.append(ctx.batch.source)
        for variant, state in self.variants.items():
            signal = ctx.signal(variant)
            state.histogram.add(signal[ctx.mask])
            if advantages is None:
                continue
            band = self.band(variant)
            clipped = ppo_clip_mask(signal, advantages, ctx.mask, band)
            state.clipped_tokens += int(clipped.sum())
            state.advantage_tokens += int(ctx.mask.sum())
            clipped_terms = ppo_objective_terms(signal, advantages, ctx.mask, band)
            state.clipped_loss.add(clipped_terms, ctx.mask)
            plain_terms = ppo_objective_terms(signal, advantages, ctx.mask, None)
            state.unclipped_loss.add(plain_terms, ctx.mask)
            columns[f"{variant}_clip_fraction"] = clipped.sum(dim=1) / ctx.lengths.clamp_min(1)
        columns["sequence_weight"] = torch.exp(ctx.sequence_mean_z.double())
        return columns

    def merge(self, other: Accumulator) -> None:
        assert isinstance(other, RatiosAccumulator)
        self.merge_base(other)
        for variant, state in self.variants.items():
            state.merge(other.variants[variant])
        self.no_advantages.extend(other.no_advantages)

    def state(self) -> dict[str, Any]:
        return {
            **self.base_state(),
            "variants": {v: s.state() for v, s in self.variants.items()},
            "no_advantages": self.no_advantages,
        }

    @classmethod
    def from_state(cls, params: AnalysisParams, state: dict[str, Any]) -> RatiosAccumulator:
        acc = cls(params)
        acc.restore_base(state)
        acc.variants = {v: _VariantState.from_state(s) for v, s in state["variants"].items()}
        acc.no_advantages = list(state.get("no_advantages", []))
        return acc

    def result(self) -> dict[str, VariantStats] | None:
        if self.variants["token"].histogram.count == 0:
            return None
        return {variant: self._variant(variant, s) for variant, s in self.variants.items()}

    def _variant(self, variant: str, state: _VariantState) -> VariantStats:
        moments = state.histogram.moments
        distribution = Distribution(
            count=moments.count,
            mean=moments.mean,
            std=moments.std,
            min=moments.minimum,
            max=moments.maximum,
            quantiles=state.histogram.quantiles(self.params.quantiles),
        )
        has_adv = state.advantage_tokens > 0
        return VariantStats(
            distribution=distribution,
            clip_band=self.band(variant),
            clip_fraction=state.clipped_tokens / state.advantage_tokens if has_adv else None,
            surrogate=Surrogate(
                clipped=state.clipped_loss.aggregates(),
                unclipped=state.unclipped_loss.aggregates(),
            )
            if has_adv
            else None,
        )

    def warnings(self) -> list[str]:
        if not self.no_advantages:
            return []
        files = "; ".join(self.no_advantages[:3])
        more = f" and {len(self.no_advantages) - 3} more" if len(self.no_advantages) > 3 else ""
        return [
            f"ratios.*.clip_fraction and surrogate: need 'advantages', missing in {files}{more}"
        ]
