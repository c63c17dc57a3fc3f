"""Compiled loops (numba) of the ``ratios`` section: one pass per row for a signal's
histogram, moments and PPO sums, and the low-frequency band of each row's spectrum.

Imports numba; imported only where :func:`ratioscope.functional._kernels.available`
allows. The torch code these replace stays the reference (tests compare them).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ratioscope.functional._binning import bin_from_cell, cell_bins_into
from ratioscope.functional._exp import exp_into, exp_value, expm1_into, valid_stop
from ratioscope.functional._kernels import jit


def _histogram_ppo_rows(
    signal: Any,
    adv: Any,
    mask: Any,
    has_adv: bool,
    low: float,
    high: float,
    counts: Any,
    summary: Any,
    row_sums: Any,
    clipped: Any,
) -> None:
    """The valid values of ``signal`` (a log-ratio, [B, T]) into the fixed bins, their
    moments, and each row's PPO sums with ratio bounds ``low`` = 1 - eps_low and
    ``high`` = 1 + eps_high.

    counts [NUM_BINS] int64 (added to); summary [5] float64: count, mean, sum of squared
    deviations (about the mean, a second loop), min, max; when ``has_adv``, per row:
    row_sums [B, 2] float64 the clipped terms min(r A, clip(r) A) and the plain terms
    r A, clipped [B] int64 the tokens PPO clipping zeroes (A > 0 with r > high, A < 0
    with r < low). Ratios and terms in float64, as :func:`ppo_row_sums`; the ratios
    by :func:`ratioscope.functional._exp.exp_value` (within an ulp of libm's).
    """
    rows, length = mask.shape
    n = 0
    total = 0.0
    smallest, largest = math.inf, -math.inf
    # a row's exp(x) and bins' cells, computed ahead in vectorised loops
    ratios = np.empty(length)
    cells = np.empty(length, dtype=np.int64)
    for r in range(rows):
        zeroed = 0
        clipped_terms = 0.0
        plain_terms = 0.0
        stop = valid_stop(mask[r])
        cell_bins_into(signal[r], stop, cells)
        if has_adv:
            exp_into(signal[r], 0.0, stop, ratios)
        for t in range(length):
            if not mask[r, t]:
                continue
            x = np.float64(signal[r, t])
            counts[bin_from_cell(cells[t], x)] += 1
            n += 1
            total += x
            smallest = min(smallest, x)
            largest = max(largest, x)
            if has_adv:
                a = np.float64(adv[r, t])
                ratio = ratios[t]
                plain = ratio * a
                clipped_terms += min(plain, min(max(ratio, low), high) * a)
                plain_terms += plain
                zeroed += (a > 0.0 and ratio > high) or (a < 0.0 and ratio < low)
        if has_adv:
            row_sums[r, 0] = clipped_terms
            row_sums[r, 1] = plain_terms
            clipped[r] = zeroed
    mean = total / n if n else 0.0
    spread = 0.0
    for r in range(rows):
        for t in range(length):
            if mask[r, t]:
                d = np.float64(signal[r, t]) - mean
                spread += d * d
    summary[0], summary[1], summary[2] = n, mean, spread
    summary[3], summary[4] = smallest, largest


#: sines of a block's offsets for :func:`_sine_table`
_SINE_BLOCK = 64


def _sine_table(size: int, table: Any, block_sin: Any, block_cos: Any) -> None:
    """table[j] = sin(pi j / L) for j < L = ``size``, without one ``sin`` per entry.

    The first half is built block by block from sin(a + b) = sin a cos b + cos a sin b,
    a the block's start and b an offset within it (``block_sin``/``block_cos``: scratch
    of :data:`_SINE_BLOCK`, filled once), both from libm: two products and a sum of two
    terms of one sign a value, so within a few ulps of ``sin`` itself, with no error
    carried from entry to entry (a three-term recurrence would accumulate one). The
    second half mirrors the first: sin(pi j / L) = sin(pi (L - j) / L).
    """
    step = math.pi / size
    half = size // 2
    offsets = min(_SINE_BLOCK, half + 1)
    for i in range(offsets):
        block_sin[i] = math.sin(step * i)
        block_cos[i] = math.cos(step * i)
    for start in range(0, half + 1, _SINE_BLOCK):
        sin_start = math.sin(step * start)
        cos_start = math.cos(step * start)
        for i in range(min(_SINE_BLOCK, half + 1 - start)):
            table[start + i] = sin_start * block_cos[i] + cos_start * block_sin[i]
    for j in range(half + 1, size):
        table[j] = table[size - j]


sine_table = jit(_sine_table)


def _lfr_band(
    auto: Any, rows: Any, lengths: Any, widths: Any, table: Any, band: Any, energy: Any
) -> None:
    """band [B] float64 at ``rows`` [b]: each row's low-frequency energy from its linear
    autocorrelation ``auto`` [b, >= L] (float64; lag m of a row of L tokens; row i is
    signal row ``rows[i]``),
    band = w a(0) + sum_{m=1}^{L-1} a(m) 2 sin(pi m w / L) / sin(pi m / L), with
    w = ``widths`` [B] (odd, 2 k_c + 1) and L = ``lengths`` [B]; energy [B] float64 at
    ``rows``, a(0).

    The sines come from one table of sin(pi j / L), j < L, per row (``table``: scratch of
    at least max L entries): pi m w / L is reduced modulo 2 pi exactly, in integers,
    instead of multiplying a rounded angle by m w. The table is built by
    :func:`_sine_table`.
    """
    block_sin = np.empty(_SINE_BLOCK)
    block_cos = np.empty(_SINE_BLOCK)
    for i in range(rows.shape[0]):
        r = rows[i]
        size = max(lengths[r], 1)
        width = widths[r]
        sine_table(size, table, block_sin, block_cos)
        total = auto[i, 0] * width
        period = 2 * size
        j = 0  # m w modulo 2 L, advanced by w each lag (w < 2 L: one wrap at most)
        for m in range(1, lengths[r]):
            j += width
            if j >= period:
                j -= period
            numerator = table[j] if j < size else -table[j - size]
            total += auto[i, m] * (2.0 * numerator / table[m])
        band[r] = total
        energy[r] = auto[i, 0]


def _lane_sum(values: Any, n: int, centre: float, power: int) -> float:
    """sum of (values[k] - centre) ** power, k < n (power 1 or 2), in four interleaved
    partial sums: a quarter of a single running sum's rounding, and four independent
    additions per step instead of a chain of them."""
    s0 = s1 = s2 = s3 = 0.0
    k = 0
    if power == 1:
        while k + 4 <= n:
            s0 += values[k] - centre
            s1 += values[k + 1] - centre
            s2 += values[k + 2] - centre
            s3 += values[k + 3] - centre
            k += 4
        while k < n:
            s0 += values[k] - centre
            k += 1
    else:
        while k + 4 <= n:
            d0, d1 = values[k] - centre, values[k + 1] - centre
            d2, d3 = values[k + 2] - centre, values[k + 3] - centre
            s0 += d0 * d0
            s1 += d1 * d1
            s2 += d2 * d2
            s3 += d3 * d3
            k += 4
        while k < n:
            d0 = values[k] - centre
            s0 += d0 * d0
            k += 1
    return (s0 + s1) + (s2 + s3)


lane_sum = jit(_lane_sum)


def _centre_rows(
    signal: Any,
    mask: Any,
    rows: Any,
    ratio_space: bool,
    window: int,
    out: Any,
    energetic: Any,
    variances: Any,
) -> None:
    """Pack, centre and measure the rows ``rows`` [b] int64 of ``signal`` [B, T] (float,
    log space) with ``mask`` [B, T] bool, as the tensor code of
    :func:`ratioscope.functional.token_stats.signal_statistics` does in several passes.

    out [b, N] float64 (N >= each row's L): row i holds row ``rows[i]``'s L valid values
    in order (exp of them when ``ratio_space``, by
    :func:`ratioscope.functional._exp.exp_value`), minus their mean, then zeros: the
    zero-padded input of the row's FFT. Per signal row r, written at index r:
    energetic [B] bool, L >= 2 and not all valid values equal; variances [B, 2] float64,
    the population variance of the valid values and the mean population variance of
    their consecutive ``window``-token windows (a single-token window only when it is
    the whole row), NaN where there is none.
    """
    length = signal.shape[1]
    width = out.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        n = 0
        first = 0.0
        varies = False
        for t in range(length):
            if not mask[r, t]:
                continue
            value = np.float64(signal[r, t])
            if n == 0:
                first = value
            elif value != first:  # equality of the inputs (the float64 cast is exact)
                varies = True
            out[i, n] = value
            n += 1
        row = out[i]
        if ratio_space:  # over the packed values, in one vectorised loop
            for k in range(n):
                row[k] = exp_value(row[k])
        mean = lane_sum(row, n, 0.0, 1) / max(n, 1)
        for k in range(n):
            row[k] -= mean
        energy = lane_sum(row, n, 0.0, 2)
        for k in range(n, width):
            out[i, k] = 0.0
        energetic[r] = n >= 2 and varies
        variances[r, 0] = energy / n if n else math.nan
        used = 0
        spread = 0.0
        for start in range(0, n, window):
            size = min(window, n - start)
            if size < 2 and n != 1:  # a trailing single token: variance 0 by construction
                continue
            block = row[start : start + size]
            local_mean = lane_sum(block, size, 0.0, 1) / size
            spread += lane_sum(block, size, local_mean, 2) / size
            used += 1
        variances[r, 1] = spread / used if used else math.nan


def _power_rows(spectrum: Any, rows: Any, step: int, power: Any) -> None:
    """Each row's power spectrum in place of its FFT, and its grid read off it.

    spectrum [b, n/2 + 1] complex128: row i, the rfft of signal row ``rows[i]``; each X
    becomes |X|^2 = re * re + im * im with a zero imaginary part (the irfft of the
    squares, the autocorrelation, then reads it without a real-to-complex copy).
    power [B, G] float64: row ``rows[i]`` gets |X|^2 at the FFT bins step (2 g + 1),
    g < G (the frequency grid's centres).
    """
    grid = power.shape[1]
    for i in range(spectrum.shape[0]):
        row = spectrum[i]
        for k in range(row.shape[0]):
            x = row[k]
            row[k] = x.real * x.real + x.imag * x.imag
        target = rows[i]
        for g in range(grid):
            power[target, g] = row[step * (2 * g + 1)].real


power_rows = jit(_power_rows)


histogram_ppo_rows = jit(_histogram_ppo_rows)
lfr_band = jit(_lfr_band)
centre_rows = jit(_centre_rows)


def _mismatch_rows(z: Any, mask: Any, rows_out: Any) -> float:
    """First pass of the mismatch sums over some rows: rows_out [B, 3] float64 each
    row's valid tokens, sum z and sum |z|; returns the largest valid z (-inf if none)."""
    rows, length = mask.shape
    top = -math.inf
    for r in range(rows):
        count = 0
        total = 0.0
        magnitude = 0.0
        for t in range(length):
            if mask[r, t]:
                x = np.float64(z[r, t])
                count += 1
                total += x
                magnitude += abs(x)
                top = max(top, x)
        rows_out[r, 0], rows_out[r, 1], rows_out[r, 2] = count, total, magnitude
    return top


def _mismatch_terms(z: Any, mask: Any, log_c: float, top: float, tokens: Any) -> None:
    """Second pass over some rows: the per-token sums of
    :func:`ratioscope.functional.mismatch.mismatch_partials`, with ``top`` the largest
    valid z of the whole batch.

    tokens [10] float64 (added to): sum -z, sum z^2 / 2, sum expm1(z) - z, tokens with
    |z| > log_c, sum expm1(z), sum expm1(2z), sum exp(z - top), sum exp(2 (z - top)),
    sum |z|, max |z|. expm1(2z) is expm1(z) (expm1(z) + 2), exp(2 (z - m)) the square of
    exp(z - m): one exponential each instead of two (exp and expm1 by
    :mod:`ratioscope.functional._exp`: exp within an ulp of libm's; expm1 within one ulp
    of the exact value for |z| < ln 2 / 2, two elsewhere).
    """
    rows, length = mask.shape
    k1 = k2 = k3 = outside = first = second = lse = lse2 = size = largest = 0.0
    # a row's exp(z - top) and expm1(z), each in one vectorised loop: libm's expm1, a
    # call a token, took two thirds of this pass
    shifted = np.empty(length)
    minus_one = np.empty(length)
    for r in range(rows):
        stop = valid_stop(mask[r])
        exp_into(z[r], top, stop, shifted)
        expm1_into(z[r], stop, minus_one)
        for t in range(stop):
            if not mask[r, t]:
                continue
            x = np.float64(z[r, t])
            e = minus_one[t]
            q = shifted[t]
            k1 -= x
            k2 += 0.5 * x * x
            k3 += e - x
            outside += abs(x) > log_c
            first += e
            second += e * (e + 2.0)
            lse += q
            lse2 += q * q
            size += abs(x)
            largest = max(largest, abs(x))
    tokens[0], tokens[1], tokens[2], tokens[3], tokens[4] = k1, k2, k3, outside, first
    tokens[5], tokens[6], tokens[7], tokens[8], tokens[9] = second, lse, lse2, size, largest


mismatch_rows = jit(_mismatch_rows)
mismatch_terms = jit(_mismatch_terms)


def _entropy_quadrants(
    adv: Any, entropy: Any, old_entropy: Any, mask: Any, counts: Any, kl_rows: Any
) -> None:
    """TEPO's (sign A, sign dH) quadrants of the valid tokens, dH = entropy -
    old_entropy in the inputs' precision. counts [6] int64: A > 0 with dH < 0 (the KL
    mask), A > 0 with dH >= 0, A < 0 with dH > 0, A < 0 with dH <= 0, A == 0, all;
    kl_rows [B] int64: each row's KL-mask tokens."""
    rows, length = mask.shape
    pos_dec = pos_rest = neg_inc = neg_rest = zero = total = 0
    for r in range(rows):
        in_mask = 0
        for t in range(length):
            if not mask[r, t]:
                continue
            a = adv[r, t]
            dh = entropy[r, t] - old_entropy[r, t]
            total += 1
            if a > 0:
                if dh < 0:
                    in_mask += 1
                else:
                    pos_rest += 1
            elif a < 0:
                if dh > 0:
                    neg_inc += 1
                else:
                    neg_rest += 1
            elif a == 0:
                zero += 1
        kl_rows[r] = in_mask
        pos_dec += in_mask
    counts[0], counts[1], counts[2], counts[3] = pos_dec, pos_rest, neg_inc, neg_rest
    counts[4], counts[5] = zero, total


entropy_quadrants = jit(_entropy_quadrants)
