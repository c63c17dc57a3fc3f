"""CW-GRPO token covariance and Gaussian-kernel advantage weights (docs/metrics-objectives.md).

Paper: "Taming Extreme Tokens: Covariance-Aware GRPO with Gaussian-Kernel Advantage
Reweighting" (CW-GRPO), section 2.3; Table 1 and Fig. 3 in section 2.2. Clip-Cov and
KL-Cov are the baselines of Cui et al. (2025), with the settings TEPO section 4.1 quotes,
which are that paper's own (arXiv 2505.22617v1, section 4.3: clip ratio r = 2e-4 on tokens
with 1 < c < 5; KL-Cov k = 2e-3 for Qwen2.5-7B, 2e-4 for 32B).

Everything here is exact over the tokens it is given, except the ``*_from_bins``
readings of Table 1 and Fig. 3: they take the fixed log-magnitude histograms that a
streaming analysis merges across files, and share one formula with the exact functions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from ratioscope.errors import ParameterError, ShapeMismatchError
from ratioscope.functional import histogram as bins

#: Fractions of Table 1 (0.01%, 1%, 20%, 40%, 100%).
PERCENTILE_FRACTIONS: tuple[float, ...] = (1e-4, 1e-2, 0.2, 0.4, 1.0)
#: Clip-Cov defaults: ratio r of tokens detached, chosen among lb < c < ub.
CLIP_COV_RATIO = 2e-4
CLIP_COV_BOUNDS = (1.0, 5.0)
#: KL-Cov default: proportion k of tokens with the largest c that get the KL penalty.
KL_COV_RATIO = 2e-3
#: sigma below this fraction of the root-mean-square c is rounding noise, i.e. sigma = 0.
_RELATIVE_SPREAD_FLOOR = 1e-12
#: per-scope sums as tensors (KernelPasses) or numpy arrays (the compiled passes)
ArrayT = TypeVar("ArrayT", Tensor, np.ndarray)


def _result_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_same_shape(name: str, tensor: Tensor, other_name: str, other: Tensor) -> None:
    if tensor.shape != other.shape:
        raise ShapeMismatchError(None, name, tensor.shape, other_name, other.shape, "the same")


class ScopeIndex:
    """Group ids -> scope indices 0..G-1 in order of first appearance, kept over the
    chunks of one batch (any integers are ids; ``None`` is one scope, the batch)."""

    def __init__(self) -> None:
        self.ids: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self, group: Tensor | None, batch: int, device: torch.device, new: bool) -> Tensor:
        """[batch] int64 scope index of each row.

        Args:
            group: [batch] int ids or None; batch: the rows; device: where the result goes.
            new: whether ids not seen yet may be numbered (the first pass over a batch).

        Raises:
            ShapeMismatchError, ParameterError: ``group`` is not [batch] integers.
            ValueError: an unseen id with ``new=False`` (chunks of another batch).
        """
        if group is None:
            self.ids.setdefault(0, 0)
            return torch.zeros(batch, dtype=torch.long, device=device)
        if group.ndim != 1 or group.shape[0] != batch:
            raise ShapeMismatchError(None, "group", group.shape, "mask rows", (batch,), "[B]")
        if group.dtype.is_floating_point or group.dtype == torch.bool:
            raise ParameterError(
                "group", f"must be integers, got dtype {group.dtype}", subject="group ids"
            )
        ids, inverse = torch.unique(group.cpu(), return_inverse=True)
        if new:
            lookup = [self.ids.setdefault(i, len(self.ids)) for i in ids.tolist()]
        else:
            try:
                lookup = [self.ids[i] for i in ids.tolist()]
            except KeyError:
                raise ValueError("a group id the first pass over the batch did not see") from None
        return torch.tensor(lookup, dtype=torch.long)[inverse].to(device)


#: passes of :class:`KernelPasses` over the chunks of a batch
KERNEL_PASSES = 5


def kernel_variance(spread: ArrayT, c_square: ArrayT, safe_count: ArrayT) -> tuple[ArrayT, ArrayT]:
    """Each scope's variance of c and whether it counts as flat (every weight 1).

    Args:
        spread: [S] sums of (c - mean c)^2; c_square: [S] sums of c^2; safe_count: [S]
            tokens, at least 1 (tensors or numpy arrays, the result of the same kind).

    Returns:
        (variance [S], flat [S] bool): flat where the spread is at the rounding level of
        c. Equal c computed along different paths can differ in the last bit, which
        would give a spurious sigma ~ 1e-17 and weights exp(-1e30) = 0.
    """
    variance = spread / safe_count
    flat = variance <= _RELATIVE_SPREAD_FLOOR**2 * (c_square / safe_count)
    return variance, flat


class PassSequence:
    """The order of the passes over a batch's chunks, shared by :class:`KernelPasses` and
    its compiled counterparts: every chunk through pass 0, then every chunk through pass
    1, ... up to ``KERNEL_PASSES - 1``; ``position`` counts the chunks of the current
    pass. Subclasses say in ``_finish`` what a pass makes of its sums."""

    pass_index: int = 0
    position: int = 0

    def _finish(self, index: int) -> None:
        raise NotImplementedError

    def _advance(self, index: int) -> None:
        """Enter pass ``index`` (the current one or the next), finishing the one left."""
        if not self.pass_index <= index <= self.pass_index + 1 or index >= KERNEL_PASSES:
            raise ValueError(f"pass {index} after pass {self.pass_index}")
        while self.pass_index < index:
            self._finish(self.pass_index)
            self.pass_index += 1
            self.position = 0


class KernelPasses(PassSequence):
    """The c, w and w~ of :func:`covariance_weights` for a batch fed in chunks of rows,
    pass after pass, with memory for one chunk and a few float64 sums per scope.

    Every chunk of the batch goes, in order, through :meth:`add` for passes 0 to
    ``KERNEL_PASSES - 2``, then through :meth:`weights` (the last pass), which gives the
    chunk's ``(c, w, w_norm)``. The passes gather, per scope: 0) N, sum log pi, sum A;
    1) sum c and sum c^2; 2) sum (c - mean c)^2, so sigma; 3) sum w. Each sum is added
    token by token in the order of the batch into a running float64 total (``index_add_``,
    sequential on the CPU), so the values are those of the batch in one chunk, bit for bit,
    however the batch is cut. Groups may span chunks. :meth:`covariance` gives a chunk's c
    in any pass after the first.
    """

    def __init__(self, keep: bool = False) -> None:
        """``keep``: keep each chunk's valid tokens and c from pass to pass (about 40
        bytes a token) instead of gathering them again, for a batch whose chunks are in
        memory anyway; the chunks must then come in the same order in every pass."""
        self.scopes = ScopeIndex()
        self.pass_index = 0
        self.sums: dict[str, Tensor] = {}
        self.dtype: torch.dtype | None = None
        self.keep = keep
        self.kept: list[_Tokens] = []
        self.kept_c: list[Tensor] = []
        self.position = 0  # the chunk of the current pass

    # ------------------------------------------------------------------ feeding
    def add(
        self, index: int, logp: Tensor, adv: Tensor, mask: Tensor, group: Tensor | None
    ) -> Tensor | None:
        """Feed a chunk to pass ``index`` (0 <= index < KERNEL_PASSES - 1).

        Args:
            logp, adv: [B, T] float log pi and broadcast advantages; mask: [B, T] bool;
            group: [B] int ids, or None for one scope (see :func:`covariance_weights`).

        Returns:
            in pass 1, the chunk's c ([B, T], 0 at masked positions); else None.
        """
        tokens = self._enter(index, logp, adv, mask, group)
        if index == 0:
            self._grow(len(self.scopes), tokens.lp.device)
            self._add("count", tokens, torch.ones_like(tokens.lp))
            self._add("logp", tokens, tokens.lp)
            self._add("adv", tokens, tokens.a)
            return None
        c = self._kept_c(tokens)
        if index == 1:
            self._add("c", tokens, c)
            self._add("c_square", tokens, c**2)
            return self._scatter(tokens, mask, c)
        if index == 2:
            self._add("spread", tokens, (c - self._per_token("c_mean", tokens)) ** 2)
        else:
            self._add("w", tokens, self._w(tokens, c))
        return None

    def weights(
        self, logp: Tensor, adv: Tensor, mask: Tensor, group: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The last pass: the chunk's ``(c, w, w_norm)``, each [B, T] as
        :func:`covariance_weights` returns them (0 at masked positions)."""
        tokens = self._enter(KERNEL_PASSES - 1, logp, adv, mask, group)
        c = self._kept_c(tokens)
        w = self._w(tokens, c)
        w_norm = w * self._per_token("w_factor", tokens)
        return tuple(self._scatter(tokens, mask, v) for v in (c, w, w_norm))  # type: ignore[return-value]

    def covariance(self, logp: Tensor, adv: Tensor, mask: Tensor, group: Tensor | None) -> Tensor:
        """The chunk's c, [B, T] (0 at masked positions), once pass 0 went through the
        whole batch; it does not count as a pass."""
        if self.pass_index == 0:
            self._finish(0)
            self.pass_index, self.position = 1, 0
        tokens = self._tokens(logp, adv, mask, group, new=False)
        return self._scatter(tokens, mask, self._kept_c(tokens))

    # ---------------------------------------------------------------- internals
    def _enter(
        self, index: int, logp: Tensor, adv: Tensor, mask: Tensor, group: Tensor | None
    ) -> _Tokens:
        self._advance(index)
        return self._tokens(logp, adv, mask, group, new=index == 0)

    def _tokens(
        self, logp: Tensor, adv: Tensor, mask: Tensor, group: Tensor | None, new: bool
    ) -> _Tokens:
        position = self.position
        self.position += 1
        if self.keep and not new:
            return self.kept[position]
        _check_same_shape("logp", logp, "mask", mask)
        _check_same_shape("adv", adv, "mask", mask)
        device = logp.device
        mask = mask.to(device=device, dtype=torch.bool)
        scope = self.scopes.rows(group, mask.shape[0], device, new)
        self.dtype = _result_dtype(logp.dtype)
        # the flat positions of the valid tokens, found once and gathered from (cheaper
        # than a boolean index per tensor); row-major, so each row's scope repeats
        where = mask.reshape(-1).nonzero().squeeze(1)
        tokens = _Tokens(
            where=where,
            scope=scope.repeat_interleave(mask.sum(dim=1)),
            lp=logp.reshape(-1).index_select(0, where).to(torch.float64),
            a=adv.to(device).reshape(-1).index_select(0, where).to(torch.float64),
        )
        if self.keep:
            self.kept.append(tokens)
        return tokens

    def _kept_c(self, tokens: _Tokens) -> Tensor:
        """The chunk's c: computed (the same bits every time), or kept from pass 1."""
        if not self.keep:
            return self._c(tokens)
        position = self.position - 1
        if position < len(self.kept_c):
            return self.kept_c[position]
        c = self._c(tokens)
        self.kept_c.append(c)
        return c

    def _grow(self, scopes: int, device: torch.device) -> None:
        for name in ("count", "logp", "adv"):
            have = self.sums.get(name)
            if have is None:
                have = torch.zeros(0, dtype=torch.float64, device=device)
            if have.numel() < scopes:
                extra = torch.zeros(scopes - have.numel(), dtype=torch.float64, device=device)
                self.sums[name] = torch.cat([have, extra])

    def _add(self, name: str, tokens: _Tokens, values: Tensor) -> None:
        if name not in self.sums:
            self.sums[name] = torch.zeros(
                len(self.scopes), dtype=torch.float64, device=values.device
            )
        self.sums[name].index_add_(0, tokens.scope, values)

    def _finish(self, index: int) -> None:
        """What pass ``index`` makes of its sums once every chunk went through it."""
        sums = self.sums
        if index == 0:
            if "count" not in sums:
                self._grow(len(self.scopes), torch.device("cpu"))
            sums["safe_count"] = sums["count"].clamp_min(1.0)
            sums["logp_mean"] = sums["logp"] / sums["safe_count"]
            sums["adv_mean"] = sums["adv"] / sums["safe_count"]
            for name in ("c", "c_square", "spread", "w"):
                sums[name] = torch.zeros_like(sums["count"])
        elif index == 1:
            sums["c_mean"] = sums["c"] / sums["safe_count"]
        elif index == 2:
            sums["variance"], sums["flat"] = kernel_variance(
                sums["spread"], sums["c_square"], sums["safe_count"]
            )
        elif index == 3:
            sums["w_factor"] = sums["count"] / sums["w"]

    def _per_token(self, name: str, tokens: _Tokens) -> Tensor:
        """[N] the per-scope value ``name`` at each token."""
        return self.sums[name].index_select(0, tokens.scope)

    def _c(self, tokens: _Tokens) -> Tensor:
        lp_centred = tokens.lp - self._per_token("logp_mean", tokens)
        a_centred = tokens.a - self._per_token("adv_mean", tokens)
        return lp_centred * a_centred

    def _w(self, tokens: _Tokens, c: Tensor) -> Tensor:
        flat = self._per_token("flat", tokens)
        variance = self._per_token("variance", tokens)
        return torch.where(flat, 1.0, torch.exp(-(c**2) / (2.0 * variance)))

    def _scatter(self, tokens: _Tokens, mask: Tensor, values: Tensor) -> Tensor:
        assert self.dtype is not None
        full = torch.zeros(mask.numel(), dtype=self.dtype, device=values.device)
        full.index_copy_(0, tokens.where, values.to(self.dtype))
        return full.view(mask.shape)


