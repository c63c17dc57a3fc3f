"""Each method's per-token coefficient against autograd of its objective written out.

The references below write every objective J(log pi_theta) the way its paper prints it,
with plain torch operations and ``detach`` where the paper stops the gradient, and take
``dJ / d log pi_theta`` by autograd; the library computes the same coefficient in closed
form. The tiny batch has a masked tail, a degenerate (all-equal-reward) group, ratios on
both sides of every clip band, and token-level advantages in one test.
"""

from __future__ import annotations

import math

import pytest
import torch

from ratioscope.functional import objectives as F
from ratioscope.functional.concentration import (
    effective_sample_size,
    gini,
    gini_from_bins,
    magnitude_bins,
    top_share,
    top_share_from_bins,
)

DOUBLE = torch.float64


def _batch(seed: int = 0, spread: float = 0.3):
    """4 sequences x 6 tokens, right-padded; groups {0, 1} and {2, 3}, group 1's rewards
    equal (a degenerate group)."""
    generator = torch.Generator().manual_seed(seed)
    mask = torch.tensor(
        [
            [1, 1, 1, 1, 1, 1],
            [1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 1, 0],
            [1, 1, 0, 0, 0, 0],
        ],
        dtype=torch.bool,
    )
    old = -torch.rand(4, 6, generator=generator, dtype=DOUBLE) * 3 - 0.1
    z = torch.randn(4, 6, generator=generator, dtype=DOUBLE) * spread
    current = old + z
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=DOUBLE)
    group = torch.tensor([0, 0, 1, 1])
    advantages = torch.tensor([1.0, -1.0, 0.0, 0.0], dtype=DOUBLE)
    return mask, old, current, rewards, group, advantages


def _grad(objective, current: torch.Tensor) -> torch.Tensor:
    leaf = current.clone().requires_grad_(True)
    objective(leaf).backward()
    assert leaf.grad is not None
    return leaf.grad


def _exact(coef: F.Coefficients) -> torch.Tensor:
    return coef.values * coef.scale


def _seq_mean_token_mean(terms, mask):
    lengths = mask.sum(1)
    return (torch.where(mask, terms, 0.0).sum(1) / lengths).mean()


def _token_mean(terms, mask):
    return torch.where(mask, terms, 0.0).sum() / mask.sum()


def _token_adv(adv, mask):
    return adv.unsqueeze(1).expand(mask.shape)


@pytest.mark.parametrize(
    ("clip", "aggregation"),
    [((0.2, 0.2), "seq-mean-token-mean"), ((0.2, 0.28), "token-mean"), ((0.1, 0.1), "token-sum")],
)
def test_ppo_clip_family_matches_autograd(clip, aggregation):
    mask, old, current, _, _, adv = _batch()
    a = _token_adv(adv, mask)

    def objective(logp):
        r = torch.exp(logp - old)
        terms = torch.minimum(r * a, torch.clamp(r, 1 - clip[0], 1 + clip[1]) * a)
        if aggregation == "token-mean":
            return _token_mean(terms, mask)
        if aggregation == "token-sum":
            return torch.where(mask, terms, 0.0).sum() / (4 * mask.shape[1])
        return _seq_mean_token_mean(terms, mask)

    coef = F.ppo_clip_coefficients(current - old, adv, mask, clip, aggregation)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))
    # the flags are the tokens whose clipped branch is the minimum, by construction here
    r = torch.exp(current - old)
    assert torch.equal(coef.flags["clip_high"], (a > 0) & (r > 1 + clip[1]) & mask)
    assert torch.equal(coef.flags["clip_low"], (a < 0) & (r < 1 - clip[0]) & mask)
    assert bool(coef.flags["clip_high"].any() or coef.flags["clip_low"].any())


def test_gspo_matches_autograd_of_the_sequence_objective():
    mask, old, current, _, _, adv = _batch(spread=0.05)
    clip = (0.01, 0.012)

    def objective(logp):
        s = torch.exp(torch.where(mask, logp - old, 0.0).sum(1) / mask.sum(1))
        terms = torch.minimum(s * adv, torch.clamp(s, 1 - clip[0], 1 + clip[1]) * adv)
        return terms.mean()  # Eq. 5: 1/G sum_i min(s_i A_i, clip(s_i) A_i)

    coef = F.gspo_coefficients(current - old, adv, mask, clip)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))


