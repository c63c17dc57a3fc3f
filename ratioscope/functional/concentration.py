"""How concentrated a set of non-negative weights is: top shares, Gini, ESS (docs/objectives.md).

Exact forms take the values themselves; the ``*_from_bins`` forms read the fixed
log-magnitude bins of :mod:`ratioscope.functional.histogram` (counts and summed values
per bin), which merge across batches by adding, and agree with the exact forms within
the bins' relative width (about 1.16 % of a value) — every value of a bin is read as
the bin's mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ratioscope.functional import histogram as bins


def top_count(fraction: float, n: int) -> int:
    """Items in the top ``fraction`` of ``n``: ``max(1, ceil(fraction n))`` (0 for n = 0).

    >>> top_count(0.01, 250), top_count(0.2, 10), top_count(1.0, 7)
    (3, 2, 7)
    """
    if n <= 0:
        return 0
    return min(n, max(1, math.ceil(fraction * n * (1.0 - 1e-12))))


def top_share(magnitudes: Tensor, fraction: float) -> float:
    """Share of ``sum x`` held by the ``top_count(fraction, n)`` largest ``x``; exact.

    Args:
        magnitudes: [N] float, non-negative.

    Returns:
        In [0, 1]; NaN when the sum is 0 or there is no value.

    >>> top_share(torch.tensor([3.0, 1.0, 0.5, 0.5]), 0.25)
    0.6
    """
    values = magnitudes.to(torch.float64).flatten()
    total = float(values.sum())
    if values.numel() == 0 or total <= 0:
        return math.nan
    k = top_count(fraction, values.numel())
    return float(torch.topk(values, k).values.sum()) / total


def gini(magnitudes: Tensor) -> float:
    """Gini coefficient of non-negative values: ``sum_ij |x_i - x_j| / (2 n^2 mean)``.

    0 when all values are equal, ``1 - 1/n`` when one value holds everything. Computed
    from the ascending order statistics, ``(2 sum_k k x_(k)) / (n sum x) - (n + 1) / n``.

    Args:
        magnitudes: [N] float, non-negative.

    Returns:
        NaN when the sum is 0 or there is no value.

    >>> gini(torch.tensor([1.0, 1.0, 1.0])), gini(torch.tensor([0.0, 0.0, 0.0, 4.0]))
    (0.0, 0.75)
    """
    values = torch.sort(magnitudes.to(torch.float64).flatten()).values
    n = values.numel()
    total = float(values.sum())
    if n == 0 or total <= 0:
        return math.nan
    ranks = torch.arange(1, n + 1, dtype=torch.float64, device=values.device)
    return max(0.0, 2.0 * float((ranks * values).sum()) / (n * total) - (n + 1) / n)


def effective_sample_size(sum_abs: float, sum_squares: float, count: int) -> float:
    """``(sum |c|)^2 / (N sum c^2)`` in (0, 1]: 1 when every token weighs the same, 1/N
    when one token carries all; NaN without weight.

    >>> effective_sample_size(4.0, 4.0, 4), effective_sample_size(2.0, 4.0, 4)
    (1.0, 0.25)
    """
    if count == 0 or sum_squares <= 0:
        return math.nan
    return sum_abs * sum_abs / (count * sum_squares)


def magnitude_bins(magnitudes: Tensor) -> tuple[Tensor, Tensor]:
    """Counts and summed values of non-negative values in the fixed bins.

    Returns:
        ``(counts [NUM_BINS] int64, sums [NUM_BINS] float64)`` on the CPU.
    """
    values = magnitudes.to(torch.float64).flatten()
    index = bins.bin_index(values)
    counts = torch.bincount(index, minlength=bins.NUM_BINS)
    sums = torch.zeros(bins.NUM_BINS, dtype=torch.float64, device=values.device).index_add_(
        0, index, values
    )
    return counts.cpu(), sums.cpu()


def _ascending(counts: Tensor, sums: Tensor) -> tuple[Tensor, Tensor]:
    """Bins of non-negative values from the smallest up (zero bin first), non-empty only."""
    centre = bins.CENTER
    c = counts[centre:].to(torch.float64)
    s = sums[centre:].to(torch.float64)
    keep = c > 0
    return c[keep], s[keep]


def top_share_from_bins(counts: Tensor, sums: Tensor, fraction: float) -> float:
    """:func:`top_share` read from :func:`magnitude_bins`; the last bin taken in part is
    read at its mean value."""
    c, s = _ascending(counts, sums)
    n = int(c.sum())
    total = float(s.sum())
    if n == 0 or total <= 0:
        return math.nan
    remaining = float(top_count(fraction, n))
    taken = 0.0
    for count, value in zip(reversed(c.tolist()), reversed(s.tolist()), strict=True):
        if remaining <= 0:
            break
        part = min(count, remaining)
        taken += value * part / count
        remaining -= part
    return min(1.0, taken / total)


def concentration_curve_from_bins(
    counts: Tensor, sums: Tensor, fractions: Sequence[float]
) -> list[float]:
    """:func:`top_share_from_bins` at each fraction (the curve of ``plot objectives``)."""
    return [top_share_from_bins(counts, sums, f) for f in fractions]


def gini_from_bins(counts: Tensor, sums: Tensor) -> float:
    """:func:`gini` read from :func:`magnitude_bins`: a bin of ``m`` values after ``k``
    smaller ones contributes ``sum_bin * (k + (m + 1) / 2)`` to ``sum_k k x_(k)``."""
    c, s = _ascending(counts, sums)
    n = float(c.sum())
    total = float(s.sum())
    if n == 0 or total <= 0:
        return math.nan
    before = torch.cumsum(c, 0) - c
    ranked = float((s * (before + (c + 1.0) / 2.0)).sum())
    return max(0.0, 2.0 * ranked / (n * total) - (n + 1.0) / n)
