"""The Triton kernels (the GPU's loops), run here by Triton's interpreter.

``TRITON_INTERPRET=1`` runs the kernels' source on the host with numpy: the Kalman
filter's arithmetic, masks, chunks and carries against a float64 loop, and the ratio and
histogram kernels' bins, moments and sums against the tensor code. Their GPU code
generation is checked by compiling every variant for an A100 and an H100
(``benchmarks/triton_compile.py``, the last test), and their results and speed on a GPU
by the ``cuda`` tests and ``benchmarks/gpu_check.sh``.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from ratioscope.errors import ParameterError
from ratioscope.functional import _triton_kernels, device_histogram
from ratioscope.functional.kalman import _path, kalman_filter, kalman_filter_loop

# not importorskip: Triton must be first imported with the interpreter on (the fixture)
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="needs Triton installed"
)

ATOL = 1e-6  # float32 output: a few roundings of |rho| against the float64 loop


#: tile width in these tests: the interpreter runs a scan element by element in Python
#: (about 80 us an element), so tiles of 16 make every case of tiles and chunks small
TILE = 16


def imported_for_the_interpreter() -> bool:
    """Whether Triton's own helpers were decorated for its interpreter (tests/conftest.py
    turns it on where there is no GPU, before Triton is first imported)."""
    import triton.language as tl

    return type(tl.zeros).__name__ == "InterpretedFunction"


def skip_unless_triton_compiles_here() -> None:
    """For the ``cuda`` tests: skip where Triton was imported for its interpreter, or
    cannot compile for this device (a CPU build of torch, as the emulated device of a
    rehearsal of the GPU check is)."""
    if imported_for_the_interpreter():
        pytest.skip("Triton was imported for its interpreter in this process: pytest -m cuda")
    if not _triton_kernels.can_take(torch.zeros(1, device="cuda")):
        pytest.skip("Triton cannot compile for this device")


@pytest.fixture(autouse=True)
def interpreted(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if "cuda" in request.keywords:
        return  # compiled for the GPU, whole tiles
    if not imported_for_the_interpreter():
        pytest.skip("Triton was imported for a GPU in this process (tests/conftest.py)")
    monkeypatch.setenv(_triton_kernels.INTERPRET_ENV, "1")
    monkeypatch.delenv(_triton_kernels.DISABLE_ENV, raising=False)
    monkeypatch.setattr(_triton_kernels, "BLOCK_T", TILE)
    monkeypatch.setattr(_triton_kernels, "MISMATCH_BLOCK_T", TILE)
    monkeypatch.setattr(_triton_kernels, "COVARIANCE_BLOCK_T", TILE)
    monkeypatch.setattr(_triton_kernels, "LFR_BLOCK_T", TILE)
    monkeypatch.setattr(_triton_kernels, "CENTRE_BLOCK_T", TILE)
    monkeypatch.setattr(_triton_kernels, "CENTRE_WINDOW_LANES", TILE)
    monkeypatch.setattr(_triton_kernels, "STATES_BLOCK_T", TILE)


def ragged(rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """z [rows, length] float32 and a right-padded mask with holes (a full row, an empty
    one), NaN and inf where masked: the kernel must never read them."""
    gen = torch.Generator().manual_seed(seed)
    z = 0.3 * torch.randn(rows, length, generator=gen)
    lengths = torch.randint(0, length + 1, (rows,), generator=gen)
    lengths[0], lengths[-1] = length, 0
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    mask &= torch.rand(rows, length, generator=gen) >= 0.1
    z[~mask] = float("nan")
    z[~mask & (torch.rand(rows, length, generator=gen) < 0.5)] = float("inf")
    return z, mask


def plain_loop(z: list[float], valid: list[bool], q: float, v: float) -> list[float]:
    """Policy "zero" written out: P_pred = P + Q, K = P_pred / (P_pred + V)."""
    p, rho, out = 0.0, 0.0, []
    for value, ok in zip(z, valid, strict=True):
        p_pred = p + q
        gain = p_pred / (p_pred + v)
        rho = (1 - gain) * rho + gain * (value if ok else 0.0)
        p = (1 - gain) * p_pred
        out.append(rho)
    return out


def test_hand_case() -> None:
    z = torch.tensor([[1.0, 1.0, 1.0], [2.0, -1.0, 4.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, False, True]])
    got = kalman_filter(z, mask, q=1.0, v=1.0, backend="triton")
    assert got[0].tolist() == pytest.approx([0.5, 0.8, 12 / 13], abs=1e-15)  # K 1/2, 3/5, 8/13
    expected = plain_loop([2.0, -1.0, 4.0], [True, False, True], 1.0, 1.0)
    assert got[1].tolist() == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize(
    ("rows", "length", "chunks"),
    [(3, 10, 1), (40, 50, 1), (24, 80, 3), (5, 60, 4)],
    ids=["one-tile", "rows-of-four-tiles", "chunks-of-two-tiles", "chunks-of-one-tile"],
)
@pytest.mark.parametrize("policy", ["zero", "skip"])
@pytest.mark.parametrize("zero_masked", [False, True])
def test_matches_the_float64_loop(rows, length, chunks, policy, zero_masked) -> None:
    assert _triton_kernels.kalman_chunks(rows, length, _triton_kernels.DEFAULT_SMS)[0] == chunks
    z, mask = ragged(rows, length, seed=rows + length)
    for q in (1e-6, 1e-2, 50.0):
        expected = kalman_filter_loop(z.double(), mask, q, 1.0, mask_policy=policy)
        if zero_masked:
            expected = torch.where(mask, expected, torch.zeros(()))
        got = kalman_filter(
            z, mask, q, 1.0, mask_policy=policy, backend="triton", zero_masked=zero_masked
        )
        assert got.dtype == torch.float32 and torch.isfinite(got).all()
        assert (got.double() - expected).abs().max().item() <= ATOL
        compiled = kalman_filter(
            z, mask, q, 1.0, mask_policy=policy, backend="torch", zero_masked=zero_masked
        )
        assert (got - compiled).abs().max().item() <= ATOL


def test_float64_input_keeps_float64() -> None:
    z, mask = ragged(6, 70, seed=3)
    z = z.double()
    got = kalman_filter(z, mask, 1e-4, 1.0, rho0=0.1, backend="triton")
    expected = kalman_filter_loop(z, mask, 1e-4, 1.0, rho0=0.1)
    assert got.dtype == torch.float64
    assert (got - expected).abs().max().item() <= 1e-12


def test_empty_shapes() -> None:
    for shape in ((0, 5), (4, 0)):
        got = kalman_filter(torch.zeros(shape), None, backend="triton")
        assert got.shape == shape


@pytest.mark.parametrize(
    ("rows", "length", "sms", "expected"),
    [
        (1024, 4096, 132, (1, 4096)),  # 512 row blocks: at least 2 programs an SM
        (64, 32768, 132, (16, 2048)),  # 32 row blocks: chunks of 2 tiles, 16 a row
        (64, 800, 132, (1, 1024)),  # one tile: nothing to cut
        (5, 3000, 8, (3, 1024)),  # 3 row blocks, 3 tiles: a tile a chunk
        (40, 2100, 8, (1, 3072)),  # 20 row blocks: 2 an SM
        (24, 4500, 8, (3, 2048)),  # 12 row blocks want 3 chunks of 5 tiles: 2, 2, 1
    ],
)
def test_chunks(rows, length, sms, expected, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_triton_kernels, "BLOCK_T", 1024)
    assert _triton_kernels.kalman_chunks(rows, length, sms) == expected


def test_where_the_kernel_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    z = torch.zeros(2, 3)
    # on the CPU, numba's loop (or the scan) even with the interpreter on
    assert _path(z, "auto") in ("compiled", "torch")
    assert _path(z, "triton") == "triton"
    monkeypatch.setenv(_triton_kernels.DISABLE_ENV, "1")
    with pytest.raises(ParameterError, match="'triton' needs Triton"):
        kalman_filter(z, None, backend="triton")
    monkeypatch.delenv(_triton_kernels.DISABLE_ENV)
    monkeypatch.delenv(_triton_kernels.INTERPRET_ENV)
    # a CPU build of torch compiles for no GPU
    assert not _triton_kernels.can_take(z)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
@pytest.mark.parametrize("shape", [(1024, 4100), (64, 32768)], ids=["rows", "chunks"])
@pytest.mark.parametrize("policy", ["zero", "skip"])
def test_cuda_kernel_matches_the_loop(shape, policy) -> None:
    skip_unless_triton_compiles_here()
    z, mask = ragged(*shape, seed=7)
    expected = kalman_filter_loop(z.double(), mask, 1e-4, 1.0, mask_policy=policy)
    got = kalman_filter(z.cuda(), mask.cuda(), 1e-4, 1.0, mask_policy=policy, backend="triton")
    assert got.device.type == "cuda" and got.dtype == torch.float32
    assert (got.cpu().double() - expected).abs().max().item() <= ATOL
    # float64 in and out, rho0 not a float32 value: kept to float64's rounding
    exact = kalman_filter(
        z.double().cuda(), mask.cuda(), 1e-4, 1.0, 0.0, 0.1, policy, backend="triton"
    )
    expected = kalman_filter_loop(z.double(), mask, 1e-4, 1.0, 0.0, 0.1, policy)
    assert (exact.cpu() - expected).abs().max().item() <= 1e-12


def test_a_kernel_that_fails_to_build_leaves_the_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    from ratioscope.functional import kalman

    def broken(*args, **kwargs):
        raise RuntimeError("no kernel for this GPU")

    monkeypatch.setattr(kalman, "_TRITON_FAILED", False)
    monkeypatch.setattr(kalman, "_path", lambda z, backend: "triton")
    monkeypatch.setattr(_triton_kernels, "kalman", broken)
    z, mask = ragged(4, 30, seed=5)
    with pytest.warns(RuntimeWarning, match="no kernel for this GPU"):
        got = kalman_filter(z, mask, 1e-3, 1.0)
    expected = kalman_filter_loop(z.double(), mask, 1e-3, 1.0)
    assert (got.double() - expected).abs().max().item() <= ATOL
    assert kalman._TRITON_FAILED  # "auto" takes the scan from now on, without a warning
    kalman_filter(z, mask, 1e-3, 1.0)
    with pytest.raises(RuntimeError, match="no kernel"):  # asked for: no fallback
        kalman_filter(z, mask, 1e-3, 1.0, backend="triton")


def signal_batch(rows: int, length: int, seed: int, dtype=torch.float32):
    """A log-ratio signal with zeros, values past both ends of the bins' range, a row
    all masked and NaN where masked; advantages of both signs and zeros."""
    gen = torch.Generator().manual_seed(seed)
    signal = (0.3 * torch.randn(rows, length, generator=gen)).to(dtype)
    signal[0, :3] = torch.tensor([0.0, 1e-12, -1e6], dtype=dtype)
    mask = torch.rand(rows, length, generator=gen) >= 0.15
    mask[min(1, rows - 1)] = False
    mask[0, :3] = True
    advantages = torch.randn(rows, length, generator=gen).to(dtype)
    advantages[:, ::7] = 0.0
    signal = signal.masked_fill(~mask, float("nan"))
    return signal, advantages, mask


def moments_of(values: torch.Tensor) -> tuple[int, float, float, float, float]:
    """(n, mean, sum of squared deviations, min, max), written out in float64."""
    x = values.double()
    mean = x.mean().item()
    return len(x), mean, ((x - mean) ** 2).sum().item(), x.min().item(), x.max().item()


@pytest.mark.parametrize(("rows", "length"), [(3, 10), (5, 50), (9, 37)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ratio_rows_match_the_tensor_code(rows, length, dtype) -> None:
    from ratioscope.functional import histogram as bins
    from ratioscope.functional.ratio_rows import ratio_rows
    from ratioscope.functional.surrogate import ppo_row_sums

    signal, advantages, mask = signal_batch(rows, length, seed=rows * length, dtype=dtype)
    clip = (0.2, 0.28)
    got = ratio_rows(signal, advantages, mask, clip, triton=True)
    values = signal[mask]
    assert got.counts is None and got.summary is not None  # left on the device
    counts, moments = got.histogram()
    assert torch.equal(counts, bins.histogram(values))
    n, mean, spread, low, high = moments
    expected = moments_of(values)
    assert n == expected[0] and (low, high) == expected[3:]
    assert mean == pytest.approx(expected[1], rel=1e-12, abs=1e-15)
    assert spread == pytest.approx(expected[2], rel=1e-12)
    clipped, clipped_terms, plain_terms = ppo_row_sums(
        torch.where(mask, signal, torch.zeros((), dtype=dtype)), advantages, mask, clip
    )
    assert got.ppo is not None
    assert torch.equal(got.ppo[0], clipped)
    assert torch.allclose(got.ppo[1], clipped_terms, rtol=1e-12, atol=1e-12)
    assert torch.allclose(got.ppo[2], plain_terms, rtol=1e-12, atol=1e-12)
    without = ratio_rows(signal, None, mask, clip, triton=True)
    assert without.ppo is None and torch.equal(without.histogram()[0], counts)
    # the summary read back elsewhere (a chunk's one read) gives the same
    assert torch.equal(got.histogram(got.summary.clone())[0], counts)


def test_ratio_rows_bins_on_both_sides_of_every_edge() -> None:
    from ratioscope.functional import histogram as bins
    from ratioscope.functional.ratio_rows import ratio_rows

    k = torch.arange(0, bins.MAGNITUDE_BINS + 1, 7, dtype=torch.float64)
    edges = 10.0 ** (bins.MIN_EXP + k / bins.PER_DECADE)
    near = torch.cat([edges * (1 - 1e-9), edges * (1 + 1e-9)])
    values = torch.cat([near, -near]).view(4, -1)
    mask = torch.ones(values.shape, dtype=torch.bool)
    got = ratio_rows(values, None, mask, (0.2, 0.2), triton=True)
    assert torch.equal(got.histogram()[0], bins.histogram(values.flatten()))


def test_ratio_rows_of_no_rows() -> None:
    from ratioscope.functional.moments import EMPTY
    from ratioscope.functional.ratio_rows import ratio_rows

    empty = torch.zeros(0, 8)
    got = ratio_rows(empty, empty, torch.zeros(0, 8, dtype=torch.bool), (0.2, 0.2), triton=True)
    counts, moments = got.histogram()
    assert int(counts.sum()) == 0 and moments == EMPTY
    assert got.ppo is not None and got.ppo[0].shape == (0,)


@pytest.mark.parametrize("n", [0, 5, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram_moments_match_the_tensor_code(n, dtype, monkeypatch) -> None:
    from ratioscope.functional import histogram as bins
    from ratioscope.functional.moments import EMPTY

    monkeypatch.setattr(_triton_kernels, "HISTOGRAM_BLOCK", TILE)  # 32 programs of 2 tiles
    gen = torch.Generator().manual_seed(n)
    values = (torch.randn(n, generator=gen) * torch.rand(n, generator=gen) ** 8).to(dtype)
    values[: min(n, 3)] = torch.tensor([0.0, 1e-12, -1e6], dtype=dtype)[: min(n, 3)]
    counted = device_histogram.counted_by_kernel(values, with_sums=True, triton=True)
    assert counted is not None
    counts, moments, sums = counted
    expected_counts, expected_sums = bins.histogram_sums(values)
    assert torch.equal(counts, expected_counts) and counts.dtype == torch.int64
    assert sums is not None and torch.allclose(sums, expected_sums, rtol=1e-12, atol=1e-300)
    if n == 0:
        assert moments == EMPTY
        return
    expected = moments_of(values)
    assert moments.n == expected[0] and (moments.minimum, moments.maximum) == expected[3:]
    assert moments.mean == pytest.approx(expected[1], rel=1e-12, abs=1e-15)
    assert moments.m2 == pytest.approx(expected[2], rel=1e-12)
    without = device_histogram.counted_by_kernel(values, triton=True)
    assert without is not None and torch.equal(without[0], counts) and without[2] is None


def test_histogram_add_by_the_kernel_equals_the_tensor_code(monkeypatch) -> None:
    from ratioscope.sections.summaries import Histogram

    values = torch.randn(3000, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    by_tensors, by_kernel = Histogram.with_sums(), Histogram.with_sums()
    by_tensors.add(values)
    by_tensors.add(values[:100])
    counted = device_histogram.counted_by_kernel
    monkeypatch.setattr(
        device_histogram, "counted_by_kernel", lambda v, s: counted(v, s, triton=True)
    )
    by_kernel.add(values)
    by_kernel.add(values[:100])
    assert torch.equal(by_kernel.counts, by_tensors.counts)
    assert by_kernel.sums is not None and by_tensors.sums is not None
    assert torch.allclose(by_kernel.sums, by_tensors.sums, rtol=1e-12, atol=0.0)
    assert by_kernel.moments.count == by_tensors.moments.count == 3100
    assert by_kernel.moments.mean == pytest.approx(by_tensors.moments.mean, rel=1e-12)
    assert by_kernel.moments.std == pytest.approx(by_tensors.moments.std, rel=1e-12)


def vitals_inputs(rows: int, length: int, seed: int):
    """Entropy (with zeros and a value past the bins' top), old entropy, advantages with
    zeros, log-probs, a ragged mask with an empty row, and each row's correctness."""
    gen = torch.Generator().manual_seed(seed)
    entropy = torch.rand(rows, length, generator=gen) * 3
    entropy[0, :2] = torch.tensor([0.0, 2e4])
    old = entropy + 0.1 * torch.randn(rows, length, generator=gen)
    advantages = torch.randn(rows, length, generator=gen).double()
    advantages[:, ::5] = 0.0
    log_probs = -torch.rand(rows, length, generator=gen) * 4
    mask = torch.rand(rows, length, generator=gen) >= 0.2
    mask[min(1, rows - 1)] = False
    mask[0, :2] = True
    correct = torch.rand(rows, generator=gen) >= 0.5
    return entropy, old, advantages, log_probs, mask, correct


def assert_close_vitals(got, expected) -> None:
    """Two VitalsRows: integers equal, floats to 1e-12."""
    approx = {"rel": 1e-12, "abs": 1e-12}
    for name in ("counts", "row_tokens"):
        a, b = getattr(got, name), getattr(expected, name)
        assert (a is None) == (b is None) and (a is None or torch.equal(a.long(), b.long())), name
    if expected.row_abs is not None:
        assert torch.allclose(got.row_abs, expected.row_abs, rtol=1e-12, atol=1e-12)
    assert got.zero == expected.zero
    if expected.moments is not None:
        assert got.moments.n == expected.moments.n
        assert got.moments[1:] == pytest.approx(expected.moments[1:], **approx)
    for name in ("right", "wrong", "old", "change"):
        a, b = getattr(got, name), getattr(expected, name)
        assert (a is None) == (b is None), name
        if b is not None:
            assert a.count == b.count and a.total == pytest.approx(b.total, **approx), name
    for name in ("pairs_a", "pairs_pa"):
        a, b = getattr(got, name), getattr(expected, name)
        assert (a is None) == (b is None), name
        if b is not None:
            assert a.count == b.count, name
            assert [a.mean_x, a.mean_y, a.comoment] == pytest.approx(
                [b.mean_x, b.mean_y, b.comoment], **approx
            ), name


@pytest.mark.parametrize(("rows", "length"), [(3, 10), (5, 50), (9, 37)])
@pytest.mark.parametrize(
    "present",
    ["all", "no-correct", "entropy-only", "advantages-only", "no-log-probs"],
)
def test_vitals_rows_match_the_compiled_loop(rows, length, present) -> None:
    from ratioscope.functional.vitals_rows import vitals_rows

    entropy, old, advantages, log_probs, mask, correct = vitals_inputs(rows, length, rows)
    inputs = {
        "all": (entropy, old, advantages, log_probs, correct),
        "no-correct": (entropy, old, advantages, log_probs, None),
        "entropy-only": (entropy, None, None, None, correct),
        "advantages-only": (None, None, advantages, log_probs, None),
        "no-log-probs": (entropy, old, advantages, None, correct),
    }[present]
    *values, right = inputs
    got = vitals_rows(*values, mask, right, triton=True)
    expected = vitals_rows(*values, mask, right, triton=False)
    assert_close_vitals(got, expected)


@pytest.mark.parametrize(("rows", "length"), [(3, 10), (5, 50), (9, 37)])
@pytest.mark.parametrize("scale", [1e-6, 0.3, 3.0])
def test_mismatch_partials_match_the_compiled_passes(rows, length, scale) -> None:
    import dataclasses

    from ratioscope.functional.mismatch import mismatch_partials

    gen = torch.Generator().manual_seed(rows * length)
    z = scale * torch.randn(rows, length, generator=gen, dtype=torch.float64)
    mask = torch.rand(rows, length, generator=gen) >= 0.2
    mask[min(1, rows - 1)] = False  # a row with no valid token
    z[~mask] = float("nan")
    got = dataclasses.asdict(mismatch_partials(z, mask, 1.5, backend="triton"))
    expected = dataclasses.asdict(mismatch_partials(z, mask, 1.5, backend="compiled"))
    reference = dataclasses.asdict(mismatch_partials(z, mask, 1.5, backend="torch"))
    for name, value in expected.items():
        if isinstance(value, int):
            assert got[name] == value == reference[name], name
        else:  # k3 = sum expm1(z) - z cancels for tiny z: held to its terms' rounding
            tolerance = 1e-9 if name == "sum_k3" else 1e-12
            assert got[name] == pytest.approx(value, rel=tolerance, abs=1e-300), name
            assert got[name] == pytest.approx(reference[name], rel=tolerance, abs=1e-300), name


def test_mismatch_of_no_valid_token() -> None:
    from ratioscope.functional.mismatch import MismatchPartials, mismatch_partials

    mask = torch.zeros(4, 20, dtype=torch.bool)
    got = mismatch_partials(torch.zeros(4, 20), mask, backend="triton")
    assert got == MismatchPartials()
    assert mismatch_partials(torch.zeros(0, 20), mask[:0], backend="triton") == MismatchPartials()


def covariance_passes(kind, arrays, chunk_rows: int, device: str = "cpu", **options):
    """Every pass of ``kind`` (FusedKernelPasses or DeviceKernelPasses) over the rows in
    chunks of ``chunk_rows`` on ``device``, as the section feeds them: (the passes, the
    last pass's [B, 3] row sums)."""
    import numpy as np
    from covariance_batches import CLIP

    tensors = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in arrays.items()}
    mask = tensors["mask"]
    log_ratio = torch.where(mask, tensors["log_probs"] - tensors["old_log_probs"], 0.0)
    passes = kind(CLIP, (0.05, 5.0), (0.5, 0.1), 50, **options)
    row_sums = []
    for index in range(5):
        for start in range(0, mask.shape[0], chunk_rows):
            rows = slice(start, start + chunk_rows)
            got = passes.add(
                index, tensors["log_probs"][rows], tensors["advantages"][rows], mask[rows],
                tensors["group"][rows], log_ratio[rows],
            )  # fmt: skip
            if got is not None:
                row_sums.append(got)
    return passes, torch.cat(row_sums)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("chunk_rows", "keep"), [(7, True), (7, False), (40, False)])
