"""What ``analyze --device cuda`` asks of a GPU, counted on the CPU: kernel launches,
views, reads back to the host, waits for a result's size, copies to the device and the
bytes the launches move, by section and by function.

The analysis runs on the device emulated by ``tests/device_emulation.py`` (tensors that
say ``cuda:0``, so every CPU-only branch is skipped as on a GPU), with an
``OperationCount`` recording each operation on device tensors. On a GPU the eager path
pays a launch for each operation and a wait for each read, whatever the chunk's size,
and moves the bytes of each operation's arguments and results, so the counts bound how
much of the memory bandwidth a chunk can use: the last lines set one read of the
per-token tensors at a stated bandwidth against the bytes moved, and against those plus
the launches at a stated cost each (assumptions, printed; ``benchmarks/gpu_check.py``
measures the real thing).

On a GPU the Kalman filter, the ratios section's histogram pass, the summaries'
histograms, the vitals pass, the mismatch sums, the covariance passes, the spectra's
centring and variances, the LFR's band, the states' counts, the advantage sums, FPA's row
sums, TEPO's entropy quadrants, the PPO totals and FPA's class cells are Triton kernels
(``functional/_triton_kernels.py``),
which the emulated device cannot compile; here they are stand-ins that count the
launches those kernels make (the multiprocessors of an H100, 132, decide the Kalman
filter's chunks) and the bytes they read and write once, and compute their results with
the CPU's loops. ``--no-kernels`` counts the tensor code those kernels replace, the path
a GPU takes without Triton.

    python benchmarks/device_ops.py                  # bench_analyze.py's 1,024 x 4,096 dump
    python benchmarks/device_ops.py DUMP --chunk-elements 16777216 --top 30
    python benchmarks/device_ops.py --no-kernels     # the eager tensor path throughout
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: the benchmark's dump, as ``bench_analyze.py`` writes it
DEFAULT_DIR = Path("/tmp/ratioscope-bench")
#: an H100 SXM's HBM3 bandwidth (the data sheet's), bytes/s
H100_BANDWIDTH = 3.35e12
#: host time of one eager kernel launch on a GPU, seconds (a typical order of magnitude)
LAUNCH_SECONDS = 5e-6
#: an H100 SXM's streaming multiprocessors: how the Kalman kernel sizes its chunks
H100_MULTIPROCESSORS = 132
#: the table's columns and their widths
WIDTHS = {"launches": 9, "views": 7, "reads": 7, "waits": 7, "uploads": 8, "moved": 10}
#: the table's headers, where they differ from the kinds' names
HEADERS = {"moved": "MB moved"}


def _on_path() -> None:
    """benchmarks/ (make_synthetic, bench_analyze), tests/ (device_emulation, imported as
    a module of its own: a package named ``tests`` that another project installs, verl's,
    would shadow the checkout's tests/, which is no package) and the checkout (its
    ratioscope, installed or not) on ``sys.path``."""
    for folder in (HERE, ROOT / "tests", ROOT):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))


def count_operations(path: Path, chunk_elements: int | None = None, kernels: bool = True):
    """``ratioscope.analyze(path, device="cuda")`` on the emulated device, counted; with
    ``kernels``, the Triton kernels as :func:`kernel_stand_ins`.

    Returns:
        (the ``OperationCount`` of tests/device_emulation.py, the report, the chunk's
        elements: ``chunk_elements``, or the device's default for the host's free memory)
    """
    _on_path()
    from device_emulation import DEVICE, OperationCount, resolve_device, second_device

    from ratioscope.analysis import pipeline
    from ratioscope.analysis.device import chunk_elements_for

    resolve = pipeline.resolve_device
    pipeline.resolve_device = resolve_device  # type: ignore[assignment]
    count = OperationCount()
    stand_ins = kernel_stand_ins(count) if kernels else contextlib.nullcontext()
    try:
        with second_device(count), stand_ins:
            chunk = chunk_elements_for(DEVICE, chunk_elements)
            report = pipeline.analyze(path, device="cuda", chunk_elements=chunk)
    finally:
        pipeline.resolve_device = resolve  # type: ignore[assignment]
    return count, report, chunk


@contextlib.contextmanager
def kernel_stand_ins(count: Any) -> Iterator[None]:
    """Inside, ``functional._triton_kernels`` takes the emulated device's tensors and
    launches stand-ins of its kernels: each launch is counted once
    (``OperationCount.launch``) with the bytes the kernel reads and writes, and computes
    its results with the CPU's numba loops on the tensors' memory."""
    from ratioscope.functional import _triton_kernels

    saved = {
        name: getattr(_triton_kernels, name)
        for name in ("can_take", "_kernels", "_multiprocessors")
    }
    fakes = SimpleNamespace(**{name: _Launcher(count, body) for name, body in stand_ins().items()})
    _triton_kernels.can_take = lambda *tensors: True  # type: ignore[assignment]
    _triton_kernels._kernels = lambda: fakes  # type: ignore[assignment]
    _triton_kernels._multiprocessors = lambda device: H100_MULTIPROCESSORS  # type: ignore[assignment]
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(_triton_kernels, name, value)


def stand_ins() -> dict[str, Any]:
    """Each kernel of ``functional/_triton_source.py`` by name, and the function that
    stands in for it (a test checks that every kernel has one)."""
    return {
        "kalman_scan": _kalman_scan, "chunk_starts": _chunk_starts, "ratio_rows": _ratio_rows,
        "histogram_moments": _histogram_moments, "vitals_rows": _vitals_rows,
        "mismatch_rows": _mismatch_rows, "mismatch_terms": _mismatch_terms,
        "covariance_rows": _covariance_rows, "covariance_statistics": _covariance_statistics,
        "lfr_band": _lfr_band, "centre_rows": _centre_rows, "advantage_rows": _advantage_rows,
        "difference_rows": _difference_rows, "state_runs": _state_runs,
        "entropy_quadrants": _entropy_quadrants, "aggregation_rows": _aggregation_rows,
        "class_cells": _class_cells,
    }  # fmt: skip


class _Launcher:
    """``kernel[grid](...)`` of a stand-in: counts the launch and runs ``body`` on the
    arguments' CPU memory, outside the emulated device's checks."""

    def __init__(self, count: Any, body: Any) -> None:
        self.count, self.body = count, body

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **flags: Any) -> None:
            import torch
            from device_emulation import untag

            host = [untag(a) for a in args]
            with torch._C.DisableTorchFunction():
                moved = self.body(*host, **flags)
            self.count.launch(moved)

        return launch


def _kalman_scan(
    z, mask, keep, gains, initial, start, offset, out, end_keep, end_state, rows, length,
    chunk_len, n_chunks, **flags,
) -> int:  # fmt: skip
    """The Kalman kernel's pass: the whole filter in the pass that writes rho (the first
    pass of rows in chunks only reads); its bytes: z and the mask read, rho written."""
    from ratioscope.functional import _kernels

    if flags["WRITE_OUT"]:
        _kernels.kalman(
            z.numpy(), mask.numpy().view(bool), keep.numpy(), gains.numpy(),
            float(initial[0]), flags["SKIP"], out.numpy(), flags["ZERO_MASKED"],
        )  # fmt: skip
    return z.nbytes + mask.nbytes + (out.nbytes if flags["WRITE_OUT"] else 0)


def _chunk_starts(end_keep, end_state, initial, start, rows, n_chunks, **flags) -> int:
    """The join of the chunks' ends (computed by :func:`_kalman_scan`'s writing pass)."""
    return end_keep.nbytes + end_state.nbytes + start.nbytes


def _ratio_rows(
    signal, adv, mask, bounds, counts, partial, row_sums, clipped, rows, length, **flags
) -> int:  # fmt: skip
    """The ratios section's pass: bins, moments and PPO sums by the numba loop; its
    bytes: the signal, the mask and the advantages read once."""
    import numpy as np

    from ratioscope.functional import _ratio_kernels

    histogram = np.zeros(counts.shape[0], dtype=np.int64)
    summary = np.zeros(5)
    has_adv = flags["HAS_ADV"]
    sums = row_sums.numpy() if has_adv else np.zeros((rows, 2))
    zeroed = clipped.numpy() if has_adv else np.zeros(rows, dtype=np.int64)
    low, high = bounds.tolist()
    _ratio_kernels.histogram_ppo_rows(
        signal.numpy(), adv.numpy(), mask.numpy().view(bool), has_adv, low, high, histogram,
        summary, sums, zeroed,
    )  # fmt: skip
    counts += torch_from(histogram).to(counts.dtype)
    partial.zero_()
    partial[:1] = torch_from(summary)
    partial[1:, 3], partial[1:, 4] = float("inf"), float("-inf")  # the other programs: empty
    return signal.nbytes + mask.nbytes + (adv.nbytes if has_adv else 0)


def _histogram_moments(values, counts, partial, sums, n, span, **flags) -> int:
    """A histogram's pass: the bins, sums and moments by the tensor code on the CPU; its
    bytes: the values read once."""
    import torch

    from ratioscope.functional import histogram as bins
    from ratioscope.functional.moments import moment_sums

    found, found_sums = bins.histogram_sums(values[:n])
    counts += found.to(counts.dtype)
    if flags["HAS_SUMS"]:
        sums += found_sums
    partial.zero_()
    partial[0] = torch.tensor([float(v) for v in moment_sums(values[:n])], dtype=torch.float64)
    partial[1:, 3], partial[1:, 4] = float("inf"), float("-inf")  # the other programs: empty
    return values.nbytes


def _vitals_rows(
    entropy, old, adv, logp, mask, correct, counts, slots, row_abs, row_tokens, rows, length,
    **flags,
) -> int:  # fmt: skip
    """The vitals' pass by the numba loop, its one part's slots in the first program's;
    its bytes: each present input and the mask read once."""
    import numpy as np

    from ratioscope.functional import _vitals_kernels

    sums = np.zeros(_vitals_kernels.SLOTS)
    histogram = np.zeros(counts.shape[0], dtype=np.int64)
    valid = mask.numpy().view(bool)
    present = [flags[f] for f in ("HAS_ENTROPY", "HAS_OLD", "HAS_ADV", "HAS_PAIRS")]
    arrays = [t.numpy() for t in (entropy, old, adv, logp)]
    right = correct.numpy().view(bool) if flags["HAS_CORRECT"] else np.zeros(rows, dtype=bool)
    _vitals_kernels.vitals_rows(
        *arrays, valid, right, *present, flags["HAS_CORRECT"], histogram, sums,
        row_abs.numpy(), row_tokens.numpy(), np.empty(valid.size),
    )  # fmt: skip
    counts += torch_from(histogram).to(counts.dtype)
    slots.zero_()
    slots[0] = torch_from(sums)
    slots[1:, 3], slots[1:, 4] = float("inf"), float("-inf")  # the other programs: empty
    read = [t for t, on in zip((entropy, old, adv, logp), present, strict=True) if on]
    return mask.nbytes + sum(t.nbytes for t in read)


def _mismatch_rows(z, mask, row_sums, tops, rows, length, **flags) -> int:
    """The mismatch sums' first pass by the numba loop, its largest z the first
    program's; its bytes: z and the mask read once."""
    from ratioscope.functional import _ratio_kernels

    tops.fill_(float("-inf"))
    tops[0] = _ratio_kernels.mismatch_rows(z.numpy(), mask.numpy().view(bool), row_sums.numpy())
    return z.nbytes + mask.nbytes