@dataclass(frozen=True)
class _Tokens:
    """The valid tokens of a chunk, row-major: their flat positions in the chunk and
    scope index [N] int64, log pi and A [N] float64."""

    where: Tensor
    scope: Tensor
    lp: Tensor
    a: Tensor


def covariance_weights(
    logp: Tensor, adv: Tensor, mask: Tensor, group: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Token covariance c and its Gaussian-kernel weights, CW-GRPO section 2.3.

    ``c_it = (logp_it - mean logp) (A_it - mean A)``, with token-weighted means over the
    valid tokens of the scope; ``sigma`` = population std of ``c`` over the scope;
    ``w = exp(-c^2 / (2 sigma^2))``; ``w_norm = w N / sum w`` with N the number of valid
    tokens of the scope, so ``w_norm`` averages 1 over the scope. Computed in float64.
    :class:`KernelPasses` gives the same values for a batch fed in chunks.

    When ``sigma == 0`` (all ``c`` of the scope equal, e.g. a group whose advantages are
    all equal, where ``c`` is 0 everywhere, or a scope of one or two tokens) no token
    exceeds the typical variability, so the kernel is taken to be flat:
    ``w = w_norm = 1`` on that scope. ``sigma <= 1e-12 * rms(c)`` counts as 0 (rounding).

    Args:
        logp: [B, T] float, log pi_theta of the sampled tokens.
        adv: [B, T] float, advantages already broadcast over tokens.
        mask: [B, T] bool, valid tokens.
        group: [B] int, prompt ids (any integers; responses with the same id form a
            scope), or None for one scope over the whole input (Clip-Cov's batch
            convention).

    Returns:
        ``(c, w, w_norm)``, each [B, T] (float32, or float64 for float64 input), 0 at
        masked positions.

    >>> logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]])
    >>> adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    >>> c, w, w_norm = covariance_weights(logp, adv, torch.ones(2, 2, dtype=torch.bool))
    >>> c.tolist()
    [[0.625, -0.375], [-1.125, 1.375]]
    >>> round(float(w_norm.sum()), 6)
    4.0
    """
    passes = KernelPasses()
    for index in range(KERNEL_PASSES - 1):
        passes.add(index, logp, adv, mask, group)
    return passes.weights(logp, adv, mask, group)


def token_covariance(
    logp: Tensor, adv: Tensor, mask: Tensor, group: Tensor | None = None
) -> Tensor:
    """Only the token covariance ``c`` of :func:`covariance_weights` (no kernel).

    For callers that need ``c`` under another scope than the weights (Clip-Cov and
    KL-Cov rank the tokens of a whole batch), at a fraction of the cost.

    Returns:
        [B, T] like ``covariance_weights(...)[0]``, 0 at masked positions.
    """
    passes = KernelPasses()
    passes.add(0, logp, adv, mask, group)
    return passes.covariance(logp, adv, mask, group)


def _valid_values(values: Tensor, mask: Tensor | None) -> Tensor:
    if mask is None:
        return values.reshape(-1).to(torch.float64)
    _check_same_shape("values", values, "mask", mask)
    return values[mask.to(device=values.device, dtype=torch.bool)].to(torch.float64)


def _check_fractions(fractions: Sequence[float]) -> tuple[float, ...]:
    fractions = tuple(float(f) for f in fractions)
    if not fractions or any(not (0.0 < f <= 1.0) for f in fractions):
        raise ParameterError("fractions", f"must lie in (0, 1], got {list(fractions)}")
    return fractions


def top_count(fraction: float, n: int) -> int:
    """Number of items in the top ``fraction`` of ``n``: ``max(1, ceil(fraction n))``.

    A tiny relative tolerance keeps ``0.2 * 10`` at 2 rather than 3 after rounding.

    >>> top_count(1e-4, 5000), top_count(0.2, 10), top_count(1.0, 7)
    (1, 2, 7)
    """
    if n <= 0:
        return 0
    return min(n, max(1, math.ceil(fraction * n * (1.0 - 1e-12))))


@dataclass(frozen=True)
class CovariancePercentiles:
    """CW-GRPO Table 1: positive and negative ``c`` separately.

    For a fraction f the "top fraction" is the ``top_count(f, n)`` tokens of largest
    magnitude among the ``n`` tokens of that sign (so the 100% row covers every token of
    that sign). Negative-side values keep their sign, as in the paper's table. NaN where
    a sign has no token.

    Attributes:
        fractions: the fractions f, e.g. (1e-4, 1e-2, 0.2, 0.4, 1.0).
        positive_threshold: per f, the smallest c in the top fraction (the c above which
            that fraction lies).
        positive_mean: per f, the mean c of the top fraction.
        positive_band_mean: per f, the mean c of the tokens between the previous
            fraction and f (the first band starts at the top).
        negative_threshold, negative_mean, negative_band_mean: the same for c < 0,
            ranked by -c.
        positive_count, negative_count: tokens with c > 0 and c < 0 (c == 0 is in neither).
    """

    fractions: tuple[float, ...]
    positive_threshold: tuple[float, ...]
    positive_mean: tuple[float, ...]
    positive_band_mean: tuple[float, ...]
    negative_threshold: tuple[float, ...]
    negative_mean: tuple[float, ...]
    negative_band_mean: tuple[float, ...]
    positive_count: int
    negative_count: int


@dataclass(frozen=True)
class _Ranked:
    """Magnitudes of a set of tokens ranked largest first, grouped into bins.

    The sufficient statistic of the Table 1 and Fig. 3 readings. ``counts``: [K] float64
    tokens per bin; ``sums``: [K] float64 their summed magnitude; ``kth_largest(ks)``: the
    k-th largest magnitude for each k (1 <= k <= n), where Table 1 needs them. One token
    per bin reads the exact values; the fixed log-magnitude bins of
    :mod:`ratioscope.functional.histogram` read values within its relative error and
    merge across files by adding counts and sums.
    """

    counts: Tensor
    sums: Tensor
    kth_largest: Callable[[Sequence[int]], list[float]] | None = None

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    @functools.cached_property
    def _cumulative(self) -> tuple[Any, Any, Any, Any]:
        """(counts, their cumulative sums, sums, their cumulative sums) as numpy arrays,
        for :meth:`top_sums`: a report reads dozens of top sums of one ranking (the Fig. 3
        curve has 54 points), each a search, not a new sum over the bins."""
        counts, sums = self.counts.detach().cpu(), self.sums.detach().cpu()
        return (
            counts.numpy(), torch.cumsum(counts, 0).numpy(),
            sums.numpy(), torch.cumsum(sums, 0).numpy(),
        )  # fmt: skip

    def top_sums(self, ks: Sequence[int]) -> list[float]:
        """Sum of the k largest magnitudes, for each k: whole bins exactly, the last bin
        at its mean (the whole bins summed in rank order, so within a few ulps of any
        other order)."""
        counts, cumulative, sums, sums_before = self._cumulative
        wanted = np.asarray(ks, dtype=np.float64)
        index = np.minimum(np.searchsorted(cumulative, wanted, side="left"), counts.size - 1)
        earlier = np.maximum(index - 1, 0)
        before = np.where(index > 0, cumulative[earlier], 0).astype(np.float64)
        before_sum = np.where(index > 0, sums_before[earlier], 0.0)
        inside = counts[index].astype(np.float64)
        share = np.divide(
            (wanted - before) * sums[index], inside, out=np.zeros_like(inside), where=inside > 0
        )
        return (before_sum + share).tolist()


def _ranked_exactly(magnitudes: Tensor) -> _Ranked:
    ranked = torch.sort(magnitudes.to(torch.float64), descending=True).values
    return _Ranked(torch.ones_like(ranked), ranked, lambda ks: [float(ranked[k - 1]) for k in ks])


def _ranked_from_bins(
    counts: Tensor, sums: Tensor, sign: int, minimum: float = -math.inf, maximum: float = math.inf
) -> _Ranked:
    """One sign of a signed histogram (sign 1: c > 0; -1: c < 0; 0: |c|, zeros last)."""
    float_counts = counts.detach().cpu().double()
    sums = sums.detach().cpu().double()
    centre = bins.CENTER
    positive = (float_counts[centre + 1 :], sums[centre + 1 :])  # ascending magnitude
    negative = (float_counts[:centre].flip(0), -sums[:centre].flip(0))
    if sign > 0:
        ascending = positive
    elif sign < 0:
        ascending = negative
    else:
        zero = float_counts[centre : centre + 1]
        ascending = (
            torch.cat([zero, positive[0] + negative[0]]),
            torch.cat([torch.zeros(1, dtype=torch.float64), positive[1] + negative[1]]),
        )
    n = int(ascending[0].sum())

    def kth_largest(ks: Sequence[int]) -> list[float]:
        # the k-th largest magnitude of one sign is a quantile of that sign's bins (all
        # of a table's quantiles read from one cumulative sum)
        one_sign = counts.clone()
        if sign > 0:
            one_sign[: centre + 1] = 0
            qs = [(n - k + 0.5) / n for k in ks]
            return bins.quantiles_from_counts(one_sign, qs, None, maximum)
        one_sign[centre:] = 0
        qs = [(k - 0.5) / n for k in ks]
        return [-value for value in bins.quantiles_from_counts(one_sign, qs, minimum, None)]

    return _Ranked(ascending[0].flip(0), ascending[1].flip(0), kth_largest if sign else None)


def _top_fraction_stats(
    ranked: _Ranked, fractions: tuple[float, ...], sign: float
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """Per fraction: threshold, top mean and band mean, each with ``sign``."""
    assert ranked.kth_largest is not None
    n = ranked.n
    if n == 0:
        nothing = tuple(math.nan for _ in fractions)
        return nothing, nothing, nothing
    ks = [top_count(fraction, n) for fraction in fractions]
    means, band_means = [], []
    previous, previous_sum = 0, 0.0
    for k, top in zip(ks, ranked.top_sums(ks), strict=True):
        band = k - previous
        band_mean = (top - previous_sum) / band if band > 0 else math.nan
        means.append(sign * top / k)
        band_means.append(sign * band_mean)
        if k > previous:
            previous, previous_sum = k, top
    thresholds = tuple(sign * value for value in ranked.kth_largest(ks))
    return thresholds, tuple(means), tuple(band_means)


def _percentile_table(
    positive: _Ranked, negative: _Ranked, fractions: Sequence[float]
) -> CovariancePercentiles:
    fractions = _check_fractions(fractions)
    if list(fractions) != sorted(fractions):
        raise ParameterError("fractions", f"must be increasing, got {list(fractions)}")
    pos = _top_fraction_stats(positive, fractions, 1.0)
    neg = _top_fraction_stats(negative, fractions, -1.0)
    return CovariancePercentiles(
        fractions=fractions,
        positive_threshold=pos[0],
        positive_mean=pos[1],
        positive_band_mean=pos[2],
        negative_threshold=neg[0],
        negative_mean=neg[1],
        negative_band_mean=neg[2],
        positive_count=positive.n,
        negative_count=negative.n,
    )


def covariance_percentiles(
    c: Tensor, mask: Tensor | None = None, fractions: Sequence[float] = PERCENTILE_FRACTIONS
) -> CovariancePercentiles:
    """Percentile table of the token covariance, CW-GRPO Table 1 (section 2.2), exact.

    The paper does not say which statistic its table holds; both the threshold and the
    mean of each top fraction are reported, plus the mean of each band between
    consecutive fractions (see :class:`CovariancePercentiles` and docs/metrics-objectives).
    :func:`covariance_percentiles_from_bins` reads the same table from mergeable
    histograms.

    Args:
        c: [B, T] (or any shape) float covariances from :func:`covariance_weights`.
        mask: same shape, bool valid tokens, or None for all entries.
        fractions: increasing fractions in (0, 1].

    >>> t = covariance_percentiles(torch.tensor([4.0, 3.0, 2.0, 1.0, -1.0]), None, (0.5, 1.0))
    >>> t.positive_threshold, t.positive_mean, t.positive_band_mean, t.negative_mean
    ((3.0, 1.0), (3.5, 2.5), (3.5, 1.5), (-1.0, -1.0))
    """
    values = _valid_values(c, mask)
    positive = _ranked_exactly(values[values > 0])
    negative = _ranked_exactly(-values[values < 0])
    return _percentile_table(positive, negative, fractions)


def covariance_percentiles_from_bins(
    counts: Tensor,
    sums: Tensor,
    minimum: float,
    maximum: float,
    fractions: Sequence[float] = PERCENTILE_FRACTIONS,
) -> CovariancePercentiles:
    """CW-GRPO Table 1 read from a signed histogram of c, the streaming form.

    The histogram (fixed bins of :mod:`ratioscope.functional.histogram`, e.g. a
    :class:`ratioscope.sections.summaries.Histogram` with sums) merges across files by adding counts
    and sums; every value read here is within ``histogram.RELATIVE_ERROR`` (about 1.16 %)
    of the exact :func:`covariance_percentiles` of all tokens whenever the magnitudes lie
    in [1e-9, 1e4). Whole bins enter the top sums exactly; the bin a fraction ends in
    contributes at its bin mean, and the threshold is interpolated inside its bin.

    Args:
        counts: [NUM_BINS] int, tokens per bin; sums: [NUM_BINS] float, the sum of c per
            bin; minimum, maximum: the exact extremes of c (they bound the outer bins).
        fractions: increasing fractions in (0, 1].
    """
    positive = _ranked_from_bins(counts, sums, 1, maximum=maximum)
    negative = _ranked_from_bins(counts, sums, -1, minimum=minimum)
    return _percentile_table(positive, negative, fractions)


def _cumulative_share(ranked: _Ranked, fractions: Sequence[float]) -> tuple[float, ...]:
    fractions = _check_fractions(fractions)
    n = ranked.n
    total = float(ranked.sums.sum())
    if n == 0 or total <= 0:
        return tuple(math.nan for _ in fractions)
    tops = ranked.top_sums([top_count(x, n) for x in fractions])
    return tuple(min(1.0, top / total) for top in tops)


def cumulative_covariance_share(
    c: Tensor, mask: Tensor | None = None, fractions: Sequence[float] = (0.001, 0.01, 0.1, 0.2)
) -> tuple[float, ...]:
    """Share of the total ``|c|`` held by the top fraction of tokens, CW-GRPO Fig. 3, exact.

    Tokens are ranked by ``|c|`` over all valid tokens (c == 0 included); for each
    fraction x the top ``top_count(x, N)`` tokens are taken. NaN when every ``c`` is 0 or
    there is no token. :func:`cumulative_covariance_share_from_bins` is the streaming form.

    >>> cumulative_covariance_share(torch.tensor([3.0, -1.0, 0.5, 0.5]), None, (0.25, 1.0))
    (0.6, 1.0)
    """
    return _cumulative_share(_ranked_exactly(_valid_values(c, mask).abs()), fractions)


def cumulative_covariance_share_from_bins(
    counts: Tensor, sums: Tensor, fractions: Sequence[float] = (0.001, 0.01, 0.1, 0.2)
) -> tuple[float, ...]:
    """CW-GRPO Fig. 3 read from a signed histogram of c (see
    :func:`covariance_percentiles_from_bins`); within the histogram's relative error of
    :func:`cumulative_covariance_share`.

    Args:
        counts: [NUM_BINS] int, tokens per bin; sums: [NUM_BINS] float, the sum of c per bin.
    """
    return _cumulative_share(_ranked_from_bins(counts, sums, 0), fractions)


@dataclass(frozen=True)
class TouchedTokens:
    """How many valid tokens a covariance-based intervention would act on.

    Attributes:
        count: tokens touched.
        eligible: tokens it may choose from (Clip-Cov: inside the bounds; KL-Cov: all).
        total: valid tokens N.
        fraction: count / total (NaN when total is 0).
        threshold: KL-Cov only, the smallest c among the touched tokens (NaN otherwise).
    """

    count: int
    eligible: int
    total: int
    fraction: float
    threshold: float = math.nan


def clip_cov_touched(
    c: Tensor,
    mask: Tensor | None = None,
    ratio: float = CLIP_COV_RATIO,
    bounds: tuple[float, float] = CLIP_COV_BOUNDS,
    exclude: Tensor | None = None,
) -> TouchedTokens:
    """Tokens Clip-Cov would detach: ``min(#eligible, max(1, floor(ratio N)))``.

    Clip-Cov (Cui et al. 2025, settings as in TEPO section 4.1) picks, at random,
    ``max(1, floor(ratio N))`` tokens among those with ``bounds[0] < c < bounds[1]`` and
    stops their gradient; the count needs no randomness. Clip-Cov computes ``c`` over the
    whole batch (``covariance_weights(..., group=None)``). Its reference implementation
    also leaves out tokens PPO clipping already zeroed; pass them as ``exclude``.

    Args:
        c: covariances, any shape; mask: same shape bool or None.
        exclude: same shape bool, tokens that may not be chosen, or None.

    >>> clip_cov_touched(torch.tensor([0.5, 2.0, 3.0, 7.0]), ratio=0.5).count
    2
    """
    if not ratio > 0:
        raise ParameterError(
            "ratio", f"must be positive, got {ratio}", subject="the Clip-Cov ratio"
        )
    low, high = bounds
    valid = torch.ones_like(c, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    _check_same_shape("c", c, "mask", valid)
    if exclude is not None:
        _check_same_shape("exclude", exclude, "c", c)
        valid = valid & ~exclude.to(torch.bool)
    total = int((torch.ones_like(c, dtype=torch.bool) if mask is None else mask).sum())
    eligible = int((valid & (c > low) & (c < high)).sum())
    count = clip_cov_count(eligible, total, ratio)
    return TouchedTokens(count, eligible, total, count / total if total else math.nan)


def clip_cov_count(eligible: int, total: int, ratio: float = CLIP_COV_RATIO) -> int:
    """Clip-Cov's count from its exact parts: ``min(eligible, max(1, floor(ratio total)))``
    (0 without a token), for a batch whose eligible tokens were counted chunk by chunk.

    >>> clip_cov_count(3, 10_000), clip_cov_count(0, 10), clip_cov_count(9, 0)
    (2, 0, 0)
    """
    budget = max(1, math.floor(ratio * total)) if total else 0
    return min(eligible, budget)


def kl_cov_count(total: int, ratio: float = KL_COV_RATIO) -> int:
    """KL-Cov's count for a batch of ``total`` valid tokens: ``min(total, max(1,
    floor(ratio total)))`` (0 without a token); which tokens needs the ranking, how many
    does not.

    >>> kl_cov_count(10_000), kl_cov_count(3), kl_cov_count(0)
    (20, 1, 0)
    """
    return min(total, max(1, math.floor(ratio * total))) if total else 0


def kl_cov_touched(
    c: Tensor, mask: Tensor | None = None, ratio: float = KL_COV_RATIO
) -> TouchedTokens:
    """Tokens KL-Cov would penalise: the ``max(1, floor(ratio N))`` largest ``c``.

    KL-Cov (Cui et al. 2025; k = 2e-3 as in TEPO section 4.1) adds a KL penalty to the
    top-k proportion of tokens ranked by signed ``c`` over the batch.

    >>> t = kl_cov_touched(torch.tensor([0.1, 5.0, -2.0, 1.0]), ratio=0.5)
    >>> t.count, t.fraction, t.threshold
    (2, 0.5, 1.0)
    """
    if not ratio > 0:
        raise ParameterError("ratio", f"must be positive, got {ratio}", subject="the KL-Cov ratio")
    values = _valid_values(c, mask)
    total = int(values.numel())
    if total == 0:
        return TouchedTokens(0, 0, 0, math.nan)
    count = kl_cov_count(total, ratio)
    threshold = float(torch.topk(values, count).values[-1])
    return TouchedTokens(count, total, total, count / total, threshold)


@dataclass(frozen=True)
class AdvantageMass:
    """How the kernel changes the advantage mass ``sum |A|`` over valid tokens.

    Attributes:
        removed: ``1 - sum(w |A|) / sum |A|`` with the raw kernel ``w`` in [0, 1]: the
            share of advantage mass the kernel takes away before renormalising (in [0, 1]).
        removed_normalised: ``1 - sum(w_norm |A|) / sum |A|``: the net change once the
            weights are renormalised to mean 1 (negative when mass moves onto tokens with
            large ``|A|``).
        total: ``sum |A|`` over valid tokens.
    """

    removed: float
    removed_normalised: float
    total: float


def advantage_mass_removed(w: Tensor, w_norm: Tensor, adv: Tensor, mask: Tensor) -> AdvantageMass:
    """Share of the advantage mass the CW-GRPO kernel removes (docs/metrics-objectives.md).

    Args:
        w, w_norm: [B, T] raw and normalised weights from :func:`covariance_weights`.
        adv: [B, T] advantages; mask: [B, T] bool.

    >>> ones = torch.ones(1, 2, dtype=torch.bool)
    >>> m = advantage_mass_removed(torch.tensor([[1.0, 0.5]]), torch.tensor([[4/3, 2/3]]),
    ...                            torch.tensor([[1.0, -3.0]]), ones)
    >>> round(m.removed, 6), round(m.removed_normalised, 6), m.total
    (0.375, 0.166667, 4.0)
    """
    for name, tensor in (("w", w), ("w_norm", w_norm), ("adv", adv)):
        _check_same_shape(name, tensor, "mask", mask)
    valid = mask.to(torch.bool)
    magnitude = adv[valid].to(torch.float64).abs()
    total = float(magnitude.sum())
    if total == 0.0:
        return AdvantageMass(math.nan, math.nan, 0.0)
    kept = float((w[valid].to(torch.float64) * magnitude).sum())
    kept_normalised = float((w_norm[valid].to(torch.float64) * magnitude).sum())
    return AdvantageMass(1.0 - kept / total, 1.0 - kept_normalised / total, total)


@dataclass(frozen=True)
class WeightSummary:
    """Distribution of kernel weights over valid tokens.

    Attributes:
        mean: mean weight.
        quantiles: ``{q: value}`` (linear interpolation, numpy's default).
        fraction_below: ``{t: share of tokens with weight < t}``.
        count: valid tokens.
    """

    mean: float
    quantiles: dict[float, float]
    fraction_below: dict[float, float]
    count: int


def kernel_weight_summary(
    w: Tensor,
    mask: Tensor | None = None,
    quantiles: Sequence[float] = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99),
    below: Sequence[float] = (0.5, 0.1),
) -> WeightSummary:
    """Mean, quantiles and the share of tokens below each threshold (docs/metrics-objectives.md).

    >>> s = kernel_weight_summary(torch.tensor([1.0, 0.9, 0.3, 0.05]), None, (0.5,), (0.5, 0.1))
    >>> s.mean, s.quantiles[0.5], s.fraction_below
    (0.5625, 0.6, {0.5: 0.5, 0.1: 0.25})
    """
    values = _valid_values(w, mask)
    n = int(values.numel())
    if n == 0:
        return WeightSummary(
            math.nan, {q: math.nan for q in quantiles}, {t: math.nan for t in below}, 0
        )
    # numpy, because torch.quantile refuses inputs above 2**24 elements
    qs = np.quantile(values.cpu().numpy(), [float(q) for q in quantiles]).tolist()
    return WeightSummary(
        mean=float(values.mean()),
        quantiles={float(q): v for q, v in zip(quantiles, qs, strict=True)},
        fraction_below={float(t): float((values < t).sum()) / n for t in below},
        count=n,
    )
