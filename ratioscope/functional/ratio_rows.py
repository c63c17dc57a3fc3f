"""A log-ratio signal's histogram, moments and PPO row sums in one compiled pass.

The ``ratios`` section bins every valid value of a signal
(:func:`ratioscope.functional.histogram.bin_index`), takes their moments, and sums the
PPO terms of each row (:func:`ratioscope.functional.surrogate.ppo_row_sums`); in tensor
code that is a gather, a log10, a bincount, two reductions for the moments and about
ten [B, T] float64 temporaries for the PPO sums. :func:`ratio_rows` does all of it in
one loop over each row (and one more for the moments' squared deviations) on CPU
tensors, the rows in parts on the threads torch may use
(:func:`ratioscope.functional._kernels.map_row_parts`); the tensor code stays the
reference and the path for other devices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ratioscope.functional import _kernels
from ratioscope.functional import histogram as bins
from ratioscope.functional.moments import EMPTY, MomentSums, combine_moments


@dataclass(frozen=True)
class RatioRows:
    """What one pass over a signal gives.

    Attributes:
        counts: [NUM_BINS] int64 counts of the valid values in the fixed bins; None from
            the Triton kernel, whose :attr:`summary` holds them (:meth:`histogram`).
        moments: (count, mean, sum of squared deviations, min, max) of the valid values;
            None from the Triton kernel, as ``counts``.
        ppo: :func:`~ratioscope.functional.surrogate.ppo_row_sums`'s ``(clipped [B]
            int64, clipped_terms [B] float64, plain_terms [B] float64)``, or None without
            advantages.
        summary: the Triton kernel's summary buffer, on the device: the counts and each
            program's moments, left there so that a section reads them with the chunk's
            other numbers (``sections.context.HostReads``); None from the loop.
    """

    counts: Tensor | None
    moments: tuple[int, float, float, float, float] | None
    ppo: tuple[Tensor, Tensor, Tensor] | None
    summary: Tensor | None = None

    def histogram(
        self, summary: Tensor | None = None
    ) -> tuple[Tensor, tuple[int, float, float, float, float]]:
        """(counts, moments): the loop's; or the kernel's, from ``summary`` (:attr:`summary`
        read back) or, without it, from one read of :attr:`summary` now."""
        if self.counts is not None and self.moments is not None:
            return self.counts, self.moments
        from ratioscope.functional import _triton_kernels

        assert self.summary is not None  # the kernel's rows carry their summary
        host = self.summary.cpu() if summary is None else summary
        counts, moments, _ = _triton_kernels.split_summary(host)
        return counts, moments


def usable(signal: Tensor, advantages: Tensor | None) -> bool:
    """Whether :func:`ratio_rows` can take these: numba available, CPU float32/float64;
    or Triton, on a GPU (:func:`on_gpu`)."""
    others = [] if advantages is None else [advantages]
    return _kernels.can_take(signal, *others) or on_gpu(signal, advantages)


def on_gpu(signal: Tensor, advantages: Tensor | None) -> bool:
    """Whether :func:`ratio_rows` runs the Triton kernel: float32/float64 off the CPU,
    where :func:`ratioscope.functional._triton_kernels.can_take` them."""
    from ratioscope.functional import _triton_kernels

    return _triton_kernels.on_gpu(signal, *([] if advantages is None else [advantages]))


def ratio_rows(
    signal: Tensor,
    advantages: Tensor | None,
    mask: Tensor,
    clip: tuple[float, float],
    *,
    triton: bool | None = None,
) -> RatioRows:
    """Histogram, moments and PPO row sums of a log-ratio signal (see :class:`RatioRows`).

    Args:
        signal: [B, T] float log-ratio; advantages: [B, T] float or None; mask: [B, T]
            bool; clip: (eps_low, eps_high).
        triton: the Triton kernel (True), the numba loop (False), or the Triton kernel
            where :func:`on_gpu` (None). The kernel's counts, moments and PPO sums stay
            on the device (:meth:`RatioRows.histogram` reads the first two).
    """
    from ratioscope.functional import _ratio_kernels

    if on_gpu(signal, advantages) if triton is None else triton:
        return _ratio_rows_triton(signal, advantages, mask, clip)

    rows = mask.shape[0]
    row_sums = np.zeros((rows, 2), dtype=np.float64)
    clipped = np.zeros(rows, dtype=np.int64)
    values = signal.detach().numpy()
    adv = values if advantages is None else advantages.detach().numpy()
    valid = mask.numpy()
    eps_low, eps_high = clip

    def part(start: int, stop: int) -> tuple[np.ndarray, MomentSums]:
        counts = np.zeros(bins.NUM_BINS, dtype=np.int64)
        summary = np.zeros(5, dtype=np.float64)
        _ratio_kernels.histogram_ppo_rows(
            values[start:stop], adv[start:stop], valid[start:stop], advantages is not None,
            1 - eps_low, 1 + eps_high, counts, summary, row_sums[start:stop],
            clipped[start:stop],
        )  # fmt: skip
        count, mean, spread, low, high = summary.tolist()
        return counts, MomentSums(int(count), mean, spread, low, high)

    # the rows in parts on the threads torch may use, merged in order
    parts = _kernels.map_row_parts(part, rows)
    counts = np.sum([counts for counts, _ in parts], axis=0)
    moments = EMPTY
    for _, part_moments in parts:
        moments = combine_moments(moments, part_moments)
    ppo = None
    if advantages is not None:
        sums = torch.from_numpy(row_sums)
        ppo = (torch.from_numpy(clipped), sums[:, 0], sums[:, 1])
    return RatioRows(torch.from_numpy(counts), moments, ppo)


def _ratio_rows_triton(
    signal: Tensor, advantages: Tensor | None, mask: Tensor, clip: tuple[float, float]
) -> RatioRows:
    """:func:`ratio_rows` by the Triton kernel: the counts and each program's moments in
    the summary buffer and the PPO sums, all left on the device."""
    from ratioscope.functional import _triton_kernels

    eps_low, eps_high = clip
    summary, row_sums, clipped = _triton_kernels.ratio_rows(
        signal, advantages, mask, (1 - eps_low, 1 + eps_high)
    )
    ppo = None
    if row_sums is not None and clipped is not None:
        ppo = (clipped, row_sums[:, 0], row_sums[:, 1])
    return RatioRows(None, None, ppo, summary)
