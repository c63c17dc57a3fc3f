"""Mismatch statistics against a plain numpy computation written from docs/metrics-ratios.md."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.functional.mismatch import MismatchPartials, mismatch_partials, mismatch_statistics


def reference_mismatch(z: np.ndarray, mask: np.ndarray, c: float) -> dict[str, float]:
    tokens = [z[i, j] for i in range(z.shape[0]) for j in range(z.shape[1]) if mask[i, j]]
    seq_sums = [sum(z[i, j] for j in range(z.shape[1]) if mask[i, j]) for i in range(z.shape[0])]
    seq_sums = [s for i, s in enumerate(seq_sums) if mask[i].any()]
    n = len(tokens)
    r = [math.exp(t) for t in tokens]
    w = [math.exp(s) for s in seq_sums]
    return {
        "k1": sum(-t for t in tokens) / n,
        "k2": sum(t * t / 2 for t in tokens) / n,
        "k3": sum(math.exp(t) - 1 - t for t in tokens) / n,
        "chi2_token": sum(x * x for x in r) / n - 1,
        "chi2_seq": sum(x * x for x in w) / len(w) - 1,
        "ess": sum(r) ** 2 / (n * sum(x * x for x in r)),
        "ess_seq": sum(w) ** 2 / (len(w) * sum(x * x for x in w)),
        "frac_outside": sum(1 for x in r if x < 1 / c or x > c) / n,
    }


def test_hand_computed_tiny_case():
    z = torch.tensor([[0.0, math.log(2.0)], [math.log(0.25), 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False]])
    s = mismatch_statistics(mismatch_partials(z, mask, 2.0), 2.0)
    # r = 1, 2, 1/4 ; E[r^2] = (1 + 4 + 1/16) / 3
    assert math.isclose(s.chi2_token, (1 + 4 + 1 / 16) / 3 - 1, rel_tol=1e-12)
    # sequences: prod r = 2 and 1/4
    assert math.isclose(s.chi2_seq, (4 + 1 / 16) / 2 - 1, rel_tol=1e-12)
    assert math.isclose(s.ess, (1 + 2 + 0.25) ** 2 / (3 * (1 + 4 + 1 / 16)), rel_tol=1e-12)
    assert s.frac_outside == 1 / 3  # only 1/4 is outside [1/2, 2]
    assert s.tokens == 3 and s.sequences == 2


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    rows=st.integers(1, 6),
    width=st.integers(1, 9),
    scale=st.sampled_from([1e-4, 0.1, 1.0]),
)
def test_matches_reference_on_random_inputs(seed, rows, width, scale):
    rng = np.random.default_rng(seed)
    z = rng.normal(0, scale, size=(rows, width))
    mask = rng.random((rows, width)) < 0.7
    mask[0, 0] = True
    got = mismatch_statistics(mismatch_partials(torch.tensor(z), torch.tensor(mask), 1.5), 1.5)
    expected = reference_mismatch(z, mask, 1.5)
    for key, value in expected.items():
        assert math.isclose(getattr(got, key), value, rel_tol=1e-9, abs_tol=1e-12), key


def test_partials_of_chunks_merge_to_the_whole():
    rng = np.random.default_rng(7)
    z = torch.tensor(rng.normal(0, 0.3, size=(10, 20)))
    mask = torch.tensor(rng.random((10, 20)) < 0.8)
    whole = mismatch_statistics(mismatch_partials(z, mask))
    merged = MismatchPartials()
    for start in (0, 3, 7):
        stop = {0: 3, 3: 7, 7: 10}[start]
        merged.merge(mismatch_partials(z[start:stop], mask[start:stop]))
    parts = mismatch_statistics(merged)
    for key in ("k1", "k2", "k3", "chi2_token", "chi2_seq", "ess", "ess_seq", "frac_outside"):
        assert math.isclose(getattr(parts, key), getattr(whole, key), rel_tol=1e-12), key


def test_long_sequences_do_not_overflow():
    z = torch.full((2, 5000), 0.5, dtype=torch.float64)
    s = mismatch_statistics(mismatch_partials(z, torch.ones(2, 5000, dtype=torch.bool)))
    assert math.isinf(s.chi2_seq)
    assert math.isclose(s.log_chi2_seq_plus_1, 2 * 0.5 * 5000, rel_tol=1e-12)
    assert math.isclose(s.ess_seq, 1.0, rel_tol=1e-12)


def test_near_on_policy_chi2_keeps_its_digits():
    from fractions import Fraction

    rng = np.random.default_rng(3)
    z = rng.normal(0, 1e-5, size=(50, 40))
    mask = np.ones_like(z, dtype=bool)
    got = mismatch_statistics(mismatch_partials(torch.tensor(z), torch.tensor(mask)))
    # exact reference: E[exp(2z)] - 1 with the terms expanded to high order in Fractions
    terms = [Fraction(float(np.expm1(2 * v))) for v in z.ravel()]
    exact = float(sum(terms) / len(terms))
    assert math.isclose(got.chi2_token, exact, rel_tol=1e-9)
    # chunked and merged the same way
    merged = MismatchPartials()
    for part in np.array_split(np.arange(50), 7):
        merged.merge(mismatch_partials(torch.tensor(z[part]), torch.tensor(mask[part])))
    assert math.isclose(mismatch_statistics(merged).chi2_token, exact, rel_tol=1e-9)


def test_tiny_weights_everywhere_neither_crash_nor_lose_their_digits():
    """Long responses with a steady train/inference bias: every sequence weight prod r is
    far below 1, where expm1 rounds to -1 (the log-sum-exp form must take over)."""
    z = torch.tensor([[-9.0, -9.0], [-9.5, -9.5]], dtype=torch.float64)
    stats = mismatch_statistics(mismatch_partials(z, torch.ones_like(z, dtype=torch.bool)))
    w = [math.exp(-18.0), math.exp(-19.0)]
    assert stats.ess_seq == pytest.approx(sum(w) ** 2 / (2 * sum(x * x for x in w)), rel=1e-12)
    assert stats.log_chi2_seq_plus_1 == pytest.approx(
        math.log((w[0] ** 2 + w[1] ** 2) / 2), rel=1e-12
    )
    tokens = [math.exp(-9.0)] * 2 + [math.exp(-9.5)] * 2
    assert stats.ess == pytest.approx(
        sum(tokens) ** 2 / (4 * sum(x * x for x in tokens)), rel=1e-12
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scale", [1e-9, 0.3, 30.0, 400.0])
def test_compiled_partials_equal_the_torch_path(dtype, scale):
    """The compiled loop against the tensor code: counts equal, sums to rounding (other
    order), including overflowing weights (scale 400: exp(2 z) is inf) and empty rows."""
    from dataclasses import fields

    from ratioscope.functional import _kernels

    if not _kernels.available():
        pytest.skip("compiled kernels disabled")
    gen = torch.Generator().manual_seed(5)
    z = (scale * torch.randn(40, 57, generator=gen, dtype=torch.float64)).to(dtype)
    mask = torch.rand(40, 57, generator=gen) > 0.3
    mask[7] = False
    got = mismatch_partials(z, mask, 1.5, backend="compiled")
    want = mismatch_partials(z, mask, 1.5, backend="torch")
    for field in fields(want):
        mine, theirs = getattr(got, field.name), getattr(want, field.name)
        if isinstance(theirs, int):
            assert mine == theirs, field.name
        else:
            assert mine == pytest.approx(theirs, rel=1e-12, abs=1e-300), field.name
    nothing = mismatch_partials(z, torch.zeros_like(mask), backend="compiled")
    assert nothing == MismatchPartials()


def test_backend_is_checked():
    z = torch.zeros(2, 3)
    with pytest.raises(Exception, match="backend"):
        mismatch_partials(z, torch.ones(2, 3, dtype=torch.bool), backend="fast")
