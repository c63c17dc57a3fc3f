"""QUATRO per-query duals and advantages, GRPO advantages beside them (docs/metrics-objectives.md).

Paper: "QUATRO: Query-Adaptive Trust Region Policy Optimization for LLM Fine-tuning",
section 3.1 (Proposition 3.1, Eq. 11-13), Eq. (15) and (19), Appendix A.2.

Per group with rewards R_1..R_N and radius delta:
``f(lam) = lam (delta + log mean_i exp(R_i / lam))`` (Eq. 19), ``lam* = argmin_{lam>0} f``,
``mu* = f(lam*) - lam* (delta + 1)`` (Eq. 12), ``A_i = (R_i - mu*) / lam* - 1`` (Eq. 15).

How it is solved: ``f'(lam) = delta - KL(p_lam || uniform)`` with ``p_lam ∝ exp(R / lam)``,
and that KL falls monotonically from ``log(N/m)`` (m = rollouts with the maximal reward)
as lam -> 0 to 0 as lam -> inf. So ``lam*`` is the root of ``KL(p_lam || u) = delta``,
which exists exactly when ``delta < log(N/m)``; it is found on ``log lam`` for all
groups at once by Newton steps safeguarded by a bisection bracket. Substituting ``mu*``
gives ``A_i = log(N p*_i)`` with ``p* = p_{lam*}``: ``exp(A_i) = pi*/pi_old`` on the
sampled rollouts (Eq. 13), the ``exp(A_i)`` average exactly 1 and
``mean_i exp(A_i) A_i = KL(p* || u) = delta``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from ratioscope.errors import ParameterError, ShapeMismatchError

#: Radii of the paper's Table 1 / Fig. 2 (default 0.01).
DELTA_SWEEP: tuple[float, ...] = (0.1, 0.01, 0.001)
#: Root finding on log(lambda): at most this many passes (the bracket spans < 60
#: e-folds, so even pure bisection reaches float64 resolution), stopping once every
#: group's step or bracket is below the tolerance (relative precision of lambda).
_MAX_STEPS = 100
_TOLERANCE = 1e-13


class QuatroDuals(NamedTuple):
    """Result of :func:`quatro_duals`; unpacks as ``lam, mu, adv, degenerate``.

    Attributes:
        lam: [G] float64, lambda* (NaN for degenerate groups).
        mu: [G] float64, mu* (NaN for degenerate groups).
        adv: [B] float64, QUATRO advantage A_i (0 in degenerate groups).
        degenerate: [G] bool, groups without an interior optimum (all rewards equal,
            delta >= log(N/m), or no member).
    """

    lam: Tensor
    mu: Tensor
    adv: Tensor
    degenerate: Tensor


@dataclass(frozen=True)
class _Padded:
    """Rewards laid out as [G, N_max] (row g = group g), with the way back."""

    shifted: Tensor  # R - max_g R (<= 0), -inf on padding
    valid: Tensor  # [G, N_max] bool
    top: Tensor  # [G] max reward (0 for empty groups)
    size: Tensor  # [G] float64 group sizes
    rows: Tensor  # [B] row of each rollout
    columns: Tensor  # [B] column of each rollout


def _check_inputs(rewards: Tensor, group: Tensor) -> int:
    if rewards.ndim != 1:
        raise ShapeMismatchError(None, "rewards", rewards.shape, "group", group.shape, "[B]")
    if group.shape != rewards.shape:
        raise ShapeMismatchError(None, "group", group.shape, "rewards", rewards.shape, "[B]")
    if group.dtype.is_floating_point or group.dtype == torch.bool:
        raise ParameterError(
            "group", f"must be integers, got dtype {group.dtype}", subject="group ids"
        )
    if rewards.numel() == 0:
        return 0
    if int(group.min()) < 0:
        raise ParameterError(
            "group", f"must be in 0..G-1, found {int(group.min())}", subject="group ids"
        )
    if not bool(torch.isfinite(rewards).all()):
        bad = int((~torch.isfinite(rewards)).sum())
        raise ParameterError("rewards", f"must be finite, found {bad} non-finite value(s)")
    return int(group.max()) + 1


def _pad(rewards: Tensor, group: Tensor, n_groups: int) -> _Padded:
    device = rewards.device
    values = rewards.to(torch.float64)
    group = group.to(device=device, dtype=torch.long)
    sizes = torch.bincount(group, minlength=n_groups)
    order = torch.argsort(group, stable=True)
    starts = torch.cumsum(sizes, 0) - sizes
    columns = torch.empty_like(group)
    columns[order] = torch.arange(group.numel(), device=device) - starts[group[order]]
    width = max(int(sizes.max()) if n_groups else 0, 1)
    padded = torch.full((n_groups, width), -math.inf, dtype=torch.float64, device=device)
    padded[group, columns] = values
    valid = torch.zeros((n_groups, width), dtype=torch.bool, device=device)
    valid[group, columns] = True
    top = padded.max(dim=1).values
    top = torch.where(sizes > 0, top, 0.0)
    return _Padded(padded - top.unsqueeze(1), valid, top, sizes.to(torch.float64), group, columns)


def _log_weights(shifted: Tensor, valid: Tensor, lam: Tensor) -> tuple[Tensor, Tensor]:
    """``log p_lam`` ([G, N] with -inf on padding) and ``log sum_i exp(D_i / lam)`` ([G])."""
    scaled = torch.where(valid, shifted / lam.unsqueeze(1), -math.inf)
    log_total = torch.logsumexp(scaled, dim=1)
    return scaled - log_total.unsqueeze(1), log_total


def _kl_and_slope(padded: _Padded, log_lam: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per row: ``KL(p_lam || u)``, its derivative in ``log lam`` and ``log sum exp(D/lam)``.

    With ``x = D / lam``: ``KL = log N + E_p[x] - log sum exp(x)`` and
    ``dKL / d log(lam) = -Var_p(x)`` (so ``f''(lam) = Var_p(R) / lam^3 > 0``).
    """
    scaled = padded.shifted / torch.exp(log_lam).unsqueeze(1)  # -inf stays on padding
    log_total = torch.logsumexp(scaled, dim=1)
    p = torch.exp(scaled - log_total.unsqueeze(1))
    x = torch.where(padded.valid, scaled, 0.0)
    mean_x = (p * x).sum(dim=1)
    kl = torch.log(padded.size.clamp_min(1.0)) + mean_x - log_total
    variance = (p * (x - mean_x.unsqueeze(1)) ** 2).sum(dim=1)
    return kl.clamp_min(0.0), -variance, log_total


