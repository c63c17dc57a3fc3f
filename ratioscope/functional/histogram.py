"""Fixed symmetric log-magnitude bins: mergeable histograms with a stated quantile error.

Quantiles of millions of tokens spread over many files cannot be exact without keeping
every value, so ratioscope counts values into fixed bins that are the same for every
file and every run; merging is then a sum of counts, exact by construction. Bins are
uniform in log10 |x| with ``PER_DECADE`` bins per decade between 10^MIN_EXP and
10^MAX_EXP on each side of zero, plus one bin for exact zeros, one under-flow bin per
sign (0 < |x| < 10^MIN_EXP) and one over-flow bin per sign (|x| >= 10^MAX_EXP).

A quantile read from these bins (geometric interpolation inside its bin) is within a
relative error of 10^(1/PER_DECADE) - 1 (about 1.16 %) of the exact sample quantile
whenever 10^MIN_EXP <= |q| < 10^MAX_EXP; below that its absolute error is at most
10^MIN_EXP; exact zeros are exact.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

PER_DECADE = 200
MIN_EXP = -9
MAX_EXP = 4
MAGNITUDE_BINS = (MAX_EXP - MIN_EXP) * PER_DECADE
#: index of the exact-zero bin; positive values lie above it, negative below
CENTER = MAGNITUDE_BINS + 2
NUM_BINS = 2 * CENTER + 1
RELATIVE_ERROR = 10 ** (1 / PER_DECADE) - 1


def bin_index(x: Tensor) -> Tensor:
    """Bin of each value.

    Args:
        x: any shape, float, finite.

    Returns:
        int64 of the same shape in [0, NUM_BINS): CENTER for 0, CENTER + 1 for the
        positive under-flow bin, CENTER + 2 + k for the k-th positive magnitude bin,
        NUM_BINS - 1 for the positive over-flow bin, mirrored below CENTER.

    >>> bin_index(torch.tensor([0.0, 1.0, -1.0])).tolist() == [CENTER, CENTER + 2 + 1800,
    ...     CENTER - 2 - 1800]
    True
    """
    # in place on the one float64 copy: half the memory traffic of a new tensor per step
    # (the same operations in the same order, so the same bins)
    k = x.abs().double().clamp_min_(1e-300).log10_().sub_(MIN_EXP).mul_(PER_DECADE).floor_()
    # -1: under-flow, MAGNITUDE_BINS: over-flow; small integers, exact in float64. The
    # sign (0 for a zero) places the offset on its side of CENTER: four operations where
    # a where() and a fill took six (a GPU pays a launch for each)
    offset = k.clamp_(-1, MAGNITUDE_BINS).add_(2).mul_(torch.sign(x))
    return offset.add_(CENTER).long()


@functools.cache
def bin_bounds(index: int) -> tuple[float, float]:
    """The [low, high) interval of a bin (low > high never; negative bins mirrored)."""
    if index == CENTER:
        return 0.0, 0.0
    offset = abs(index - CENTER)
    sign = 1.0 if index > CENTER else -1.0
    k = offset - 2
    if k < 0:
        low_mag, high_mag = 0.0, 10.0**MIN_EXP
    elif k >= MAGNITUDE_BINS:
        low_mag, high_mag = 10.0**MAX_EXP, math.inf
    else:
        low_mag = 10 ** (MIN_EXP + k / PER_DECADE)
        high_mag = 10 ** (MIN_EXP + (k + 1) / PER_DECADE)
    if sign > 0:
        return low_mag, high_mag
    return -high_mag, -low_mag


def histogram(x: Tensor, mask: Tensor | None = None) -> Tensor:
    """Counts of ``x[mask]`` per bin: [NUM_BINS] int64 (on the device of ``x``)."""
    values = x[mask] if mask is not None else x.reshape(-1)
    return torch.bincount(bin_index(values), minlength=NUM_BINS)


def histogram_sums(x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Counts [NUM_BINS] int64 and sums of the values [NUM_BINS] float64 per bin."""
    values = x[mask] if mask is not None else x.reshape(-1)
    index = bin_index(values)
    counts = torch.bincount(index, minlength=NUM_BINS)
    sums = torch.zeros(NUM_BINS, dtype=torch.float64, device=values.device)
    sums.index_add_(0, index, values.double())
    return counts, sums


def class_counts(index: Tensor, keep: Tensor) -> Tensor:
    """Counts per bin of the values each cell keeps, in one ``bincount`` for all cells.

    Args:
        index: [K, B] int64, the bin of each value (:func:`bin_index`).
        keep: [K, C, B] bool, the values of row k that cell (k, c) counts.

    Returns:
        [K, C, NUM_BINS] int64 on the device of ``index``.
    """
    rows, classes, _ = keep.shape
    first = torch.arange(rows * classes, device=index.device).view(rows, classes, 1) * NUM_BINS
    flat = (first + index.unsqueeze(1)).reshape(-1)
    # every value adds its keep (0 or 1): neither a boolean index nor bincount, whose
    # results' sizes a GPU makes the host wait for; integer sums, exact in any order
    counts = torch.zeros(rows * classes * NUM_BINS, dtype=torch.int64, device=index.device)
    counts.index_add_(0, flat, keep.reshape(-1).long())
    return counts.view(rows, classes, NUM_BINS)