def test_gmpo_matches_autograd_of_the_geometric_mean():
    mask, old, current, _, _, adv = _batch(spread=0.5)
    eps = (0.3, 0.3)

    def objective(logp):
        z = logp - old
        sign = torch.sign(_token_adv(adv, mask))
        clipped = sign * torch.minimum(sign * z, sign * torch.clamp(z, -eps[0], eps[1]))
        ratio = torch.exp(torch.where(mask, clipped, 0.0).sum(1) / mask.sum(1))
        return (adv * ratio).mean()

    coef = F.gmpo_coefficients(current - old, adv, mask, eps)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))
    assert bool((coef.flags["clip_high"] | coef.flags["clip_low"]).any())


def test_cispo_stop_gradient_weight():
    mask, old, current, _, _, adv = _batch(spread=0.6)
    clip = (0.2, 0.3)

    def objective(logp):
        r = torch.exp(logp - old).detach()
        weight = torch.clamp(r, 1 - clip[0], 1 + clip[1])
        return _token_mean(weight * _token_adv(adv, mask) * logp, mask)

    coef = F.cispo_coefficients(current - old, adv, mask, clip)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))
    # no token loses its gradient under CISPO unless its advantage is 0
    assert bool((coef.values[mask & (_token_adv(adv, mask) != 0)] != 0).all())


def test_sapo_soft_gate():
    mask, old, current, _, _, adv = _batch(spread=0.6)
    tau = (1.0, 1.05)

    def objective(logp):
        r = torch.exp(logp - old)
        a = _token_adv(adv, mask)
        t = torch.where(a > 0, tau[0], tau[1])
        return _seq_mean_token_mean(4.0 / t * torch.sigmoid(t * (r - 1.0)) * a, mask)

    coef = F.sapo_coefficients(current - old, adv, mask, tau)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))


def _kalman_loop(z, q, v):
    """Algorithm 1 written out (P0 = 0, rho0 = 0; masked tokens observe 0)."""
    rho = torch.zeros(z.shape[0], dtype=DOUBLE)
    p = torch.zeros(z.shape[0], dtype=DOUBLE)
    out = []
    for t in range(z.shape[1]):
        p_pred = p + q
        k = p_pred / (p_pred + v)
        rho = rho + k * (z[:, t] - rho)
        p = (1 - k) * p_pred
        out.append(rho)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("clip", [None, (0.02, 0.02)])
def test_kpo_gradient_flows_through_the_filter(clip):
    mask, old, current, _, _, adv = _batch(spread=0.8)
    q, v = 0.05, 1.0
    a = _token_adv(adv, mask)

    def objective(logp):
        rho = _kalman_loop(torch.where(mask, logp - old, 0.0), q, v)
        r = torch.exp(rho)
        terms = (
            r * a
            if clip is None
            else torch.minimum(r * a, torch.clamp(r, 1 - clip[0], 1 + clip[1]) * a)
        )
        return _seq_mean_token_mean(terms, mask)

    coef = F.kpo_coefficients(current - old, adv, mask, clip, q=q, v=v)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))


def test_kalman_gradient_skip_policy_equals_the_packed_rows():
    # an interior masked token: "skip" makes it invisible, so the row equals the row
    # with that token removed
    mask = torch.tensor([[True, False, True, True]])
    outer = torch.tensor([[1.0, 0.0, -2.0, 0.5]], dtype=DOUBLE)
    skipped = F.kalman_gradient_weights(outer, mask, 0.1, 1.0, mask_policy="skip")
    packed = F.kalman_gradient_weights(
        torch.tensor([[1.0, -2.0, 0.5]], dtype=DOUBLE), torch.ones(1, 3, dtype=torch.bool), 0.1, 1.0
    )
    torch.testing.assert_close(skipped[mask], packed[0])
    assert float(skipped[0, 1]) == 0.0


