"""The bin of :mod:`ratioscope.functional.histogram` for one value, compiled (numba).

For the compiled loops that bin values as they compute them; imports numba, so it is
imported only where :func:`ratioscope.functional._kernels.available` allows.

numba's on-disk cache of a caller is keyed on the caller's own source file, not on
this one: after editing this module, delete the ``*.nbi``/``*.nbc`` files under
``ratioscope/functional/__pycache__`` (or touch the callers) so that they recompile.
"""

from __future__ import annotations

import math
from typing import Any

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

#: the magnitude bins' offset (k + 2) of every cell of 2^-_TABLE_BITS of an octave
#: whose values all lie more than _EDGE_MARGIN from a bin edge, indexed by the high
#: bits of the float64 (exponent and first mantissa bits); _NEAR_EDGE for the others
_TABLE_BITS = 12
_SHIFT = 52 - _TABLE_BITS
_NEAR_EDGE = -1
#: the table's octaves: from below 10^MIN_EXP (every magnitude below is under-flow) to
#: above 10^MAX_EXP (every magnitude above is over-flow)
_LOW_OCTAVE = math.floor(math.log2(10.0**bins.MIN_EXP)) - 1
_HIGH_OCTAVE = math.ceil(math.log2(10.0**bins.MAX_EXP)) + 1


def _cell_offsets() -> tuple[np.ndarray, int]:
    """(offsets [cells] int16, the first cell's key: the magnitude's bits >> _SHIFT)."""
    octaves = np.arange(_LOW_OCTAVE, _HIGH_OCTAVE)
    steps = np.arange((1 << _TABLE_BITS) + 1) / (1 << _TABLE_BITS)
    # each cell's [low, high) from the exact float64 boundaries 2^e (1 + c / 2^bits)
    bounds = np.ldexp(1.0 + steps[None, :], octaves[:, None])
    position = (np.log10(bounds) - _MIN_EXP) * _PER_DECADE
    low = np.floor(position[:, :-1] - _EDGE_MARGIN)
    high = np.floor(position[:, 1:] + _EDGE_MARGIN)
    offsets = np.clip(low, -1.0, _MAGNITUDE_BINS) + 2
    cells = np.where(low == high, offsets, _NEAR_EDGE).ravel()
    # one slot before the cells for every smaller magnitude (under-flow, and zero, whose
    # sign puts it in the centre), one after for every larger one (over-flow, +-inf)
    table = np.concatenate([[1], cells, [_MAGNITUDE_BINS + 2]]).astype(np.int16)
    first = int(np.float64(2.0**_LOW_OCTAVE).view(np.int64)) >> _SHIFT
    return table, first


_CELL_OFFSETS, _FIRST_KEY = _cell_offsets()
_LAST_CELL = _CELL_OFFSETS.shape[0] - 2
_ABS_BITS = np.int64(0x7FFFFFFFFFFFFFFF)


def _bin_near_edge(x: float) -> int:
    """The bin of a non-zero value from its position ``(log10 |x| - MIN_EXP)
    PER_DECADE``, read from the exponent and a table of the mantissa's log10; only a
    position within ``_EDGE_MARGIN`` of a bin edge is computed with log10 itself,
    which gives the torch formula's bin there too."""
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


_near_edge = jit(_bin_near_edge)


def _cell_bin(x: float) -> int:
    """The bin of ``x`` looked up by its high bits (:data:`_CELL_OFFSETS`: one cell is
    1/4,096 of an octave, about 1/68 of a bin), or ``_NEAR_EDGE`` (no bin: bins start
    at 0) where its cell lies within ``_EDGE_MARGIN`` of a bin edge."""
    key = ((np.float64(x).view(np.int64) & _ABS_BITS) >> _SHIFT) - _FIRST_KEY
    # clamped, not branched on: zeros and signs follow no pattern in a row, and a
    # mispredicted branch costs more than the whole look-up
    offset = int(_CELL_OFFSETS[min(max(key, -1), _LAST_CELL) + 1])
    if offset == _NEAR_EDGE:
        return _NEAR_EDGE
    sign = int(x > 0.0) - int(x < 0.0)
    return _CENTER + sign * offset


