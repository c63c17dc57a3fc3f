"""Train/inference corrections: weights and masks on the engine's importance ratio
(docs/objectives.md).

The inference engine that sampled a batch (vLLM, SGLang) and the trainer that scores it
disagree on the log-probabilities of the same tokens; the corrections reweight or drop
tokens and sequences by ``rho = pi_old / pi_rollout`` (trainer over engine). Each function
returns a detached weight ``[B, T]`` that multiplies a base objective's per-token terms,
so the corrected coefficient is ``weight * base coefficient``, and the flags of the tokens
it changed. ``log_rho = log pi_old - log pi_rollout`` with 0 at masked positions.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ratioscope.errors import ParameterError


def _lengths(mask: Tensor) -> Tensor:
    return mask.sum(dim=1).to(torch.float64).clamp_min(1.0)


def _per_sequence(values: Tensor, mask: Tensor) -> Tensor:
    """[B] broadcast to [B, T] on valid tokens, 0 elsewhere."""
    return torch.where(mask, values.unsqueeze(1).expand(mask.shape), 0.0)


def _kept(keep: Tensor) -> Tensor:
    """[B, T] float64 weight: 1 where ``keep``, 0 elsewhere."""
    return keep.to(torch.float64)


def _positive(name: str, value: float) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise ParameterError(name, f"must be a finite number > 0, got {value}")
    return float(value)


def token_truncation(log_rho: Tensor, mask: Tensor, cap: float) -> tuple[Tensor, dict[str, Tensor]]:
    """Token TIS: ``w_t = min(rho_t, C)`` (truncated importance sampling).

    Returns:
        ``(weight [B, T] float64, {"truncated": rho > C})``.

    >>> log_rho = torch.log(torch.tensor([[0.5, 3.0]]))
    >>> w, f = token_truncation(log_rho, torch.ones(1, 2, dtype=torch.bool), 2.0)
    >>> w.tolist(), f["truncated"].tolist()
    ([[0.5, 2.0]], [[False, True]])
    """
    cap = _positive("cap", cap)
    rho = torch.exp(log_rho.to(torch.float64))
    truncated = (rho > cap) & mask
    return torch.where(mask, rho.clamp(max=cap), 0.0), {"truncated": truncated}


def token_mask(
    log_rho: Tensor, mask: Tensor, bounds: tuple[float, float]
) -> tuple[Tensor, dict[str, Tensor]]:
    """Token MIS / IcePop: ``w_t = rho_t`` inside ``[low, high]``, 0 outside.

    Returns:
        ``(weight, {"masked": rho outside the bounds})``.
    """
    low, high = (_positive("bounds", float(b)) for b in bounds)
    if low > high:
        raise ParameterError("bounds", f"needs low <= high, got {bounds}")
    rho = torch.exp(log_rho.to(torch.float64))
    outside = ((rho < low) | (rho > high)) & mask
    return torch.where(mask & ~outside, rho, 0.0), {"masked": outside}


def sequence_truncation(
    log_rho: Tensor, mask: Tensor, cap: float, geometric: bool = False
) -> tuple[Tensor, dict[str, Tensor]]:
    """Sequence-level IS: every token of sequence i weighted by ``min(rho_i, C)`` with
    ``rho_i = prod_t rho_t`` (or ``exp(mean_t log rho_t)`` when ``geometric``), computed
    in log space so that long products do not overflow.

    Returns:
        ``(weight, {"truncated": tokens of sequences whose rho_i > C})``.
    """
    cap = _positive("cap", cap)
    total = torch.where(mask, log_rho.to(torch.float64), 0.0).sum(dim=1)
    log_seq = total / _lengths(mask) if geometric else total
    log_weight = torch.clamp(log_seq, max=math.log(cap))
    truncated = _per_sequence(log_seq > math.log(cap), mask).bool()
    return _per_sequence(torch.exp(log_weight), mask), {"truncated": truncated}


def divergence_per_token(log_rho: Tensor, kind: str) -> Tensor:
    """Per-token estimates of KL(pi_rollout || pi_old) from ``log rho`` (Schulman's k1,
    k2, k3 with samples from the engine, as verl's rejection sampling):
    ``k1 = -log rho``, ``k2 = (log rho)^2 / 2``, ``k3 = rho - 1 - log rho``. Float64."""
    x = log_rho.to(torch.float64)
    if kind == "k1":
        return -x
    if kind == "k2":
        return 0.5 * x * x
    if kind == "k3":
        return torch.expm1(x) - x
    raise ParameterError("divergence", f"must be k1, k2 or k3, got '{kind}'")


def sequence_rejection(
    log_rho: Tensor, mask: Tensor, divergence: str, reduce: str, threshold: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """Rejection sampling by divergence (verl's ``seq_{sum,mean,max}_k{2,3}``): a sequence
    is dropped (weight 0) when the ``reduce`` (sum, mean or max) of its per-token
    divergence exceeds ``threshold``; kept sequences weigh 1.

    Returns:
        ``(weight, {"rejected": tokens of dropped sequences})``.
    """
    if reduce not in ("sum", "mean", "max"):
        raise ParameterError("reduce", f"must be sum, mean or max, got '{reduce}'")
    values = torch.where(mask, divergence_per_token(log_rho, divergence), 0.0)
    if reduce == "max":
        floor = torch.finfo(torch.float64).min
        score = torch.where(mask, values, floor).max(dim=1).values
    else:
        score = values.sum(dim=1)
        if reduce == "mean":
            score = score / _lengths(mask)
    rejected = _per_sequence(score > threshold, mask).bool()
    return _kept(mask & ~rejected), {"rejected": rejected}


def geometric_rejection(
    log_rho: Tensor, mask: Tensor, bounds: tuple[float, float]
) -> tuple[Tensor, dict[str, Tensor]]:
    """Geo-RS: drop a sequence whose geometric-mean ratio ``exp(mean_t log rho_t)`` lies
    outside ``[low, high]`` (verl's ``seq_mean_k1``; kept sequences weigh 1).

    Returns:
        ``(weight, {"rejected": tokens of dropped sequences})``.
    """
    low, high = (_positive("bounds", float(b)) for b in bounds)
    if low > high:
        raise ParameterError("bounds", f"needs low <= high, got {bounds}")
    mean_log = torch.where(mask, log_rho.to(torch.float64), 0.0).sum(dim=1) / _lengths(mask)
    outside = (mean_log < math.log(low)) | (mean_log > math.log(high))
    rejected = _per_sequence(outside, mask).bool()
    return _kept(mask & ~rejected), {"rejected": rejected}


def second_moment_mask(
    log_ratio: Tensor, mask: Tensor, threshold: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """M2PO: drop the tokens of largest ``(log r)^2`` until the mean of ``(log r)^2`` over
    the kept tokens of the batch is below ``threshold``.

    Removing the largest values first, the kept set is the ``k`` smallest values for the
    largest ``k`` whose mean is ``< threshold`` (the mean of the k smallest grows with k,
    so one sort finds it); at least the smallest value is kept (AReaL's M2PO mask).

    Returns:
        ``(weight, {"masked": dropped tokens})``; weight 1 on kept tokens.
    """
    threshold = float(threshold)
    if not threshold > 0:
        raise ParameterError("threshold", f"must be > 0, got {threshold}")
    values = log_ratio.to(torch.float64)[mask] ** 2
    n = values.numel()
    dropped = torch.zeros_like(mask)
    if n:
        ordered, order = torch.sort(values)
        counts = torch.arange(1, n + 1, dtype=torch.float64, device=values.device)
        running = torch.cumsum(ordered, 0) / counts
        keep = max(1, int((running < threshold).sum()))
        drop_flat = torch.ones(n, dtype=torch.bool, device=values.device)
        drop_flat[order[:keep]] = False
        dropped[mask] = drop_flat
    return _kept(mask & ~dropped), {"masked": dropped}


def off_policy_sequence_mask(
    behaviour_minus_current: Tensor, advantages: Tensor, mask: Tensor, delta: float
) -> tuple[Tensor, dict[str, Tensor]]:
    """DeepSeek-V3.2's off-policy sequence mask: drop a sequence with a negative advantage
    whose mean ``log(pi_behaviour / pi_theta)`` over its tokens exceeds ``delta``.

    Args:
        behaviour_minus_current: [B, T] ``log pi_behaviour - log pi_theta``.
        advantages: [B, T] float64 (its first token decides the sign of the sequence's).

    Returns:
        ``(weight, {"masked": tokens of dropped sequences})``.
    """
    drift = torch.where(mask, behaviour_minus_current.to(torch.float64), 0.0).sum(dim=1)
    drift = drift / _lengths(mask)
    negative = torch.where(mask, advantages.to(torch.float64), 0.0).sum(dim=1) < 0
    dropped = _per_sequence(negative & (drift > delta), mask).bool()
    return _kept(mask & ~dropped), {"masked": dropped}
