"""Fixed-bin quantiles stay within the stated error bound; histograms merge exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.functional import _kernels
from ratioscope.functional import histogram as bins
from ratioscope.sections.summaries import Histogram, Moments, add_small_counts


def bound(exact: float) -> float:
    return bins.RELATIVE_ERROR * abs(exact) + 10.0**bins.MIN_EXP


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 100_000),
    n=st.integers(1, 400),
    scale=st.sampled_from([1e-6, 1e-3, 0.1, 10.0]),
    zeros=st.floats(0, 0.5),
)
def test_quantiles_within_the_stated_bound(seed, n, scale, zeros):
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, size=n) * scale
    x[rng.random(n) < zeros] = 0.0
    histogram = Histogram()
    histogram.add(torch.tensor(x))
    for q in (0.0, 0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0):
        exact = float(np.quantile(x, q, method="inverted_cdf"))
        assert abs(histogram.quantile(q) - exact) <= bound(exact), (q, exact)


def test_bins_are_ordered_and_zero_is_exact():
    x = torch.tensor([-1e5, -3.0, -1e-12, 0.0, 1e-12, 2e-9, 5.0, 1e6])
    index = bins.bin_index(x)
    assert index.tolist() == sorted(index.tolist())
    assert int(index[3]) == bins.CENTER
    assert bins.bin_index(torch.tensor([-0.0, 0.0])).tolist() == [bins.CENTER, bins.CENTER]
    assert int(index[0]) == 0 and int(index[-1]) == bins.NUM_BINS - 1
    for value, i in zip(x.tolist(), index.tolist(), strict=True):
        low, high = bins.bin_bounds(i)
        if value != 0:
            assert low <= value <= high or (value < 0 and low <= value < high)


def test_histogram_state_round_trip_and_merge_equal_the_whole():
    rng = np.random.default_rng(1)
    parts = [torch.tensor(rng.normal(0, 1, size=s)) for s in (5, 50, 500)]
    whole = Histogram.with_sums()
    whole.add(torch.cat(parts))
    merged = Histogram.with_sums()
    for part in parts:
        piece = Histogram.with_sums()
        piece.add(part)
        merged.merge(Histogram.from_state(piece.state()))
    assert torch.equal(whole.counts, merged.counts)
    assert torch.allclose(whole.sums, merged.sums, rtol=1e-12, atol=1e-12)
    assert whole.moments.count == merged.moments.count
    assert whole.moments.mean == pytest.approx(merged.moments.mean, rel=1e-12)
    assert whole.moments.variance == pytest.approx(merged.moments.variance, rel=1e-12)


def test_moments_match_numpy_population_variance():
    rng = np.random.default_rng(2)
    x = rng.normal(3, 2, size=1000)
    moments = Moments()
    for chunk in np.array_split(x, 7):
        part = Moments()
        part.add(torch.tensor(chunk))
        moments.merge(part)
    assert moments.mean == pytest.approx(x.mean(), rel=1e-12)
    assert moments.variance == pytest.approx(x.var(), rel=1e-10)
    assert moments.minimum == x.min() and moments.maximum == x.max()


def _bin_by_formula(x: float) -> int:
    """The bin of one value, written out from the module docstring's layout."""
    if x == 0:
        return bins.CENTER
    k = np.floor((np.log10(abs(x)) - bins.MIN_EXP) * bins.PER_DECADE)
    offset = int(min(max(k, -1), bins.MAGNITUDE_BINS)) + 2
    return bins.CENTER + offset if x > 0 else bins.CENTER - offset


def test_bin_index_follows_the_layout():
    rng = np.random.default_rng(3)
    # values away from the bin edges (where log10's last bit could decide the bin)
    values = np.concatenate([rng.normal(size=400) * 10.0 ** rng.uniform(-12, 6, 400), [0.0]])
    index = bins.bin_index(torch.tensor(values)).tolist()
    assert index == [_bin_by_formula(x) for x in values]


def test_histograms_of_classes_binned_once_equal_each_class_binned_alone():
    """FPA's per-class histograms bin the values once for all classes: the counts and
    moments are those of each class's values added alone (non-finite values left out)."""
    from ratioscope.sections.future_policy import _ClassHistograms, _LogClassHistograms

    rng = np.random.default_rng(5)
    values = torch.tensor(rng.lognormal(size=64))
    values[::9] = float("nan")
    values[1::13] = float("inf")
    present = torch.tensor(rng.random(64) > 0.2)
    correct = torch.tensor(rng.random(64) > 0.5)
    selections = {"all": present, "correct": correct & present, "incorrect": ~correct & present}
    for kind in (_ClassHistograms, _LogClassHistograms):
        classes = kind()
        classes.add(values, selections, 0.5)
        for name, select in selections.items():
            alone = type(classes.histograms[name])()
            alone.add(values[torch.isfinite(values) & select])
            assert torch.equal(classes.histograms[name].counts, alone.counts), (kind, name)
            assert classes.histograms[name].moments == alone.moments
            below = int((torch.isfinite(values) & select & (values < 0.5)).sum())
            assert classes.below[name] == below


