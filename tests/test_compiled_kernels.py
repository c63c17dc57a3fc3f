"""The compiled (numba) kernels against the torch implementations they replace on the CPU.

Token-state counts must be identical (integers and the rates made from them); the Kalman
kernel must agree with the float64 loop within the tolerance the scan is held to. Inputs
include masked tokens (NaN there), holes, left padding, empty and length-1 rows, and
lengths that are not a multiple of the window or of the scan chunk.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from documents import assert_documents_close

from ratioscope.errors import UsageError
from ratioscope.functional import _kernels
from ratioscope.functional.kalman import DEFAULT_CHUNK, kalman_filter, kalman_filter_loop
from ratioscope.functional.token_stats import (
    DEFAULT_ON_BAND,
    EXACT_ON_BAND,
    signal_statistics,
)

pytest.importorskip("numba")
#: with numba installed but switched off (RATIOSCOPE_DISABLE_NUMBA) there is nothing to compare
pytestmark = pytest.mark.skipif(not _kernels.available(), reason="compiled kernels disabled")

ATOL = 1e-6  # docs/performance.md: <= 1e-6 abs vs a float64 loop (float32 input)


def masks(rows: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    """Right-padded, left-padded and holed masks with an empty, a full and a length-1 row."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, length + 1, (rows,), generator=gen)
    lengths[0], lengths[1], lengths[2] = 0, length, 1
    positions = torch.arange(length).unsqueeze(0)
    right = positions < lengths.unsqueeze(1)
    left = positions >= (length - lengths).unsqueeze(1)
    holes = right & (torch.rand(rows, length, generator=gen) >= 0.2)
    return {"right": right, "left": left, "holes": holes}


def signal(rows: int, length: int, seed: int, kind: str) -> torch.Tensor:
    """Raw-like (frequent exact zeros, sign changes every few tokens) or smooth values."""
    gen = torch.Generator().manual_seed(seed)
    if kind == "raw":
        z = 1e-3 * torch.randn(rows, length, generator=gen, dtype=torch.float64)
        return torch.where(torch.rand(rows, length, generator=gen) < 0.3, 0.0, z)
    steps = 2e-4 * torch.randn(rows, length, generator=gen, dtype=torch.float64)
    return steps.cumsum(1)


