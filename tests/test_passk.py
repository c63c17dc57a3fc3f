"""Pass@k, UCC@k, avg@k, Pass@1 ± SE and flip rate against independent references.

References: exact rational arithmetic with ``fractions.Fraction`` and ``math.comb``, the
HumanEval product formula written out from Chen et al. (2021), plain Python loops
written from FPA App. B.3 and QUATRO App. C.7, and hand-computed tiny cases.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.functional.passk import (
    DIFFICULTY_BUCKETS,
    avg_at_k,
    difficulty_bucket,
    flip_at_k,
    pass1_with_se,
    pass_at_k,
    ucc_at_k,
)

EXACT = 1e-12  # float64 products of <= 300 factors in [0, 1] vs exact rationals


def exact_pass(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def humaneval_pass(n: int, c: int, k: int) -> float:
    # Chen et al. (2021), Fig. 3: 1 - prod_{i=n-c+1}^{n} (1 - k / i)
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@st.composite
def n_c_k(draw, max_n: int = 300):
    n = draw(st.integers(1, max_n))
    c = draw(st.integers(0, n))
    k = draw(st.integers(1, n))
    return n, c, k


@settings(max_examples=300, deadline=None)
@given(n_c_k())
def test_pass_at_k_matches_exact_binomials_and_humaneval(case):
    n, c, k = case
    value = float(pass_at_k([n], [c], k)[0])
    assert value == pytest.approx(float(exact_pass(n, c, k)), abs=EXACT)
    assert value == pytest.approx(humaneval_pass(n, c, k), abs=EXACT)


def test_pass_at_k_hand_cases():
    # n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k([4], [1], 2).tolist() == [0.5]
    # c = 0 -> 0, c = n -> 1, n - c < k -> exactly 1
    assert pass_at_k([8, 8, 8], [0, 8, 6], 3).tolist() == [0.0, 1.0, 1.0]
    # k = 1 is the accuracy
    assert pass_at_k([5], [2], 1)[0] == pytest.approx(0.4, abs=EXACT)


def test_pass_at_k_is_vectorised_over_problems():
    rng = np.random.default_rng(0)
    n = rng.integers(16, 257, size=200)
    c = rng.integers(0, n + 1)
    got = pass_at_k(n, c, 16)
    want = [float(exact_pass(int(a), int(b), 16)) for a, b in zip(n, c, strict=True)]
    np.testing.assert_allclose(got, want, rtol=0, atol=EXACT)


def test_pass_at_k_large_n_does_not_overflow():
    # C(1024, 512) ~ 4e306 is near the float64 limit; the product form never forms it.
    value = pass_at_k([1024], [3], 512)[0]
    assert value == pytest.approx(float(exact_pass(1024, 3, 512)), abs=EXACT)


@pytest.mark.parametrize("k", [9, 0, -1])
def test_pass_at_k_rejects_k_outside_1_to_n(k):
    with pytest.raises(ValueError, match="k"):
        pass_at_k([8, 16], [1, 1], k)


def test_pass_at_k_rejects_c_above_n():
    with pytest.raises(ValueError, match="0 <= m <= n"):
        pass_at_k([4], [5], 1)


def test_avg_at_k_is_mean_accuracy_and_equals_mean_pass1():
    n = np.array([8, 8, 4, 10])
    c = np.array([0, 3, 4, 7])
    np.testing.assert_allclose(avg_at_k(n, c), [0.0, 3 / 8, 1.0, 0.7], atol=EXACT)
    assert avg_at_k(n, c).mean() == pytest.approx(pass_at_k(n, c, 1).mean(), abs=EXACT)


# ---- UCC@k -------------------------------------------------------------------------


def exact_ucc(n: int, sizes: list[int], k: int) -> Fraction:
    return sum(
        (1 - Fraction(math.comb(n - s, k), math.comb(n, k)) for s in sizes), start=Fraction(0)
    )


@st.composite
def clustering_case(draw):
    n = draw(st.integers(1, 128))
    correct = draw(st.integers(0, n))
    sizes = []
    left = correct
    while left > 0:
        size = draw(st.integers(1, left))
        sizes.append(size)
        left -= size
    return n, sizes


def test_ucc_hand_case():
    # n=4, clusters of 2 and 1, k=2: (1 - C(2,2)/C(4,2)) + (1 - C(3,2)/C(4,2)) = 5/6 + 1/2
    assert ucc_at_k(4, [2, 1], 2) == pytest.approx(4 / 3, abs=EXACT)


@settings(max_examples=200, deadline=None)
@given(clustering_case(), st.data())
def test_ucc_matches_exact_binomials(case, data):
    n, sizes = case
    k = data.draw(st.integers(1, n))
    assert ucc_at_k(n, sizes, k) == pytest.approx(float(exact_ucc(n, sizes, k)), abs=1e-10)


@settings(max_examples=200, deadline=None)
@given(clustering_case())
def test_ucc_invariants(case):
    n, sizes = case
    values = [ucc_at_k(n, sizes, k) for k in range(1, n + 1)]
    # UCC@n counts the clusters; UCC@1 is the fraction of correct samples.
    assert values[-1] == pytest.approx(len(sizes), abs=1e-10)
    assert values[0] == pytest.approx(sum(sizes) / n, abs=1e-10)
    # Non-decreasing in k and never above min(k, #clusters).
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(values))
    for k, value in enumerate(values, start=1):
        assert value <= min(k, len(sizes)) + 1e-10


def test_ucc_with_one_cluster_is_pass_at_k():
    for k in (1, 3, 8):
        assert ucc_at_k(8, [5], k) == pytest.approx(pass_at_k([8], [5], k)[0], abs=EXACT)


def test_ucc_rejects_bad_sizes_and_k():
    with pytest.raises(ValueError):
        ucc_at_k(4, [3, 2], 1)  # more correct samples than samples
    with pytest.raises(ValueError):
        ucc_at_k(4, [0], 1)
    with pytest.raises(ValueError, match="k=5"):
        ucc_at_k(4, [], 5)
    assert ucc_at_k(4, [], 2) == 0.0


# ---- Pass@1 ± SE (FPA App. B.3) -------------------------------------------------------


def loop_pass1_se(z: list[list[int]]) -> tuple[float, float]:
    problems, samples = len(z), len(z[0])
    a = [sum(z[i][j] for i in range(problems)) / problems for j in range(samples)]
    mean = sum(a) / samples
    variance = sum((x - mean) ** 2 for x in a) / samples  # population (ddof = 0)
    return mean, math.sqrt(variance) / math.sqrt(samples)


def test_pass1_se_hand_case():
    mean, se = pass1_with_se(np.array([[1, 0], [1, 1]], dtype=bool))
    # a = (1, 0.5): mean 0.75, population std 0.25, SE = 0.25 / sqrt(2)
    assert mean == pytest.approx(0.75, abs=EXACT)
    assert se == pytest.approx(0.25 / math.sqrt(2), abs=EXACT)


def test_pass1_se_matches_loop():
    rng = np.random.default_rng(3)
    z = rng.random((37, 8)) < 0.6
    mean, se = pass1_with_se(z)
    want_mean, want_se = loop_pass1_se(z.astype(int).tolist())
    assert mean == pytest.approx(want_mean, abs=EXACT)
    assert se == pytest.approx(want_se, abs=EXACT)
    assert mean == pytest.approx(z.mean(), abs=EXACT)


def test_pass1_se_rejects_empty():
    with pytest.raises(ValueError):
        pass1_with_se(np.zeros((0, 8), dtype=bool))


# ---- flip rate (QUATRO App. C.7, docs/evaluation.md) -------------------------------------------


def test_difficulty_buckets_reproduce_the_paper_bins_at_256():
    c = np.array([0, 7, 8, 31, 32, 127, 128, 256])
    got = difficulty_bucket(np.full(c.size, 256), c)
    assert got.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert DIFFICULTY_BUCKETS == ("very hard", "hard", "medium", "easy")


def test_difficulty_buckets_scale_with_n():
    # n = 64: edges 2, 8, 32
    c = np.array([0, 1, 2, 7, 8, 31, 32, 64])
    assert difficulty_bucket(np.full(c.size, 64), c).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # n = 8: edges 0.25, 1, 4 -> c = 0 very hard, no integer c is hard
    c = np.arange(9)
    assert difficulty_bucket(np.full(9, 8), c).tolist() == [0, 2, 2, 2, 3, 3, 3, 3, 3]


@settings(max_examples=100, deadline=None)
@given(n_c_k(64), st.integers(1, 64), st.data())
def test_flip_at_k_matches_exact(base, n_trained, data):
    n_base, c_base, _ = base
    c_trained = data.draw(st.integers(0, n_trained))
    k = data.draw(st.integers(1, min(n_base, n_trained)))
    want = (1 - exact_pass(n_base, c_base, k)) * exact_pass(n_trained, c_trained, k)
    got = flip_at_k([n_base], [c_base], [n_trained], [c_trained], k)[0]
    assert got == pytest.approx(float(want), abs=EXACT)


def test_flip_at_k_special_cases():
    # unsolved base: flip = pass@k of the trained model; fully solved base: 0
    got = flip_at_k([8, 8], [0, 8], [8, 8], [3, 3], 2)
    assert got[0] == pytest.approx(float(exact_pass(8, 3, 2)), abs=EXACT)
    assert got[1] == 0.0
