"""Compiled per-row kernels (numba) for the sequential parts of the KPO statistics.

Two computations are a recurrence along each row and cost several full passes when they
are written with tensor operations: the Kalman filter (a chunked scan: weights,
cumulative sum, carries, rescale) and the run/switch/window counting of token states
(pack, states, run starts, ``nonzero``, ``bincount``, window sums). Here each is one
pass over a row's values, the mask read in the same loop, with no [B, T] temporary.

The torch implementations stay: they run on CUDA tensors and wherever numba is not
installed, and they are the references the tests compare these kernels with.
:func:`available` says whether the compiled path can be used;
``RATIOSCOPE_DISABLE_NUMBA=1`` turns it off.

Kernels are compiled on first use (``cache=True`` keeps the machine code on disk, so a
later process loads it instead of compiling again) and take numpy views of CPU tensors.
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

#: set to a non-empty value other than "0" to use the torch path everywhere
DISABLE_ENV = "RATIOSCOPE_DISABLE_NUMBA"


#: the float dtypes the kernels are compiled for
FLOAT_DTYPES = (torch.float32, torch.float64)
Part = TypeVar("Part")


@functools.cache
def available() -> bool:
    """True when numba imports and the environment does not disable it."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return False
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return True


def can_take(
    *values: Tensor, mask: Tensor | None = None, dtypes: Collection[torch.dtype] = FLOAT_DTYPES
) -> bool:
    """Whether a compiled kernel can take these tensors: numba :func:`available`, every
    tensor on the CPU, ``values`` of ``dtypes``, and ``mask`` (when given) bool and of
    each value's shape. Otherwise the caller runs its torch reference."""
    if not available():
        return False
    if any(v.device.type != "cpu" or v.dtype not in dtypes for v in values):
        return False
    if mask is None:
        return True
    return (
        mask.dtype == torch.bool
        and mask.device.type == "cpu"
        and all(v.shape == mask.shape for v in values)
    )


def _kalman_zero(
    z: Any, mask: Any, keep: Any, gains: Any, rho0: float, zero_masked: bool, out: Any
) -> None:
    """Mask policy "zero": rho_t = keep_t rho_{t-1} + K_t x_t, x_t = z_t or 0 if masked.

    z, mask, out: [B, T]; keep = 1 - K (exactly V / (P_pred + V)), gains: [T] float64.
    The state is float64 and rounded once when stored. K_t x_t does not depend on the
    state, so a step's dependency chain is one multiply and one add; four rows advance
    together so that their chains overlap (one row at a time runs at the chain's
    latency, about 3x slower). A block past the last row repeats the last row, which
    writes the same values again. ``zero_masked``: a masked position of ``out`` holds
    0 instead of the state (the state itself goes on).
    """
    rows, length = z.shape
    last = rows - 1
    for first in range(0, rows, 4):
        ra, rb, rc, rd = first, min(first + 1, last), min(first + 2, last), min(first + 3, last)
        a = b = c = d = rho0
        for t in range(length):
            k = keep[t]
            g = gains[t]
            a = k * a + g * (z[ra, t] if mask[ra, t] else 0.0)
            b = k * b + g * (z[rb, t] if mask[rb, t] else 0.0)
            c = k * c + g * (z[rc, t] if mask[rc, t] else 0.0)
            d = k * d + g * (z[rd, t] if mask[rd, t] else 0.0)
            out[ra, t] = a if mask[ra, t] or not zero_masked else 0.0
            out[rb, t] = b if mask[rb, t] or not zero_masked else 0.0
            out[rc, t] = c if mask[rc, t] or not zero_masked else 0.0
            out[rd, t] = d if mask[rd, t] or not zero_masked else 0.0