def _mismatch_terms(z, mask, tops, bounds, terms, rows, length, programs, **flags) -> int:
    """The second pass by the numba loop, its sums the first program's; its bytes: z and
    the mask read again."""
    import numpy as np

    from ratioscope.functional import _ratio_kernels

    part = np.zeros(10)
    _ratio_kernels.mismatch_terms(
        z.numpy(), mask.numpy().view(bool), float(bounds[0]), float(tops.max()), part
    )
    terms.zero_()
    terms[0] = torch_from(part)
    return z.nbytes + mask.nbytes


def _per_row(table, scope) -> Any:
    """The numba passes' per-scope arguments with a scope a row: each row's entry of
    the kernels' table [S, 6] (means [B, 3], 2 sigma^2 [B], flat [B], N / sum w [B])."""
    import numpy as np

    entry = table.numpy()[scope.numpy()] if table.numel() > 1 else np.zeros((scope.numel(), 6))
    return (
        np.ascontiguousarray(entry[:, :3]), np.ascontiguousarray(entry[:, 3]),
        entry[:, 4] != 0.0, np.ascontiguousarray(entry[:, 5]),
    )  # fmt: skip


def _covariance_rows(
    logp, adv, mask, z, scope, table, constants, row_sums, rows, length, **flags
) -> int:  # fmt: skip
    """A covariance pass (0-3) by the numba loops, with a scope a row (Clip-Cov's
    eligible tokens all in the first row's sums: only their total is read); its bytes:
    log pi, A and the mask read once (pass 1 the log-ratio too), the row sums written."""
    import numpy as np

    from ratioscope.functional import _covariance_kernels as numba_passes

    lp, a, valid = logp.numpy(), adv.numpy(), mask.numpy().view(bool)
    each = np.arange(rows, dtype=np.int64)
    owner = np.zeros(rows, dtype=np.int64)
    out = row_sums.numpy()
    out[:] = 0.0
    means, kernel, flat, _ = _per_row(table, scope)
    index = flags["PASS"]
    if index == 0:
        numba_passes.sums(lp, a, valid, each, out, np.zeros(3))
    elif index == 1:
        sums = np.zeros((rows, 2))
        eligible = numba_passes.covariance_sums(
            lp, a, valid, z.numpy(), each, owner, 0, means, constants.numpy()[:2], sums,
            flags["NARROW"], np.ascontiguousarray(constants.numpy()[2:6]),
        )  # fmt: skip
        out[:, :2] = sums
        out[0, 2] = eligible
    elif index == 2:
        spread = np.zeros(rows)
        numba_passes.spread(lp, a, valid, each, owner, 0, means, spread)
        out[:, 0] = spread
    else:
        w_sums = np.zeros(rows)
        numba_passes.weight_sums(lp, a, valid, each, owner, 0, means, kernel, flat, w_sums)
        out[:, 0] = w_sums
    return (
        logp.nbytes + adv.nbytes + mask.nbytes + row_sums.nbytes + (z.nbytes if index == 1 else 0)
    )


