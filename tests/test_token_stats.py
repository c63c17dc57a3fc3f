"""KPO Table 2 statistics vs plain-Python references written from the paper's text."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ratioscope.errors import UsageError
from ratioscope.functional.token_stats import (
    frequency_grid,
    global_variance,
    host_state_shares,
    host_window_moments,
    local_variance,
    low_frequency_ratio,
    periodogram,
    run_lengths,
    signal_statistics,
    state_counts,
    state_shares,
    switch_frequency,
    token_states,
    window_moments,
    window_offpolicy_frequency,
)

# --------------------------------------------------------------------------- references
# Each works on one sequence: the list of its valid values in order.


def ref_state(z: float, eps_lo: float, eps_hi: float) -> int:
    r = math.exp(z)
    return 1 if r > 1 + eps_hi else -1 if r < 1 - eps_lo else 0


def ref_runs(states: list[int]) -> list[tuple[int, int]]:
    """(state, length) of maximal runs, scanning left to right (KPO App. B.1)."""
    runs, current, count = [], None, 0
    for s in states:
        if s == current:
            count += 1
        else:
            if count > 0:
                runs.append((current, count))
            current, count = s, 1
    if count > 0:
        runs.append((current, count))
    return runs


def ref_switch(states: list[int], window: int) -> float:
    if len(states) <= 1:
        return 0.0
    rates = []
    for start in range(0, len(states), window):
        w = states[start : start + window]
        if len(w) >= 2:
            rates.append(sum(w[j] != w[j - 1] for j in range(1, len(w))) / (len(w) - 1))
    return sum(rates) / len(rates) if rates else 0.0  # window = 1: no adjacent pairs


def ref_window_freq(states: list[int], window: int) -> list[float]:
    n_windows = len(states) // window
    return [
        sum(s != 0 for s in states[w * window : (w + 1) * window]) / window
        for w in range(n_windows)
    ]


def ref_lfr(values: list[float], cutoff: float) -> float:
    x = np.array(values, dtype=np.float64)
    if x.size < 2 or x.max() == x.min():
        return math.nan
    x = x - x.mean()
    power = np.abs(np.fft.fft(x)) ** 2
    L = x.size
    k_c = math.floor(cutoff * L / 2)
    band = set(range(k_c + 1)) | set(range(L - k_c, L))
    return float(sum(power[k] for k in band) / power.sum())


def ref_periodogram(values: list[float], grid: list[float]) -> list[float]:
    x = np.array(values, dtype=np.float64)
    if x.size < 2 or x.max() == x.min():
        return [math.nan] * len(grid)
    x = x - x.mean()
    t = np.arange(x.size)
    return [abs(np.sum(x * np.exp(-2j * np.pi * f * t))) ** 2 / x.size for f in grid]


def ref_var(values: list[float]) -> float:
    if not values:
        return math.nan
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / len(values)


def ref_local_var(values: list[float], window: int) -> float:
    if not values:
        return math.nan
    if len(values) == 1:
        return 0.0
    blocks = [values[s : s + window] for s in range(0, len(values), window)]
    blocks = [b for b in blocks if len(b) >= 2]
    return sum(ref_var(b) for b in blocks) / len(blocks)


# --------------------------------------------------------------------------- data


def random_batch(seed: int, rows: int = 7, length: int = 61, holes: float = 0.15):
    """z with exact zeros, values inside/outside the on-band, ragged masks with holes."""
    rng = random.Random(seed)
    choices = [0.0, 0.0, 1e-4, -1e-4, 0.01, -0.01, 0.3, -0.3]
    z = torch.tensor(
        [[rng.choice(choices) * rng.uniform(0.5, 1.5) for _ in range(length)] for _ in range(rows)],
        dtype=torch.float64,
    )
    z[z.abs() < 1e-12] = 0.0
    mask = torch.zeros(rows, length, dtype=torch.bool)
    for i in range(rows):
        n = [length, 0, 1, 2][i] if i < 4 else rng.randint(0, length)
        mask[i, :n] = torch.tensor([rng.random() >= holes for _ in range(n)], dtype=torch.bool)
    return z, mask


def valid_list(t: torch.Tensor, mask: torch.Tensor, i: int) -> list:
    return t[i][mask[i]].tolist()


def nan_equal(a: float, b: float, tol: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol


# --------------------------------------------------------------------------- hand cases

HAND_STATES = torch.tensor([[1, 1, 0, -1, -1]], dtype=torch.int8)


def test_hand_case_runs_and_switching():
    runs = run_lengths(HAND_STATES, None)
    assert runs.mean_per_sequence.tolist() == [[2.0, 1.0, 2.0]]  # down, on, up
    assert runs.run_count.tolist() == [[1, 1, 1]]
    assert runs.histogram[:, 1].tolist() == [0, 1, 0]
    assert runs.histogram[:, 2].tolist() == [1, 0, 1]
    assert runs.histogram.sum().item() == 3
    assert switch_frequency(HAND_STATES, None).item() == 0.5
    # Windows (+ + 0) and (- -): (1 change / 2 + 0 changes / 1) / 2.
    assert switch_frequency(HAND_STATES, None, window=3).item() == pytest.approx(0.25)


def test_hand_case_states_band():
    z = torch.tensor([[math.log(1.0005), math.log(1.0003), 0.0, math.log(0.9996), -0.1]])
    assert token_states(z, None).tolist() == [[1, 0, 0, -1, -1]]
    assert token_states(z, None, on_band=(0, 0)).tolist() == [[1, 1, 0, -1, -1]]
    masked = token_states(z, torch.tensor([[True, False, True, True, False]]))
    assert masked.dtype == torch.int8 and masked.tolist() == [[1, 0, 0, -1, 0]]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("band", [(3e-4, 4e-4), (0.05, 0.05)])  # 0.05: both edges round away
def test_band_edges_are_exact_in_low_precision(dtype, band):
    # The float32/float16 values nearest to the thresholds get the state that the exact
    # (float64) comparison gives them, whichever way the thresholds round.
    eps_lo, eps_hi = band
    values = []
    for edge in (math.log1p(eps_hi), math.log1p(-eps_lo)):
        x = dtype(edge)
        values += [np.nextafter(x, dtype(-1)), x, np.nextafter(x, dtype(1))]
    z = torch.from_numpy(np.array(values, dtype=dtype)).unsqueeze(0)
    expected = [ref_state(float(v), eps_lo, eps_hi) for v in values]
    assert token_states(z, None, on_band=band).tolist() == [expected]


def test_hand_case_switching_edge_lengths():
    states = torch.tensor([[1, -1, 1], [1, -1, 0]], dtype=torch.int8)
    mask = torch.tensor([[True, False, False], [False, False, False]])
    assert switch_frequency(states, mask).tolist() == [0.0, 0.0]
    # 51 tokens, window 50: the trailing one-token window has no pair and is left out.
    s = torch.zeros(1, 51, dtype=torch.int8)
    s[0, 50] = 1
    assert switch_frequency(s, None).item() == 0.0


def test_hand_case_window_frequency_and_moments():
    states = torch.tensor([[1, 0, -1, 0, 1, 1], [0, 0, 1, 0, 0, 0]], dtype=torch.int8)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    freq = window_offpolicy_frequency(states, mask, window=2)
    assert freq[0].tolist() == [0.5, 0.5, 1.0]
    assert freq[1, 0].item() == 0.0 and freq[1, 1:].isnan().all()
    m = window_moments(freq)
    assert m.count.tolist() == [2, 1, 1]
    assert m.mean.tolist() == pytest.approx([0.25, 0.5, 1.0])
    assert m.var.tolist() == pytest.approx([0.0625, 0.0, 0.0])
    merged = m.merge(window_moments(torch.tensor([[1.0]])))
    assert merged.count.tolist() == [3, 1, 1] and merged.mean[0].item() == pytest.approx(0.5)


def test_host_window_moments_and_state_shares_equal_the_tensor_functions():
    gen = torch.Generator().manual_seed(5)
    freq = torch.rand(40, 9, generator=gen, dtype=torch.float64)
    freq[torch.rand(40, 9, generator=gen) < 0.3] = math.nan  # absent windows
    freq[:, 8] = math.nan  # a window no sequence has
    host, tensor = host_window_moments(freq.numpy()), window_moments(freq)
    assert torch.equal(host.count, tensor.count) and host.count.dtype == torch.int64
    torch.testing.assert_close(host.total, tensor.total, rtol=1e-14, atol=0.0)
    torch.testing.assert_close(host.total_sq, tensor.total_sq, rtol=1e-14, atol=0.0)
    assert host.count[8].item() == 0 and host.total[8].item() == 0.0
    counts = torch.randint(0, 5, (30, 3), generator=gen)
    counts[4] = 0  # a sequence without valid tokens: a NaN row
    want = state_shares(counts)
    got = torch.from_numpy(host_state_shares(counts.numpy()))
    torch.testing.assert_close(got, want, rtol=1e-15, atol=0.0, equal_nan=True)
    assert got[4].isnan().all() and got[0].sum().item() == pytest.approx(1.0)


def test_hand_case_variances():
    x = torch.tensor([[1.0, 3.0, 10.0, 10.0, 7.0]])
    assert global_variance(x, None).item() == pytest.approx(ref_var([1, 3, 10, 10, 7]))
    assert local_variance(x, None, window=2).item() == pytest.approx(0.5)
    one = torch.tensor([[4.0, 9.0]])
    m = torch.tensor([[True, False]])
    assert global_variance(one, m).item() == 0.0 and local_variance(one, m).item() == 0.0
    assert math.isnan(global_variance(one, torch.zeros_like(m)).item())


def test_hand_case_lfr():
    # A pure tone at bin 1 of 40 lies in the band for cutoff 0.1 (k_c = 2); one at bin 10 not.
    t = torch.arange(40, dtype=torch.float64)
    slow = torch.cos(2 * math.pi * t / 40).unsqueeze(0)
    fast = torch.cos(2 * math.pi * 10 * t / 40).unsqueeze(0)
    assert low_frequency_ratio(slow, None).item() == pytest.approx(1.0)
    assert low_frequency_ratio(fast, None).item() == pytest.approx(0.0, abs=1e-12)
    constant = torch.full((1, 30), 0.7)
    assert math.isnan(low_frequency_ratio(constant, None).item())


# --------------------------------------------------------------------------- vs references


@pytest.mark.parametrize("seed", range(4))
def test_states_counts_runs_vs_reference(seed):
    z, mask = random_batch(seed)
    for band in [(3e-4, 4e-4), (0.0, 0.0), (0.02, 0.005)]:
        states = token_states(z, mask, on_band=band)
        runs = run_lengths(states, mask)
        counts = state_counts(states, mask)
        histogram = torch.zeros_like(runs.histogram)
        for i in range(z.shape[0]):
            ref_states = [ref_state(v, *band) for v in valid_list(z, mask, i)]
            assert valid_list(states, mask, i) == ref_states
            assert counts[i].tolist() == [ref_states.count(s) for s in (-1, 0, 1)]
            for s in (-1, 0, 1):
                lengths = [n for state, n in ref_runs(ref_states) if state == s]
                for n in lengths:
                    histogram[s + 1, n] += 1
                mean = sum(lengths) / len(lengths) if lengths else math.nan
                assert nan_equal(runs.mean_per_sequence[i, s + 1].item(), mean, 1e-12)
                assert runs.run_count[i, s + 1].item() == len(lengths)
        assert torch.equal(runs.histogram, histogram)
        assert (states[~mask] == 0).all()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("window", [1, 3, 10, 50])
def test_switch_and_window_frequency_vs_reference(seed, window):
    z, mask = random_batch(seed)
    states = token_states(z, mask)
    switch = switch_frequency(states, mask, window)
    freq = window_offpolicy_frequency(states, mask, window)
    assert freq.shape == (z.shape[0], z.shape[1] // window)
    for i in range(z.shape[0]):
        seq = valid_list(states, mask, i)
        assert switch[i].item() == pytest.approx(ref_switch(seq, window), abs=1e-12)
        expected = ref_window_freq(seq, window)
        assert freq[i, : len(expected)].tolist() == pytest.approx(expected, abs=1e-12)
        assert freq[i, len(expected) :].isnan().all()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("space", ["log", "ratio"])
def test_signal_statistics_vs_reference(seed, space):
    gen = torch.Generator().manual_seed(seed)
    _, mask = random_batch(seed, rows=8, length=97)
    x = 0.3 * torch.randn(8, 97, generator=gen, dtype=torch.float64).cumsum(1) / 5
    x[5] = 0.25  # constant row: zero energy
    mask[5, :40] = True
    cutoff, window, n_freqs = 0.2, 10, 16
    lfr = low_frequency_ratio(x, mask, cutoff, space)
    grid, power = periodogram(x, mask, n_freqs, space)  # grid on the padded FFT's bins
    odd_grid, odd_power = periodogram(x, mask, 12, space)  # grid off them: direct DTFT
    gvar = global_variance(x, mask, space)
    lvar = local_variance(x, mask, window, space)
    assert grid.tolist() == pytest.approx([(g + 0.5) / (2 * n_freqs) for g in range(n_freqs)])
    for i in range(8):
        values = valid_list(x, mask, i)
        if space == "ratio":
            values = [math.exp(v) for v in values]
        assert nan_equal(lfr[i].item(), ref_lfr(values, cutoff), 1e-9)
        expected = ref_periodogram(values, grid.tolist())
        np.testing.assert_allclose(power[i].numpy(), expected, rtol=1e-9, atol=1e-12)
        expected = ref_periodogram(values, odd_grid.tolist())
        np.testing.assert_allclose(odd_power[i].numpy(), expected, rtol=1e-9, atol=1e-12)
        assert nan_equal(gvar[i].item(), ref_var(values), 1e-12)
        assert nan_equal(lvar[i].item(), ref_local_var(values, window), 1e-12)


@pytest.mark.parametrize("cutoff", [0.0, 0.05, 0.1, 0.5, 0.9, 1.0])
def test_lfr_every_length_vs_numpy(cutoff):
    # Every L from 0 to 40 (even, odd, bands that meet at Nyquist) in one batch.
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(41, 40, generator=gen, dtype=torch.float64)
    mask = torch.arange(40).unsqueeze(0) < torch.arange(41).unsqueeze(1)
    got = low_frequency_ratio(x, mask, cutoff)
    for n in range(41):
        assert nan_equal(got[n].item(), ref_lfr(x[n, :n].tolist(), cutoff), 1e-10)


def test_white_noise_lfr_is_about_the_cutoff():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(256, 1024, generator=gen)
    assert low_frequency_ratio(x, None, 0.1).mean().item() == pytest.approx(0.1, abs=0.005)
    assert low_frequency_ratio(x, None, 0.24).mean().item() == pytest.approx(0.24, abs=0.005)
    # Flat at the variance 1; each mean is over 256 exponential draws (sd ~ 0.06).
    _, power = periodogram(x, None, 8)
    assert power.mean(0).tolist() == pytest.approx([1.0] * 8, abs=0.25)
    assert power.mean().item() == pytest.approx(1.0, abs=0.05)


def test_holes_are_compacted_away():
    z, mask = random_batch(5, rows=5, length=50, holes=0.4)
    states = token_states(z, mask)
    dense = torch.zeros_like(states)
    dense_mask = torch.zeros_like(mask)
    for i in range(5):
        seq = states[i][mask[i]]
        dense[i, : seq.numel()] = seq
        dense_mask[i, : seq.numel()] = True
    assert torch.equal(switch_frequency(states, mask, 7), switch_frequency(dense, dense_mask, 7))
    a, b = run_lengths(states, mask), run_lengths(dense, dense_mask)
    assert torch.equal(a.histogram, b.histogram) and torch.equal(a.run_count, b.run_count)


def test_signal_statistics_equals_separate_functions():
    z, mask = random_batch(3, rows=6, length=80, holes=0.3)
    stats = signal_statistics(z, mask, window=7, cutoff=0.2, n_freqs=5)
    states = token_states(z, mask)
    assert torch.equal(stats.lengths, mask.sum(1))
    assert torch.equal(stats.state_counts, state_counts(states, mask))
    assert torch.equal(stats.runs.histogram, run_lengths(states, mask).histogram)
    torch.testing.assert_close(stats.switch_frequency, switch_frequency(states, mask, 7))
    torch.testing.assert_close(
        stats.window_frequency, window_offpolicy_frequency(states, mask, 7), equal_nan=True
    )
    torch.testing.assert_close(
        stats.low_frequency_ratio, low_frequency_ratio(z, mask, 0.2), equal_nan=True
    )
    torch.testing.assert_close(stats.periodogram, periodogram(z, mask, 5)[1], equal_nan=True)
    torch.testing.assert_close(stats.global_variance, global_variance(z, mask), equal_nan=True)
    torch.testing.assert_close(stats.local_variance, local_variance(z, mask, 7), equal_nan=True)
    assert torch.equal(stats.frequencies, frequency_grid(5))


def test_paper_mean_run_length_skips_sequences_without_the_state():
    states = torch.tensor([[1, 1, 1, 1], [1, -1, -1, 1]], dtype=torch.int8)
    paper = run_lengths(states, None).paper_mean()
    # down: only row 1 (2.0); on: nobody; up: (4 + 1) / 2.
    assert paper[0].item() == 2.0 and math.isnan(paper[1].item()) and paper[2].item() == 2.5


def test_bad_arguments_raise_usage_errors():
    z = torch.zeros(2, 5)
    with pytest.raises(UsageError):
        switch_frequency(z.to(torch.int8), None, window=0)
    with pytest.raises(UsageError):
        low_frequency_ratio(z, None, cutoff=1.5)
    with pytest.raises(UsageError):
        global_variance(z, None, space="linear")
    with pytest.raises(UsageError):
        token_states(z, None, on_band=(-1.0, 0.1))


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 4),
    length=st.integers(0, 40),
    window=st.integers(1, 12),
    hole_rate=st.sampled_from([0.0, 0.3, 0.8]),
    seed=st.integers(0, 2**16),
)
def test_property_invariants(rows, length, window, hole_rate, seed):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randint(-1, 2, (rows, length), generator=gen).double() * 0.01
    mask = torch.rand(rows, length, generator=gen) >= hole_rate
    states = token_states(z, mask)
    runs = run_lengths(states, mask)
    lengths = mask.sum(1)
    # Run lengths partition the valid tokens; counts per state match.
    sizes = torch.arange(length + 1)
    assert (runs.histogram * sizes).sum().item() == lengths.sum().item()
    assert torch.equal(runs.token_count, state_counts(states, mask))
    assert runs.histogram.sum().item() == runs.run_count.sum().item()
    switch = switch_frequency(states, mask, window)
    assert ((switch >= 0) & (switch <= 1)).all()
    # Relabelling the states does not change switching; flipping the sequence does not
    # change run statistics.
    assert torch.equal(switch_frequency(-states, mask, window), switch)
    flipped = run_lengths(states.flip(1), mask.flip(1))
    assert torch.equal(flipped.histogram, runs.histogram)
    lfr = low_frequency_ratio(z, mask, 0.3)
    finite = ~lfr.isnan()
    assert ((lfr[finite] >= 0) & (lfr[finite] <= 1)).all()
    assert torch.equal(finite, (lengths >= 2) & (global_variance(z, mask) > 0))
    # Shifting the signal changes neither the spectrum-based nor the variance statistics.
    torch.testing.assert_close(low_frequency_ratio(z + 3.0, mask, 0.3), lfr, equal_nan=True)
    torch.testing.assert_close(
        local_variance(z + 3.0, mask, window), local_variance(z, mask, window), equal_nan=True
    )
