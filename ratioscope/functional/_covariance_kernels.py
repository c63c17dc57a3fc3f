"""Compiled passes (numba) of CW-GRPO's token covariance and kernel weights, with the
``covariance`` section's statistics folded into the last pass.

The torch path (:class:`~ratioscope.functional.covariance.KernelPasses`, then the
section's histograms) gathers the valid tokens of a chunk, computes c in float64, and
builds each statistic with its own tensor operation: about forty passes over a chunk.
Here each pass is one loop over the chunk's [B, T] tensors that reads the mask in the
same loop: pass 0 sums N, log pi and A per scope (and over the whole batch, for
Clip-Cov), pass 1 c and c^2 (and counts Clip-Cov's eligible tokens), pass 2 the spread
of c, pass 3 the kernel weights, pass 4 everything the section reports.

The sums of passes 0-3 are added token by token, in the batch's row-major order, to
running float64 totals, exactly as ``index_add_`` adds them in the torch path, so they
are the same bits; the weights go through ``exp`` and the bins through ``log``, whose
last bit may differ from torch's vectorised functions (tests compare to 1e-12). Passes
1-3 run on parts of the scopes at the same time (threads): a part takes the rows of its
scopes (``owner`` [S]: the part of each scope), so each scope's sums are added by one
loop in the batch's order, the same bits on any number of parts. Pass 0 stays one loop:
its totals over the whole batch are one sum in that order. Pass 4, the costliest, runs
on parts of a chunk's rows; it counts in integers there and leaves its float sums per
token and per row, which :func:`_fold_statistics` then adds in file order, so the
totals are the bits of one loop whatever the number of threads, parts or chunks.

This module imports numba; it is imported only where :func:`_kernels.available` says the
compiled path can run.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ratioscope.functional._binning import bin_from_cell, bin_value, cell_bin, safe_log_cell
from ratioscope.functional._exp import exp_value, valid_stop
from ratioscope.functional._kernels import jit


def _sums(lp: Any, adv: Any, mask: Any, scope: Any, sums: Any, batch: Any) -> None:
    """Pass 0. sums [S, 3] float64: valid tokens, sum log pi, sum A per scope; batch [3]:
    the same over every row. lp, adv: [B, T] float; mask [B, T] bool; scope [B] int64."""
    rows, length = mask.shape
    for r in range(rows):
        s = scope[r]
        # a scope's totals live in locals for the row; the order of the additions is
        # the batch's, so the totals are those of adding token by token
        n, total_lp, total_a = sums[s, 0], sums[s, 1], sums[s, 2]
        bn, b_lp, b_a = batch[0], batch[1], batch[2]
        for t in range(length):
            if mask[r, t]:
                x = np.float64(lp[r, t])
                y = np.float64(adv[r, t])
                n += 1.0
                total_lp += x
                total_a += y
                bn += 1.0
                b_lp += x
                b_a += y
        sums[s, 0], sums[s, 1], sums[s, 2] = n, total_lp, total_a
        batch[0], batch[1], batch[2] = bn, b_lp, b_a


def _covariance_sums(
    lp: Any,
    adv: Any,
    mask: Any,
    z: Any,
    scope: Any,
    owner: Any,
    part: int,
    means: Any,
    batch_means: Any,
    sums: Any,
    narrow: bool,
    bounds: Any,
) -> int:
    """Pass 1 over the rows of the scopes ``part`` owns. sums [S, 2]: sum c and sum c^2
    per scope, c = (log pi - mean log pi) (A - mean A) with the scope's means [S, 2].
    Returns Clip-Cov's eligible tokens among those rows: c
    over the batch (``batch_means`` [2]), stored in the input's precision (``narrow``:
    float32), inside (bounds[0], bounds[1]), and not zeroed by PPO clipping: not A > 0
    with exp(z) > bounds[2], nor A < 0 with exp(z) < bounds[3] (bounds in z's dtype)."""
    rows, length = mask.shape
    eligible = 0
    m_lp, m_a = batch_means[0], batch_means[1]
    for r in range(rows):
        s = scope[r]
        if owner[s] != part:
            continue
        mean_lp, mean_a = means[s, 0], means[s, 1]
        total, square = sums[s, 0], sums[s, 1]
        for t in range(length):
            if not mask[r, t]:
                continue
            x = np.float64(lp[r, t])
            y = np.float64(adv[r, t])
            c = (x - mean_lp) * (y - mean_a)
            total += c
            square += c * c
            c_batch = (x - m_lp) * (y - m_a)
            if narrow:
                c_batch = np.float64(np.float32(c_batch))
            if bounds[0] < c_batch < bounds[1]:
                a = adv[r, t]
                ratio = math.exp(z[r, t])
                clipped = (a > 0 and ratio > bounds[2]) or (a < 0 and ratio < bounds[3])
                eligible += not clipped
        sums[s, 0], sums[s, 1] = total, square
    return eligible


def _spread(
    lp: Any, adv: Any, mask: Any, scope: Any, owner: Any, part: int, means: Any, spread: Any
) -> None:
    """Pass 2 over the rows of the scopes ``part`` owns. spread [S]: sum (c - mean c)^2
    per scope; means [S, 3]: log pi, A, c."""
    rows, length = mask.shape
    for r in range(rows):
        s = scope[r]
        if owner[s] != part:
            continue
        mean_lp, mean_a, mean_c = means[s, 0], means[s, 1], means[s, 2]
        total = spread[s]
        for t in range(length):
            if mask[r, t]:
                c = (np.float64(lp[r, t]) - mean_lp) * (np.float64(adv[r, t]) - mean_a)
                d = c - mean_c
                total += d * d
        spread[s] = total


def _kernel_weights(
    lp: Any,
    adv: Any,
    stop: int,
    mean_lp: float,
    mean_a: float,
    two_variance: float,
    out: Any,
) -> None:
    """out[t] = w = exp(-c^2 / 2 sigma^2), c = (log pi - mean log pi) (A - mean A), for
    the positions t < ``stop`` of one row (lp, adv: 1-D; ``two_variance``: 2 sigma^2 of
    the row's scope), masked ones included: one loop without branches, which the
    compiler vectorises (:func:`ratioscope.functional._exp.exp_value`). c is the same
    expression as the callers', so the same bits."""
    for t in range(stop):
        c = (np.float64(lp[t]) - mean_lp) * (np.float64(adv[t]) - mean_a)
        out[t] = exp_value(-(c * c) / two_variance)


kernel_weights = jit(_kernel_weights)


#: the columns of :func:`_token_values`'s per-position output
VALUE_C, VALUE_W, VALUE_N = 0, 1, 2
VALUE_FIELDS = 3


def _token_values(
    lp: Any,
    adv: Any,
    stop: int,
    mean_lp: float,
    mean_a: float,
    two_variance: float,
    is_flat: bool,
    to_normalised: float,
    log_f: float,
    narrow: bool,
    floor: float,
    out: Any,
    cells: Any,
) -> None:
    """What the last pass needs of each position t < ``stop`` of one row (lp, adv: 1-D),
    masked ones included, in one loop without branches, which the compiler vectorises:
    out [VALUE_FIELDS, >= stop] float64 with, per position, c, w and w~ as stored in the
    input's precision (``narrow``: float32); cells [3, >= stop] int64 the cell look-up
    (:func:`_binning._cell_bin`) of c, and the bins of log w and log w~ where their
    estimates decide them (:func:`_binning._safe_log_cell`), else ``_NEAR_EDGE`` (-1:
    the ``log`` decides). The estimates: u = -c^2 / 2 sigma^2 and v = u + log f, each
    corrected by its store's first-order rounding, where w and w~ are normal numbers
    in their precision (u and v inside (``floor``, -``floor``)); elsewhere none. The
    same expressions, in the same order, as one token at a time, so the same bits and
    bins."""
    for t in range(stop):
        a = np.float64(adv[t])
        c = (np.float64(lp[t]) - mean_lp) * (a - mean_a)
        u = 0.0 if is_flat else -(c * c) / two_variance
        w = 1.0 if is_flat else exp_value(u)
        normalised = w * to_normalised
        v = u + log_f
        in_range = (u > floor) & (floor < v) & (v < -floor)  # &: no branch
        if narrow:
            c = np.float64(np.float32(c))
            stored_w = np.float64(np.float32(w))
            stored_n = np.float64(np.float32(normalised))
            # the stores' rounding, to first order; both always computed and then
            # selected, so that the loop has no branch and vectorises
            shift_u = (stored_w - w) / w
            shift_v = (stored_n - normalised) / normalised
            u = u + shift_u if in_range else u
            v = v + shift_v if in_range else v
            w, normalised = stored_w, stored_n
        out[VALUE_C, t] = c
        out[VALUE_W, t] = w
        out[VALUE_N, t] = normalised
        cells[0, t] = cell_bin(c)
        # the bins of log w and log w~ where the estimates u and v decide them, within
        # their error bounds (_statistics' docstring); else _NEAR_EDGE: the log decides
        estimate_w = u if in_range else 0.0
        estimate_n = v if in_range else 0.0
        error_w = 2.0**-48 - 2.0**-50 * u
        error_n = 2.0**-47 + 2.0**-50 * (abs(log_f) + abs(v))
        cells[1, t] = safe_log_cell(cell_bin(estimate_w), estimate_w, error_w)
        cells[2, t] = safe_log_cell(cell_bin(estimate_n), estimate_n, error_n)


# the quotients of positions out of range (w or w~ zero there) are selected away
token_values = jit(_token_values, ieee_division=True)


def _weight_sums(
    lp: Any,
    adv: Any,
    mask: Any,
    scope: Any,
    owner: Any,
    part: int,
    means: Any,
    kernel: Any,
    flat: Any,
    sums: Any,
) -> None:
    """Pass 3 over the rows of the scopes ``part`` owns. sums [S]: sum w per scope, w =
    exp(-c^2 / (2 sigma^2)), or 1 where the scope is flat; kernel [S]: 2 sigma^2."""
    rows, length = mask.shape
    weights = np.empty(length)  # a row's w, computed ahead in one vectorised loop
    for r in range(rows):
        s = scope[r]
        if owner[s] != part:
            continue
        mean_lp, mean_a = means[s, 0], means[s, 1]
        two_variance, is_flat = kernel[s], flat[s]
        if not is_flat:
            kernel_weights(
                lp[r], adv[r], valid_stop(mask[r]), mean_lp, mean_a, two_variance, weights
            )
        total = sums[s]
        for t in range(length):
            if mask[r, t]:
                total += 1.0 if is_flat else weights[t]
        sums[s] = total


#: the columns of :func:`_statistics`'s per-row sums
ROW_C, ROW_W, ROW_N = 0, 1, 2  # sums of c, w, w~ (the section's per-sequence columns)
ROW_MOMENTS = 3  # 3..8: sum of x - shift and of its square, for c, w, w~
ROW_MASS = 9  # 9..11: sum |A|, w |A|, w~ |A|
ROW_BELOW = 12  # 12..13: tokens with w under each threshold
ROW_FIELDS = 14


def _statistics(
    lp: Any,
    adv: Any,
    mask: Any,
    scope: Any,
    means: Any,
    kernel: Any,
    flat: Any,
    factor: Any,
    log_factor: Any,
    narrow: bool,
    thresholds: Any,
    shifts: Any,
    c_counts: Any,
    w_counts: Any,
    normalised_counts: Any,
    weight_counts: Any,
    extremes: Any,
    token_bins: Any,
    token_c: Any,
    row_stats: Any,
) -> int:
    """Pass 4 over some rows: c, w and w~ = w N / sum w (``factor`` [S], its ``log``
    ``log_factor``) of each valid token, stored in the input's precision (``narrow``:
    float32), into what the section reports. Rows apart can run at the same time (on
    threads); what is summed in floats is left per token or per row for
    :func:`_fold_statistics` to add in file order.

    The bins of log w and log w~ come from u = -c^2 / 2 sigma^2 and v = u + log(N /
    sum w), each plus the relative rounding of its float32 store (log(1 + e) = e to
    2^-49), where w and w~ are normal numbers in their precision: the bin of the
    estimate where the bound on its error, u (v) within 2^-48 + 2^-50 |u| (2^-47 +
    2^-50 (|log f| + |v|)) of log w (log w~) from exp's, log's and the sums' rounding
    and the stores' second order, cannot cross a bin edge (tested ahead for the row by
    :func:`_token_values`), else of the ``log`` itself (:func:`_bin_logs_left`, after
    the row). Two ``log`` a token saved, the same bins as
    :func:`_binning.bin_of_log_from_cell` one token at a time.

    Integers, added here: c_counts, w_counts, normalised_counts [NUM_BINS] the bins of c,
    log w and log w~; weight_counts [W] w in W equal bins of [0, 1] (``torch.histc``).
    extremes [3, 2]: min and max of c, w, w~. Left per token (valid tokens in row-major
    order; returns how many): token_bins, token_c, c's bin and value. Left per row:
    row_stats [B, ROW_FIELDS] (see the ROW_ constants) with the moments' ``shifts`` [3]
    and ``thresholds`` [2].
    """
    rows, length = mask.shape
    bins_w = weight_counts.shape[0]
    shift_c, shift_w, shift_n = shifts[0], shifts[1], shifts[2]
    low_w, lower_w = thresholds[0], thresholds[1]
    # w (w~) a normal number in its precision for u (u + log f) in (floor, -floor)
    floor = -80.0 if narrow else -700.0
    tokens = 0
    # a row's c, w and w~ and its bins' look-ups, computed ahead in one vectorised loop
    values = np.empty((VALUE_FIELDS, length))
    cells = np.empty((3, length), dtype=np.int64)
    # the log w and log w~ histograms with one spare slot: a select instead of a branch
    # a token (a branch on the bins' test cost a sixth of this pass)
    spare = w_counts.shape[0]
    local_w = np.zeros(spare + 1, dtype=np.int64)
    local_n = np.zeros(spare + 1, dtype=np.int64)
    for r in range(rows):
        s = scope[r]
        mean_lp, mean_a = means[s, 0], means[s, 1]
        two_variance, is_flat, to_normalised = kernel[s], flat[s], factor[s]
        log_f = log_factor[s]
        token_values(
            lp[r], adv[r], valid_stop(mask[r]), mean_lp, mean_a, two_variance, is_flat,
            to_normalised, log_f, narrow, floor, values, cells,
        )  # fmt: skip
        row_c = row_w = row_n = 0.0
        d_c = d_w = d_n = sq_c = sq_w = sq_n = 0.0
        mass_a = mass_w = mass_n = 0.0
        n_low = n_lower = 0
        # the extremes in locals for the row: written through the array, each token's
        # min and max would wait on the last token's store
        min_c, max_c = extremes[0, 0], extremes[0, 1]
        min_w, max_w = extremes[1, 0], extremes[1, 1]
        min_n, max_n = extremes[2, 0], extremes[2, 1]
        for t in range(length):
            if not mask[r, t]:
                continue
            a = np.float64(adv[r, t])
            c = values[VALUE_C, t]
            w = values[VALUE_W, t]
            normalised = values[VALUE_N, t]
            k = bin_from_cell(cells[0, t], c)
            c_counts[k] += 1
            token_bins[tokens] = k
            token_c[tokens] = c
            tokens += 1
            # the bins of log w and log w~ where u and v decide them (token_values);
            # the others go to a spare slot here, and by their log below
            bin_w, bin_n = cells[1, t], cells[2, t]
            local_w[bin_w if bin_w >= 0 else spare] += 1
            local_n[bin_n if bin_n >= 0 else spare] += 1
            weight_counts[min(int(w * bins_w), bins_w - 1)] += 1
            n_low += w < low_w
            n_lower += w < lower_w
            row_c += c
            row_w += w
            row_n += normalised
            e = c - shift_c
            d_c += e
            sq_c += e * e
            e = w - shift_w
            d_w += e
            sq_w += e * e
            e = normalised - shift_n
            d_n += e
            sq_n += e * e
            min_c, max_c = min(min_c, c), max(max_c, c)
            min_w, max_w = min(min_w, w), max(max_w, w)
            min_n, max_n = min(min_n, normalised), max(max_n, normalised)
            magnitude = abs(a)
            mass_a += magnitude
            mass_w += w * magnitude
            mass_n += normalised * magnitude
        if local_w[spare] or local_n[spare]:  # a few tokens a row at most
            bin_logs_left(values, cells, mask[r], w_counts, normalised_counts)
            local_w[spare] = local_n[spare] = 0
        extremes[0, 0], extremes[0, 1] = min_c, max_c
        extremes[1, 0], extremes[1, 1] = min_w, max_w
        extremes[2, 0], extremes[2, 1] = min_n, max_n
        out = row_stats[r]
        out[ROW_C], out[ROW_W], out[ROW_N] = row_c, row_w, row_n
        m = ROW_MOMENTS
        out[m], out[m + 1], out[m + 2], out[m + 3] = d_c, sq_c, d_w, sq_w
        out[m + 4], out[m + 5] = d_n, sq_n
        out[ROW_MASS], out[ROW_MASS + 1], out[ROW_MASS + 2] = mass_a, mass_w, mass_n
        out[ROW_BELOW], out[ROW_BELOW + 1] = n_low, n_lower
    for k in range(spare):
        w_counts[k] += local_w[k]
        normalised_counts[k] += local_n[k]
    return tokens


def _bin_logs_left(values: Any, cells: Any, mask: Any, w_counts: Any, n_counts: Any) -> None:
    """The valid positions of one row whose log w (log w~) bins the estimate did not
    decide (``cells`` row 1 (2) at ``_NEAR_EDGE``): their bins from the ``log``
    itself, into w_counts (n_counts)."""
    for t in range(mask.shape[0]):
        if mask[t]:
            if cells[1, t] < 0:
                w_counts[bin_value(math.log(values[VALUE_W, t]))] += 1
            if cells[2, t] < 0:
                n_counts[bin_value(math.log(values[VALUE_N, t]))] += 1


bin_logs_left = jit(_bin_logs_left)


def _fold_statistics(
    token_bins: Any,
    token_c: Any,
    tokens: int,
    row_stats: Any,
    c_sums: Any,
    moments: Any,
    mass: Any,
    below: Any,
) -> None:
    """Add what :func:`_statistics` left per token and per row to the running totals,
    one part after the other in file order: c_sums [NUM_BINS] c per bin, token by
    token; moments [3, 3] (columns 1 and 2), mass [3] and below [2], row by row. The
    sums are then the same bits however the rows were cut into parts and chunks."""
    for i in range(tokens):
        c_sums[token_bins[i]] += token_c[i]
    for r in range(row_stats.shape[0]):
        for q in range(3):
            moments[q, 1] += row_stats[r, ROW_MOMENTS + 2 * q]
            moments[q, 2] += row_stats[r, ROW_MOMENTS + 2 * q + 1]
            mass[q] += row_stats[r, ROW_MASS + q]
        below[0] += np.int64(row_stats[r, ROW_BELOW])
        below[1] += np.int64(row_stats[r, ROW_BELOW + 1])


sums = jit(_sums)
covariance_sums = jit(_covariance_sums)
spread = jit(_spread)
weight_sums = jit(_weight_sums)
statistics = jit(_statistics)
fold_statistics = jit(_fold_statistics)
