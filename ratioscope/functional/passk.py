"""Pass@k, UCC@k, mean accuracy, Pass@1 ± SE and the flip rate, from correctness counts.

Everything here takes counts (samples ``n``, correct ``c``, cluster sizes) as integer
arrays and returns float64 arrays; nothing reads files or prints.

The unbiased estimators share one quantity: the probability that ``k`` samples drawn
without replacement from ``n`` all miss a given subset of ``m`` samples,
C(n-m, k) / C(n, k). It is computed in the product form
prod_{i=0}^{k-1} (n-m-i)/(n-i), each factor in [0, 1], so it never overflows the way
the binomials themselves do (C(256, 128) ~ 6e75), and it is vectorised over problems.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ratioscope.errors import ParameterError

DIFFICULTY_BUCKETS: tuple[str, ...] = ("very hard", "hard", "medium", "easy")
"""Names of the flip-rate buckets, from fewest to most base-correct samples (QUATRO C.7)."""

BUCKET_FRACTIONS: tuple[float, ...] = (1 / 32, 1 / 8, 1 / 2)
"""Upper bucket edges as fractions of the base n: QUATRO's bins 8, 32, 128 of n = 256."""


def _as_counts(name: str, values: object) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "iub" and array.size:
        raise ParameterError(name, f"must hold integers, got dtype {array.dtype}")
    return array.astype(np.int64)


def _check_k(k: int, n: np.ndarray) -> None:
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ParameterError("k", f"must be a positive integer, got {k!r}")
    if n.size and int(n.min()) < k:
        raise ParameterError(
            "k",
            f"exceeds the number of samples n={int(n.min())} of at least one problem; "
            "Pass@k is undefined there",
            subject=f"k={k}",
        )


def miss_probability(n: object, m: object, k: int) -> np.ndarray:
    """C(n-m, k) / C(n, k): the chance that k of n samples avoid a fixed subset of m.

    Args:
        n: [P] int, samples per problem (broadcast against ``m``).
        m: [P] int, size of the subset to miss, 0 <= m <= n.
        k: samples drawn without replacement, 1 <= k <= min(n).

    Returns:
        [P] float64 in [0, 1].

    >>> miss_probability([4], [2], 2).tolist()  # C(2,2)/C(4,2) = 1/6
    [0.16666666666666666]
    """
    n_arr, m_arr = np.broadcast_arrays(_as_counts("n", n), _as_counts("m", m))
    if np.any(m_arr < 0) or np.any(m_arr > n_arr):
        raise ParameterError("m", "must satisfy 0 <= m <= n", subject="the subset sizes m")
    _check_k(k, n_arr)
    flat_n = n_arr.reshape(-1, 1).astype(np.float64)
    flat_m = m_arr.reshape(-1, 1).astype(np.float64)
    steps = np.arange(k, dtype=np.float64)
    # A factor hits 0 once fewer than k samples lie outside the subset: then every draw
    # of k must touch it, and the product is exactly 0.
    factors = np.clip(flat_n - flat_m - steps, 0.0, None) / (flat_n - steps)
    return factors.prod(axis=1).reshape(n_arr.shape)


def pass_at_k(n: object, c: object, k: int) -> np.ndarray:
    """Unbiased Pass@k per problem: 1 - C(n-c, k) / C(n, k) (QUATRO Sec. 4, Chen et al. 2021).

    Args:
        n: [P] int, samples per problem.
        c: [P] int, correct samples per problem, 0 <= c <= n.
        k: budget; k > n for any problem raises ValueError (never a silent 1.0).

    Returns:
        [P] float64, the probability that k samples drawn without replacement from the
        n contain at least one correct one. Average over problems for the benchmark value.

    >>> pass_at_k([8, 8, 8], [0, 1, 8], 4).tolist()
    [0.0, 0.5, 1.0]
    """
    return 1.0 - miss_probability(n, c, k)


def avg_at_k(n: object, c: object) -> np.ndarray:
    """Per-problem accuracy c / n: the expected fraction of correct samples among any k.

    It does not depend on k, and its mean over problems equals the mean Pass@1.

    >>> avg_at_k([8, 4], [2, 4]).tolist()
    [0.25, 1.0]
    """
    n_arr = _as_counts("n", n)
    c_arr = _as_counts("c", c)
    if np.any(n_arr < 1):
        raise ParameterError("n", "must be at least 1 for every problem")
    return c_arr / n_arr