def test_tepo_sequence_likelihood_and_kl_mask():
    mask, old, current, _, _, adv = _batch(spread=0.05)
    clip, beta = (0.01, 0.012), 0.5
    generator = torch.Generator().manual_seed(3)
    entropy = torch.rand(4, 6, generator=generator, dtype=DOUBLE)
    old_entropy = torch.rand(4, 6, generator=generator, dtype=DOUBLE)
    a = _token_adv(adv, mask)
    kl_mask = (a > 0) & (entropy - old_entropy < 0) & mask

    def objective(logp):
        z = logp - old
        w = torch.exp(torch.where(mask, z, 0.0).sum(1) / mask.sum(1)).unsqueeze(1)
        policy = torch.minimum(w * a, torch.clamp(w, 1 - clip[0], 1 + clip[1]) * a)
        k3 = torch.exp(-z) - 1 + z  # KL(pi_theta || pi_old), k3 estimate
        return _token_mean(policy - beta * k3 * kl_mask, mask)

    coef = F.tepo_coefficients(current - old, adv, mask, clip, entropy, old_entropy, beta)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))
    assert torch.equal(coef.flags["kl_mask"], kl_mask) and bool(kl_mask.any())


def test_tepo_with_token_advantages():
    mask, old, current, _, _, _ = _batch(spread=0.05)
    a = torch.where(
        mask, torch.randn(4, 6, generator=torch.Generator().manual_seed(5), dtype=DOUBLE), 0.0
    )
    clip = (0.01, 0.012)

    def objective(logp):
        w = torch.exp(torch.where(mask, logp - old, 0.0).sum(1) / mask.sum(1)).unsqueeze(1)
        return _token_mean(torch.minimum(w * a, torch.clamp(w, 1 - clip[0], 1 + clip[1]) * a), mask)

    coef = F.tepo_coefficients(current - old, a, mask, clip)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))


def test_quatro_log_term_is_detached():
    mask, old, current, _, _, _ = _batch(spread=0.2)
    adv_q = torch.tensor([0.4, -1.3, 0.0, 0.0], dtype=DOUBLE)  # group 1 degenerate: advantage 0

    def objective(logp):
        log_s = torch.where(mask, logp - old, 0.0).sum(1) / mask.sum(1)
        s = torch.exp(log_s)
        loss = -(s * (adv_q - log_s.detach())).sum() / 2  # two queries
        return -loss

    coef = F.quatro_coefficients(current - old, adv_q, mask, n_queries=2)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))
    # a degenerate group still moves: its coefficient is -s log s / |o|, not 0
    assert bool((coef.values[2:][mask[2:]] != 0).all())


def test_fpa_coefficient_is_the_weight_times_reward():
    mask, _, current, rewards, _, _ = _batch()
    future = current - 0.3
    coef = F.fpa_coefficients(future, rewards > 0, mask)
    lengths = mask.sum(1)
    weight = torch.exp(torch.where(mask, future, 0.0).sum(1) / lengths)
    reward = torch.where(rewards > 0, 1.0, -1.0)
    expected = torch.where(mask, (reward * weight / lengths).unsqueeze(1) / 4, 0.0)
    torch.testing.assert_close(_exact(coef), expected)


def test_dr_grpo_and_zero_variance_groups_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0, 2.0, 5.0])
    group = torch.tensor([0, 0, 0, 1, 1, 2])
    expected = [2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0]
    assert F.dr_grpo_advantages(rewards, group).tolist() == pytest.approx(expected)
    assert F.zero_variance_groups(rewards, group) == (2, 3)


def test_masked_positions_are_zero_and_flags_stay_inside_the_mask():
    mask, old, current, _, _, adv = _batch(spread=1.0)
    z = torch.where(mask, current - old, torch.tensor(float("nan")))  # padding is garbage
    for coef in (
        F.ppo_clip_coefficients(torch.nan_to_num(z), adv, mask),
        F.gspo_coefficients(torch.where(mask, z, 0.0), adv, mask),
        F.gmpo_coefficients(torch.where(mask, z, 0.0), adv, mask),
    ):
        assert bool((coef.values[~mask] == 0).all())
        for flag in coef.flags.values():
            assert not bool(flag[~mask].any())