def _kalman_skip(
    z: Any, mask: Any, keep: Any, gains: Any, rho0: float, zero_masked: bool, out: Any
) -> None:
    """Mask policy "skip": the n-th valid token of a row uses keep_n and K_n; a masked
    position holds the state after the last valid token before it (rho0 before the
    first), or 0 with ``zero_masked``. Four rows at a time, as in :func:`_kalman_zero`."""
    rows, length = z.shape
    last = rows - 1
    for first in range(0, rows, 4):
        ra, rb, rc, rd = first, min(first + 1, last), min(first + 2, last), min(first + 3, last)
        a = b = c = d = rho0
        na = nb = nc = nd = 0
        for t in range(length):
            if mask[ra, t]:
                a = keep[na] * a + gains[na] * z[ra, t]
                na += 1
            if mask[rb, t]:
                b = keep[nb] * b + gains[nb] * z[rb, t]
                nb += 1
            if mask[rc, t]:
                c = keep[nc] * c + gains[nc] * z[rc, t]
                nc += 1
            if mask[rd, t]:
                d = keep[nd] * d + gains[nd] * z[rd, t]
                nd += 1
            out[ra, t] = a if mask[ra, t] or not zero_masked else 0.0
            out[rb, t] = b if mask[rb, t] or not zero_masked else 0.0
            out[rc, t] = c if mask[rc, t] or not zero_masked else 0.0
            out[rd, t] = d if mask[rd, t] or not zero_masked else 0.0


def _state_runs(
    values: Any,
    mask: Any,
    lower: float,
    upper: float,
    window: int,
    lengths: Any,
    state_counts: Any,
    run_counts: Any,
    histogram: Any,
    changes: Any,
    off: Any,
) -> None:
    """Token states and their runs, switches and windows, one pass per row.

    A valid token is up (column 2) if its value > ``upper``, down (column 0) if
    < ``lower``, on (column 1) otherwise; masked positions are skipped, so holes are
    compacted away. Outputs (zero-initialised, int64):
    lengths [B]; state_counts, run_counts [B, 3]; histogram [3, T + 1] (pooled, by run
    length); changes [B, ceil(T / window)]: adjacent state changes inside each window of
    valid tokens (a pair whose second token opens a window is in neither);
    off [B, T // window]: up or down tokens per full-size window slot.
    """
    rows, length = values.shape
    n_full = off.shape[1]
    for r in range(rows):
        n = 0
        prev = 1
        run = 0
        # Counts live in locals and are stored once per window or row: a read-modify-
        # write of an array element per token would chain on store forwarding.
        up = 0
        down = 0
        starts = np.zeros(3, dtype=np.int64)  # runs per state, by their first token
        slot = 0  # window index of the next valid token
        pos = 0  # its position inside that window
        window_changes = 0
        window_off = 0
        for t in range(length):
            if not mask[r, t]:
                continue
            x = values[r, t]
            # Branch-free: raw token states change every few tokens, unpredictably.
            is_up = np.int64(x > upper)
            is_down = np.int64(x < lower)
            column = 1 + is_up - is_down
            up += is_up
            down += is_down
            changed = np.int64(column != prev)
            start = changed | np.int64(n == 0)
            starts[column] += start
            # the run of state prev ends here when the state changes (not at token 0)
            ended = changed & np.int64(n > 0)
            histogram[prev, run] += ended
            window_changes += ended & np.int64(pos != 0)
            window_off += is_up + is_down
            run = run * (1 - start) + 1
            prev = column
            n += 1
            pos += 1
            if pos == window:
                changes[r, slot] = window_changes
                if slot < n_full:
                    off[r, slot] = window_off
                window_changes = 0
                window_off = 0
                pos = 0
                slot += 1
        if pos > 0:
            changes[r, slot] = window_changes
            if slot < n_full:
                off[r, slot] = window_off
        if n > 0:
            histogram[prev, run] += 1
        lengths[r] = n
        state_counts[r, 0] = down
        state_counts[r, 1] = n - up - down
        state_counts[r, 2] = up
        run_counts[r, 0] = starts[0]
        run_counts[r, 1] = starts[1]
        run_counts[r, 2] = starts[2]


def _masked_zero(values: Any, mask: Any, zero: Any, out: Any) -> None:
    """out = values where mask, else ``zero`` (of the values' dtype): [B, T]. A masked
    position may hold anything, NaN included, so this is a select, not a product."""
    rows, length = values.shape
    for r in range(rows):
        for t in range(length):
            out[r, t] = values[r, t] if mask[r, t] else zero