def quantile_from_counts(
    counts: Tensor, q: float, lower: float | None = None, upper: float | None = None
) -> float:
    """The q-quantile (0 <= q <= 1) of the values counted in ``counts``.

    The quantile is the order statistic x_(k), k = max(1, ceil(q n)) (numpy's
    ``method="inverted_cdf"``); its bin is found from the cumulative counts and the
    value is interpolated geometrically by the position of k inside the bin, so the
    estimate and x_(k) share a bin (the error bound in the module docstring).
    ``lower``/``upper`` (the exact minimum and maximum, when known) clamp the result,
    which also bounds the over-flow bins. NaN when the histogram is empty.
    """
    return quantiles_from_counts(counts, (q,), lower, upper)[0]


def quantiles_from_counts(
    counts: Tensor, qs: Sequence[float], lower: float | None = None, upper: float | None = None
) -> list[float]:
    """:func:`quantile_from_counts` of every q in ``qs``, the cumulative counts summed
    once (a report reads a dozen quantiles of each histogram)."""
    # counts are integers: their cumulative sums are exact in int64, and every q's bin
    # is found in one search (a report reads a hundred quantiles a step: per-q torch
    # calls cost more than a small step's tokens)
    exact = counts.detach().cpu().numpy()
    if exact.dtype.kind != "f":  # counts of any integer type: int64 sums
        exact = exact.astype(np.int64, copy=False)
        if exact.shape == (NUM_BINS,) and _compiled_quantiles():
            return _quantiles_compiled(exact, qs, lower, upper)
    return _quantiles_numpy(exact, qs, lower, upper)


def _compiled_quantiles() -> bool:
    """Whether the compiled reading may run (numba installed and not disabled)."""
    from ratioscope.functional import _kernels

    return _kernels.available()


def _quantiles_compiled(
    exact: np.ndarray, qs: Sequence[float], lower: float | None, upper: float | None
) -> list[float]:
    """The compiled reading (:mod:`ratioscope.functional._quantile_kernels`): the same
    bits as :func:`_quantiles_numpy`, in a fraction of its time."""
    from ratioscope.functional import _quantile_kernels as kernels

    out = np.empty(len(qs), dtype=np.float64)
    low, high = _bound_tables()
    kernels.read_quantiles(
        np.ascontiguousarray(exact), np.asarray(qs, dtype=np.float64),
        0.0 if lower is None else float(lower), 0.0 if upper is None else float(upper),
        lower is not None, upper is not None, low, high, CENTER, out,
    )  # fmt: skip
    return out.tolist()


@functools.cache
def _bound_tables() -> tuple[np.ndarray, np.ndarray]:
    """[NUM_BINS] float64 the low and the high bound of every bin (:func:`bin_bounds`)."""
    bounds = [bin_bounds(index) for index in range(NUM_BINS)]
    low = np.array([b[0] for b in bounds], dtype=np.float64)
    high = np.array([b[1] for b in bounds], dtype=np.float64)
    return low, high


def _quantiles_numpy(
    exact: np.ndarray, qs: Sequence[float], lower: float | None, upper: float | None
) -> list[float]:
    """:func:`quantiles_from_counts` of int64 or float counts, with numpy and a loop over
    the quantiles (the reference of the compiled reading)."""
    cumulative = np.cumsum(exact, dtype=exact.dtype)
    total = float(cumulative[-1]) if cumulative.size else 0.0
    if total == 0:
        return [math.nan for _ in qs]
    ks = [max(1.0, math.ceil(q * total - 1e-9)) for q in qs]
    found = np.searchsorted(cumulative, np.asarray(ks, dtype=np.float64), side="left")
    indices = np.minimum(found, NUM_BINS - 1)
    befores = np.where(indices > 0, cumulative[np.maximum(indices - 1, 0)], 0).tolist()
    insides = exact[indices].tolist()
    values = []
    for k, index, before, inside in zip(ks, indices.tolist(), befores, insides, strict=True):
        fraction = (k - before - 0.5) / inside if inside else 0.5
        fraction = min(max(fraction, 0.0), 1.0)
        value = _interpolate(index, fraction)
        if lower is not None:
            value = max(value, lower)
        if upper is not None:
            value = min(value, upper)
        values.append(value)
    return values


def _interpolate(index: int, fraction: float) -> float:
    low, high = bin_bounds(index)
    if index == CENTER:
        return 0.0
    if math.isinf(high) or math.isinf(low):
        return high if math.isfinite(high) else low
    if low == 0.0 or high == 0.0:  # under-flow bins: linear
        return low + fraction * (high - low)
    if low > 0:
        return low * (high / low) ** fraction
    # negative bins run from -high_mag (low) to -low_mag (high)
    return -((-low) * ((-high) / (-low)) ** fraction)
