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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ratioscope.errors import ShapeMismatchError, UsageError

if TYPE_CHECKING:
    from torch import Tensor

Space = Literal["log", "ratio"]

#: Labels of the per-state columns (column j is state j - 1).
STATE_LABELS = ("down", "on", "up")

DEFAULT_ON_BAND = (3e-4, 4e-4)
DEFAULT_WINDOW = 50
DEFAULT_LFR_CUTOFF = 0.1
DEFAULT_N_FREQS = 64


# --------------------------------------------------------------------------- helpers


def _check_pair(x: Tensor, mask: Tensor | None, name: str) -> Tensor:
    import torch

    if x.dim() != 2:
        raise UsageError(f"'{name}' must be a [B, T] tensor, got shape {list(x.shape)}")
    if mask is None:
        return torch.ones(x.shape, dtype=torch.bool, device=x.device)
    if mask.shape != x.shape:
        raise ShapeMismatchError(None, "mask", mask.shape, name, x.shape, expected="equal shapes")
    return (mask if mask.dtype == torch.bool else mask != 0).to(x.device)


def _check_window(window: int) -> None:
    if window < 1:
        raise UsageError(f"the window length must be >= 1 token, got {window}")


def _compact(x: Tensor, mask: Tensor, fill: float = 0) -> tuple[Tensor, Tensor, Tensor]:
    """Move each row's valid values to the front, keeping their order.

    Returns (values [B, T] with ``fill`` behind the valid prefix, lengths [B] int64,
    prefix [B, T] bool = position < length).
    """
    import torch

    lengths = mask.sum(1)
    positions = torch.arange(x.shape[1], device=x.device)
    prefix = positions.unsqueeze(0) < lengths.unsqueeze(1)
    filler = torch.full((), fill, dtype=x.dtype, device=x.device)
    if bool((prefix == mask).all()):  # already right-padded: nothing to move
        return torch.where(prefix, x, filler), lengths, prefix
    valid_upto = mask.cumsum(1)
    target = torch.where(mask, valid_upto - 1, lengths.unsqueeze(1) + positions - valid_upto)
    values = torch.empty_like(x).scatter_(1, target, torch.where(mask, x, filler))
    return values, lengths, prefix


def _to_space(signal: Tensor, space: Space) -> Tensor:
    import torch

    if space not in ("log", "ratio"):
        raise UsageError(f"unknown signal space '{space}'; use 'log' or 'ratio'")
    x = signal.to(torch.float64)
    return x.exp() if space == "ratio" else x


