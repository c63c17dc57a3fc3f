"""Per-token policy-gradient coefficients of the clipping family (docs/objectives.md).

Every objective of a GRPO-style trainer is a function of the log-probabilities
``log pi_theta(y_t)`` of the sampled tokens; its gradient is
``sum_t coef_t * grad log pi_theta(y_t)``. The functions here return ``coef`` exactly,
from the tensors of one batch: the derivative of the method's objective J (the loss is
-J) with respect to each token's ``log pi_theta``, with its clipping, masking,
stop-gradients, aggregation and advantage, as the method's paper writes it.

A coefficient is returned as :class:`Coefficients`: ``values`` up to one positive
batch-wide constant ``scale`` (``1/G`` sequences for seq-mean-token-mean, ``1/N``
tokens for token-mean, ...), so ``values * scale`` is the exact gradient on that batch.
None of the statistics of the side-by-side view depends on such a constant (shares,
Gini, effective sample size, correlations, signs), and leaving it out lets batches of
different sizes be pooled.

Notation: ``z = log pi_theta - log pi_old`` (current over behaviour), ``r = exp(z)``,
``A`` the advantage broadcast over tokens, ``|o_i|`` the valid tokens of sequence i.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor

from ratioscope.errors import ParameterError, ShapeMismatchError

MaskPolicy = Literal["zero", "skip"]

Aggregation = Literal["token-mean", "seq-mean-token-mean", "token-sum"]
AGGREGATIONS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "token-sum")


@dataclass(frozen=True)
class Coefficients:
    """The per-token policy-gradient coefficient of one method on one batch.

    Attributes:
        values: [B, T] float64, ``dJ / d log pi_theta(y_t)`` divided by ``scale``; 0 at
            masked positions.
        scale: the positive batch-wide constant that ``values`` leaves out (1/G, 1/N,
            1/(G L) ...): ``values * scale`` is the exact gradient coefficient.
        flags: named [B, T] bool tensors, valid tokens on which one of the method's rules
            binds (``clip_low``, ``clip_high``, ``masked``, ``truncated`` ...), counted by
            the side-by-side view.
    """

    values: Tensor
    scale: float
    flags: dict[str, Tensor] = field(default_factory=dict)


# ------------------------------------------------------------------------ helpers
def token_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """[B] or [B, T] advantages as [B, T] float64, 0 at masked positions."""
    if advantages.shape == mask.shape:
        adv = advantages
    elif advantages.ndim == 1 and advantages.shape[0] == mask.shape[0]:
        adv = advantages.unsqueeze(1).expand(mask.shape)
    else:
        raise ShapeMismatchError(
            None, "advantages", advantages.shape, "mask", mask.shape, "[B] or [B, T]"
        )
    return torch.where(mask, adv.to(torch.float64), 0.0)


def _check_pair(z: Tensor, mask: Tensor) -> None:
    if z.shape != mask.shape or z.ndim != 2:
        raise ShapeMismatchError(None, "log_ratio", z.shape, "mask", mask.shape, "[B, T]")


def _check_clip(name: str, clip: tuple[float, float]) -> tuple[float, float]:
    low, high = (float(v) for v in clip)
    if not (0.0 <= low < 1.0 and high >= 0.0):
        raise ParameterError(name, f"needs 0 <= eps_low < 1 and eps_high >= 0, got {clip}")
    return low, high


def lengths_of(mask: Tensor) -> Tensor:
    """[B] float64 valid tokens per sequence."""
    return mask.sum(dim=1).to(torch.float64)


def row_weights(mask: Tensor, aggregation: str) -> tuple[Tensor, float]:
    """Per-token aggregation weight and the batch constant it leaves out.

    ``token-mean``: J = 1/N sum_i sum_t x_it, weight 1, scale 1/N (DAPO, TEPO Eq. 4);
    ``seq-mean-token-mean``: J = 1/G sum_i 1/|o_i| sum_t x_it, weight 1/|o_i|, scale 1/G
    (GRPO, GSPO, KPO Eq. 10); ``token-sum``: J = 1/(G L) sum_i sum_t x_it with a constant
    L (Dr. GRPO's generation budget; the dump's width T here), weight 1, scale 1/(G T).

    Returns:
        ``(weights [B, T] float64, scale)``; G counts sequences with a valid token.
    """
    if aggregation not in AGGREGATIONS:
        raise ParameterError(
            "aggregation", f"must be one of {', '.join(AGGREGATIONS)}, got '{aggregation}'"
        )
    lengths = lengths_of(mask)
    sequences = int((lengths > 0).sum())
    tokens = float(lengths.sum())
    ones = mask.to(torch.float64)
    if aggregation == "token-mean":
        return ones, 1.0 / tokens if tokens else math.nan
    if aggregation == "token-sum":
        width = mask.shape[1]
        return ones, 1.0 / (sequences * width) if sequences else math.nan
    per_row = torch.where(lengths > 0, 1.0 / lengths.clamp_min(1.0), 0.0)
    return ones * per_row.unsqueeze(1), 1.0 / sequences if sequences else math.nan


def sequence_log_ratio(z: Tensor, mask: Tensor) -> Tensor:
    """[B] float64 ``mean_t z_it`` over valid tokens (0 for an empty row): log of the
    GSPO/GMPO/TEPO sequence ratio."""
    total = torch.where(mask, z.to(torch.float64), 0.0).sum(dim=1)
    return total / lengths_of(mask).clamp_min(1.0)


def _broadcast(values: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask, values.unsqueeze(1).expand(mask.shape), 0.0)


def _ppo_clip_flags(
    ratio: Tensor, adv: Tensor, mask: Tensor, clip: tuple[float, float]
) -> tuple[Tensor, Tensor]:
    """Tokens where min(r A, clip(r) A) takes its constant branch, low and high side."""
    eps_low, eps_high = clip
    low = (adv < 0) & (ratio < 1.0 - eps_low) & mask
    high = (adv > 0) & (ratio > 1.0 + eps_high) & mask
    return low, high


# ------------------------------------------------------------------ clip family
def ppo_clip_coefficients(
    z: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip: tuple[float, float] = (0.2, 0.2),
    aggregation: str = "seq-mean-token-mean",
) -> Coefficients:
    """PPO/GRPO token clip: J = agg_t min(r A, clip(r, 1 - eps_low, 1 + eps_high) A).

    ``d/d log pi`` of the unclipped branch is ``r A``; the clipped branch is constant, so
    a token whose minimum is the clipped branch (A > 0 and r > 1 + eps_high, or A < 0 and
    r < 1 - eps_low) has coefficient 0. GRPO (DeepSeekMath Eq. 3): eps 0.2, seq-mean-
    token-mean; DAPO: clip-higher (0.2, 0.28) and token-mean; Dr. GRPO: token-sum over a
    constant length.

    Args:
        z: [B, T] float log-ratios; advantages: [B] or [B, T]; mask: [B, T] bool.
        clip: (eps_low, eps_high); aggregation: see :func:`row_weights`.

    Returns:
        :class:`Coefficients` with flags ``clip_low`` and ``clip_high``.

    >>> z = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    >>> c = ppo_clip_coefficients(z, torch.tensor([[1.0, -1.0, 1.0]]),
    ...                           torch.ones(1, 3, dtype=torch.bool), aggregation="token-mean")
    >>> [round(v, 6) for v in c.values[0].tolist()], round(c.scale, 6)
    ([0.0, 0.0, 1.1], 0.333333)
    """
    _check_pair(z, mask)
    clip = _check_clip("clip", clip)
    adv = token_advantages(advantages, mask)
    ratio = torch.exp(z.to(torch.float64))
    low, high = _ppo_clip_flags(ratio, adv, mask, clip)
    weights, scale = row_weights(mask, aggregation)
    values = torch.where(low | high | ~mask, 0.0, ratio * adv * weights)
    return Coefficients(values, scale, {"clip_low": low, "clip_high": high})


def gspo_coefficients(
    z: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip: tuple[float, float] = (3e-4, 4e-4),
) -> Coefficients:
    """GSPO (Zheng et al. 2025, Eq. 5 and its token form): the sequence ratio
    ``s_i = exp(mean_t z_it)`` in place of r, clipped per sequence.

    J = 1/G sum_i 1/|o_i| sum_t min(s_it A_it, clip(s_it) A_it) with
    ``s_it = sg[s_i] pi_theta(y_t) / sg[pi_theta(y_t)]`` (GSPO-token, equal to GSPO when
    the advantage is constant over the sequence): coefficient ``s_i A_it / |o_i|``, 0
    where the clipped branch binds. Defaults: the paper's eps 3e-4 / 4e-4.

    Returns:
        :class:`Coefficients` (scale 1/G) with flags ``clip_low``, ``clip_high``.
    """
    _check_pair(z, mask)
    clip = _check_clip("clip", clip)
    adv = token_advantages(advantages, mask)
    seq_ratio = _broadcast(torch.exp(sequence_log_ratio(z, mask)), mask)
    low, high = _ppo_clip_flags(seq_ratio, adv, mask, clip)
    weights, scale = row_weights(mask, "seq-mean-token-mean")
    values = torch.where(low | high | ~mask, 0.0, seq_ratio * adv * weights)
    return Coefficients(values, scale, {"clip_low": low, "clip_high": high})


def gmpo_coefficients(
    z: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip: tuple[float, float] = (0.4, 0.4),
) -> Coefficients:
    """GMPO (Zhao et al. 2025): geometric mean of the token terms, clipped in log space.

    Per token ``z~_t = sgn(A_t) min(sgn(A_t) z_t, sgn(A_t) clip(z_t, -eps_low, eps_high))``;
    the sequence ratio is ``R_i = exp(mean_t z~_t)`` and J = 1/G sum_i Abar_i R_i with
    ``Abar_i`` the sequence's mean advantage (verl's ``geo_mean`` loss; GMPO's advantage is
    per sequence, to which this reduces). A token whose clipped branch binds (A > 0 and
    z > eps_high, or A < 0 and z < -eps_low) is constant in z~ and gets coefficient 0;
    every other token gets ``Abar_i R_i / |o_i|``. Defaults: the paper's clip range
    (e^-0.4, e^0.4).

    Returns:
        :class:`Coefficients` (scale 1/G) with flags ``clip_low``, ``clip_high``.
    """
    _check_pair(z, mask)
    eps_low, eps_high = (float(v) for v in clip)
    if eps_low < 0 or eps_high < 0:
        raise ParameterError("clip", f"log-space bounds must be >= 0, got {clip}")
    adv = token_advantages(advantages, mask)
    z64 = torch.where(mask, z.to(torch.float64), 0.0)
    low = (adv < 0) & (z64 < -eps_low) & mask
    high = (adv > 0) & (z64 > eps_high) & mask
    clipped_z = torch.where(low, -eps_low, torch.where(high, eps_high, z64))
    seq_ratio = torch.exp(sequence_log_ratio(clipped_z, mask))
    mean_adv = adv.sum(dim=1) / lengths_of(mask).clamp_min(1.0)
    per_row = mean_adv * seq_ratio / lengths_of(mask).clamp_min(1.0)
    values = torch.where(low | high, 0.0, _broadcast(per_row, mask))
    _, scale = row_weights(mask, "seq-mean-token-mean")
    return Coefficients(values, scale, {"clip_low": low, "clip_high": high})


def cispo_coefficients(
    z: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip: tuple[float, float] = (1.0, 0.2),
    aggregation: str = "token-mean",
) -> Coefficients:
    """CISPO (MiniMax-M1, Eq. 4): J = agg_t sg[clip(r, 1 - eps_low, 1 + eps_high)] A log pi.

    The truncated ratio is a stop-gradient weight on ``A log pi``, so no token loses its
    gradient: the coefficient is ``clip(r) A`` everywhere. ``eps_low >= 1`` leaves the
    lower side open (the paper sets no lower bound); defaults as verl's CISPO example
    (``clip_ratio_low`` 10, ``clip_ratio_high`` 0.2: the weight is capped at 1.2).

    Returns:
        :class:`Coefficients` with flags ``truncated_low``, ``truncated_high`` (tokens
        whose weight was cut).
    """
    _check_pair(z, mask)
    eps_low, eps_high = (float(v) for v in clip)
    if eps_low < 0 or eps_high < 0:
        raise ParameterError("clip", f"needs eps_low >= 0 and eps_high >= 0, got {clip}")
    adv = token_advantages(advantages, mask)
    ratio = torch.exp(z.to(torch.float64))
    lower = 1.0 - eps_low
    low = (ratio < lower) & mask if lower > 0 else torch.zeros_like(mask)
    high = (ratio > 1.0 + eps_high) & mask
    weight = ratio.clamp(max=1.0 + eps_high)
    if lower > 0:
        weight = weight.clamp(min=lower)
    weights, scale = row_weights(mask, aggregation)
    values = torch.where(mask, weight * adv * weights, 0.0)
    return Coefficients(values, scale, {"truncated_low": low, "truncated_high": high})


def sapo_coefficients(
    z: Tensor,
    advantages: Tensor,
    mask: Tensor,
    tau: tuple[float, float] = (1.0, 1.05),
    aggregation: str = "seq-mean-token-mean",
) -> Coefficients:
    """SAPO (Qwen, Soft Adaptive Policy Optimization): a soft gate in place of the clip.

    J = agg_t f(r) A with ``f(r) = 4/tau sigmoid(tau (r - 1))``; ``tau`` is ``tau_pos``
    for A > 0 and ``tau_neg`` for A < 0. ``d f(r)/d log pi = 4 s (1 - s) r`` with
    ``s = sigmoid(tau (r - 1))``, which is ``r`` at r = 1 and decays smoothly away from
    it; no token is cut, so there are no flags.

    Args:
        tau: (tau_pos, tau_neg), both > 0.
    """
    _check_pair(z, mask)
    tau_pos, tau_neg = (float(v) for v in tau)
    if tau_pos <= 0 or tau_neg <= 0:
        raise ParameterError("tau", f"temperatures must be > 0, got {tau}")
    adv = token_advantages(advantages, mask)
    ratio = torch.exp(z.to(torch.float64))
    temperature = torch.where(adv > 0, tau_pos, tau_neg)
    gate = torch.sigmoid(temperature * (ratio - 1.0))
    weights, scale = row_weights(mask, aggregation)
    values = torch.where(mask, 4.0 * gate * (1.0 - gate) * ratio * adv * weights, 0.0)
    return Coefficients(values, scale)


# ------------------------------------------------------------------ the papers
def kalman_gradient_weights(
    outer: Tensor, mask: Tensor, q: float, v: float, p0: float = 0.0, mask_policy: str = "zero"
) -> Tensor:
    """Back-propagate per-token weights through the causal Kalman filter.

    The filter is linear: ``rho_s = sum_{t <= s} K_t prod_{u=t+1..s} (1 - K_u) z_t``
    (KPO Eqs. 6-9, gains K from :func:`~ratioscope.functional.kalman.kalman_gains`), so
    ``sum_s outer_s d rho_s / d z_t = K_t b_t`` with the reverse recurrence
    ``b_t = outer_t + (1 - K_{t+1}) b_{t+1}``. Under ``mask_policy="skip"`` the masked
    tokens are invisible and the gains are indexed by valid tokens, so the recurrence runs
    over each row's valid tokens only.

    Args:
        outer: [B, T] float64, ``dJ/d rho_s`` (0 at masked positions).
        mask: [B, T] bool.

    Returns:
        [B, T] float64 ``dJ/d z_t``, 0 at masked positions.
    """
    from ratioscope.functional.kalman import kalman_gains

    rows, length = mask.shape
    if rows == 0 or length == 0:
        return torch.zeros(mask.shape, dtype=torch.float64, device=mask.device)
    if mask_policy == "skip":
        # valid tokens to the front (stable), as the filter sees them; back afterwards
        order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)
        packed_mask = torch.gather(mask, 1, order)
        packed = kalman_gradient_weights(
            torch.gather(outer, 1, order), packed_mask, q, v, p0, "zero"
        )
        out = torch.zeros_like(packed)
        out.scatter_(1, order, packed)
        return torch.where(mask, out, 0.0)
    gains = kalman_gains(length, q, v, p0).to(device=mask.device)
    keep = 1.0 - gains
    back = torch.zeros(rows, dtype=torch.float64, device=mask.device)
    out = torch.zeros(rows, length, dtype=torch.float64, device=mask.device)
    for t in range(length - 1, -1, -1):
        carried = back * keep[t + 1] if t + 1 < length else back
        back = outer[:, t] + carried
        out[:, t] = gains[t] * back
    return torch.where(mask, out, 0.0)


def kpo_coefficients(
    z: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip: tuple[float, float] | None = (3e-4, 4e-4),
    q: float = 1e-6,
    v: float = 1.0,
    p0: float = 0.0,
    mask_policy: MaskPolicy = "zero",
) -> Coefficients:
    """KPO Eq. (10): GRPO's objective on the Kalman-filtered ratio ``r~_s = exp(rho_s)``.

    J = 1/G sum_i 1/|o_i| sum_s min(r~_s A_s, clip(r~_s) A_s), with ``rho`` a causal
    filter of z, so the gradient reaches token t through every later filtered ratio:
    ``coef_t = sum_{s >= t} [s not clipped] A_s r~_s / |o_i| * d rho_s / d z_t``
    (:func:`kalman_gradient_weights`). ``clip=None`` is the unclipped line of Eq. (10).
    Defaults as the analysis (Q = 1e-6, V = 1, P0 = 0, the sequence band 3e-4 / 4e-4).

    Returns:
        :class:`Coefficients` (scale 1/G) with flags ``clip_low``, ``clip_high`` (tokens
        s whose own filtered term is clipped).
    """
    from ratioscope.functional.kalman import kalman_filter

    _check_pair(z, mask)
    adv = token_advantages(advantages, mask)
    rho = kalman_filter(z.to(torch.float64), mask, q=q, v=v, p0=p0, mask_policy=mask_policy)
    filtered = torch.exp(rho)
    if clip is None:
        low = high = torch.zeros_like(mask)
    else:
        low, high = _ppo_clip_flags(filtered, adv, mask, _check_clip("clip", clip))
    weights, scale = row_weights(mask, "seq-mean-token-mean")
    outer = torch.where(low | high | ~mask, 0.0, filtered * adv * weights)
    values = kalman_gradient_weights(outer, mask, q, v, p0, mask_policy)
    return Coefficients(values, scale, {"clip_low": low, "clip_high": high})


def tepo_coefficients(
    z: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip: tuple[float, float] = (3e-4, 4e-4),
    entropy: Tensor | None = None,
    old_entropy: Tensor | None = None,
    beta: float = 1e-3,
) -> Coefficients:
    """TEPO Eq. (4): token-mean of ``min(w_i A, clip(w_i) A) - beta KL M`` with the
    sequence likelihood ``w_i = exp(mean_t z_it)`` (no stop-gradient).

    Every token term of sequence i depends on all its tokens through ``w_i``, so token
    t's coefficient is ``w_i / |o_i| sum_{s} [s not clipped] A_s`` (``w_i A_i`` for a
    sequence-level advantage). The KL part, on tokens of the mask ``M = [A > 0 and
    dH < 0]`` (``dH = entropy - old_entropy``), uses the k3 estimate of
    KL(pi_theta || pi_old), ``1/r - 1 + log r``, whose derivative is ``1 - 1/r``: it adds
    ``-beta (1 - 1/r)``. Without entropies the KL part is left out (flag ``kl_mask``
    then empty). Defaults: beta = 1e-3 (the paper's Qwen2.5-7B setting); the clip band
    is not stated by the paper (the sequence band of the analysis).

    Returns:
        :class:`Coefficients` (scale 1/N) with flags ``clip_low``, ``clip_high``,
        ``kl_mask``.
    """
    _check_pair(z, mask)
    clip = _check_clip("clip", clip)
    adv = token_advantages(advantages, mask)
    seq_ratio = torch.exp(sequence_log_ratio(z, mask))
    broadcast = _broadcast(seq_ratio, mask)
    low, high = _ppo_clip_flags(broadcast, adv, mask, clip)
    kept = torch.where(low | high | ~mask, 0.0, adv).sum(dim=1)
    per_row = seq_ratio * kept / lengths_of(mask).clamp_min(1.0)
    values = _broadcast(per_row, mask)
    kl_mask = torch.zeros_like(mask)
    if entropy is not None and old_entropy is not None and beta != 0:
        delta_h = entropy.to(torch.float64) - old_entropy.to(torch.float64)
        kl_mask = (adv > 0) & (delta_h < 0) & mask
        ratio = torch.exp(z.to(torch.float64))
        values = values - torch.where(kl_mask, beta * (1.0 - 1.0 / ratio), 0.0)
    _, scale = row_weights(mask, "token-mean")
    return Coefficients(values, scale, {"clip_low": low, "clip_high": high, "kl_mask": kl_mask})


def quatro_coefficients(
    z: Tensor, quatro_advantages: Tensor, mask: Tensor, n_queries: int
) -> Coefficients:
    """QUATRO Eq. (14): L_q = -sum_i s_i (A^Q_i - sg[log s_i]), mean over queries.

    ``s_i`` is the sequence ratio; ratioscope takes GSPO's length-normalised
    ``exp(mean_t z_it)`` (Remark 3.4 recovers GSPO from Eq. 14), so
    ``coef_t = s_i (A^Q_i - log s_i) / |o_i|``. No clipping.

    Args:
        quatro_advantages: [B] float, A^Q of Eq. (15) (0 in degenerate groups).
        n_queries: groups in the batch (the scale is 1/n_queries).
    """
    _check_pair(z, mask)
    log_s = sequence_log_ratio(z, mask)
    adv = quatro_advantages.to(device=z.device, dtype=torch.float64)
    per_row = torch.exp(log_s) * (adv - log_s) / lengths_of(mask).clamp_min(1.0)
    return Coefficients(_broadcast(per_row, mask), 1.0 / n_queries if n_queries else math.nan)


def fpa_coefficients(weight_log_probs: Tensor, correct: Tensor, mask: Tensor) -> Coefficients:
    """FPA Eq. (3) (and Off-RL Eq. 2 with the current policy's log-probs):
    ``coef_t = R_i pi_hat(y_i | x)^(1/|y_i|) / |y_i|`` with R = +1 correct, -1 incorrect
    and the future policy a detached weight; scale 1/B (a mean over the batch).

    Args:
        weight_log_probs: [B, T] log-probs of the weighting policy (``pi_hat``: exact from
            logits or the approximation, see :mod:`ratioscope.functional.fpa`).
        correct: [B] bool.
    """
    _check_pair(weight_log_probs, mask)
    reward = torch.where(correct.to(weight_log_probs.device).bool(), 1.0, -1.0).to(torch.float64)
    mean_log = sequence_log_ratio(weight_log_probs, mask)
    per_row = reward * torch.exp(mean_log) / lengths_of(mask).clamp_min(1.0)
    rows = int((lengths_of(mask) > 0).sum())
    return Coefficients(_broadcast(per_row, mask), 1.0 / rows if rows else math.nan)


# ------------------------------------------------------------- advantage schemes
def dr_grpo_advantages(rewards: Tensor, group: Tensor) -> Tensor:
    """Dr. GRPO (Liu et al. 2025, Eq. 4): ``R_i - mean_g R``, no division by the std.

    Args:
        rewards: [B] float; group: [B] int ids 0..G-1.

    Returns:
        [B] float64.

    >>> adv = dr_grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 5.0]), torch.tensor([0, 0, 0, 1]))
    >>> [round(a, 6) for a in adv.tolist()]
    [0.666667, -0.333333, -0.333333, 0.0]
    """
    values = rewards.to(torch.float64)
    group = group.to(device=values.device, dtype=torch.long)
    n_groups = int(group.max()) + 1 if group.numel() else 0
    total = torch.zeros(n_groups, dtype=torch.float64, device=values.device).index_add_(
        0, group, values
    )
    size = torch.zeros(n_groups, dtype=torch.float64, device=values.device).index_add_(
        0, group, torch.ones_like(values)
    )
    return values - (total / size.clamp_min(1.0))[group]


def zero_variance_groups(rewards: Tensor, group: Tensor) -> tuple[int, int]:
    """``(groups whose rewards are all equal, groups)``: their advantages are 0 under
    GRPO, Dr. GRPO and QUATRO alike (DAPO's dynamic sampling drops them). Group ids
    without a member count in neither.

    Args:
        rewards: [B] float, finite; group: [B] int ids (any device).

    >>> zero_variance_groups(torch.tensor([1.0, 1.0, 0.0, 2.0]), torch.tensor([0, 0, 1, 1]))
    (1, 2)
    """
    values = rewards.to(torch.float64)
    group = group.to(device=values.device, dtype=torch.long)
    n_groups = int(group.max()) + 1 if group.numel() else 0

    def reduce(how: str, fill: float) -> Tensor:
        out = torch.full((n_groups,), fill, dtype=torch.float64, device=values.device)
        return out.scatter_reduce(0, group, values, how)

    present = torch.bincount(group, minlength=n_groups) > 0
    equal = (reduce("amax", -math.inf) == reduce("amin", math.inf)) & present
    return int(equal.sum()), int(present.sum())
