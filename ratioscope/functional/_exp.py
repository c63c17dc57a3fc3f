"""``exp`` for the compiled loops (numba), written so that a loop of it vectorises.

libm's ``exp`` is a call the compiler cannot put in SIMD lanes: about 4-7 ns a value
in the loops that weigh every token by a ratio or a kernel weight. :func:`exp_value`
is branch-free arithmetic (a Cody-Waite reduction by ln 2, a polynomial, the power of
two built from its bits), so a loop that fills a row's worth of them runs eight
lanes at a time: about 1 ns a value. Its error is below one ulp (0.97 ulp measured
over the float64 range, against libm's 0.51); tests compare it with ``math.exp`` and
``numpy.longdouble`` across the range, at the overflow and underflow edges, through
the subnormals and for +-inf and NaN.

Imports numba; imported only where :func:`ratioscope.functional._kernels.available`
allows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ratioscope.functional._kernels import jit

#: ln 2 split in two: _LN2_HIGH has its low 21 bits zero, so k * _LN2_HIGH is exact
#: for the |k| <= 1077 here and the reduced argument keeps its precision
_LN2_HIGH = 6.93147180369123816490e-01
_LN2_LOW = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
#: 1.5 * 2^52: adding it rounds x / ln 2 to an integer held in the low mantissa bits
_SHIFTER = 6755399441055744.0
_SHIFTER_BITS = np.int64(np.float64(_SHIFTER).view(np.int64))
#: exp underflows to 0 below -745.14 and overflows to inf above 709.79; clamping the
#: argument just outside keeps k (and the two scale factors below) in range
_LOWEST = -746.0
_HIGHEST = 710.0


def _reduction(x: float) -> tuple[int, float, float, float]:
    """The shared part of :func:`_exp_value` and :func:`_expm1_value`: (k, p, first,
    second) with k = round(x / ln 2) (x clamped to the range where exp is finite and
    not 0, so k stays in range), r = x - k ln 2 in two parts (|r| <= ln 2 / 2, exactly
    x for k = 0), p = exp(r) - 1 = r + r^2 (1/2! + r/3! + ... + r^11/13!) by Horner (the
    Taylor series' remainder below 2^-57 there), and 2^k as two normal powers of two
    first = 2^(k // 2) and second = 2^(k - k // 2)."""
    clamped = x if x > _LOWEST else _LOWEST
    clamped = clamped if clamped < _HIGHEST else _HIGHEST
    shifted = clamped * _INV_LN2 + _SHIFTER
    k_int = np.float64(shifted).view(np.int64) - _SHIFTER_BITS
    k = shifted - _SHIFTER
    r = (clamped - k * _LN2_HIGH) - k * _LN2_LOW
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = (p * r) * r + r
    half = k_int >> 1
    first = np.int64((half + 1023) << 52).view(np.float64)
    second = np.int64((k_int - half + 1023) << 52).view(np.float64)
    return k_int, p, first, second


reduction = jit(_reduction)


def _exp_value(x: float) -> float:
    """exp(x) in float64 within one ulp, without a branch or a call.

    exp(x) = 2^k exp(r) with k = round(x / ln 2) and |r| <= ln 2 / 2; exp(r) = 1 + p
    (:func:`_reduction`), 1 + p rounded once at the end. 2^k is applied as two normal
    powers of two, so that results in the subnormal range round once and results past
    the largest float64 become inf.
    """
    _, p, first, second = reduction(x)
    value = ((1.0 + p) * first) * second
    return value if x == x else x  # NaN in, NaN out (the clamps would drop it)


exp_value = jit(_exp_value)


#: the largest k = round(x / ln 2) for which 2^k is a finite float64
_LARGEST_SCALE = 1023


def _expm1_value(x: float) -> float:
    """exp(x) - 1 in float64 without a branch or a call: within one ulp for |x| < ln 2 /
    2 (0.88 measured; 0.52 near 0, where exp(x) - 1 would lose the last digits) and
    within two elsewhere (1.94 measured; libm's: 0.51 and 0.83).

    :func:`_reduction`'s k and p = exp(r) - 1, then three candidates, one selected: p
    itself for k = 0 (|x| < ln 2 / 2, where r is x exactly); 2^k p + (2^k - 1)
    otherwise (2^k p exact, 2^k - 1 exact for |k| <= 52, one rounding); and exp(x) - 1
    where 2^k overflows (x above 709.09, where the - 1 is below half an ulp).
    """
    k_int, p, first, second = reduction(x)
    scale = first * second  # 2^k, inf for k = 1024, 0 far below -1022
    scaled = p * scale + (scale - 1.0)
    overflowing = ((1.0 + p) * first) * second - 1.0
    value = scaled if k_int <= _LARGEST_SCALE else overflowing
    value = p if k_int == 0 else value
    # NaN in, NaN out (the clamps would drop it); +-0 keeps its sign, as libm's
    return value if (x == x) & (x != 0.0) else x


expm1_value = jit(_expm1_value)


def _exp_into(values: Any, shift: float, stop: int, out: Any) -> None:
    """out[t] = exp(values[t] - shift) for t < ``stop`` (values: a 1-D float32/float64
    view, read as float64; x - 0.0 is x, so a shift of 0 is exp itself): one loop
    without branches, which the compiler vectorises."""
    for t in range(stop):
        out[t] = exp_value(np.float64(values[t]) - shift)


exp_into = jit(_exp_into)


def _expm1_into(values: Any, stop: int, out: Any) -> None:
    """out[t] = exp(values[t]) - 1 (:func:`_expm1_value`) for t < ``stop``: one loop
    without branches, which the compiler vectorises."""
    for t in range(stop):
        out[t] = expm1_value(np.float64(values[t]))


expm1_into = jit(_expm1_into)


def _valid_stop(mask: Any) -> int:
    """One past the last True entry of the 1-D bool ``mask`` (0 if none): how far a
    row's values must be read, so that right padding costs no ``exp``."""
    stop = mask.shape[0]
    while stop > 0 and not mask[stop - 1]:
        stop -= 1
    return stop


valid_stop = jit(_valid_stop)
