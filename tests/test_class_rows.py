"""Many quantities by several classes of rows at once (FPA's per-sequence histograms)
against the row-by-row, class-by-class adds they replace and a plain loop."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ratioscope.functional.histogram import NUM_BINS, bin_index, class_counts
from ratioscope.functional.moments import EMPTY, masked_moment_sums
from ratioscope.sections.context import HostReads
from ratioscope.sections.future_policy import _ClassHistograms, _LogClassHistograms, add_rows
from ratioscope.sections.summaries import Histogram, LogHistogram, add_cells
from tests.device_emulation import OperationCount, second_device


def _keep(rows: int, classes: int, length: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    keep = torch.rand((rows, classes, length), generator=gen) < 0.6
    keep[0, -1] = False  # a cell that holds nothing
    return keep


def test_masked_moment_sums_match_a_plain_loop() -> None:
    gen = torch.Generator().manual_seed(0)
    values = torch.randn((4, 37), generator=gen, dtype=torch.float64) * 3 + 1
    keep = _keep(4, 3, 37, 1)
    found = masked_moment_sums(values, keep)
    for k in range(4):
        for c in range(3):
            kept = [float(v) for v, on in zip(values[k], keep[k, c], strict=True) if on]
            got = found[k][c]
            if not kept:
                assert got == EMPTY
                continue
            mean = math.fsum(kept) / len(kept)
            m2 = math.fsum((v - mean) ** 2 for v in kept)
            assert got.n == len(kept)
            assert got.mean == pytest.approx(mean, rel=1e-13, abs=1e-15)
            assert got.m2 == pytest.approx(m2, rel=1e-12)
            assert (got.minimum, got.maximum) == (min(kept), max(kept))


def test_class_counts_match_one_histogram_per_cell() -> None:
    gen = torch.Generator().manual_seed(2)
    values = torch.randn((3, 50), generator=gen, dtype=torch.float64).mul_(10).exp_()
    values[1, :5] = 0.0
    keep = _keep(3, 2, 50, 3)
    counts = class_counts(bin_index(values), keep)
    assert counts.shape == (3, 2, NUM_BINS)
    for k in range(3):
        for c in range(2):
            cell = np.bincount(bin_index(values[k][keep[k, c]]).numpy(), minlength=NUM_BINS)
            assert np.array_equal(counts[k, c].numpy(), cell)


def _selections(length: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    present = torch.rand(length, generator=gen) < 0.9
    correct = torch.rand(length, generator=gen) < 0.5
    return {"all": present, "correct": correct & present, "incorrect": ~correct & present}


@pytest.mark.parametrize("kind", [_ClassHistograms, _LogClassHistograms])
def test_add_rows_equals_row_by_row_adds(kind: type[_ClassHistograms]) -> None:
    gen = torch.Generator().manual_seed(4)
    values = torch.rand((5, 40), generator=gen, dtype=torch.float64) * 2
    values[2, 3] = math.inf  # not finite: left out of every class
    values[3, 7] = math.nan
    selections = _selections(40, 5)
    thresholds = [0.5, None, 1.0, None, 0.25]
    together = [kind() for _ in range(5)]
    apart = [kind() for _ in range(5)]
    for _ in range(2):  # twice: the second add merges into what the first left
        add_rows(together, values, selections, thresholds)
        for item, row, threshold in zip(apart, values, thresholds, strict=True):
            item.add(row, selections, threshold)
    for mine, theirs in zip(together, apart, strict=True):
        assert mine.below == theirs.below and mine.totals == theirs.totals
        for name in selections:
            a, b = mine.histograms[name], theirs.histograms[name]
            assert torch.equal(a.counts, b.counts)
            assert a.moments.count == b.moments.count
            for field in ("mean", "m2", "minimum", "maximum"):
                assert getattr(a.moments, field) == pytest.approx(
                    getattr(b.moments, field), rel=1e-12, abs=1e-15
                )


def test_add_rows_of_mixed_kinds_adds_row_by_row() -> None:
    """A state restored from an older report may hold value histograms beside log ones:
    each row then goes its own way, into the histograms it has."""
    values = torch.tensor([[0.5, 2.0], [1.5, 3.0]], dtype=torch.float64)
    selections = {"all": torch.tensor([True, True])}
    old, new = _ClassHistograms(), _LogClassHistograms()
    add_rows([old, new], values, selections, [1.0, None])
    assert isinstance(old.histograms["all"], Histogram)
    assert isinstance(new.histograms["all"], LogHistogram)
    assert old.below["all"] == 1 and old.totals["all"] == 2
    assert new.histograms["all"].moments.mean == pytest.approx(2.25)


def test_add_counts_refuses_a_histogram_with_sums() -> None:
    with pytest.raises(ValueError, match="per-bin sums"):
        Histogram.with_sums().add_counts(torch.zeros(NUM_BINS, dtype=torch.long), EMPTY)


@pytest.mark.parametrize("deferred", [False, True])
def test_add_cells_refuses_a_kept_negative_value_for_a_log_histogram(deferred: bool) -> None:
    # the check is read with the counts: at once, or where the chunk's folds run
    values = torch.tensor([[0.5, -2.0, 3.0]], dtype=torch.float64)
    cells = [[LogHistogram(), LogHistogram()]]
    host = HostReads(deferred=deferred)
    with second_device(), pytest.raises(ValueError, match="non-negative"):
        keep = torch.tensor([[[True, False, True], [True, True, False]]]).to("cuda")
        add_cells(cells, values.to("cuda"), keep, host)
        assert deferred and host.pending == 1  # only a deferred fold gets this far
        host.flush()
    # a negative value no cell keeps is no error
    fine = [[LogHistogram(), LogHistogram()]]
    add_cells(fine, values, torch.tensor([[[True, False, True], [True, False, False]]]))
    assert [cell.count for cell in fine[0]] == [2, 1]
    assert fine[0][0].moments.maximum == 3.0


def test_add_rows_deferred_on_a_device_equals_add_rows_at_once() -> None:
    gen = torch.Generator().manual_seed(6)
    values = torch.rand((4, 30), generator=gen, dtype=torch.float64) * 2
    values[1, 2] = math.nan
    selections = _selections(30, 7)
    thresholds = [0.5, None, 1.5, None]
    now = [_LogClassHistograms() for _ in range(4)]
    add_rows(now, values, selections, thresholds)
    later = [_LogClassHistograms() for _ in range(4)]
    host = HostReads(deferred=True)
    count = OperationCount()
    with second_device(count):
        on_device = {name: kept.to("cuda") for name, kept in selections.items()}
        add_rows(later, values.to("cuda"), on_device, thresholds, host)
        assert later[0].totals["all"] == 0 and not count.reads and not count.waits
        host.flush()
    assert sum(count.reads.values()) == 1 and not count.waits
    for mine, theirs in zip(later, now, strict=True):
        assert mine.below == theirs.below and mine.totals == theirs.totals
        for name in selections:
            a, b = mine.histograms[name], theirs.histograms[name]
            assert torch.equal(a.counts, b.counts) and a.moments.count == b.moments.count
            assert a.moments.mean == pytest.approx(b.moments.mean, rel=1e-12, abs=1e-15)
