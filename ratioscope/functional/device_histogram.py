"""A histogram's counts, moments and per-bin sums by one Triton kernel on a GPU.

:class:`ratioscope.sections.summaries.Histogram` asks :func:`counted_by_kernel` first:
on a GPU that Triton compiles for, one kernel reads the values once and one copy brings
the bins (:mod:`ratioscope.functional.histogram`'s), the sums and the moments to the
host, where the tensor code takes a dozen launches and a read for the bins and as many
for the moments. Elsewhere it answers None and the tensor code runs. :func:`class_cells`
does the same for the cells of several histograms at once.
"""

from __future__ import annotations

from torch import Tensor

from ratioscope.functional import histogram as bins
from ratioscope.functional.moments import MomentSums, masked_moment_table


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


def class_cells(values: Tensor, keep: Tensor, log: bool = False) -> tuple[Tensor, Tensor]:
    """The values each cell keeps, counted in the fixed bins (of log x with ``log``) and
    summed into moments: the cells of several histograms at once.

    On a GPU one Triton program a cell (``_triton_kernels.class_cells``), whose log may
    put a value within an ulp of a bin edge in the next bin; else ``histogram.bin_index``,
    ``histogram.class_counts`` and ``moments.masked_moment_table``.

    Args:
        values: [K, B] float, finite where kept (and non-negative with ``log``).
        keep: [K, C, B] bool, the values of row k that cell (k, c) holds.
        log: bin log x (a log-coordinate histogram's bins).

    Returns:
        (counts [K, C, NUM_BINS] int64, moments [K, C, 5] float64: count, mean, sum of
        squared deviations, min, max), on the device of ``values``. With ``log`` a
        negative value kept is not counted where it would have no bin; its cell's
        minimum below 0 is how a caller knows.
    """
    import torch

    from ratioscope.functional import _triton_kernels

    if _triton_kernels.on_gpu(values) and _triton_kernels.can_take(keep):
        return _triton_kernels.class_cells(values, keep, log)
    kept = keep.any(1)
    if log:
        kept = kept & (values >= 0)  # a negative value's log has no bin: 1's here
    one = torch.ones((), dtype=values.dtype, device=values.device)
    coordinate = torch.where(kept, values, one)
    index = bins.bin_index(torch.log(coordinate.double()) if log else coordinate)
    return bins.class_counts(index, keep), masked_moment_table(values, keep)
