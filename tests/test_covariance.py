"""CW-GRPO covariance kernel (section 2.3, Table 1, Fig. 3) against numpy loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.errors import ShapeMismatchError, UsageError
from ratioscope.functional.covariance import (
    advantage_mass_removed,
    clip_cov_touched,
    covariance_percentiles,
    covariance_percentiles_from_bins,
    covariance_weights,
    cumulative_covariance_share,
    cumulative_covariance_share_from_bins,
    kernel_weight_summary,
    kl_cov_touched,
)


def _reference(logp, adv, mask, group):
    """Plain loop over scopes, written from CW-GRPO section 2.3 (numpy, float64)."""
    c = np.zeros(mask.shape)
    w = np.zeros(mask.shape)
    w_norm = np.zeros(mask.shape)
    scopes = [None] if group is None else sorted(set(group.tolist()))
    for scope in scopes:
        rows = np.ones(mask.shape[0], bool) if scope is None else group == scope
        select = mask & rows[:, None]
        if not select.any():
            continue
        lp, a = logp[select], adv[select]
        cov = (lp - lp.mean()) * (a - a.mean())
        sigma = cov.std()  # population std
        # decision (documented): a spread below 1e-12 of the rms covariance is sigma = 0
        flat = sigma <= 1e-12 * np.sqrt(np.mean(cov**2))
        weights = np.ones_like(cov) if flat else np.exp(-(cov**2) / (2 * sigma**2))
        c[select], w[select] = cov, weights
        w_norm[select] = weights * len(cov) / weights.sum()
    return c, w, w_norm


def _random_batch(seed: int, rows: int = 24, cols: int = 17):
    rng = np.random.default_rng(seed)
    logp = -rng.exponential(1.0, (rows, cols))
    group = rng.choice([3, 11, 42, 7], rows)  # arbitrary ids, not 0..G-1, interleaved
    rewards = rng.integers(0, 2, rows).astype(float)
    adv = np.repeat(rewards[:, None] - 0.5, cols, axis=1) + rng.normal(0, 0.1, (rows, cols))
    lengths = rng.integers(0, cols + 1, rows)
    mask = np.arange(cols)[None, :] < lengths[:, None]
    return logp, adv, mask, group


@pytest.mark.parametrize("scoped", [True, False])
def test_weights_match_a_loop_over_groups(scoped: bool) -> None:
    logp, adv, mask, group = _random_batch(seed=0)
    got = covariance_weights(
        torch.tensor(logp, dtype=torch.float32),
        torch.tensor(adv, dtype=torch.float32),
        torch.tensor(mask),
        torch.tensor(group) if scoped else None,
    )
    # the reference sees the same float32-rounded inputs
    expected = _reference(
        logp.astype(np.float32).astype(float),
        adv.astype(np.float32).astype(float),
        mask,
        group if scoped else None,
    )
    for tensor, reference in zip(got, expected, strict=True):
        assert tensor.dtype == torch.float32
        np.testing.assert_allclose(tensor.numpy(), reference, rtol=1e-5, atol=1e-6)
        assert (tensor.numpy()[~mask] == 0).all()


def test_hand_computed_case() -> None:
    # logp mean -1.625, advantage mean 0; c = (logp + 1.625) * adv
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], dtype=torch.float64)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    c, w, w_norm = covariance_weights(logp, adv, torch.ones(2, 2, dtype=torch.bool))
    assert c.dtype == torch.float64
    assert c.tolist() == [[0.625, -0.375], [-1.125, 1.375]]
    sigma2 = np.var([0.625, -0.375, -1.125, 1.375])
    np.testing.assert_allclose(w.numpy(), np.exp(-(c.numpy() ** 2) / (2 * sigma2)), rtol=1e-12)
    assert float(w_norm.sum()) == pytest.approx(4.0, rel=1e-12)


def test_zero_spread_scope_gets_flat_weights() -> None:
    # group 0: every advantage equal -> c = 0 -> sigma = 0; group 1: a regular group
    logp = torch.tensor([[-1.0, -2.0], [-0.3, -0.7], [-1.0, -0.1], [-2.0, -0.5]])
    adv = torch.tensor([[0.5, 0.5], [0.5, 0.5], [1.0, 1.0], [-1.0, -1.0]])
    mask = torch.ones(4, 2, dtype=torch.bool)
    c, w, w_norm = covariance_weights(logp, adv, mask, torch.tensor([0, 0, 1, 1]))
    assert c[:2].abs().max() == 0 and (w[:2] == 1).all() and (w_norm[:2] == 1).all()
    assert (w[2:] < 1).any()
    assert torch.isfinite(w).all() and torch.isfinite(w_norm).all()


def test_two_token_scope_is_flat() -> None:
    # two tokens give c_1 = d e = (-d)(-e) = c_2: sigma = 0 although c != 0
    logp = torch.tensor([[-0.3], [-1.7]])
    adv = torch.tensor([[0.9], [-0.4]])
    c, w, w_norm = covariance_weights(logp, adv, torch.ones(2, 1, dtype=torch.bool))
    assert c[0, 0] == pytest.approx(c[1, 0].item()) and c[0, 0] > 0
    assert w.tolist() == [[1.0], [1.0]] and w_norm.tolist() == [[1.0], [1.0]]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), offset=st.floats(-5, 5))
def test_properties(seed: int, offset: float) -> None:
    logp, adv, mask, group = _random_batch(seed, rows=8, cols=6)
    lp, a, m, g = (torch.tensor(x) for x in (logp, adv, mask, group))
    c, w, w_norm = covariance_weights(lp, a, m, g)
    assert ((w > 0) & (w <= 1))[m].all()
    for scope in set(group.tolist()):
        select = m & (g == scope).unsqueeze(1)
        if select.any():
            assert float(w_norm[select].sum()) == pytest.approx(float(select.sum()), rel=1e-9)
    # centring makes c blind to a constant added to every log-prob or advantage
    c2, w2, _ = covariance_weights(lp + offset, a - offset, m, g)
    torch.testing.assert_close(c2, c, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(w2, w, rtol=1e-9, atol=1e-9)


def _table_reference(values: np.ndarray, fraction: float):
    """Top-fraction threshold and mean of one sign, ranked by magnitude."""
    ranked = np.sort(values)[::-1]
    k = max(1, math.ceil(round(fraction * len(ranked), 9)))
    return ranked[k - 1], ranked[:k].mean(), k


def test_percentile_table_matches_sorting() -> None:
    rng = np.random.default_rng(7)
    c = rng.standard_t(2, size=20_011)
    mask = rng.random(20_011) < 0.9
    fractions = (1e-4, 1e-2, 0.2, 0.4, 1.0)
    table = covariance_percentiles(torch.tensor(c), torch.tensor(mask), fractions)
    valid = c[mask]
    positive, negative = valid[valid > 0], -valid[valid < 0]
    assert (table.positive_count, table.negative_count) == (len(positive), len(negative))
    previous_k = 0
    for i, fraction in enumerate(fractions):
        threshold, mean, k = _table_reference(positive, fraction)
        assert table.positive_threshold[i] == pytest.approx(threshold, rel=1e-12)
        assert table.positive_mean[i] == pytest.approx(mean, rel=1e-9)
        band = np.sort(positive)[::-1][previous_k:k]
        assert table.positive_band_mean[i] == pytest.approx(band.mean(), rel=1e-9)
        previous_k = k
        threshold, mean, _ = _table_reference(negative, fraction)
        assert table.negative_threshold[i] == pytest.approx(-threshold, rel=1e-12)
        assert table.negative_mean[i] == pytest.approx(-mean, rel=1e-9)
    # the 100% row is every token of that sign
    assert table.positive_mean[-1] == pytest.approx(positive.mean(), rel=1e-9)
    assert table.positive_threshold[-1] == pytest.approx(positive.min(), rel=1e-12)


def test_percentile_table_hand_case_and_missing_sign() -> None:
    table = covariance_percentiles(torch.tensor([0.0, 2.0, 1.0, 3.0, 4.0]), None, (0.25, 0.5, 1))
    assert table.positive_threshold == (4.0, 3.0, 1.0)
    assert table.positive_mean == (4.0, 3.5, 2.5)
    assert table.positive_band_mean == (4.0, 3.0, 1.5)
    assert all(math.isnan(v) for v in table.negative_mean)
    assert table.negative_count == 0
    with pytest.raises(UsageError):
        covariance_percentiles(torch.ones(3), None, (0.5, 0.2))


def test_cumulative_share_matches_numpy() -> None:
    rng = np.random.default_rng(8)
    c = rng.standard_cauchy(5_003)
    fractions = (0.001, 0.01, 0.1, 0.5, 1.0)
    got = cumulative_covariance_share(torch.tensor(c), None, fractions)
    ranked = np.sort(np.abs(c))[::-1]
    for value, fraction in zip(got, fractions, strict=True):
        k = max(1, math.ceil(round(fraction * len(c), 9)))
        assert value == pytest.approx(ranked[:k].sum() / ranked.sum(), rel=1e-9)
    assert all(math.isnan(v) for v in cumulative_covariance_share(torch.zeros(4)))


def _bins_top_sum(counts: np.ndarray, sums: np.ndarray, order: list[int], k: int) -> float:
    """Sum of the k largest magnitudes read from bins (plain loop over ``order``, largest
    magnitude first): whole bins exactly, the bin the k-th falls in at its mean."""
    taken, total = 0, 0.0
    for index in order:
        count = int(counts[index])
        if count == 0:
            continue
        if taken + count >= k:
            return total + (k - taken) * abs(float(sums[index])) / count
        taken += count
        total += abs(float(sums[index]))
    return total


def test_readings_from_bins_match_a_loop_over_the_bins() -> None:
    from ratioscope.functional import histogram as bins

    rng = np.random.default_rng(9)
    c = torch.tensor(rng.standard_t(2, size=30_007) * 1e-3)
    counts, sums = bins.histogram_sums(c)
    n_counts, n_sums = counts.numpy(), sums.numpy()
    centre = bins.CENTER
    positive = list(range(bins.NUM_BINS - 1, centre, -1))  # largest c first
    negative = list(range(centre))  # most negative c first
    # |c| ranked: bins centre + o and centre - o are one bin of magnitude; c == 0 last
    abs_counts = [n_counts[p] + n_counts[m] for p, m in zip(positive, negative, strict=True)]
    abs_sums = [n_sums[p] - n_sums[m] for p, m in zip(positive, negative, strict=True)]
    abs_counts, abs_sums = np.array([*abs_counts, n_counts[centre]]), np.array([*abs_sums, 0.0])
    magnitude = list(range(len(abs_counts)))
    n = int(counts.sum())
    total = float(np.abs(n_sums).sum())
    fractions = (1e-4, 1e-3, 0.01, 0.2, 0.5, 1.0)
    shares = cumulative_covariance_share_from_bins(counts, sums, fractions)
    for share, fraction in zip(shares, fractions, strict=True):
        k = max(1, math.ceil(round(fraction * n, 9)))
        expected = _bins_top_sum(abs_counts, abs_sums, magnitude, k) / total
        assert share == pytest.approx(min(1.0, expected), rel=1e-12)
    table = covariance_percentiles_from_bins(counts, sums, float(c.min()), float(c.max()))
    n_positive = int(n_counts[centre + 1 :].sum())
    for i, fraction in enumerate(table.fractions):
        k = max(1, math.ceil(round(fraction * n_positive, 9)))
        expected = _bins_top_sum(n_counts, n_sums, positive, k) / k
        assert table.positive_mean[i] == pytest.approx(expected, rel=1e-12)
        # the threshold: the k-th largest, a quantile of the positive bins alone
        one_sign = counts.clone()
        one_sign[: centre + 1] = 0
        q = (n_positive - k + 0.5) / n_positive
        threshold = bins.quantile_from_counts(one_sign, q, None, float(c.max()))
        assert table.positive_threshold[i] == threshold


def test_clip_cov_and_kl_cov_counts() -> None:
    rng = np.random.default_rng(9)
    c = rng.normal(0, 2, (40, 500))
    mask = rng.random((40, 500)) < 0.8
    n = int(mask.sum())
    eligible = int(((c > 1) & (c < 5) & mask).sum())
    touched = clip_cov_touched(torch.tensor(c), torch.tensor(mask))
    assert touched.total == n and touched.eligible == eligible
    assert touched.count == min(eligible, max(1, int(2e-4 * n)))
    assert touched.fraction == pytest.approx(touched.count / n)
    # with a ratio large enough, the eligible set is the limit
    assert clip_cov_touched(torch.tensor(c), torch.tensor(mask), ratio=0.9).count == eligible
    exclude = torch.tensor(c > 3)
    assert clip_cov_touched(torch.tensor(c), torch.tensor(mask), 0.9, exclude=exclude).count == (
        int(((c > 1) & (c <= 3) & mask).sum())
    )
    kl = kl_cov_touched(torch.tensor(c), torch.tensor(mask))
    k = max(1, int(2e-3 * n))
    assert kl.count == k and kl.fraction == pytest.approx(k / n)
    assert kl.threshold == pytest.approx(np.sort(c[mask])[::-1][k - 1])
    # a tiny batch still touches one token
    assert clip_cov_touched(torch.tensor([2.0, 0.0])).count == 1
    assert kl_cov_touched(torch.tensor([2.0, 0.0])).count == 1


def test_advantage_mass_and_weight_summary() -> None:
    logp, adv, mask, group = _random_batch(seed=10)
    lp, a, m, g = (torch.tensor(x) for x in (logp, adv, mask, group))
    _, w, w_norm = covariance_weights(lp, a, m, g)
    mass = advantage_mass_removed(w, w_norm, a, m)
    magnitude = np.abs(adv[mask])
    assert mass.total == pytest.approx(magnitude.sum())
    assert mass.removed == pytest.approx(1 - (w.numpy()[mask] * magnitude).sum() / magnitude.sum())
    assert mass.removed_normalised == pytest.approx(
        1 - (w_norm.numpy()[mask] * magnitude).sum() / magnitude.sum()
    )
    assert 0 <= mass.removed <= 1
    summary = kernel_weight_summary(w, m, quantiles=(0.1, 0.5, 0.9), below=(0.5, 0.1))
    values = w.numpy()[mask]
    assert summary.count == len(values)
    assert summary.mean == pytest.approx(values.mean())
    for q in (0.1, 0.5, 0.9):
        assert summary.quantiles[q] == pytest.approx(np.quantile(values, q))
    assert summary.fraction_below[0.5] == pytest.approx((values < 0.5).mean())


def test_shape_and_group_errors() -> None:
    ones = torch.ones(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ShapeMismatchError):
        covariance_weights(ones, torch.ones(2, 4), mask)
    with pytest.raises(ShapeMismatchError):
        covariance_weights(ones, ones, mask, torch.tensor([0, 1, 2]))
    with pytest.raises(UsageError):
        covariance_weights(ones, ones, mask, torch.tensor([0.0, 1.0]))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu() -> None:
    logp, adv, mask, group = _random_batch(seed=11)
    cpu = covariance_weights(*(torch.tensor(x) for x in (logp, adv, mask, group)))
    gpu = covariance_weights(*(torch.tensor(x).cuda() for x in (logp, adv, mask, group)))
    for a, b in zip(cpu, gpu, strict=True):
        assert b.is_cuda
        torch.testing.assert_close(b.cpu(), a)


def test_token_covariance_equals_the_c_of_covariance_weights():
    from ratioscope.functional.covariance import token_covariance

    g = torch.Generator().manual_seed(3)
    logp = -torch.rand(6, 9, generator=g, dtype=torch.float64) * 3
    adv = torch.randn(6, 1, generator=g, dtype=torch.float64).expand(6, 9)
    mask = torch.rand(6, 9, generator=g) < 0.8
    group = torch.tensor([5, 5, 2, 2, 9, 9])
    for scope in (None, group):
        expected = covariance_weights(logp, adv, mask, scope)[0]
        assert torch.equal(token_covariance(logp, adv, mask, scope), expected)
