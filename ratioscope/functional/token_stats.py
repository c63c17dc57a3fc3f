"""Token-state and spectral statistics of a ratio signal (KPO App. B.1, C.1, C.2; Table 2).

Every statistic is over each sequence's valid tokens *in order*, with holes in the mask
compacted away, and vectorised over the batch (no loop over sequences or tokens).
A signal is a log-space tensor ``[B, T]`` (raw z, Kalman rho, or the per-sequence mean
broadcast); ``space="ratio"`` computes the signal statistics on exp(signal) instead.

States are int8: -1 down, 0 on, 1 up. Per-state columns of the ``[.., 3]`` outputs are
ordered by ``state + 1``, i.e. :data:`STATE_LABELS` = ("down", "on", "up").

Windows (switch frequency, local variance) are non-overlapping blocks of ``window``
consecutive valid tokens starting at the first one; the last block may be shorter, and
a block of a single token is dropped unless it is the whole sequence.

Each public function packs its input (valid tokens to the front) and calls a private
kernel on the packed rows; :func:`signal_statistics` packs once and shares the work.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ratioscope.errors import ParameterError, ShapeMismatchError

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

Space = Literal["log", "ratio"]
#: how :func:`signal_statistics` counts token states (compiled kernel or tensor code)
Backend = Literal["auto", "compiled", "torch"]

#: Labels of the per-state columns (column j is state j - 1).
STATE_LABELS = ("down", "on", "up")

#: the band of the Kalman-filtered ratio (KPO App. C.1: eps^- = 3e-4, eps^+ = 4e-4)
DEFAULT_ON_BAND = (3e-4, 4e-4)
#: float32 rounding of the ratio at 1: a log-ratio with |z| <= 2^-24 gives a float32
#: exp(z) of 1 (or its neighbour 1 - 2^-24), the "r = 1" a trainer computing its ratios
#: in float32 sees. The smallest non-zero |z| between float32 log-probs near 0 is one
#: ulp, 2^-23 or more, so the tolerance admits float noise and nothing else.
FLOAT32_RATIO_TOLERANCE = 2.0**-24
#: the raw ratio's rule (KPO App. C.1, "r = 1"; App. B.1 counts by the sign of z): on
#: iff r = 1 up to float32 rounding
EXACT_ON_BAND = (FLOAT32_RATIO_TOLERANCE, FLOAT32_RATIO_TOLERANCE)
DEFAULT_WINDOW = 50
DEFAULT_LFR_CUTOFF = 0.1
DEFAULT_N_FREQS = 64


# --------------------------------------------------------------------------- packing


def _check_pair(x: Tensor, mask: Tensor | None, name: str) -> Tensor:
    import torch

    if x.dim() != 2:
        raise ParameterError(name, f"must be a [B, T] tensor, got shape {list(x.shape)}")
    if mask is None:
        return torch.ones(x.shape, dtype=torch.bool, device=x.device)
    if mask.shape != x.shape:
        raise ShapeMismatchError(None, "mask", mask.shape, name, x.shape, expected="equal shapes")
    return (mask if mask.dtype == torch.bool else mask != 0).to(x.device)


def _check_window(window: int) -> None:
    if window < 1:
        raise ParameterError("window", f"must be >= 1 token, got {window}")


def _check_space(space: str) -> None:
    if space not in ("log", "ratio"):
        raise ParameterError("space", f"must be 'log' or 'ratio', got '{space}'")


def _count(flags: Tensor) -> Tensor:
    """Row counts of a bool [B, T] tensor as int64: one compiled loop on the CPU, else
    its bytes summed (~10x a bool sum, which converts every element to int64)."""
    import torch

    from ratioscope.functional import _kernels

    if _kernels.can_take(flags, dtypes=(torch.bool,)):
        return torch.from_numpy(_kernels.row_counts(flags.contiguous().numpy()))
    return flags.view(torch.uint8).sum(1, dtype=torch.int32).long()


@dataclass(frozen=True)
class _Packed:
    """Rows with their valid tokens moved to the front, in order.

    values: [B, T], zero behind each row's prefix; lengths: [B] int64;
    prefix: [B, T] bool, position < length.
    """

    values: Tensor
    lengths: Tensor
    prefix: Tensor


def _pack(x: Tensor, mask: Tensor) -> _Packed:
    import torch

    lengths = _count(mask)
    positions = torch.arange(x.shape[1], device=x.device)
    prefix = positions.unsqueeze(0) < lengths.unsqueeze(1)
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    if bool((prefix == mask).all()):  # already right-padded: nothing to move
        return _Packed(torch.where(prefix, x, zero), lengths, prefix)
    valid_upto = mask.cumsum(1)
    # A permutation: valid tokens keep their order at the front, masked ones go behind.
    target = torch.where(mask, valid_upto - 1, lengths.unsqueeze(1) + positions - valid_upto)
    values = torch.empty_like(x).scatter_(1, target, torch.where(mask, x, zero))
    return _Packed(values, lengths, prefix)


def _window_sums(values: Tensor, window: int, skip_first: bool = False) -> Tensor:
    """[B, T] -> [B, ceil(T / window)] sums over consecutive windows (the last may be
    short); ``skip_first`` leaves out each window's first element."""
    import torch

    rows, length = values.shape
    n_full = length // window
    full = n_full * window
    start = 1 if skip_first else 0
    sums = values[:, :full].reshape(rows, n_full, window)[:, :, start:].sum(-1)
    if full == length:
        return sums
    tail = values[:, full + start :].sum(-1, keepdim=True)
    return torch.cat([sums, tail], dim=1)


def _window_lengths(lengths: Tensor, n_windows: int, window: int) -> Tensor:
    """[B, W] number of valid tokens in each window of each (packed) sequence."""
    import torch

    starts = torch.arange(n_windows, device=lengths.device) * window
    return (lengths.unsqueeze(1) - starts).clamp(0, window)


# --------------------------------------------------------------------------- states


def _threshold(value: float, dtype, above: bool) -> float:
    """A threshold in ``dtype`` such that x > t (or x < t) in that dtype is exactly
    x > value (x < value) in float64 for every x representable in ``dtype``."""
    import numpy as np
    import torch

    if dtype == torch.float64:
        return value
    to_numpy: dict[torch.dtype, type[np.floating]] = {
        torch.float32: np.float32,
        torch.float16: np.float16,
    }
    np_dtype = to_numpy.get(dtype)
    if np_dtype is None:  # bfloat16 and friends: compare in float32 instead
        return value
    rounded = np_dtype(value)
    # Compare as Python floats: numpy would compare in the low precision.
    if above and float(rounded) > value:
        rounded = np.nextafter(rounded, np_dtype(-np.inf))
    if not above and float(rounded) < value:
        rounded = np.nextafter(rounded, np_dtype(np.inf))
    return float(rounded)


def _comparable(z: Tensor) -> Tensor:
    """z in a dtype the state thresholds are rounded for (bfloat16 and others: float32)."""
    import torch

    return z if z.dtype in (torch.float64, torch.float32, torch.float16) else z.to(torch.float32)


def _band_thresholds(on_band: tuple[float, float] | float, dtype) -> tuple[float, float]:
    """(lower, upper): down iff z < lower, up iff z > upper, exact for z of ``dtype``."""
    eps_lo, eps_hi = (on_band, on_band) if isinstance(on_band, (int, float)) else on_band
    if not (0.0 <= eps_lo < 1.0 and eps_hi >= 0.0):
        raise ParameterError("on_band", f"needs 0 <= eps_lo < 1 and eps_hi >= 0, got {on_band}")
    lower = _threshold(math.log1p(-eps_lo), dtype, above=False)
    return lower, _threshold(math.log1p(eps_hi), dtype, above=True)