def test_covariance_passes_match_the_compiled_passes(dtype, chunk_rows, keep) -> None:
    import numpy as np
    from covariance_batches import covariance_arrays

    from ratioscope.functional import _kernels
    from ratioscope.functional.covariance_device import DeviceKernelPasses
    from ratioscope.functional.covariance_fused import FusedKernelPasses

    if not _kernels.available():
        pytest.skip("numba is not available")
    arrays = covariance_arrays(4, dtype=getattr(np, dtype))
    expected, expected_rows = covariance_passes(FusedKernelPasses, arrays, chunk_rows)
    got, got_rows = covariance_passes(DeviceKernelPasses, arrays, chunk_rows, keep=keep)
    # the data reach every count: Clip-Cov's band, w under each threshold, flat scopes
    assert expected.eligible > 0 and expected.totals.below.min() > 0 and expected.flat.any()
    assert (got.tokens, got.eligible) == (expected.tokens, expected.eligible)
    assert len(got.scopes) == len(expected.scopes) == 7
    # the empty row's means are 0 / 0 on both
    assert torch.allclose(got_rows, expected_rows, rtol=1e-12, atol=1e-13, equal_nan=True)
    totals, reference = got.totals, expected.totals
    for name in ("c_counts", "w_counts", "normalised_counts", "weight_counts", "below"):
        assert np.array_equal(getattr(totals, name), getattr(reference, name)), name
    np.testing.assert_allclose(totals.extremes, reference.extremes, rtol=1e-14)
    np.testing.assert_allclose(totals.c_sums, reference.c_sums, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(totals.mass, reference.mass, rtol=1e-12)
    for q in range(3):
        mine, theirs = totals.moment(q, got.tokens), reference.moment(q, expected.tokens)
        assert mine[0] == theirs[0] and mine[3:] == pytest.approx(theirs[3:], rel=1e-14)
        assert mine[1:3] == pytest.approx(theirs[1:3], rel=1e-12, abs=1e-15), q


def test_covariance_passes_read_the_totals_once() -> None:
    from covariance_batches import covariance_arrays

    from ratioscope.functional.covariance_device import DeviceKernelPasses

    passes, _ = covariance_passes(DeviceKernelPasses, covariance_arrays(5), 9, keep=True)
    first = passes.totals
    assert passes.totals is first and passes.tokens == int(first.c_counts.sum())
    with pytest.raises(ValueError, match="pass 2 after pass 0"):
        fresh = DeviceKernelPasses((0.2, 0.2), (1.0, 5.0), (0.5, 0.1), 50)
        values, mask = torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool)
        fresh.add(0, values, values, mask, None, values)
        fresh.add(2, values, values, mask, None, values)
    with pytest.raises(ValueError, match="after the last pass"):
        _ = fresh.totals


