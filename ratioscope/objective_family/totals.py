"""Mergeable sums of the objective family: each method's coefficients, and each pair's.

What :func:`ratioscope.objectives` folds every batch (or a step's joined groups,
:mod:`ratioscope.objective_family.step_join`) into, and merges across shards, before the
side-by-side summaries (:mod:`ratioscope.objective_family.side_by_side`) are read off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ratioscope.functional.moments import PairSums
from ratioscope.objective_family.methods import REFERENCE

if TYPE_CHECKING:
    from torch import Tensor

    from ratioscope.functional.objectives import Coefficients


@dataclass
class MethodTotals:
    """Mergeable sums of one method's coefficients over the valid tokens it ran on."""

    tokens: int = 0
    zero: int = 0
    positive: int = 0
    negative: int = 0
    sum: float = 0.0
    sum_abs: float = 0.0
    sum_squares: float = 0.0
    flags: dict[str, int] = field(default_factory=dict)
    #: tokens where the reference method's coefficient is non-zero, and among them
    #: those where this method's has the opposite sign
    reference_nonzero: int = 0
    opposite: int = 0
    #: sum |c| and tokens over sequences longer than their batch's median length
    long_abs: float = 0.0
    long_tokens: int = 0
    files: int = 0
    bin_counts: Any = None
    bin_sums: Any = None

    def add(
        self,
        valid: Tensor,
        flags: dict[str, Tensor],
        reference_sign: Tensor | None,
        long_tokens: Tensor,
        mask: Tensor,
    ) -> None:
        """Fold one batch in.

        Args:
            valid: [N] float64, the coefficients of the batch's valid tokens (row-major).
            flags: named [B, T] bool, the method's rules.
            reference_sign: [N] the sign of the reference method's coefficients, or None.
            long_tokens: [N] float64, 1 on tokens of sequences longer than the median.
            mask: [B, T] bool, the valid tokens.
        """
        import torch

        from ratioscope.functional.concentration import magnitude_bins

        magnitude = valid.abs()
        sign = torch.sign(valid)
        negative, zero, positive = torch.bincount((sign + 1).long(), minlength=3).tolist()
        self.tokens += int(valid.numel())
        self.zero += zero
        self.positive += positive
        self.negative += negative
        self.sum += float(valid.sum())
        self.sum_abs += float(magnitude.sum())
        self.sum_squares += float(torch.dot(valid, valid))
        for name, flag in flags.items():
            self.flags[name] = self.flags.get(name, 0) + int(torch.count_nonzero(flag & mask))
        if reference_sign is not None:
            self.reference_nonzero += int(torch.count_nonzero(reference_sign))
            self.opposite += int(torch.count_nonzero(reference_sign * sign < 0))
        self.long_abs += float(torch.dot(magnitude, long_tokens))
        self.long_tokens += int(long_tokens.sum())
        counts, sums = magnitude_bins(magnitude)
        if self.bin_counts is None:
            self.bin_counts, self.bin_sums = counts, sums
        else:
            self.bin_counts += counts
            self.bin_sums += sums
        self.files += 1

    def merge(self, other: MethodTotals) -> None:
        """Add the sums of ``other`` (a later shard of the same run)."""
        for name in (
            "tokens", "zero", "positive", "negative", "sum", "sum_abs", "sum_squares",
            "reference_nonzero", "opposite", "long_abs", "long_tokens", "files",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name, count in other.flags.items():
            self.flags[name] = self.flags.get(name, 0) + count
        if self.bin_counts is None:
            self.bin_counts, self.bin_sums = other.bin_counts, other.bin_sums
        elif other.bin_counts is not None:
            self.bin_counts = self.bin_counts + other.bin_counts
            self.bin_sums = self.bin_sums + other.bin_sums


@dataclass
class Totals:
    """Every method's :class:`MethodTotals` and every pair's :class:`PairSums` of a run."""

    names: tuple[str, ...]
    methods: dict[str, MethodTotals] = field(default_factory=dict)
    pairs: dict[tuple[str, str], PairSums] = field(default_factory=dict)
    advantage_rows: list[dict[str, Any]] = field(default_factory=list)
    rollout: dict[str, Any] = field(default_factory=dict)

    def add(self, coefficients: dict[str, Coefficients], mask: Tensor, longer: Tensor) -> None:
        """Fold one batch in; ``longer`` [B] bool is :func:`long_rows` of ``mask``."""
        import torch

        long_tokens = longer.unsqueeze(1).expand(mask.shape)[mask].double()
        valid = {name: coef.values[mask] for name, coef in coefficients.items()}
        reference = valid.get(REFERENCE)
        reference_sign = None if reference is None else torch.sign(reference)
        for name, coef in coefficients.items():
            totals = self.methods.setdefault(name, MethodTotals())
            ref = reference_sign if name != REFERENCE else None
            totals.add(valid[name], coef.flags, ref, long_tokens, mask)
        present = [n for n in self.names if n in coefficients]
        if not present:
            return
        # pairwise dot products, not one stacked matrix: no second copy of every method
        sums = {n: float(valid[n].sum()) for n in present}
        squares = {n: float(torch.dot(valid[n], valid[n])) for n in present}
        count = int(valid[present[0]].numel())
        for i, a in enumerate(present):
            for b in present[i:]:
                product = squares[a] if a == b else float(torch.dot(valid[a], valid[b]))
                for x, y in ((a, b), (b, a)) if a != b else ((a, a),):
                    pair = self.pairs.setdefault((x, y), PairSums())
                    pair.n += count
                    pair.x += sums[x]
                    pair.y += sums[y]
                    pair.xx += squares[x]
                    pair.yy += squares[y]
                    pair.xy += product

    def merge(self, other: Totals) -> None:
        for name, totals in other.methods.items():
            self.methods.setdefault(name, MethodTotals()).merge(totals)
        for key, pair in other.pairs.items():
            self.pairs.setdefault(key, PairSums()).merge(pair)
