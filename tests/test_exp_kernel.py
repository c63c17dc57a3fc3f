"""The vectorisable ``exp`` of the compiled loops against libm and an extended-precision
reference: within one ulp everywhere, exact at the special values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ratioscope.functional import _kernels

pytest.importorskip("numba")
pytestmark = pytest.mark.skipif(not _kernels.available(), reason="compiled kernels disabled")


def _exp_of(values: np.ndarray) -> np.ndarray:
    from ratioscope.functional import _exp

    out = np.empty(values.shape[0], dtype=np.float64)
    _exp.exp_into(values, 0.0, values.shape[0], out)
    return out


def _ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got - exact| in units of the float64 spacing at the rounded exact value."""
    nearest = exact.astype(np.float64)
    return (np.abs(got.astype(np.longdouble) - exact) / np.spacing(nearest)).astype(np.float64)


def test_within_one_ulp_of_the_exact_value_across_the_normal_range():
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("needs an 80-bit long double for the reference")
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.normal(0.0, 0.01, 200_000),  # log-ratios near 0
            rng.normal(0.0, 3.0, 200_000),
            rng.uniform(-708.0, 709.7, 200_000),  # every binade of normal results
            -rng.exponential(50.0, 100_000),  # kernel weights exp(-c^2 / 2 sigma^2)
        ]
    )
    got = _exp_of(x)
    exact = np.exp(x.astype(np.longdouble))
    assert _ulps(got, exact).max() <= 1.0
    # and as close to libm as that allows: never more than one ulp apart
    libm = np.array([math.exp(v) for v in x[:50_000].tolist()])
    assert (np.abs(got[:50_000] - libm) <= np.spacing(libm)).all()


def test_subnormal_results_round_once():
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("needs an 80-bit long double for the reference")
    x = np.linspace(-745.1, -708.5, 100_001)
    got = _exp_of(x)
    exact = np.exp(x.astype(np.longdouble))
    smallest = np.float64(5e-324)
    # an absolute error of at most one subnormal step (the result is rounded once)
    assert (np.abs(got.astype(np.longdouble) - exact) <= smallest).all()
    assert (got > 0).all()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, 1.0),
        (-0.0, 1.0),
        (1.0, math.e),
        (math.inf, math.inf),
        (-math.inf, 0.0),
        (710.0, math.inf),  # past the largest float64
        (709.78, math.exp(709.78)),
        (-746.0, 0.0),
        (-745.2, 0.0),
        (1e-300, 1.0),
        (-1e-20, 1.0),
    ],
)
def test_special_values(value, expected):
    got = _exp_of(np.array([value]))[0]
    if math.isinf(expected) or expected == 0.0:
        assert got == expected
    else:
        assert abs(got - expected) <= np.spacing(expected)


def test_nan_gives_nan_and_float32_inputs_are_read_as_float64():
    got = _exp_of(np.array([math.nan, 0.5, math.nan]))
    assert math.isnan(got[0]) and math.isnan(got[2])
    x32 = np.array([0.1, -3.7, 20.25], dtype=np.float32)
    assert np.array_equal(_exp_of(x32), _exp_of(x32.astype(np.float64)))


def test_exp_into_subtracts_the_shift_and_stops_where_told():
    from ratioscope.functional import _exp

    values = np.array([1.0, 2.0, 3.0, 4.0])
    out = np.full(4, -1.0)
    _exp.exp_into(values, 2.0, 3, out)
    expected = _exp_of(values - 2.0)
    assert np.array_equal(out[:3], expected[:3])
    assert out[3] == -1.0  # past the stop: untouched


@pytest.mark.parametrize(
    ("mask", "stop"),
    [([True, True, False, False], 2), ([False, True, False, True], 4), ([False] * 3, 0), ([], 0)],
)
def test_valid_stop_is_one_past_the_last_valid_position(mask, stop):
    from ratioscope.functional import _exp

    assert _exp.valid_stop(np.array(mask, dtype=np.bool_)) == stop


def _expm1_of(values: np.ndarray) -> np.ndarray:
    from ratioscope.functional import _exp

    out = np.empty(values.shape[0], dtype=np.float64)
    _exp.expm1_into(values, values.shape[0], out)
    return out


def _ulps_at(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """:func:`_ulps` for results of either sign."""
    nearest = exact.astype(np.float64)
    error = np.abs(got.astype(np.longdouble) - exact)
    return (error / np.abs(np.spacing(nearest))).astype(np.float64)


def test_expm1_within_one_ulp_near_zero_and_two_elsewhere():
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("needs an 80-bit long double for the reference")
    rng = np.random.default_rng(1)
    near = np.concatenate(
        [rng.normal(0.0, 1e-3, 200_000), rng.uniform(-0.3465, 0.3465, 200_000)]
    )  # log-ratios near on-policy: k3 = expm1(z) - z keeps its digits there
    assert _ulps_at(_expm1_of(near), np.expm1(near.astype(np.longdouble))).max() <= 1.0
    far = np.concatenate(
        [rng.uniform(-1.2, 1.2, 200_000), rng.normal(0.0, 3.0, 200_000),
         rng.uniform(-708.0, 709.7, 200_000), -rng.exponential(20.0, 100_000)]
    )  # fmt: skip
    assert _ulps_at(_expm1_of(far), np.expm1(far.astype(np.longdouble))).max() <= 2.0
    # never more than two ulps from libm's
    libm = np.array([math.expm1(v) for v in far[:50_000].tolist()])
    assert (np.abs(_expm1_of(far[:50_000]) - libm) <= 2 * np.abs(np.spacing(libm))).all()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, 0.0),
        (1e-300, 1e-300),
        (5e-324, 5e-324),
        (-1e-20, -1e-20),
        (1.0, math.e - 1.0),
        (-40.0, -1.0),
        (-746.0, -1.0),
        (-math.inf, -1.0),
        (709.78, math.expm1(709.78)),
        (710.0, math.inf),  # past the largest float64
        (math.inf, math.inf),
    ],
)
def test_expm1_special_values(value, expected):
    got = _expm1_of(np.array([value]))[0]
    if math.isinf(expected) or expected in (0.0, -1.0) or abs(expected) < 1e-200:
        assert got == expected
    else:
        assert abs(got - expected) <= 2 * np.spacing(abs(expected))


def test_expm1_keeps_the_sign_of_zero_and_nan_and_stops_where_told():
    from ratioscope.functional import _exp

    got = _expm1_of(np.array([-0.0, math.nan]))
    assert got[0] == 0.0 and math.copysign(1.0, got[0]) == -1.0
    assert math.isnan(got[1])
    out = np.full(3, 7.0)
    _exp.expm1_into(np.array([0.5, -0.5, 2.0], dtype=np.float32), 2, out)
    assert abs(out[0] - math.expm1(0.5)) <= np.spacing(math.expm1(0.5))
    assert out[2] == 7.0  # past the stop: untouched
