"""PPO-style clipped surrogate and clip fraction for any ratio signal (DESIGN 3.3).

The same functions serve the token ratio (``--clip``), the sequence-level ratio of
GSPO/GMPO/TEPO and the Kalman-filtered ratio of KPO (``--seq-clip``): a variant only
changes which log-ratio is passed in and which clip band applies.
"""

from __future__ import annotations

import torch
from torch import Tensor


def ppo_clip_mask(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip: tuple[float, float] = (0.2, 0.28)
) -> Tensor:
    """Tokens whose term min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) has zero gradient.

    That happens when the clipped branch is the minimum and is constant: A > 0 with
    r > 1 + eps_high, or A < 0 with r < 1 - eps_low (KPO Eq. 1-2; PPO).

    Args:
        log_ratio: [B, T] float, log r.
        advantages: [B, T] float.
        mask: [B, T] bool.
        clip: (eps_low, eps_high).

    Returns:
        [B, T] bool, False at masked positions.

    >>> z = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    >>> a = torch.tensor([[1.0, -1.0, 1.0]])
    >>> ppo_clip_mask(z, a, torch.ones(1, 3, dtype=torch.bool)).tolist()
    [[True, True, False]]
    """
    eps_low, eps_high = clip
    ratio = torch.exp(log_ratio)
    clipped = ((advantages > 0) & (ratio > 1 + eps_high)) | (
        (advantages < 0) & (ratio < 1 - eps_low)
    )
    return clipped & mask


def ppo_objective_terms(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip: tuple[float, float] | None = (0.2, 0.28),
) -> Tensor:
    """Per-token objective min(r A, clip(r) A), or r A when ``clip`` is None.

    Returns:
        [B, T] float64, 0 at masked positions. The loss is minus its aggregate.
    """
    ratio = torch.exp(log_ratio.double())
    adv = advantages.double()
    terms = ratio * adv
    if clip is not None:
        eps_low, eps_high = clip
        terms = torch.minimum(terms, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    return torch.where(mask, terms, 0.0)


def token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean over all valid tokens ("token-mean" aggregation, DAPO). Scalar tensor."""
    return torch.where(mask, values, 0.0).sum() / mask.sum()


def sequence_means(values: Tensor, mask: Tensor) -> Tensor:
    """[B] mean over each sequence's valid tokens (NaN for empty rows)."""
    counts = mask.sum(dim=1)
    return torch.where(mask, values, 0.0).sum(dim=1) / counts


def seq_mean_token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean over sequences of each sequence's token mean (GRPO's aggregation). Scalar.

    Rows with no valid token are left out.
    """
    means = sequence_means(values, mask)
    return means[mask.any(dim=1)].mean()


def ppo_row_sums(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip: tuple[float, float]
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sequence sums behind the clip fraction and both surrogates, in few passes.

    Equal to summing :func:`ppo_clip_mask`, ``ppo_objective_terms(..., clip)`` and
    ``ppo_objective_terms(..., None)`` over each row, but computed in the input's
    precision with float64 accumulation, which is what a streaming analysis needs.

    Returns:
        ``(clipped [B] int64, clipped_terms [B] float64, plain_terms [B] float64)``.
    """
    eps_low, eps_high = clip
    adv = torch.where(mask, advantages, torch.zeros((), dtype=advantages.dtype))
    ratio = torch.exp(log_ratio.to(adv.dtype) if adv.is_floating_point() else log_ratio)
    plain = ratio * adv
    clipped_terms = torch.minimum(plain, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    return (
        clipped.sum(dim=1),
        clipped_terms.sum(dim=1, dtype=torch.float64),
        plain.sum(dim=1, dtype=torch.float64),
    )