def _solve(padded: _Padded, delta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """lambda*, mu* and degenerate flags for every row; ``delta`` is [G] (one per row):
    one compiled loop per group on the CPU (:mod:`ratioscope.functional._quatro_kernels`,
    within 1e-12 of the tensor code at the paper's radii; below them the rounding of KL
    near delta bounds both), else :func:`_solve_torch`."""
    from ratioscope.functional import _kernels

    if not _kernels.can_take(padded.shifted, delta, dtypes=(torch.float64,)):
        return _solve_torch(padded, delta)
    from ratioscope.functional import _quatro_kernels

    rows = padded.shifted.shape[0]
    lam = torch.empty(rows, dtype=torch.float64)
    mu = torch.empty(rows, dtype=torch.float64)
    degenerate = torch.empty(rows, dtype=torch.bool)
    _quatro_kernels.solve_groups(
        padded.shifted.contiguous().numpy(), padded.valid.contiguous().numpy(),
        padded.size.contiguous().numpy(), padded.top.double().contiguous().numpy(),
        delta.contiguous().numpy(), _MAX_STEPS, _TOLERANCE,
        lam.numpy(), mu.numpy(), degenerate.numpy(),
    )  # fmt: skip
    return lam, mu, degenerate


def _solve_torch(padded: _Padded, delta: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_solve` by tensor code (any device; the reference).

    Root of ``KL(p_lam || u) = delta`` in ``log lam`` by Newton's method kept inside a
    bisection bracket (a step that leaves the bracket is replaced by its midpoint), all
    rows at once; typically 5-10 passes instead of ~60 for plain bisection.
    """
    shifted, valid, size = padded.shifted, padded.valid, padded.size
    n_max = torch.where(valid & (shifted == 0), 1.0, 0.0).sum(dim=1)
    kl_limit = torch.log(size.clamp_min(1.0)) - torch.log(n_max.clamp_min(1.0))
    degenerate = (size == 0) | ~(delta < kl_limit)

    finite = torch.where(valid, shifted, 0.0)
    spread = -finite.min(dim=1).values  # max - min >= 0
    below_top = torch.where(valid & (shifted < 0), shifted, -math.inf)
    gap = -below_top.max(dim=1).values  # max - (largest reward below it); inf if none
    safe_delta = torch.where(degenerate, 1.0, delta)
    safe_spread = torch.where(degenerate, 1.0, spread)
    safe_gap = torch.where(degenerate, 1.0, gap)
    # KL(p_lam || u) <= spread^2 / (8 lam^2) (Hoeffding's lemma) puts the root below hi;
    # at lam = gap / 1000 every non-maximal weight is exp(-1000) = 0 in float64, so the KL
    # equals its limit log(N/m) > delta and the root lies above lo.
    hi = torch.log(1.01 * safe_spread / torch.sqrt(8.0 * safe_delta))
    lo = torch.minimum(torch.log(safe_gap / 1000.0), hi - 1.0)
    # start from the small-step estimate KL ~ Var_u(R) / (2 lam^2)
    count = size.clamp_min(1.0)
    mean = finite.sum(dim=1) / count
    spread_u = torch.sqrt(torch.where(valid, (finite - mean.unsqueeze(1)) ** 2, 0.0).sum(1) / count)
    guess = torch.log(torch.where(degenerate, 1.0, spread_u) / torch.sqrt(2.0 * safe_delta))
    log_lam = torch.minimum(torch.maximum(guess, lo), hi)
    for _ in range(_MAX_STEPS):
        kl, slope, _ = _kl_and_slope(padded, log_lam)
        excess = kl - safe_delta
        lo = torch.where(excess > 0, log_lam, lo)
        hi = torch.where(excess > 0, hi, log_lam)
        newton = log_lam - excess / slope
        inside = (newton > lo) & (newton < hi)  # False for NaN/inf from a zero slope
        step = torch.where(inside, newton, 0.5 * (lo + hi)) - log_lam
        log_lam = log_lam + step
        if bool(((step.abs() <= _TOLERANCE) | (hi - lo <= _TOLERANCE) | degenerate).all()):
            break
    lam = torch.exp(log_lam)
    _, _, log_total = _kl_and_slope(padded, log_lam)
    # mu* = f(lam*) - lam*(delta + 1) = max R + lam* (log mean exp(D / lam*) - 1)
    mu = padded.top + lam * (log_total - torch.log(size.clamp_min(1.0)) - 1.0)
    nan = torch.full_like(lam, math.nan)
    return torch.where(degenerate, nan, lam), torch.where(degenerate, nan, mu), degenerate


def _advantages(padded: _Padded, lam: Tensor, degenerate: Tensor) -> Tensor:
    """``A_i = (R_i - mu*)/lam* - 1 = log(N p*_i)``, evaluated in the stable second form."""
    safe_lam = torch.where(degenerate, 1.0, lam)
    log_p, _ = _log_weights(padded.shifted, padded.valid, safe_lam)
    adv = log_p + torch.log(padded.size.clamp_min(1.0)).unsqueeze(1)
    adv = torch.where(degenerate.unsqueeze(1), 0.0, adv)
    return adv[padded.rows, padded.columns]


def _check_delta(delta: float) -> float:
    delta = float(delta)
    if not (delta > 0 and math.isfinite(delta)):
        raise ParameterError(
            "delta",
            f"must be positive and finite, got {delta}",
            subject="the trust-region radius delta",
        )
    return delta


def quatro_duals(rewards: Tensor, group: Tensor, delta: float = 0.01) -> QuatroDuals:
    """Per-group QUATRO dual variables and advantages, Eq. (11)-(15), (19).

    Vectorised over groups (padded to [G, N_max]), float64 throughout, log-sum-exp
    everywhere; no division by zero. A group is degenerate when ``delta >= log(N/m)``
    (m = rollouts with the group's maximal reward; this includes all rewards equal):
    then ``f`` has no interior minimum (its infimum is approached as lambda -> 0), so
    lambda* and mu* are NaN and its advantages are 0.

    Args:
        rewards: [B] float scalar rewards.
        group: [B] int group ids in 0..G-1, any order; groups may differ in size (an id
            without members is a degenerate empty group).
        delta: trust-region radius (> 0), the paper's default 0.01.

    Returns:
        :class:`QuatroDuals` ``(lam [G], mu [G], adv [B], degenerate [G])`` on the device
        of ``rewards``.

    >>> lam, mu, adv, degenerate = quatro_duals(torch.tensor([1.0, 0.0, 0.0, 0.0]),
    ...                                         torch.tensor([0, 0, 0, 0]), delta=0.01)
    >>> round(float(torch.exp(adv).mean()), 12), bool(degenerate[0])
    (1.0, False)
    >>> round(float((torch.exp(adv) * adv).mean()), 9)  # KL(p* || uniform) = delta
    0.01
    """
    return quatro_delta_sweep(rewards, group, (delta,)).single(0)


class QuatroSweep(NamedTuple):
    """:func:`quatro_delta_sweep` result: a leading axis D over the radii.

    Attributes:
        deltas: the radii, in the order given.
        lam, mu: [D, G] float64; adv: [D, B] float64; degenerate: [D, G] bool.
    """

    deltas: tuple[float, ...]
    lam: Tensor
    mu: Tensor
    adv: Tensor
    degenerate: Tensor

    def single(self, index: int) -> QuatroDuals:
        """The :class:`QuatroDuals` of one radius."""
        return QuatroDuals(self.lam[index], self.mu[index], self.adv[index], self.degenerate[index])


def quatro_delta_sweep(
    rewards: Tensor, group: Tensor, deltas: Sequence[float] = DELTA_SWEEP
) -> QuatroSweep:
    """:func:`quatro_duals` for several radii, solved in one batched bisection.

    Args:
        rewards: [B] float; group: [B] int ids in 0..G-1; deltas: radii > 0.

    Returns:
        :class:`QuatroSweep` with lam, mu [D, G], adv [D, B], degenerate [D, G].

    >>> s = quatro_delta_sweep(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), (0.1, 0.01))
    >>> bool(s.lam[0, 0] < s.lam[1, 0])  # a tighter region needs a larger lambda
    True
    """
    deltas = tuple(_check_delta(d) for d in deltas)
    if not deltas:
        raise ParameterError("deltas", "needs at least one radius", subject="the delta sweep")
    n_groups = _check_inputs(rewards, group)
    device = rewards.device
    n_d, n_b = len(deltas), rewards.numel()
    if n_groups == 0:
        empty = torch.empty((n_d, 0), dtype=torch.float64, device=device)
        return QuatroSweep(
            deltas,
            empty,
            empty.clone(),
            torch.zeros((n_d, n_b), dtype=torch.float64, device=device),
            torch.empty((n_d, 0), dtype=torch.bool, device=device),
        )
    padded = _pad(rewards, group, n_groups)
    # stack the radii as extra rows: row d * G + g is group g at radius d
    stacked = _Padded(
        padded.shifted.repeat(n_d, 1),
        padded.valid.repeat(n_d, 1),
        padded.top.repeat(n_d),
        padded.size.repeat(n_d),
        (
            padded.rows.unsqueeze(0) + n_groups * torch.arange(n_d, device=device).unsqueeze(1)
        ).reshape(-1),
        padded.columns.repeat(n_d),
    )
    delta_rows = torch.tensor(deltas, dtype=torch.float64, device=device).repeat_interleave(
        n_groups
    )
    lam, mu, degenerate = _solve(stacked, delta_rows)
    adv = _advantages(stacked, lam, degenerate)
    return QuatroSweep(
        deltas,
        lam.reshape(n_d, n_groups),
        mu.reshape(n_d, n_groups),
        adv.reshape(n_d, n_b),
        degenerate.reshape(n_d, n_groups),
    )


def grpo_advantages(rewards: Tensor, group: Tensor, eps: float = 1e-6, std_ddof: int = 0) -> Tensor:
    """GRPO group-normalised advantages ``(R_i - mean_g R) / (std_g R + eps)``.

    QUATRO Eq. (5) / GRPO. ``std_ddof=0`` (population std, ratioscope's convention) by
    default; ``std_ddof=1`` reproduces implementations that use ``torch.std`` (verl,
    TRL). A group of one rollout (or with ``std_ddof=1``, any group whose std is
    undefined) gets advantage 0.

    Args:
        rewards: [B] float; group: [B] int ids in 0..G-1.

    Returns:
        [B] float64.

    >>> grpo_advantages(torch.tensor([1.0, 0.0, 5.0]), torch.tensor([0, 0, 1]), eps=0.0).tolist()
    [1.0, -1.0, 0.0]
    """
    if std_ddof not in (0, 1):
        raise ParameterError("std_ddof", f"must be 0 or 1, got {std_ddof}")
    n_groups = _check_inputs(rewards, group)
    values = rewards.to(torch.float64)
    if n_groups == 0:
        return values.clone()
    group = group.to(device=values.device, dtype=torch.long)

    def group_sum(x: Tensor) -> Tensor:
        return torch.zeros(n_groups, dtype=torch.float64, device=values.device).index_add_(
            0, group, x
        )

    size = group_sum(torch.ones_like(values))
    mean = group_sum(values) / size.clamp_min(1.0)
    centred = values - mean[group]
    dof = size - std_ddof
    std = torch.sqrt(group_sum(centred**2) / dof.clamp_min(1.0))
    # a zero std means every centred reward of the group is 0: advantage 0, never 0/0
    return torch.where(centred == 0, 0.0, centred / (std[group] + eps))


@dataclass(frozen=True)
class BinaryAdvantageTable:
    """QUATRO and GRPO advantages of one group size as a function of #correct (rewards 0/1).

    Row c (c = 0..N) is a group with c correct rollouts (reward 1) and N - c incorrect
    (reward 0). Entries that do not exist (no correct rollout at c = 0, no incorrect one at
    c = N) are NaN; degenerate QUATRO groups have advantage 0 and NaN duals.

    Attributes:
        group_size: N.
        delta, eps, std_ddof: the parameters used.
        correct: [N + 1] int64, c.
        quatro_correct, quatro_incorrect: [N + 1] float64 QUATRO advantages.
        grpo_correct, grpo_incorrect: [N + 1] float64 GRPO advantages.
        lam, mu: [N + 1] float64 duals; degenerate: [N + 1] bool.
    """

    group_size: int
    delta: float
    eps: float
    std_ddof: int
    correct: Tensor
    quatro_correct: Tensor
    quatro_incorrect: Tensor
    grpo_correct: Tensor
    grpo_incorrect: Tensor
    lam: Tensor
    mu: Tensor
    degenerate: Tensor


def binary_advantage_table(
    group_size: int, delta: float = 0.01, eps: float = 1e-6, std_ddof: int = 0
) -> BinaryAdvantageTable:
    """Advantage vs number of correct rollouts for binary rewards (QUATRO Fig. 2 left).

    >>> t = binary_advantage_table(8, delta=0.01)
    >>> bool(t.degenerate[0]), bool(t.degenerate[8]), bool(t.degenerate[4])
    (True, True, False)
    """
    if group_size < 1:
        raise ParameterError("group_size", f"must be >= 1, got {group_size}")
    n = int(group_size)
    correct = torch.arange(n + 1)
    # group c holds c ones followed by n - c zeros
    rewards = (torch.arange(n).unsqueeze(0) < correct.unsqueeze(1)).to(torch.float64).reshape(-1)
    group = correct.repeat_interleave(n)
    lam, mu, adv, degenerate = quatro_duals(rewards, group, delta)
    grpo = grpo_advantages(rewards, group, eps, std_ddof)
    adv, grpo = adv.reshape(n + 1, n), grpo.reshape(n + 1, n)
    first, last = adv[:, 0], adv[:, -1]
    has_correct, has_incorrect = correct > 0, correct < n
    nan = torch.tensor(math.nan, dtype=torch.float64)
    return BinaryAdvantageTable(
        group_size=n,
        delta=float(delta),
        eps=float(eps),
        std_ddof=int(std_ddof),
        correct=correct,
        quatro_correct=torch.where(has_correct, first, nan),
        quatro_incorrect=torch.where(has_incorrect, last, nan),
        grpo_correct=torch.where(has_correct, grpo[:, 0], nan),
        grpo_incorrect=torch.where(has_incorrect, grpo[:, -1], nan),
        lam=lam,
        mu=mu,
        degenerate=degenerate,
    )