def test_clip_cov_band_reads_c_as_stored() -> None:
    """Clip-Cov compares c as torch stores it (float32 for float32 log pi): one row with
    batch means (3.75 + 1e-7) / 3 and 0, where the first token's c = (4 a - 2 b) / 3 is
    5 - 7e-8 in float64 but 5.0 in float32, outside the band (1, 5); the others' c,
    about 1.25, inside."""
    from ratioscope.functional.covariance import clip_cov_touched, token_covariance
    from ratioscope.functional.covariance_device import DeviceKernelPasses

    log_probs = torch.tensor([[3.75, 1e-7, 0.0]])
    advantages = torch.tensor([[2.0, -1.0, -1.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    log_ratio = torch.zeros(1, 3)
    passes = DeviceKernelPasses((0.2, 0.2), (1.0, 5.0), (0.5, 0.1), 50)
    for index in range(5):
        passes.add(index, log_probs, advantages, mask, None, log_ratio)
    c = token_covariance(log_probs, advantages, mask)
    exact = token_covariance(log_probs.double(), advantages.double(), mask)
    assert float(c[0, 0]) == 5.0 and float(exact[0, 0]) < 5.0
    reference = clip_cov_touched(c, mask, bounds=(1.0, 5.0), exclude=torch.zeros_like(mask))
    assert passes.eligible == reference.eligible == 2


@pytest.mark.parametrize("scope", ["batch", "group"])
@pytest.mark.parametrize("chunk_elements", [33 * 8, 33 * 24])
def test_covariance_section_by_the_kernels_equals_the_torch_path(
    tmp_path, monkeypatch: pytest.MonkeyPatch, scope, chunk_elements
) -> None:
    from covariance_batches import CLIP, covariance_arrays, write_arrays
    from documents import assert_documents_close

    import ratioscope
    import ratioscope.sections.covariance as covariance_section
    from ratioscope.functional import covariance_device

    path = tmp_path / "dump.safetensors"
    write_arrays(covariance_arrays(1, rows=24), path)
    options = {"sections": ["covariance"], "chunk_elements": chunk_elements, "clip": CLIP}
    monkeypatch.setattr(covariance_section, "usable", lambda *tensors: False)  # not numba's
    reference = ratioscope.analyze(path, cov_scope=scope, **options).to_dict()["covariance"]
    calls = []
    added = covariance_device.DeviceKernelPasses.add

    def counted(self, index, *args):
        calls.append(index)
        return added(self, index, *args)

    monkeypatch.setattr(covariance_device.DeviceKernelPasses, "add", counted)
    monkeypatch.setattr(covariance_device, "usable", lambda *values, mask: True)
    got = ratioscope.analyze(path, cov_scope=scope, **options).to_dict()["covariance"]
    assert sorted(set(calls)) == [0, 1, 2, 3, 4]  # the kernels' path is the one that ran
    assert got["scope"] == scope and got["clip_cov"]["eligible"] > 0
    assert_documents_close(got, reference, rel=1e-12, abs_tol=1e-15, where="covariance")


@pytest.mark.parametrize(("rows", "length"), [(3, 10), (5, 50), (9, 37)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_advantage_and_difference_rows_match_the_tensor_code(rows, length, dtype) -> None:
    import numpy as np

    from ratioscope.functional import _kernels
    from ratioscope.functional.surrogate import advantage_sums_torch

    gen = torch.Generator().manual_seed(rows + length)
    advantages = torch.randn(rows, length, generator=gen).to(dtype)
    advantages[0] = 0.0  # neither sign
    mask = torch.rand(rows, length, generator=gen) > 0.3
    mask[1] = False  # no valid token
    advantages[~mask] = float("nan")  # never read
    sums, counts = _triton_kernels.advantage_rows(advantages, mask)
    expected = advantage_sums_torch(advantages, mask)
    assert torch.equal(counts[0], expected.n_positive) and torch.equal(
        counts[1], expected.n_negative
    )
    assert torch.allclose(sums[0], expected.positive, rtol=1e-13, atol=1e-13)
    assert torch.allclose(sums[1], expected.negative, rtol=1e-13, atol=1e-13)
    if _kernels.available():
        loop = _kernels.advantage_row_sums(advantages.numpy(), mask.numpy())
        assert torch.allclose(sums, torch.from_numpy(np.stack(loop[:2])), rtol=1e-13, atol=1e-13)
    log_probs = -torch.rand(rows, length, generator=gen).to(dtype)
    reference = -torch.rand(rows, length, generator=gen).to(dtype)
    log_probs[~mask] = float("nan")
    found = _triton_kernels.difference_rows(log_probs, reference, mask)
    assert torch.equal(found[0], mask.sum(1).double())
    x, y = log_probs.double(), reference.double()
    assert torch.allclose(found[1], torch.where(mask, x, 0.0).sum(1), rtol=1e-13, atol=1e-13)
    assert torch.allclose(found[2], torch.where(mask, x - y, 0.0).sum(1), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("rows", [0, 1, 7, 2500])
def test_aggregation_rows_match_the_tensor_code(rows, monkeypatch) -> None:
    from ratioscope.functional.surrogate import ppo_aggregation_terms

    # a small block: several blocks of rows and a part one in the interpreter
    monkeypatch.setattr(_triton_kernels, "AGGREGATION_BLOCK", 64)
    gen = torch.Generator().manual_seed(rows)
    lengths = torch.randint(0, 40, (rows,), generator=gen)
    lengths[: min(rows, 3)] = 0  # rows without tokens: out of the sums of means
    clipped = torch.minimum(torch.randint(0, 9, (rows,), generator=gen), lengths)
    row_sums = torch.randn(rows, 2, generator=gen, dtype=torch.float64) * lengths[:, None]
    row_sums[:1] = float("nan")  # an empty row's sums are never divided in
    first, second = row_sums[:, 0], row_sums[:, 1]  # strided columns, as ratio_rows gives
    got = _triton_kernels.aggregation_rows(clipped, first, second, lengths)
    expected = ppo_aggregation_terms(clipped, first, second, lengths)  # the tensor code
    assert got.dtype == torch.float64 and got.shape == (7,)
    assert torch.equal(got[:3], expected[:3])  # the counts, exactly
    # the sums: every row's sum is NaN once an empty row's NaN is summed, as torch does
    torch.testing.assert_close(got[3:], expected[3:], rtol=1e-13, atol=1e-13, equal_nan=True)
    if rows > 3:
        assert torch.isnan(got[3]) and torch.isfinite(got[4])
        assert got[2] == float(int((lengths > 0).sum()))


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # the interpreter's log 0
def test_class_cells_match_the_tensor_code(log, dtype, monkeypatch) -> None:
    from ratioscope.functional import histogram as bins

    tensor_code = device_histogram.class_cells
    monkeypatch.setattr(_triton_kernels, "CELLS_BLOCK", 16)  # several tiles a row
    gen = torch.Generator().manual_seed(int(log))
    rows, classes, length = 4, 3, 37
    values = (torch.randn(rows, length, generator=gen, dtype=torch.float64) * 4).exp()
    if not log:
        values = values * torch.sign(torch.randn(rows, length, generator=gen))
    values[0, :4] = 0.0  # the centre bin (log: the lowest)
    values[1, 5] = float("nan")  # never kept
    keep = torch.rand(rows, classes, length, generator=gen) < 0.6
    keep[1, :, 5] = False
    keep[2, 1] = False  # a cell that holds nothing
    values = values.to(dtype)
    counts, table = _triton_kernels.class_cells(values, keep, log)
    expected_counts, expected_table = tensor_code(values, keep, log)  # CPU: the tensor code
    assert counts.dtype == torch.int64 and counts.shape == (rows, classes, bins.NUM_BINS)
    assert torch.equal(counts, expected_counts)
    assert torch.equal(table[..., 0], expected_table[..., 0])  # the counts
    assert torch.equal(table[..., 3:], expected_table[..., 3:])  # min and max, exactly
    torch.testing.assert_close(table, expected_table, rtol=1e-12, atol=1e-13)
    assert table[2, 1].tolist() == [0.0, 0.0, 0.0, float("inf"), float("-inf")]
    if log:  # a kept negative value: not counted, and the cell's minimum says so
        values[3, 0], keep[3, :, 0] = -1.0, True
        counts, table = _triton_kernels.class_cells(values, keep, log)
        assert (table[3, :, 3] == -1.0).all()
        assert torch.equal(counts[3].sum(1), (table[3, :, 0] - 1).long())


def test_advantage_sums_and_fpa_terms_by_the_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from ratioscope.functional import _kernels, fpa, surrogate

    gen = torch.Generator().manual_seed(2)
    advantages, log_probs, reference = torch.randn(3, 6, 30, generator=gen)
    mask = torch.rand(6, 30, generator=gen) > 0.3
    mask[1] = False  # no valid token: NaN means
    monkeypatch.setattr(_kernels, "can_take", lambda *tensors, **options: False)
    expected_sums = surrogate.advantage_sums(advantages, mask)
    expected_terms = fpa.approximate_sequence_terms(log_probs, reference, mask, [0.5, 2.0])
    monkeypatch.setattr(_triton_kernels, "on_gpu", lambda *values, mask=None: True)
    got_sums = surrogate.advantage_sums(advantages, mask)
    got_terms = fpa.approximate_sequence_terms(log_probs, reference, mask, [0.5, 2.0])
    for got, expected in (
        (dataclasses.asdict(got_sums), dataclasses.asdict(expected_sums)),
        (dataclasses.asdict(got_terms), dataclasses.asdict(expected_terms)),
    ):
        for name, value in expected.items():
            assert got[name].dtype == value.dtype, name
            assert torch.allclose(got[name], value, rtol=1e-13, atol=1e-13, equal_nan=True), name
    assert torch.isnan(got_terms.log_ratio_per_token[1])


def state_signal(rows: int, length: int, seed: int, dtype=torch.float32):
    """Log-ratios in the three states with runs of every length (some across tiles),
    holes in the mask inside runs, rows of 0, 1 and 2 valid tokens, and values exactly
    at the thresholds (on the band: neither up nor down)."""
    from ratioscope.functional import token_stats

    gen = torch.Generator().manual_seed(seed)
    lower, upper = token_stats._band_thresholds(token_stats.DEFAULT_ON_BAND, dtype)
    choices = torch.tensor([-0.1, 0.0, 0.1, lower, upper], dtype=torch.float64).to(dtype)
    # runs: each row's picks repeated over a stretch of its own (1 to a quarter row)
    stretch = torch.randint(1, max(2, length // 4), (rows, 1), generator=gen)
    picks = torch.randint(0, 5, (rows, length), generator=gen)
    values = choices[picks.gather(1, torch.arange(length)[None, :] // stretch)]
    mask = torch.rand(rows, length, generator=gen) > 0.15
    mask[0], mask[1], mask[2] = False, False, False
    mask[1, 3] = True
    mask[2, [0, length - 1]] = True
    return values, mask


@pytest.mark.parametrize(("rows", "length", "window"), [(6, 5, 2), (9, 70, 5), (7, 100, 50)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_state_runs_match_the_compiled_loop_and_the_tensor_code(rows, length, window, dtype):
    from ratioscope.functional import _kernels, token_stats

    values, mask = state_signal(rows, length, seed=rows * length, dtype=dtype)
    lower, upper = token_stats._band_thresholds(token_stats.DEFAULT_ON_BAND, dtype)
    got = _triton_kernels.state_runs(values, mask, lower, upper, window)
    packed = token_stats._pack(values, mask)
    reference = token_stats._state_statistics_torch(packed, token_stats.DEFAULT_ON_BAND, window)
    mine = token_stats._state_statistics_of(*got, window=window)
    assert torch.equal(got[0], mask.sum(1))
    assert torch.equal(mine.runs.token_count, reference.runs.token_count)
    assert torch.equal(mine.runs.run_count, reference.runs.run_count)
    assert torch.equal(mine.runs.histogram, reference.runs.histogram)
    assert int(mine.runs.run_count.sum()) > rows  # states change within rows
    for name in ("switch_frequency", "window_frequency"):
        assert torch.allclose(
            getattr(mine, name), getattr(reference, name), rtol=1e-15, equal_nan=True
        ), name
    if _kernels.available():  # numba's loop: the same integer counts
        loop = _kernels.state_runs(values.numpy(), mask.numpy(), lower, upper, window)
        for found, expected in zip(got[:5], loop[:5], strict=True):
            assert torch.equal(found, torch.from_numpy(expected))


@pytest.mark.parametrize(("rows", "length"), [(3, 10), (5, 50), (9, 37)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_entropy_quadrants_match_the_tensor_code(monkeypatch, rows, length, dtype) -> None:
    import dataclasses

    from ratioscope.functional import _kernels, tepo

    gen = torch.Generator().manual_seed(rows * length)
    advantages = torch.randint(-1, 2, (rows, length), generator=gen).to(dtype)  # and 0
    entropy = torch.rand(rows, length, generator=gen).to(dtype)
    old = torch.where(
        torch.rand(rows, length, generator=gen) > 0.8,
        entropy,
        torch.rand(rows, length, generator=gen),
    ).to(dtype)
    mask = torch.rand(rows, length, generator=gen) > 0.2
    mask[0] = False  # no valid token
    counts, in_mask = _triton_kernels.entropy_quadrants(advantages, entropy, old, mask)
    expected = tepo.kl_mask_quadrants(advantages, entropy, old, mask)
    assert counts.tolist() == [*dataclasses.astuple(expected)]
    assert torch.equal(in_mask, tepo.kl_mask(advantages, entropy, old, mask).sum(1))
    if rows * length > 100:
        assert min(counts.tolist()) > 0  # every quadrant reached, dH == 0 among them
    # and as kl_mask_quadrants_by_row takes it where the tensors are a GPU's
    monkeypatch.setattr(_triton_kernels, "on_gpu", lambda *values, mask=None: True)
    monkeypatch.setattr(_kernels, "can_take", lambda *tensors, **options: False)
    quadrants, rows_in_mask = tepo.kl_mask_quadrants_by_row(advantages, entropy, old, mask)
    assert quadrants == expected and torch.equal(rows_in_mask, in_mask)


def autocorrelations(rows: int, length: int, seed: int):
    """([rows, 2 length] float64 autocorrelations of random rows of lengths 0 to
    ``length``, their lengths [rows]): each row's a(m) at lags m < L, noise past L (which
    the band must not read)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, length + 1, (rows,), generator=gen)
    lengths[:4] = torch.tensor([0, 1, 2, length])[: min(rows, 4)]
    auto = torch.randn(rows, 2 * length, generator=gen, dtype=torch.float64)
    for row, size in enumerate(lengths.tolist()):
        x = torch.randn(size, generator=gen, dtype=torch.float64)
        x -= x.mean() if size else 0.0
        auto[row, :size] = torch.tensor([float((x[: size - m] * x[m:]).sum()) for m in range(size)])
    return auto, lengths


@pytest.mark.parametrize(("rows", "length"), [(6, 5), (9, 40), (5, 100)])
@pytest.mark.parametrize("cutoff", [0.1, 0.5, 1.0])
def test_lfr_band_matches_the_tensor_code_and_the_compiled_loop(rows, length, cutoff) -> None:
    from ratioscope.functional import _kernels, token_stats

    auto, lengths = autocorrelations(rows, length, seed=rows * length)
    width = token_stats._band_widths(lengths, cutoff)
    band, energy = _triton_kernels.lfr_band(auto, lengths, width)
    # the tensor code sums every lag of the first T, zero at and past L
    lags = torch.arange(length)[None, :] < lengths[:, None]
    masked = torch.where(lags, auto[:, :length], 0.0)
    size = lengths.clamp(min=1).to(torch.float64).unsqueeze(1)
    expected = token_stats._band_torch(masked, size, width.unsqueeze(1))
    scale = (lengths.to(torch.float64) * auto[:, 0].abs()).clamp(min=1.0)
    assert torch.all((band - expected).abs() <= 1e-12 * scale), (band, expected)
    assert torch.equal(energy, masked[:, 0])
    if _kernels.available():  # numba's loop, which reduces its angles in integers too
        compiled = token_stats._band_compiled(masked, lengths, width)
        assert torch.all((band - compiled).abs() <= 1e-13 * scale), (band, compiled)


def test_lfr_band_by_a_strided_view() -> None:
    auto, lengths = autocorrelations(5, 30, seed=3)
    wide = torch.zeros(5, 100, dtype=torch.float64)
    wide[:, 7 : 7 + 60] = auto
    width = torch.full((5,), 3.0, dtype=torch.float64)
    assert torch.equal(
        torch.stack(_triton_kernels.lfr_band(wide[:, 7:], lengths, width)),
        torch.stack(_triton_kernels.lfr_band(auto, lengths, width)),
    )


def packed_rows(rows: int, length: int, seed: int, dtype=torch.float32):
    """Packed rows (valid tokens first) of lengths 0, 1, 2, T and random, one constant
    row, and garbage past each row's L (which the kernel must not read)."""
    from ratioscope.functional import token_stats

    gen = torch.Generator().manual_seed(seed)
    values = (0.3 * torch.randn(rows, length, generator=gen)).to(dtype)
    lengths = torch.randint(0, length + 1, (rows,), generator=gen)
    lengths[:4] = torch.tensor([0, 1, 2, length])
    values[4, : int(lengths[4])] = 0.125  # constant: no energy
    prefix = torch.arange(length)[None, :] < lengths[:, None]
    packed = token_stats._Packed(torch.where(prefix, values, 0.0), lengths, prefix)
    garbage = torch.where(prefix, values, torch.tensor(float("nan"), dtype=dtype))
    return packed, garbage


@pytest.mark.parametrize(("length", "window"), [(7, 1), (40, 3), (130, 50), (64, 64), (20, 50)])
@pytest.mark.parametrize("space", ["log", "ratio"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_centre_rows_match_the_tensor_code(length, window, space, dtype) -> None:
    from ratioscope.functional import token_stats

    packed, garbage = packed_rows(9, length, seed=length + window, dtype=dtype)
    centred, stats = _triton_kernels.centre_rows(garbage, packed.lengths, window, space == "ratio")
    expected = token_stats._centre(packed, space)
    assert torch.allclose(centred, expected.values, rtol=0, atol=1e-14)
    assert torch.equal(stats[:, 2] != 0, expected.energetic)
    assert not bool(expected.energetic[[0, 1, 4]].any())  # no token, one, constant
    for got, reference in (
        (stats[:, 0], token_stats._global_variance(expected)),
        (stats[:, 1], token_stats._local_variance(expected, window)),
    ):
        assert torch.allclose(got, reference, rtol=1e-12, atol=1e-15, equal_nan=True)
    assert torch.isnan(stats[0, :2]).all() and stats[1, 1] == 0.0  # no token; one


def test_centre_rows_take_windows_up_to_their_lanes() -> None:
    packed, _ = packed_rows(5, 10, seed=1)
    with pytest.raises(ValueError, match="windows of 1 to"):
        _triton_kernels.centre_rows(packed.values, packed.lengths, 0, False)
    with pytest.raises(ValueError, match="windows of 1 to"):
        _triton_kernels.centre_rows(
            packed.values, packed.lengths, _triton_kernels.MAX_WINDOW + 1, False
        )


@pytest.mark.parametrize("space", ["log", "ratio"])
def test_signal_statistics_with_the_kernel_band(monkeypatch: pytest.MonkeyPatch, space) -> None:
    from ratioscope.functional import token_stats

    gen = torch.Generator().manual_seed(8)
    signal = 0.05 * torch.randn(12, 70, generator=gen)
    mask = torch.rand(12, 70, generator=gen) > 0.2
    mask[2] = False  # no valid token
    mask[3, 1:] = False  # one
    signal[4] = 0.25  # constant: no energy
    expected = token_stats.signal_statistics(signal, mask, space=space, backend="torch")
    calls = []

    def by_kernel(values):
        calls.append(values.shape)
        return True

    # "auto" as on a GPU: the tensor path, with its kernels; "torch" keeps the tensor code
    monkeypatch.setattr(token_stats, "_compiled", lambda signal, backend: False)
    monkeypatch.setattr(token_stats, "_band_by_kernel", by_kernel)
    monkeypatch.setattr(token_stats, "_centre_by_kernel", lambda values, window: by_kernel(values))
    assert token_stats.signal_statistics(signal, mask, space=space, backend="torch") and not calls
    got = token_stats.signal_statistics(signal, mask, space=space, backend="auto")
    assert len(calls) == 2  # the kernels are the ones that ran
    assert torch.allclose(
        got.low_frequency_ratio, expected.low_frequency_ratio, rtol=0, atol=1e-12, equal_nan=True
    )
    assert torch.isnan(got.low_frequency_ratio[[2, 3, 4]]).all()
    for name in ("periodogram", "global_variance", "local_variance"):
        mine, theirs = getattr(got, name), getattr(expected, name)
        assert torch.allclose(mine, theirs, rtol=1e-12, atol=1e-15, equal_nan=True), name


def test_the_sections_by_the_kernels_give_the_cpu_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the sections as a GPU runs them (the ratio rows, the histograms, the vitals, the
    # mismatch sums, the covariance passes, the spectra's centring and band, the
    # advantage sums and FPA's row sums by the Triton kernels), on one bundled step: the
    # report's numbers the CPU's, within rounding
    import sys
    from pathlib import Path

    import ratioscope
    from ratioscope.functional import histogram as bins
    from ratioscope.sections import ratios

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    from gpu_check import compare_documents

    path = root / "sample_data" / "verl" / "step_0008.pt"
    expected = ratioscope.analyze(path).to_dict()
    from ratioscope.sections import vitals

    calls = []

    def by_the_kernel(module, name: str, mark: int) -> None:
        """``module.name`` called with ``triton=True``, each call marked in ``calls``."""
        numba_loop = getattr(module, name)

        def kernel(*args, **kwargs):
            calls.append(mark)
            return numba_loop(*args, **kwargs, triton=True)

        monkeypatch.setattr(module, name, kernel)

    by_the_kernel(ratios, "ratio_rows", 1)
    by_the_kernel(vitals, "vitals_rows", 2)
    counted = device_histogram.counted_by_kernel
    histograms = []

    def histograms_by_the_kernel(values, with_sums):
        histograms.append(with_sums)
        return counted(values, with_sums, triton=True)

    monkeypatch.setattr(device_histogram, "counted_by_kernel", histograms_by_the_kernel)
    on_gpu = _triton_kernels.on_gpu

    def rows_on_the_kernel(*values, mask=None, dtypes=None):
        # asked with a mask on the CPU: by the mismatch sums, the advantage sums, FPA's
        # row sums, the states' counts and TEPO's quadrants, which ask before numba's
        # loops (the vitals' question comes after numba's loop has said yes); for
        # float64 row sums without one, by the PPO totals
        if mask is None and dtypes == (torch.float64,):
            calls.append(6)
            return True
        if mask is None:
            return on_gpu(*values)
        calls.append(3)
        return True

    monkeypatch.setattr(_triton_kernels, "on_gpu", rows_on_the_kernel)
    ran = []
    kernels = (
        "advantage_rows", "difference_rows", "state_runs", "entropy_quadrants", "aggregation_rows"
    )  # fmt: skip
    for name in kernels:
        by_kernel = getattr(_triton_kernels, name)

        def marked(*args, by_kernel=by_kernel, name=name):
            ran.append(name)
            return by_kernel(*args)

        monkeypatch.setattr(_triton_kernels, name, marked)
    import ratioscope.sections.covariance as covariance_section
    from ratioscope.functional import covariance_device

    def covariance_on_the_kernel(*values, mask):
        calls.append(4)
        return True

    monkeypatch.setattr(covariance_section, "usable", lambda *tensors: False)  # numba's
    monkeypatch.setattr(covariance_device, "usable", covariance_on_the_kernel)
    from ratioscope.functional import token_stats

    def band_by_the_kernel(values):
        calls.append(5)
        return True

    # the states and spectra by the tensor path (a GPU's), with its kernels
    monkeypatch.setattr(token_stats, "_compiled", lambda signal, backend: False)
    monkeypatch.setattr(token_stats, "_spectral_compilable", lambda signal: False)
    monkeypatch.setattr(token_stats, "_band_by_kernel", band_by_the_kernel)
    monkeypatch.setattr(
        token_stats, "_centre_by_kernel", lambda values, window: band_by_the_kernel(values)
    )
    got = ratioscope.analyze(path).to_dict()
    # two ratio variants, the vitals, the policy's and the rollout's mismatch, the
    # covariance passes of the step's file
    assert calls.count(1) == 2 and calls.count(2) == 1 and calls.count(3) >= 1
    assert calls.count(4) == 1 and calls.count(5) >= 4  # the band and the centring
    assert set(ran) == set(kernels) and calls.count(6) == 3  # the three variants
    assert histograms  # the sections that still bin on the CPU by tensor code
    count, differing = compare_documents(expected, got, 1e-9, 1e-12, bins.RELATIVE_ERROR)
    assert count > 100 and not differing, differing[:5]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
def test_cuda_ratio_rows_match_the_cpu() -> None:
    from ratioscope.functional.ratio_rows import ratio_rows

    skip_unless_triton_compiles_here()
    signal, advantages, mask = signal_batch(1024, 4100, seed=11)
    cpu = ratio_rows(signal, advantages, mask, (0.2, 0.28), triton=False)
    gpu = ratio_rows(signal.cuda(), advantages.cuda(), mask.cuda(), (0.2, 0.28))
    (gpu_counts, gpu_moments), (cpu_counts, cpu_moments) = gpu.histogram(), cpu.histogram()
    # the GPU's log may put a value within an ulp of a bin edge in the next bin
    assert int(gpu_counts.sum()) == int(cpu_counts.sum())
    assert int((gpu_counts - cpu_counts).abs().sum()) <= 4
    assert gpu_moments[0] == cpu_moments[0] and gpu_moments[3:] == cpu_moments[3:]
    assert gpu_moments[1:3] == pytest.approx(cpu_moments[1:3], rel=1e-9, abs=1e-15)
    assert gpu.ppo is not None and cpu.ppo is not None
    assert torch.equal(gpu.ppo[0].cpu(), cpu.ppo[0])
    for got, expected in zip(gpu.ppo[1:], cpu.ppo[1:], strict=True):
        assert torch.allclose(got.cpu(), expected, rtol=1e-9, atol=1e-9)


def test_every_kernel_compiles_for_an_a100_and_an_h100_without_spilling() -> None:
    # Triton compiles for a stated GPU without one (down to ptxas' machine code): every
    # variant the package launches, in a process without the interpreter
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != _triton_kernels.INTERPRET_ENV}
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "triton_compile.py")],
        capture_output=True, text=True, env=env, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split() for line in done.stdout.splitlines()[1:-1]]
    assert {row[0] for row in rows} == {
        "kalman_scan", "chunk_starts", "ratio_rows", "histogram_moments", "vitals_rows",
        "mismatch_rows", "mismatch_terms", "covariance_rows", "covariance_statistics",
        "lfr_band", "centre_rows", "advantage_rows", "difference_rows", "state_runs",
        "entropy_quadrants", "aggregation_rows", "class_cells",
    }  # fmt: skip
    assert all(row[5] == "0" for row in rows)  # no spills: the column after registers
    assert done.stdout.rstrip().endswith("all compiled without spills")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
def test_cuda_vitals_and_mismatch_match_the_cpu() -> None:
    import dataclasses

    from ratioscope.functional.mismatch import mismatch_partials
    from ratioscope.functional.vitals_rows import vitals_rows

    skip_unless_triton_compiles_here()
    entropy, old, advantages, log_probs, mask, correct = vitals_inputs(1024, 4100, 5)
    on_gpu = [t.cuda() for t in (entropy, old, advantages, log_probs, mask, correct)]
    got = vitals_rows(*on_gpu[:4], on_gpu[4], on_gpu[5])
    expected = vitals_rows(entropy, old, advantages, log_probs, mask, correct, triton=False)
    # float64 sums added in another order, a bin edge within an ulp aside
    assert got.counts is not None and expected.counts is not None
    assert int((got.counts - expected.counts).abs().sum()) <= 4
    assert got.moments is not None and expected.moments is not None
    assert got.moments[1:3] == pytest.approx(expected.moments[1:3], rel=1e-9)
    z = 0.3 * torch.randn(1024, 4100, generator=torch.Generator().manual_seed(6))
    gpu = dataclasses.asdict(mismatch_partials(z.cuda(), mask.cuda()))
    cpu = dataclasses.asdict(mismatch_partials(z, mask, backend="compiled"))
    for name, value in cpu.items():
        assert gpu[name] == pytest.approx(value, rel=1e-9), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
def test_cuda_covariance_passes_match_the_cpu() -> None:
    import numpy as np
    from covariance_batches import covariance_arrays

    from ratioscope.functional.covariance_device import DeviceKernelPasses
    from ratioscope.functional.covariance_fused import FusedKernelPasses

    skip_unless_triton_compiles_here()
    arrays = covariance_arrays(6, rows=1024, width=4100)
    expected, expected_rows = covariance_passes(FusedKernelPasses, arrays, 256)
    got, got_rows = covariance_passes(DeviceKernelPasses, arrays, 256, "cuda", keep=True)
    assert (got.tokens, got.eligible) == (expected.tokens, expected.eligible)
    assert torch.allclose(got_rows.cpu(), expected_rows, rtol=1e-9, atol=1e-9, equal_nan=True)
    totals, reference = got.totals, expected.totals
    # the GPU's log may put a value within an ulp of a bin edge in the next bin
    for name in ("c_counts", "w_counts", "normalised_counts", "weight_counts"):
        assert int(np.abs(getattr(totals, name) - getattr(reference, name)).sum()) <= 8, name
    np.testing.assert_allclose(totals.mass, reference.mass, rtol=1e-9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
def test_cuda_lfr_band_matches_the_tensor_code() -> None:
    from ratioscope.functional import token_stats

    skip_unless_triton_compiles_here()
    auto, lengths = autocorrelations(64, 3000, seed=9)
    width = token_stats._band_widths(lengths, 0.1)
    band, energy = _triton_kernels.lfr_band(auto.cuda(), lengths.cuda(), width.cuda())
    lags = torch.arange(3000)[None, :] < lengths[:, None]
    masked = torch.where(lags, auto[:, :3000], 0.0)
    size = lengths.clamp(min=1).to(torch.float64).unsqueeze(1)
    expected = token_stats._band_torch(masked, size, width.unsqueeze(1))
    scale = (lengths.to(torch.float64) * auto[:, 0].abs()).clamp(min=1.0)
    assert torch.all((band.cpu() - expected).abs() <= 1e-11 * scale)
    assert torch.equal(energy.cpu(), masked[:, 0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
def test_cuda_centre_rows_match_the_tensor_code() -> None:
    from ratioscope.functional import token_stats

    skip_unless_triton_compiles_here()
    packed, garbage = packed_rows(256, 4100, seed=4)
    centred, stats = _triton_kernels.centre_rows(
        garbage.cuda(), packed.lengths.cuda(), 50, ratio=False
    )
    expected = token_stats._centre(packed, "log")
    assert torch.allclose(centred.cpu(), expected.values, rtol=0, atol=1e-13)
    assert torch.equal(stats[:, 2].cpu() != 0, expected.energetic)
    local = token_stats._local_variance(expected, 50)
    assert torch.allclose(stats[:, 1].cpu(), local, rtol=1e-11, equal_nan=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
def test_cuda_advantage_and_difference_rows_match_the_cpu() -> None:
    from ratioscope.functional.surrogate import advantage_sums_torch

    skip_unless_triton_compiles_here()
    gen = torch.Generator().manual_seed(12)
    advantages, log_probs, reference = torch.randn(3, 1024, 4100, generator=gen)
    mask = torch.rand(1024, 4100, generator=gen) > 0.3
    sums, counts = _triton_kernels.advantage_rows(advantages.cuda(), mask.cuda())
    expected = advantage_sums_torch(advantages, mask)
    assert torch.equal(counts[0].cpu(), expected.n_positive)
    assert torch.allclose(sums[0].cpu(), expected.positive, rtol=1e-12)
    found = _triton_kernels.difference_rows(log_probs.cuda(), reference.cuda(), mask.cuda())
    assert torch.equal(found[0].cpu(), mask.sum(1).double())
    difference = torch.where(mask, log_probs.double() - reference.double(), 0.0).sum(1)
    assert torch.allclose(found[2].cpu(), difference, rtol=1e-11, atol=1e-11)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
def test_cuda_state_runs_match_the_compiled_loop() -> None:
    from ratioscope.functional import _kernels, token_stats

    skip_unless_triton_compiles_here()
    if not _kernels.available():
        pytest.skip("numba is not available")
    values, mask = state_signal(512, 4100, seed=13)
    lower, upper = token_stats._band_thresholds(token_stats.DEFAULT_ON_BAND, values.dtype)
    got = _triton_kernels.state_runs(values.cuda(), mask.cuda(), lower, upper, 50)
    loop = _kernels.state_runs(values.numpy(), mask.numpy(), lower, upper, 50)
    for found, expected in zip(got[:5], loop[:5], strict=True):
        assert torch.equal(found.cpu(), torch.from_numpy(expected))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.cuda
def test_cuda_entropy_quadrants_match_the_tensor_code() -> None:
    import dataclasses

    from ratioscope.functional import tepo

    skip_unless_triton_compiles_here()
    gen = torch.Generator().manual_seed(14)
    advantages = torch.randint(-1, 2, (1024, 4100), generator=gen).float()
    entropy, old = torch.rand(2, 1024, 4100, generator=gen)
    mask = torch.rand(1024, 4100, generator=gen) > 0.2
    on_gpu = [t.cuda() for t in (advantages, entropy, old, mask)]
    counts, in_mask = _triton_kernels.entropy_quadrants(*on_gpu)
    expected = tepo.kl_mask_quadrants(advantages, entropy, old, mask)
    assert counts.tolist() == [*dataclasses.astuple(expected)]
    assert torch.equal(in_mask.cpu(), tepo.kl_mask(advantages, entropy, old, mask).sum(1))
