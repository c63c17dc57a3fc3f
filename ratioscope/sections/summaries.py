"""Mergeable accumulators: the state that lets chunks, files and shard reports combine.

Every statistic in a report is built from these: counts and sums add, moments merge
with Chan's parallel update, histograms use the fixed bins of
:mod:`ratioscope.functional.histogram` so that merging is a sum of counts. Their
``state()`` is plain JSON and ``from_state`` restores them exactly, which is what
``ratioscope merge`` relies on.

A histogram holds its values in one coordinate, and each quantile it reads states its
error in that coordinate (:class:`QuantileBound`): :class:`Histogram` bins the values
themselves ("value": 1.16 % of the value), :class:`LogHistogram` bins ``log x`` of
positive quantities that live near 1, the weights and ratios, where the reader looks at
the distance from 1 ("log": 1.16 % of ``|log x|``, so ``x - 1`` to about 1.16 % while
``|log x|`` is small, and the side of 1 exactly). The two never merge into each other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ratioscope.functional import device_histogram
from ratioscope.functional import histogram as bins
from ratioscope.functional.moments import (
    MomentSums,
    combine_moments,
    moment_sums,
    moment_sums_of,
)
from ratioscope.sections.context import HostReads


def _none_to(value: Any, default: float) -> float:
    return default if value is None else float(value)


@dataclass(frozen=True)
class QuantileBound:
    """How far a quantile read from a histogram may be from the exact order statistic.

    With ``u = x`` (``coordinate == "value"``) or ``u = log x`` (``"log"``), the reading
    ``x_hat`` of the q-quantile and the exact order statistic ``x_(k)``, k = ceil(q n)
    (numpy's ``inverted_cdf``), satisfy
    ``|u(x_hat) - u(x_(k))| <= max(relative * |u(x_(k))|, absolute)``: both lie in one bin
    of :mod:`ratioscope.functional.histogram` (same sign, exact zeros exact), ``absolute``
    covering its under-flow bin. In the log coordinate ``x_hat`` is on the same side of 1
    as ``x_(k)`` and ``x = 0`` reads exactly.

    >>> bound = QuantileBound("log")
    >>> bound.holds(1.0 + 1.01e-4, 1.0 + 1e-4), bound.holds(1.0 + 1.02e-4, 1.0 + 1e-4)
    (True, False)
    """

    coordinate: str = "value"
    relative: float = bins.RELATIVE_ERROR
    absolute: float = 10.0**bins.MIN_EXP

    def holds(self, estimate: float, exact: float) -> bool:
        """True when ``estimate`` is within this bound of ``exact`` (NaN: both NaN)."""
        if math.isnan(exact) or math.isnan(estimate):
            return math.isnan(exact) and math.isnan(estimate)
        if self.coordinate == "log":
            if exact == 0.0 or estimate == 0.0:
                return estimate == exact
            estimate, exact = math.log(estimate), math.log(exact)
        slack = 1e-12 * max(1.0, abs(exact))  # the rounding of reading the bin edges
        return abs(estimate - exact) <= max(self.relative * abs(exact), self.absolute) + slack


#: the bound of every :class:`Histogram` quantile (and of reports written before bounds
#: were stated)
VALUE_BOUND = QuantileBound("value")
#: the bound of every :class:`LogHistogram` quantile
LOG_BOUND = QuantileBound("log")


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
        if values.numel():
            self._combine(*moment_sums(values))

    def merge(self, other: Moments) -> None:
        self._combine(other.count, other.mean, other.m2, other.minimum, other.maximum)

    def add_sums(self, sums: MomentSums) -> None:
        """Add the moments of values already summed
        (:func:`ratioscope.functional.moments.masked_moment_sums`)."""
        if sums.n:
            self._combine(*sums)

    def _combine(self, n: int, mean: float, m2: float, low: float, high: float) -> None:
        mine = MomentSums(self.count, self.mean, self.m2, self.minimum, self.maximum)
        merged = combine_moments(mine, MomentSums(n, mean, m2, low, high))
        self.count, self.mean, self.m2, self.minimum, self.maximum = merged

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
        """Read back :meth:`state`, checked: a count >= 0, numbers where numbers are,
        a non-negative sum of squares and min <= mean <= max once there is a value.

        Raises:
            ValueError: saying which value does not fit.
        """
        count = state["count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"moments 'count' is {count!r:.40}, not a count")
        for key in ("mean", "m2"):
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"moments '{key}' is {value!r:.40}, not a number")
        moments = cls(
            count=count,
            mean=float(state["mean"]),
            m2=float(state["m2"]),
            minimum=_none_to(state["min"], math.inf),
            maximum=_none_to(state["max"], -math.inf),
        )
        if count and not (moments.m2 >= 0 and moments.minimum <= moments.maximum):
            raise ValueError("moments with a negative sum of squares or min above max")
        return moments


def add_small_counts(values: Tensor, counts: Tensor) -> bool:
    """Add the counts of ``values`` ([n] finite) to ``counts`` ([NUM_BINS] int64) in
    place by one compiled loop, where that applies: both on the CPU, ``values`` float32
    or float64 and at most :data:`ratioscope.defaults.SERIAL_ELEMENTS` (a dozen tensor
    operations cost more than binning a small step's values). True when added; False
    leaves ``counts`` to the caller (``bincount`` of
    :func:`ratioscope.functional.histogram.bin_index`). The bins are the same."""
    from ratioscope.defaults import SERIAL_ELEMENTS
    from ratioscope.functional import _kernels

    usable = (
        values.dim() == 1
        and values.numel() <= SERIAL_ELEMENTS
        and counts.dtype == torch.int64
        and counts.device.type == "cpu"
        and counts.is_contiguous()
        and _kernels.can_take(values)
    )
    if not usable:
        return False
    from ratioscope.functional import _binning

    _binning.count_values(values.detach().contiguous().numpy(), counts.numpy())
    return True


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
        """Add a 1-D tensor of finite values (any device; on a GPU, one Triton kernel and
        one read back where Triton can compile for it)."""
        if values.numel() == 0:
            return
        counted = device_histogram.counted_by_kernel(values, self.sums is not None)
        if counted is not None:
            counts, moments, sums = counted
            self.counts += counts
            if self.sums is not None and sums is not None:
                self.sums += sums
            self.moments.add_sums(moments)
            return
        if self.sums is not None:
            counts, sums = bins.histogram_sums(values)
            self.sums += sums.cpu()
            self.counts += counts.cpu()
        elif not add_small_counts(values, self.counts):
            self.counts += bins.histogram(values).cpu()
        self.moments.add(values)

    def bins_of(self, values: Tensor) -> Tensor:
        """The bin of each of ``values`` ([n] finite) as :meth:`add` counts it: [n] int64."""
        return bins.bin_index(values)

    def add_binned(self, values: Tensor, index: Tensor) -> None:
        """:meth:`add` of ``values`` ([n]) whose bins ``index`` ([n], :meth:`bins_of`) are
        known: values binned once serve several histograms (one per class of rows)."""
        if values.numel() == 0:
            return
        counts = torch.bincount(index, minlength=bins.NUM_BINS)
        if self.sums is not None:
            sums = torch.zeros(bins.NUM_BINS, dtype=torch.float64, device=values.device)
            sums.index_add_(0, index, values.double())
            self.sums += sums.cpu()
        self.counts += counts.cpu()
        self.moments.add(values)

    def add_counts(self, counts: Tensor, moments: MomentSums) -> None:
        """Add values already counted: ``counts`` [NUM_BINS] int64 on the CPU (a cell of
        :func:`ratioscope.functional.histogram.class_counts`) and their moments (of
        :func:`ratioscope.functional.moments.masked_moment_sums`). Only without per-bin
        sums, which the counts do not carry."""
        if self.sums is not None:
            raise ValueError("a histogram with per-bin sums needs the values themselves")
        self.counts += counts
        self.moments.add_sums(moments)

    def merge(self, other: Histogram) -> None:
        _same_coordinate(self, other)
        self.counts += other.counts
        if self.sums is not None and other.sums is not None:
            self.sums += other.sums
        self.moments.merge(other.moments)

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    @property
    def quantile_bound(self) -> QuantileBound:
        return VALUE_BOUND

    def quantile(self, q: float) -> float:
        """Within :attr:`quantile_bound` of the exact order statistic."""
        return bins.quantile_from_counts(self.counts, q, self.moments.minimum, self.moments.maximum)

    def quantiles(self, qs: tuple[float, ...]) -> dict[str, float]:
        values = bins.quantiles_from_counts(
            self.counts, qs, self.moments.minimum, self.moments.maximum
        )
        return {_q_key(q): value for q, value in zip(qs, values, strict=True)}

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
        """Read back :meth:`state`, checked (:func:`_bin_counts`).

        Raises:
            ValueError, KeyError, TypeError: the block does not fit the bin layout.
        """
        counts, index = _bin_counts(state)
        sums = None
        if "sum" in state:
            if not isinstance(state["sum"], list) or len(state["sum"]) != len(index):
                raise ValueError("histogram 'sum' is not one number per 'index'")
            sums = torch.zeros(bins.NUM_BINS, dtype=torch.float64)
            sums[index] = torch.tensor(state["sum"], dtype=torch.float64)
        moments = Moments.from_state(state["moments"])
        _same_count(counts, moments)
        return cls(counts=counts, sums=sums, moments=moments)


@dataclass
class LogHistogram:
    """Counts of ``log x`` in the fixed bins, with the exact moments of ``x`` itself.

    For non-negative quantities that live near 1 (kernel weights, sequence weights,
    ratios): a quantile is read in ``log x`` and returned as a value of ``x`` within
    :data:`LOG_BOUND`. ``x = 0`` (``log x = -inf``) counts in the negative over-flow bin,
    which holds nothing else (no positive double has ``|log x| >= 10^4``), and reads 0.
    The state is :class:`Histogram`'s layout (``index``, ``count``, ``moments``), the
    moments being those of ``x``; sections write it under keys of its own.

    >>> h = LogHistogram()
    >>> h.add(torch.tensor([0.0, 0.999, 1.0, 1.002]))
    >>> h.quantile(0.25), round(h.quantile(0.5), 6), h.moments.maximum
    (0.0, 0.999, 1.002)
    """

    counts: Tensor = field(default_factory=lambda: torch.zeros(bins.NUM_BINS, dtype=torch.long))
    moments: Moments = field(default_factory=Moments)

    def add(self, values: Tensor) -> None:
        """Add a 1-D tensor of finite non-negative values (any device).

        Raises:
            ValueError: a value is negative (it has no log).
        """
        if values.numel() == 0:
            return
        sums = moment_sums(values)  # its minimum is the check: one read back, not two
        if sums.minimum < 0:
            raise ValueError("a log-coordinate histogram holds non-negative values only")
        self.counts += bins.histogram(torch.log(values.double())).cpu()
        self.moments.add_sums(sums)

    def bins_of(self, values: Tensor) -> Tensor:
        """The bin of each of ``values`` ([n] finite, non-negative) as :meth:`add` counts
        it: [n] int64.

        Raises:
            ValueError: a value is negative.
        """
        if bool((values < 0).any()):
            raise ValueError("a log-coordinate histogram holds non-negative values only")
        return bins.bin_index(torch.log(values.double()))

    def add_binned(self, values: Tensor, index: Tensor) -> None:
        """:meth:`add` of ``values`` ([n]) whose bins ``index`` ([n], :meth:`bins_of`) are
        known."""
        if values.numel() == 0:
            return
        self.counts += torch.bincount(index, minlength=bins.NUM_BINS).cpu()
        self.moments.add(values)

    def add_counts(self, counts: Tensor, moments: MomentSums) -> None:
        """Add values already counted (bins of ``log x``, :meth:`bins_of`): ``counts``
        [NUM_BINS] int64 (CPU) and the moments of ``x``."""
        self.counts += counts
        self.moments.add_sums(moments)

    def merge(self, other: LogHistogram) -> None:
        _same_coordinate(self, other)
        self.counts += other.counts
        self.moments.merge(other.moments)

    @property
    def count(self) -> int:
        return int(self.counts.sum())

    @property
    def quantile_bound(self) -> QuantileBound:
        return LOG_BOUND

    def quantile(self, q: float) -> float:
        """Within :attr:`quantile_bound` (of ``log x``) of the exact order statistic."""
        low, high = self.moments.minimum, self.moments.maximum
        value = bins.quantile_from_counts(self.counts, q, _log(low), _log(high))
        return math.exp(value) if not math.isnan(value) else value

    def quantiles(self, qs: tuple[float, ...]) -> dict[str, float]:
        low, high = self.moments.minimum, self.moments.maximum
        values = bins.quantiles_from_counts(self.counts, qs, _log(low), _log(high))
        return {
            _q_key(q): math.exp(value) if not math.isnan(value) else value
            for q, value in zip(qs, values, strict=True)
        }

    def state(self) -> dict[str, Any]:
        nonzero = self.counts.nonzero().flatten()
        return {
            "index": nonzero.tolist(),
            "count": self.counts[nonzero].tolist(),
            "moments": self.moments.state(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LogHistogram:
        """Read back :meth:`state`, checked as :meth:`Histogram.from_state` is."""
        counts, _ = _bin_counts(state)
        moments = Moments.from_state(state["moments"])
        _same_count(counts, moments)
        return cls(counts=counts, moments=moments)


def add_cells(
    cells: Sequence[Sequence[Histogram | LogHistogram]],
    values: Tensor,
    keep: Tensor,
    host: HostReads | None = None,
) -> None:
    """Add ``values[k][keep[k, c]]`` to ``cells[k][c]`` for every k and c, binned, counted
    and summed at once: a small step has a dozen quantities, each by a few classes of rows,
    and one ``add`` each cost more than its values. Now, or when ``host`` runs its folds
    (a device's: the counts and moments read with the chunk's other numbers).

    The counts are those of the adds one by one; the moments are summed in another order
    (within rounding). Cells not all of one kind, or with per-bin sums (which need the
    values), are added one by one, at once.

    Args:
        cells: [K][C] histograms.
        values: [K, B] float, finite (and non-negative for log histograms) where kept.
        keep: [K, C, B] bool.

    Raises:
        ValueError: a kept value is negative for a log histogram (where the fold runs).
    """
    kinds = {type(cell) for row in cells for cell in row}
    if len(kinds) != 1 or any(getattr(cell, "sums", None) is not None for row in cells
                              for cell in row):  # fmt: skip
        for k, row in enumerate(cells):
            for c, cell in enumerate(row):
                cell.add(values[k][keep[k, c]])
        return
    log = kinds == {LogHistogram}
    counts, table = device_histogram.class_cells(values, keep, log)

    def fold(counts: Tensor, table: Tensor) -> None:
        moments = moment_sums_of(table.tolist())
        # a log histogram's check, read with the counts: a kept value below 0
        if log and any(cell.minimum < 0 for row in moments for cell in row):
            raise ValueError("a log-coordinate histogram holds non-negative values only")
        for k, row in enumerate(cells):
            for c, cell in enumerate(row):
                cell.add_counts(counts[k, c], moments[k][c])

    (host or HostReads()).later(fold, counts, table)


def _bin_counts(state: dict[str, Any]) -> tuple[Tensor, Tensor]:
    """The [NUM_BINS] counts of a histogram's state, and the bins it names: distinct bin
    indices in range, one non-negative integer count each.

    Raises:
        ValueError: naming what does not fit.
    """
    index, count = state["index"], state["count"]
    if not isinstance(index, list) or not isinstance(count, list) or len(index) != len(count):
        raise ValueError("histogram 'index' and 'count' are not lists of one length")
    for name, values in (("index", index), ("count", count)):
        # the types at C speed (a merge reads thousands of these lists): ints, not bools
        if not set(map(type, values)) <= {int} or (values and min(values) < 0):
            raise ValueError(f"histogram '{name}' holds a value that is not a count")
    if (index and max(index) >= bins.NUM_BINS) or len(set(index)) != len(index):
        raise ValueError(
            f"histogram 'index' names a bin twice or past the {bins.NUM_BINS} bins of the layout"
        )
    counts = torch.zeros(bins.NUM_BINS, dtype=torch.long)
    bins_named = torch.tensor(index, dtype=torch.long)
    counts[bins_named] = torch.tensor(count, dtype=torch.long)
    return counts, bins_named


def _same_count(counts: Tensor, moments: Moments) -> None:
    """A histogram's counts add up to its moments' count (both count every value)."""
    if int(counts.sum()) != moments.count:
        raise ValueError(
            f"histogram counts add up to {int(counts.sum())} but its moments count "
            f"{moments.count} values"
        )


def _log(x: float) -> float:
    if math.isinf(x):
        return x  # an empty histogram's +-inf extremes stay unbounded
    return math.log(x) if x > 0 else -math.inf


def _same_coordinate(mine: Histogram | LogHistogram, theirs: Histogram | LogHistogram) -> None:
    if type(mine) is not type(theirs):
        raise ValueError(
            f"one side holds its quantile histogram in the {mine.quantile_bound.coordinate} "
            f"coordinate and the other in the {theirs.quantile_bound.coordinate} coordinate "
            "(a report written before ratioscope read weights in log w); their bins cannot "
            "be converted into each other exactly, so re-analyse the older report's inputs"
        )


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


#: keys up to which :meth:`Counter.add_tensor` sums in Python
_SMALL_COUNT = 4096


@dataclass
class Counter:
    """Integer counts keyed by a small integer (run lengths, correct counts...)."""

    counts: dict[int, int] = field(default_factory=dict)

    def add_tensor(self, keys: Tensor, weights: Tensor | None = None) -> None:
        keys = keys.detach().cpu().long()
        if keys.numel() == 0:
            return
        weights = torch.ones_like(keys) if weights is None else weights.detach().cpu().long()
        if keys.numel() <= _SMALL_COUNT:
            # a few keys (a file's method, a row's run lengths): summed in Python, which
            # costs less than torch.unique's call; keys new to the counter join in
            # increasing order, as torch.unique's sorted keys did
            totals: dict[int, int] = {}
            for key, weight in zip(
                keys.flatten().tolist(), weights.flatten().tolist(), strict=True
            ):
                totals[key] = totals.get(key, 0) + weight
            for key in sorted(totals):
                self.counts[key] = self.counts.get(key, 0) + totals[key]
            return
        unique, inverse = torch.unique(keys, return_inverse=True)
        summed = torch.zeros(unique.numel(), dtype=torch.long).index_add_(0, inverse, weights)
        for key, total in zip(unique.tolist(), summed.tolist(), strict=True):
            self.counts[key] = self.counts.get(key, 0) + total

    def merge(self, other: Counter) -> None:
        for key, value in other.counts.items():
            self.counts[key] = self.counts.get(key, 0) + value

    def state(self) -> dict[str, int]:
        return {str(k): v for k, v in sorted(self.counts.items())}

    @classmethod
    def from_state(cls, state: dict[str, int]) -> Counter:
        """Read back :meth:`state`: integer keys, non-negative integer counts.

        Raises:
            ValueError: a key or a count that is not one.
        """
        if not isinstance(state, dict):
            raise ValueError("a counter that is not an object")
        for value in state.values():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"a counter holds {value!r:.40}, not a count")
        return cls(counts={int(k): v for k, v in state.items()})
