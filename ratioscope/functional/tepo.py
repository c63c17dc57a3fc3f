"""TEPO: sequence-likelihood weights, their clipping, token KL-mask quadrants
(docs/metrics-objectives.md).

Paper: "Token-Level Policy Optimization: Linking Group-Level Rewards to Token-Level
Aggregation via Sequence-Level Likelihood" (TEPO). The objective is Eq. (4):
``J = 1/sum|o_i| sum_i sum_t [min(w_i, clip(w_i, 1-eps, 1+eps)) A_it - beta KL M_it]``
with ``w_i = exp(mean_t log(pi_theta/pi_old))`` (section 3.3.1) and the KL mask
``M_it = 1[A_it > 0 and dH_it < 0]``.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass
from typing import Literal

import torch
from torch import Tensor

from ratioscope.errors import ParameterError, ShapeMismatchError
from ratioscope.functional import _kernels, _triton_kernels
from ratioscope.functional.fpa import sequence_weights
from ratioscope.functional.surrogate import (
    AdvantageSums,
    Aggregates,
    aggregation_sums,
    constant_ppo_row_sums,
    ppo_clip_mask,
    ppo_objective_terms,
)

#: TEPO does not state its epsilon; ratioscope uses the sequence-variant band of
#: docs/metrics-ratios.md (GSPO's 3e-4, 4e-4) as (eps_low, eps_high).
SEQUENCE_CLIP: tuple[float, float] = (3e-4, 4e-4)

ClipForm = Literal["ppo", "literal"]


def _token_advantages(adv: Tensor, mask: Tensor) -> Tensor:
    """[B] advantages broadcast over tokens; [B, T] returned as is."""
    if adv.shape == mask.shape:
        return adv
    if adv.ndim == 1 and adv.shape[0] == mask.shape[0]:
        return adv.unsqueeze(1).expand(mask.shape)
    raise ShapeMismatchError(None, "adv", adv.shape, "mask", mask.shape, "[B] or [B, T]")


def _check_clip(clip: tuple[float, float]) -> tuple[float, float]:
    low, high = (float(v) for v in clip)
    if not (0 <= low < 1 and high >= 0):
        raise ParameterError("clip", f"needs 0 <= eps_low < 1 and eps_high >= 0, got {clip}")
    return low, high


def sequence_likelihood_weights(z: Tensor, mask: Tensor) -> Tensor:
    """TEPO sequence weight ``w_i = exp(mean_t z_it)``, section 3.3.1 (Algorithm 1 steps 2-3).

    The geometric mean of the token ratios over the valid tokens (GSPO's sequence ratio).

    Args:
        z: [B, T] float log-ratios log pi_theta - log pi_old; mask: [B, T] bool.

    Returns:
        [B] float (NaN for a sequence without valid tokens).

    >>> z = torch.log(torch.tensor([[2.0, 0.5, 4.0]]))
    >>> round(sequence_likelihood_weights(z, torch.tensor([[True, True, False]])).item(), 6)
    1.0
    """
    return sequence_weights(z, mask)


def _broadcast_log_weight(z: Tensor, valid: Tensor) -> Tensor:
    """``log w_i`` at every token of sequence i: [B, T] (the GSPO/TEPO sequence ratio)."""
    log_w = torch.log(sequence_likelihood_weights(z, valid).to(torch.float64))
    return log_w.unsqueeze(1).expand(valid.shape)


def _prepared(
    z: Tensor, adv: Tensor, mask: Tensor, clip: tuple[float, float], form: str
) -> tuple[Tensor, Tensor, Tensor, tuple[float, float]]:
    if z.shape != mask.shape:
        raise ShapeMismatchError(None, "z", z.shape, "mask", mask.shape)
    if form not in ("ppo", "literal"):
        raise ParameterError("form", f"must be 'ppo' or 'literal', got '{form}'")
    clip = _check_clip(clip)
    valid = mask.to(device=z.device, dtype=torch.bool)
    a = _token_advantages(adv.to(z.device), valid).to(torch.float64)
    return _broadcast_log_weight(z, valid), a, valid, clip


def sequence_clip_mask(
    z: Tensor,
    adv: Tensor,
    mask: Tensor,
    clip: tuple[float, float] = SEQUENCE_CLIP,
    form: ClipForm = "ppo",
) -> Tensor:
    """Valid tokens whose TEPO policy term has zero gradient because of clipping.

    Every token of sequence i carries ``w_i``. ``form="ppo"`` (default) reads Eq. (4) as
    the PPO/GSPO surrogate ``min(w A, clip(w) A)`` (:func:`~ratioscope.functional.
    surrogate.ppo_clip_mask` on the sequence ratio): clipped when ``A > 0 and
    w > 1 + eps_high`` or ``A < 0 and w < 1 - eps_low``. ``form="literal"`` takes
    Eq. (4) as printed, ``min(w, clip(w)) A``, which only ever binds above: clipped when
    ``w > 1 + eps_high`` and ``A != 0``.

    Args:
        z: [B, T] float log-ratios; adv: [B] or [B, T] float; mask: [B, T] bool.
        clip: (eps_low, eps_high).

    Returns:
        [B, T] bool, False at masked positions.
    """
    log_w, a, valid, clip = _prepared(z, adv, mask, clip, form)
    if form == "ppo":
        return ppo_clip_mask(log_w, a, valid, clip)
    return (torch.exp(log_w) > 1.0 + clip[1]) & (a != 0) & valid


def sequence_clip_fraction(
    z: Tensor,
    adv: Tensor,
    mask: Tensor,
    clip: tuple[float, float] = SEQUENCE_CLIP,
    form: ClipForm = "ppo",
) -> float:
    """Fraction of valid tokens clipped under TEPO's sequence weight (docs/metrics-objectives.md).

    See :func:`sequence_clip_mask`; NaN when there is no valid token.

    >>> z = torch.tensor([[0.1, 0.1], [-0.1, 0.0]])
    >>> sequence_clip_fraction(z, torch.tensor([1.0, 1.0]), torch.ones(2, 2, dtype=torch.bool))
    0.5
    """
    clipped = sequence_clip_mask(z, adv, mask, clip, form)
    total = int(mask.to(torch.bool).sum())
    return float(clipped.sum()) / total if total else math.nan


def tepo_policy_terms(
    z: Tensor,
    adv: Tensor,
    mask: Tensor,
    clip: tuple[float, float] = SEQUENCE_CLIP,
    form: ClipForm = "ppo",
) -> Tensor:
    """Per-token policy term of TEPO Eq. (4) without the KL part (beta KL M).

    ``min(w_i A_it, clip(w_i) A_it)`` (``form="ppo"``, via
    :func:`~ratioscope.functional.surrogate.ppo_objective_terms` on the sequence ratio)
    or ``min(w_i, clip(w_i)) A_it`` (``form="literal"``).

    Returns:
        [B, T] float64, 0 at masked positions.

    >>> z = torch.log(torch.tensor([[2.0, 2.0]]))
    >>> tepo_policy_terms(z, torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool),
    ...                   clip=(0.2, 0.2)).tolist()
    [[1.2, 1.2]]
    """
    log_w, a, valid, clip = _prepared(z, adv, mask, clip, form)
    if form == "ppo":
        return ppo_objective_terms(log_w, a, valid, clip)
    w = torch.exp(log_w)
    terms = torch.minimum(w, w.clamp(1.0 - clip[0], 1.0 + clip[1])) * a
    return torch.where(valid, terms, 0.0)


def tepo_surrogate(
    z: Tensor,
    adv: Tensor,
    mask: Tensor,
    clip: tuple[float, float] = SEQUENCE_CLIP,
    form: ClipForm = "ppo",
) -> Aggregates:
    """TEPO Eq. (4) policy objective (KL term left out) under the two aggregations it
    compares (Table 3, panel D): ``token_mean`` = ``1/sum_i |o_i| sum_i sum_t term_it``
    (TEPO's), ``seq_mean_token_mean`` = ``1/G sum_i 1/|o_i| sum_t term_it`` (GSPO's),
    with ``term`` from :func:`tepo_policy_terms`. The loss is minus either value; NaN
    when there is no valid token. A streaming caller feeds the same terms to
    :func:`~ratioscope.functional.surrogate.aggregation_sums` chunk by chunk.

    >>> z = torch.zeros(2, 3); m = torch.tensor([[True, True, True], [True, False, False]])
    >>> s = tepo_surrogate(z, torch.tensor([[1.0, 1.0, 1.0], [-2.0, 0.0, 0.0]]), m)
    >>> s.token_mean, s.seq_mean_token_mean
    (0.25, -0.5)
    """
    terms = tepo_policy_terms(z, adv, mask, clip, form)
    valid = mask.to(device=terms.device, dtype=torch.bool)
    return aggregation_sums(terms, valid).aggregates()


def kl_mask(adv: Tensor, entropy: Tensor, old_entropy: Tensor, mask: Tensor) -> Tensor:
    """TEPO's token KL mask ``M_it = 1[A_it > 0 and dH_it < 0]``, Eq. (4).

    ``dH = entropy - old_entropy`` (entropy of pi_theta minus that of pi_old at the token).

    Args:
        adv: [B] or [B, T] float; entropy, old_entropy: [B, T] float; mask: [B, T] bool.

    Returns:
        [B, T] bool, False at masked positions.
    """
    valid, a, dh = _quadrant_inputs(adv, entropy, old_entropy, mask)
    return valid & (a > 0) & (dh < 0)


def _quadrant_inputs(
    adv: Tensor, entropy: Tensor, old_entropy: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    for name, tensor in (("entropy", entropy), ("old_entropy", old_entropy)):
        if tensor.shape != mask.shape:
            raise ShapeMismatchError(None, name, tensor.shape, "mask", mask.shape)
    valid = mask.to(device=entropy.device, dtype=torch.bool)
    a = _token_advantages(adv.to(entropy.device), valid)
    return valid, a, entropy - old_entropy.to(entropy.device)


@dataclass(frozen=True)
class KLMaskQuadrants:
    """Valid tokens by advantage sign and entropy change dH (TEPO section 3.3.2, Table 3 E).

    Attributes:
        pos_decreasing: A > 0, dH < 0 (TEPO's KL mask M).
        pos_non_decreasing: A > 0, dH >= 0.
        neg_increasing: A < 0, dH > 0.
        neg_non_increasing: A < 0, dH <= 0.
        zero_advantage: A == 0 (in none of the paper's four cases).
        total: valid tokens. The five counts add up to it when A and dH are finite.
    """

    pos_decreasing: int
    pos_non_decreasing: int
    neg_increasing: int
    neg_non_increasing: int
    zero_advantage: int
    total: int

    def fractions(self) -> dict[str, float]:
        """Each count divided by ``total`` (NaN when there is no valid token)."""
        names = (
            "pos_decreasing",
            "pos_non_decreasing",
            "neg_increasing",
            "neg_non_increasing",
            "zero_advantage",
        )
        return {
            name: (getattr(self, name) / self.total if self.total else math.nan) for name in names
        }


def kl_mask_quadrants(
    adv: Tensor, entropy: Tensor, old_entropy: Tensor, mask: Tensor
) -> KLMaskQuadrants:
    """Counts of valid tokens in each (sign A, sign dH) quadrant, dH = entropy - old_entropy.

    The quadrants are TEPO's (section 3.3.2): (A>0, dH<0) is its KL mask; (A<0, dH>0) is
    the other "misaligned" case of Table 3 panel E. Tokens with A == 0 fall in none of
    them and are counted apart.

    Args:
        adv: [B] or [B, T] float; entropy, old_entropy: [B, T] float; mask: [B, T] bool.

    >>> q = kl_mask_quadrants(torch.tensor([[1.0, 1.0, -1.0, 0.0]]),
    ...                       torch.tensor([[0.1, 0.5, 0.5, 0.2]]),
    ...                       torch.tensor([[0.3, 0.5, 0.4, 0.1]]),
    ...                       torch.ones(1, 4, dtype=torch.bool))
    >>> q.pos_decreasing, q.pos_non_decreasing, q.neg_increasing, q.zero_advantage
    (1, 1, 1, 1)
    """
    valid, a, dh = _quadrant_inputs(adv, entropy, old_entropy, mask)
    positive = valid & (a > 0)
    negative = valid & (a < 0)
    return KLMaskQuadrants(
        pos_decreasing=int((positive & (dh < 0)).sum()),
        pos_non_decreasing=int((positive & (dh >= 0)).sum()),
        neg_increasing=int((negative & (dh > 0)).sum()),
        neg_non_increasing=int((negative & (dh <= 0)).sum()),
        zero_advantage=int((valid & (a == 0)).sum()),
        total=int(valid.sum()),
    )


def kl_mask_quadrants_by_row(
    adv: Tensor, entropy: Tensor, old_entropy: Tensor, mask: Tensor, backend: str = "auto"
) -> tuple[KLMaskQuadrants, Tensor]:
    """:func:`kl_mask_quadrants` and each row's KL-mask tokens ([B] int64, the row sums
    of :func:`kl_mask`).

    ``backend``: ``"compiled"`` one numba loop over the tokens (CPU, [B, T]
    advantages), ``"torch"`` the tensor functions (the reference), ``"auto"`` (default)
    the first where it can run, and on a GPU one Triton kernel
    (``_triton_kernels.entropy_quadrants``); the counts are identical.
    """
    counts, in_mask = kl_mask_quadrant_counts(adv, entropy, old_entropy, mask, backend)
    return KLMaskQuadrants(*(int(n) for n in counts.tolist())), in_mask


def kl_mask_quadrant_counts(
    adv: Tensor, entropy: Tensor, old_entropy: Tensor, mask: Tensor, backend: str = "auto"
) -> tuple[Tensor, Tensor]:
    """:func:`kl_mask_quadrants_by_row` as tensors: the counts [6] int64 in
    :class:`KLMaskQuadrants`' order and each row's KL-mask tokens [B] int64. On a GPU
    both stay on the device (nothing waits for it here)."""
    if backend not in ("auto", "compiled", "torch"):
        raise ParameterError("backend", f"must be 'auto', 'compiled' or 'torch', got '{backend}'")
    if backend == "auto" and _triton_kernels.on_gpu(adv, entropy, old_entropy, mask=mask):
        return _triton_kernels.entropy_quadrants(adv, entropy, old_entropy, mask)
    compiled = _kernels.can_take(adv, entropy, old_entropy, mask=mask)
    if backend == "compiled" and not compiled:
        raise ParameterError("backend", "'compiled' needs numba and [B, T] CPU tensors")
    if not compiled or backend == "torch":
        quadrants = kl_mask_quadrants(adv, entropy, old_entropy, mask)
        counts = torch.tensor(astuple(quadrants), dtype=torch.int64)
        return counts, kl_mask(adv, entropy, old_entropy, mask).sum(dim=1)
    import numpy as np

    from ratioscope.functional import _ratio_kernels

    rows = np.zeros(mask.shape[0], dtype=np.int64)
    a, h, h_old, valid = (t.detach().numpy() for t in (adv, entropy, old_entropy, mask))

    def part(start: int, stop: int) -> np.ndarray:  # counts: the same on any parts
        counts = np.zeros(6, dtype=np.int64)
        _ratio_kernels.entropy_quadrants(
            a[start:stop], h[start:stop], h_old[start:stop], valid[start:stop], counts,
            rows[start:stop],
        )  # fmt: skip
        return counts

    counts = np.sum(_kernels.map_any_parts(part, mask.shape[0], mask.numel()), axis=0)
    return torch.from_numpy(counts.astype(np.int64)), torch.from_numpy(rows)


def sequence_clip_counts(
    log_w: Tensor, sums: AdvantageSums, clip: tuple[float, float] = SEQUENCE_CLIP
) -> tuple[Tensor, Tensor]:
    """Each row's clipped tokens under TEPO's sequence weight, from one value per row:
    ``(ppo [B], literal [B])`` int64, the row sums of :func:`sequence_clip_mask` with
    ``form="ppo"`` and ``form="literal"``.

    Args:
        log_w: [B] float64 log w_i (0 for rows without valid tokens); sums: the rows'
            positive and negative advantage counts (:func:`~ratioscope.functional.
            surrogate.advantage_sums`); clip: (eps_low, eps_high).
    """
    low, high = _check_clip(clip)
    ppo, _, _ = constant_ppo_row_sums(log_w, sums, (low, high))
    literal = torch.where(torch.exp(log_w) > 1.0 + high, sums.n_positive + sums.n_negative, 0)
    return ppo, literal
