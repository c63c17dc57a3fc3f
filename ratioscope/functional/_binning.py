"""The bin of :mod:`ratioscope.functional.histogram` for one value, compiled (numba).

For the compiled loops that bin values as they compute them; imports numba, so it is
imported only where :func:`ratioscope.functional._kernels.available` allows.

numba's on-disk cache of a caller is keyed on the caller's own source file, not on
this one: after editing this module, delete the ``*.nbi``/``*.nbc`` files under
``ratioscope/functional/__pycache__`` (or touch the callers) so that they recompile.
"""

from __future__ import annotations

import math

import numpy as np

from ratioscope.functional import histogram as bins
from ratioscope.functional._kernels import jit

_CENTER = bins.CENTER
_MIN_EXP = float(bins.MIN_EXP)
_PER_DECADE = float(bins.PER_DECADE)
_MAGNITUDE_BINS = float(bins.MAGNITUDE_BINS)
_LOG10_2 = math.log10(2.0)
#: log10 of the mantissa m in [0.5, 1) by linear interpolation in CELLS equal cells:
#: within 3e-7 decades (6e-5 of a bin) of log10 m
_CELLS = 512
_CELL_START = 0.5 + np.arange(_CELLS + 1) / (2 * _CELLS)
_CELL_LOG = np.log10(_CELL_START)
_CELL_SLOPE = np.diff(_CELL_LOG) / np.diff(_CELL_START)
_CELL_START, _CELL_LOG = _CELL_START[:-1].copy(), _CELL_LOG[:-1].copy()
#: closer than this to a bin edge (in bins), the bin comes from log10 itself
_EDGE_MARGIN = 1e-3


def _exact_position(magnitude: float) -> float:
    return (math.log10(magnitude) - _MIN_EXP) * _PER_DECADE


_exact = jit(_exact_position)


def _bin_index(x: float) -> int:
    """:func:`ratioscope.functional.histogram.bin_index` of one finite value (or +-inf,
    which lands in an over-flow bin).

    log10 is the costly part of a bin (about half of the last pass), so the position
    ``(log10 |x| - MIN_EXP) PER_DECADE`` is first read from the exponent and a table of
    the mantissa's log10; only a position within ``_EDGE_MARGIN`` of a bin edge (one
    value in 500) is computed with log10 itself, which gives the torch formula's bin
    there too.
    """
    if x == 0.0:
        return _CENTER
    magnitude = max(abs(x), 1e-300)
    if magnitude > 1e300:  # the over-flow bin; inf has no mantissa to look up
        k = _MAGNITUDE_BINS
    else:
        mantissa, exponent = math.frexp(magnitude)
        cell = int((mantissa - 0.5) * (2 * _CELLS))
        mantissa_log = _CELL_LOG[cell] + (mantissa - _CELL_START[cell]) * _CELL_SLOPE[cell]
        position = (exponent * _LOG10_2 + mantissa_log - _MIN_EXP) * _PER_DECADE
        k = np.floor(position)  # a float, unlike math.floor
        if not (_EDGE_MARGIN < position - k < 1.0 - _EDGE_MARGIN):
            k = np.floor(_exact(magnitude))
        k = min(max(k, -1.0), _MAGNITUDE_BINS)
    offset = int(k) + 2
    return _CENTER + offset if x > 0.0 else _CENTER - offset


bin_value = jit(_bin_index)
