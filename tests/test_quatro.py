"""QUATRO duals (paper Eq. 11-15, 19) against scipy, closed forms and their invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq, minimize_scalar
from scipy.special import logsumexp

from ratioscope.errors import ShapeMismatchError, UsageError
from ratioscope.functional.quatro import (
    binary_advantage_table,
    grpo_advantages,
    quatro_delta_sweep,
    quatro_duals,
)


def _reference_lambda(rewards: np.ndarray, delta: float) -> float:
    """argmin over lambda > 0 of f(lambda) = lambda (delta + log mean exp(R / lambda)).

    Minimised over u = log(lambda) with scipy's bounded Brent method. The rewards are
    shifted by their maximum first, which adds the constant max(R) to f and keeps its
    values small, so the flat minimum is located more precisely.
    """
    shifted = rewards - rewards.max()
    spread = rewards.max() - rewards.min()

    def f(u: float) -> float:
        lam = math.exp(u)
        return lam * (delta + logsumexp(shifted / lam) - math.log(len(rewards)))

    centre = math.log(spread)
    result = minimize_scalar(
        f, bounds=(centre - 12.0, centre + 12.0), method="bounded", options={"xatol": 1e-12}
    )
    return math.exp(result.x)


def _random_groups(seed: int, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 13, n_groups)
    group = np.repeat(np.arange(n_groups), sizes)
    rng.shuffle(group)
    rewards = rng.normal(size=group.size)
    binary = group % 3 == 0
    rewards[binary] = rng.integers(0, 2, int(binary.sum()))
    return rewards, group


@pytest.mark.parametrize("delta", [0.1, 0.01, 0.001])
def test_lambda_matches_scipy_minimize_scalar(delta: float) -> None:
    rewards, group = _random_groups(seed=1, n_groups=120)
    lam, mu, adv, degenerate = quatro_duals(torch.tensor(rewards), torch.tensor(group), delta)
    checked = 0
    for g in range(120):
        r = rewards[group == g]
        n, m = len(r), int((r == r.max()).sum())
        assert bool(degenerate[g]) == (delta >= math.log(n / m))
        if degenerate[g]:
            continue
        expected = _reference_lambda(r, delta)
        assert abs(float(lam[g]) - expected) <= 1e-6 * expected
        # mu* = f(lambda*) - lambda* (delta + 1), Eq. (12), from the paper's f directly
        lam_g = float(lam[g])
        f_value = lam_g * (delta + logsumexp(r / lam_g) - math.log(n))
        assert float(mu[g]) == pytest.approx(f_value - lam_g * (delta + 1), rel=1e-9, abs=1e-9)
        # A_i = (R_i - mu*) / lambda* - 1, Eq. (15)
        np.testing.assert_allclose(
            adv[torch.tensor(group) == g].numpy(),
            (r - float(mu[g])) / lam_g - 1,
            rtol=1e-8,
            atol=1e-8,
        )
        checked += 1
    assert checked > 80


@pytest.mark.parametrize("delta", [0.1, 0.01, 1e-3, 1e-6])
def test_optimal_reweighting_has_kl_delta_and_matches_pi_star(delta: float) -> None:
    rewards, group = _random_groups(seed=2, n_groups=60)
    lam, _, adv, degenerate = quatro_duals(torch.tensor(rewards), torch.tensor(group), delta)
    for g in range(60):
        if degenerate[g]:
            continue
        r, a = rewards[group == g], adv[torch.tensor(group) == g].numpy()
        # p* ∝ pi_old exp(R / lambda*) on the sampled rollouts (Eq. 13): p* / uniform
        p_star = np.exp(r / float(lam[g]) - logsumexp(r / float(lam[g])))
        np.testing.assert_allclose(np.exp(a), len(r) * p_star, rtol=1e-9)
        np.testing.assert_allclose(np.exp(a) / np.exp(a).mean(), np.exp(a), rtol=1e-12)
        kl = float(np.sum(p_star * np.log(len(r) * p_star)))
        assert kl == pytest.approx(delta, rel=1e-7)


def test_binary_table_matches_closed_form() -> None:
    n, delta = 8, 0.01
    table = binary_advantage_table(n, delta)
    for c in range(1, n):
        # c rewards 1, n - c rewards 0: p*(correct) = e^(1/l) / (c e^(1/l) + n - c)
        def kl_minus_delta(log_lam: float, c: int = c) -> float:
            t = math.exp(-log_lam)
            p_hi = math.exp(t) / (c * math.exp(t) + n - c)
            p_lo = 1.0 / (c * math.exp(t) + n - c)
            return c * p_hi * math.log(n * p_hi) + (n - c) * p_lo * math.log(n * p_lo) - delta

        lam = math.exp(brentq(kl_minus_delta, -5, 10, xtol=1e-14))
        denominator = c * math.exp(1 / lam) + n - c
        assert float(table.lam[c]) == pytest.approx(lam, rel=1e-9)
        assert float(table.quatro_correct[c]) == pytest.approx(
            math.log(n * math.exp(1 / lam) / denominator), rel=1e-9
        )
        assert float(table.quatro_incorrect[c]) == pytest.approx(
            math.log(n / denominator), rel=1e-9
        )
        p = c / n  # GRPO with the population std: sqrt((1-p)/p) and -sqrt(p/(1-p))
        assert float(table.grpo_correct[c]) == pytest.approx(math.sqrt((1 - p) / p), rel=1e-5)
        assert float(table.grpo_incorrect[c]) == pytest.approx(-math.sqrt(p / (1 - p)), rel=1e-5)
    assert bool(table.degenerate[0]) and bool(table.degenerate[n])
    assert math.isnan(float(table.quatro_correct[0])) and float(table.quatro_incorrect[0]) == 0.0
    assert math.isnan(float(table.quatro_incorrect[n])) and float(table.quatro_correct[n]) == 0.0


def test_degenerate_groups_are_flagged_and_get_zero_advantage() -> None:
    # group 0: all equal; group 1: three of four maximal, log(4/3) = 0.2877 < delta;
    # group 2: no member; group 3: a single rollout; group 4: a regular group
    rewards = torch.tensor([0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 0.0, 7.0, 1.0, 0.0, 0.0])
    group = torch.tensor([0, 0, 0, 1, 1, 1, 1, 3, 4, 4, 4])
    lam, mu, adv, degenerate = quatro_duals(rewards, group, delta=0.3)
    assert degenerate.tolist() == [True, True, True, True, False]
    assert torch.isnan(lam[:4]).all() and torch.isnan(mu[:4]).all()
    assert torch.isfinite(lam[4]) and torch.isfinite(mu[4])
    assert adv[:8].abs().max().item() == 0.0
    assert torch.isfinite(adv).all()
    # the same group 1 with a radius just below log(4/3) has an interior optimum
    _, _, _, degenerate = quatro_duals(rewards, group, delta=math.log(4 / 3) - 1e-3)
    assert not bool(degenerate[1])


def test_delta_sweep_matches_single_solves_and_orders_lambda() -> None:
    rewards, group = _random_groups(seed=3, n_groups=40)
    r, g = torch.tensor(rewards), torch.tensor(group)
    sweep = quatro_delta_sweep(r, g, (0.1, 0.01, 0.001))
    for index, delta in enumerate(sweep.deltas):
        single = quatro_duals(r, g, delta)
        torch.testing.assert_close(sweep.lam[index], single.lam, equal_nan=True)
        torch.testing.assert_close(sweep.adv[index], single.adv)
    both = ~sweep.degenerate[0] & ~sweep.degenerate[2]
    # a tighter trust region needs a larger lambda (QUATRO section 3.3)
    assert (sweep.lam[2][both] > sweep.lam[0][both]).all()


@pytest.mark.parametrize("ddof", [0, 1])
def test_grpo_advantages_match_a_loop(ddof: int) -> None:
    rewards, group = _random_groups(seed=4, n_groups=30)
    got = grpo_advantages(torch.tensor(rewards), torch.tensor(group), eps=1e-6, std_ddof=ddof)
    for g in range(30):
        r = rewards[group == g]
        expected = (r - r.mean()) / (r.std(ddof=ddof) + 1e-6)
        np.testing.assert_allclose(got[torch.tensor(group) == g].numpy(), expected, atol=1e-9)


def test_grpo_equal_rewards_give_zero_even_without_eps() -> None:
    got = grpo_advantages(torch.tensor([1.0, 1.0, 3.0]), torch.tensor([0, 0, 1]), eps=0.0)
    assert got.tolist() == [0.0, 0.0, 0.0]


@settings(max_examples=40, deadline=None)
@given(
    data=st.lists(
        # rewards on a 0.01 grid: shift invariance holds to float precision only when the
        # reward gaps stay well above the rounding of the shifted values (gaps of 1e-10
        # around 5 keep just 6 significant digits)
        st.tuples(st.integers(0, 5), st.integers(-300, 300).map(lambda k: k / 100)),
        min_size=1,
        max_size=40,
    ),
    shift=st.floats(-5, 5),
    scale=st.floats(0.1, 10),
    delta=st.sampled_from([0.1, 0.01, 0.001]),
)
def test_invariances(data, shift: float, scale: float, delta: float) -> None:
    group = torch.tensor([g for g, _ in data])
    rewards = torch.tensor([r for _, r in data], dtype=torch.float64)
    lam, mu, adv, degenerate = quatro_duals(rewards, group, delta)
    assert torch.isfinite(adv).all()
    live = ~degenerate
    assert (lam[live] > 0).all()
    for g in torch.nonzero(live).flatten().tolist():
        members = group == g
        assert float(torch.exp(adv[members]).mean()) == pytest.approx(1.0, abs=1e-9)
        # advantages are ordered as the rewards are
        order = torch.argsort(rewards[members])
        assert (torch.diff(adv[members][order]) >= -1e-12).all()
    # R -> scale R + shift: lambda and mu scale (mu also shifts), advantages are unchanged
    lam2, mu2, adv2, degenerate2 = quatro_duals(scale * rewards + shift, group, delta)
    assert torch.equal(degenerate, degenerate2)
    torch.testing.assert_close(lam2[live], scale * lam[live], rtol=1e-7, atol=0)
    torch.testing.assert_close(mu2[live], scale * mu[live] + shift, rtol=1e-7, atol=1e-7)
    torch.testing.assert_close(adv2, adv, rtol=1e-6, atol=1e-7)


def test_bad_input_raises_ratioscope_errors() -> None:
    rewards, group = torch.tensor([1.0, 0.0]), torch.tensor([0, 0])
    with pytest.raises(UsageError):
        quatro_duals(rewards, group, delta=0.0)
    with pytest.raises(UsageError):
        quatro_duals(rewards, torch.tensor([-1, 0]))
    with pytest.raises(UsageError):
        quatro_duals(torch.tensor([1.0, math.nan]), group)
    with pytest.raises(ShapeMismatchError):
        quatro_duals(rewards, torch.tensor([0, 0, 0]))
    with pytest.raises(UsageError):
        quatro_duals(rewards, torch.tensor([0.0, 0.0]))


def test_empty_input() -> None:
    lam, mu, adv, degenerate = quatro_duals(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert lam.numel() == mu.numel() == adv.numel() == degenerate.numel() == 0


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu() -> None:
    rewards, group = _random_groups(seed=5, n_groups=50)
    cpu = quatro_duals(torch.tensor(rewards), torch.tensor(group))
    gpu = quatro_duals(torch.tensor(rewards).cuda(), torch.tensor(group).cuda())
    assert gpu.adv.is_cuda
    torch.testing.assert_close(gpu.lam.cpu(), cpu.lam, equal_nan=True)
    torch.testing.assert_close(gpu.adv.cpu(), cpu.adv)


def _groups_of_every_kind(seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Binary, Gaussian, few-valued and large rewards; groups of 1 to 16, ties, all-equal."""
    gen = torch.Generator().manual_seed(seed)
    cases = []
    for kind in range(4):
        n_groups, size = 30, 1 + 5 * kind
        n = n_groups * size
        rewards = [
            torch.randint(0, 2, (n,), generator=gen).double(),
            torch.randn(n, generator=gen, dtype=torch.float64),
            torch.randint(0, 5, (n,), generator=gen).double() * 0.25,
            torch.rand(n, generator=gen, dtype=torch.float64) * 1e3,
        ][kind]
        rewards[:size] = 0.5  # one group of equal rewards: degenerate
        cases.append((rewards, torch.arange(n_groups).repeat_interleave(size)))
    return cases


