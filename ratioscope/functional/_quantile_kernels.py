"""Quantiles read from a histogram's counts, compiled (numba).

A report reads about a hundred quantiles of a small step, from histograms of 5,205
bins; :func:`ratioscope.functional.histogram.quantiles_from_counts` does it with numpy
and a Python loop per quantile (about 40 µs a histogram), this loop in a few. It is the
same arithmetic in the same order, the bin bounds read from tables that Python's own
:func:`~ratioscope.functional.histogram.bin_bounds` filled (passed in, so that this
module needs nothing of that one), and the one power taken by
the C library's ``pow`` as Python's ``**`` of two floats is, so the quantiles are the
same bits (tested on random histograms of every kind of bin). Imports numba: imported
only where :func:`ratioscope.functional._kernels.available` allows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ratioscope.functional._kernels import jit


def _read_quantiles(
    counts: Any,
    qs: Any,
    lower: float,
    upper: float,
    has_lower: bool,
    has_upper: bool,
    low_bounds: Any,
    high_bounds: Any,
    center: int,
    out: Any,
) -> None:
    """``out[j]`` the ``qs[j]``-quantile of ``counts`` ([NUM_BINS] int64; NaN if empty),
    as :func:`ratioscope.functional.histogram.quantiles_from_counts` reads it: the bin
    of the order statistic k = max(1, ceil(q n)) from the cumulative counts, geometric
    interpolation inside it (linear in the under-flow bins), clamped to [lower, upper]
    where given; ``low_bounds``/``high_bounds`` [NUM_BINS] each bin's bounds, ``center``
    the exact-zero bin."""
    size = counts.shape[0]
    cumulative = np.empty(size, dtype=np.int64)
    total = 0
    for i in range(size):
        total += counts[i]
        cumulative[i] = total
    if total == 0:
        out[:] = math.nan
        return
    for j in range(qs.shape[0]):
        k = max(1.0, float(math.ceil(qs[j] * total - 1e-9)))
        # the first bin whose cumulative count reaches k (numpy's searchsorted, "left")
        first, last = 0, size
        while first < last:
            middle = (first + last) // 2
            if cumulative[middle] < k:
                first = middle + 1
            else:
                last = middle
        index = min(first, size - 1)
        before = cumulative[index - 1] if index > 0 else 0
        inside = counts[index]
        fraction = (k - before - 0.5) / inside if inside else 0.5
        fraction = min(max(fraction, 0.0), 1.0)
        low, high = low_bounds[index], high_bounds[index]
        if index == center:
            value = 0.0
        elif math.isinf(high) or math.isinf(low):
            value = high if math.isfinite(high) else low
        elif low == 0.0 or high == 0.0:
            value = low + fraction * (high - low)
        elif low > 0:
            value = low * (high / low) ** fraction
        else:
            value = -((-low) * ((-high) / (-low)) ** fraction)
        if has_lower:
            value = max(value, lower)
        if has_upper:
            value = min(value, upper)
        out[j] = value


read_quantiles = jit(_read_quantiles)
