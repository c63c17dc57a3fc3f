"""The ratios section's sequence variant from one value per row equals the per-token way.

The sequence-level ratio is constant within a row, so the section adds its histogram and
its PPO sums from [B] values and lengths instead of a [B, T] signal. The reference here
builds that signal and uses the per-token functions: counts must be equal, sums equal up
to rounding. Rows include masked tokens, an empty row, a length-1 row, zero advantages
and ratios beyond both clip edges.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from ratioscope.data.params import AnalysisParams
from ratioscope.functional.surrogate import constant_ppo_row_sums, ppo_row_sums
from ratioscope.sections.context import Context
from ratioscope.sections.ratios import _add_constant_rows
from ratioscope.sections.summaries import Histogram


def rows(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(values [B] float32, mask [B, T] with holes, advantages [B, T] float32)."""
    gen = torch.Generator().manual_seed(seed)
    batch, length = 11, 37
    values = 0.4 * torch.randn(batch, generator=gen)
    values[3], values[4], values[5] = 0.0, 0.5, -0.5  # on, above and below the clip band
    lengths = torch.randint(0, length + 1, (batch,), generator=gen)
    lengths[0], lengths[1], lengths[2] = 0, 1, length
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    mask &= torch.rand(batch, length, generator=gen) > 0.15
    advantages = torch.randn(batch, length, generator=gen)
    advantages[6] = 0.0
    advantages = torch.where(torch.rand(batch, length, generator=gen) < 0.1, 0.0, advantages)
    return values, mask, advantages


def broadcast(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask, values[:, None].expand_as(mask), torch.zeros(()))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_histogram_of_constant_rows(seed):
    values, mask, _ = rows(seed)
    got, expected = Histogram(), Histogram()
    _add_constant_rows(got, values, mask.sum(dim=1))
    expected.add(broadcast(values, mask)[mask])
    assert torch.equal(got.counts, expected.counts)
    assert got.moments.count == expected.moments.count
    assert got.moments.minimum == expected.moments.minimum
    assert got.moments.maximum == expected.moments.maximum
    assert got.moments.mean == pytest.approx(expected.moments.mean, rel=1e-12, abs=1e-15)
    assert got.moments.m2 == pytest.approx(expected.moments.m2, rel=1e-12)


def test_histogram_of_constant_rows_without_tokens():
    histogram = Histogram()
    _add_constant_rows(histogram, torch.ones(3), torch.zeros(3, dtype=torch.long))
    assert histogram.count == 0 and histogram.moments.count == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("clip", [(0.2, 0.28), (0.0, 0.0), (0.5, 10.0)])
def test_ppo_sums_of_constant_rows(seed, clip):
    values, mask, advantages = rows(seed)
    batch = SimpleNamespace(mask=mask, log_ratio=broadcast(values, mask), advantages=advantages)
    ctx = Context(batch, AnalysisParams())  # type: ignore[arg-type]
    clipped, clipped_terms, plain = constant_ppo_row_sums(values, ctx.advantage_sums, clip)
    ref_clipped, ref_terms, ref_plain = ppo_row_sums(
        broadcast(values, mask), advantages, mask, clip
    )
    assert clipped.dtype == ref_clipped.dtype and torch.equal(clipped, ref_clipped)
    torch.testing.assert_close(clipped_terms, ref_terms, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(plain, ref_plain, rtol=1e-12, atol=1e-12)


def test_context_lengths_and_float64_row_sums():
    _, mask, advantages = rows(3)
    z = torch.randn(mask.shape).masked_fill(~mask, 0.0)
    ctx = Context(SimpleNamespace(mask=mask, log_ratio=z, advantages=advantages), AnalysisParams())  # type: ignore[arg-type]
    assert ctx.lengths.dtype == torch.long
    assert torch.equal(ctx.lengths, mask.sum(dim=1))
    # each row summed in float64, against the exact sum of its float32 values
    exact = torch.tensor([math.fsum(row) for row in z.double().tolist()], dtype=torch.float64)
    assert ctx.z64_sums.dtype == torch.float64
    torch.testing.assert_close(ctx.z64_sums, exact, rtol=1e-14, atol=1e-14)
