"""functional.changepoint: the trailing median/MAD change rule against a plain reading."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.errors import ParameterError
from ratioscope.functional.changepoint import ChangeRule, change_flags


def reference_flags(values, rule, floor=0.0):
    """The rule written out the slow way: the history restarts at every flag; the scale
    is at least ``floor``."""
    flags, start = [], 0
    for t, x in enumerate(values):
        if x is None or math.isnan(x):
            flags.append(False)
            continue
        history = [v for v in values[start:t] if v is not None and not math.isnan(v)]
        history = history[-rule.window :]
        flag = False
        if len(history) >= rule.min_history:
            m = statistics.median(history)
            mad = statistics.median([abs(h - m) for h in history])
            scale = max(1.4826 * mad, rule.floor_rel * abs(m), floor)
            flag = (x != m) if scale == 0 else abs(x - m) > rule.k * scale
        if flag:
            start = t
        flags.append(flag)
    return flags


def test_hand_computed_case():
    # history 1..5: median 3, MAD 1, scale 1.4826; the threshold is 3 + 6 * 1.4826 = 11.8956
    assert change_flags([1, 2, 3, 4, 5, 11.89]) == [False] * 6
    assert change_flags([1, 2, 3, 4, 5, 11.9]) == [False] * 5 + [True]


def test_a_lasting_shift_is_flagged_once_at_its_onset():
    rng = np.random.default_rng(0)
    series = list(1.0 + 0.01 * rng.normal(size=30))
    series[15:] = [x + 1.0 for x in series[15:]]
    assert [t for t, f in enumerate(change_flags(series)) if f] == [15]


def test_missing_values_are_skipped_not_flagged():
    series = [1.0, None, 1.01, float("nan"), 0.99, 1.0, 1.02, None, 5.0]
    assert change_flags(series) == [False] * 8 + [True]


def test_a_flat_series_does_not_flag_float_noise_but_zeros_flag_any_move():
    assert not any(change_flags([0.25] * 10 + [0.25 * (1 + 1e-7)]))
    assert change_flags([0.0] * 6 + [1e-3]) == [False] * 6 + [True]


def test_below_its_floor_a_series_flags_nothing_and_a_rise_through_it_is_flagged():
    # float32 rounding of a k3: 1e-13 to 2e-13, then 6.5e-13 (flagged without a floor)
    noise = [1e-13, 2e-13, 1e-13, 1e-13, 2e-13, 1e-13, 6.5e-13]
    assert change_flags(noise)[-1]
    assert not any(change_flags(noise, floor=1e-6))
    # a rise of more than k = 6 floors is flagged at its step
    rising = [*noise, 7e-6, 7.1e-6, 6.9e-6]
    assert change_flags(rising, floor=1e-6) == [False] * 7 + [True, False, False]
    # a share near 0 that moves by less than 6 floors (1 %) is no change; the same moves
    # without a floor flag a step whose history happens to be flat
    shares = [0.0, 0.0, 0.03, 0.0, 0.0, 0.0, 0.05]
    assert change_flags(shares)[-1] and not any(change_flags(shares, floor=0.01))


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.floats(0, 1, allow_nan=False)), max_size=30),
    floor=st.floats(0, 0.5),
)
def test_a_floor_is_the_plain_reading_with_the_scale_at_least_the_floor(values, floor):
    rule = ChangeRule(window=6, min_history=3)
    assert change_flags(values, rule, floor) == reference_flags(values, rule, floor)


def test_too_little_history_flags_nothing():
    assert change_flags([1.0, 1.0, 1.0, 1.0, 100.0]) == [False] * 5


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)), min_size=0, max_size=40
    ),
    window=st.integers(2, 12),
    k=st.floats(0.5, 10),
)
def test_matches_the_plain_reading(values, window, k):
    rule = ChangeRule(window=window, min_history=2, k=k)
    assert change_flags(values, rule) == reference_flags(values, rule)


@pytest.mark.parametrize(
    "kwargs", [{"window": 1}, {"min_history": 1}, {"window": 4, "min_history": 5}, {"k": 0}]
)
def test_bad_rules_are_refused(kwargs):
    with pytest.raises(ParameterError):
        ChangeRule(**kwargs)