@pytest.mark.parametrize("delta", [0.1, 0.01, 0.001, 1e-6])
def test_compiled_solve_equals_the_tensor_code(delta: float) -> None:
    from ratioscope.functional import _kernels, quatro

    if not _kernels.available():
        pytest.skip("compiled kernels disabled")
    # KL = log N + E_p[x] - log sum exp(x) cancels to delta: its rounding, about
    # 1e-16 log N / delta relative, bounds how closely any two solvers can agree
    tolerance = max(1e-12, 1e-14 / delta)
    for rewards, group in _groups_of_every_kind(seed=11):
        padded = quatro._pad(rewards, group, int(group.max()) + 1)
        radii = torch.full((padded.shifted.shape[0],), delta, dtype=torch.float64)
        lam, mu, degenerate = quatro._solve(padded, radii)
        ref_lam, ref_mu, ref_degenerate = quatro._solve_torch(padded, radii)
        assert torch.equal(degenerate, ref_degenerate) and bool(degenerate[0])
        torch.testing.assert_close(lam, ref_lam, rtol=tolerance, atol=0, equal_nan=True)
        scale = padded.top.abs() + ref_lam.nan_to_num(0.0)  # mu = top + lam (...)
        torch.testing.assert_close(
            mu / scale, ref_mu / scale, rtol=0, atol=tolerance, equal_nan=True
        )