def _states(z: Tensor, valid: Tensor, on_band: tuple[float, float] | float) -> Tensor:
    import torch

    z = _comparable(z)
    lower, upper = _band_thresholds(on_band, z.dtype)
    up = z > upper
    down = z < lower
    return (up & valid).to(torch.int8) - (down & valid).to(torch.int8)


def token_states(
    z: Tensor, mask: Tensor | None, on_band: tuple[float, float] | float = DEFAULT_ON_BAND
) -> Tensor:
    """Token state from the ratio r = exp(z) (KPO App. C.1).

    up (1) if r > 1 + eps_hi, down (-1) if r < 1 - eps_lo, on (0) otherwise. The test is
    done in log space (z > log1p(eps_hi), z < log1p(-eps_lo), exact as in float64),
    which avoids exp rounding, so ``on_band=(0, 0)`` means on iff z == 0 exactly, i.e.
    r == 1 bitwise. The paper uses two rules: r = 1 for raw ratios, which
    :data:`EXACT_ON_BAND` (2^-24 each side, float32 rounding) reads, and the band
    eps^- = 3e-4, eps^+ = 4e-4 (:data:`DEFAULT_ON_BAND`, the default here) for
    Kalman-filtered ones.

    Args:
        z: [B, T] float log-ratios (raw, filtered, or sequence-level broadcast).
        mask: [B, T] bool valid tokens, or None for all.
        on_band: (eps_lo, eps_hi) >= 0, or one number for both.

    Returns:
        [B, T] int8 in {-1, 0, 1}; 0 at masked positions.

    >>> import torch
    >>> z = torch.tensor([[0.1, 0.0, -0.1, 1e-4]])
    >>> token_states(z, None).tolist()
    [[1, 0, -1, 0]]
    """
    return _states(z, _check_pair(z, mask, "z"), on_band)


def _state_counts(states: Tensor, valid: Tensor) -> Tensor:
    import torch

    return torch.stack([_count((states == s) & valid) for s in (-1, 0, 1)], dim=1)


def state_counts(states: Tensor, mask: Tensor | None) -> Tensor:
    """Valid tokens per state per sequence (KPO Table 2, "token proportion").

    Args:
        states: [B, T] int8 from :func:`token_states`; mask: [B, T] bool or None.

    Returns:
        [B, 3] int64, columns (down, on, up). KPO Table 2's proportions are
        averaged over samples, ``(counts / counts.sum(1, keepdim=True)).mean(0)``
        (:func:`state_shares`); pooled over tokens they are ``counts.sum(0) / counts.sum()``.
    """
    return _state_counts(states, _check_pair(states, mask, "states"))


def state_shares(state_counts: Tensor) -> Tensor:
    """Each sequence's share of valid tokens per state (KPO Table 2, "token proportion").

    Table 2's caption says "All reported values are averaged over all samples": the
    table's proportion is the mean of these rows over sequences.

    Args:
        state_counts: [B, 3] int64 from :func:`state_counts` (columns down, on, up).

    Returns:
        [B, 3] float64, rows summing to 1; NaN rows for sequences without valid tokens.

    >>> import torch
    >>> state_shares(torch.tensor([[1, 2, 1], [0, 0, 0]])).tolist()
    [[0.25, 0.5, 0.25], [nan, nan, nan]]
    """
    counts = state_counts.double()
    totals = counts.sum(dim=1, keepdim=True)
    return (counts / totals).masked_fill(totals == 0, math.nan)


def host_state_shares(state_counts: np.ndarray) -> np.ndarray:
    """:func:`state_shares` of a host array: [B, 3] int64 counts in, [B, 3] float64
    shares out (NaN rows for sequences without valid tokens), by numpy."""
    import numpy as np

    totals = state_counts.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals == 0, np.nan, state_counts / totals)


# --------------------------------------------------------------------------- run lengths


@dataclass(frozen=True)
class RunLengths:
    """Maximal runs of one state over each sequence's valid tokens (KPO App. B.1).

    Attributes:
        run_count: [B, 3] int64, number of runs per state (columns down, on, up).
        token_count: [B, 3] int64, valid tokens per state (= total length of its runs).
        mean_per_sequence: [B, 3] float64, token_count / run_count; NaN where a
            sequence never enters the state.
        histogram: [3, T + 1] int64, pooled over the batch: histogram[j, n] = number of
            runs of state j - 1 with length n (column 0 is always 0).
    """

    run_count: Tensor
    token_count: Tensor
    mean_per_sequence: Tensor
    histogram: Tensor

    def paper_mean(self) -> Tensor:
        """[3] float64: per-sequence means averaged over the sequences that have the
        state (the figure of KPO Table 2); NaN for a state no sequence has."""
        import torch

        return torch.nanmean(self.mean_per_sequence, dim=0)


def _run_lengths(packed: _Packed) -> RunLengths:
    import torch

    states, lengths, prefix = packed.values, packed.lengths, packed.prefix
    rows, length = states.shape
    starts = prefix.clone()
    starts[:, 1:] &= states[:, 1:] != states[:, :-1]
    # One entry per run; a run ends where the next run of its row starts, or at the
    # row's length.
    row, start = starts.nonzero(as_tuple=True)
    end = lengths[row]
    if row.numel() > 1:
        end[:-1] = torch.where(row[1:] == row[:-1], start[1:], end[:-1])
    column = states[row, start].long() + 1
    run_count = torch.bincount(row * 3 + column, minlength=rows * 3).view(rows, 3)
    token_count = _state_counts(states, prefix)
    mean = (token_count.double() / run_count.double()).masked_fill(run_count == 0, math.nan)
    flat = column * (length + 1) + (end - start)
    histogram = torch.bincount(flat, minlength=3 * (length + 1)).view(3, length + 1)
    return RunLengths(run_count, token_count, mean, histogram)


def run_lengths(states: Tensor, mask: Tensor | None) -> RunLengths:
    """Run-length statistics of the valid state sequence of every row (KPO App. B.1).

    A run is a maximal block of consecutive valid tokens (holes in the mask compacted
    away) with one state.

    Args:
        states: [B, T] int8 in {-1, 0, 1}; mask: [B, T] bool or None.

    Returns:
        :class:`RunLengths`.

    >>> import torch
    >>> s = torch.tensor([[1, 1, 0, -1, -1]], dtype=torch.int8)
    >>> run_lengths(s, None).mean_per_sequence.tolist()
    [[2.0, 1.0, 2.0]]
    """
    return _run_lengths(_pack(states, _check_pair(states, mask, "states")))


# --------------------------------------------------------------------------- switching


def _switch_frequency(packed: _Packed, window: int) -> Tensor:
    return _switch_rates(_window_changes(packed, window), packed.lengths, window)


def _window_changes(packed: _Packed, window: int) -> Tensor:
    """[B, ceil(T / window)] int64 adjacent state changes inside each window."""
    import torch

    states, prefix = packed.values, packed.prefix
    changes = torch.zeros_like(prefix)
    changes[:, 1:] = (states[:, 1:] != states[:, :-1]) & prefix[:, 1:]
    # A pair that straddles two windows (its second token opens a window) is in neither.
    return _window_sums(changes, window, skip_first=True)