def _covariance_statistics(
    logp, adv, mask, scope, table, constants, counts, sums, slots, row_sums, rows, length,
    **flags,
) -> int:  # fmt: skip
    """The covariance statistics by the numba loop, with a scope a row, the moments and
    sums in the first program's slots; its bytes: log pi, A and the mask read once, the
    row sums written."""
    import numpy as np

    from ratioscope.functional import _covariance_kernels as numba_passes
    from ratioscope.functional import histogram as bins

    lp, a, valid = logp.numpy(), adv.numpy(), mask.numpy().view(bool)
    means, kernel, flat, factor = _per_row(table, scope)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_factor = np.log(factor)
    n, weight_bins = bins.NUM_BINS, flags["WEIGHT_BINS"]
    found = [np.zeros(n, dtype=np.int64) for _ in range(3)] + [np.zeros(weight_bins, np.int64)]
    extremes = np.array([[np.inf, -np.inf]] * 3)
    shifts = np.array([0.0, 1.0, 1.0])  # about where c, w and w~ lie
    token_bins = np.empty(valid.size, dtype=np.int32)
    token_c = np.empty(valid.size)
    row_stats = np.empty((rows, numba_passes.ROW_FIELDS))
    tokens = numba_passes.statistics(
        lp, a, valid, np.arange(rows, dtype=np.int64), means, kernel, flat, factor,
        log_factor, flags["NARROW"], np.ascontiguousarray(constants.numpy()[6:8]), shifts,
        *found, extremes, token_bins, token_c, row_stats,
    )  # fmt: skip
    c_sums, moments = np.zeros(n), np.zeros((3, 3))
    mass, below = np.zeros(3), np.zeros(2, dtype=np.int64)
    numba_passes.fold_statistics(
        token_bins, token_c, tokens, row_stats, c_sums, moments, mass, below
    )
    counts += torch_from(np.concatenate(found)).to(counts.dtype)
    sums += torch_from(c_sums)
    slots.zero_()
    for q in range(3):
        total, square = moments[q, 1], moments[q, 2]
        mean = total / tokens if tokens else 0.0
        slots[0, 5 * q : 5 * q + 5] = torch_from(
            np.array([tokens, shifts[q] + mean, square - total * mean, *extremes[q]])
        )
        slots[1:, 5 * q + 3], slots[1:, 5 * q + 4] = float("inf"), float("-inf")
    slots[0, 15:18] = torch_from(mass)
    slots[0, 18:20] = torch_from(below.astype(np.float64))
    row_sums.copy_(torch_from(row_stats[:, :3].copy()))
    return logp.nbytes + adv.nbytes + mask.nbytes + row_sums.nbytes


