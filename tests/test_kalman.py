"""KPO Kalman filter: chunked scan vs a plain loop, statsmodels, and the closed form."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.errors import ShapeMismatchError, UsageError
from ratioscope.functional.kalman import (
    closed_form_clamp_index,
    closed_form_deviation,
    kalman_filter,
    kalman_filter_closed_form,
    kalman_filter_loop,
    kalman_gains,
)

RATIOS = [1e-6, 1e-4, 1e-2]
ATOL = 1e-6  # docs/performance.md: <= 1e-6 abs vs a float64 loop


def python_gains(T: int, q: float, v: float, p0: float) -> list[float]:
    """KPO Eqs. 6 and 8 in plain Python floats."""
    gains, variance = [], p0
    for _ in range(T):
        predicted = variance + q
        gain = predicted / (predicted + v)
        gains.append(gain)
        variance = (1.0 - gain) * predicted
    return gains


def ragged_mask(rows: int, length: int, generator: torch.Generator, holes: float = 0.1):
    """Right-padded random lengths (some empty, some full) with interior holes."""
    lengths = torch.randint(0, length + 1, (rows,), generator=generator)
    lengths[0], lengths[-1] = length, 0
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    return mask & (torch.rand(rows, length, generator=generator) >= holes)


@pytest.mark.parametrize("q", [0.0, 1e-6, 1e-4, 1e-2, 1.0, 50.0])
@pytest.mark.parametrize("p0", [0.0, 0.3, 1e3])
def test_gains_match_plain_recursion(q, p0):
    T = 3000
    expected = torch.tensor(python_gains(T, q, 1.0, p0), dtype=torch.float64)
    got = kalman_gains(T, q, 1.0, p0)
    assert got.dtype == torch.float64 and got.shape == (T,)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-300)


def test_gains_hand_case():
    # q = v = 1, p0 = 0: P_pred = 1, 3/2, 8/5 -> K = 1/2, 3/5, 8/13.
    assert kalman_gains(3, 1.0, 1.0).tolist() == pytest.approx([0.5, 0.6, 8 / 13], abs=1e-15)
    assert kalman_gains(0, 1.0, 1.0).shape == (0,)


def test_filter_hand_case():
    z = torch.tensor([[2.0, 0.0, 2.0]], dtype=torch.float64)
    # rho = K1*2 = 1; rho = 0.4*1 + 0 = 0.4; rho = (5/13)*0.4 + (8/13)*2.
    expected = [1.0, 0.4, (5 / 13) * 0.4 + 16 / 13]
    for fn in (kalman_filter, kalman_filter_loop):
        assert fn(z, None, q=1.0, v=1.0)[0].tolist() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("ratio", RATIOS)
@pytest.mark.parametrize("policy", ["zero", "skip"])
def test_statsmodels_local_level_oracle(ratio, policy):
    from statsmodels.tsa.statespace.structural import UnobservedComponents

    rng = np.random.default_rng(7)
    y = rng.normal(0.05, 0.3, size=400)
    rho0, p0, v = 0.1, 0.2, 1.5
    q = ratio * v
    model = UnobservedComponents(y, level="local level")
    model.initialize_known(np.array([rho0]), np.array([[p0 + q]]))
    expected = model.filter([v, q]).filtered_state[0]
    z = torch.tensor(y).unsqueeze(0)
    for dtype, tol in ((torch.float64, 1e-8), (torch.float32, ATOL)):
        got = kalman_filter(z.to(dtype), None, q, v, p0, rho0, policy)
        np.testing.assert_allclose(got[0].double().numpy(), expected, atol=tol, rtol=0)
    # A masked token under "skip" is invisible: statsmodels on the observed subsequence.
    mask = torch.ones_like(z, dtype=torch.bool)
    mask[0, 50:60] = False
    model = UnobservedComponents(y[mask[0].numpy()], level="local level")
    model.initialize_known(np.array([rho0]), np.array([[p0 + q]]))
    sub = model.filter([v, q]).filtered_state[0]
    got = kalman_filter(z, mask, q, v, p0, rho0, "skip")[0][mask[0]].numpy()
    np.testing.assert_allclose(got, sub, atol=1e-8, rtol=0)


@pytest.mark.parametrize("ratio", RATIOS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("policy", ["zero", "skip"])
def test_scan_matches_loop_ragged(ratio, dtype, policy):
    gen = torch.Generator().manual_seed(int(ratio * 1e6) + 3)
    rows, length = 16, 1237  # not a multiple of the chunk: exercises the tail chunk
    z = (0.3 * torch.randn(rows, length, generator=gen, dtype=torch.float64)).to(dtype)
    mask = ragged_mask(rows, length, gen)
    got = kalman_filter(z, mask, ratio, 1.0, 0.05, -0.02, policy)
    assert got.dtype == dtype and got.shape == z.shape
    expected = kalman_filter_loop(z, mask, ratio, 1.0, 0.05, -0.02, policy)
    tol = ATOL if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got.double(), expected, atol=tol, rtol=0)


def test_long_sequence_float32_matches_loop():
    # Q/V = 1e-6 has the longest memory (gain ~1e-3), so float32 errors would pile up most.
    gen = torch.Generator().manual_seed(11)
    z = 0.3 * torch.randn(2, 32768, generator=gen) + 0.5
    mask = torch.ones_like(z, dtype=torch.bool)
    mask[1, 30000:] = False
    got = kalman_filter(z, mask, q=1e-6, v=1.0)
    expected = kalman_filter_loop(z, mask, q=1e-6, v=1.0)
    assert (got.double() - expected).abs().max().item() <= ATOL


@pytest.mark.parametrize("chunk", [2, 3, 7, 64, 256, 5000])
@pytest.mark.parametrize("q", [1e-2, 100.0])  # 100: products within a chunk reach 1e-500
def test_chunk_size_does_not_change_the_result(chunk, q):
    gen = torch.Generator().manual_seed(5)
    z = torch.randn(3, 777, generator=gen, dtype=torch.float64)
    mask = ragged_mask(3, 777, gen)
    expected = kalman_filter_loop(z, mask, q, 1.0)
    torch.testing.assert_close(
        kalman_filter(z, mask, q, 1.0, chunk=chunk), expected, atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("q", [10.0, 1e3])  # gains near 1: per-chunk transfer matrices
def test_large_gains_float32(q):
    gen = torch.Generator().manual_seed(6)
    z = torch.randn(5, 300, generator=gen)
    mask = ragged_mask(5, 300, gen)
    for policy in ("zero", "skip"):
        got = kalman_filter(z, mask, q, 1.0, mask_policy=policy)
        expected = kalman_filter_loop(z, mask, q, 1.0, mask_policy=policy)
        assert (got.double() - expected).abs().max().item() <= ATOL


def test_inputs_are_not_modified():
    gen = torch.Generator().manual_seed(8)
    for dtype in (torch.float32, torch.float64):
        z = torch.randn(3, 130, generator=gen, dtype=dtype)
        mask = ragged_mask(3, 130, gen)
        z_before, mask_before = z.clone(), mask.clone()
        for policy in ("zero", "skip"):
            kalman_filter(z, mask, 1e-2, mask_policy=policy)
            kalman_filter(z, None, 1e-2, mask_policy=policy)
        assert torch.equal(z, z_before) and torch.equal(mask, mask_before)


def test_zero_policy_treats_masked_token_as_zero_observation():
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(4, 300, generator=gen, dtype=torch.float64)
    mask = ragged_mask(4, 300, gen, holes=0.3)
    zeroed = torch.where(mask, z, torch.zeros(()))
    torch.testing.assert_close(
        kalman_filter(z, mask, 1e-3), kalman_filter(zeroed, None, 1e-3), atol=1e-13, rtol=0
    )


@pytest.mark.parametrize("policy", ["zero", "skip"])
@pytest.mark.parametrize("backend", ["compiled", "torch"])
def test_zero_masked_is_the_filter_with_its_masked_positions_zeroed(policy, backend):
    gen = torch.Generator().manual_seed(5)
    z = torch.randn(9, 150, generator=gen)
    mask = ragged_mask(9, 150, gen, holes=0.3)
    full = kalman_filter(z, mask, 1e-2, mask_policy=policy, backend=backend)
    got = kalman_filter(z, mask, 1e-2, mask_policy=policy, backend=backend, zero_masked=True)
    assert (full[~mask] != 0).any()  # the states there are not 0 without it
    torch.testing.assert_close(got, torch.where(mask, full, 0.0), atol=0, rtol=0)


def test_masked_nonfinite_values_are_ignored():
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(3, 200, generator=gen)
    mask = torch.ones_like(z, dtype=torch.bool)
    mask[0, 10] = mask[1, 150:] = mask[2, 0] = False
    dirty = z.clone()
    dirty[0, 10], dirty[1, 150:], dirty[2, 0] = math.nan, math.inf, -math.inf
    for policy in ("zero", "skip"):
        clean = kalman_filter(z, mask, 1e-2, mask_policy=policy)
        got = kalman_filter(dirty, mask, 1e-2, mask_policy=policy)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, clean, atol=0, rtol=0)


def test_skip_policy_left_and_right_padding_agree():
    gen = torch.Generator().manual_seed(4)
    rows, length = 6, 500
    lengths = torch.tensor([500, 320, 1, 0, 77, 499])
    z = torch.randn(rows, length, generator=gen)
    right = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    left = right.flip(1)
    z_left = torch.zeros_like(z)
    for i, n in enumerate(lengths.tolist()):
        z_left[i, length - n :] = z[i, :n]
    out_right = kalman_filter(z, right, 1e-2, mask_policy="skip")
    out_left = kalman_filter(z_left, left, 1e-2, mask_policy="skip")
    torch.testing.assert_close(out_left[left], out_right[right], atol=0, rtol=0)
    # Masked positions hold the last valid state, rho0 before the first valid token.
    assert (out_left[~left] == 0).all()
    torch.testing.assert_close(out_right[1, 320:], out_right[1, 319].expand(180))


def test_output_dtype_device_and_empty():
    z16 = torch.randn(2, 40).to(torch.float16)
    assert kalman_filter(z16, None).dtype == torch.float16
    assert kalman_filter(torch.zeros(0, 5), None).shape == (0, 5)
    assert kalman_filter(torch.zeros(3, 0), None).shape == (3, 0)
    ints = torch.ones(2, 5, dtype=torch.int64)
    assert kalman_filter(ints, None).dtype == torch.float32
    z = torch.randn(2, 70, dtype=torch.float64)  # an int rho0 is a number like any other
    torch.testing.assert_close(
        kalman_filter(z, None, 1e-2, rho0=1), kalman_filter_loop(z, None, 1e-2, rho0=1.0)
    )


def test_bad_arguments_raise_ratioscope_errors():
    z = torch.zeros(2, 5)
    with pytest.raises(UsageError):
        kalman_filter(z, None, q=-1.0)
    with pytest.raises(UsageError):
        kalman_filter(z, None, v=0.0)
    with pytest.raises(UsageError):
        kalman_filter(z, None, mask_policy="drop")
    with pytest.raises(UsageError):
        kalman_filter(torch.zeros(5), None)
    with pytest.raises(ShapeMismatchError):
        kalman_filter(z, torch.ones(2, 4, dtype=torch.bool))


def test_closed_form_breaks_for_long_sequences_but_scan_stays_exact():
    gen = torch.Generator().manual_seed(9)
    z = 0.3 * torch.randn(4, 3000, generator=gen) + 0.2
    q, v = 1e-2, 1.0
    exact = kalman_filter_loop(z, None, q, v)
    closed = kalman_filter_closed_form(z, None, q, v).double()
    # Before its clamps bind the closed form is fine (float32 rounding only) ...
    clamp = closed_form_clamp_index(3000, q, v)
    assert clamp is not None and 600 < clamp < 800  # 697 at Q/V = 1e-2 (docs/metrics-ratios.md)
    assert (closed[:, :clamp] - exact[:, :clamp]).abs().max() < 1e-4
    # ... and far off after, while the scan stays exact.
    assert (closed[:, -1000:] - exact[:, -1000:]).abs().max() > 0.1
    assert (kalman_filter(z, None, q, v).double() - exact).abs().max() <= ATOL
    report = closed_form_deviation(z, None, q, v, atol=1e-3)
    assert report.first_index is not None and report.first_index >= clamp - 50
    assert report.max_abs_error > 0.1 and report.clamp_index == clamp


def test_closed_form_is_fine_where_its_clamps_do_not_bind():
    gen = torch.Generator().manual_seed(10)
    z = 0.3 * torch.randn(3, 2000, generator=gen)
    assert closed_form_clamp_index(2000, 1e-6, 1.0) is None
    report = closed_form_deviation(z, None, 1e-6, 1.0, atol=1e-5)
    assert report.first_index is None and report.max_abs_error < 1e-5


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 5),
    length=st.integers(1, 300),
    log_ratio=st.floats(-7, 1),
    p0=st.sampled_from([0.0, 0.01, 1.0, 100.0]),
    rho0=st.floats(-1, 1),
    hole_rate=st.sampled_from([0.0, 0.2, 0.9]),
    policy=st.sampled_from(["zero", "skip"]),
    chunk=st.sampled_from([2, 5, 32, 64]),
    seed=st.integers(0, 2**16),
)
def test_property_scan_equals_loop(
    rows, length, log_ratio, p0, rho0, hole_rate, policy, chunk, seed
):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(rows, length, generator=gen)
    mask = torch.rand(rows, length, generator=gen) >= hole_rate
    v = 0.5
    q = v * 10.0**log_ratio
    got = kalman_filter(z, mask, q, v, p0, rho0, policy, chunk=chunk)
    expected = kalman_filter_loop(z, mask, q, v, p0, rho0, policy)
    assert (got.double() - expected).abs().max().item() <= ATOL
    # The filter is a convex combination of rho0 and the observations it used.
    observed = torch.where(mask, z, torch.zeros(())) if policy == "zero" else z
    bound = max(abs(rho0), observed.abs().max().item()) + 1e-5
    assert got.abs().max().item() <= bound


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
@pytest.mark.parametrize("policy", ["zero", "skip"])
def test_cuda_matches_cpu_loop(policy):
    gen = torch.Generator().manual_seed(12)
    z = 0.3 * torch.randn(64, 4100, generator=gen)
    mask = ragged_mask(64, 4100, gen)
    expected = kalman_filter_loop(z, mask, 1e-4, 1.0, mask_policy=policy)
    got = kalman_filter(z.cuda(), mask.cuda(), 1e-4, 1.0, mask_policy=policy)
    assert got.device.type == "cuda" and got.dtype == torch.float32
    assert (got.cpu().double() - expected).abs().max().item() <= ATOL