def assert_identical(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


# --------------------------------------------------------------------------- token states


@pytest.mark.parametrize("layout", ["right", "left", "holes"])
@pytest.mark.parametrize("kind", ["raw", "smooth"])
@pytest.mark.parametrize("window", [1, 2, 7, 50, 200])
def test_state_statistics_equal_torch(layout, kind, window):
    rows, length = 24, 131  # 131: not a multiple of any window here
    z = signal(rows, length, 3, kind).float()
    mask = masks(rows, length, 4)[layout]
    z = z.masked_fill(~mask, math.nan)  # masked values must never be read
    for band in (EXACT_ON_BAND, DEFAULT_ON_BAND, 0.0):
        got = signal_statistics(z, mask, on_band=band, window=window, backend="compiled")
        ref = signal_statistics(z, mask, on_band=band, window=window, backend="torch")
        for name in ("lengths", "state_counts", "switch_frequency", "window_frequency"):
            assert_identical(getattr(got, name), getattr(ref, name))
        for name in ("run_count", "token_count", "mean_per_sequence", "histogram"):
            assert_identical(getattr(got.runs, name), getattr(ref.runs, name))
        # the signal part: one compiled pass per row against the packed tensor code
        assert_spectral_close(got, ref)


def assert_spectral_close(got, ref) -> None:
    """The signal-value statistics within docs/performance.md's tolerance: sums in
    another order, 1e-12 relative (variances of O(1) values also within 1e-28; the
    periodogram's error measured against the row's largest power, since a frequency
    with almost no power keeps the rounding of the large terms that cancel there)."""
    for name in ("global_variance", "local_variance"):
        # atol: a constant row's mean, rounded, leaves a variance of ~eps^2 instead of 0
        torch.testing.assert_close(
            getattr(got, name), getattr(ref, name), rtol=1e-12, atol=1e-28, equal_nan=True
        )
    scale = ref.periodogram.nan_to_num(0.0).abs().amax(1, keepdim=True).clamp(min=1e-300)
    torch.testing.assert_close(
        got.periodogram / scale, ref.periodogram / scale, rtol=0, atol=1e-12, equal_nan=True
    )
    # the LFR band's sines: an exactly reduced angle vs a rounded angle times m w
    torch.testing.assert_close(
        got.low_frequency_ratio, ref.low_frequency_ratio, rtol=0, atol=1e-12, equal_nan=True
    )


@pytest.mark.parametrize("layout", ["right", "left", "holes"])
@pytest.mark.parametrize("space", ["log", "ratio"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_spectral_part_equals_torch(layout, space, dtype):
    rows, length = 40, 300  # FFT buckets of 256, 512 and 1,024 points
    gen = torch.Generator().manual_seed(7)
    z = (signal(rows, length, 5, "smooth") + 1e-3 * torch.randn(rows, length, generator=gen)).to(
        dtype
    )
    z[3] = 0.25  # a constant row: no energy, NaN LFR and periodogram, zero variances
    z[4, ::2] = 0.5  # a row of two values
    mask = masks(rows, length, 6)[layout]
    for window, n_freqs, cutoff in ((50, 64, 0.1), (7, 16, 0.3), (1, 1, 0.0)):
        got = signal_statistics(
            z.masked_fill(~mask, math.nan), mask, window=window, n_freqs=n_freqs,
            cutoff=cutoff, space=space, backend="compiled",
        )  # fmt: skip
        ref = signal_statistics(
            z, mask, window=window, n_freqs=n_freqs, cutoff=cutoff, space=space, backend="torch"
        )
        assert_spectral_close(got, ref)
        assert not got.periodogram[3].isfinite().any() and got.global_variance[3] < 1e-20


def test_fft_blocks_cover_each_size_run_in_cache_sized_blocks(monkeypatch):
    import numpy as np

    from ratioscope.functional import token_stats

    monkeypatch.setattr(token_stats, "FFT_BLOCK_POINTS", 1000)
    sizes = np.array([256, 256, 256, 256, 256, 512, 512, 2048, 2048])
    blocks = token_stats._fft_blocks(sizes)
    # 3 rows of 256 points fit in 1,000, 1 of 512, and a row of 2,048 is a block alone
    assert blocks == [(0, 3), (3, 5), (5, 6), (6, 7), (7, 8), (8, 9)]
    assert token_stats._fft_blocks(np.array([], dtype=np.int64)) == []


def test_spectra_are_the_same_bits_in_blocks_of_any_size(monkeypatch):
    """Each row's transform is its own: rows sorted by FFT size and cut into blocks of one
    row or of every row of a size give the same bits."""
    from ratioscope.functional import token_stats

    rows, length = 30, 300
    gen = torch.Generator().manual_seed(11)
    z = signal(rows, length, 5, "smooth") + 1e-3 * torch.randn(rows, length, generator=gen)
    mask = masks(rows, length, 6)["holes"]
    results = []
    for points in (1, 1 << 40):
        monkeypatch.setattr(token_stats, "FFT_BLOCK_POINTS", points)
        results.append(signal_statistics(z, mask, n_freqs=16, backend="compiled"))
    for name in ("low_frequency_ratio", "periodogram", "global_variance", "local_variance"):
        torch.testing.assert_close(
            getattr(results[0], name), getattr(results[1], name), rtol=0, atol=0, equal_nan=True
        )


def test_spectral_part_against_a_plain_loop():
    # the variances written out over one row's valid values, independent of both backends
    z = torch.tensor([[0.3, math.nan, -0.2, 0.4, 0.4, 1.0, -0.7, 0.1]])
    mask = ~z.isnan()
    got = signal_statistics(z, mask, window=3, backend="compiled")
    values = [v for v in z[0].tolist() if not math.isnan(v)]

    def variance(xs):
        mean = sum(xs) / len(xs)
        return sum((x - mean) ** 2 for x in xs) / len(xs)

    windows = [values[0:3], values[3:6], values[6:]]  # the last, one token, is left out
    assert got.global_variance.item() == pytest.approx(variance(values), rel=1e-14)
    expected_local = (variance(windows[0]) + variance(windows[1])) / 2
    assert got.local_variance.item() == pytest.approx(expected_local, rel=1e-14)
    single = signal_statistics(torch.tensor([[2.0]]), None, backend="compiled")
    assert single.global_variance.item() == 0.0 and single.local_variance.item() == 0.0
    empty = signal_statistics(torch.ones(1, 4), torch.zeros(1, 4, dtype=torch.bool))
    assert math.isnan(empty.global_variance.item()) and math.isnan(empty.local_variance.item())


def test_state_statistics_hand_case():
    # states + + 0 - - | 0 (window 5): runs 2, 1, 2, 1; 2 changes over the 4 pairs of the
    # first window; the pair across the window edge counts in neither, and the trailing
    # one-token window has no pair and is left out
    z = torch.tensor([[0.1, 0.2, 0.0, -0.1, -0.3, 0.0, math.nan]])
    mask = torch.tensor([[True] * 6 + [False]])
    stats = signal_statistics(z, mask, on_band=0.0, window=5, backend="compiled")
    assert stats.lengths.tolist() == [6]
    assert stats.state_counts.tolist() == [[2, 2, 2]]
    assert stats.runs.run_count.tolist() == [[1, 2, 1]]
    assert stats.runs.histogram[:, 1:3].tolist() == [[0, 1], [2, 0], [0, 1]]
    assert stats.switch_frequency.tolist() == [0.5]
    assert stats.window_frequency.tolist() == [[pytest.approx(4 / 5)]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_state_statistics_low_precision_and_float64(dtype):
    # values next to the thresholds: the kernel must round the band as the tensor code does
    edge = math.log1p(4e-4)
    values = torch.tensor([edge * f for f in (0.999, 1.0, 1.001, -0.999, -1.0, -1.3, 0.0)])
    z = values.repeat(5, 3).to(dtype)
    mask = torch.ones_like(z, dtype=torch.bool)
    mask[1, 4:] = False
    got = signal_statistics(z, mask, on_band=(4e-4, 4e-4), window=3, backend="compiled")
    ref = signal_statistics(z, mask, on_band=(4e-4, 4e-4), window=3, backend="torch")
    assert_identical(got.runs.token_count, ref.runs.token_count)
    assert_identical(got.runs.histogram, ref.runs.histogram)
    assert_identical(got.switch_frequency, ref.switch_frequency)
    assert_identical(got.window_frequency, ref.window_frequency)


def test_state_statistics_zero_width_and_no_rows():
    z = torch.zeros(3, 0)
    got = signal_statistics(z, None, backend="compiled")
    ref = signal_statistics(z, None, backend="torch")
    assert_identical(got.runs.histogram, ref.runs.histogram)
    assert_identical(got.switch_frequency, ref.switch_frequency)
    assert_identical(got.window_frequency, ref.window_frequency)
    # no rows: the FFT of signal_statistics refuses an empty batch, the kernel does not
    counted = _kernels.state_runs(torch.zeros(0, 5).numpy(), torch.ones(0, 5).bool().numpy(),
                                  -0.1, 0.1, 2)  # fmt: skip
    assert [a.shape for a in counted] == [(0,), (0, 3), (0, 3), (3, 6), (0, 3), (0, 2)]


# --------------------------------------------------------------------------- Kalman


@pytest.mark.parametrize("policy", ["zero", "skip"])
@pytest.mark.parametrize("ratio", [1e-6, 1e-4, 1e-2, 1e3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kalman_compiled_matches_loop_and_scan(policy, ratio, dtype):
    rows, length = 12, 3 * DEFAULT_CHUNK + 5  # a tail shorter than a scan chunk
    z = (0.3 * torch.randn(rows, length, generator=torch.Generator().manual_seed(1))).to(dtype)
    tol = ATOL if dtype == torch.float32 else 1e-12
    for layout, mask in masks(rows, length, 2).items():
        noisy = z.masked_fill(~mask, math.nan)
        got = kalman_filter(noisy, mask, ratio, 1.0, 0.05, -0.02, policy, backend="compiled")
        assert got.dtype == dtype and got.shape == z.shape, layout
        loop = kalman_filter_loop(z, mask, ratio, 1.0, 0.05, -0.02, policy)
        torch.testing.assert_close(got.double(), loop, atol=tol, rtol=0)
        scan = kalman_filter(noisy, mask, ratio, 1.0, 0.05, -0.02, policy, backend="torch")
        torch.testing.assert_close(got.double(), scan.double(), atol=2 * tol, rtol=0)


def test_kalman_compiled_skip_left_and_right_padding_agree():
    rows, length = 9, 77
    z = torch.randn(rows, length, generator=torch.Generator().manual_seed(7))
    all_masks = masks(rows, length, 8)
    right, left = all_masks["right"], all_masks["left"]
    z_left = torch.zeros_like(z)
    for i in range(rows):
        n = int(right[i].sum())
        z_left[i, length - n :] = z[i, :n]
    out_right = kalman_filter(z, right, 1e-2, 1.0, mask_policy="skip", backend="compiled")
    out_left = kalman_filter(z_left, left, 1e-2, 1.0, mask_policy="skip", backend="compiled")
    assert torch.equal(out_left[left], out_right[right])


def test_kalman_compiled_dtypes_and_empty():
    z = torch.randn(3, 10, generator=torch.Generator().manual_seed(3))
    for dtype in (torch.float16, torch.bfloat16):
        got = kalman_filter(z.to(dtype), None, 1e-2, backend="compiled")
        ref = kalman_filter(z.to(dtype), None, 1e-2, backend="torch")
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), ref.float(), atol=0, rtol=0)
    for shape in ((0, 4), (2, 0)):
        assert kalman_filter(torch.zeros(shape), None, backend="compiled").shape == shape


# --------------------------------------------------------------------------- fallback


def test_without_numba_auto_is_the_torch_path(monkeypatch):
    z = signal(6, 40, 5, "raw").float()
    mask = masks(6, 40, 6)["holes"]
    monkeypatch.setenv(_kernels.DISABLE_ENV, "1")
    _kernels.available.cache_clear()
    try:
        assert not _kernels.available()
        with pytest.raises(UsageError):
            kalman_filter(z, mask, backend="compiled")
        assert torch.equal(kalman_filter(z, mask), kalman_filter(z, mask, backend="torch"))
        got = signal_statistics(z, mask, on_band=EXACT_ON_BAND, window=7)
        ref = signal_statistics(z, mask, on_band=EXACT_ON_BAND, window=7, backend="torch")
        assert_identical(got.switch_frequency, ref.switch_frequency)
    finally:
        monkeypatch.delenv(_kernels.DISABLE_ENV)
        _kernels.available.cache_clear()


def test_bad_backend_is_a_usage_error():
    with pytest.raises(UsageError):
        kalman_filter(torch.zeros(1, 3), None, backend="fast")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        signal_statistics(torch.zeros(1, 3), None, backend="fast")  # type: ignore[arg-type]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_masked_zero_and_row_counts_equal_torch(dtype):
    import numpy as np

    gen = torch.Generator().manual_seed(9)
    mask = torch.rand(17, 29, generator=gen) > 0.4
    mask[3] = False
    values = (100 * torch.randn(17, 29, generator=gen)).to(dtype)
    if dtype.is_floating_point:
        values[~mask] = math.nan  # masked garbage must not leak
    strided = values.t().contiguous().t()  # the same values, column-major
    for tensor in (values, strided):
        got = torch.from_numpy(_kernels.masked_zero(tensor.numpy(), mask.numpy()))
        want = torch.where(mask, tensor, torch.zeros((), dtype=dtype))
        assert_identical(got, want)
    counts = torch.from_numpy(_kernels.row_counts(mask.numpy()))
    assert torch.equal(counts, mask.sum(dim=1))
    assert _kernels.row_counts(np.zeros((0, 4), dtype=bool)).shape == (0,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [17, 700])  # one call, and parts on the pool
def test_masked_zero_counting_counts_valid_inf_and_nan(dtype, rows):
    gen = torch.Generator().manual_seed(rows)
    mask = torch.rand(rows, 129, generator=gen) > 0.4
    values = (100 * torch.randn(rows, 129, generator=gen)).to(dtype)
    values[~mask] = math.nan  # garbage behind the mask is not counted
    values[0, :] = torch.tensor([math.inf, -math.inf, math.nan]).repeat(43)  # row 0 mixed
    values[5, 7], values[rows - 1, 128] = math.inf, -math.nan
    values[9, 3] = torch.finfo(dtype).max  # large but finite
    mask[9, 3] = True
    out, bad = _kernels.masked_zero_counting(values.numpy(), mask.numpy())
    assert_identical(torch.from_numpy(out), torch.where(mask, values, torch.zeros((), dtype=dtype)))
    assert bad == int((~torch.isfinite(values) & mask).sum())
    clean = torch.where(mask, values.nan_to_num(0.0, 1.0, -1.0), 0.0)
    assert _kernels.masked_zero_counting(clean.numpy(), mask.numpy())[1] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [17, 700])  # one call, and parts on the pool
def test_masked_difference_counting_equals_torch(dtype, rows):
    gen = torch.Generator().manual_seed(rows + 1)
    mask = torch.rand(rows, 129, generator=gen) > 0.4
    values = (10 * torch.randn(rows, 129, generator=gen)).to(dtype)
    others = (10 * torch.randn(rows, 129, generator=gen)).to(dtype)
    others[~mask] = math.nan  # garbage behind the mask is not counted
    big = torch.finfo(dtype).max
    values[2, 5], others[2, 5] = big, -big  # finite operands, an infinite difference
    values[4, 6], others[4, 6] = math.inf, math.inf  # inf - inf: NaN
    mask[2, 5] = mask[4, 6] = True
    out, bad = _kernels.masked_difference_counting(values.numpy(), others.numpy(), mask.numpy())
    difference = values - others
    want = torch.where(mask, difference, torch.zeros((), dtype=dtype))
    assert_identical(torch.from_numpy(out), want)  # rounded once, as torch's
    assert bad == int((~torch.isfinite(difference) & mask).sum()) == 2


def test_first_valid_and_any_true_equal_torch():
    gen = torch.Generator().manual_seed(4)
    mask = torch.rand(40, 33, generator=gen) > 0.9
    mask[0] = False  # an empty row: 0
    mask[1, 0] = True
    mask[2, :] = False
    mask[2, 32] = True  # the last position
    first = _kernels.first_valid(mask)
    want = torch.where(mask.any(dim=1), mask.to(torch.uint8).argmax(dim=1), 0)
    assert torch.equal(first, want) and first[2] == 32 and first[0] == 0
    # the same mask stored column-major
    assert torch.equal(_kernels.first_valid(mask.t().contiguous().t()), want)
    assert _kernels.any_true(mask) and not _kernels.any_true(torch.zeros(3, 4, dtype=torch.bool))
    assert not _kernels.any_true(torch.zeros(0, 4, dtype=torch.bool))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("rows", [17, 700])  # one call, and parts on the pool
def test_advantage_sums_equal_torch_and_a_plain_loop(dtype, rows):
    from ratioscope.functional.surrogate import advantage_sums, advantage_sums_torch

    gen = torch.Generator().manual_seed(rows + 1)
    mask = torch.rand(rows, 131, generator=gen) > 0.3
    adv = torch.randn(rows, 131, generator=gen).to(dtype)
    adv[adv.abs() < 0.2] = 0.0  # zeros count as neither sign
    adv[1] = -0.0
    adv[2] = 0.75  # a GRPO row: one advantage broadcast over the sequence
    mask[3] = False  # an empty row
    adv[~mask & (torch.rand(rows, 131, generator=gen) > 0.5)] = math.nan  # masked garbage
    got, want = advantage_sums(adv, mask), advantage_sums_torch(adv, mask)
    for name in ("n_positive", "n_negative"):
        assert_identical(getattr(got, name), getattr(want, name))
    for name in ("positive", "negative"):
        torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=1e-12, atol=1e-12)
    # each row summed in order, in float64: a plain loop gives the same bits
    for r in (0, 2, rows - 1):
        values = [a for a, m in zip(adv[r].tolist(), mask[r].tolist(), strict=True) if m]
        up = down = 0.0
        for a in values:
            up += a if a > 0 else 0.0
            down += a if a < 0 else 0.0
        assert (got.positive[r].item(), got.negative[r].item()) == (up, down)
        assert got.n_positive[r].item() == sum(a > 0 for a in values)
    assert got.positive[3].item() == 0.0 and got.n_negative[3].item() == 0


def test_advantage_sums_take_a_valid_nan_into_both_sums_as_the_torch_path_does():
    from ratioscope.functional.surrogate import advantage_sums, advantage_sums_torch

    adv = torch.tensor([[1.0, math.nan, -2.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    got, want = advantage_sums(adv, mask), advantage_sums_torch(adv, mask)
    assert math.isnan(got.positive.item()) and math.isnan(got.negative.item())
    assert math.isnan(want.positive.item()) and math.isnan(want.negative.item())
    assert (got.n_positive.item(), got.n_negative.item()) == (1, 1)
    assert (want.n_positive.item(), want.n_negative.item()) == (1, 1)


def test_can_take_only_cpu_tensors_of_the_compiled_dtypes(monkeypatch):
    z = torch.zeros(3, 4)
    mask = torch.ones(3, 4, dtype=torch.bool)
    assert _kernels.can_take(z, z.double(), mask=mask)
    assert not _kernels.can_take(z.half(), mask=mask)  # no kernel for float16
    assert not _kernels.can_take(z.long())
    assert _kernels.can_take(z.long(), dtypes=(torch.int64,))
    assert not _kernels.can_take(z, mask=mask[:, :3])  # another shape
    assert not _kernels.can_take(z, mask=mask.float())  # not a bool mask
    assert not _kernels.can_take(z.to("meta"), mask=mask)  # not on the CPU
    monkeypatch.setenv(_kernels.DISABLE_ENV, "1")
    _kernels.available.cache_clear()
    try:
        assert not _kernels.can_take(z, mask=mask)
    finally:
        monkeypatch.delenv(_kernels.DISABLE_ENV)
        _kernels.available.cache_clear()


# --------------------------------------------------------------------------- row parts


@pytest.mark.parametrize("rows", [0, 1, 5, 8, 9, 1000])
def test_row_parts_cover_the_rows_in_order(rows):
    parts = _kernels.row_parts(rows)
    assert len(parts) == max(1, min(_kernels.ROW_PARTS, rows))
    assert parts[0][0] == 0 and parts[-1][1] == rows
    assert all(stop == start for (_, stop), (start, _) in itertools.pairwise(parts))
    sizes = [stop - start for start, stop in parts]
    assert max(sizes) - min(sizes) <= 1


def test_map_row_parts_keeps_the_order_on_threads():
    torch_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        got = _kernels.map_row_parts(lambda start, stop: (start, stop), 100)
    finally:
        torch.set_num_threads(torch_threads)
    assert got == _kernels.row_parts(100)


def test_map_parts_runs_on_the_calling_thread_and_a_helper(two_threads):
    import threading
    import time

    seen: list[int] = []

    def part(index: int) -> int:
        time.sleep(0.002)  # long enough that both threads take parts
        seen.append(threading.get_ident())
        return index * index

    assert _kernels.map_parts(part, 12) == [index * index for index in range(12)]
    assert threading.get_ident() in seen  # the caller worked, not only waited
    assert len(set(seen)) == 2


def test_map_parts_raises_a_parts_error_and_stops_taking_parts(two_threads):
    started: list[int] = []

    def part(index: int) -> int:
        started.append(index)
        if index == 1:
            raise ValueError("part 1 failed")
        return index

    with pytest.raises(ValueError, match="part 1 failed"):
        _kernels.map_parts(part, 200)
    assert len(started) < 200  # the others stopped at their next part
    # and the pool is usable afterwards
    assert _kernels.map_parts(lambda index: index, 5) == [0, 1, 2, 3, 4]


def test_map_parts_within_a_part_does_not_wait_on_itself(two_threads):
    # a part that maps parts of its own: its helper may be the thread it runs on, which
    # is busy; the caller then does every inner part itself instead of waiting
    got = _kernels.map_parts(lambda outer: sum(_kernels.map_parts(lambda i: i, 4)) + outer, 4)
    assert got == [6, 7, 8, 9]


@pytest.mark.parametrize(
    "costs",
    [[1.0] * 9 + [100.0], list(range(1, 101)), [5.0], [0.0, 0.0, 3.0], [1.0] * 3],
)
def test_map_balanced_rows_covers_every_row_once_in_parts_of_about_equal_cost(costs, two_threads):
    from ratioscope.defaults import SERIAL_ELEMENTS

    calls: list[tuple[int, int]] = []
    costs_np = np.array(costs, dtype=np.float64)
    _kernels.map_balanced_rows(
        lambda start, stop: calls.append((start, stop)), costs_np, SERIAL_ELEMENTS + 1
    )
    calls.sort()
    assert calls[0][0] == 0 and calls[-1][1] == len(costs)
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(calls))
    assert len(calls) <= _kernels.ROW_PARTS
    share = costs_np.sum() / _kernels.ROW_PARTS
    for start, stop in calls:  # a part passes its share by its first row's cost at most
        assert costs_np[start:stop].sum() - costs_np[start] <= share + 1e-9
    calls.clear()
    _kernels.map_balanced_rows(lambda a, b: calls.append((a, b)), costs_np, SERIAL_ELEMENTS)
    assert calls == [(0, len(costs))]  # small: one call


def test_map_rows_one_call_when_small_and_the_same_rows_either_way():
    from ratioscope.defaults import SERIAL_ELEMENTS

    calls: list[tuple[int, int]] = []
    _kernels.map_rows(lambda start, stop: calls.append((start, stop)), 100, SERIAL_ELEMENTS)
    assert calls == [(0, 100)]
    calls.clear()
    _kernels.map_rows(lambda start, stop: calls.append((start, stop)), 100, SERIAL_ELEMENTS + 1)
    assert sorted(calls) == _kernels.row_parts(100)
    # a row-wise kernel gives the same bits over one call and over the parts
    gen = torch.Generator().manual_seed(3)
    z = torch.randn(100, 70, generator=gen)
    mask = torch.rand(100, 70, generator=gen) < 0.8
    keep, gains = np.full(70, 0.9), np.full(70, 0.1)
    whole, parts = np.empty((100, 70), np.float32), np.empty((100, 70), np.float32)
    _kernels.kalman(z.numpy(), mask.numpy(), keep, gains, 0.0, False, whole)
    for start, stop in _kernels.row_parts(100):
        _kernels.kalman(
            z[start:stop].numpy(), mask[start:stop].numpy(), keep, gains, 0.0, False,
            parts[start:stop],
        )  # fmt: skip
    assert np.array_equal(whole, parts)


def test_report_is_the_same_on_one_thread_and_two():
    """The compiled loops run a chunk's rows in parts on the threads torch may use;
    the parts do not depend on the number of threads, so neither do the numbers."""
    from pathlib import Path

    import ratioscope

    sample = Path(__file__).resolve().parents[1] / "sample_data" / "verl"
    documents = []
    torch_threads = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            report = ratioscope.analyze(sample, chunk_elements=2048, per_sequence=True)
            document = report.to_dict()
            document.pop("tool")
            document["sequences"] = report.sequences.frame().to_dict(as_series=False)
            documents.append(document)
    finally:
        torch.set_num_threads(torch_threads)
    assert documents[0]["covariance"] is not None
    # bit for bit (NaN where NaN)
    assert_documents_close(documents[1], documents[0], rel=0.0, abs_tol=0.0)


def test_a_small_input_in_one_call_gives_the_bits_of_eight_parts(monkeypatch):
    """Kernels whose results do not depend on where the rows are cut (state runs, TEPO's
    quadrants, the mismatch rows, covariance's last pass, the spectra with their FFTs,
    the advantage sums) take a small input in one call (``_kernels.map_any_parts``).
    With the small-input bound at 0 every input is cut into the eight parts instead:
    the report must be the same bits."""
    from pathlib import Path

    import ratioscope
    import ratioscope.defaults

    sample = Path(__file__).resolve().parents[1] / "sample_data" / "verl"
    documents = []
    for bound in (0, 1 << 40):
        monkeypatch.setattr(ratioscope.defaults, "SERIAL_ELEMENTS", bound)
        report = ratioscope.analyze(sample, chunk_elements=4096, per_sequence=True)
        document = report.to_dict()
        document.pop("tool")
        document["sequences"] = report.sequences.frame().to_dict(as_series=False)
        documents.append(document)
    assert documents[0]["covariance"] is not None and documents[0]["tepo"] is not None
    assert_documents_close(documents[1], documents[0], rel=0.0, abs_tol=0.0)