def _lfr_band(auto, lengths, widths, band, energy, stride, **flags) -> int:
    """The LFR's band by the numba loop; its bytes: each row's L lags read once."""
    import numpy as np

    from ratioscope.functional import _ratio_kernels

    sizes, rows = lengths.numpy(), lengths.numel()
    lags = np.lib.stride_tricks.as_strided(
        auto.numpy(), shape=(rows, max(int(sizes.max(initial=0)), 1)), strides=(8 * stride, 8)
    )
    table = np.empty(max(int(sizes.max(initial=1)), 1))
    _ratio_kernels.lfr_band(
        lags,
        np.arange(rows),
        sizes,
        widths.numpy().astype(np.int64),
        table,
        band.numpy(),
        energy.numpy(),
    )
    return 8 * int(sizes.sum()) + lengths.nbytes + widths.nbytes + band.nbytes + energy.nbytes


def _centre_rows(values, lengths, out, stats, length, window, **flags) -> int:
    """The packed rows centred and measured by the numba loop; its bytes: each row's
    valid tokens read three times (mean, centred values, windows), the rows written."""
    import numpy as np

    from ratioscope.functional import _ratio_kernels

    sizes, rows = lengths.numpy(), lengths.numel()
    prefix = np.arange(length)[None, :] < sizes[:, None]
    energetic = np.zeros(rows, dtype=bool)
    variances = np.empty((rows, 2))
    _ratio_kernels.centre_rows(
        values.numpy(), prefix, np.arange(rows), flags["RATIO"], window, out.numpy(),
        energetic, variances,
    )  # fmt: skip
    stats[:, :2] = torch_from(variances)
    stats[:, 2] = torch_from(energetic.astype(np.float64))
    read = 3 * int(sizes.sum()) * values.element_size()
    return read + lengths.nbytes + out.nbytes + stats.nbytes