def _windowed(values: Tensor, window: int, fill=0) -> Tensor:
    """[B, T] -> [B, ceil(T / window), window], padding the tail with ``fill``."""
    import torch

    rows, length = values.shape
    n_windows = -(-length // window)
    padded = torch.full((rows, n_windows * window), fill, dtype=values.dtype, device=values.device)
    padded[:, :length] = values
    return padded.view(rows, n_windows, window)


def _window_lengths(lengths: Tensor, n_windows: int, window: int) -> Tensor:
    """[B, W] number of valid tokens in each window of each sequence."""
    import torch

    starts = torch.arange(n_windows, device=lengths.device) * window
    return (lengths.unsqueeze(1) - starts).clamp(0, window)


def _used_windows(window_lengths: Tensor) -> Tensor:
    """Windows that count: >= 2 tokens, or the only window of a 1-token sequence."""
    only = window_lengths.sum(1, keepdim=True) == 1
    return (window_lengths >= 2) | (only & (window_lengths == 1))


# --------------------------------------------------------------------------- states


def token_states(
    z: Tensor, mask: Tensor | None, on_band: tuple[float, float] | float = DEFAULT_ON_BAND
) -> Tensor:
    """Token state from the ratio r = exp(z) (KPO App. C.1).

    up (1) if r > 1 + eps_hi, down (-1) if r < 1 - eps_lo, on (0) otherwise; the
    thresholds are applied in log space in float64 (z > log1p(eps_hi),
    z < log1p(-eps_lo)), which is the same test without exp rounding, so
    ``on_band=(0, 0)`` means on iff z == 0 exactly, i.e. r == 1 (the paper's raw-ratio
    rule). The default band is the paper's eps^- = 3e-4, eps^+ = 4e-4.

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
    import torch

    mask = _check_pair(z, mask, "z")
    eps_lo, eps_hi = (on_band, on_band) if isinstance(on_band, (int, float)) else on_band
    if not (0.0 <= eps_lo < 1.0 and eps_hi >= 0.0):
        raise UsageError(f"the on-band must satisfy 0 <= eps_lo < 1 and eps_hi >= 0, got {on_band}")
    z64 = z.to(torch.float64)
    up = (z64 > math.log1p(eps_hi)) & mask
    down = (z64 < math.log1p(-eps_lo)) & mask
    return up.to(torch.int8) - down.to(torch.int8)


def state_counts(states: Tensor, mask: Tensor | None) -> Tensor:
    """Valid tokens per state per sequence (KPO Table 2, "token proportion").

    Args:
        states: [B, T] int8 from :func:`token_states`; mask: [B, T] bool or None.

    Returns:
        [B, 3] int64, columns (down, on, up). Proportions over a dump are
        ``counts.sum(0) / counts.sum()``.
    """
    import torch

    mask = _check_pair(states, mask, "states")
    levels = torch.arange(-1, 2, device=states.device, dtype=states.dtype)
    hits = (states.unsqueeze(-1) == levels) & mask.unsqueeze(-1)
    return hits.sum(1)


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
    import torch

    mask = _check_pair(states, mask, "states")
    rows, length = states.shape
    compact, lengths, prefix = _compact(states, mask)
    starts = prefix.clone()
    starts[:, 1:] &= compact[:, 1:] != compact[:, :-1]
    column = compact.long() + 1
    run_count = torch.zeros(rows, 3, dtype=torch.int64, device=states.device)
    run_count.scatter_add_(1, column, starts.long())
    token_count = torch.zeros(rows, 3, dtype=torch.int64, device=states.device)
    token_count.scatter_add_(1, column, prefix.long())
    mean = token_count.double() / run_count.double()
    mean = mean.masked_fill(run_count == 0, math.nan)

    # A run ends where the next run of its row starts, or at the row's length.
    row, start = starts.nonzero(as_tuple=True)
    end = lengths[row].clone()
    same_row = row[1:] == row[:-1]
    end[:-1] = torch.where(same_row, start[1:], end[:-1])
    flat = column[row, start] * (length + 1) + (end - start)
    histogram = torch.bincount(flat, minlength=3 * (length + 1)).view(3, length + 1)
    return RunLengths(run_count, token_count, mean, histogram)


# --------------------------------------------------------------------------- switching


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
    import torch

    _check_window(window)
    mask = _check_pair(states, mask, "states")
    compact, lengths, prefix = _compact(states, mask)
    changes = torch.zeros_like(prefix)
    changes[:, 1:] = (compact[:, 1:] != compact[:, :-1]) & prefix[:, 1:]
    per_window = _windowed(changes, window, fill=False)
    per_window[:, :, 0] = False  # a pair that straddles two windows is in neither
    counts = per_window.sum(-1).double()
    sizes = _window_lengths(lengths, counts.shape[1], window)
    used = sizes >= 2
    rates = torch.where(used, counts / (sizes - 1).clamp(min=1), torch.zeros_like(counts))
    n_used = used.sum(1)
    return torch.where(n_used > 0, rates.sum(1) / n_used.clamp(min=1), 0.0)


# --------------------------------------------------------------------------- windows


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
    import torch

    _check_window(window)
    mask = _check_pair(states, mask, "states")
    compact, lengths, _ = _compact(states, mask)
    n_windows = states.shape[1] // window
    blocks = compact[:, : n_windows * window].reshape(states.shape[0], n_windows, window)
    freq = (blocks != 0).sum(-1).double() / window
    full = torch.arange(1, n_windows + 1, device=states.device) * window <= lengths.unsqueeze(1)
    return freq.masked_fill(~full, math.nan)


@dataclass(frozen=True)
class WindowMoments:
    """Mergeable per-window-index sums for mean/variance curves (KPO Fig. 1).

    Attributes:
        total, total_sq: [W] float64, sums of values and of squared values.
        count: [W] int64, number of sequences that have the window.
    """

    total: Tensor
    total_sq: Tensor
    count: Tensor

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
    filled = values.nan_to_num(nan=0.0)
    return WindowMoments(filled.sum(0), (filled * filled).sum(0), present.sum(0))


# --------------------------------------------------------------------------- spectra


def _centred(signal: Tensor, mask: Tensor | None, space: Space) -> tuple[Tensor, Tensor, Tensor]:
    """Compacted, mean-centred float64 signal (0 behind the prefix), lengths, and
    whether each row has energy (>= 2 valid tokens that are not all equal)."""
    import torch

    mask = _check_pair(signal, mask, "signal")
    x, lengths, prefix = _compact(_to_space(signal, space), mask)
    n = lengths.clamp(min=1).to(torch.float64)
    mean = x.sum(1) / n
    centred = torch.where(
        prefix, x - mean.unsqueeze(1), torch.zeros((), dtype=x.dtype, device=x.device)
    )
    if x.shape[1] == 0:
        return centred, lengths, lengths > 0
    inf = torch.full((), math.inf, dtype=x.dtype, device=x.device)
    # Exactly constant rows would otherwise leave rounding noise of the mean as "energy".
    spread = torch.where(prefix, x, -inf).amax(1) - torch.where(prefix, x, inf).amin(1)
    return centred, lengths, (lengths >= 2) & (spread > 0)


def _autocorrelation(centred: Tensor) -> Tensor:
    """Linear autocorrelation a(m) = sum_t x_t x_{t+m}, m = 0..T-1, of zero-padded rows."""
    import torch

    length = centred.shape[1]
    n_fft = 1 << max(1, (2 * length - 1).bit_length())
    spectrum = torch.fft.rfft(centred, n=n_fft, dim=1)
    return torch.fft.irfft(spectrum.real.square() + spectrum.imag.square(), n=n_fft, dim=1)[
        :, :length
    ]


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
    """
    import torch

    if not 0.0 <= cutoff <= 1.0:
        raise UsageError(f"the LFR cutoff must be in [0, 1] (a fraction of Nyquist), got {cutoff}")
    centred, lengths, energetic = _centred(x, mask, space)
    rows, length = centred.shape
    if length == 0:
        return torch.full((rows,), math.nan, dtype=torch.float64, device=x.device)
    auto = _autocorrelation(centred)
    size = lengths.clamp(min=1).to(torch.float64).unsqueeze(1)
    k_c = torch.floor(cutoff * lengths.to(torch.float64) / 2).unsqueeze(1)
    lag = torch.arange(length, dtype=torch.float64, device=x.device).unsqueeze(0)
    angle = math.pi * lag / size
    safe = torch.where(lag == 0, torch.ones_like(angle), torch.sin(angle))
    kernel = torch.where(lag == 0, 2 * k_c + 1, torch.sin(angle * (2 * k_c + 1)) / safe)
    # c_L(m) pairs lag m with lag L - m and D is symmetric, so each lag m >= 1 counts twice.
    weight = torch.where(lag == 0, 1.0, 2.0)
    terms = torch.where(lag < size, auto * kernel * weight, torch.zeros((), dtype=auto.dtype))
    band = terms.sum(1)
    total = lengths.to(torch.float64) * auto[:, 0]
    whole_band = 2 * k_c.squeeze(1) + 1 >= lengths  # the two halves cover every bin
    ratio = torch.where(whole_band, torch.ones_like(band), band / total.clamp(min=1e-300))
    return torch.where(energetic, ratio.clamp(0.0, 1.0), torch.full_like(ratio, math.nan))


def frequency_grid(n_freqs: int = DEFAULT_N_FREQS) -> Tensor:
    """[n_freqs] float64 bin centres (g + 0.5) / (2 n_freqs) in cycles/token, in (0, 0.5)."""
    import torch

    if n_freqs < 1:
        raise UsageError(f"the number of spectrum frequencies must be >= 1, got {n_freqs}")
    return (torch.arange(n_freqs, dtype=torch.float64) + 0.5) / (2 * n_freqs)


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
        (grid [n_freqs] float64, power [B, n_freqs] float64); rows with zero energy
        (as in :func:`low_frequency_ratio`) are NaN.
    """
    import torch

    grid = frequency_grid(n_freqs).to(x.device)
    centred, lengths, energetic = _centred(x, mask, space)
    steps = torch.arange(centred.shape[1], dtype=torch.float64, device=x.device)
    phase = 2 * math.pi * torch.outer(steps, grid)
    real = centred @ torch.cos(phase)
    imag = centred @ torch.sin(phase)
    power = (real * real + imag * imag) / lengths.clamp(min=1).to(torch.float64).unsqueeze(1)
    return grid, power.masked_fill(~energetic.unsqueeze(1), math.nan)


# --------------------------------------------------------------------------- variance


def global_variance(x: Tensor, mask: Tensor | None, space: Space = "log") -> Tensor:
    """Population variance (ddof 0) over each sequence's valid tokens (KPO Table 2).

    Returns:
        [B] float64; NaN for a sequence without valid tokens.

    >>> import torch
    >>> global_variance(torch.tensor([[1.0, 2.0, 3.0, 4.0]]), None).tolist()
    [1.25]
    """
    import torch

    mask = _check_pair(x, mask, "x")
    values = _to_space(x, space)
    n = mask.sum(1).to(torch.float64)
    zero = torch.zeros((), dtype=torch.float64, device=x.device)
    mean = torch.where(mask, values, zero).sum(1) / n
    deviation = torch.where(mask, values - mean.unsqueeze(1), zero)
    return (deviation * deviation).sum(1) / n


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
    import torch

    _check_window(window)
    mask = _check_pair(x, mask, "x")
    values, lengths, prefix = _compact(_to_space(x, space), mask)
    blocks = _windowed(values, window)
    inside = _windowed(prefix, window, fill=False)
    sizes = _window_lengths(lengths, blocks.shape[1], window).to(torch.float64)
    mean = blocks.sum(-1) / sizes.clamp(min=1)
    zero = torch.zeros((), dtype=torch.float64, device=x.device)
    deviation = torch.where(inside, blocks - mean.unsqueeze(-1), zero)
    variances = (deviation * deviation).sum(-1) / sizes.clamp(min=1)
    used = _used_windows(sizes.long())
    n_used = used.sum(1)
    total = torch.where(used, variances, torch.zeros_like(variances)).sum(1)
    return torch.where(n_used > 0, total / n_used.clamp(min=1), torch.full_like(total, math.nan))


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


def signal_statistics(
    signal: Tensor,
    mask: Tensor | None,
    *,
    on_band: tuple[float, float] | float = DEFAULT_ON_BAND,
    window: int = DEFAULT_WINDOW,
    cutoff: float = DEFAULT_LFR_CUTOFF,
    n_freqs: int = DEFAULT_N_FREQS,
    space: Space = "log",
) -> SignalStatistics:
    """All KPO Table 2 statistics of one log-space signal, compacting holes once.

    States come from the signal itself (:func:`token_states`); ``space`` applies to the
    LFR, periodogram and variances. Equal to calling the separate functions.

    Args:
        signal: [B, T] float log-space signal; mask: [B, T] bool or None.
    """
    mask = _check_pair(signal, mask, "signal")
    # Compact once; every function below then sees a right-padded batch and skips it.
    signal, _, mask = _compact(signal, mask)
    states = token_states(signal, mask, on_band)
    grid, power = periodogram(signal, mask, n_freqs, space)
    return SignalStatistics(
        lengths=mask.sum(1),
        state_counts=state_counts(states, mask),
        runs=run_lengths(states, mask),
        switch_frequency=switch_frequency(states, mask, window),
        window_frequency=window_offpolicy_frequency(states, mask, window),
        low_frequency_ratio=low_frequency_ratio(signal, mask, cutoff, space),
        frequencies=grid,
        periodogram=power,
        global_variance=global_variance(signal, mask, space),
        local_variance=local_variance(signal, mask, window, space),
    )
