"""The ``tepo`` section: TEPO's sequence-likelihood weights and token KL-mask
(docs/metrics-objectives.md).

``w_i = exp(mean_t z_it)`` per sequence (the geometric mean of the token ratios), how
many tokens its clip band ``seq_clip`` zeroes, TEPO's policy objective under the
token-mean and the seq-mean-token-mean aggregations (needs ``advantages``), and the
shares of valid tokens in the four quadrants of advantage sign x entropy change
``dH = entropy - old_entropy`` (needs ``advantages``, ``entropy`` and ``old_entropy``);
each part that lacks an input is null with a warning naming it. Rows are independent,
so the section is fed chunk by chunk; everything is exact sums and counts except the
weight quantiles (fixed histograms of log w, within 1.16 % of log w, the bound the
weight's distribution states as ``quantile_bound``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.functional.surrogate import (
    AdvantageSums,
    Aggregates,
    AggregationSums,
    constant_ppo_row_sums,
    row_aggregation_sums,
)
from ratioscope.functional.tepo import (
    kl_mask_quadrant_counts,
    sequence_clip_counts,
)
from ratioscope.sections.base import Accumulator, listed
from ratioscope.sections.context import Context
from ratioscope.sections.distribution import Distribution
from ratioscope.sections.state import Codec, mergeable
from ratioscope.sections.summaries import LOG_BOUND, Histogram, Moments, QuantileBound

QUADRANTS = (
    "pos_decreasing",
    "pos_non_decreasing",
    "neg_increasing",
    "neg_non_increasing",
    "zero_advantage",
)


@dataclass(frozen=True)
class KLMaskShares:
    """Valid tokens per (sign A, sign dH) quadrant; ``pos_decreasing`` is TEPO's KL mask."""

    counts: dict[str, int]
    fractions: dict[str, float]
    total: int


@dataclass(frozen=True)
class LogWeightDistribution(Distribution):
    """TEPO's weight distribution: its quantiles were always read from a histogram of
    ``log w``, so a report written before bounds were stated reads the log bound too."""

    quantile_bound: QuantileBound = LOG_BOUND


@dataclass(frozen=True)
class TepoSection:
    """The ``tepo`` report section (keys in docs/metrics-objectives.md)."""

    sequences: int
    tokens: int
    clip_band: tuple[float, float]
    weight: LogWeightDistribution
    outside_band: float
    clip_fraction: float | None
    clip_fraction_literal: float | None
    #: TEPO's loss (minus the Eq. 4 policy objective, KL term left out), two aggregations
    surrogate: Aggregates | None
    kl_mask: KLMaskShares | None


#: the layout of reports written so far: [token sum, tokens, seq sum, seqs]
_SUMS_LIST = Codec(
    dump=lambda s: [s.token_sum, float(s.tokens), s.seq_mean_sum, float(s.sequences)],
    load=lambda v: AggregationSums(float(v[0]), int(v[1]), float(v[2]), int(v[3])),
)


