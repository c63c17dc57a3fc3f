"""The vitals section's compiled pass against the tensor code it replaces."""

from __future__ import annotations

import math

import pytest
import torch
from documents import assert_documents_close
from dumps import ragged_mask

import ratioscope
import ratioscope.sections.vitals as vitals_section
from ratioscope.functional import _kernels
from ratioscope.functional.vitals import (
    CoMoments,
    entropy_by_correctness,
    entropy_change_sums,
    masked_sums,
    mechanics_pairs,
    row_mean_abs,
)
from ratioscope.functional.vitals_rows import vitals_rows
from ratioscope.sections.summaries import Histogram

pytestmark = pytest.mark.skipif(not _kernels.available(), reason="compiled kernels disabled")


def _inputs(rows: int, length: int, seed: int, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    mask = ragged_mask(rows, length, gen)
    entropy = 3 * torch.rand(rows, length, generator=gen, dtype=torch.float64)
    entropy[2, :3] = torch.tensor([0.0, 1e-9, 7.5])
    old = entropy + 0.1 * torch.randn(rows, length, generator=gen, dtype=torch.float64)
    advantages = torch.randn(rows, 1, generator=gen, dtype=torch.float64).expand(rows, length)
    advantages = torch.where(torch.arange(rows)[:, None] % 5 == 0, 0.0, advantages)
    log_probs = -3 * torch.rand(rows, length, generator=gen, dtype=torch.float64)
    # masked positions hold anything, NaN included: never read
    entropy = torch.where(mask, entropy, math.nan)
    correct = torch.rand(rows, generator=gen) < 0.5
    return (*(t.to(dtype) for t in (entropy, old, advantages, log_probs)), mask, correct)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_pass_equals_the_tensor_code(dtype):
    entropy, old, advantages, log_probs, mask, correct = _inputs(37, 61, 0, dtype)
    got = vitals_rows(entropy, old, advantages, log_probs, mask, correct)
    reference = Histogram()
    reference.add(entropy[mask].double())
    assert got.counts is not None and torch.equal(got.counts, reference.counts)
    assert got.moments is not None
    count, mean, m2, low, high = got.moments
    moments = reference.moments
    assert count == moments.count and (low, high) == (moments.minimum, moments.maximum)
    assert _close(mean, moments.mean) and _close(m2, moments.m2)
    right, wrong = entropy_by_correctness(entropy, mask, correct)
    for mine, theirs in (
        (got.right, right), (got.wrong, wrong), (got.old, masked_sums(old, mask)),
        (got.change, entropy_change_sums(entropy, old, mask)),
    ):  # fmt: skip
        assert mine is not None and mine.count == theirs.count
        assert _close(mine.total, theirs.total)
    row_abs, row_tokens = row_mean_abs(advantages, mask)
    assert got.row_tokens is not None and torch.equal(got.row_tokens, row_tokens)
    torch.testing.assert_close(got.row_abs, row_abs, rtol=1e-12, atol=1e-12)
    assert got.zero == int(((advantages == 0) & mask).sum())
    x, a, pa = mechanics_pairs(log_probs, advantages, mask)
    for mine, y in ((got.pairs_a, a), (got.pairs_pa, pa)):
        theirs = CoMoments()
        theirs.add(x, y)
        assert mine is not None and mine.count == theirs.count
        assert _close(mine.mean_x, theirs.mean_x) and _close(mine.mean_y, theirs.mean_y)
        assert _close(mine.comoment, theirs.comoment)


def test_absent_inputs_give_none_and_no_rows_give_empty_sums():
    entropy, _, advantages, _, mask, _ = _inputs(9, 12, 1)
    got = vitals_rows(None, None, advantages, None, mask, None)
    assert got.counts is None and got.moments is None and got.old is None
    assert got.right is None and got.pairs_a is None and got.row_abs is not None
    only = vitals_rows(entropy, None, None, None, torch.zeros_like(mask), None)
    assert only.moments is not None and only.moments.n == 0 and only.row_abs is None


def test_the_section_compiled_equals_the_tensor_code(tmp_path, monkeypatch):
    from safetensors.torch import save_file

    entropy, old, advantages, log_probs, mask, correct = _inputs(48, 40, 3)
    save_file(
        {
            "mask": mask, "entropy": torch.nan_to_num(entropy), "old_entropy": old,
            "advantages": advantages, "old_log_probs": log_probs,
            "log_probs": log_probs + 0.01, "rewards": correct.float(),
            "group": torch.arange(48) // 4,
        },
        str(tmp_path / "dump.safetensors"),
    )  # fmt: skip

    calls = []

    def counted(*args):
        calls.append(1)
        return vitals_rows(*args)

    def report(compiled: bool) -> dict:
        with monkeypatch.context() as patch:
            patch.setattr(vitals_section, "vitals_rows", counted)
            if not compiled:
                patch.setattr(vitals_section, "vitals_rows_usable", lambda *t, mask: False)
            found = ratioscope.analyze(tmp_path / "dump.safetensors", sections=["vitals"])
        return found.to_dict()["vitals"]

    fused = report(True)
    assert calls  # the compiled pass ran
    calls.clear()
    reference = report(False)
    assert not calls
    assert fused["entropy"]["tokens"] > 0 and fused["entropy_mechanics"] is not None
    assert_documents_close(fused, reference, rel=1e-10, abs_tol=1e-14, where="vitals")
