"""Compiled loop (numba) of the ``vitals`` section: one pass per row over the token
entropy, the behaviour policy's entropy, the advantages and the log-probs of the entropy
mechanics, with one more for the centred sums.

Imports numba; imported only where :func:`ratioscope.functional._kernels.available`
allows. The torch code this replaces stays the reference (tests compare them).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ratioscope.functional._binning import bin_from_cell, cell_bins_into
from ratioscope.functional._exp import exp_into, valid_stop
from ratioscope.functional._kernels import jit

#: slots of the ``sums`` array :func:`_vitals_rows` fills
ENTROPY_N, ENTROPY_MEAN, ENTROPY_M2, ENTROPY_MIN, ENTROPY_MAX = 0, 1, 2, 3, 4
RIGHT_TOTAL, RIGHT_N, WRONG_TOTAL, WRONG_N = 5, 6, 7, 8
OLD_TOTAL, OLD_N, CHANGE_TOTAL, CHANGE_N = 9, 10, 11, 12
ZERO_ADVANTAGES = 13
PAIRS_N, MEAN_X, MEAN_A, MEAN_PA, COMOMENT_A, COMOMENT_PA = 14, 15, 16, 17, 18, 19
SLOTS = 20


def _vitals_rows(
    entropy: Any,
    old: Any,
    adv: Any,
    logp: Any,
    mask: Any,
    correct: Any,
    has_entropy: bool,
    has_old: bool,
    has_adv: bool,
    has_logp: bool,
    has_correct: bool,
    counts: Any,
    sums: Any,
    row_abs: Any,
    row_tokens: Any,
    products: Any,
) -> None:
    """The vitals of the valid tokens of some rows ([B, T] each; an input a flag says is
    absent may be any array of that shape, never read).

    counts [NUM_BINS] int64: the entropy's fixed bins (added to); sums [SLOTS] float64
    (slots named at the top of the module): the entropy's count, mean, sum of squared
    deviations, min and max; its sums over correct and incorrect rows (``correct`` [B]
    bool); the old entropy's sum, the change ``entropy - old``'s sum; the tokens with
    A == 0; and for the pairs (x = log pi, A) and (x, pi A): their count, means and
    centred co-moments. Per row: row_abs [B] float64 the sum of |A|, row_tokens [B]
    int64 the valid tokens (with advantages). Every value is read as float64, as the
    torch reference reads them. products: scratch of at least the rows' positions
    (float64) where the pairs are read: pi A of each valid token, kept from the first
    loop for the second (one ``exp`` a token, not two; the ``exp`` of
    :mod:`ratioscope.functional._exp`, within an ulp of libm's).
    """
    rows, length = mask.shape
    n = 0
    total = 0.0
    smallest, largest = math.inf, -math.inf
    right_total = right_n = wrong_total = wrong_n = 0.0
    old_total = change_total = 0.0
    old_n = 0
    zero = 0
    pairs = 0
    sum_x = sum_a = sum_pa = 0.0
    kept = 0  # pi A of the valid tokens so far, in products
    # a row's pi = exp(log pi) and the cells of its entropy's bins, in vectorised loops
    probabilities = np.empty(length)
    cells = np.empty(length, dtype=np.int64)
    for r in range(rows):
        is_right = has_correct and correct[r]
        row_sum = 0.0
        tokens = 0
        stop = valid_stop(mask[r])
        if has_entropy:
            cell_bins_into(entropy[r], stop, cells)
        if has_adv and has_logp:
            exp_into(logp[r], 0.0, stop, probabilities)
        for t in range(length):
            if not mask[r, t]:
                continue
            tokens += 1
            if has_entropy:
                e = np.float64(entropy[r, t])
                counts[bin_from_cell(cells[t], e)] += 1
                n += 1
                total += e
                smallest = min(smallest, e)
                largest = max(largest, e)
                if has_correct:
                    if is_right:
                        right_total += e
                        right_n += 1
                    else:
                        wrong_total += e
                        wrong_n += 1
                if has_old:
                    change_total += e - np.float64(old[r, t])
            if has_old:
                old_total += np.float64(old[r, t])
                old_n += 1
            if has_adv:
                a = np.float64(adv[r, t])
                row_sum += abs(a)
                zero += a == 0.0
                if has_logp:
                    x = np.float64(logp[r, t])
                    pairs += 1
                    sum_x += x
                    sum_a += a
                    product = probabilities[t] * a
                    sum_pa += product
                    products[kept] = product
                    kept += 1
        if has_adv:
            row_abs[r] = row_sum
            row_tokens[r] = tokens
    mean = total / n if n else 0.0
    mean_x = sum_x / pairs if pairs else 0.0
    mean_a = sum_a / pairs if pairs else 0.0
    mean_pa = sum_pa / pairs if pairs else 0.0
    spread = comoment_a = comoment_pa = 0.0
    kept = 0
    if n or pairs:  # the centred sums: a second loop, as the reference centres first
        for r in range(rows):
            for t in range(length):
                if not mask[r, t]:
                    continue
                if has_entropy:
                    d = np.float64(entropy[r, t]) - mean
                    spread += d * d
                if has_adv and has_logp:
                    x = np.float64(logp[r, t])
                    a = np.float64(adv[r, t])
                    dx = x - mean_x
                    comoment_a += dx * (a - mean_a)
                    comoment_pa += dx * (products[kept] - mean_pa)
                    kept += 1
    sums[ENTROPY_N], sums[ENTROPY_MEAN], sums[ENTROPY_M2] = n, mean, spread
    sums[ENTROPY_MIN], sums[ENTROPY_MAX] = smallest, largest
    sums[RIGHT_TOTAL], sums[RIGHT_N], sums[WRONG_TOTAL], sums[WRONG_N] = (
        right_total, right_n, wrong_total, wrong_n,
    )  # fmt: skip
    sums[OLD_TOTAL], sums[OLD_N] = old_total, old_n
    sums[CHANGE_TOTAL], sums[CHANGE_N] = change_total, n if has_old else 0
    sums[ZERO_ADVANTAGES] = zero
    sums[PAIRS_N], sums[MEAN_X], sums[MEAN_A], sums[MEAN_PA] = pairs, mean_x, mean_a, mean_pa
    sums[COMOMENT_A], sums[COMOMENT_PA] = comoment_a, comoment_pa


vitals_rows = jit(_vitals_rows)
