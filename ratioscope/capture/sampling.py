"""Deterministic selection of the rows of a micro-batch that a capture keeps.

Rows are sampled in *units*: a unit is a GRPO group when group ids are given (every row
of a kept group is kept, so group means, advantages and per-query duals computed from
the file stay those of the training step) and a single row otherwise. The choice
depends only on (seed, step, rank, part), so a rerun with the same seed keeps the same
rows whatever else happened in the process.
"""

from __future__ import annotations

import numpy as np


def sampling_order(seed: int, step: int, rank: int, part: int, units: int) -> np.ndarray:
    """A permutation of ``range(units)`` that depends only on (seed, step, rank, part).

    Args:
        seed, step, rank, part: non-negative integers identifying the micro-batch.
        units: number of sampling units (groups or rows).

    Returns:
        [units] int64, the units in the order they are kept (first = kept first).

    >>> a = sampling_order(0, 3, 1, 0, 5)
    >>> sorted(a.tolist()), bool((a == sampling_order(0, 3, 1, 0, 5)).all())
    ([0, 1, 2, 3, 4], True)
    """
    # SeedSequence mixes the four integers into independent streams, so neighbouring
    # steps or ranks do not get correlated selections
    generator = np.random.default_rng(np.random.SeedSequence([seed, step, rank, part]))
    return generator.permutation(units).astype(np.int64)


def kept_count(fraction: float, units: int) -> int:
    """Number of units kept at ``fraction``: rounded half up, never fewer than one.

    >>> kept_count(0.5, 5), kept_count(1e-9, 5), kept_count(1.0, 5)
    (3, 1, 5)
    """
    return min(units, max(1, int(fraction * units + 0.5)))


def choose_units(order: np.ndarray, has_valid: np.ndarray, fraction: float) -> np.ndarray:
    """The units kept at ``fraction``, in the priority order a byte bound drops them by.

    The kept set is the first ``kept_count`` units of ``order``; if none of them has a
    valid token while some other unit has, the first such unit of ``order`` replaces the
    last kept one (a file with no valid token cannot be analysed). Units with valid
    tokens come first, so that any prefix of the result can be written on its own.

    Args:
        order: [U] int64 permutation from :func:`sampling_order`.
        has_valid: [U] bool, whether a unit holds at least one valid token.
        fraction: share of units to keep, in (0, 1].

    Returns:
        [K] int64 unit ids, K = kept_count(fraction, U).

    >>> choose_units(np.array([2, 0, 1]), np.array([True, True, False]), 0.4).tolist()
    [0]
    """
    kept = order[: kept_count(fraction, len(order))]
    if not has_valid[kept].any() and has_valid.any():
        first_valid = order[has_valid[order]][0]
        kept = np.concatenate([[first_valid], kept[:-1]])
    return kept[np.argsort(~has_valid[kept], kind="stable")]


def rows_of_units(row_units: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Row indices (ascending) whose unit is one of ``units``.

    Args:
        row_units: [B] int64, the unit of each row.
        units: [K] int64 unit ids.

    Returns:
        [R] int64 row indices in their original order.

    >>> rows_of_units(np.array([0, 0, 1, 2, 1]), np.array([1])).tolist()
    [2, 4]
    """
    return np.flatnonzero(np.isin(row_units, units)).astype(np.int64)
