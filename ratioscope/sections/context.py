"""Per-chunk context: the batch, the parameters and derived signals computed once.

Several sections need the same derived tensors (the Kalman-filtered ratio, sequence
means); the context computes each on first use and shares it. Its :class:`HostReads`
gathers what the sections read back to the host, so that a GPU waits once a chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.data.params import AnalysisParams
from ratioscope.functional import _kernels
from ratioscope.functional.host import host_tensors
from ratioscope.functional.surrogate import AdvantageSums, advantage_sums

VARIANTS = ("token", "sequence", "kalman")
T = TypeVar("T")


class HostReads:
    """Host work on device tensors that may wait until a chunk's sections are done.

    On a GPU each read back waits for all the work queued before it: the sections folded
    a chunk's [B]-sized results into their host sums one read at a time, some thirty
    waits a chunk, each one draining the GPU's queue. Handed to :meth:`later`, a fold
    waits in a list; :meth:`flush` reads every tensor of the list in one copy
    (:func:`~ratioscope.functional.host.host_tensors`) and runs the folds in the order
    they came, so the sums are those of the folds run one by one.

    Without ``deferred`` (the default), or on CPU tensors, a fold runs at once on the
    tensors' own memory: what the sections did before, and what a caller that never
    flushes (a drill-down, a figure) gets.
    """

    def __init__(self, deferred: bool = False) -> None:
        self.deferred = deferred
        self._folds: list[tuple[int, Callable[..., None]]] = []
        self._tensors: list[Tensor] = []

    def later(self, fold: Callable[..., None], *tensors: Tensor) -> None:
        """Run ``fold(*host)``, ``host`` the CPU tensors of ``tensors`` (same shapes and
        dtypes), now or at :meth:`flush`; ``fold`` may touch host state only."""
        if not self.deferred or all(t.device.type == "cpu" for t in tensors):
            fold(*host_tensors(*tensors))
            return
        self._folds.append((len(tensors), fold))
        self._tensors.extend(tensors)

    @property
    def pending(self) -> int:
        """Folds waiting for :meth:`flush`."""
        return len(self._folds)

    def flush(self) -> None:
        """Read the waiting folds' tensors in one copy and run the folds in order."""
        folds, tensors = self._folds, self._tensors
        self._folds, self._tensors = [], []
        if not folds:
            return
        host = host_tensors(*tensors)
        start = 0
        for count, fold in folds:
            fold(*host[start : start + count])
            start += count


class Context:
    """A chunk (or a whole file) being analysed.

    ``deferred_reads``: the sections' host folds wait for :meth:`flush` (the pipeline's
    chunks); else they run at once.
    """

    def __init__(
        self, batch: TokenBatch, params: AnalysisParams, deferred_reads: bool = False
    ) -> None:
        self.batch = batch
        self.params = params
        self.host = HostReads(deferred_reads)
        self._cache: dict[str, Any] = {}

    def flush(self) -> None:
        """Run the host folds the sections left for the chunk's end (:class:`HostReads`)."""
        self.host.flush()

    @property
    def mask(self) -> Tensor:
        return self.batch.mask

    @property
    def z(self) -> Tensor:
        """[B, T] log-ratio, 0 at masked positions."""
        return self.batch.log_ratio

    def cached(self, key: str, compute: Callable[[], T]) -> T:
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    @property
    def lengths(self) -> Tensor:
        """[B] int64 valid tokens per row (a compiled count on the CPU: a torch sum of a
        bool tensor converts every element to int64, about 30x slower)."""
        return self.cached("lengths", lambda: _kernels.row_lengths(self.mask))

    @property
    def z64_sums(self) -> Tensor:
        """[B] float64 sum of each row's log-ratio over its valid tokens (one compiled
        pass on the CPU, each row in order)."""

        def compute() -> Tensor:
            if _kernels.can_take(self.z, mask=self.mask):
                sums, counts = _kernels.masked_row_sums(self.z.numpy(), self.mask.numpy())
                # the same pass counted the rows' valid tokens: no second count
                self._cache.setdefault("lengths", torch.from_numpy(counts))
                return torch.from_numpy(sums)
            return self.z.double().sum(dim=1)  # the masked positions are 0

        return self.cached("z64_sums", compute)

    @property
    def advantage_sums(self) -> AdvantageSums:
        """Per-row sums and counts of the positive and negative advantages on valid
        tokens (the PPO sums of a ratio that is constant within each row)."""

        def compute() -> AdvantageSums:
            advantages = self.batch.advantages
            if advantages is None:
                raise ValueError("the batch has no advantages")
            return advantage_sums(advantages, self.mask)

        return self.cached("advantage_sums", compute)

    @property
    def nonempty(self) -> Tensor:
        """[B] bool, rows with at least one valid token."""
        return self.cached("nonempty", lambda: self.lengths > 0)

    @property
    def sequence_mean_z(self) -> Tensor:
        """[B] mean log-ratio over each sequence's valid tokens (0 for empty rows)."""

        def compute() -> Tensor:
            return (self.z64_sums / self.lengths.clamp_min(1)).to(self.z.dtype)

        return self.cached("sequence_mean_z", compute)

    def signal(self, variant: str, params: AnalysisParams | None = None) -> Tensor:
        """[B, T] log-space ratio signal of a variant, 0 at masked positions.

        token: z; sequence: every token gets its sequence's mean z (GSPO/GMPO/TEPO
        geometric mean); kalman: KPO's causally filtered log-ratio with the Kalman
        settings of ``params`` (default: the context's), so a Q/V sweep can share a chunk.
        """
        params = params or self.params
        key = f"signal:{variant}"
        if variant == "kalman":
            key += ":" + repr(_kalman_settings(params))
        return self.cached(key, lambda: self._compute_signal(variant, params))

    def _compute_signal(self, variant: str, params: AnalysisParams) -> Tensor:
        zero = torch.zeros((), dtype=self.z.dtype)
        if variant == "token":
            return self.z
        if variant == "sequence":
            broadcast = self.sequence_mean_z[:, None].expand_as(self.z)
            return torch.where(self.mask, broadcast, zero)
        if variant == "kalman":
            return self._kalman_rho(params)
        raise ValueError(f"unknown variant {variant!r}")

    def _kalman_rho(self, p: AnalysisParams) -> Tensor:
        """[B, T] the filtered log-ratio rho (scan or the cumulative-product closed
        form), 0 at masked positions."""
        from ratioscope.functional import kalman

        if p.kalman_impl == "reference":
            rho = kalman.kalman_filter_closed_form(
                self.z, self.mask, p.kalman_q, p.kalman_v, p.kalman_p0, p.kalman_rho0
            )
            zero = torch.zeros((), dtype=self.z.dtype)
            return torch.where(self.mask, rho.to(self.z.dtype), zero)
        return kalman.kalman_filter(
            self.z,
            self.mask,
            q=p.kalman_q,
            v=p.kalman_v,
            p0=p.kalman_p0,
            rho0=p.kalman_rho0,
            # AnalysisParams admits only the values of MASK_POLICIES
            mask_policy=cast("kalman.MaskPolicy", p.mask_policy),
            zero_masked=True,
        )


def _kalman_settings(p: AnalysisParams) -> tuple[object, ...]:
    return (p.kalman_q, p.kalman_v, p.kalman_p0, p.kalman_rho0, p.mask_policy, p.kalman_impl)