def _advantage_rows(adv, mask, sums, sign_counts, rows, length, **flags) -> int:
    """The advantage sums by the numba loop; its bytes: the advantages and the mask
    read once."""
    import numpy as np

    from ratioscope.functional import _kernels

    found = _kernels.advantage_row_sums(adv.numpy(), mask.numpy().view(bool))
    sums.copy_(torch_from(np.stack(found[:2])))
    sign_counts.copy_(torch_from(np.stack(found[2:])))
    return adv.nbytes + mask.nbytes + sums.nbytes + sign_counts.nbytes


def _aggregation_rows(
    clipped, first, second, lengths, totals, rows, first_stride, second_stride, **flags
) -> int:
    """The PPO totals by numpy, as the kernel sums them (its order aside); its bytes: the
    four [B] columns read once."""
    import numpy as np

    n, a, b = lengths.numpy(), first.numpy(), second.numpy()  # the columns' own strides
    has = n > 0
    divisor = np.maximum(n, 1)
    found = [
        clipped.numpy().sum(), n.sum(), has.sum(), a.sum(),
        np.where(has, a / divisor, 0.0).sum(), b.sum(), np.where(has, b / divisor, 0.0).sum(),
    ]  # fmt: skip
    totals.copy_(torch_from(np.array(found, dtype=np.float64)))
    return clipped.nbytes + lengths.nbytes + 8 * rows * 2 + totals.nbytes


