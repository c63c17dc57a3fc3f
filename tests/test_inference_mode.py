"""The analysis runs without autograd (``torch.inference_mode``), and what it makes still
merges and reads where the caller holds no such mode."""

from __future__ import annotations

import torch

import ratioscope
from ratioscope.analysis.pipeline import analyze_totals
from ratioscope.sections.summaries import Histogram


def _batch(seed: int) -> ratioscope.TokenBatch:
    gen = torch.Generator().manual_seed(seed)
    log_probs = -torch.rand((8, 16), generator=gen)
    return ratioscope.TokenBatch.from_tensors(
        {
            "log_probs": log_probs,
            "old_log_probs": log_probs + 0.05 * torch.randn((8, 16), generator=gen),
            "mask": torch.ones((8, 16), dtype=torch.bool),
            "advantages": torch.randn(8, generator=gen),
        }
    )


def _histograms(accumulators: list) -> list[Histogram]:
    found = []
    for accumulator in accumulators:
        for value in vars(accumulator).values():
            if isinstance(value, Histogram):
                found.append(value)
    return found


def test_section_state_is_made_without_autograd() -> None:
    _, totals = analyze_totals(_batch(0))
    made = [h.counts for h in _histograms(totals)] + [
        v.histogram.counts for v in totals[0].variants.values()
    ]
    assert made and all(counts.is_inference() for counts in made)


def test_states_made_in_inference_mode_merge_outside_it() -> None:
    """Folding one step's accumulators into another's adds in place to tensors made in
    inference mode, which torch refuses outside it unless the merge enters it."""
    assert not torch.is_inference_mode_enabled()
    _, first = analyze_totals(_batch(1))
    _, second = analyze_totals(_batch(2))
    before = first[0].variants["token"].histogram.count
    for mine, theirs in zip(first, second, strict=True):
        mine.merge(theirs)
    after = first[0].variants["token"].histogram.count
    assert after == before + second[0].variants["token"].histogram.count > before
    whole = ratioscope.analyze(_batch(3))
    assert whole.ratios is not None