def _switch_rates(changes: Tensor, lengths: Tensor, window: int) -> Tensor:
    """[B] mean over windows of changes / (window length - 1), from integer counts."""
    import torch

    counts = changes.double()
    sizes = _window_lengths(lengths, counts.shape[1], window)
    used = sizes >= 2
    rates = torch.where(used, counts / (sizes - 1).clamp(min=1), 0.0)
    n_used = used.sum(1)
    return torch.where(n_used > 0, rates.sum(1) / n_used.clamp(min=1), 0.0)


def switch_frequency(states: Tensor, mask: Tensor | None, window: int = DEFAULT_WINDOW) -> Tensor:
    """Per-sequence state-switch rate (KPO App. B.1, "Switch-frequency computation").

    The valid state sequence is cut into non-overlapping windows of ``window`` tokens;
    a window of length L >= 2 scores (#adjacent changes) / (L - 1); the sequence value
    is the mean over its windows. A sequence shorter than ``window`` is one window; a
    trailing window of a single token has no adjacent pair and is left out; a sequence
    of <= 1 valid token scores 0.

    Args:
        states: [B, T] int8 in {-1, 0, 1}; mask: [B, T] bool or None.
        window: window length in tokens (paper: 50).

    Returns:
        [B] float64 in [0, 1].

    >>> import torch
    >>> s = torch.tensor([[1, 1, 0, -1, -1]], dtype=torch.int8)
    >>> switch_frequency(s, None).item()
    0.5
    """
    _check_window(window)
    return _switch_frequency(_pack(states, _check_pair(states, mask, "states")), window)


# --------------------------------------------------------------------------- windows


def _window_frequency(packed: _Packed, window: int) -> Tensor:
    rows, length = packed.values.shape
    n_windows = length // window
    off = packed.values[:, : n_windows * window] != 0
    counts = off.reshape(rows, n_windows, window).sum(-1)
    return _window_rates(counts, packed.lengths, window)


def _window_rates(off_counts: Tensor, lengths: Tensor, window: int) -> Tensor:
    """[B, W] off-policy share per full window from integer counts; NaN where a
    sequence does not reach the window's end."""
    import torch

    freq = off_counts.double() / window
    ends = torch.arange(1, off_counts.shape[1] + 1, device=off_counts.device) * window
    return freq.masked_fill(ends > lengths.unsqueeze(1), math.nan)


def window_offpolicy_frequency(
    states: Tensor, mask: Tensor | None, window: int = DEFAULT_WINDOW
) -> Tensor:
    """Per-window off-policy frequency (KPO App. B.1, "Window-wise off-policy frequency").

    Only full windows of the valid prefix count: a sequence of L valid tokens has
    n_w = floor(L / window) windows; each scores (#up + #down) / window.

    Args:
        states: [B, T] int8 in {-1, 0, 1}; mask: [B, T] bool or None.
        window: window length (paper: 50).

    Returns:
        [B, T // window] float64; NaN for windows a sequence does not have. Pool across
        sequences, chunks and files with :func:`window_moments`.

    >>> import torch
    >>> s = torch.tensor([[1, 0, -1, 0, 1]], dtype=torch.int8)
    >>> window_offpolicy_frequency(s, None, window=2).tolist()
    [[0.5, 0.5]]
    """
    _check_window(window)
    return _window_frequency(_pack(states, _check_pair(states, mask, "states")), window)


@dataclass(frozen=True)
class WindowMoments:
    """Mergeable per-window-index sums behind the window-wise off-policy frequency curve
    (KPO App. B.1, Fig. 1): its mean and population variance (ddof 0) over the sequences
    that have each window.

    Built by :func:`window_moments`; chunks, files and shards add with :meth:`merge`.

    Attributes:
        total, total_sq: [W] float64, sums of values and of squared values.
        count: [W] int64, number of sequences that have the window.
    """

    total: Tensor
    total_sq: Tensor
    count: Tensor

    @classmethod
    def empty(cls) -> WindowMoments:
        """No window yet (W = 0): the start of a merge."""
        import torch

        zeros = torch.zeros(0, dtype=torch.float64)
        return cls(zeros, zeros, torch.zeros(0, dtype=torch.long))

    def merge(self, other: WindowMoments) -> WindowMoments:
        """Sum two accumulators (of possibly different lengths W)."""
        import torch.nn.functional as F

        width = max(self.count.shape[0], other.count.shape[0])

        def pad(t: Tensor) -> Tensor:
            return F.pad(t, (0, width - t.shape[0]))

        return WindowMoments(
            pad(self.total) + pad(other.total),
            pad(self.total_sq) + pad(other.total_sq),
            pad(self.count) + pad(other.count),
        )

    def cpu(self) -> WindowMoments:
        return WindowMoments(self.total.cpu(), self.total_sq.cpu(), self.count.cpu())

    def trimmed(self) -> WindowMoments:
        """Without the trailing windows no sequence has (a chunk is as wide as its
        longest row, so its last window indices may have count 0)."""
        present = self.count.nonzero()
        width = int(present.max()) + 1 if present.numel() else 0
        return WindowMoments(self.total[:width], self.total_sq[:width], self.count[:width])

    @property
    def mean(self) -> Tensor:
        """[W] float64 nanmean over sequences; NaN where count is 0."""
        return self.total / self.count

    @property
    def var(self) -> Tensor:
        """[W] float64 population variance (ddof 0); NaN where count is 0."""
        mean = self.mean
        return (self.total_sq / self.count - mean * mean).clamp(min=0.0)


def window_moments(values: Tensor) -> WindowMoments:
    """Accumulate [B, W] per-window values (NaN = absent) into :class:`WindowMoments`.

    >>> import torch
    >>> m = window_moments(torch.tensor([[0.2, 0.4], [0.4, float("nan")]]))
    >>> [round(x, 6) for x in m.mean.tolist()], m.count.tolist()
    ([0.3, 0.4], [2, 1])
    """
    import torch

    values = values.to(torch.float64)
    present = ~values.isnan()
    filled = torch.where(present, values, 0.0)
    return WindowMoments(filled.sum(0), filled.square().sum(0), present.sum(0))


def host_window_moments(values: np.ndarray) -> WindowMoments:
    """:func:`window_moments` of a host array: [B, W] float64 per-window values (NaN =
    absent) summed by numpy (a small chunk's fold pays numpy's call, not torch's)."""
    import numpy as np
    import torch

    present = ~np.isnan(values)
    filled = np.where(present, values, 0.0)
    return WindowMoments(
        torch.from_numpy(filled.sum(axis=0)),
        torch.from_numpy(np.square(filled).sum(axis=0)),
        torch.from_numpy(present.sum(axis=0).astype(np.int64)),
    )


# --------------------------------------------------------------------------- signals


@dataclass(frozen=True)
class _Centred:
    """Packed float64 signal minus each row's mean (0 behind the prefix).

    weights: [B, T] the prefix indicator, float64 (or the bool prefix itself where the
    GPU's kernel centred the rows: it multiplies the same); energetic: [B] bool, >= 2
    valid tokens that are not all equal (exactly constant rows would otherwise keep the
    rounding noise of their mean as "energy").
    """

    values: Tensor
    lengths: Tensor
    weights: Tensor
    energetic: Tensor


def _centre(packed: _Packed, space: Space) -> _Centred:
    import torch

    _check_space(space)
    weights = packed.prefix.to(torch.float64)
    x = packed.values.to(torch.float64)
    if space == "ratio":
        x = x.exp_() if x is not packed.values else x.exp()
        x.mul_(weights)
    n = packed.lengths.clamp(min=1).to(torch.float64)
    centred = (x - (x.sum(1) / n).unsqueeze(1)).mul_(weights)
    varies = ((packed.values != packed.values[:, :1]) & packed.prefix).any(1)
    return _Centred(centred, packed.lengths, weights, (packed.lengths >= 2) & varies)