def _masked_zero_counting(values: Any, mask: Any, zero: Any, out: Any) -> int:
    """:func:`_masked_zero`, and the number of valid positions whose value is not
    finite (x - x is NaN exactly for inf and NaN): the load's finiteness check in the
    same read."""
    rows, length = values.shape
    bad = 0
    for r in range(rows):
        for t in range(length):
            value = values[r, t]
            keep = mask[r, t]
            out[r, t] = value if keep else zero
            difference = value - value
            bad += keep & (difference != difference)
    return bad


def _masked_row_sums(values: Any, mask: Any, sums: Any, counts: Any) -> None:
    """Per row of [B, T] ``values``, over the valid tokens: sums [B] in float64 and
    counts [B] int64."""
    rows, length = mask.shape
    for r in range(rows):
        total = 0.0
        count = 0
        for t in range(length):
            if mask[r, t]:
                total += np.float64(values[r, t])
                count += 1
        sums[r] = total
        counts[r] = count


def _row_sums_and_differences(
    values: Any, others: Any, mask: Any, sums: Any, differences: Any, counts: Any
) -> None:
    """Per row of [B, T] ``values`` and ``others``, over the valid tokens: sums [B] of
    the values and differences [B] of ``values - others``, both in float64, and counts
    [B] int64 of the valid tokens."""
    rows, length = mask.shape
    for r in range(rows):
        total = 0.0
        difference = 0.0
        count = 0
        for t in range(length):
            if mask[r, t]:
                x = np.float64(values[r, t])
                total += x
                difference += x - np.float64(others[r, t])
                count += 1
        sums[r] = total
        differences[r] = difference
        counts[r] = count


def _advantage_row_sums(
    adv: Any, mask: Any, positive: Any, negative: Any, n_positive: Any, n_negative: Any
) -> None:
    """Per row of [B, T] ``adv`` over the valid tokens of ``mask``: positive and negative
    [B] float64 the sums of the positive and of the negative advantages (in float64),
    n_positive and n_negative [B] int64 how many there are. A NaN advantage goes into
    both sums and neither count, as ``clamp`` then ``sum`` would take it."""
    rows, length = mask.shape
    for r in range(rows):
        up = down = 0.0
        n_up = n_down = 0
        for t in range(length):
            if mask[r, t]:
                a = np.float64(adv[r, t])
                # selects, not branches: the signs of a row follow no pattern in general
                up += 0.0 if a <= 0.0 else a
                down += 0.0 if a >= 0.0 else a
                n_up += a > 0.0
                n_down += a < 0.0
        positive[r], negative[r] = up, down
        n_positive[r], n_negative[r] = n_up, n_down


def _masked_difference_counting(values: Any, others: Any, mask: Any, zero: Any, out: Any) -> int:
    """out = values - others where mask, else ``zero`` ([B, T], one dtype: the difference
    rounded once in it, as torch's), and the number of valid positions where it is
    not finite: a log-ratio, zeroed and checked in the read that makes it."""
    rows, length = values.shape
    bad = 0
    for r in range(rows):
        for t in range(length):
            value = values[r, t] - others[r, t]
            keep = mask[r, t]
            out[r, t] = value if keep else zero
            difference = value - value
            bad += keep & (difference != difference)
    return bad


def _first_valid(mask: Any, out: Any) -> None:
    """out [B] int64: the position of each row's first True entry of mask [B, T], 0 for
    a row without any (a right-padded row stops at its first entry)."""
    rows, length = mask.shape
    for r in range(rows):
        first = 0
        for t in range(length):
            if mask[r, t]:
                first = t
                break
        out[r] = first


def _any_true(mask: Any) -> bool:
    """Whether mask [B, T] holds a True entry, stopping at the first."""
    rows, length = mask.shape
    for r in range(rows):
        for t in range(length):
            if mask[r, t]:
                return True
    return False


