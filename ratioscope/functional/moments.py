"""Moments that merge: count, mean, sum of squared deviations, min and max of a stream.

Chan, Golub and LeVeque's parallel update ("Updating formulae and a pairwise algorithm
for computing sample variances", 1979): two parts of ``n_a`` and ``n_b`` values with
means ``mean_a``, ``mean_b`` and sums of squared deviations ``m2_a``, ``m2_b`` combine
exactly into ``n = n_a + n_b``, ``mean = mean_a + delta n_b / n`` and
``m2 = m2_a + m2_b + delta^2 n_a n_b / n`` with ``delta = mean_b - mean_a``. The
mergeable state of the report sections (:class:`ratioscope.sections.summaries.Moments`)
and the compiled ratio pass (:mod:`ratioscope.functional.ratio_rows`) both use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from torch import Tensor


class MomentSums(NamedTuple):
    """(count n, mean, sum of squared deviations, min, max) of a set of values."""

    n: int
    mean: float
    m2: float
    minimum: float
    maximum: float


EMPTY = MomentSums(0, 0.0, 0.0, float("inf"), float("-inf"))


def combine_moments(a: MomentSums, b: MomentSums) -> MomentSums:
    """The moments of the union of two disjoint sets of values (Chan et al.'s update).

    >>> combine_moments(MomentSums(2, 1.5, 0.5, 1.0, 2.0), MomentSums(1, 3.0, 0.0, 3.0, 3.0))
    MomentSums(n=3, mean=2.0, m2=2.0, minimum=1.0, maximum=3.0)
    """
    if b.n == 0:
        return a
    total = a.n + b.n
    delta = b.mean - a.mean
    return MomentSums(
        n=total,
        mean=a.mean + delta * b.n / total,
        # grouped as the streaming update adds it, so merged reports stay bit-identical
        m2=a.m2 + (b.m2 + delta * delta * a.n * b.n / total),
        minimum=min(a.minimum, b.minimum),
        maximum=max(a.maximum, b.maximum),
    )


def moment_sums(values: Tensor) -> MomentSums:
    """The moments of ``values`` ([n] finite, n >= 1, any device), read back to the host
    at once: on a GPU each read waits for the device, and four would wait four times.
    The same numbers as reading the mean, the sum of squares about it, the min and the
    max one by one.

    >>> import torch
    >>> moment_sums(torch.tensor([1.0, 2.0, 4.0]))
    MomentSums(n=3, mean=2.3333333333333335, m2=4.666666666666667, minimum=1.0, maximum=4.0)
    """
    import torch

    x = values.double()
    mean = x.mean()
    low, high = torch.aminmax(x)
    table = torch.stack([mean, (x - mean).square_().sum(), low, high]).tolist()
    return MomentSums(int(values.numel()), *table)


def masked_moment_sums(values: Tensor, keep: Tensor) -> list[list[MomentSums]]:
    """The moments of every row of ``values`` over each of its masks, in one set of
    tensor operations (a small step reads a dozen quantities by three classes of rows:
    one reduction each cost more than its values): :func:`moment_sums_of` the
    :func:`masked_moment_table`, read back once.

    Args:
        values: [K, B] float, finite wherever kept.
        keep: [K, C, B] bool, the values of row k that cell (k, c) holds.

    Returns:
        [K][C] :class:`MomentSums`, :data:`EMPTY` where a cell holds nothing.

    >>> import torch
    >>> keep = torch.tensor([[[True, True, False], [False, False, False]]])
    >>> masked_moment_sums(torch.tensor([[1.0, 2.0, 9.0]]), keep)[0]
    [MomentSums(n=2, mean=1.5, m2=0.5, minimum=1.0, maximum=2.0), MomentSums(n=0, mean=0.0, \
m2=0.0, minimum=inf, maximum=-inf)]
    """
    return moment_sums_of(masked_moment_table(values, keep).tolist())


def masked_moment_table(values: Tensor, keep: Tensor) -> Tensor:
    """[K, C, 5] float64 on the device of ``values``: each cell's count, mean, sum of
    squares about the mean, minimum and maximum (:func:`masked_moment_sums`'s arguments).

    Two passes per cell, as a stream's first part is summed: the mean from the sum of the
    kept values, then the squared deviations from it. Nothing waits for the GPU here."""
    import torch

    x = values.double().unsqueeze(1)  # [K, 1, B]
    zero = torch.zeros((), dtype=torch.float64, device=x.device)
    count = keep.sum(-1)
    mean = torch.where(keep, x, zero).sum(-1) / count.clamp(min=1)
    m2 = torch.where(keep, x - mean.unsqueeze(-1), zero).square_().sum(-1)
    low = torch.where(keep, x, math.inf).amin(-1)
    high = torch.where(keep, x, -math.inf).amax(-1)
    return torch.stack([count.double(), mean, m2, low, high], dim=-1)


def moment_sums_of(table: list[list[list[float]]]) -> list[list[MomentSums]]:
    """[K][C] :class:`MomentSums` (:data:`EMPTY` where a cell holds nothing) from a
    :func:`masked_moment_table` read back (``tolist()``)."""
    return [
        [MomentSums(int(n), mu, s, lo, hi) if n else EMPTY for n, mu, s, lo, hi in row]
        for row in table
    ]


def add_fields(target: Any, other: Any) -> None:
    """Add each field of the dataclass ``other`` to ``target``'s, in field order: the
    ``merge`` of a dataclass of sums and counts."""
    for item in fields(target):
        setattr(target, item.name, getattr(target, item.name) + getattr(other, item.name))


@dataclass
class PairSums:
    """Sums of paired values (x, y): their count, sums, sums of squares and of products,
    for Pearson's correlation and the least-squares slope of y on x; ``merge`` adds
    exactly (the objectives' pairwise correlations, the sampling section's temperature
    line)."""

    n: int = 0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    yy: float = 0.0
    xy: float = 0.0

    def merge(self, other: PairSums) -> None:
        add_fields(self, other)

    def correlation(self) -> float:
        """Pearson's r; NaN with fewer than two pairs or no spread."""
        vx = self.n * self.xx - self.x * self.x
        vy = self.n * self.yy - self.y * self.y
        if self.n < 2 or vx <= 0 or vy <= 0:
            return math.nan
        return (self.n * self.xy - self.x * self.y) / math.sqrt(vx * vy)

    def slope(self) -> float:
        """The least-squares slope of y on x; NaN with fewer than two pairs or no spread
        of x."""
        vx = self.n * self.xx - self.x * self.x
        if self.n < 2 or vx <= 0:
            return math.nan
        return (self.n * self.xy - self.x * self.y) / vx