def _signal_pack(x: Tensor, mask: Tensor | None, space: Space) -> _Centred:
    _check_space(space)
    return _centre(_pack(x, _check_pair(x, mask, "signal")), space)


@dataclass(frozen=True)
class _Spectrum:
    """|DTFT|^2 of the zero-padded packed rows, in buckets of rows that share an FFT
    size: ``buckets`` holds (rows: [b] int64 or a slice of all rows, n_fft,
    power [b, n_fft/2 + 1] at f = j / n_fft)."""

    buckets: list[tuple[Tensor | slice, int, Tensor]]


#: the largest FFT size :func:`_fft_size` picks from (far above any row's 2 L - 1)
_LARGEST_FFT = 1 << 40


@functools.cache
def _smooth_sizes() -> Tensor:
    """[K] int64, increasing: every 2^a 3^b 5^c <= :data:`_LARGEST_FFT` (3,461 of them),
    the sizes an FFT of factors 2, 3 and 5 handles as fast per point as a power of two."""
    import torch

    sizes = []
    two = 1
    while two <= _LARGEST_FFT:
        three = two
        while three <= _LARGEST_FFT:
            five = three
            while five <= _LARGEST_FFT:
                sizes.append(five)
                five *= 5
            three *= 3
        two *= 2
    return torch.tensor(sorted(sizes), dtype=torch.int64)


def _fft_size(lengths: Tensor, unit: int) -> Tensor:
    """[B] int64 the FFT size of each row: the smallest ``unit`` m >= 2 L - 1 with m of
    factors 2, 3 and 5 only, so that its linear autocorrelation does not wrap around.
    A multiple of ``unit`` (4 n_freqs: the periodogram's grid lies on the FFT's bins);
    on ragged lengths about a fifth smaller than the power of two >= 2 L - 1, and as
    fast per point."""
    import torch

    need = 2 * lengths.clamp(min=1) - 1
    factors = (need + unit - 1).div(unit, rounding_mode="floor").cpu()
    table = _smooth_sizes()
    return (table[torch.searchsorted(table, factors)] * unit).to(lengths.device)


def _spectrum(signal: _Centred, unit: int = 2) -> _Spectrum:
    """One rfft per bucket of rows of equal FFT size: a row of L tokens needs 2 L - 1
    points, so short rows do not pay for the longest one (on ragged lengths about a
    third of the FFT time). ``unit``: the sizes are multiples of it (the periodogram
    reads its grid off sizes that are multiples of 4 n_freqs).

    Off the CPU, one bucket of every row at the size the padded width T needs: a GPU
    pays a launch per operation (six a bucket, a few dozen buckets on ragged lengths)
    and a read of the sizes back to the host, far more than the longer transforms.
    Any size >= 2 L - 1 gives a row the same autocorrelation and periodogram bins."""
    import torch

    length = signal.values.shape[1]
    if signal.values.device.type != "cpu" and signal.values.shape[0] > 0:
        n_fft = int(_fft_size(torch.tensor([length]), unit)[0])
        return _Spectrum([(slice(None), n_fft, _power(signal.values, n_fft))])
    sizes = _fft_size(signal.lengths, unit)
    buckets: list[tuple[Tensor | slice, int, Tensor]] = []
    for n_fft in torch.unique(sizes).tolist():
        rows = (sizes == n_fft).nonzero().squeeze(1)
        values = signal.values.index_select(0, rows)[:, : min(length, n_fft)]
        buckets.append((rows, int(n_fft), _power(values, int(n_fft))))
    return _Spectrum(buckets)


def _power(values: Tensor, n_fft: int) -> Tensor:
    """|rfft(values, n_fft)|^2 along dim 1: [b, n_fft / 2 + 1] float64."""
    import torch

    spectrum = torch.fft.rfft(values, n=n_fft, dim=1)
    return spectrum.real.square_().add_(spectrum.imag.square_())


def _autocorrelation(signal: _Centred, spectrum: _Spectrum) -> Tensor:
    """Linear autocorrelation a(m) = sum_t x_t x_{t+m}, m = 0..T-1, of the packed rows.

    Lags >= L are set to exactly 0 (the FFT leaves rounding noise there).
    """
    import torch

    length = signal.values.shape[1]
    if len(spectrum.buckets) == 1 and isinstance(spectrum.buckets[0][0], slice):
        _, n_fft, power = spectrum.buckets[0]  # every row, n_fft >= 2 T - 1
        return torch.fft.irfft(power, n=n_fft, dim=1)[:, :length].mul_(signal.weights)
    auto = torch.zeros_like(signal.values)
    for rows, n_fft, power in spectrum.buckets:
        lags = min(length, n_fft)
        auto[rows, :lags] = torch.fft.irfft(power, n=n_fft, dim=1)[:, :lags]
    return auto.mul_(signal.weights)


def _low_frequency_ratio(
    signal: _Centred, auto: Tensor, cutoff: float, compiled: bool = False
) -> Tensor:
    """LFR of each packed row from its linear autocorrelation ``auto`` [B, T]; the band
    by the compiled loop of :mod:`ratioscope.functional._ratio_kernels` when
    ``compiled`` (CPU), else by tensor code over every lag."""
    import torch

    rows, length = auto.shape
    if length == 0:
        return torch.full((rows,), math.nan, dtype=torch.float64, device=auto.device)
    size = signal.lengths.clamp(min=1).to(torch.float64).unsqueeze(1)
    width = _band_widths(signal.lengths, cutoff).unsqueeze(1)
    if compiled:
        band = _band_compiled(auto, signal.lengths, width.squeeze(1))
    else:
        band = _band_torch(auto, size, width)
    return _band_share(band, auto[:, 0], signal.lengths, width.squeeze(1), signal.energetic)


def _band_by_kernel(values: Tensor) -> bool:
    """Whether the LFR's band comes from the Triton kernel: rows on a GPU where Triton
    compiles (:func:`ratioscope.functional._triton_kernels.on_gpu`)."""
    from ratioscope.functional import _triton_kernels

    return _triton_kernels.on_gpu(values)


def _low_frequency_ratio_by_kernel(signal: _Centred, spectrum: _Spectrum, cutoff: float) -> Tensor:
    """:func:`_low_frequency_ratio` with the band by the Triton kernel
    (``_triton_kernels.lfr_band``), bucket by bucket straight from each bucket's inverse
    FFT: the kernel reads a row's L lags once, so the lags past L, which the tensor path
    zeroes, are never touched, and no [B, T] autocorrelation is gathered."""
    import torch

    from ratioscope.functional import _triton_kernels

    width = _band_widths(signal.lengths, cutoff)
    rows, length = signal.values.shape
    if length == 0:
        return torch.full((rows,), math.nan, dtype=torch.float64, device=signal.values.device)
    buckets = spectrum.buckets
    if len(buckets) == 1 and isinstance(buckets[0][0], slice):  # every row: a GPU's
        _, n_fft, power = buckets[0]
        band, energy = _triton_kernels.lfr_band(
            torch.fft.irfft(power, n=n_fft, dim=1), signal.lengths, width
        )
    else:
        band, energy = torch.zeros((2, rows), dtype=torch.float64, device=width.device)
        for chosen, n_fft, power in buckets:
            auto = torch.fft.irfft(power, n=n_fft, dim=1)
            band[chosen], energy[chosen] = _triton_kernels.lfr_band(
                auto, signal.lengths[chosen], width[chosen]
            )
    return _band_share(band, energy, signal.lengths, width, signal.energetic)