def _class_cells(values, kept, counts, table, classes, length, **flags) -> int:
    """The cells' counts and moments by the tensor code on the CPU; its bytes: a cell's
    row and mask read twice (the mean, then the deviations), its moments written."""
    import torch

    from ratioscope.functional import device_histogram

    keep = kept.view(torch.bool).view(values.shape[0], classes, length)
    found_counts, found_table = device_histogram.class_cells(values, keep, flags["LOG"])
    counts.copy_(found_counts)
    table.copy_(found_table)
    return 2 * (values.nbytes * classes + kept.nbytes) + table.nbytes


def _difference_rows(logp, ref, mask, sums, rows, length, **flags) -> int:
    """FPA's row sums by the numba loop; its bytes: both log-probs and the mask read
    once."""
    import numpy as np

    from ratioscope.functional import _kernels

    current, difference, counts = _kernels.row_sums_and_differences(
        logp.numpy(), ref.numpy(), mask.numpy().view(bool)
    )
    sums.copy_(torch_from(np.stack([counts.astype(np.float64), current, difference])))
    return logp.nbytes + ref.nbytes + mask.nbytes + sums.nbytes


def _state_runs(
    values, mask, bounds, state_counts, histogram, changes, off, length, window, n_changes,
    n_off, **flags,
) -> int:  # fmt: skip
    """The states' counts by the numba loop; its bytes: the signal and the mask read
    once, the counts written."""
    from ratioscope.functional import _kernels

    lower, upper = bounds.tolist()
    _, tokens, runs, found, found_changes, found_off = _kernels.state_runs(
        values.numpy(), mask.numpy().view(bool), lower, upper, window
    )
    state_counts[:, :3], state_counts[:, 3:] = torch_from(tokens), torch_from(runs)
    histogram += torch_from(found)
    changes += torch_from(found_changes).reshape(-1)
    off += torch_from(found_off).reshape(-1)
    written = state_counts.nbytes + histogram.nbytes + changes.nbytes + off.nbytes
    return values.nbytes + mask.nbytes + written


def _entropy_quadrants(
    adv, entropy, old, mask, quadrants, kl_rows, rows, length, **flags
) -> int:  # fmt: skip
    """TEPO's quadrants by the numba loop; its bytes: the three inputs and the mask read
    once."""
    import numpy as np

    from ratioscope.functional import _ratio_kernels

    counts = np.zeros(6, dtype=np.int64)
    _ratio_kernels.entropy_quadrants(
        adv.numpy(), entropy.numpy(), old.numpy(), mask.numpy().view(bool), counts,
        kl_rows.numpy(),
    )  # fmt: skip
    quadrants[:6] += torch_from(counts)  # the buffer's first six (its rows follow)
    return adv.nbytes + entropy.nbytes + old.nbytes + mask.nbytes + kl_rows.nbytes


def torch_from(array: Any) -> Any:
    import torch

    return torch.from_numpy(array)


def by_section(count) -> dict[str, dict[str, int]]:
    """{section: {kind: operations}} for the kinds of :data:`WIDTHS` (``moved``: bytes),
    sections in decreasing order of launches; the ``ratioscope.`` prefix dropped."""
    table: dict[str, dict[str, int]] = collections.defaultdict(lambda: dict.fromkeys(WIDTHS, 0))
    for kind in WIDTHS:
        for (section, _), n in getattr(count, kind).items():
            table[section.removeprefix("ratioscope.")][kind] += n
    return dict(sorted(table.items(), key=lambda item: -item[1]["launches"]))


def per_token_bytes(path: Path) -> tuple[int, int]:
    """(bytes of the dump's [B, T] tensors, valid tokens)."""
    from bench_analyze import per_token_fields

    import ratioscope

    batch = ratioscope.load(path)
    total = sum(getattr(batch, name).nbytes for name in per_token_fields(batch))
    return total, int(batch.mask.sum())