cell_bin = jit(_cell_bin)


def _cell_bins_into(values: Any, stop: int, out: Any) -> None:
    """out[t] = :func:`_cell_bin` of values[t] (read as float64) for t < ``stop``: one
    loop without branches, which the compiler vectorises (about 0.7 ns a value, against
    3-4 ns for :func:`_bin_index` one token at a time inside a longer loop). A loop
    then takes each bin with :func:`bin_from_cell`."""
    for t in range(stop):
        out[t] = cell_bin(np.float64(values[t]))


cell_bins_into = jit(_cell_bins_into)


def _bin_from_cell(cell: int, x: float) -> int:
    """The bin of ``x`` from its cell look-up ``cell`` (:func:`_cell_bin` of ``x``): the
    cell's bin, or within ``_EDGE_MARGIN`` of an edge :func:`_bin_near_edge`. The same
    bin as :func:`_bin_index`."""
    return _near_edge(x) if cell == _NEAR_EDGE else cell


bin_from_cell = jit(_bin_from_cell)


def _bin_index(x: float) -> int:
    """:func:`ratioscope.functional.histogram.bin_index` of one finite value (or +-inf,
    which lands in an over-flow bin).

    log10 is the costly part of a bin, so the bin is first looked up by the value's
    high bits (:func:`_cell_bin`); a value in a cell within ``_EDGE_MARGIN`` of a bin
    edge (about 1.7 % of cells) goes on to :func:`_bin_near_edge`.
    """
    return bin_from_cell(cell_bin(x), x)


bin_value = jit(_bin_index)

#: a relative change of a value that moves its position by at most half the margin:
#: log10(1 + rho) PER_DECADE <= rho PER_DECADE / ln 10
_LOG_SAFE = 0.5 * _EDGE_MARGIN * math.log(10.0) / _PER_DECADE


def _safe_log_cell(cell: int, estimate: float, error: float) -> int:
    """``cell`` (the cell look-up of ``estimate``, :func:`_cell_bin`) where it is the bin
    of a ``log`` known to lie within ``error`` of ``estimate`` (the cell lies more than
    ``_EDGE_MARGIN`` from every edge, and ``error`` moves the position by at most half
    the margin), else ``_NEAR_EDGE``: the test of :func:`_bin_of_log_from_cell`, without
    a branch, so that a loop making it ahead for every position vectorises."""
    return cell if abs(estimate) * _LOG_SAFE > error else _NEAR_EDGE  # False for NaN


safe_log_cell = jit(_safe_log_cell)


def _bin_of_log_from_cell(cell: int, value: float, estimate: float, error: float) -> int:
    """The bin of ``log(value)`` (value > 0), where ``estimate`` is known to lie within
    ``error`` of the ``log`` the caller would compute, and ``cell`` is the cell look-up
    of ``estimate`` (:func:`_cell_bin`, e.g. made ahead by :func:`cell_bins_into`): the
    bin of ``estimate`` where that error cannot move the position across a bin edge (the
    cell lies more than ``_EDGE_MARGIN`` from every edge, and ``error`` moves it by at
    most half the margin), else the bin of ``log(value)`` itself. Saves the ``log`` of a
    value the caller made from its ``log`` (``w = exp(u)``); the same bin either way
    (``tests/test_covariance_fused.py`` tries values at the edges)."""
    safe = safe_log_cell(cell, estimate, error)
    return safe if safe != _NEAR_EDGE else bin_value(math.log(value))


bin_of_log_from_cell = jit(_bin_of_log_from_cell)


def _bin_of_log(value: float, estimate: float, error: float) -> int:
    """:func:`_bin_of_log_from_cell` with the cell look-up of ``estimate`` made here."""
    return bin_of_log_from_cell(cell_bin(estimate), value, estimate, error)


bin_of_log = jit(_bin_of_log)


def _count_values(values: Any, counts: Any) -> None:
    """counts[bin] += 1 for each of ``values`` (1-D, finite): a histogram's counts."""
    for i in range(values.shape[0]):
        counts[bin_value(values[i])] += 1


count_values = jit(_count_values)