def _band_widths(lengths: Tensor, cutoff: float) -> Tensor:
    """[B] float64 2 k_c + 1, the LFR band's bins, of rows of ``lengths`` [B] tokens."""
    import torch

    return 2 * torch.floor(cutoff * lengths.clamp(min=1).to(torch.float64) / 2) + 1


def _band_share(
    band: Tensor, energy: Tensor, lengths: Tensor, width: Tensor, energetic: Tensor
) -> Tensor:
    """[B] LFR: ``band`` over the total L a(0) (``energy`` [B] = a(0), the sum of squares),
    in [0, 1]; 1 where the band covers every bin, NaN where the row has no energy."""
    import torch

    total = lengths.to(torch.float64) * energy
    ratio = (band / total.clamp(min=1e-300)).clamp_(0.0, 1.0)
    # When 2 k_c + 1 >= L the two halves of the band cover every bin.
    ratio = torch.where(width >= lengths, 1.0, ratio)
    return torch.where(energetic, ratio, math.nan)


def _band_torch(auto: Tensor, size: Tensor, width: Tensor) -> Tensor:
    """[B] band energy: auto [B, T], size and width [B, 1] float64 (L and 2 k_c + 1)."""
    import torch

    lag = torch.arange(auto.shape[1], dtype=torch.float64, device=auto.device).unsqueeze(0)
    angle = (math.pi / size) * lag
    # Dirichlet kernel of the band, sin(angle (2k_c+1)) / sin(angle); at lag 0 it is
    # 2k_c + 1. c_L(m) pairs lag m with lag L - m and D is symmetric, so each lag m >= 1
    # counts twice; lags >= L carry a(m) = 0.
    kernel = torch.sin(angle * width).div_(torch.sin(angle).clamp_(min=1e-300)).mul_(2.0)
    return (auto[:, 1:] * kernel[:, 1:]).sum(1) + auto[:, 0] * width.squeeze(1)


def _band_compiled(auto: Tensor, lengths: Tensor, width: Tensor) -> Tensor:
    """:func:`_band_torch` over each row's L lags only, its sines from one table per row
    (:func:`ratioscope.functional._ratio_kernels.lfr_band`)."""
    import numpy as np
    import torch

    from ratioscope.functional import _kernels, _ratio_kernels

    band = np.zeros(auto.shape[0], dtype=np.float64)
    energy = np.zeros(auto.shape[0], dtype=np.float64)  # a(0): the caller has it
    values, sizes, widths = auto.numpy(), lengths.numpy(), width.to(torch.int64).numpy()

    def part(start: int, stop: int) -> None:  # rows are independent: the same bits
        table = np.empty(max(auto.shape[1], 1), dtype=np.float64)  # a part's scratch
        rows = np.arange(start, stop)
        _ratio_kernels.lfr_band(values[start:stop], rows, sizes, widths, table, band, energy)

    _kernels.map_rows(part, auto.shape[0], auto.numel())
    return torch.from_numpy(band)


def low_frequency_ratio(
    x: Tensor, mask: Tensor | None, cutoff: float = DEFAULT_LFR_CUTOFF, space: Space = "log"
) -> Tensor:
    """Low-frequency ratio of each sequence (KPO App. C.2).

    Over the L valid tokens of a row: x_t minus its mean, P_k = |DFT_L(x)_k|^2, band
    {0..k_c} U {L-k_c..L-1} with k_c = floor(cutoff * L / 2) (cutoff is a fraction of
    Nyquist), LFR = band energy / total energy. White noise gives about ``cutoff``.

    Each row has its own L, so the band energy is computed exactly from the row's
    circular autocorrelation c_L(m) = a(m) + a(L - m) (a = linear autocorrelation, one
    batched FFT of the zero-padded rows) and the band's Dirichlet kernel
    D(m) = sin(pi m (2 k_c + 1) / L) / sin(pi m / L): band = sum_m c_L(m) D(m); the
    total is L sum_t x_t^2 (Parseval).

    Args:
        x: [B, T] float signal in log space; mask: [B, T] bool or None.
        cutoff: f_c in [0, 1], fraction of the Nyquist frequency (default 0.1).
        space: "log" (x as given) or "ratio" (exp(x)).

    Returns:
        [B] float64 in [0, 1]; NaN for sequences with zero energy (fewer than 2 valid
        tokens, or all valid values equal).

    >>> import math, torch
    >>> slow = torch.cos(2 * math.pi * torch.arange(40) / 40).unsqueeze(0)
    >>> round(low_frequency_ratio(slow, None).item(), 6)
    1.0
    """
    _check_cutoff(cutoff)
    signal = _signal_pack(x, mask, space)
    return _low_frequency_ratio(signal, _autocorrelation(signal, _spectrum(signal)), cutoff)


def _check_cutoff(cutoff: float) -> None:
    if not 0.0 <= cutoff <= 1.0:
        raise ParameterError("cutoff", f"must be in [0, 1] (a fraction of Nyquist), got {cutoff}")


def frequency_grid(n_freqs: int = DEFAULT_N_FREQS) -> Tensor:
    """[n_freqs] float64 bin centres (g + 0.5) / (2 n_freqs) in cycles/token, in (0, 0.5)."""
    import torch

    if n_freqs < 1:
        raise ParameterError("n_freqs", f"must be >= 1, got {n_freqs}")
    return (torch.arange(n_freqs, dtype=torch.float64) + 0.5) / (2 * n_freqs)


def _periodogram(signal: _Centred, spectrum: _Spectrum, grid: Tensor) -> Tensor:
    """P(f) = |X(f)|^2 / L on the grid, read off each bucket's padded FFT: its size is
    a multiple of 4 n_freqs (:func:`_fft_size`), so the grid's centres (2 g + 1) /
    (4 n_freqs) are FFT bins."""
    import torch

    n_freqs = grid.shape[0]
    power = torch.empty(
        (signal.values.shape[0], n_freqs), dtype=torch.float64, device=signal.values.device
    )
    for rows, n_fft, bucket in spectrum.buckets:
        step = n_fft // (4 * n_freqs)
        power[rows] = bucket[:, step :: 2 * step][:, :n_freqs]
    return _per_token_power(power, signal.lengths, signal.energetic)


def _per_token_power(power: Tensor, lengths: Tensor, energetic: Tensor) -> Tensor:
    """``power`` [B, n_freqs] |X(f)|^2 divided by each row's L, NaN for rows without
    energy (in place)."""
    import torch

    power /= lengths.clamp(min=1).to(torch.float64).unsqueeze(1)
    return power.masked_fill_(~energetic.unsqueeze(1), math.nan)


