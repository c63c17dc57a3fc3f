"""A histogram's counts, moments and per-bin sums by one Triton kernel on a GPU.

:class:`ratioscope.sections.summaries.Histogram` asks :func:`counted_by_kernel` first:
on a GPU that Triton compiles for, one kernel reads the values once and one copy brings
the bins (:mod:`ratioscope.functional.histogram`'s), the sums and the moments to the
host, where the tensor code takes a dozen launches and a read for the bins and as many
for the moments. Elsewhere it answers None and the tensor code runs.
"""

from __future__ import annotations

from torch import Tensor

from ratioscope.functional.moments import MomentSums


def counted_by_kernel(
    values: Tensor, with_sums: bool = False, *, triton: bool | None = None
) -> tuple[Tensor, MomentSums, Tensor | None] | None:
    """Counts, moments and (with ``with_sums``) per-bin sums of ``values`` [n] (finite)
    by one Triton kernel on a GPU and one read back, where the tensor code takes a
    dozen launches and a read for the bins and as many for the moments.

    Args:
        values: [n] float32 or float64.
        with_sums: the per-bin sums too (added in any order: within float rounding of
            :func:`ratioscope.functional.histogram.histogram_sums`).
        triton: run the kernel (True; on CPU tensors only Triton's interpreter can),
            or only where the values are on a GPU that Triton can compile for (None).

    Returns:
        ``(counts [NUM_BINS] int64, moments, sums [NUM_BINS] float64 or None)`` on the
        CPU, or None where the kernel does not run (the caller's tensor code then).
    """
    from ratioscope.functional import _triton_kernels

    if not (_triton_kernels.on_gpu(values) if triton is None else triton):
        return None
    summary = _triton_kernels.histogram_moments(values.reshape(-1), with_sums)
    return _triton_kernels.split_summary(summary.cpu(), with_sums)  # one read
