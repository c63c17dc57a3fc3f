"""The ``covariance`` section's statistics of a batch in five compiled passes.

:class:`FusedKernelPasses` computes what :class:`~ratioscope.functional.covariance.
KernelPasses` computes (c, w, w~ with per-scope means and sigma over the whole batch) on
CPU tensors with the loops of :mod:`ratioscope.functional._covariance_kernels`, and
instead of returning [B, T] tensors from its last pass it adds the section's
statistics (histograms of c, log w and log w~ with their moments, Clip-Cov's eligible
tokens, the weight histogram and advantage mass) to per-batch totals. The torch path
stays the reference: the tests compare the two on the same chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import numpy as np
import torch
from torch import Tensor

from ratioscope.functional import _kernels
from ratioscope.functional import histogram as bins
from ratioscope.functional.covariance import (
    KERNEL_PASSES,
    PassSequence,
    ScopeIndex,
    kernel_variance,
)


def usable(*tensors: Tensor) -> bool:
    """Whether the compiled passes can take these tensors: numba available, CPU, float32
    or float64 (the mask and group ids aside)."""
    return _kernels.can_take(*tensors)


@dataclass
class PartCounts:
    """What the last pass counts over some rows (integers, and min and max, which do not
    depend on the order they are taken in).

    c_counts, w_counts, normalised_counts: [NUM_BINS] the bins of c, log w and log w~;
    weight_counts: [W] w in W equal bins of [0, 1]; extremes: [3, 2] min and max of c,
    w, w~.
    """

    weight_bins: int
    c_counts: np.ndarray = field(init=False)
    w_counts: np.ndarray = field(init=False)
    normalised_counts: np.ndarray = field(init=False)
    weight_counts: np.ndarray = field(init=False)
    extremes: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.c_counts = np.zeros(bins.NUM_BINS, dtype=np.int64)
        self.w_counts = np.zeros(bins.NUM_BINS, dtype=np.int64)
        self.normalised_counts = np.zeros(bins.NUM_BINS, dtype=np.int64)
        self.weight_counts = np.zeros(self.weight_bins, dtype=np.int64)
        self.extremes = np.empty((3, 2), dtype=np.float64)
        self.extremes[:, 0] = np.inf
        self.extremes[:, 1] = -np.inf

    def add(self, part: PartCounts) -> None:
        """Add the counts and extremes of other rows."""
        self.c_counts += part.c_counts
        self.w_counts += part.w_counts
        self.normalised_counts += part.normalised_counts
        self.weight_counts += part.weight_counts
        np.minimum(self.extremes[:, 0], part.extremes[:, 0], out=self.extremes[:, 0])
        np.maximum(self.extremes[:, 1], part.extremes[:, 1], out=self.extremes[:, 1])


@dataclass
class CovarianceTotals(PartCounts):
    """A batch's statistics from the last pass (numpy, on the CPU): the counts of
    :class:`PartCounts` over all its rows, and float sums: c_sums [NUM_BINS] c per bin;
    moments [3, 3] for c, w, w~ as (shift, sum of x - shift, sum of (x - shift)^2);
    below [K] tokens with w under each threshold; mass [3] sum |A|, sum w |A|,
    sum w~ |A|.
    """

    thresholds: tuple[float, ...] = ()
    c_sums: np.ndarray = field(init=False)
    moments: np.ndarray = field(init=False)
    below: np.ndarray = field(init=False)
    mass: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.c_sums = np.zeros(bins.NUM_BINS, dtype=np.float64)
        self.moments = np.zeros((3, 3), dtype=np.float64)
        self.below = np.zeros(len(self.thresholds), dtype=np.int64)
        self.mass = np.zeros(3, dtype=np.float64)

    def moment(self, q: int, count: int) -> tuple[int, float, float, float, float]:
        """(count, mean, sum of squared deviations, min, max) of quantity ``q`` (0: c,
        1: w, 2: w~) over ``count`` tokens."""
        shift, total, square = self.moments[q].tolist()
        low, high = self.extremes[q].tolist()
        if count == 0:
            return 0, 0.0, 0.0, low, high
        mean_offset = total / count
        return count, shift + mean_offset, max(square - total * mean_offset, 0.0), low, high


class FusedKernelPasses(PassSequence):
    """CW-GRPO kernel statistics of a batch fed in chunks of rows, pass after pass.

    Every chunk goes, in order, through :meth:`add` with index 0 to ``KERNEL_PASSES -
    1``; the last pass returns each row's sums of c, w and w~ and fills :attr:`totals`.
    Pass 1 also counts Clip-Cov's eligible tokens (:attr:`eligible`): c over the whole
    batch inside ``clip_cov_bounds``, not zeroed by PPO clipping with ``clip``.
    """

    def __init__(
        self,
        clip: tuple[float, float],
        clip_cov_bounds: tuple[float, float],
        thresholds: tuple[float, ...],
        weight_bins: int,
    ) -> None:
        self.clip = clip
        self.clip_cov_bounds = clip_cov_bounds
        self.scopes = ScopeIndex()
        self.pass_index = 0
        self.sums = np.zeros((0, 3), dtype=np.float64)  # count, log pi, A per scope
        self.batch = np.zeros(3, dtype=np.float64)
        self.means = np.zeros((0, 3), dtype=np.float64)  # log pi, A, c per scope
        self.batch_means = np.zeros(2, dtype=np.float64)
        self.c_sums = np.zeros((0, 2), dtype=np.float64)  # c, c^2
        self.spread = np.zeros(0, dtype=np.float64)
        self.kernel = np.zeros(0, dtype=np.float64)  # 2 sigma^2
        self.flat = np.zeros(0, dtype=np.bool_)
        self.w_sums = np.zeros(0, dtype=np.float64)
        self.factor = np.zeros(0, dtype=np.float64)  # N / sum w
        self.log_factor = np.zeros(0, dtype=np.float64)
        self.eligible = 0
        self.totals = CovarianceTotals(weight_bins, thresholds=thresholds)

    @property
    def tokens(self) -> int:
        """Valid tokens of the batch (after pass 0)."""
        return int(self.batch[0])

    def add(
        self,
        index: int,
        logp: Tensor,
        adv: Tensor,
        mask: Tensor,
        group: Tensor | None,
        log_ratio: Tensor,
    ) -> Tensor | None:
        """Feed a chunk to pass ``index``.

        Args:
            logp, adv: [B, T] float32/float64 CPU tensors, log pi and broadcast
                advantages; mask: [B, T] bool; group: [B] int ids or None (one scope);
            log_ratio: [B, T] log r, for Clip-Cov's PPO clip mask (pass 1).

        Returns:
            in the last pass, [B, 3] float64 each row's sums of c, w and w~ over its
            valid tokens (in the input's precision); else None.
        """
        self._advance(index)
        lp, a, valid = logp.numpy(), adv.numpy(), mask.numpy()
        scope = self.scopes.rows(group, mask.shape[0], torch.device("cpu"), new=index == 0)
        rows = scope.numpy()
        if index == KERNEL_PASSES - 1:
            return self._statistics(lp, a, valid, rows, _narrow(logp), self._thresholds(logp))
        compiled = kernels()
        if index == 0:
            # one loop: the totals over the whole batch are one sum in the batch's order
            self._grow(len(self.scopes))
            compiled.sums(lp, a, valid, rows, self.sums, self.batch)
            return None
        owner, parts = self._owners(valid.size)
        if index == 1:
            bounds, narrow, z = self._clip_bounds(logp, log_ratio), _narrow(logp), log_ratio.numpy()

            def part(owned: int) -> int:  # Clip-Cov's eligible tokens in these rows
                return compiled.covariance_sums(
                    lp, a, valid, z, rows, owner, owned, self.means, self.batch_means,
                    self.c_sums, narrow, bounds,
                )  # fmt: skip

        elif index == 2:

            def part(owned: int) -> int:
                compiled.spread(lp, a, valid, rows, owner, owned, self.means, self.spread)
                return 0

        else:

            def part(owned: int) -> int:
                compiled.weight_sums(
                    lp, a, valid, rows, owner, owned, self.means, self.kernel, self.flat,
                    self.w_sums,
                )  # fmt: skip
                return 0

        counts = _kernels.map_parts(part, parts)
        if index == 1:
            self.eligible += sum(counts)
        return None

    # ---------------------------------------------------------------- internals
    def _statistics(
        self,
        lp: np.ndarray,
        a: np.ndarray,
        valid: np.ndarray,
        scope: np.ndarray,
        narrow: bool,
        thresholds: np.ndarray,
    ) -> Tensor:
        """The last pass over a chunk: its rows in parts on the threads torch may use
        (:func:`_kernels.map_any_parts`; one part for a small chunk), each part's counts
        then its float sums added to the totals part after part, in file order (the same
        bits as one loop)."""
        compiled = kernels()
        count, length = valid.shape
        totals = self.totals
        shifts = totals.moments[:, 0].copy()
        row_stats = np.empty((count, compiled.ROW_FIELDS), dtype=np.float64)
        # c's bin and value of each valid token: at most all of a part's positions
        token_bins = np.empty(count * length, dtype=np.int32)
        token_c = np.empty(count * length, dtype=np.float64)

        def part(start: int, stop: int) -> tuple[int, int, PartCounts, int]:
            counts = PartCounts(totals.weight_bins)
            tokens = compiled.statistics(
                lp[start:stop], a[start:stop], valid[start:stop], scope[start:stop],
                self.means, self.kernel, self.flat, self.factor, self.log_factor, narrow,
                thresholds, shifts, counts.c_counts, counts.w_counts, counts.normalised_counts,
                counts.weight_counts, counts.extremes, token_bins[start * length :],
                token_c[start * length :], row_stats[start:stop],
            )  # fmt: skip
            return start, stop, counts, tokens

        # folded in file order, so any cut of the rows gives the bits of one loop
        for start, stop, counts, tokens in _kernels.map_any_parts(part, count, valid.size):
            compiled.fold_statistics(
                token_bins[start * length :], token_c[start * length :], tokens,
                row_stats[start:stop], totals.c_sums, totals.moments, totals.mass,
                totals.below,
            )  # fmt: skip
            totals.add(counts)
        return torch.from_numpy(row_stats[:, : compiled.ROW_N + 1].copy())

    def _owners(self, elements: int) -> tuple[np.ndarray, int]:
        """(owner [S]: the part of each scope, parts) for passes 1-3: the scopes dealt
        round-robin to :func:`scope_parts` parts. Each scope's sums are added in one
        loop whatever the parts, so the parts change the time, not the bits."""
        scopes = len(self.scopes)
        parts = scope_parts(scopes, elements)
        return np.arange(scopes, dtype=np.int64) % parts, parts

    def _grow(self, scopes: int) -> None:
        have = self.sums.shape[0]
        if have < scopes:
            extra = max(scopes, 2 * have) - have
            self.sums = np.concatenate([self.sums, np.zeros((extra, 3))])

    def _finish(self, index: int) -> None:
        """What pass ``index`` makes of its sums once every chunk went through it (as
        KernelPasses._finish: the same float64 operations, on numpy arrays)."""
        scopes = len(self.scopes)
        if index == 0:
            self.sums = self.sums[:scopes]
            safe = np.maximum(self.sums[:, 0], 1.0)
            self.means = np.zeros((scopes, 3), dtype=np.float64)
            self.means[:, 0] = self.sums[:, 1] / safe
            self.means[:, 1] = self.sums[:, 2] / safe
            batch_safe = max(self.batch[0], 1.0)
            self.batch_means = np.array([self.batch[1] / batch_safe, self.batch[2] / batch_safe])
            self.c_sums = np.zeros((scopes, 2), dtype=np.float64)
            self.spread = np.zeros(scopes, dtype=np.float64)
            self.w_sums = np.zeros(scopes, dtype=np.float64)
        elif index == 1:
            safe = np.maximum(self.sums[:, 0], 1.0)
            self.means[:, 2] = self.c_sums[:, 0] / safe
            self.totals.moments[0, 0] = self._mean(self.c_sums[:, 0])
        elif index == 2:
            safe = np.maximum(self.sums[:, 0], 1.0)
            variance, self.flat = kernel_variance(self.spread, self.c_sums[:, 1], safe)
            self.kernel = 2.0 * variance
        elif index == 3:
            with np.errstate(divide="ignore", invalid="ignore"):  # scopes of empty rows
                self.factor = self.sums[:, 0] / self.w_sums
                self.log_factor = np.log(self.factor)  # (nan, inf: the log of w~ itself)
            self.totals.moments[1, 0] = self._mean(self.w_sums)
            self.totals.moments[2, 0] = 1.0  # w~ averages 1 over every scope

    def _mean(self, per_scope: np.ndarray) -> float:
        """A per-scope sum over all tokens, as a mean (the moments' shift)."""
        return float(per_scope.sum() / self.batch[0]) if self.batch[0] else 0.0

    def _clip_bounds(self, logp: Tensor, log_ratio: Tensor) -> np.ndarray:
        """Clip-Cov's c bounds and the PPO ratio bounds (:func:`comparison_bounds`)."""
        return np.array(self._bounds(logp, log_ratio)[:4])

    def _thresholds(self, logp: Tensor) -> np.ndarray:
        return np.array(self._bounds(logp, logp)[4:])

    def _bounds(self, logp: Tensor, log_ratio: Tensor) -> list[float]:
        return comparison_bounds(
            self.clip, self.clip_cov_bounds, self.totals.thresholds, logp.dtype, log_ratio.dtype
        )


def comparison_bounds(
    clip: tuple[float, float],
    clip_cov_bounds: tuple[float, float],
    thresholds: tuple[float, ...],
    logp_dtype: torch.dtype,
    log_ratio_dtype: torch.dtype,
) -> list[float]:
    """[c low, c high, 1 + eps_high, 1 - eps_low, *thresholds] as torch compares them:
    Clip-Cov's c bounds and the weight thresholds in c's stored precision (log pi's
    dtype), the PPO ratio bounds in the log-ratio's (a float32 tensor is compared with a
    Python float in float32). Shared by the numba and the Triton passes."""
    eps_low, eps_high = clip
    low, high = clip_cov_bounds
    return [
        _rounded(low, logp_dtype),
        _rounded(high, logp_dtype),
        _rounded(1 + eps_high, log_ratio_dtype),
        _rounded(1 - eps_low, log_ratio_dtype),
        *(_rounded(t, logp_dtype) for t in thresholds),
    ]


def scope_parts(scopes: int, elements: int) -> int:
    """How many parts passes 1-3 take: one on one thread, for a single scope or for a
    small chunk (at most :data:`ratioscope.defaults.SERIAL_ELEMENTS`: handing it to
    threads costs more than it saves), else up to :data:`_kernels.ROW_PARTS`. The bits
    are the same for any number."""
    from ratioscope.defaults import SERIAL_ELEMENTS

    if elements <= SERIAL_ELEMENTS or _kernels.threads() == 1:
        return 1
    return max(1, min(_kernels.ROW_PARTS, scopes))


def _narrow(logp: Tensor) -> bool:
    """c, w and w~ are stored in float32 unless log pi is float64 (covariance_weights)."""
    return logp.dtype != torch.float64


def _rounded(value: float, dtype: torch.dtype) -> float:
    return float(np.float32(value)) if dtype == torch.float32 else float(value)


def kernels() -> ModuleType:
    """:mod:`ratioscope.functional._covariance_kernels` (imports numba)."""
    from ratioscope.functional import _covariance_kernels

    return _covariance_kernels