def bandwidth_bounds(
    tensor_bytes: int, moved: int, launches: int, bandwidth: float, launch_s: float
) -> tuple[float, float, float]:
    """(floor, traffic bound, bound) of the share of ``bandwidth`` a run can reach: the
    floor reads the per-token tensors once (``tensor_bytes`` / bandwidth); the launches
    move ``moved`` bytes, so even free launches reach at most floor / (moved /
    bandwidth); each launch costing ``launch_s`` on top, floor / (moved / bandwidth +
    launches x launch_s)."""
    floor = tensor_bytes / bandwidth
    traffic = moved / bandwidth
    return floor, floor / traffic, floor / (traffic + launches * launch_s)


def _row(name: str, row: dict[str, int]) -> str:
    cells = (
        f"{row[kind] / 1e6 if kind == 'moved' else row[kind]:>{width},.0f}"
        for kind, width in WIDTHS.items()
    )
    return f"{name:<28} " + " ".join(cells)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump", type=Path, nargs="?", help="default: bench_analyze.py's dump")
    parser.add_argument("--batch", "-B", type=int, default=1024)
    parser.add_argument("--tokens", "-T", type=int, default=4096)
    parser.add_argument(
        "--chunk-elements", type=int, default=None,
        help="default: analyze's on a GPU with the host's free memory",
    )  # fmt: skip
    parser.add_argument("--top", type=int, default=20, help="functions listed by launches")
    parser.add_argument("--bandwidth", type=float, default=H100_BANDWIDTH, help="bytes/s")
    parser.add_argument("--launch-us", type=float, default=LAUNCH_SECONDS * 1e6)
    parser.add_argument(
        "--no-kernels", dest="kernels", action="store_false",
        help="the tensor code where a GPU with Triton runs its kernels",
    )  # fmt: skip
    args = parser.parse_args(argv)
    _on_path()
    from make_synthetic import benchmark_dump

    path = args.dump or benchmark_dump(DEFAULT_DIR, args.batch, args.tokens)
    tensor_bytes, valid = per_token_bytes(path)
    start = time.perf_counter()
    count, _, chunk = count_operations(path, args.chunk_elements, args.kernels)
    kernels = "the Triton kernels" if args.kernels else "no Triton kernels (--no-kernels)"
    print(
        f"{path.name}: {valid:,} valid tokens, per-token tensors {tensor_bytes / 1e6:.0f} MB, "
        f"chunks of {chunk:,} elements, {kernels}; counted in {time.perf_counter() - start:.1f} s; "
        f"peak device memory {count.peak_bytes / 1e6:,.0f} MB, "
        f"{count.peak_bytes / chunk:.0f} bytes a chunk element"
    )
    table = by_section(count)
    headers = (f"{HEADERS.get(kind, kind):>{width}}" for kind, width in WIDTHS.items())
    print(f"{'section':<28} " + " ".join(headers))
    totals = dict.fromkeys(WIDTHS, 0)
    for section, row in table.items():
        print(_row(section, row))
        for kind, n in row.items():
            totals[kind] += n
    print(_row("total", totals))
    print(f"\nthe {args.top} functions with the most launches (section / function):")
    for (section, function), n in count.launches.most_common(args.top):
        short = section.removeprefix("ratioscope.")
        print(f"{n:>7,}  {short} / {function.removeprefix('ratioscope.')}")
    moved, launches = totals["moved"], totals["launches"]
    floor, traffic_share, share = bandwidth_bounds(
        tensor_bytes, moved, launches, args.bandwidth, args.launch_us * 1e-6
    )
    print(
        f"\none read of the per-token tensors at {args.bandwidth / 1e12:.2f} TB/s: "
        f"{floor * 1e6:,.0f} us. The launches move {moved / 1e6:,.1f} MB, "
        f"{moved / tensor_bytes:.0f} times those tensors: at most {traffic_share:.2%} of the "
        f"bandwidth were launches free; {launches:,} launches at {args.launch_us:g} us "
        f"besides: at most {share:.2%} (assumed costs; benchmarks/gpu_check.py measures "
        "the real share)"
    )


if __name__ == "__main__":
    main()
