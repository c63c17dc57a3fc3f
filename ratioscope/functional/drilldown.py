"""Per-sequence scores that rank a step's sequences for the run report (docs/report.md).

Each function reduces [B, T] per-token values to one number per sequence; the report
keeps the top sequences of each score. Rows without a valid token score NaN (never
ranked). The per-token inputs come from the rest of the library: log-ratios from the
batch, coefficients and their clip flags from :mod:`ratioscope.functional.objectives`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _lengths(mask: Tensor) -> Tensor:
    return mask.sum(dim=1).double()


def _per_valid(sums: Tensor, mask: Tensor) -> Tensor:
    """[B] sums / valid tokens, NaN for an empty row."""
    lengths = _lengths(mask)
    return torch.where(lengths > 0, sums / lengths.clamp(min=1), math.nan)


def sequence_k3(z: Tensor, mask: Tensor) -> Tensor:
    """[B] mean k3 = (r - 1) - z over each sequence's valid tokens (z: [B, T] log-ratio of
    the two policies, mask: [B, T] bool); the KL estimator the mismatch section reports.

    >>> sequence_k3(torch.tensor([[0.0, 0.0], [1.0, 0.0]]), torch.tensor([[1, 1], [1, 0]]).bool())
    tensor([0.0000, 0.7183], dtype=torch.float64)
    """
    z = z.double()
    k3 = torch.where(mask, torch.expm1(z) - z, 0.0)
    return _per_valid(k3.sum(dim=1), mask)


def sequence_flag_share(flags: Tensor, mask: Tensor) -> Tensor:
    """[B] share of each sequence's valid tokens whose flag is set (flags, mask: [B, T]
    bool), e.g. the tokens a clip binds on.

    >>> sequence_flag_share(torch.tensor([[True, False]]), torch.tensor([[True, True]]))
    tensor([0.5000], dtype=torch.float64)
    """
    return _per_valid((flags & mask).sum(dim=1).double(), mask)


def sequence_abs_sum(values: Tensor, mask: Tensor) -> Tensor:
    """[B] each sequence's sum of |values| over its valid tokens (values: [B, T] float;
    mask: [B, T] bool); NaN for a sequence without valid tokens.

    >>> mask = torch.tensor([[1, 1], [0, 0]]).bool()
    >>> sequence_abs_sum(torch.tensor([[1.0, -2.0], [2.0, 9.0]]), mask)
    tensor([3., nan], dtype=torch.float64)
    """
    sums = torch.where(mask, values.double().abs(), 0.0).sum(dim=1)
    return torch.where(_lengths(mask) > 0, sums, math.nan)


def sequence_abs_share(values: Tensor, mask: Tensor) -> Tensor:
    """[B] each sequence's share of the batch's sum of |values| over valid tokens
    (values: [B, T] float, e.g. gradient coefficients; mask: [B, T] bool); NaN when the
    batch sum is 0.

    >>> mask = torch.tensor([[1, 1], [1, 0]]).bool()
    >>> sequence_abs_share(torch.tensor([[1.0, -1.0], [2.0, 9.0]]), mask)
    tensor([0.5000, 0.5000], dtype=torch.float64)
    """
    sums = sequence_abs_sum(values, mask)
    total = float(sums.nansum())
    if total == 0 or not math.isfinite(total):
        return torch.full_like(sums, math.nan)
    return sums / total


def sequence_mean_drop(before: Tensor, after: Tensor, mask: Tensor) -> Tensor:
    """[B] mean of ``before - after`` over each sequence's valid tokens (before, after:
    [B, T] float, e.g. the behaviour and the current policy's entropy; mask [B, T]).

    >>> mask = torch.tensor([[True, True]])
    >>> sequence_mean_drop(torch.tensor([[2.0, 1.0]]), torch.tensor([[1.0, 1.0]]), mask)
    tensor([0.5000], dtype=torch.float64)
    """
    drop = torch.where(mask, before.double() - after.double(), 0.0)
    return _per_valid(drop.sum(dim=1), mask)


def top_rows(scores: Tensor, k: int) -> list[int]:
    """The rows of the ``k`` largest finite scores ([B] float), largest first; ties keep
    row order. NaN and infinite scores are never chosen.

    >>> top_rows(torch.tensor([0.1, float("nan"), 0.3, 0.3, -1.0]), 3)
    [2, 3, 0]
    """
    values = scores.double()
    finite = torch.isfinite(values)
    rows = torch.nonzero(finite).flatten()
    if k <= 0 or rows.numel() == 0:
        return []
    # a stable sort on -score: equal scores keep their row order
    order = torch.sort(-values[rows], stable=True).indices
    return [int(r) for r in rows[order][:k]]
