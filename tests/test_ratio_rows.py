"""The ratios section's compiled row pass (histogram, moments, PPO row sums) and the
compiled LFR band, against the tensor code they replace and against a direct DFT."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from documents import assert_documents_close
from dumps import ragged_mask

import ratioscope
import ratioscope.sections.ratios as ratios_section
from ratioscope.functional import _kernels
from ratioscope.functional.ratio_rows import ratio_rows
from ratioscope.functional.surrogate import ppo_row_sums
from ratioscope.functional.token_stats import low_frequency_ratio, signal_statistics
from ratioscope.sections.summaries import Histogram

pytestmark = pytest.mark.skipif(not _kernels.available(), reason="compiled kernels disabled")

CLIP = (0.2, 0.28)


def _inputs(rows: int, length: int, seed: int, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    mask = ragged_mask(rows, length, gen)
    # ratios on both sides of both clip bounds, exact zeros, a few large values
    z = 0.2 * torch.randn(rows, length, generator=gen, dtype=torch.float64)
    z = torch.where(torch.rand(rows, length, generator=gen) < 0.2, 0.0, z)
    z[2, :5] = torch.tensor([30.0, -30.0, 1e-12, -1e-12, math.log(1.28)])
    z = torch.where(mask, z, 0.0).to(dtype)
    advantages = torch.randn(rows, 1, generator=gen, dtype=torch.float64).expand(rows, length)
    advantages = torch.where(mask, advantages, 0.0).to(dtype)
    return z, advantages, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_row_pass_equals_histogram_and_ppo_row_sums(dtype):
    z, advantages, mask = _inputs(37, 61, 0, dtype)
    got = ratio_rows(z, advantages, mask, CLIP)
    reference = Histogram()
    reference.add(z[mask])
    assert torch.equal(got.counts, reference.counts)
    count, mean, spread, low, high = got.moments
    moments = reference.moments
    assert count == moments.count
    assert (low, high) == (moments.minimum, moments.maximum)
    assert mean == pytest.approx(moments.mean, rel=1e-12, abs=1e-15)
    assert spread == pytest.approx(moments.m2, rel=1e-12)
    assert got.ppo is not None
    clipped, clipped_terms, plain_terms = got.ppo
    want = ppo_row_sums(z, advantages, mask, CLIP)
    assert torch.equal(clipped, want[0])
    torch.testing.assert_close(clipped_terms, want[1], rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(plain_terms, want[2], rtol=1e-12, atol=1e-15)


def test_row_pass_without_advantages_and_by_hand():
    # ratios e^0.3 > 1.28 (A > 0: clipped), e^-0.3 < 0.8 (A < 0: clipped), 1, masked
    z = torch.tensor([[0.3, -0.3, 0.0, 5.0]])
    advantages = torch.tensor([[1.0, -1.0, 2.0, 1.0]])
    mask = torch.tensor([[True, True, True, False]])
    got = ratio_rows(z, advantages, mask, CLIP)
    assert got.ppo is not None
    clipped, clipped_terms, plain_terms = got.ppo
    assert clipped.tolist() == [2]
    r_up, r_down = math.exp(np.float32(0.3)), math.exp(np.float32(-0.3))
    assert float(plain_terms) == pytest.approx(r_up - r_down + 2.0, rel=1e-12)
    assert float(clipped_terms) == pytest.approx(1.28 - 0.8 + 2.0, rel=1e-12)
    alone = ratio_rows(z, None, mask, CLIP)
    assert alone.ppo is None
    assert int(alone.counts.sum()) == 3 and alone.moments[0] == 3


@pytest.mark.parametrize("cutoff", [0.0, 0.1, 0.5, 1.0])
def test_compiled_lfr_equals_a_direct_dft(cutoff):
    """KPO's LFR by each row's own DFT of length L (numpy), the written-out definition."""
    gen = torch.Generator().manual_seed(1)
    rows, length = 12, 97
    x = torch.randn(rows, length, generator=gen, dtype=torch.float64).cumsum(1)
    lengths = torch.randint(2, length + 1, (rows,), generator=gen)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    got = low_frequency_ratio(x, mask, cutoff)  # compiled on the CPU
    for row in range(rows):
        n = int(lengths[row])
        values = x[row, :n].numpy()
        power = np.abs(np.fft.fft(values - values.mean())) ** 2
        k_c = math.floor(cutoff * n / 2)
        band = power[: k_c + 1].sum() + (power[n - k_c :].sum() if k_c > 0 else 0.0)
        expected = min(band / power.sum(), 1.0)
        assert float(got[row]) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("size", [1, 2, 3, 63, 64, 65, 129, 1000, 4097, 40_000])
def test_sine_table_within_a_few_ulps_of_sin(size):
    from ratioscope.functional import _ratio_kernels

    table = np.full(size, np.nan)
    scratch = np.empty(_ratio_kernels._SINE_BLOCK), np.empty(_ratio_kernels._SINE_BLOCK)
    _ratio_kernels.sine_table(size, table, *scratch)
    # sin(pi j / L) written out: each half from libm, the angle of the nearer end
    expected = np.array([math.sin(math.pi / size * min(j, size - j)) for j in range(size)])
    ulps = np.abs(table - expected) / np.spacing(np.maximum(np.abs(expected), 1e-300))
    assert table[0] == 0.0 and ulps.max() <= 4


def test_lfr_band_paths_agree_on_long_rows():
    gen = torch.Generator().manual_seed(2)
    x = 1e-3 * torch.randn(8, 4096, generator=gen)
    lengths = torch.tensor([4096, 4095, 2048, 1000, 3, 2, 1, 0])
    mask = torch.arange(4096)[None, :] < lengths[:, None]
    got = signal_statistics(x, mask, backend="compiled").low_frequency_ratio
    ref = signal_statistics(x, mask, backend="torch").low_frequency_ratio
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-12, equal_nan=True)


def test_ratios_section_compiled_equals_torch(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    z, advantages, mask = _inputs(48, 40, 3)
    old = -torch.rand(48, 40)
    save_file(
        {
            "mask": mask,
            "old_log_probs": old,
            "log_probs": torch.where(mask, old + z, old),
            "advantages": advantages,
        },
        str(tmp_path / "dump.safetensors"),
    )

    def report(compiled: bool) -> dict:
        with monkeypatch.context() as patch:
            if not compiled:
                patch.setattr(ratios_section, "ratio_rows_usable", lambda *t: False)
            found = ratioscope.analyze(tmp_path / "dump.safetensors", sections=["ratios"])
        return found.to_dict()["ratios"]

    fused, reference = report(True), report(False)

    assert_documents_close(fused, reference, rel=1e-10, abs_tol=1e-14, where="ratios")
