"""The covariance section's compiled passes against its torch path (the reference).

Both paths run on the same dumps and chunks: random batches with interleaved groups
spanning chunks, empty rows, a masked token inside a row, a group whose advantages are
all equal (flat weights), float32 and float64 inputs, and log-ratios packed around the
PPO clip bounds (Clip-Cov leaves out clipped tokens). The histogram counts and the
integer counts must be equal; sums and moments equal to rounding (the compiled path
adds per row where torch sums per chunk, and ``exp``/``log`` may differ in the last bit).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from covariance_batches import CLIP, covariance_arrays, write_arrays
from documents import assert_documents_close

import ratioscope
import ratioscope.sections.covariance as covariance_section
from ratioscope.functional import _kernels
from ratioscope.functional.covariance_fused import FusedKernelPasses

pytestmark = pytest.mark.skipif(not _kernels.available(), reason="numba is not available")


def _covariance(path, chunk_elements: int, compiled: bool, monkeypatch, **options) -> dict:
    with monkeypatch.context() as patch:
        if not compiled:
            patch.setattr(covariance_section, "usable", lambda *tensors: False)
        calls: list[int] = []
        original = FusedKernelPasses.add

        def counted(self, index, *args):
            calls.append(index)
            return original(self, index, *args)

        patch.setattr(FusedKernelPasses, "add", counted)
        report = ratioscope.analyze(
            path, sections=["covariance"], chunk_elements=chunk_elements, clip=CLIP, **options
        )
    # the path under test is the one that ran
    assert bool(calls) == compiled
    return report.to_dict()["covariance"]


def _assert_close(fused, reference) -> None:
    # counts and names exactly, floats to rounding
    assert_documents_close(fused, reference, rel=1e-12, abs_tol=1e-15, where="covariance")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("chunk_elements", [33 * 3, 33 * 40])
def test_compiled_section_equals_the_torch_path(tmp_path, monkeypatch, dtype, chunk_elements):
    path = tmp_path / "dump.safetensors"
    write_arrays(covariance_arrays(0, dtype=dtype), path)
    fused = _covariance(path, chunk_elements, True, monkeypatch)
    reference = _covariance(path, chunk_elements, False, monkeypatch)
    assert fused["clip_cov"]["eligible"] > 0  # the band is populated
    _assert_close(fused, reference)


@pytest.mark.parametrize("scope", ["batch", "group"])
def test_compiled_section_equals_the_torch_path_in_each_scope(tmp_path, monkeypatch, scope):
    path = tmp_path / "dump.safetensors"
    write_arrays(covariance_arrays(1, rows=64, width=20), path)
    fused = _covariance(path, 20 * 5, True, monkeypatch, cov_scope=scope)
    reference = _covariance(path, 20 * 5, False, monkeypatch, cov_scope=scope)
    assert fused["scope"] == scope
    _assert_close(fused, reference)


def test_compiled_report_does_not_depend_on_the_chunking(tmp_path, monkeypatch):
    path = tmp_path / "dump.safetensors"
    write_arrays(covariance_arrays(2), path)
    reports = [_covariance(path, n, True, monkeypatch) for n in (33, 33 * 7, 33 * 40)]
    assert reports[0] == reports[1] == reports[2]  # bit for bit


def _passes_in_chunks(arrays: dict[str, np.ndarray], chunk_rows: int) -> FusedKernelPasses:
    """Every pass over the rows in chunks of ``chunk_rows``, as the section feeds them."""
    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}
    mask = tensors["mask"]
    log_ratio = torch.where(mask, tensors["log_probs"] - tensors["old_log_probs"], 0.0)
    fused = FusedKernelPasses(CLIP, (0.05, 5.0), (0.5, 0.1), 50)
    for index in range(5):
        for start in range(0, mask.shape[0], chunk_rows):
            rows = slice(start, start + chunk_rows)
            fused.add(
                index, tensors["log_probs"][rows], tensors["advantages"][rows], mask[rows],
                tensors["group"][rows], log_ratio[rows],
            )  # fmt: skip
    return fused


def _bits(fused: FusedKernelPasses) -> list[bytes]:
    totals = fused.totals
    arrays = [fused.sums, fused.batch, fused.c_sums, fused.spread, fused.w_sums, fused.factor]
    arrays += [totals.c_counts, totals.w_counts, totals.normalised_counts]
    arrays += [totals.weight_counts, totals.extremes, totals.c_sums, totals.moments]
    arrays += [totals.below, totals.mass, np.array([fused.eligible])]
    return [a.tobytes() for a in arrays]


@pytest.mark.parametrize("chunk_rows", [7, 40])
def test_scope_parts_give_the_bits_of_one_loop(monkeypatch, chunk_rows):
    """Passes 1-3 split the scopes (groups spread over every row and chunk) between
    parts on threads: each scope's sums are still added in the batch's order, so any
    number of parts gives the bits of one loop."""
    import ratioscope.functional.covariance_fused as fused_module

    arrays = covariance_arrays(4, rows=40, width=33)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)  # parts run on the pool
    results = {}
    for parts in (1, 2, 3, 8):
        monkeypatch.setattr(fused_module, "scope_parts", lambda scopes, elements, n=parts: n)
        results[parts] = _passes_in_chunks(arrays, chunk_rows)
    one = results[1]
    # the data reach every count: Clip-Cov's band, w under each threshold, flat scopes
    assert one.eligible > 0 and one.totals.below.min() > 0 and one.flat.any()
    for parts, fused in results.items():
        assert _bits(fused) == _bits(one), f"{parts} parts"


def test_clip_cov_eligible_counts_by_hand():
    """Two rows, one scope: c over the batch, in the band or not, clipped or not."""
    mask = torch.ones(2, 2, dtype=torch.bool)
    log_probs = torch.tensor([[-4.0, 0.0], [0.0, 0.0]])
    advantages = torch.tensor([[-2.0, -2.0], [2.0, 2.0]])
    # batch means: log pi -1, A 0; c = (lp + 1) A: [[6, -2], [2, 2]]; band (1, 5): the
    # row-1 tokens; the second one's ratio 1.5 > 1.28 with A > 0 is clipped
    log_ratio = torch.log(torch.tensor([[1.0, 1.0], [1.0, 1.5]]))
    fused = FusedKernelPasses(CLIP, (1.0, 5.0), (0.5, 0.1), 50)
    for index in range(2):
        fused.add(index, log_probs, advantages, mask, None, log_ratio)
    assert fused.eligible == 1
    assert fused.tokens == 4


def test_passes_come_in_order():
    mask = torch.ones(1, 2, dtype=torch.bool)
    values = torch.zeros(1, 2)
    fused = FusedKernelPasses(CLIP, (1.0, 5.0), (0.5, 0.1), 50)
    fused.add(0, values, values, mask, None, values)
    with pytest.raises(ValueError, match="pass 2 after pass 0"):
        fused.add(2, values, values, mask, None, values)


def test_ratio_bounds_compare_in_the_log_ratio_precision():
    """torch compares a float32 ratio with ``1 + eps`` in float32: a ratio equal to
    float32(1.2) (> 1.2 in float64) is not clipped by eps_high = 0.2."""
    from ratioscope.functional.covariance import clip_cov_touched, token_covariance
    from ratioscope.functional.surrogate import ppo_clip_mask

    clip = (0.25, 0.2)
    candidates = (
        torch.log(torch.tensor([1.2], dtype=torch.float32))
        + torch.arange(-8, 9, dtype=torch.float32) * torch.finfo(torch.float32).eps
    )
    at_edge = candidates[torch.exp(candidates) == torch.tensor(1.2, dtype=torch.float32)]
    assert at_edge.numel() > 0
    rows = at_edge.numel()
    log_ratio = at_edge[:, None].expand(rows, 2).contiguous()
    mask = torch.ones(rows, 2, dtype=torch.bool)
    # batch means -2 and 2: c = 2 on every token, inside Clip-Cov's band, A > 0
    log_probs = torch.tensor([[0.0, -4.0]]).expand(rows, 2).contiguous()
    advantages = torch.tensor([[3.0, 1.0]]).expand(rows, 2).contiguous()
    fused = FusedKernelPasses(clip, (1.0, 5.0), (0.5, 0.1), 50)
    for index in range(2):
        fused.add(index, log_probs, advantages, mask, None, log_ratio)
    c = token_covariance(log_probs, advantages, mask)
    clipped = ppo_clip_mask(log_ratio, advantages, mask, clip)
    reference = clip_cov_touched(c, mask, bounds=(1.0, 5.0), exclude=clipped)
    assert not bool(clipped.any())
    assert fused.eligible == reference.eligible > 0


def test_compiled_bin_index_equals_the_histogram_module():
    """The table-and-exponent bin of the compiled pass against ``bin_index`` (log10 in
    torch): random magnitudes over 20 decades, both sides of every bin edge, zeros,
    the under- and over-flow ranges, infinities and sub-normal numbers."""
    import numba

    from ratioscope.functional import histogram as bins
    from ratioscope.functional._binning import bin_value as _bin

    @numba.njit
    def all_bins(values, out):
        for i in range(values.size):
            out[i] = _bin(values[i])

    rng = np.random.default_rng(0)
    edges = 10.0 ** (bins.MIN_EXP + np.arange(bins.MAGNITUDE_BINS + 1) / bins.PER_DECADE)
    magnitudes = np.concatenate(
        [
            10.0 ** rng.uniform(-14, 6, size=200_000),
            edges,
            np.nextafter(edges, 0.0),
            np.nextafter(edges, np.inf),
            [0.0, 5e-324, 1e-300, 1e-12, 1e300, np.finfo(np.float64).max, np.inf],
        ]
    )
    values = np.concatenate([magnitudes, -magnitudes])
    out = np.empty(values.size, dtype=np.int64)
    all_bins(values, out)
    expected = bins.bin_index(torch.from_numpy(values)).numpy()
    assert np.array_equal(out, expected)
    # the same bins from a loop's cells computed ahead (cell_bins_into, bin_from_cell)
    from ratioscope.functional._binning import bin_from_cell, cell_bins_into

    @numba.njit
    def from_cells(values, cells, out):
        cell_bins_into(values, values.size, cells)
        for i in range(values.size):
            out[i] = bin_from_cell(cells[i], values[i])

    cells = np.empty(values.size, dtype=np.int64)
    from_cells(values, cells, out)
    assert np.array_equal(out, expected)
    assert (cells == -1).any()  # some values lie near an edge: the exact path is tried


def _edge_positions(rng: np.random.Generator) -> np.ndarray:
    """Magnitudes at, beside and near the histogram's bin edges (in bins: 0 to 0.01 of
    a bin from an edge, on both sides), and random ones over 12 decades."""
    from ratioscope.functional import histogram as bins

    k = np.arange(0, bins.MAGNITUDE_BINS, 7)[:, None]
    near = np.concatenate([np.linspace(-0.01, 0.01, 41), [-1e-4, -3e-6, 3e-6, 1e-4]])
    positions = (k + near[None, :]).ravel()
    edges = 10.0 ** (bins.MIN_EXP + positions / bins.PER_DECADE)
    return np.concatenate([edges, 10.0 ** rng.uniform(-9, 3, size=20_000)])


def test_bin_of_log_gives_the_bin_of_the_log_at_every_edge():
    """bin_of_log(value, estimate, error), estimate anywhere within error of
    log(value), is bin_value(log(value)): at bin edges and beside them, for errors from
    none to the largest it takes the estimate for and beyond (where it takes the log)."""
    import numba

    from ratioscope.functional._binning import (
        _LOG_SAFE,
        bin_of_log,
        bin_of_log_from_cell,
        bin_value,
        cell_bin,
    )

    @numba.njit
    def both(values, estimates, errors, ours, exact):
        for i in range(values.size):
            ours[i] = bin_of_log(values[i], estimates[i], errors[i])
            exact[i] = bin_value(np.log(values[i]))
            # the cell looked up ahead (the last pass's vectorised loop) gives the same
            if (
                bin_of_log_from_cell(cell_bin(estimates[i]), values[i], estimates[i], errors[i])
                != ours[i]
            ):
                ours[i] = -2

    rng = np.random.default_rng(1)
    magnitudes = _edge_positions(rng)
    magnitudes = magnitudes[magnitudes < 700]  # exp(-log) above 0, exp(log) finite
    logs = np.concatenate([-magnitudes, magnitudes])
    values = np.exp(logs)
    exact_logs = np.log(values)
    cases = []
    for scale in (0.0, 1e-16, 0.25, 0.999, 1.5, 20.0):  # of the largest error taken
        errors = np.maximum(np.abs(exact_logs) * _LOG_SAFE * scale, 1e-300)
        for side in (-1.0, 1.0, None):
            shift = rng.uniform(-1, 1, size=errors.size) if side is None else side
            cases.append((values, exact_logs + shift * errors, errors))
    values, estimates, errors = (np.concatenate(parts) for parts in zip(*cases, strict=True))
    ours = np.empty(values.size, dtype=np.int64)
    exact = np.empty(values.size, dtype=np.int64)
    both(values, estimates, errors, ours, exact)
    assert np.array_equal(ours, exact)


@pytest.mark.parametrize("narrow", [True, False])
def test_last_pass_bins_log_w_as_its_formula_at_the_edges(narrow):
    """The last compiled pass's bins of log w and log w~ (from u and u + log f, the
    log only near an edge) against the formula itself, bin_value(log(w)) of the stored
    w = exp(-c^2 / 2 sigma^2) and w~ = w f, for tokens whose log w and log w~ lie at
    and beside the bin edges, in float32 (the stores rounded) and float64."""
    from ratioscope.functional import histogram as bins
    from ratioscope.functional._binning import bin_value
    from ratioscope.functional.covariance_fused import kernels

    dtype = np.float32 if narrow else np.float64
    rng = np.random.default_rng(2)
    targets = _edge_positions(rng)
    # w and w~ normal numbers, sub-normal, zero and infinite (float32 and float64)
    targets = np.concatenate([targets[targets < 70], np.geomspace(70, 760, 300)])
    width = 64
    rows = -(-targets.size // width)
    u_target = -np.resize(targets, rows * width).reshape(rows, width)
    two_variance = 2.0
    c = np.sqrt(-u_target * two_variance)
    lp = c.astype(dtype)  # mean log pi 0 and A - mean A = 1: c is log pi
    adv = np.ones((rows, width), dtype=dtype)
    # each row its own scope, whose factor puts its first token's log w~ at an edge
    first_u = -(lp[:, 0].astype(np.float64) ** 2) / two_variance
    v_target = -np.resize(targets[::-1], rows) * rng.choice([-1.0, 1.0], size=rows)
    with np.errstate(over="ignore", divide="ignore"):  # a zero and an infinite w~ too
        factor = np.exp(v_target - first_u)
        factor[0] = 1.0
        log_factor = np.log(factor)  # w~ = w: the edges of log w again
    mask = np.ones((rows, width), dtype=np.bool_)
    mask[1, 5:9] = False
    scope = np.arange(rows, dtype=np.int64)
    means = np.zeros((rows, 3))
    kernel = np.full(rows, two_variance)
    flat = np.zeros(rows, dtype=np.bool_)
    flat[2] = True  # w = 1 in a flat scope
    counts = [np.zeros(bins.NUM_BINS, dtype=np.int64) for _ in range(3)]
    extremes = np.array([[np.inf, -np.inf]] * 3)
    kernels().statistics(
        lp, adv, mask, scope, means, kernel, flat, factor, log_factor, narrow,
        np.array([0.5, 0.1]), np.zeros(3), *counts, np.zeros(50, dtype=np.int64),
        extremes, np.empty(rows * width, dtype=np.int32), np.empty(rows * width),
        np.empty((rows, 14)),
    )  # fmt: skip

    want_w = np.zeros(bins.NUM_BINS, dtype=np.int64)
    want_n = np.zeros(bins.NUM_BINS, dtype=np.int64)
    for r, t in zip(*np.nonzero(mask), strict=True):
        value = float(lp[r, t])  # c, as the pass makes it
        w = 1.0 if flat[r] else math.exp(-(value * value) / two_variance)
        normalised = w * factor[r]
        with np.errstate(over="ignore", divide="ignore"):  # inf, and log 0 = -inf
            if narrow:
                w, normalised = float(np.float32(w)), float(np.float32(normalised))
            want_w[bin_value(np.log(w))] += 1
            want_n[bin_value(np.log(normalised))] += 1
    assert np.array_equal(counts[1], want_w)
    assert np.array_equal(counts[2], want_n)