def periodogram(
    x: Tensor, mask: Tensor | None, n_freqs: int = DEFAULT_N_FREQS, space: Space = "log"
) -> tuple[Tensor, Tensor]:
    """Per-sequence periodogram on a common frequency grid (KPO App. C.2, for plots).

    P(f) = |sum_t x_t exp(-2 pi i f t)|^2 / L over the L valid tokens of the
    mean-centred signal, evaluated at the bin centres of :func:`frequency_grid`, so
    sequences of different lengths share the grid. With this normalisation white noise
    of variance s^2 has E[P(f)] ~ s^2 at every f, and the sum of P over the L DFT
    frequencies k / L is L times the population variance. Average over sequences by
    summing rows and dividing by the number of non-NaN rows.

    Args:
        x: [B, T] float signal in log space; mask: [B, T] bool or None.
        n_freqs: number of grid points in (0, 0.5) cycles/token.
        space: "log" or "ratio".

    Returns:
        (grid [n_freqs] float64 on the CPU, power [B, n_freqs] float64); rows with zero
        energy (as in :func:`low_frequency_ratio`) are NaN.
    """
    grid = frequency_grid(n_freqs)
    signal = _signal_pack(x, mask, space)
    spectrum = _spectrum(signal, unit=4 * n_freqs)
    return grid, _periodogram(signal, spectrum, grid.to(x.device))


# --------------------------------------------------------------------------- variance


def _global_variance(signal: _Centred) -> Tensor:
    import torch

    energy = torch.linalg.vector_norm(signal.values, dim=1).square_()
    return energy / signal.lengths.to(torch.float64)


def global_variance(x: Tensor, mask: Tensor | None, space: Space = "log") -> Tensor:
    """Population variance (ddof 0) over each sequence's valid tokens (KPO Table 2).

    Returns:
        [B] float64; NaN for a sequence without valid tokens.

    >>> import torch
    >>> global_variance(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), None).tolist()
    [1.25]
    """
    return _global_variance(_signal_pack(x, mask, space))


def _local_variance(signal: _Centred, window: int) -> Tensor:
    """Two passes per window on the globally centred rows (well conditioned)."""
    import torch

    values, weights = signal.values, signal.weights
    rows, length = values.shape
    sums = _window_sums(values, window)
    sizes = _window_lengths(signal.lengths, sums.shape[1], window).to(torch.float64)
    means = sums / sizes.clamp(min=1)
    n_full = length // window
    full = n_full * window
    deviation = values[:, :full].reshape(rows, n_full, window) - means[:, :n_full, None]
    deviation.mul_(weights[:, :full].reshape(rows, n_full, window))
    squares = torch.linalg.vector_norm(deviation, dim=-1).square_()
    if full < length:
        tail = (values[:, full:] - means[:, -1:]).mul_(weights[:, full:])
        squares = torch.cat([squares, torch.linalg.vector_norm(tail, dim=-1, keepdim=True) ** 2], 1)
    variances = squares / sizes.clamp(min=1)
    # A trailing single-token window is left out unless it is the whole sequence.
    only = (signal.lengths == 1).unsqueeze(1)
    used = (sizes >= 2) | (only & (sizes == 1))
    n_used = used.sum(1)
    total = torch.where(used, variances, 0.0).sum(1)
    return torch.where(n_used > 0, total / n_used.clamp(min=1), math.nan)


def local_variance(
    x: Tensor, mask: Tensor | None, window: int = DEFAULT_WINDOW, space: Space = "log"
) -> Tensor:
    """Mean within-window population variance (KPO Table 2, "windowed local variance").

    Windows as for :func:`switch_frequency`: consecutive blocks of ``window`` valid
    tokens, the last one possibly shorter; a trailing single-token window (variance 0 by
    construction) is left out unless it is the whole sequence.

    Returns:
        [B] float64; 0 for a single valid token, NaN for none.

    >>> import torch
    >>> local_variance(torch.tensor([[1.0, 3.0, 10.0, 10.0, 7.0]]), None, window=2).tolist()
    [0.5]
    """
    _check_window(window)
    return _local_variance(_signal_pack(x, mask, space), window)


# --------------------------------------------------------------------------- all at once


@dataclass(frozen=True)
class SignalStatistics:
    """Every per-sequence statistic of one signal (one variant), KPO Table 2.

    Attributes:
        lengths: [B] int64 valid tokens per sequence.
        state_counts: [B, 3] int64 (columns down, on, up).
        runs: :class:`RunLengths`.
        switch_frequency: [B] float64.
        window_frequency: [B, T // window] float64, NaN where absent.
        low_frequency_ratio: [B] float64, NaN for zero energy.
        frequencies: [n_freqs] float64 grid; periodogram: [B, n_freqs] float64.
        global_variance, local_variance: [B] float64.
    """

    lengths: Tensor
    state_counts: Tensor
    runs: RunLengths
    switch_frequency: Tensor
    window_frequency: Tensor
    low_frequency_ratio: Tensor
    frequencies: Tensor
    periodogram: Tensor
    global_variance: Tensor
    local_variance: Tensor


@dataclass(frozen=True)
class _StateStatistics:
    """The token-state part of :class:`SignalStatistics` (all but the signal values)."""

    runs: RunLengths
    switch_frequency: Tensor
    window_frequency: Tensor


def _compiled(signal: Tensor, backend: Backend) -> bool:
    """Whether to count states with the compiled kernel (see :func:`signal_statistics`)."""
    from ratioscope.functional import _kernels

    if backend not in ("auto", "compiled", "torch"):
        raise ParameterError("backend", f"must be 'auto', 'compiled' or 'torch', got '{backend}'")
    if backend == "torch":
        return False
    usable = signal.device.type == "cpu" and _kernels.available()
    if backend == "compiled" and not usable:
        raise ParameterError("backend", "'compiled' needs numba installed and a CPU tensor")
    return usable


def _state_statistics_torch(
    packed: _Packed, on_band: tuple[float, float] | float, window: int
) -> _StateStatistics:
    """States of the packed rows as an int8 tensor, then runs, switches and windows."""
    states = _Packed(_states(packed.values, packed.prefix, on_band), packed.lengths, packed.prefix)
    return _StateStatistics(
        runs=_run_lengths(states),
        switch_frequency=_switch_frequency(states, window),
        window_frequency=_window_frequency(states, window),
    )


def _state_statistics_compiled(
    signal: Tensor, valid: Tensor, on_band: tuple[float, float] | float, window: int
) -> _StateStatistics:
    """:func:`_state_statistics_torch` from one pass per row over the unpacked signal
    (masked positions skipped there); the integer counts are equal, and the same
    tensor code turns them into rates."""
    import torch

    from ratioscope.functional import _kernels

    z = _comparable(signal)
    lower, upper = _band_thresholds(on_band, z.dtype)
    # float16 -> float32 is exact and the thresholds are float16 values: the same states
    values = (z.float() if z.dtype == torch.float16 else z).detach().contiguous().numpy()
    counted = _kernels.state_runs(values, valid.contiguous().numpy(), lower, upper, window)
    lengths, counts, runs, histogram, changes, off = (torch.from_numpy(a) for a in counted)
    return _state_statistics_of(lengths, counts, runs, histogram, changes, off, window)


def _states_by_kernel(signal: Tensor, valid: Tensor) -> bool:
    """Whether the Triton kernel counts the states (a GPU's float32 or float64 rows)."""
    from ratioscope.functional import _triton_kernels

    return _triton_kernels.on_gpu(signal, mask=valid)


def _state_statistics_by_kernel(
    signal: Tensor, valid: Tensor, on_band: tuple[float, float] | float, window: int
) -> _StateStatistics:
    """:func:`_state_statistics_compiled` by the Triton kernel on a GPU
    (``_triton_kernels.state_runs``: one program a row, over the unpacked signal)."""
    from ratioscope.functional import _triton_kernels

    lower, upper = _band_thresholds(on_band, signal.dtype)
    lengths, counts, runs, histogram, changes, off = _triton_kernels.state_runs(
        signal, valid, lower, upper, window
    )
    return _state_statistics_of(lengths, counts, runs, histogram, changes, off, window)