# --------------------------------------------------------------- concentration
def _gini_pairs(values):
    x = values.tolist()
    n = len(x)
    return sum(abs(a - b) for a in x for b in x) / (2 * n * n * (sum(x) / n))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gini_and_top_share_against_plain_python(seed):
    values = torch.rand(50, generator=torch.Generator().manual_seed(seed), dtype=DOUBLE) ** 3
    assert gini(values) == pytest.approx(_gini_pairs(values), rel=1e-12)
    ordered = sorted(values.tolist(), reverse=True)
    for fraction in (0.01, 0.1, 0.5):
        k = max(1, math.ceil(fraction * 50))
        assert top_share(values, fraction) == pytest.approx(sum(ordered[:k]) / sum(ordered))
    counts, sums = magnitude_bins(values)
    # within the bins' relative width
    assert gini_from_bins(counts, sums) == pytest.approx(gini(values), abs=0.012)
    assert top_share_from_bins(counts, sums, 0.1) == pytest.approx(
        top_share(values, 0.1), rel=0.012
    )


def test_ess_by_hand():
    values = torch.tensor([1.0, -1.0, 2.0, 0.0])
    assert effective_sample_size(4.0, 6.0, 4) == pytest.approx(16 / 24)
    assert effective_sample_size(float(values.abs().sum()), float((values**2).sum()), 4) == (
        pytest.approx(16 / 24)
    )


def test_gmpo_takes_the_mean_advantage_of_token_advantages():
    mask, old, current, _, _, _ = _batch(spread=0.5)
    generator = torch.Generator().manual_seed(7)
    a = torch.where(mask, torch.randn(4, 6, generator=generator, dtype=DOUBLE), 0.0)
    eps = (0.3, 0.3)

    def objective(logp):
        z = logp - old
        sign = torch.sign(a)
        clipped = sign * torch.minimum(sign * z, sign * torch.clamp(z, -eps[0], eps[1]))
        ratio = torch.exp(torch.where(mask, clipped, 0.0).sum(1) / mask.sum(1))
        mean_adv = a.sum(1) / mask.sum(1)
        return (mean_adv * ratio).mean()

    coef = F.gmpo_coefficients(current - old, a, mask, eps)
    torch.testing.assert_close(_exact(coef), torch.where(mask, _grad(objective, current), 0.0))


# ------------------------------------------------------------------ corrections
def _rho_batch():
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    rho = torch.tensor(
        [[0.4, 1.0, 2.5, 6.0], [1.0005, 0.9995, 9.0, 9.0], [1.01, 1.0, 0.999, 7.0]],
        dtype=DOUBLE,
    )
    return torch.where(mask, torch.log(rho), 0.0), rho, mask


def test_token_truncation_and_mask_by_hand():
    from ratioscope.functional import corrections as C

    log_rho, _, mask = _rho_batch()
    weight, flags = C.token_truncation(log_rho, mask, 2.0)
    assert weight[0].tolist() == pytest.approx([0.4, 1.0, 2.0, 2.0])
    assert flags["truncated"][0].tolist() == [False, False, True, True]
    weight, flags = C.token_mask(log_rho, mask, (0.5, 5.0))
    assert weight[0].tolist() == pytest.approx([0.0, 1.0, 2.5, 0.0])
    assert flags["masked"][0].tolist() == [True, False, False, True]
    assert not bool(flags["masked"][~mask].any()) and bool((weight[~mask] == 0).all())


def test_sequence_weights_and_rejections_by_hand():
    from ratioscope.functional import corrections as C

    log_rho, rho, mask = _rho_batch()
    weight, flags = C.sequence_truncation(log_rho, mask, 2.0)
    products = [0.4 * 1.0 * 2.5 * 6.0, 1.0005 * 0.9995, 1.01 * 1.0 * 0.999]
    expected = [min(p, 2.0) for p in products]
    assert weight[:, 0].tolist() == pytest.approx(expected)
    assert flags["truncated"][:, 0].tolist() == [True, False, False]
    # geometric mean inside [0.999, 1.001]: only the second sequence
    weight, flags = C.geometric_rejection(log_rho, mask, (0.999, 1.001))
    geo = [p ** (1 / n) for p, n in zip(products, (4, 2, 3), strict=True)]
    assert [0.999 <= g <= 1.001 for g in geo] == [False, True, False]
    assert weight[:, 0].tolist() == [0.0, 1.0, 0.0]
    # k3 mean over each sequence's valid tokens against 0.01
    k3 = [
        sum(r - 1 - math.log(r) for r in row[:n]) / n
        for row, n in zip(rho.tolist(), (4, 2, 3), strict=True)
    ]
    weight, flags = C.sequence_rejection(log_rho, mask, "k3", "mean", 0.01)
    assert weight[:, 0].tolist() == [0.0 if v > 0.01 else 1.0 for v in k3]
    weight, _ = C.sequence_rejection(log_rho, mask, "k2", "max", 0.5)
    k2_max = [
        max(0.5 * math.log(r) ** 2 for r in row[:n])
        for row, n in zip(rho.tolist(), (4, 2, 3), strict=True)
    ]
    assert weight[:, 0].tolist() == [0.0 if v > 0.5 else 1.0 for v in k2_max]


