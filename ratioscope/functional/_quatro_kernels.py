"""Compiled solve (numba) of QUATRO's dual, one group at a time.

The tensor code (:func:`ratioscope.functional.quatro._solve`) runs Newton's method on
every group at once: each of its 5-10 passes is a dozen tensor operations over a
[G, N] tensor, which for a training step's few groups cost far more than their
arithmetic. Here each group is one loop: the same bracket, start, Newton step and
bisection fallback, and the same tolerance, but each group stops when it has converged
(the tensor code takes a last step of at most the tolerance on the groups that converged
first), and its sums are added in order: lambda* agrees with the tensor code to about
1e-13 of its value (tests compare them).

This module imports numba; it is imported only where
:func:`ratioscope.functional._kernels.available` says the compiled path can run.
"""

from __future__ import annotations

import math
from typing import Any

from ratioscope.functional._kernels import jit


def _kl_slope_total(shifted: Any, valid: Any, size: float, log_lam: float) -> tuple:
    """(KL(p_lam || u), its derivative in log lam, log sum exp(D / lam)) of one group:
    ``shifted`` [N] D = R - max R (<= 0), ``valid`` [N]."""
    lam = math.exp(log_lam)
    top = -math.inf
    for i in range(shifted.shape[0]):
        if valid[i]:
            top = max(top, shifted[i] / lam)
    total = 0.0
    for i in range(shifted.shape[0]):
        if valid[i]:
            total += math.exp(shifted[i] / lam - top)
    log_total = top + math.log(total)
    mean_x = 0.0
    for i in range(shifted.shape[0]):
        if valid[i]:
            x = shifted[i] / lam
            mean_x += math.exp(x - log_total) * x
    variance = 0.0
    for i in range(shifted.shape[0]):
        if valid[i]:
            x = shifted[i] / lam
            variance += math.exp(x - log_total) * (x - mean_x) ** 2
    kl = max(math.log(max(size, 1.0)) + mean_x - log_total, 0.0)
    return kl, -variance, log_total


kl_slope_total = jit(_kl_slope_total)


def _solve_groups(
    shifted: Any,
    valid: Any,
    size: Any,
    top: Any,
    delta: Any,
    max_steps: int,
    tolerance: float,
    lam: Any,
    mu: Any,
    degenerate: Any,
) -> None:
    """lambda*, mu* [G] float64 (NaN where degenerate) and degenerate [G] bool of every
    row of ``shifted`` [G, N] (R - max R, -inf on padding) with ``valid`` [G, N], group
    sizes ``size`` [G] float64, maxima ``top`` [G] and radii ``delta`` [G]."""
    rows, width = shifted.shape
    for g in range(rows):
        at_top = 0.0
        smallest = 0.0
        gap = math.inf
        total = 0.0
        for i in range(width):
            if not valid[g, i]:
                continue
            value = shifted[g, i]
            at_top += value == 0.0
            smallest = min(smallest, value)
            if value < 0.0:
                gap = min(gap, -value)
            total += value
        n = max(size[g], 1.0)
        kl_limit = math.log(n) - math.log(max(at_top, 1.0))
        if size[g] == 0.0 or not (delta[g] < kl_limit):
            degenerate[g] = True
            lam[g] = math.nan
            mu[g] = math.nan
            continue
        degenerate[g] = False
        spread = -smallest
        # the bracket and the start of quatro._solve (Hoeffding's lemma above, all weight
        # on the maxima below; the small-step estimate KL ~ Var_u(R) / (2 lam^2))
        hi = math.log(1.01 * spread / math.sqrt(8.0 * delta[g]))
        lo = min(math.log(gap / 1000.0), hi - 1.0)
        mean = total / n
        squares = 0.0
        for i in range(width):
            if valid[g, i]:
                squares += (shifted[g, i] - mean) ** 2
        guess = math.log(math.sqrt(squares / n) / math.sqrt(2.0 * delta[g]))
        log_lam = min(max(guess, lo), hi)
        for _ in range(max_steps):
            kl, slope, _ = kl_slope_total(shifted[g], valid[g], size[g], log_lam)
            excess = kl - delta[g]
            if excess > 0:
                lo = log_lam
            else:
                hi = log_lam
            newton = log_lam - excess / slope if slope != 0.0 else math.nan
            inside = newton > lo and newton < hi  # False for NaN and inf
            step = (newton if inside else 0.5 * (lo + hi)) - log_lam
            log_lam = log_lam + step
            if abs(step) <= tolerance or hi - lo <= tolerance:
                break
        lam[g] = math.exp(log_lam)
        _, _, log_total = kl_slope_total(shifted[g], valid[g], size[g], log_lam)
        # mu* = f(lam*) - lam*(delta + 1) = max R + lam* (log mean exp(D / lam*) - 1)
        mu[g] = top[g] + lam[g] * (log_total - math.log(n) - 1.0)


solve_groups = jit(_solve_groups)