@pytest.mark.parametrize("size", [5, 5000])
def test_counter_adds_weighted_keys_as_a_plain_tally(size):
    """Few keys (summed in Python) and many (torch.unique): the tally of the weights per
    key, keys in increasing order."""
    import collections

    from ratioscope.sections.summaries import Counter

    rng = np.random.default_rng(size)
    keys, weights = rng.integers(0, 40, size), rng.integers(0, 9, size)
    counter = Counter(counts={7: 1})
    counter.add_tensor(torch.tensor(keys), torch.tensor(weights))
    tally = collections.Counter({7: 1})
    for key, weight in zip(keys.tolist(), weights.tolist(), strict=True):
        tally[key] += weight
    assert counter.counts == dict(tally)
    assert list(counter.counts)[1:] == sorted(set(keys.tolist()) - {7})


def _sample(rng: np.random.Generator, kind: int) -> torch.Tensor:
    """Values that reach every kind of bin: magnitudes, zeros, under- and over-flow, both
    signs."""
    size = int(rng.integers(1, 400))
    if kind == 0:
        return torch.from_numpy(rng.normal(0.0, 1.0, size))
    if kind == 1:
        return torch.from_numpy(np.exp(rng.normal(0.0, 30.0, size)))
    if kind == 2:
        return torch.from_numpy(rng.choice([0.0, 1e-12, -1e-12, 1e5, -1e6, 3.0], size))
    if kind == 3:
        return torch.from_numpy(-np.exp(rng.normal(0.0, 5.0, size)))
    return torch.from_numpy(rng.normal(0.0, 1e-10, size))


@pytest.mark.skipif(not _kernels.available(), reason="compiled kernels disabled")
def test_compiled_quantiles_are_the_bits_of_the_numpy_reading():
    rng = np.random.default_rng(7)
    for trial in range(600):
        values = _sample(rng, trial % 5)
        counts = bins.histogram(values).numpy()
        qs = (*rng.uniform(0.0, 1.0, 4).tolist(), 0.0, 0.001, 0.5, 0.999, 1.0)
        lower = float(values.min()) if trial % 2 else None
        upper = float(values.max()) if trial % 3 else None
        compiled = bins._quantiles_compiled(counts, qs, lower, upper)
        reference = bins._quantiles_numpy(counts, qs, lower, upper)
        assert np.array_equal(np.array(compiled), np.array(reference)), trial
        assert np.array_equal(np.signbit(compiled), np.signbit(reference)), trial
    empty = np.zeros(bins.NUM_BINS, dtype=np.int64)
    assert np.isnan(bins._quantiles_compiled(empty, (0.5,), None, None)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_small_counts_by_the_compiled_loop_equal_bincount(dtype):
    if not _kernels.available():
        pytest.skip("compiled kernels disabled")
    gen = torch.Generator().manual_seed(5)
    edges = torch.tensor([bins.bin_bounds(i)[0] for i in range(bins.CENTER + 1, bins.NUM_BINS)])
    scales = 10.0 ** torch.randint(-12, 6, (3000,), generator=gen)
    values = torch.cat(
        [
            torch.randn(3000, generator=gen) * scales,
            edges,
            -edges,
            torch.zeros(7),
            torch.tensor([1e-30, -1e30, 5e-9, 2e4]),
        ]
    ).to(dtype)
    counts = torch.zeros(bins.NUM_BINS, dtype=torch.long)
    counts[17] = 4  # added to, not overwritten
    assert add_small_counts(values, counts)
    expected = torch.bincount(bins.bin_index(values), minlength=bins.NUM_BINS)
    expected[17] += 4
    assert torch.equal(counts, expected)


def test_small_counts_leave_what_the_loop_does_not_take_to_bincount():
    counts = torch.zeros(bins.NUM_BINS, dtype=torch.long)
    assert not add_small_counts(torch.ones(4, dtype=torch.float16), counts)
    assert not add_small_counts(torch.ones(40_000), counts)  # above SERIAL_ELEMENTS
    assert not add_small_counts(torch.ones(4), torch.zeros(bins.NUM_BINS))  # float
    assert not add_small_counts(torch.ones(2, 2), counts)  # not 1-D
    assert int(counts.sum()) == 0
