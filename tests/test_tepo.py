"""TEPO sequence weights, clipping and KL-mask quadrants against plain loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.errors import ShapeMismatchError, UsageError
from ratioscope.functional.tepo import (
    kl_mask,
    kl_mask_quadrants,
    sequence_clip_fraction,
    sequence_clip_mask,
    sequence_likelihood_weights,
    tepo_policy_terms,
    tepo_surrogate,
)


def _batch(seed: int, rows: int = 12, cols: int = 9, token_adv: bool = False):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 0.02, (rows, cols))
    lengths = rng.integers(0, cols + 1, rows)
    mask = np.arange(cols)[None, :] < lengths[:, None]
    adv = rng.choice([-1.0, 0.0, 0.5, 1.0], rows)
    if token_adv:
        adv = np.repeat(adv[:, None], cols, 1) * rng.choice([0.0, 1.0, 2.0], (rows, cols))
    entropy = rng.uniform(0, 2, (rows, cols))
    old_entropy = np.where(rng.random((rows, cols)) < 0.2, entropy, rng.uniform(0, 2, (rows, cols)))
    return z, adv, mask, entropy, old_entropy


def test_weights_are_the_geometric_mean_of_token_ratios() -> None:
    z, _, mask, _, _ = _batch(0)
    got = sequence_likelihood_weights(torch.tensor(z), torch.tensor(mask))
    for i in range(z.shape[0]):
        ratios = np.exp(z[i][mask[i]])
        if len(ratios) == 0:
            assert math.isnan(float(got[i]))
        else:
            assert float(got[i]) == pytest.approx(np.prod(ratios) ** (1 / len(ratios)), rel=1e-12)


@pytest.mark.parametrize("form", ["ppo", "literal"])
@pytest.mark.parametrize("token_adv", [False, True])
def test_clip_mask_and_terms_match_a_loop(form: str, token_adv: bool) -> None:
    z, adv, mask, _, _ = _batch(1, token_adv=token_adv)
    low, high = 0.002, 0.003
    got_mask = sequence_clip_mask(
        torch.tensor(z), torch.tensor(adv), torch.tensor(mask), (low, high), form
    )
    got_terms = tepo_policy_terms(
        torch.tensor(z), torch.tensor(adv), torch.tensor(mask), (low, high), form
    )
    clipped_tokens = 0
    for i in range(z.shape[0]):
        n = int(mask[i].sum())
        w = math.exp(z[i][: int(mask[i].sum())].mean()) if n else math.nan
        clipped_w = min(max(w, 1 - low), 1 + high) if n else math.nan
        for t in range(z.shape[1]):
            if not mask[i, t]:
                assert not got_mask[i, t] and got_terms[i, t] == 0
                continue
            a = adv[i, t] if token_adv else adv[i]
            if form == "ppo":
                term = min(w * a, clipped_w * a)
                clipped = (a > 0 and w > 1 + high) or (a < 0 and w < 1 - low)
            else:
                term = min(w, clipped_w) * a
                clipped = w > 1 + high and a != 0
            assert bool(got_mask[i, t]) == clipped
            assert float(got_terms[i, t]) == pytest.approx(term, rel=1e-12, abs=1e-15)
            clipped_tokens += clipped
    assert clipped_tokens > 0
    fraction = sequence_clip_fraction(
        torch.tensor(z), torch.tensor(adv), torch.tensor(mask), (low, high), form
    )
    assert fraction == pytest.approx(clipped_tokens / mask.sum())


@pytest.mark.parametrize("form", ["ppo", "literal"])
def test_surrogate_aggregations_match_a_loop(form: str) -> None:
    z, adv, mask, _, _ = _batch(3, token_adv=True)
    low, high = 0.002, 0.003
    got = tepo_surrogate(torch.tensor(z), torch.tensor(adv), torch.tensor(mask), (low, high), form)
    total, count, sequence_means = 0.0, 0, []
    for i in range(z.shape[0]):
        n = int(mask[i].sum())
        if n == 0:
            continue
        w = math.exp(z[i, :n].mean())
        clipped_w = min(max(w, 1 - low), 1 + high)
        terms = [
            min(w * a, clipped_w * a) if form == "ppo" else min(w, clipped_w) * a
            for a in adv[i, :n]
        ]
        total, count = total + sum(terms), count + n
        sequence_means.append(sum(terms) / n)
    assert got.token_mean == pytest.approx(total / count, rel=1e-12)
    assert got.seq_mean_token_mean == pytest.approx(np.mean(sequence_means), rel=1e-12)


@pytest.mark.parametrize("token_adv", [False, True])
def test_quadrants_match_a_loop(token_adv: bool) -> None:
    _, adv, mask, entropy, old_entropy = _batch(2, rows=30, token_adv=token_adv)
    got = kl_mask_quadrants(
        torch.tensor(adv), torch.tensor(entropy), torch.tensor(old_entropy), torch.tensor(mask)
    )
    counts = dict.fromkeys(("pd", "pn", "ni", "nn", "zero"), 0)
    for i in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if not mask[i, t]:
                continue
            a = adv[i, t] if token_adv else adv[i]
            dh = entropy[i, t] - old_entropy[i, t]
            if a > 0:
                counts["pd" if dh < 0 else "pn"] += 1
            elif a < 0:
                counts["ni" if dh > 0 else "nn"] += 1
            else:
                counts["zero"] += 1
    assert (got.pos_decreasing, got.pos_non_decreasing) == (counts["pd"], counts["pn"])
    assert (got.neg_increasing, got.neg_non_increasing) == (counts["ni"], counts["nn"])
    assert got.zero_advantage == counts["zero"] and got.total == int(mask.sum())
    assert min(counts.values()) > 0  # every bucket exercised, dH == 0 included
    assert got.fractions()["pos_decreasing"] == pytest.approx(counts["pd"] / mask.sum())
    masked = kl_mask(
        torch.tensor(adv), torch.tensor(entropy), torch.tensor(old_entropy), torch.tensor(mask)
    )
    assert int(masked.sum()) == counts["pd"]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), token_adv=st.booleans())
def test_quadrants_partition_the_valid_tokens(seed: int, token_adv: bool) -> None:
    _, adv, mask, entropy, old_entropy = _batch(seed, rows=5, cols=4, token_adv=token_adv)
    q = kl_mask_quadrants(
        torch.tensor(adv), torch.tensor(entropy), torch.tensor(old_entropy), torch.tensor(mask)
    )
    parts = (
        q.pos_decreasing,
        q.pos_non_decreasing,
        q.neg_increasing,
        q.neg_non_increasing,
        q.zero_advantage,
    )
    assert sum(parts) == q.total == int(mask.sum())


def test_errors() -> None:
    z = torch.zeros(2, 3)
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ShapeMismatchError):
        sequence_clip_fraction(z, torch.ones(3), mask)
    with pytest.raises(UsageError):
        sequence_clip_fraction(z, torch.ones(2), mask, form="other")
    with pytest.raises(UsageError):
        sequence_clip_fraction(z, torch.ones(2), mask, clip=(1.5, 0.1))
    with pytest.raises(ShapeMismatchError):
        kl_mask_quadrants(torch.ones(2), torch.zeros(2, 3), torch.zeros(2, 2), mask)
    assert math.isnan(sequence_clip_fraction(z, torch.ones(2), torch.zeros(2, 3, dtype=torch.bool)))


def _row_inputs(seed: int):
    gen = torch.Generator().manual_seed(seed)
    rows, width = 30, 23
    mask = torch.rand(rows, width, generator=gen) > 0.25
    mask[4] = False
    adv = torch.randn(rows, 1, generator=gen).expand(rows, width).clone()
    adv[::5] = 0.0  # zero advantages
    adv[1, :3] = torch.tensor([1.0, -1.0, 0.0])  # token-level signs inside one row
    adv = torch.where(mask, adv, 0.0)
    # sequence weights on both sides of a narrow band, and exactly at 1
    z = 2e-3 * torch.randn(rows, width, generator=gen)
    z[2] = 0.0
    entropy = torch.rand(rows, width, generator=gen)
    old_entropy = entropy + 0.1 * torch.randn(rows, width, generator=gen)
    old_entropy[3, :5] = entropy[3, :5]  # dH == 0
    return z, adv, mask, entropy, old_entropy


def test_row_clip_counts_equal_the_token_masks():
    from ratioscope.functional.surrogate import advantage_sums
    from ratioscope.functional.tepo import sequence_clip_counts

    z, adv, mask, _, _ = _row_inputs(0)
    clip = (3e-4, 4e-4)
    weights = sequence_likelihood_weights(z, mask)
    log_w = torch.where(mask.any(1), torch.log(weights.double()), 0.0)
    ppo, literal = sequence_clip_counts(log_w, advantage_sums(adv, mask), clip)
    assert ppo.sum() > 0 and literal.sum() > 0
    assert torch.equal(ppo, sequence_clip_mask(z, adv, mask, clip, "ppo").sum(1))
    assert torch.equal(literal, sequence_clip_mask(z, adv, mask, clip, "literal").sum(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_quadrants_by_row_compiled_equal_torch(dtype):
    from ratioscope.functional import _kernels
    from ratioscope.functional.tepo import kl_mask_quadrants_by_row

    if not _kernels.available():
        pytest.skip("compiled kernels disabled")
    _, adv, mask, entropy, old_entropy = (
        t.to(dtype) if t.is_floating_point() else t for t in _row_inputs(1)
    )
    got = kl_mask_quadrants_by_row(adv, entropy, old_entropy, mask, backend="compiled")
    want = kl_mask_quadrants_by_row(adv, entropy, old_entropy, mask, backend="torch")
    assert got[0] == want[0]
    assert torch.equal(got[1], want[1])
    assert got[0].zero_advantage > 0 and got[0].pos_decreasing > 0