def _state_statistics_of(
    lengths: Tensor,
    counts: Tensor,
    run_count: Tensor,
    histogram: Tensor,
    changes: Tensor,
    off: Tensor,
    window: int,
) -> _StateStatistics:
    """The statistics of the integer counts a compiled pass leaves ([B] lengths, [B, 3]
    tokens and runs per state, [3, T + 1] runs by length, [B, W] changes and off-band
    tokens per window), by the tensor code that turns them into rates."""
    mean = (counts.double() / run_count.double()).masked_fill(run_count == 0, math.nan)
    return _StateStatistics(
        runs=RunLengths(run_count, counts, mean, histogram),
        switch_frequency=_switch_rates(changes, lengths, window),
        window_frequency=_window_rates(off, lengths, window),
    )


def signal_statistics(
    signal: Tensor,
    mask: Tensor | None,
    *,
    on_band: tuple[float, float] | float = DEFAULT_ON_BAND,
    window: int = DEFAULT_WINDOW,
    cutoff: float = DEFAULT_LFR_CUTOFF,
    n_freqs: int = DEFAULT_N_FREQS,
    space: Space = "log",
    backend: Backend = "auto",
) -> SignalStatistics:
    """All KPO Table 2 statistics of one log-space signal, sharing the work.

    Packs the rows once and computes one FFT for both the LFR and the periodogram.
    States come from the signal itself (:func:`token_states`); ``space`` applies to the
    LFR, periodogram and variances. Equal to calling the separate functions.

    Args:
        signal: [B, T] float log-space signal; mask: [B, T] bool or None.
        backend: how the states and their runs, switches and windows are counted,
            the rows packed, centred and measured, and the LFR's band summed:
            ``"compiled"`` one pass per row of numba kernels, without materialising the
            states, each row written straight into its FFT bucket (CPU only);
            ``"torch"`` tensor operations on the packed rows and every lag (any
            device); ``"auto"`` (default) the first where numba is installed and the
            signal is on the CPU, and on a GPU the tensor operations with Triton
            kernels for the states' counts, the centring and variances and the band.
            The counts are identical; the LFR, periodogram and variances agree to
            about 1e-12 (sums in another order; the compiled band reduces each sine's
            angle exactly, in integers).
    """
    _check_window(window)
    _check_cutoff(cutoff)
    _check_space(space)
    grid = frequency_grid(n_freqs)
    valid = _check_pair(signal, mask, "signal")
    compiled = _compiled(signal, backend)
    if compiled:
        states = _state_statistics_compiled(signal, valid, on_band, window)
    if compiled and _spectral_compilable(signal):
        # each row's tokens in its three states: its valid tokens, without another read
        lengths = states.runs.token_count.sum(1)
        spectral = _spectral_compiled(signal, valid, lengths, space, window, cutoff, n_freqs)
    else:
        packed = _pack(signal, valid)
        lengths = packed.lengths
        # on a GPU, "auto" takes the Triton kernels; "torch" keeps the tensor code
        kernels = backend == "auto"
        if not compiled and kernels and _states_by_kernel(signal, valid):
            states = _state_statistics_by_kernel(signal, valid, on_band, window)
        elif not compiled:
            states = _state_statistics_torch(packed, on_band, window)
        spectral = _spectral_torch(packed, space, window, cutoff, grid, compiled, kernels)
    return SignalStatistics(
        lengths=lengths,
        state_counts=states.runs.token_count,
        runs=states.runs,
        switch_frequency=states.switch_frequency,
        window_frequency=states.window_frequency,
        low_frequency_ratio=spectral.low_frequency_ratio,
        frequencies=grid,
        periodogram=spectral.periodogram,
        global_variance=spectral.global_variance,
        local_variance=spectral.local_variance,
    )


@dataclass(frozen=True)
class _Spectral:
    """The signal-value part of :class:`SignalStatistics`: [B] float64 each, periodogram
    [B, n_freqs]."""

    low_frequency_ratio: Tensor
    periodogram: Tensor
    global_variance: Tensor
    local_variance: Tensor


def _spectral_torch(
    packed: _Packed,
    space: Space,
    window: int,
    cutoff: float,
    grid: Tensor,
    compiled: bool,
    kernels: bool = False,
) -> _Spectral:
    """Centre the packed rows, one FFT per bucket for the LFR and the periodogram, and
    the variances by tensor code (the LFR's band by the compiled loop if ``compiled``);
    with ``kernels``, on a GPU, the centring with both variances and the LFR's band by
    Triton kernels."""
    if kernels and _centre_by_kernel(packed.values, window):
        centred, global_variance, local_variance = _centre_by_kernel_rows(packed, space, window)
    else:
        centred = _centre(packed, space)
        global_variance = _global_variance(centred)
        local_variance = _local_variance(centred, window)
    spectrum = _spectrum(centred, unit=4 * grid.shape[0])
    if kernels and _band_by_kernel(centred.values):
        lfr = _low_frequency_ratio_by_kernel(centred, spectrum, cutoff)
    else:
        lfr = _low_frequency_ratio(centred, _autocorrelation(centred, spectrum), cutoff, compiled)
    return _Spectral(
        low_frequency_ratio=lfr,
        periodogram=_periodogram(centred, spectrum, grid.to(packed.values.device)),
        global_variance=global_variance,
        local_variance=local_variance,
    )


def _centre_by_kernel(values: Tensor, window: int) -> bool:
    """Whether the Triton kernel centres the packed rows and gives their variances: rows
    on a GPU where Triton compiles, windows it takes."""
    from ratioscope.functional import _triton_kernels

    return window <= _triton_kernels.MAX_WINDOW and _triton_kernels.on_gpu(values)


def _centre_by_kernel_rows(
    packed: _Packed, space: Space, window: int
) -> tuple[_Centred, Tensor, Tensor]:
    """:func:`_centre`, :func:`_global_variance` and :func:`_local_variance` by the Triton
    kernel (``_triton_kernels.centre_rows``): each packed row read three times (its
    mean, its centred values, its windows) in one program, where the tensor code makes
    some forty passes. Returns (the centred rows, [B] variances, [B] local variances)."""
    from ratioscope.functional import _triton_kernels

    _check_space(space)
    values, stats = _triton_kernels.centre_rows(
        packed.values, packed.lengths, window, ratio=space == "ratio"
    )
    centred = _Centred(values, packed.lengths, packed.prefix, stats[:, 2] != 0.0)
    return centred, stats[:, 0], stats[:, 1]


#: points of one FFT block of :func:`_spectral_compiled` (rows of one size, at least
#: one): its input, spectrum and autocorrelation stay in a core's cache between the
#: steps (a block of a few rows takes about two thirds of the time per point of a
#: bucket of 256; one row a call pays the call's fixed cost on every row)
FFT_BLOCK_POINTS = 1 << 16