class TepoAccumulator(Accumulator):
    """TEPO weights, clipping, aggregations and KL-mask quadrants, chunk by chunk."""

    name = "tepo"

    log_weight = mergeable(Histogram, "merge")  # per sequence log w (quantiles are read here)
    weight = mergeable(Moments, "merge")  # per sequence w (exact mean, std, extremes)
    outside = mergeable(int, "sum")  # sequences with w outside [1 - eps_low, 1 + eps_high]
    tokens = mergeable(int, "sum")
    advantage_tokens = mergeable(int, "sum")
    clipped = mergeable(int, "sum")
    clipped_literal = mergeable(int, "sum")
    surrogate = mergeable(AggregationSums, "merge", key="sums", codec=_SUMS_LIST)
    #: tokens per quadrant, then their total
    quadrants = mergeable(lambda: torch.zeros(len(QUADRANTS) + 1, dtype=torch.long), "sum")
    no_advantages: list[str] = mergeable(list, "extend")
    no_entropy: list[str] = mergeable(list, "extend")

    def begin_file(self, batch: TokenBatch) -> bool:
        if not super().begin_file(batch):
            return False
        if batch.advantages is None:
            # that warning names kl_mask too, so the file is not listed again for entropy
            self.no_advantages.append(batch.source)
            return True
        lacking = [name for name in ("entropy", "old_entropy") if not batch.has(name)]
        if lacking:
            self.no_entropy.append(f"{batch.source} (no {', '.join(lacking)})")
        return True

    def update(self, ctx: Context) -> dict[str, Tensor]:
        batch, mask = ctx.batch, ctx.mask
        band = self.params.seq_clip
        # TEPO's w_i = exp(mean z) (sequence_likelihood_weights): the context's means,
        # summed once for every section that needs them; NaN for a row without tokens
        weights = torch.where(ctx.nonempty, torch.exp(ctx.sequence_mean_z), math.nan)
        # what follows from the [B] weights and advantage sums alone is summed on the
        # host, from those read with the chunk's other numbers (on a GPU some forty
        # launches on [B] rows fewer); only the clip counts' column is made here
        columns: dict[str, Tensor] = {}
        advantages = batch.advantages
        ctx.host.later(functools.partial(self._add_weights, band), weights, ctx.lengths)
        if advantages is None:
            return columns
        # the sequence weight is constant within each row: the clip counts and the
        # surrogate follow from each row's sums of positive and negative advantages
        log_w = torch.where(ctx.nonempty, torch.log(weights.double()), 0.0)
        sums = ctx.advantage_sums
        clipped, literal = sequence_clip_counts(log_w, sums, band)
        columns["tepo_clip_fraction"] = clipped / ctx.lengths.clamp_min(1)
        ctx.host.later(
            functools.partial(self._add_surrogate, band), ctx.lengths, log_w, clipped, literal,
            sums.positive, sums.negative, sums.n_positive, sums.n_negative,
        )  # fmt: skip
        entropy, old_entropy = batch.entropy, batch.old_entropy
        if entropy is None or old_entropy is None:
            return columns
        # the counts in KLMaskQuadrants' order: QUADRANTS, then the total
        quadrants, in_mask = kl_mask_quadrant_counts(advantages, entropy, old_entropy, mask)
        ctx.host.later(self._add_quadrants, quadrants)
        columns["tepo_kl_mask_fraction"] = in_mask / ctx.lengths.clamp_min(1)
        return columns

    def _add_quadrants(self, counts: Tensor) -> None:
        """Fold a chunk's [6] quadrant counts in, read back."""
        self.quadrants += counts

    def _add_weights(self, band: tuple[float, float], weights: Tensor, lengths: Tensor) -> None:
        """Fold a chunk's rows in, read back ([B] each): the sequence weights (NaN for
        the rows without tokens) and the valid tokens."""
        finite = torch.isfinite(weights)
        self.log_weight.add(torch.log(weights[finite].double()))
        self.weight.add(weights[finite])
        outside = (weights > 1 + band[1]) | (weights < 1 - band[0])
        self.outside += int((outside & finite).sum())
        self.tokens += int(lengths.sum())

    def _add_surrogate(
        self,
        band: tuple[float, float],
        lengths: Tensor,
        log_w: Tensor,
        clipped: Tensor,
        literal: Tensor,
        *advantage_sums: Tensor,
    ) -> None:
        """Fold a chunk's rows with advantages in, read back ([B] each): the valid
        tokens, ``log w``, the clipped tokens (both rules) and the
        :class:`AdvantageSums`' four fields, from which the surrogate's sums follow."""
        self.advantage_tokens += int(lengths.sum())
        self.clipped += int(clipped.sum())
        self.clipped_literal += int(literal.sum())
        _, terms, _ = constant_ppo_row_sums(log_w, AdvantageSums(*advantage_sums), band)
        self.surrogate = self.surrogate.merge(row_aggregation_sums(terms, lengths))

    def result(self) -> TepoSection | None:
        sequences = self.weight.count
        if sequences == 0:
            return None
        quantiles = {
            key: math.exp(value) if math.isfinite(value) else value
            for key, value in self.log_weight.quantiles(self.params.quantiles).items()
        }
        has_adv = self.advantage_tokens > 0
        return TepoSection(
            sequences=sequences,
            tokens=self.tokens,
            clip_band=self.params.seq_clip,
            weight=LogWeightDistribution(
                count=sequences,
                mean=self.weight.mean,
                std=self.weight.std,
                min=self.weight.minimum,
                max=self.weight.maximum,
                quantiles=quantiles,
            ),
            outside_band=self.outside / sequences,
            clip_fraction=self.clipped / self.advantage_tokens if has_adv else None,
            clip_fraction_literal=self.clipped_literal / self.advantage_tokens if has_adv else None,
            # the report holds losses, -J, as the ratios section does
            surrogate=self.surrogate.aggregates().negated() if has_adv else None,
            kl_mask=self._kl_mask(),
        )

    def _kl_mask(self) -> KLMaskShares | None:
        *counts, total = self.quadrants.tolist()
        if total == 0:
            return None
        return KLMaskShares(
            counts=dict(zip(QUADRANTS, counts, strict=True)),
            fractions={name: n / total for name, n in zip(QUADRANTS, counts, strict=True)},
            total=total,
        )

    def warnings(self) -> list[str]:
        messages = []
        if self.no_advantages:
            messages.append(
                "tepo.clip_fraction, surrogate and kl_mask: need 'advantages', missing in "
                f"{listed(self.no_advantages)}"
            )
        if self.no_entropy:
            messages.append(
                "tepo.kl_mask: needs 'entropy' and 'old_entropy' (dH = entropy - old_entropy), "
                f"missing in {listed(self.no_entropy)}"
            )
        return messages
