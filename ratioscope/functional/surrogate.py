"""PPO-style clipped surrogate and clip fraction for any ratio signal (docs/metrics-ratios.md).

The same functions serve the token ratio (``--clip``), the sequence-level ratio of
GSPO/GMPO/TEPO and the Kalman-filtered ratio of KPO (``--seq-clip``): a variant only
changes which log-ratio is passed in and which clip band applies. The two aggregations
of a surrogate (token-mean, seq-mean-token-mean) come from :class:`AggregationSums`,
which merges across chunks and files, so the streaming sections and a one-shot call
share one formula.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


def ppo_clip_mask(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip: tuple[float, float] = (0.2, 0.28)
) -> Tensor:
    """Tokens whose term min(r A, clip(r, 1 - eps_low, 1 + eps_high) A) has zero gradient.

    That happens when the clipped branch is the minimum and is constant: A > 0 with
    r > 1 + eps_high, or A < 0 with r < 1 - eps_low (KPO Eq. 1-2; PPO).

    Args:
        log_ratio: [B, T] float, log r.
        advantages: [B, T] float.
        mask: [B, T] bool.
        clip: (eps_low, eps_high).

    Returns:
        [B, T] bool, False at masked positions.

    >>> z = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    >>> a = torch.tensor([[1.0, -1.0, 1.0]])
    >>> ppo_clip_mask(z, a, torch.ones(1, 3, dtype=torch.bool)).tolist()
    [[True, True, False]]
    """
    eps_low, eps_high = clip
    ratio = torch.exp(log_ratio)
    clipped = ((advantages > 0) & (ratio > 1 + eps_high)) | (
        (advantages < 0) & (ratio < 1 - eps_low)
    )
    return clipped & mask


def ppo_objective_terms(
    log_ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip: tuple[float, float] | None = (0.2, 0.28),
) -> Tensor:
    """Per-token objective min(r A, clip(r) A), or r A when ``clip`` is None.

    Returns:
        [B, T] float64, 0 at masked positions. The loss is minus its aggregate.
    """
    ratio = torch.exp(log_ratio.double())
    adv = advantages.double()
    terms = ratio * adv
    if clip is not None:
        eps_low, eps_high = clip
        terms = torch.minimum(terms, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    return torch.where(mask, terms, 0.0)


def sequence_means(values: Tensor, mask: Tensor) -> Tensor:
    """[B] mean over each sequence's valid tokens (NaN for empty rows), summed in float64
    and rounded once to the values' dtype: one compiled pass for CPU float32/float64
    values with a bool mask, else tensor code."""
    from ratioscope.functional import _kernels

    if _kernels.can_take(values, mask=mask):
        sums, counts = _kernels.masked_row_sums(values.detach().numpy(), mask.numpy())
        means = torch.from_numpy(sums) / torch.from_numpy(counts)
    else:
        means = torch.where(mask, values.double(), 0.0).sum(dim=1) / mask.sum(dim=1)
    return means.to(values.dtype)


@dataclass(frozen=True)
class Aggregates:
    """A per-token quantity x_it under the two aggregations GRPO-family trainers use.

    Attributes:
        token_mean: ``sum_i sum_t x_it / sum_i |o_i|`` ("token-mean": DAPO, TEPO Eq. 4).
        seq_mean_token_mean: ``1/G sum_i 1/|o_i| sum_t x_it`` over the G sequences with
            a valid token ("seq-mean-token-mean": GRPO, GSPO).
    NaN where there is nothing to average.
    """

    token_mean: float
    seq_mean_token_mean: float

    def negated(self) -> Aggregates:
        """Both values with the sign flipped: the loss -J of an objective J."""
        return Aggregates(-self.token_mean, -self.seq_mean_token_mean)


@dataclass(frozen=True)
class AggregationSums:
    """Mergeable sums behind :class:`Aggregates` (docs/metrics-ratios.md; KPO Eq. 2, TEPO Eq. 4).

    Built from per-token values by :func:`aggregation_sums` or from per-sequence sums by
    :func:`row_aggregation_sums`; sums of chunks, files and shards add with :meth:`merge`,
    so both aggregations stream exactly.

    Attributes:
        token_sum: ``sum_i sum_t x_it`` over valid tokens; tokens: ``sum_i |o_i|``.
        seq_mean_sum: ``sum_i (1/|o_i|) sum_t x_it`` over sequences with a valid token;
            sequences: their number.
    """

    token_sum: float = 0.0
    tokens: int = 0
    seq_mean_sum: float = 0.0
    sequences: int = 0

    def merge(self, other: AggregationSums) -> AggregationSums:
        return AggregationSums(
            self.token_sum + other.token_sum,
            self.tokens + other.tokens,
            self.seq_mean_sum + other.seq_mean_sum,
            self.sequences + other.sequences,
        )

    def aggregates(self) -> Aggregates:
        return Aggregates(
            token_mean=self.token_sum / self.tokens if self.tokens else math.nan,
            seq_mean_token_mean=self.seq_mean_sum / self.sequences if self.sequences else math.nan,
        )


def _aggregation_sums(token_sum: Tensor, row_sums: Tensor, lengths: Tensor) -> AggregationSums:
    """From ``token_sum`` (0-dim), ``row_sums`` and ``lengths`` ([B]), in one read back
    to the host (a GPU waits for each; the counts are exact in float64 below 2^53)."""
    token, tokens, seq_mean, sequences = torch.stack(
        [
            token_sum.double(),
            lengths.sum().double(),
            _sequence_mean_sum(row_sums, lengths),
            (lengths > 0).sum().double(),
        ]
    ).tolist()
    return AggregationSums(
        token_sum=token, tokens=int(tokens), seq_mean_sum=seq_mean, sequences=int(sequences)
    )


def _sequence_mean_sum(row_sums: Tensor, lengths: Tensor) -> Tensor:
    """0-dim float64 sum of ``row_sums / lengths`` ([B] each) over the rows with tokens.

    The empty rows add 0 where a boolean index would leave them out: its result's size
    is a count, which a GPU makes the host wait for. The same terms, so the same sum up
    to the order of its additions (identical where no row is empty)."""
    present = lengths > 0
    return torch.where(present, row_sums.double() / lengths.clamp_min(1), 0.0).sum()


def aggregation_sums(values: Tensor, mask: Tensor) -> AggregationSums:
    """:class:`AggregationSums` of a per-token quantity.

    Args:
        values: [B, T] float, e.g. the per-token objective of
            :func:`ppo_objective_terms`; values at masked positions are ignored.
        mask: [B, T] bool, valid tokens.

    >>> values = torch.tensor([[1.0, 3.0, 99.0], [4.0, 99.0, 99.0]])
    >>> mask = torch.tensor([[True, True, False], [True, False, False]])
    >>> aggregation_sums(values, mask).aggregates()
    Aggregates(token_mean=2.6666666666666665, seq_mean_token_mean=3.0)
    """
    filled = torch.where(mask, values.double(), 0.0)  # float64 sums whatever the input
    return _aggregation_sums(filled.sum(), filled.sum(dim=1), mask.sum(dim=1))


def row_aggregation_sums(row_sums: Tensor, lengths: Tensor) -> AggregationSums:
    """:class:`AggregationSums` from per-sequence sums, e.g. those of :func:`ppo_row_sums`.

    Args:
        row_sums: [B] float, ``sum_t x_it`` over each sequence's valid tokens.
        lengths: [B] int, valid tokens per sequence (rows of 0 are left out of the
            sequence mean).
    """
    return _aggregation_sums(row_sums.sum(), row_sums, lengths)


def ppo_aggregation_terms(
    clipped: Tensor, clipped_sums: Tensor, plain_sums: Tensor, lengths: Tensor
) -> Tensor:
    """[7] float64 on the rows' device, :func:`ppo_aggregation_of`'s numbers: the clipped
    tokens, the valid tokens, the rows with tokens, then the token sum and the sum of
    the rows' means of the clipped terms and of the plain terms, from the rows of
    :func:`ppo_row_sums` (``clipped`` [B] int, ``clipped_sums`` and ``plain_sums`` [B]
    float64) and ``lengths`` [B]. Nothing waits for the GPU here: a section reads them
    with the chunk's other numbers. On a GPU one Triton program
    (``_triton_kernels.aggregation_rows``) sums them, in another order."""
    from ratioscope.functional import _triton_kernels

    if _aggregation_kernel(clipped, clipped_sums, plain_sums, lengths):
        return _triton_kernels.aggregation_rows(clipped, clipped_sums, plain_sums, lengths)
    return torch.stack(
        [
            clipped.sum().double(),
            lengths.sum().double(),
            (lengths > 0).sum().double(),
            clipped_sums.sum().double(),
            _sequence_mean_sum(clipped_sums, lengths),
            plain_sums.sum().double(),
            _sequence_mean_sum(plain_sums, lengths),
        ]
    )


def _aggregation_kernel(clipped: Tensor, first: Tensor, second: Tensor, lengths: Tensor) -> bool:
    """Whether :func:`ppo_aggregation_terms` takes the Triton program: on a GPU, float64
    row sums and int64 counts of one length."""
    from ratioscope.functional import _triton_kernels

    return (
        _triton_kernels.on_gpu(first, second, dtypes=(torch.float64,))
        and clipped.dtype == lengths.dtype == torch.int64
        and clipped.shape == first.shape == second.shape == lengths.shape
        and _triton_kernels.can_take(clipped, lengths)
    )


def ppo_aggregation_of(
    terms: Sequence[float],
) -> tuple[int, int, AggregationSums, AggregationSums]:
    """(clipped tokens, valid tokens, the clipped terms' :class:`AggregationSums`, the
    plain terms') from the 7 numbers of :func:`ppo_aggregation_terms`, read back."""
    (n_clipped, tokens, sequences, clipped_token, clipped_seq, plain_token, plain_seq) = terms
    return (
        int(n_clipped),
        int(tokens),
        AggregationSums(clipped_token, int(tokens), clipped_seq, int(sequences)),
        AggregationSums(plain_token, int(tokens), plain_seq, int(sequences)),
    )


def token_mean(values: Tensor, mask: Tensor) -> float:
    """Mean over all valid tokens ("token-mean" aggregation, DAPO); NaN without any."""
    return aggregation_sums(values, mask).aggregates().token_mean


def seq_mean_token_mean(values: Tensor, mask: Tensor) -> float:
    """Mean over sequences of each sequence's token mean (GRPO's aggregation).

    Rows with no valid token are left out; NaN when no row has one.
    """
    return aggregation_sums(values, mask).aggregates().seq_mean_token_mean


@dataclass(frozen=True)
class AdvantageSums:
    """[B] float64 sums of the positive and of the negative advantages of each row's
    valid tokens, and [B] int64 how many there are."""

    positive: Tensor
    negative: Tensor
    n_positive: Tensor
    n_negative: Tensor


def advantage_sums(advantages: Tensor, mask: Tensor) -> AdvantageSums:
    """:class:`AdvantageSums` of [B, T] advantages over the valid tokens of ``mask``:
    one compiled pass per row where :func:`ratioscope.functional._kernels.can_take` the
    tensors (CPU, float32/float64; each row summed in order), one Triton kernel on a GPU
    (``_triton_kernels.advantage_rows``), else :func:`advantage_sums_torch`. The counts
    are identical, the sums equal up to the order of their float64 additions."""
    from ratioscope.functional import _kernels, _triton_kernels

    if _triton_kernels.on_gpu(advantages, mask=mask):
        sums, counts = _triton_kernels.advantage_rows(advantages, mask)
        return AdvantageSums(sums[0], sums[1], counts[0], counts[1])
    if not _kernels.can_take(advantages, mask=mask):
        return advantage_sums_torch(advantages, mask)
    positive, negative, n_positive, n_negative = _kernels.advantage_row_sums(
        advantages.detach().contiguous().numpy(), mask.contiguous().numpy()
    )
    return AdvantageSums(
        positive=torch.from_numpy(positive),
        negative=torch.from_numpy(negative),
        n_positive=torch.from_numpy(n_positive),
        n_negative=torch.from_numpy(n_negative),
    )


def advantage_sums_torch(advantages: Tensor, mask: Tensor) -> AdvantageSums:
    """:func:`advantage_sums` by tensor operations (any device; the reference)."""
    adv = torch.where(mask, advantages.double(), 0.0)
    above, below = adv > 0, adv < 0
    return AdvantageSums(
        positive=adv.clamp(min=0.0).sum(dim=1),
        negative=adv.clamp(max=0.0).sum(dim=1),
        n_positive=above.view(torch.uint8).sum(dim=1),
        n_negative=below.view(torch.uint8).sum(dim=1),
    )


def constant_ppo_row_sums(
    values: Tensor, sums: AdvantageSums, clip: tuple[float, float]
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`ppo_row_sums` of a log-ratio that is ``values[i]`` on every token of row i
    (GSPO's, TEPO's sequence ratio): [B] in, the same three [B] results out.

    With r the row's ratio and c(r) its clipped value, a token's clipped term is
    min(r, c(r)) A for A > 0 and max(r, c(r)) A for A < 0, so the row sums need only the
    sums and counts of its positive and negative advantages. Counts are exact; the sums
    equal the per-token ones up to rounding (float64 throughout).
    """
    eps_low, eps_high = clip
    ratio = torch.exp(values.double())
    bounded = ratio.clamp(1 - eps_low, 1 + eps_high)
    positive, negative = sums.positive, sums.negative
    clipped_terms = torch.minimum(ratio, bounded) * positive
    clipped_terms += torch.maximum(ratio, bounded) * negative
    plain = ratio * (positive + negative)
    clipped = torch.where(ratio > 1 + eps_high, sums.n_positive, 0)
    clipped += torch.where(ratio < 1 - eps_low, sums.n_negative, 0)
    return clipped, clipped_terms, plain


def ppo_row_sums(
    log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip: tuple[float, float]
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sequence sums behind the clip fraction and both surrogates, in few passes.

    Equal to summing :func:`ppo_clip_mask`, ``ppo_objective_terms(..., clip)`` and
    ``ppo_objective_terms(..., None)`` over each row: ratios, terms and sums are float64
    whatever the input's dtype. A loss near zero is a sum of terms r A that cancel
    (advantages are centred per group), so float32 terms, each off by ~1e-7 of itself,
    were 0.2 % off the Kalman row's seq-mean loss on the sample run.

    Returns:
        ``(clipped [B] int64, clipped_terms [B] float64, plain_terms [B] float64)``; the
        term sums aggregate with :func:`row_aggregation_sums`.
    """
    eps_low, eps_high = clip
    adv = torch.where(mask, advantages.double(), 0.0)
    ratio = torch.exp(log_ratio.double())
    plain = ratio * adv
    clipped_terms = torch.minimum(plain, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    return clipped.sum(dim=1), clipped_terms.sum(dim=1), plain.sum(dim=1)
