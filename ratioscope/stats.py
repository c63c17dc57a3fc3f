"""Mergeable accumulators: the state that lets chunks, files and shard reports combine.

Every statistic in a report is built from these: counts and sums add, moments merge
with Chan's parallel update, histograms use the fixed bins of
:mod:`ratioscope.functional.histogram` so that merging is a sum of counts. Their
``state()`` is plain JSON and ``from_state`` restores them exactly, which is what
``ratioscope merge`` relies on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ratioscope.functional import histogram as bins


def _none_to(value: Any, default: float) -> float:
    return default if value is None else float(value)


@dataclass
class Moments:
    """Count, mean, sum of squared deviations, min and max of a stream of values."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    minimum: float = math.inf
    maximum: float = -math.inf

    def add(self, values: Tensor) -> None:
        """Add a 1-D tensor of finite values."""
        n = int(values.numel())
        if n == 0:
            return
        values = values.double()
        mean = float(values.mean())
        m2 = float((values - mean).square().sum())
        self._combine(n, mean, m2, float(values.min()), float(values.max()))

    def merge(self, other: Moments) -> None:
        self._combine(other.count, other.mean, other.m2, other.minimum, other.maximum)

    def _combine(self, n: int, mean: float, m2: float, low: float, high: float) -> None:
        if n == 0:
            return
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.count * n / total
        self.count = total
        self.minimum = min(self.minimum, low)
        self.maximum = max(self.maximum, high)

    @property
    def variance(self) -> float:
        """Population variance (ddof 0); NaN when empty."""
        return self.m2 / self.count if self.count else math.nan

    @property
    def std(self) -> float:
        return math.sqrt(self.variance) if self.count else math.nan

    def state(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean": self.mean,
            "m2": self.m2,
            "min": self.minimum,
            "max": self.maximum,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Moments:
        return cls(
            count=int(state["count"]),
            mean=float(state["mean"]),
            m2=float(state["m2"]),
            minimum=_none_to(state["min"], math.inf),
            maximum=_none_to(state["max"], -math.inf),
        )


@dataclass
class Histogram:
    """Counts (and optionally sums) of values in the fixed log-magnitude bins."""

    counts: Tensor = field(default_factory=lambda: torch.zeros(bins.NUM_BINS, dtype=torch.long))
    sums: Tensor | None = None
    moments: Moments = field(default_factory=Moments)

    @classmethod
    def with_sums(cls) -> Histogram:
        return cls(sums=torch.zeros(bins.NUM_BINS, dtype=torch.float64))

    def add(self, values: Tensor) -> None:
        """Add a 1-D tensor of finite values (any device)."""
        if values.numel() == 0:
            return
        if self.sums is None:
            counts = bins.histogram(values)
        else:
            counts, sums = bins.histogram_sums(values)
            self.sums += sums.cpu()
        self.counts += counts.cpu()
        self.moments.add(values)

    def merge(self, other: Histogram) -> None:
        self.counts += other.counts
        if self.sums is not None and other.sums is not None:
            self.sums += other.sums
        self.moments.merge(other.moments)

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    def quantile(self, q: float) -> float:
        """Within the relative error stated in :mod:`ratioscope.functional.histogram`."""
        return bins.quantile_from_counts(self.counts, q, self.moments.minimum, self.moments.maximum)

    def quantiles(self, qs: tuple[float, ...]) -> dict[str, float]:
        return {_q_key(q): self.quantile(q) for q in qs}

    def state(self) -> dict[str, Any]:
        nonzero = self.counts.nonzero().flatten()
        state: dict[str, Any] = {
            "index": nonzero.tolist(),
            "count": self.counts[nonzero].tolist(),
            "moments": self.moments.state(),
        }
        if self.sums is not None:
            state["sum"] = self.sums[nonzero].tolist()
        return state

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Histogram:
        counts = torch.zeros(bins.NUM_BINS, dtype=torch.long)
        index = torch.tensor(state["index"], dtype=torch.long)
        counts[index] = torch.tensor(state["count"], dtype=torch.long)
        sums = None
        if "sum" in state:
            sums = torch.zeros(bins.NUM_BINS, dtype=torch.float64)
            sums[index] = torch.tensor(state["sum"], dtype=torch.float64)
        return cls(counts=counts, sums=sums, moments=Moments.from_state(state["moments"]))


def _q_key(q: float) -> str:
    """Quantile keys as short strings: 0.5 -> "0.5", 0.001 -> "0.001"."""
    return f"{q:g}"


@dataclass
class Vector:
    """Element-wise sums over a growing index (e.g. per window index), merged by padding."""

    values: Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))

    def add(self, other: Tensor) -> None:
        other = other.detach().double().cpu()
        if other.numel() > self.values.numel():
            self.values = torch.nn.functional.pad(
                self.values, (0, other.numel() - self.values.numel())
            )
        self.values[: other.numel()] += other

    def merge(self, other: Vector) -> None:
        self.add(other.values)

    def state(self) -> list[float]:
        return self.values.tolist()

    @classmethod
    def from_state(cls, state: list[float]) -> Vector:
        return cls(values=torch.tensor(state, dtype=torch.float64))


@dataclass
class Counter:
    """Integer counts keyed by a small integer (run lengths, correct counts...)."""

    counts: dict[int, int] = field(default_factory=dict)

    def add_tensor(self, keys: Tensor, weights: Tensor | None = None) -> None:
        keys = keys.detach().cpu().long()
        if keys.numel() == 0:
            return
        weights = torch.ones_like(keys) if weights is None else weights.detach().cpu().long()
        unique, inverse = torch.unique(keys, return_inverse=True)
        totals = torch.zeros(unique.numel(), dtype=torch.long).index_add_(0, inverse, weights)
        for key, total in zip(unique.tolist(), totals.tolist(), strict=True):
            self.counts[key] = self.counts.get(key, 0) + total

    def merge(self, other: Counter) -> None:
        for key, value in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + value

    def state(self) -> dict[str, int]:
        return {str(k): v for k, v in sorted(self.counts.items())}

    @classmethod
    def from_state(cls, state: dict[str, int]) -> Counter:
        return cls(counts={int(k): int(v) for k, v in state.items()})