def ucc_at_k(n: int, cluster_sizes: Sequence[int] | np.ndarray, k: int) -> float:
    """Unique Correct Count: sum_j 1 - C(n - s_j, k) / C(n, k) (QUATRO Eq. 20).

    Args:
        n: all samples of the problem, correct or not.
        cluster_sizes: [m] int, sizes s_j of the clusters of its correct samples
            (sum s_j = number of correct samples <= n).
        k: budget, 1 <= k <= n.

    Returns:
        The expected number of distinct correct clusters met by k samples drawn without
        replacement. UCC@1 = (correct samples) / n, UCC@n = number of clusters.

    >>> ucc_at_k(8, [4, 2], 8)
    2.0
    >>> ucc_at_k(8, [4, 2], 1)
    0.75
    """
    sizes = _as_counts("cluster_sizes", cluster_sizes).reshape(-1)
    if int(sizes.sum()) > n or np.any(sizes < 1):
        raise ParameterError("cluster_sizes", "must be positive and sum to at most n")
    if sizes.size == 0:
        _check_k(k, np.asarray([n]))
        return 0.0
    return float(np.sum(1.0 - miss_probability(np.full_like(sizes, n), sizes, k)))


def pass1_with_se(correct: np.ndarray) -> tuple[float, float]:
    """Pass@1 and its standard error across sample positions (FPA App. B.3, Eq. 29-30).

    a_j = (1/N) sum_i z_ij is the accuracy of the j-th sample of every problem; the
    estimate is mean_j a_j and SE = std(a_1..a_n) / sqrt(n), with the population std
    (ddof = 0, the ratioscope convention; the paper does not say which).

    Args:
        correct: [N, n] bool, z_ij for problem i and sample index j.

    Returns:
        (pass@1, standard error).

    >>> pass1_with_se(np.array([[1, 0], [1, 1]], dtype=bool))
    (0.75, 0.17677669529663687)
    """
    z = np.asarray(correct, dtype=np.float64)
    if z.ndim != 2 or z.shape[0] < 1 or z.shape[1] < 1:
        raise ParameterError("correct", f"must be a non-empty [N, n] array, got shape {z.shape}")
    per_position = z.mean(axis=0)
    return float(per_position.mean()), float(per_position.std() / np.sqrt(z.shape[1]))


def difficulty_bucket(n_base: object, c_base: object) -> np.ndarray:
    """Flip-rate bucket of each prompt from its base correct count (QUATRO C.7, scaled).

    The paper's bins [0, 8, 32, 128, 256] for n = 256 become fractions of each prompt's
    base n: very hard c < n/32, hard n/32 <= c < n/8, medium n/8 <= c < n/2, easy c >= n/2.

    Returns:
        [P] int64 index into :data:`DIFFICULTY_BUCKETS`.

    >>> difficulty_bucket([256] * 4, [7, 8, 127, 128]).tolist()
    [0, 1, 2, 3]
    """
    n_arr = _as_counts("n_base", n_base)
    c_arr = _as_counts("c_base", c_base)
    # Integer comparisons (32c < n rather than c < n/32) so that edges are exact.
    return (
        (32 * c_arr >= n_arr).astype(np.int64)
        + (8 * c_arr >= n_arr).astype(np.int64)
        + (2 * c_arr >= n_arr).astype(np.int64)
    )


def flip_at_k(
    n_base: object, c_base: object, n_trained: object, c_trained: object, k: int
) -> np.ndarray:
    """Per-prompt flip probability (1 - pass@k_base) * pass@k_trained (docs/evaluation.md).

    QUATRO C.7 defines the flip rate as the fraction of prompts with no correct base
    sample that gain one after training; that only describes its hardest bucket. This
    version is defined in every bucket: the chance that k base samples all fail while k
    trained samples include a correct one. For c_base = 0 it is pass@k_trained.

    Returns:
        [P] float64.

    >>> flip_at_k([8, 8], [0, 4], [8, 8], [2, 8], 8).tolist()
    [1.0, 0.0]
    """
    return (1.0 - pass_at_k(n_base, c_base, k)) * pass_at_k(n_trained, c_trained, k)
