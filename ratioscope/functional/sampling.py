"""The engine's sampling distribution: temperature, top-k and top-p, and what they do
to an importance ratio built from full-softmax log-probs.

An inference engine that samples with a temperature T, top-k and top-p draws y_t from

    q(y) = softmax(l / T)_y / K   for y in the kept set S, 0 elsewhere,

where l are the next-token logits, S keeps the k largest of l (ties kept, as
``torch.topk``'s k-th value with ``>=``) and then, of the renormalised tempered
distribution, the smallest set of most likely tokens whose mass reaches p (a token is
kept when the mass of the tokens ranked before it is below p), and K is the tempered
mass S holds. The order (temperature, top-k, top-p) is that of Hugging Face's
``generate`` (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper) and vLLM's
sampler. A ratio pi_theta / pi_old whose behaviour side is the full softmax at T = 1
is then biased by log q(y) - log softmax(l)_y on every token; a sampled token outside S
could not have been drawn under the stated settings: the two sides disagree.

Without logits, a temperature applied on one side only shows in the log-probs alone:
with log q = log softmax(l / T) and x = log softmax(l)_y, the log-ratio z = x - log q
moves with x, its slope about 1 - 1/T (-0.43 at T = 0.7). :func:`slope_sums` keeps the
sums of that least-squares line (:class:`~ratioscope.functional.moments.PairSums`),
mergeable exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ratioscope.functional.moments import PairSums

#: float64 elements of one working [rows, V] buffer
CHUNK_ELEMENTS = 1 << 24


@dataclass(frozen=True)
class SamplingSettings:
    """What the engine sampled with; None: not applied (T = 1, no top-k, top-p 1)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None

    @property
    def stated(self) -> bool:
        return any(v is not None for v in (self.temperature, self.top_p, self.top_k))


def sampling_log_probs(
    logits: Tensor, token_ids: Tensor, settings: SamplingSettings
) -> tuple[Tensor, Tensor, Tensor]:
    """Each token's log-prob under the engine's tempered, truncated distribution.

    Args:
        logits: [N, V] float, the next-token logits of N tokens (any float dtype).
        token_ids: [N] int64, the sampled tokens.
        settings: temperature, top-p, top-k.

    Returns:
        ``(log_q, full, kept_mass)``: [N] float64 log q(y) (-inf for a token outside the
        kept set), [N] float64 log softmax(l)_y at T = 1, and [N] float64 K, the tempered
        mass the kept set holds (1 - K: the mass the truncation removed).
    """
    rows = max(1, CHUNK_ELEMENTS // max(1, logits.shape[-1]))
    parts = [
        _chunk_log_probs(logits[start : start + rows], token_ids[start : start + rows], settings)
        for start in range(0, logits.shape[0], rows)
    ]
    if not parts:
        empty = torch.zeros(0, dtype=torch.float64)
        return empty, empty, empty
    log_q, full, kept = (torch.cat(values) for values in zip(*parts, strict=True))
    return log_q, full, kept


def _chunk_log_probs(
    logits: Tensor, token_ids: Tensor, settings: SamplingSettings
) -> tuple[Tensor, Tensor, Tensor]:
    values = logits.double()
    index = token_ids[:, None]
    full = torch.log_softmax(values, dim=-1).gather(1, index)[:, 0]
    tempered = torch.log_softmax(values / (settings.temperature or 1.0), dim=-1)
    keep = kept_set(tempered, settings)
    # log K by a masked log-sum-exp: K is a sum of probabilities, kept in log space
    log_kept = torch.logsumexp(tempered.masked_fill(~keep, -math.inf), dim=-1)
    # nothing removed is K = 1 exactly, not the rounding of a log-sum-exp of everything
    log_kept = torch.where(keep.all(dim=-1), torch.zeros_like(log_kept), log_kept)
    inside = keep.gather(1, index)[:, 0]
    chosen = tempered.gather(1, index)[:, 0] - log_kept
    log_q = torch.where(inside, chosen, torch.full_like(chosen, -math.inf))
    return log_q, full, log_kept.exp()


def kept_set(log_probs: Tensor, settings: SamplingSettings) -> Tensor:
    """[N, V] bool: the tokens top-k and then top-p keep of a tempered distribution.

    Args:
        log_probs: [N, V] float64, log softmax(l / T).
        settings: top-k (k largest, ties kept) and top-p (of the renormalised
            distribution after top-k: a token is kept when the mass ranked before it is
            below p, tied tokens ranked by their index; the most likely token always
            is).
    """
    keep = torch.ones_like(log_probs, dtype=torch.bool)
    if settings.top_k is not None and settings.top_k < log_probs.shape[-1]:
        kth = torch.topk(log_probs, settings.top_k, dim=-1).values[:, -1:]
        keep &= log_probs >= kth
    if settings.top_p is not None and settings.top_p < 1.0:
        renormalised = torch.log_softmax(log_probs.masked_fill(~keep, -math.inf), dim=-1)
        # stable: tied tokens are ranked by their index on every device, so the CPU and
        # a GPU keep the same ones at the boundary
        ordered, order = torch.sort(renormalised, dim=-1, descending=True, stable=True)
        before = torch.cumsum(ordered.exp(), dim=-1) - ordered.exp()
        keep_sorted = before < settings.top_p
        keep_sorted[:, 0] = True
        nucleus = torch.zeros_like(keep).scatter(1, order, keep_sorted)
        keep &= nucleus
    return keep


def slope_sums(z: Tensor, x: Tensor, mask: Tensor) -> PairSums:
    """The sums of the line of ``z`` on ``x`` over the valid tokens (x the regressor).

    Args:
        z: [B, T] float, the trainer/engine log-ratio.
        x: [B, T] float, the trainer's log-prob of the token.
        mask: [B, T] bool.
    """
    zs, xs = z.double()[mask], x.double()[mask]
    return PairSums(
        n=int(zs.numel()),
        x=float(xs.sum()),
        y=float(zs.sum()),
        xx=float((xs * xs).sum()),
        yy=float((zs * zs).sum()),
        xy=float((xs * zs).sum()),
    )


@dataclass(frozen=True)
class TemperatureFit:
    """The line z = a + b x of the trainer/engine log-ratio on the trainer's log-prob.

    Attributes:
        tokens: tokens fitted.
        slope: b; about 1 - 1/T for an engine at temperature T against a trainer at 1.
        correlation: Pearson's r of z and x.
        implied_temperature: 1 / (1 - b), the engine's temperature relative to the
            trainer's that the slope implies (inf for b >= 1).
    """

    tokens: int
    slope: float
    correlation: float
    implied_temperature: float


def temperature_fit(sums: PairSums) -> TemperatureFit:
    """The fit of merged sums; NaN where the tokens or their spread are too few (a
    log-ratio without spread has correlation 0: no line)."""
    slope = sums.slope()
    if math.isnan(slope):
        return TemperatureFit(sums.n, math.nan, math.nan, math.nan)
    correlation = sums.correlation()
    correlation = 0.0 if math.isnan(correlation) else correlation
    implied = 1.0 / (1.0 - slope) if slope < 1 else math.inf
    return TemperatureFit(sums.n, slope, correlation, implied)