def test_second_moment_mask_drops_largest_first_until_below_threshold():
    from ratioscope.functional import corrections as C

    log_ratio = torch.tensor([[0.1, -0.5, 0.0, 0.3], [0.2, 0.05, 0.0, 0.0]], dtype=DOUBLE)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    weight, flags = C.second_moment_mask(log_ratio, mask, 0.02)
    # squares: 0.01, 0.25, 0, 0.09 | 0.04, 0.0025; dropping 0.25, then 0.09 leaves
    # mean(0.01, 0, 0.04, 0.0025) = 0.013125 < 0.02; with 0.09 it was 0.0285
    assert flags["masked"].tolist() == [[False, True, False, True], [False, False, False, False]]
    assert weight.tolist() == [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]


def test_off_policy_sequence_mask_needs_negative_advantage_and_drift():
    from ratioscope.functional import corrections as C

    drift = torch.tensor([[0.3, 0.1], [0.3, 0.1], [-0.3, 0.1]], dtype=DOUBLE)
    adv = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [-1.0, -1.0]], dtype=DOUBLE)
    mask = torch.ones(3, 2, dtype=torch.bool)
    weight, flags = C.off_policy_sequence_mask(drift, adv, mask, delta=0.15)
    # mean drifts 0.2, 0.2, -0.1: only the first (negative advantage, drift > delta) goes
    assert weight[:, 0].tolist() == [0.0, 1.0, 1.0]
    assert flags["masked"].tolist() == [[True, True], [False, False], [False, False]]


def test_cw_grpo_method_reweights_the_advantage_with_detached_kernel_weights():
    from ratioscope.data.batch import TokenBatch
    from ratioscope.objective_family.methods import METHODS, MethodInputs

    mask, old, current, rewards, group, adv = _batch(spread=0.3)
    adv = torch.tensor([1.0, -1.0, 0.7, -0.7], dtype=DOUBLE)  # no degenerate group here
    a = _token_adv(adv, mask)
    # the kernel weights written out per group: token-weighted means, population std
    w_norm = torch.zeros_like(current)
    for g in (0, 1):
        rows = group == g
        m = mask & rows.unsqueeze(1)
        lp, av = current[m], a[m]
        c = (lp - lp.mean()) * (av - av.mean())
        w = torch.exp(-(c**2) / (2 * c.var(unbiased=False)))
        w_norm[m] = w * w.numel() / w.sum()
    clip = (0.2, 0.2)

    def objective(logp):
        r = torch.exp(logp - old)
        weighted = w_norm * a
        terms = torch.minimum(r * weighted, torch.clamp(r, 1 - clip[0], 1 + clip[1]) * weighted)
        return _seq_mean_token_mean(terms, mask)

    batch = TokenBatch.from_tensors(
        {
            "mask": mask,
            "log_probs": current,
            "old_log_probs": old,
            "advantages": adv,
            "rewards": rewards,
            "group": group,
        },
        source="tiny",
    )
    coef = METHODS["cw_grpo"].compute(MethodInputs(batch), METHODS["cw_grpo"].settings())
    expected = torch.where(mask, _grad(objective, current), 0.0)
    torch.testing.assert_close(_exact(coef), expected)
    # the reweighting is not the identity on this batch
    assert not torch.allclose(w_norm[mask], torch.ones_like(w_norm[mask]))
