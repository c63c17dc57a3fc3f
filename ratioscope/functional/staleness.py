"""Off-policy statistics by mini-batch: how stale each update's behaviour policy is.

A PPO/GRPO step splits its batch into mini-batches (and may pass over it several
epochs), one optimizer update each. The rows of the first update are used before any
update, so their current policy is the behaviour policy (z = 0 on every token); each
later update follows more updates, and its ratios drift further from 1. Pooled over the
batch, the on-policy rows dilute the drift of the others; split by the index of the
update, the staleness shows.

Per index m, over the valid tokens of the rows with ``minibatch == m`` (N of them):

* ``exact_on`` = #{z = 0} / N: tokens whose log-ratio is exactly 0 (bitwise);
* ``mean_abs_z`` = sum |z| / N and ``mean_z`` = sum z / N;
* ``k3`` = sum (r - 1 - z) / N, the non-negative KL estimate (r = exp z);
* ``clip_fraction``: the PPO clip fraction at the token clip band (A > 0 and
  r > 1 + eps_high, or A < 0 and r < 1 - eps_low), over tokens with advantages;
* ``ess`` = (sum r)^2 / (N sum r^2).

The sums are :class:`~ratioscope.functional.mismatch.MismatchPartials` per index (the
same sums, precision and merge as the ``mismatch`` section's) plus exact counts, so
chunks, files and shard reports merge exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ratioscope.functional.mismatch import (
    MismatchPartials,
    mismatch_partials,
    mismatch_statistics,
)
from ratioscope.functional.surrogate import ppo_row_sums


@dataclass
class MinibatchSums:
    """Sufficient statistics of the rows of one mini-batch index; ``merge`` adds exactly.

    Attributes:
        rows: sequences with this index (also those without a valid token).
        exact_on: valid tokens with z == 0 exactly.
        clipped: valid tokens whose PPO term is clipped (zero gradient).
        advantage_tokens: valid tokens counted for ``clipped`` (those of files with
            advantages and a policy ratio).
        partials: the mismatch sums of the valid tokens (tokens, k3, ESS, |z|, ...).
    """

    rows: int = 0
    exact_on: int = 0
    clipped: int = 0
    advantage_tokens: int = 0
    partials: MismatchPartials = field(default_factory=MismatchPartials)

    def merge(self, other: MinibatchSums) -> None:
        self.rows += other.rows
        self.exact_on += other.exact_on
        self.clipped += other.clipped
        self.advantage_tokens += other.advantage_tokens
        self.partials.merge(other.partials)


@dataclass(frozen=True)
class MinibatchStats:
    """The off-policy statistics of one mini-batch index (see the module docstring).

    Floats are NaN (null in a report) for an index without a valid token;
    ``clip_fraction`` is None without advantages.
    """

    rows: int
    tokens: int
    exact_on: float
    mean_abs_z: float
    mean_z: float
    k3: float
    clip_fraction: float | None
    ess: float


def minibatch_sums(
    z: Tensor,
    mask: Tensor,
    minibatch: Tensor,
    advantages: Tensor | None = None,
    clip: tuple[float, float] = (0.2, 0.28),
) -> dict[int, MinibatchSums]:
    """The sums of each mini-batch index present in a chunk of rows.

    Args:
        z: [B, T] float, log-ratio (any value at masked positions).
        mask: [B, T] bool, valid tokens.
        minibatch: [B] int64, each row's mini-batch index.
        advantages: [B, T] float or None; None leaves ``clipped`` and
            ``advantage_tokens`` at 0.
        clip: (eps_low, eps_high), the token clip band.

    Returns:
        index -> :class:`MinibatchSums`, indices in increasing order.
    """
    lengths = mask.sum(dim=1)
    clipped_rows = None
    if advantages is not None:
        # the same per-row count as ratios.token.clip_fraction
        clipped_rows = ppo_row_sums(z, advantages, mask, clip)[0]
    exact_rows = ((z == 0) & mask).sum(dim=1)
    sums: dict[int, MinibatchSums] = {}
    for index in torch.unique(minibatch).tolist():
        rows = minibatch == index
        # is_threshold only sets the 'outside' count, which this table does not show
        part = MinibatchSums(
            rows=int(rows.sum()),
            exact_on=int(exact_rows[rows].sum()),
            partials=mismatch_partials(z[rows], mask[rows]),
        )
        if clipped_rows is not None:
            part.clipped = int(clipped_rows[rows].sum())
            part.advantage_tokens = int(lengths[rows].sum())
        sums[int(index)] = part
    return sums


def minibatch_statistics(sums: MinibatchSums) -> MinibatchStats:
    """The statistics of one index from its (merged) sums."""
    n = sums.partials.tokens
    if n == 0:
        nan = math.nan
        return MinibatchStats(sums.rows, 0, nan, nan, nan, nan, None, nan)
    stats = mismatch_statistics(sums.partials)
    return MinibatchStats(
        rows=sums.rows,
        tokens=n,
        exact_on=sums.exact_on / n,
        mean_abs_z=stats.abs_diff,
        # k1 is the token mean of -z; 0.0 - keeps an on-policy mean at 0 rather than -0
        mean_z=0.0 - stats.k1,
        k3=stats.k3,
        clip_fraction=sums.clipped / sums.advantage_tokens if sums.advantage_tokens else None,
        ess=stats.ess,
    )