def _row_counts(mask: Any, out: Any) -> None:
    """out [B] int64: each row's True entries of mask [B, T]."""
    rows, length = mask.shape
    for r in range(rows):
        count = 0
        for t in range(length):
            count += mask[r, t]
        out[r] = count


def jit(fn: Any, *, ieee_division: bool = False) -> Any:
    """``fn`` compiled by numba (machine code cached on disk where that is writable).

    ``ieee_division``: a float division by zero gives inf or NaN instead of raising
    ZeroDivisionError (numba's ``error_model="numpy"``). Python's check is a branch on
    every division, which keeps a loop out of SIMD lanes; a loop that selects away the
    quotients it must not use takes this."""
    import numba

    options: dict[str, Any] = {"nogil": True}
    if ieee_division:
        options["error_model"] = "numpy"
    try:
        return numba.njit(cache=True, **options)(fn)
    except RuntimeError:  # no writable cache directory: compile in every process
        return numba.njit(cache=False, **options)(fn)


#: the compiled loops that run on several threads cut a chunk's rows into this many
#: parts (fewer for fewer rows) whatever the number of threads, so that the numbers,
#: whose sums are added part by part, do not depend on it
ROW_PARTS = 8


def row_parts(rows: int) -> list[tuple[int, int]]:
    """(start, stop) of the parts of ``rows`` rows: ``min(ROW_PARTS, rows)`` contiguous
    ranges of sizes differing by at most one (one empty range for no rows)."""
    parts = max(1, min(ROW_PARTS, rows))
    edges = [rows * index // parts for index in range(parts + 1)]
    return list(itertools.pairwise(edges))


#: the threads the compiled loops' parts run on while :func:`own_threads` holds (torch
#: then runs on one); None: torch's own count
_THREADS: ContextVar[int | None] = ContextVar("ratioscope_kernel_threads", default=None)


def threads() -> int:
    """How many threads the compiled loops' parts run on: torch's count, or the count
    torch had when :func:`own_threads` set it to one."""
    kept = _THREADS.get()
    return kept if kept is not None else torch.get_num_threads()


@contextmanager
def own_threads() -> Iterator[None]:
    """While the block runs, torch on one thread and the compiled loops' parts on the
    threads torch had (:func:`threads`), where numba is :func:`available`.

    With the per-token work in compiled loops, torch's remaining operations are small:
    each wakes torch's OpenMP team, whose threads then spin for the next region on the
    cores the loops' threads need. On two cores the 1,024 x 4,096 benchmark took 10 ms
    less wall time and 20 ms less CPU so. Any thread count gives the same bits: the
    loops cut rows into the same parts on any number of threads, and torch's
    reductions over the small tensors left are under its grain size.
    """
    count = torch.get_num_threads()
    if count <= 1 or not available():
        yield
        return
    token = _THREADS.set(count)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(count)
        _THREADS.reset(token)


def map_row_parts(fn: Callable[[int, int], Part], rows: int) -> list[Part]:
    """``fn(start, stop)`` of each of :func:`row_parts`, in order, on up to
    :func:`threads` threads: the kernels release the GIL (``nogil``), so
    parts run at the same time. The parts are the same on any number of threads (a
    small file runs on one: :func:`ratioscope.analysis.threads.serial_if_small`)."""
    parts = row_parts(rows)
    return map_parts(lambda index: fn(*parts[index]), len(parts))


def map_any_parts(fn: Callable[[int, int], Part], rows: int, elements: int) -> list[Part]:
    """:func:`map_row_parts` for a kernel whose results come out the same wherever the
    rows are cut: integer counts, minima and maxima, each row's own outputs, or values
    left per row and token for the caller to add in file order. A small input (at most
    :data:`ratioscope.defaults.SERIAL_ELEMENTS` elements) is then one call over all the
    rows instead of eight (a small step pays the kernel's call once)."""
    from ratioscope.defaults import SERIAL_ELEMENTS

    if elements <= SERIAL_ELEMENTS:
        return [fn(0, rows)]
    return map_row_parts(fn, rows)


def map_parts(fn: Callable[[int], Part], parts: int) -> list[Part]:
    """``fn(0)``, ..., ``fn(parts - 1)``, in order, on up to :func:`threads` threads,
    the calling one among them (:func:`_shared_parts`). For kernels whose parts are not
    ranges of rows (:class:`ratioscope.functional.covariance_fused.FusedKernelPasses`
    splits its first passes by scope)."""
    workers = min(threads(), parts)
    if workers <= 1:
        return [fn(index) for index in range(parts)]
    return _shared_parts(fn, parts, workers)


def _shared_parts(fn: Callable[[int], Part], parts: int, workers: int) -> list[Part]:
    """:func:`map_parts` on ``workers`` threads, the calling one among them: each thread
    takes the next part not yet taken until none is left, so the calling thread works
    instead of only waiting, and a pool of ``workers - 1`` threads is woken once per
    call, not once per part."""
    results: list[Part | None] = [None] * parts
    claims = iter(range(parts))
    lock = threading.Lock()
    failed = threading.Event()

    def work() -> None:
        while not failed.is_set():
            with lock:
                index = next(claims, None)
            if index is None:
                return
            try:
                results[index] = fn(index)
            except BaseException:
                failed.set()  # the others stop at their next part
                raise

    helpers = [_pool(workers - 1).submit(work) for _ in range(workers - 1)]
    try:
        work()
    finally:
        for helper in helpers:
            # a helper that has not started finds nothing left: it is not waited for
            # (nor can a part that itself maps parts wait on a thread it occupies)
            if not helper.cancel():
                helper.result()
    return results  # type: ignore[return-value]  # every part ran: none is None


def map_rows(fn: Callable[[int, int], None], rows: int, elements: int) -> None:
    """``fn(start, stop)`` over ``rows`` rows whose outputs are each row's own (no sum
    across rows): one call over all of them when ``elements`` is at most
    :data:`ratioscope.defaults.SERIAL_ELEMENTS`, else :func:`map_row_parts`. The bits
    are the same either way; a small step then pays one kernel call, not eight."""
    map_any_parts(fn, rows, elements)


def map_balanced_rows(fn: Callable[[int, int], None], costs: np.ndarray, elements: int) -> None:
    """:func:`map_rows` with parts of about equal cost instead of equal rows: ``costs``
    [R] the work of each row (its FFT's points, say), where rows cost far apart, so
    that no thread is left with the one costly part while the other waits."""
    from ratioscope.defaults import SERIAL_ELEMENTS

    rows = len(costs)
    if elements <= SERIAL_ELEMENTS or rows <= 1:
        fn(0, rows)
        return
    parts = min(ROW_PARTS, rows)
    totals = np.cumsum(costs, dtype=np.float64)
    # the first row whose running total passes each multiple of a part's share
    cuts = np.searchsorted(totals, totals[-1] * np.arange(1, parts) / parts, side="right")
    edges = sorted({0, rows, *(int(cut) for cut in cuts)})
    ranges = list(itertools.pairwise(edges))
    map_parts(lambda index: fn(*ranges[index]), len(ranges))


@functools.cache
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ratioscope-rows")


# a forked child has none of the parent's threads: it makes its own pools
os.register_at_fork(after_in_child=_pool.cache_clear)


@functools.cache
def _compiled() -> SimpleNamespace:
    return SimpleNamespace(
        kalman_zero=jit(_kalman_zero),
        kalman_skip=jit(_kalman_skip),
        state_runs=jit(_state_runs),
        masked_zero=jit(_masked_zero),
        masked_zero_counting=jit(_masked_zero_counting),
        masked_difference_counting=jit(_masked_difference_counting),
        first_valid=jit(_first_valid),
        any_true=jit(_any_true),
        row_counts=jit(_row_counts),
        masked_row_sums=jit(_masked_row_sums),
        row_sums_and_differences=jit(_row_sums_and_differences),
        advantage_row_sums=jit(_advantage_row_sums),
    )


def kalman(
    z: np.ndarray,
    mask: np.ndarray,
    keep: np.ndarray,
    gains: np.ndarray,
    rho0: float,
    skip: bool,
    out: np.ndarray,
    zero_masked: bool = False,
) -> None:
    """Fill ``out`` [B, T] with the filtered states (:func:`_kalman_zero`, or
    :func:`_kalman_skip` when ``skip``; 0 at masked positions with ``zero_masked``)."""
    kernels = _compiled()
    kernel = kernels.kalman_skip if skip else kernels.kalman_zero
    rho0 = float(rho0)

    def part(start: int, stop: int) -> None:  # rows are independent: the same bits
        kernel(z[start:stop], mask[start:stop], keep, gains, rho0, zero_masked, out[start:stop])

    map_rows(part, z.shape[0], z.size)


def state_runs(
    values: np.ndarray, mask: np.ndarray, lower: float, upper: float, window: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Counts of :func:`_state_runs` for ``values``, ``mask`` [B, T].

    Returns:
        (lengths [B], state_counts [B, 3], run_counts [B, 3], histogram [3, T + 1],
        changes [B, ceil(T / window)], off [B, T // window]), all int64.
    """
    rows, length = values.shape
    lengths = np.zeros(rows, dtype=np.int64)
    state_counts = np.zeros((rows, 3), dtype=np.int64)
    run_counts = np.zeros((rows, 3), dtype=np.int64)
    changes = np.zeros((rows, -(-length // window)), dtype=np.int64)
    off = np.zeros((rows, length // window), dtype=np.int64)

    def part(start: int, stop: int) -> np.ndarray:
        histogram = np.zeros((3, length + 1), dtype=np.int64)  # pooled: one a part
        _compiled().state_runs(
            values[start:stop], mask[start:stop], float(lower), float(upper), int(window),
            lengths[start:stop], state_counts[start:stop], run_counts[start:stop],
            histogram, changes[start:stop], off[start:stop],
        )  # fmt: skip
        return histogram

    # the histogram's counts are integers: the same however the rows are cut
    histogram = np.sum(map_any_parts(part, rows, values.size), axis=0)
    return lengths, state_counts, run_counts, histogram, changes, off


def masked_zero(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A new [B, T] array: ``values`` where ``mask``, else 0 (:func:`_masked_zero`)."""
    out = np.empty_like(values)
    zero = values.dtype.type(0)

    def part(start: int, stop: int) -> None:
        _compiled().masked_zero(values[start:stop], mask[start:stop], zero, out[start:stop])

    map_rows(part, values.shape[0], values.size)
    return out


def masked_zero_counting(values: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`masked_zero` of float ``values``, and how many valid positions hold inf or
    NaN (:func:`_masked_zero_counting`)."""
    return _masked_counting("masked_zero_counting", (values,), mask)


def masked_difference_counting(
    values: np.ndarray, others: np.ndarray, mask: np.ndarray
) -> tuple[np.ndarray, int]:
    """``values - others`` where ``mask``, else 0, as a new [B, T] array of their dtype,
    and how many valid positions of it hold inf or NaN
    (:func:`_masked_difference_counting`)."""
    return _masked_counting("masked_difference_counting", (values, others), mask)


def _masked_counting(
    kernel: str, inputs: tuple[np.ndarray, ...], mask: np.ndarray
) -> tuple[np.ndarray, int]:
    """A new [B, T] array of the first input's dtype filled by the compiled ``kernel``
    (inputs, mask, zero, out by rows), and the sum of the counts it returns per part."""
    out = np.empty_like(inputs[0])
    zero = inputs[0].dtype.type(0)
    counts: list[int] = []  # one per part (list.append is atomic)
    run = getattr(_compiled(), kernel)

    def part(start: int, stop: int) -> None:
        rows = slice(start, stop)
        counts.append(run(*(array[rows] for array in inputs), mask[rows], zero, out[rows]))

    map_rows(part, out.shape[0], out.size)
    return out, sum(counts)


def first_valid(mask: Tensor) -> Tensor:
    """[B] int64 the position of each row's first True entry of a [B, T] bool mask, 0
    for a row without any: a compiled scan that stops at it for a bool CPU mask (a
    right-padded mask costs one entry a row), else torch's argmax."""
    if can_take(mask, dtypes=(torch.bool,)):
        out = np.empty(mask.shape[0], dtype=np.int64)
        _compiled().first_valid(mask.numpy(), out)
        return torch.from_numpy(out)
    return mask.to(torch.uint8).argmax(dim=1)  # 0 where a row has no True entry


def any_true(mask: Tensor) -> bool:
    """Whether a [B, T] bool mask holds a True entry (a compiled scan that stops at the
    first, for a bool CPU mask; else torch's ``any``)."""
    if can_take(mask, dtypes=(torch.bool,)):
        return bool(_compiled().any_true(mask.numpy()))
    return bool(mask.any())


def row_lengths(mask: Tensor) -> Tensor:
    """[B] int64 True entries per row of a [B, T] mask: :func:`row_counts` for a bool
    CPU mask, else the bytes of a bool mask summed (about 5x a bool sum), else a sum."""
    if can_take(mask, dtypes=(torch.bool,)):
        return torch.from_numpy(row_counts(mask.numpy()))
    if mask.dtype == torch.bool:
        return mask.view(torch.uint8).sum(dim=1)
    return mask.sum(dim=1)


def row_counts(mask: np.ndarray) -> np.ndarray:
    """[B] int64 True entries per row of a [B, T] bool array (a torch bool sum converts
    every element to int64 on the way, about 30x slower)."""
    out = np.empty(mask.shape[0], dtype=np.int64)

    def part(start: int, stop: int) -> None:
        _compiled().row_counts(mask[start:stop], out[start:stop])

    map_rows(part, mask.shape[0], mask.size)
    return out


def masked_row_sums(values: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sums [B] float64, valid tokens [B] int64) over the valid tokens of each row of
    [B, T] ``values`` (:func:`_masked_row_sums`; each row summed in order, so the bits
    do not depend on the threads)."""
    rows = mask.shape[0]
    sums = np.empty(rows, dtype=np.float64)
    counts = np.empty(rows, dtype=np.int64)

    def part(start: int, stop: int) -> None:
        _compiled().masked_row_sums(
            values[start:stop], mask[start:stop], sums[start:stop], counts[start:stop]
        )

    map_rows(part, rows, values.size)
    return sums, counts


def row_sums_and_differences(
    values: np.ndarray, others: np.ndarray, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sums [B] float64 of ``values``, sums [B] float64 of ``values - others``, valid
    tokens [B] int64) over the valid tokens of each row (:func:`_row_sums_and_differences`;
    rows apart are independent, so the bits do not depend on the threads)."""
    rows = mask.shape[0]
    sums = np.empty(rows, dtype=np.float64)
    differences = np.empty(rows, dtype=np.float64)
    counts = np.empty(rows, dtype=np.int64)

    def part(start: int, stop: int) -> None:
        _compiled().row_sums_and_differences(
            values[start:stop], others[start:stop], mask[start:stop],
            sums[start:stop], differences[start:stop], counts[start:stop],
        )  # fmt: skip

    map_rows(part, rows, values.size)
    return sums, differences, counts


def advantage_row_sums(
    adv: np.ndarray, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(positive [B] float64, negative [B] float64, n_positive [B] int64, n_negative
    [B] int64) of :func:`_advantage_row_sums` for [B, T] ``adv`` and ``mask``; rows
    apart are independent, so the bits do not depend on the threads."""
    rows = mask.shape[0]
    positive = np.empty(rows, dtype=np.float64)
    negative = np.empty(rows, dtype=np.float64)
    n_positive = np.empty(rows, dtype=np.int64)
    n_negative = np.empty(rows, dtype=np.int64)

    def part(start: int, stop: int) -> None:
        _compiled().advantage_row_sums(
            adv[start:stop], mask[start:stop], positive[start:stop], negative[start:stop],
            n_positive[start:stop], n_negative[start:stop],
        )  # fmt: skip

    map_rows(part, rows, adv.size)
    return positive, negative, n_positive, n_negative
