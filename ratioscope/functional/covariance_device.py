"""The ``covariance`` section's five passes on a GPU, as Triton kernels.

:class:`DeviceKernelPasses` is the GPU's counterpart of
:class:`~ratioscope.functional.covariance_fused.FusedKernelPasses` (numba, on the CPU):
the same passes, the same interface and the same totals. Each pass reads a chunk's log
pi, A and mask once (pass 1 the log-ratio too) in one kernel that leaves three float64
sums a row; the rows' sums go to their scopes by one ``index_add_`` over [B] rows, and
what the next pass needs of them (means, sigma, N / sum w) is a few operations on [S]
scopes, all on the device. The last pass leaves the section's histograms, moments and
sums in one buffer a chunk, which come to the host in one copy when the section reads
the totals. The torch path (:class:`~ratioscope.functional.covariance.KernelPasses`)
stays the reference: the tests compare the three.

What differs from the CPU's bits: the sums are added row by row and then per scope
(``index_add_`` on a GPU adds in any order), the bins come from the GPU's ``log``, which
may put a value within an ulp of a bin edge in the next bin, and Clip-Cov's ratio is
``exp`` in float64 rounded to the log-ratio's precision.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ratioscope.functional import _triton_kernels
from ratioscope.functional import histogram as bins
from ratioscope.functional.covariance import (
    KERNEL_PASSES,
    PassSequence,
    ScopeIndex,
    kernel_variance,
)
from ratioscope.functional.covariance_fused import CovarianceTotals, comparison_bounds
from ratioscope.functional.moments import EMPTY, MomentSums, combine_moments


def usable(*values: Tensor, mask: Tensor) -> bool:
    """Whether the kernels take these: float ``values`` and a bool ``mask`` of their shape,
    on a GPU where Triton compiles (:func:`_triton_kernels.on_gpu`)."""
    return _triton_kernels.on_gpu(*values, mask=mask)


class DeviceKernelPasses(PassSequence):
    """CW-GRPO kernel statistics of a batch fed in chunks of rows, pass after pass, on a
    GPU (the interface of ``FusedKernelPasses``).

    Every chunk goes, in order, through :meth:`add` with index 0 to ``KERNEL_PASSES -
    1``; the last pass returns each row's sums of c, w and w~, and :attr:`totals`,
    :attr:`tokens` and :attr:`eligible` read what the passes left.
    """

    def __init__(
        self,
        clip: tuple[float, float],
        clip_cov_bounds: tuple[float, float],
        thresholds: tuple[float, ...],
        weight_bins: int,
        keep: bool = False,
    ) -> None:
        """``keep``: keep each chunk's scope rows from pass 0 (the chunks then come in the
        same order in every pass), instead of asking the group ids again each pass."""
        if len(thresholds) != 2:
            raise ValueError(f"the kernels count w under two thresholds, got {thresholds}")
        self.clip = clip
        self.clip_cov_bounds = clip_cov_bounds
        self.thresholds = thresholds
        self.weight_bins = weight_bins
        self.keep = keep
        self.scopes = ScopeIndex()
        self.pass_index = 0
        self.position = 0
        self.kept_scopes: list[Tensor] = []
        #: [S, 3] per scope: pass 0's tokens, sum log pi, sum A; pass 1's sum c, sum
        #: c^2, Clip-Cov's eligible tokens; pass 2's spread and pass 3's sum w (column 0)
        self.sums: list[Tensor] = []
        self.table: Tensor | None = None  # [S, SCOPE_COLUMNS]
        self.constants: Tensor | None = None  # [COVARIANCE_CONSTANTS]
        self.summaries: list[Tensor] = []
        self.dtypes: tuple[torch.dtype, torch.dtype] | None = None  # log pi's, log-ratio's
        self._read: tuple[CovarianceTotals, int, int] | None = None

    # ------------------------------------------------------------------ feeding
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
            logp, adv: [B, T] float32/float64 on the GPU, log pi and broadcast
                advantages; mask: [B, T] bool; group: [B] int ids or None (one scope);
            log_ratio: [B, T] log r, for Clip-Cov's PPO clip mask (pass 1).

        Returns:
            in the last pass, [B, 3] float64 each row's sums of c, w and w~ over its
            valid tokens (in the input's precision); else None.
        """
        self._advance(index)
        if not self.sums:
            self.sums.append(torch.zeros((0, 3), dtype=torch.float64, device=mask.device))
            self.dtypes = (logp.dtype, log_ratio.dtype)
        scope = self._scope_rows(index, group, mask)
        if index == KERNEL_PASSES - 1:
            assert self.table is not None and self.constants is not None
            summary, row_sums = _triton_kernels.covariance_statistics(
                (logp, adv, mask), scope, self.table, self.constants, self.weight_bins
            )
            self.summaries.append(summary)
            return row_sums
        if index == 0:
            table = constants = _triton_kernels.float64_constants((0.0,), str(mask.device))
        else:
            assert self.table is not None and self.constants is not None
            table, constants = self.table, self.constants
        row_sums = _triton_kernels.covariance_rows(
            index, (logp, adv, mask, log_ratio), scope, table, constants
        )
        sums = self.sums[index]
        if index == 0 and sums.shape[0] < len(self.scopes):
            grown = torch.zeros((len(self.scopes), 3), dtype=torch.float64, device=sums.device)
            grown[: sums.shape[0]] = sums
            self.sums[0] = sums = grown
        sums.index_add_(0, scope, row_sums)
        return None

    # ------------------------------------------------------------------ reading
    @property
    def totals(self) -> CovarianceTotals:
        """The last pass's statistics over every chunk (read from the device once)."""
        return self._host()[0]

    @property
    def tokens(self) -> int:
        """Valid tokens of the batch."""
        return self._host()[1]

    @property
    def eligible(self) -> int:
        """Clip-Cov's eligible tokens of the batch (pass 1)."""
        return self._host()[2]

    # ---------------------------------------------------------------- internals
    def _scope_rows(self, index: int, group: Tensor | None, mask: Tensor) -> Tensor:
        """[B] int64 each row's scope, on the mask's device (kept from pass 0 with
        ``keep``: asking the ids reads them back to the host)."""
        position = self.position
        self.position += 1
        if self.keep and index > 0:
            return self.kept_scopes[position]
        scope = self.scopes.rows(group, mask.shape[0], mask.device, new=index == 0)
        if self.keep:
            self.kept_scopes.append(scope)
        return scope

    def _finish(self, index: int) -> None:
        """What pass ``index`` makes of its sums once every chunk went through it: the
        next pass's columns of the per-scope table, on the device."""
        first = self.sums[0]
        count = first[:, 0]
        safe = count.clamp_min(1.0)
        if index == 0:
            self.table = torch.zeros(
                (first.shape[0], _triton_kernels.SCOPE_COLUMNS), dtype=torch.float64,
                device=first.device,
            )  # fmt: skip
            self.table[:, 0] = first[:, 1] / safe
            self.table[:, 1] = first[:, 2] / safe
            self.constants = self._constants(first.sum(0))
        assert self.table is not None
        if index < KERNEL_PASSES - 2:
            self.sums.append(torch.zeros_like(first))
        if index == 1:
            self.table[:, 2] = self.sums[1][:, 0] / safe
        elif index == 2:
            variance, flat = kernel_variance(self.sums[2][:, 0], self.sums[1][:, 1], safe)
            self.table[:, 3] = 2.0 * variance
            self.table[:, 4] = flat.to(torch.float64)
        elif index == 3:
            self.table[:, 5] = count / self.sums[3][:, 0]  # NaN for scopes of empty rows

    def _constants(self, batch: Tensor) -> Tensor:
        """The kernels' constants (``_triton_kernels.COVARIANCE_CONSTANTS``), the bounds in
        the precision torch compares them in (a float32 tensor with a Python float: in
        float32), the batch's means from its sums ``batch`` [3] (on the device)."""
        assert self.dtypes is not None
        bounds = comparison_bounds(self.clip, self.clip_cov_bounds, self.thresholds, *self.dtypes)
        constants = torch.tensor([0.0, 0.0, *bounds], dtype=torch.float64, device=batch.device)
        constants[:2] = batch[1:] / batch[0].clamp_min(1.0)
        return constants

    def _host(self) -> tuple[CovarianceTotals, int, int]:
        """(totals, tokens, eligible tokens): every chunk's buffer and the two counts in
        one copy to the host."""
        if self._read is not None:
            return self._read
        if self.pass_index < KERNEL_PASSES - 1:
            raise ValueError("the totals are read after the last pass")
        counts = torch.stack([self.sums[0][:, 0].sum(), self.sums[1][:, 2].sum()])
        host = torch.cat([*self.summaries, counts.view(torch.int32)]).cpu()
        tokens, eligible = (int(v) for v in host[-4:].view(torch.float64).tolist())
        totals = CovarianceTotals(self.weight_bins, thresholds=self.thresholds)
        moments = [EMPTY, EMPTY, EMPTY]
        start = 0
        for summary in self.summaries:
            part = host[start : start + summary.numel()]
            start += summary.numel()
            counts_part, c_sums, slots = _triton_kernels.split_covariance(part, self.weight_bins)
            _add_counts(totals, counts_part.numpy())
            totals.c_sums += c_sums.numpy()
            for slot in slots:
                for q in range(3):
                    n, mean, spread, low, high = slot[5 * q : 5 * q + 5]
                    moments[q] = combine_moments(
                        moments[q], MomentSums(int(n), mean, spread, low, high)
                    )
                    totals.mass[q] += slot[15 + q]
                totals.below += [int(slot[18]), int(slot[19])]
        for q, moment in enumerate(moments):
            # the moments as CovarianceTotals keeps them: (shift, sum of x - shift, sum
            # of squares), here shifted by the mean itself
            totals.moments[q] = (moment.mean, 0.0, moment.m2)
            totals.extremes[q] = (moment.minimum, moment.maximum)
        self._read = (totals, tokens, eligible)
        return self._read


def _add_counts(totals: CovarianceTotals, counts: np.ndarray) -> None:
    """A chunk's counts (the kernels' layout: c, log w, log w~, the weight bins) into
    ``totals``."""
    n = bins.NUM_BINS
    totals.c_counts += counts[:n]
    totals.w_counts += counts[n : 2 * n]
    totals.normalised_counts += counts[2 * n : 3 * n]
    totals.weight_counts += counts[3 * n :]