def _fft_blocks(sizes: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) of the blocks of ``sizes`` [B] (sorted): runs of equal size cut
    into blocks of at most :data:`FFT_BLOCK_POINTS` points (one row at least)."""
    import numpy as np

    blocks: list[tuple[int, int]] = []
    start = 0
    while start < len(sizes):
        n_fft = int(sizes[start])
        end = int(np.searchsorted(sizes, n_fft, side="right"))
        step = max(1, FFT_BLOCK_POINTS // n_fft)
        blocks.extend((a, min(a + step, end)) for a in range(start, end, step))
        start = end
    return blocks


def _spectral_compilable(signal: Tensor) -> bool:
    """Whether :func:`_spectral_compiled` applies: a CPU signal whose float32 cast is
    exact."""
    import torch

    exact = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    return signal.device.type == "cpu" and signal.dtype in exact


def _spectral_compiled(
    signal: Tensor,
    valid: Tensor,
    lengths: Tensor,
    space: Space,
    window: int,
    cutoff: float,
    n_freqs: int,
) -> _Spectral:
    """:func:`_spectral_torch` by parts of rows, each part on its own from the values to
    the band (:func:`_kernels.map_rows`: the parts run on the threads at once, and one
    dispatch a chunk, not three a bucket). Within a part, bucket by bucket: a compiled
    loop packs and centres each row straight into its bucket's zero-padded FFT input
    and computes its variances on the way
    (:func:`ratioscope.functional._ratio_kernels.centre_rows`), numpy's FFT (pocketfft:
    one thread, without the GIL, a row's transform the same bits whatever rows share
    the call; already imported, where ``scipy.fft`` would add 50 ms to a process)
    gives the power and the autocorrelation, and the LFR's band is read from the
    latter, never gathered into a [B, T] tensor. Equal to the tensor code up to the
    order of the float64 sums, the FFT's rounding and libm's ``exp`` for the ratio
    space (within 1e-12; ``tests/test_compiled_kernels.py``)."""
    import numpy as np
    import torch

    from ratioscope.functional import _kernels, _ratio_kernels

    rows_total = signal.shape[0]
    if signal.dtype in (torch.float16, torch.bfloat16):
        signal = signal.float()  # exact: the kernels take float32 and float64
    values, flags = signal.detach().contiguous().numpy(), valid.contiguous().numpy()
    energetic = np.zeros(rows_total, dtype=np.bool_)
    variances = np.empty((rows_total, 2), dtype=np.float64)
    band = np.zeros(rows_total, dtype=np.float64)
    energy = np.zeros(rows_total, dtype=np.float64)
    power = torch.empty((rows_total, n_freqs), dtype=torch.float64)
    power_np = power.numpy()
    widths = _band_widths(lengths, cutoff)
    sizes = _fft_size(lengths, 4 * n_freqs)
    lengths_np, widths_np, sizes_np = lengths.numpy(), widths.to(torch.int64).numpy(), sizes.numpy()

    order = np.argsort(sizes_np, kind="stable")
    blocks = _fft_blocks(sizes_np[order])

    def part(first: int, last: int) -> None:
        table = np.empty(max(int(lengths_np.max(initial=1)), 1))  # sine scratch
        for start, stop in blocks[first:last]:
            chosen = order[start:stop]
            n_fft = int(sizes_np[chosen[0]])
            padded = np.empty((len(chosen), n_fft), dtype=np.float64)
            _ratio_kernels.centre_rows(
                values, flags, chosen, space == "ratio", window, padded, energetic, variances
            )
            spectrum = np.fft.rfft(padded, axis=1)
            _ratio_kernels.power_rows(spectrum, chosen, n_fft // (4 * n_freqs), power_np)
            auto = np.fft.irfft(spectrum, n=n_fft, axis=1)
            _ratio_kernels.lfr_band(auto, chosen, lengths_np, widths_np, table, band, energy)

    # every output is a row's own: the same bits however the rows are cut; the parts
    # cut by points, since a block of the largest size costs several of the smallest
    points = np.array([(stop - start) * sizes_np[order[start]] for start, stop in blocks])
    _kernels.map_balanced_rows(part, points, int(sizes_np.sum()))
    energetic_t = torch.from_numpy(energetic)
    return _Spectral(
        low_frequency_ratio=_band_share(
            torch.from_numpy(band), torch.from_numpy(energy), lengths, widths, energetic_t
        ),
        periodogram=_per_token_power(power, lengths, energetic_t),
        global_variance=torch.from_numpy(variances[:, 0].copy()),
        local_variance=torch.from_numpy(variances[:, 1].copy()),
    )


def constant_signal_statistics(
    values: Tensor,
    lengths: Tensor,
    *,
    on_band: tuple[float, float] | float = DEFAULT_ON_BAND,
    window: int = DEFAULT_WINDOW,
    n_freqs: int = DEFAULT_N_FREQS,
) -> SignalStatistics:
    """:func:`signal_statistics` of a signal that is constant within each sequence.

    The sequence-level ratio of GSPO/GMPO/TEPO gives every token of a sequence the same
    value, so its statistics follow from one value and the length per sequence: one run
    of the whole length in one state, no switching, windows entirely on or off, zero
    energy (LFR and periodogram NaN) and zero variance. Equal to
    ``signal_statistics(values[:, None].expand(B, T), mask)`` with a right-padded
    ``mask`` of ``lengths``, at a fraction of the cost.

    Args:
        values: [B] float, the per-sequence log-space value.
        lengths: [B] int64, valid tokens per sequence.
    """
    import torch

    _check_window(window)
    device = values.device
    rows = values.shape[0]
    width = int(lengths.max()) if rows else 0
    valid = lengths > 0
    states = _states(values.unsqueeze(1), valid.unsqueeze(1), on_band).squeeze(1)
    column = states.long() + 1
    state_counts = torch.zeros((rows, 3), dtype=torch.long, device=device)
    state_counts.scatter_(1, column.unsqueeze(1), lengths.unsqueeze(1))
    run_count = torch.zeros_like(state_counts)
    run_count.scatter_(1, column.unsqueeze(1), valid.long().unsqueeze(1))
    mean = (state_counts.double() / run_count.double()).masked_fill(run_count == 0, math.nan)
    # each row adds its one run (the empty rows 0): no boolean index or bincount, whose
    # sizes a GPU makes the host wait for
    histogram = torch.zeros(3 * (width + 1), dtype=torch.long, device=device)
    histogram.index_add_(0, column * (width + 1) + lengths, valid.long())
    histogram = histogram.view(3, width + 1)
    n_windows = width // window
    ends = torch.arange(1, n_windows + 1, device=device) * window
    off = (states != 0).double().unsqueeze(1).expand(rows, n_windows)
    window_frequency = off.masked_fill(ends > lengths.unsqueeze(1), math.nan)
    switch, lfr, global_variance, local_variance = constant_signal_columns(lengths)
    return SignalStatistics(
        lengths=lengths,
        state_counts=state_counts,
        runs=RunLengths(run_count, state_counts, mean, histogram),
        switch_frequency=switch,
        window_frequency=window_frequency,
        low_frequency_ratio=lfr,
        frequencies=frequency_grid(n_freqs),
        periodogram=torch.full((rows, n_freqs), math.nan, dtype=torch.float64, device=device),
        global_variance=global_variance,
        local_variance=local_variance,
    )


def constant_signal_columns(lengths: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The per-sequence columns of :func:`constant_signal_statistics`, which need no
    value: a constant signal never switches, has no energy and no variance.

    Args:
        lengths: [B] int64 valid tokens per sequence.

    Returns:
        [B] float64 each, on the device of ``lengths``: the switch frequency (0), the
        LFR (NaN), the global and the window-local variance (0; NaN without tokens).
    """
    import torch

    rows = lengths.shape[0]
    zeros = torch.zeros(rows, dtype=torch.float64, device=lengths.device)
    nans = torch.full((rows,), math.nan, dtype=torch.float64, device=lengths.device)
    empty = lengths == 0
    return zeros, nans, zeros.masked_fill(empty, math.nan), zeros.masked_fill(empty, math.nan)
