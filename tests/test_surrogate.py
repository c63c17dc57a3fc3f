"""PPO clip mask and surrogate against plain loops; the fused row sums against both."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.functional.surrogate import (
    ppo_clip_mask,
    ppo_objective_terms,
    ppo_row_sums,
    seq_mean_token_mean,
    token_mean,
)


def loop_terms(z, adv, mask, clip):
    low, high = clip
    out = np.zeros_like(z)
    clipped = np.zeros(z.shape, dtype=bool)
    for i in range(z.shape[0]):
        for t in range(z.shape[1]):
            if not mask[i, t]:
                continue
            r, a = math.exp(z[i, t]), adv[i, t]
            out[i, t] = min(r * a, min(max(r, 1 - low), 1 + high) * a)
            clipped[i, t] = (a > 0 and r > 1 + high) or (a < 0 and r < 1 - low)
    return out, clipped


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 6), width=st.integers(1, 12))
def test_terms_mask_and_row_sums_match_loops(seed, rows, width):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 0.3, size=(rows, width))
    adv = rng.normal(0, 1, size=(rows, width))
    adv[rng.random((rows, width)) < 0.2] = 0.0
    mask = rng.random((rows, width)) < 0.75
    clip = (0.2, 0.28)
    terms, clipped = loop_terms(z, adv, mask, clip)
    tz, ta, tm = torch.tensor(z), torch.tensor(adv), torch.tensor(mask)
    np.testing.assert_allclose(ppo_objective_terms(tz, ta, tm, clip).numpy(), terms, atol=1e-12)
    assert np.array_equal(ppo_clip_mask(tz, ta, tm, clip).numpy(), clipped)
    count, clipped_sums, plain_sums = ppo_row_sums(tz, ta, tm, clip)
    assert count.tolist() == clipped.sum(1).tolist()
    np.testing.assert_allclose(clipped_sums.numpy(), terms.sum(1), atol=1e-12)
    plain = np.where(mask, np.exp(z) * adv, 0.0).sum(1)
    np.testing.assert_allclose(plain_sums.numpy(), plain, atol=1e-12)


def test_aggregations_on_a_hand_computed_case():
    values = torch.tensor([[1.0, 3.0, 99.0], [4.0, 99.0, 99.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert float(token_mean(values, mask)) == (1 + 3 + 4) / 3
    assert float(seq_mean_token_mean(values, mask)) == (2 + 4) / 2


def test_row_sums_of_float32_inputs_are_float64_sums_of_float64_terms():
    """A near-zero loss: terms r A cancel within each row (A centred, r ~ 1 + 1e-4), so
    float32 terms leave ~1e-3 relative error in the sums; the float64 loop is the truth."""
    rng = np.random.default_rng(11)
    rows, width = 16, 2000
    z = (rng.normal(0, 1e-4, size=(rows, width))).astype(np.float32)
    adv = rng.normal(0, 1, size=(rows, width)).astype(np.float32)
    adv -= adv.mean(axis=1, keepdims=True)  # GRPO-centred: the row sums nearly cancel
    mask = np.ones((rows, width), dtype=bool)
    want_clipped, _ = loop_terms(z.astype(np.float64), adv.astype(np.float64), mask, (0.2, 0.28))
    want_plain = [
        sum(math.exp(float(z[i, t])) * float(adv[i, t]) for t in range(width)) for i in range(rows)
    ]
    _, clipped, plain = ppo_row_sums(
        torch.tensor(z), torch.tensor(adv), torch.tensor(mask), (0.2, 0.28)
    )
    assert clipped.dtype == plain.dtype == torch.float64
    # float64 summation order alone: ~1e-13 on sums of 2,000 terms of size ~1
    np.testing.assert_allclose(plain.numpy(), want_plain, rtol=0, atol=1e-11)
    np.testing.assert_allclose(clipped.numpy(), want_clipped.sum(1), rtol=0, atol=1e-11)
    # float32 terms (what ppo_row_sums summed before) are off by ~1e-6: far outside
    r32 = torch.exp(torch.tensor(z)) * torch.tensor(adv)
    old = r32.sum(dim=1, dtype=torch.float64).numpy()
    assert np.max(np.abs(old - want_plain)) > 1e-8


def test_sequence_means_sum_in_float64_and_round_once(monkeypatch):
    from ratioscope.functional import _kernels
    from ratioscope.functional.surrogate import sequence_means

    gen = torch.Generator().manual_seed(8)
    values = (torch.randn(12, 300, generator=gen) * 1e3 + 0.1).float()
    mask = torch.rand(12, 300, generator=gen) > 0.3
    mask[4] = False
    values[~mask] = math.nan  # what lies behind the mask is never read
    expected = []
    for row, keep in zip(values.tolist(), mask.tolist(), strict=True):
        valid = [v for v, k in zip(row, keep, strict=True) if k]
        expected.append(math.fsum(valid) / len(valid) if valid else math.nan)
    want = torch.tensor(expected, dtype=torch.float64).float()  # the exact mean, rounded once
    got = sequence_means(values, mask)  # the compiled pass
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-7, atol=0, equal_nan=True)
    monkeypatch.setattr(_kernels, "available", lambda: False)  # the tensor code
    torch.testing.assert_close(sequence_means(values, mask), got, rtol=0, atol=0, equal_nan=True)


def test_ppo_aggregation_terms_are_the_separate_sums_in_one_read():
    from ratioscope.functional.surrogate import (
        ppo_aggregation_of,
        ppo_aggregation_terms,
        row_aggregation_sums,
    )

    gen = torch.Generator().manual_seed(3)
    z, advantages = 0.3 * torch.randn(2, 7, 20, generator=gen)
    mask = torch.rand(7, 20, generator=gen) > 0.3
    mask[2] = False  # a row without tokens: out of the sequence mean
    clipped, clipped_sums, plain_sums = ppo_row_sums(z, advantages, mask, (0.2, 0.28))
    lengths = mask.sum(1)
    n_clipped, tokens, clipped_loss, plain_loss = ppo_aggregation_of(
        ppo_aggregation_terms(clipped, clipped_sums, plain_sums, lengths).tolist()
    )
    assert (n_clipped, tokens) == (int(clipped.sum()), int(mask.sum())) and n_clipped > 0
    assert clipped_loss == row_aggregation_sums(clipped_sums, lengths)  # bit for bit
    assert plain_loss == row_aggregation_sums(plain_sums, lengths)
    assert clipped_loss.sequences == 6
