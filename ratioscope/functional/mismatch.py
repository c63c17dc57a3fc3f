"""Off-policy mismatch of importance ratios (docs/framework-metrics.md), as mergeable partial sums.

With samples drawn from the behaviour policy q and r = p/q = exp(z), the classic
estimators of KL(q || p) are k1 = -z, k2 = z^2/2 and k3 = (r - 1) - z (k3 is unbiased
and non-negative). The chi-square divergences chi2_token = E[r^2] - 1 (per token) and
chi2_seq = E[(prod_t r_t)^2] - 1 (per sequence) and the normalised effective sample
size ESS = (sum w)^2 / (N sum w^2) describe how far importance weights are from 1.
Everything is computed before any truncation or clipping.

Sums of exponentials are kept as log-sum-exp values, so sequences of thousands of
tokens (prod r = exp(sum z)) neither overflow nor lose precision, and partial results
of chunks and files merge exactly (sums add; log-sums combine with logaddexp).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from ratioscope.errors import ParameterError
from ratioscope.functional import _kernels

NEG_INF = -math.inf


@dataclass
class MismatchPartials:
    """Sufficient statistics of one or more chunks; ``merge`` combines them exactly.

    ``log_sum_*`` fields are natural logs of sums of positive terms (-inf when empty),
    used when the direct sums overflow; ``sum_expm1_*`` are sums of exp(x) - 1, exact
    to float64 precision however close to on-policy the ratios are (r - 1 ~ 1e-9 keeps
    its digits, where a log-sum-exp minus log n would cancel them away).
    """

    tokens: int = 0
    sequences: int = 0
    sum_k1: float = 0.0
    sum_k2: float = 0.0
    sum_k3: float = 0.0
    outside: int = 0
    sum_expm1_z: float = 0.0
    sum_expm1_2z: float = 0.0
    sum_expm1_s: float = 0.0
    sum_expm1_2s: float = 0.0
    log_sum_r: float = NEG_INF
    log_sum_r2: float = NEG_INF
    log_sum_seq_w: float = NEG_INF
    log_sum_seq_w2: float = NEG_INF
    # the quantities frameworks log under their own names (docs/framework-metrics.md)
    sum_abs_z: float = 0.0
    max_abs_z: float = 0.0
    sum_seq_mean_abs_z: float = 0.0
    sum_expm1_neg_seq_mean_z: float = 0.0

    def merge(self, other: MismatchPartials) -> None:
        for field in fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if field.name.startswith("log_sum"):
                setattr(self, field.name, _logaddexp(mine, theirs))
            elif field.name.startswith("max_"):
                setattr(self, field.name, max(mine, theirs))
            else:
                setattr(self, field.name, mine + theirs)


@dataclass(frozen=True)
class MismatchStats:
    """Mismatch statistics of one pair of policies.

    Attributes:
        tokens, sequences: valid tokens and non-empty sequences counted.
        k1, k2, k3: token means of -z, z^2/2 and exp(z) - 1 - z.
        chi2_token: E_token[r^2] - 1.
        chi2_seq: E_seq[(prod r)^2] - 1 (inf when it overflows float64).
        log_chi2_seq_plus_1: log E_seq[(prod r)^2], finite even when chi2_seq is not.
        ess: (sum r)^2 / (N sum r^2) over tokens, in (0, 1].
        ess_seq: the same over sequence weights prod r.
        frac_outside: fraction of tokens with r outside [1/c, c].
        is_threshold: c.
        abs_diff: token mean of |z| (TRL ``sampling/sampling_logp_difference/mean``).
        abs_diff_max: max |z| (TRL ``sampling/sampling_logp_difference/max``).
        abs_diff_seq_mean: mean over sequences of the token mean of |z| (slime
            ``train_rollout_logprob_abs_diff``).
        ppl_ratio: mean over sequences of PPL(numerator) / PPL(denominator) =
            exp(-mean_t z) (verl ``rollout_corr/ppl_ratio``).
    """

    tokens: int
    sequences: int
    k1: float
    k2: float
    k3: float
    chi2_token: float
    chi2_seq: float
    log_chi2_seq_plus_1: float
    ess: float
    ess_seq: float
    frac_outside: float
    is_threshold: float
    abs_diff: float = math.nan
    abs_diff_max: float = math.nan
    abs_diff_seq_mean: float = math.nan
    ppl_ratio: float = math.nan


def _logaddexp(a: float, b: float) -> float:
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    high = max(a, b)
    return high + math.log1p(math.exp(min(a, b) - high))


def _logsumexp(values: Tensor) -> float:
    if values.numel() == 0:
        return NEG_INF
    return float(torch.logsumexp(values, dim=0))


def mismatch_partials(
    z: Tensor, mask: Tensor, is_threshold: float = 2.0, backend: str = "auto"
) -> MismatchPartials:
    """Partial sums of the mismatch statistics of one chunk.

    Args:
        z: [B, T] float, log-ratio log p - log q (any value at masked positions).
        mask: [B, T] bool, valid tokens.
        is_threshold: c > 1; tokens with r outside [1/c, c] are counted.
        backend: ``"compiled"`` two passes of a numba loop over the valid tokens (CPU
            float32/float64), ``"triton"`` the same two passes as Triton kernels (a GPU,
            or Triton's interpreter), ``"torch"`` tensor operations (any device; the
            reference), ``"auto"`` (default) the Triton kernels on a GPU that Triton
            compiles for, else the first of the others that can run. They agree to
            rounding (sums taken in another order).

    Returns:
        :class:`MismatchPartials`; pass merged partials to :func:`mismatch_statistics`.
    """
    if is_threshold <= 1:
        raise ParameterError("is_threshold", f"must be > 1, got {is_threshold}")
    if backend not in ("auto", "compiled", "triton", "torch"):
        raise ParameterError(
            "backend", f"must be 'auto', 'compiled', 'triton' or 'torch', got '{backend}'"
        )
    compiled = _kernels.can_take(z, mask=mask)
    if backend == "compiled" and not compiled:
        raise ParameterError("backend", "'compiled' needs numba and a CPU float tensor")
    from ratioscope.functional import _triton_kernels

    if backend == "triton" or (backend == "auto" and _triton_kernels.on_gpu(z, mask=mask)):
        return _partials_triton(z, mask, math.log(is_threshold))
    if compiled and backend != "torch":
        return _partials_compiled(z, mask, math.log(is_threshold))
    return _partials_torch(z, mask, math.log(is_threshold))


def _partials_triton(z: Tensor, mask: Tensor, log_c: float) -> MismatchPartials:
    """:func:`_partials_torch` from the two passes of the Triton kernels, read back in one
    copy; the same sums as :func:`_partials_compiled`'s, added in another order."""
    from ratioscope.functional import _triton_kernels

    summary = _triton_kernels.mismatch(z, mask, log_c)
    rows, top, sums = _triton_kernels.split_mismatch(summary.cpu(), mask.shape[0])
    return _from_sums(rows, top, sums)


def _partials_torch(z: Tensor, mask: Tensor, log_c: float) -> MismatchPartials:
    valid = z.double()[mask]
    present = mask.any(dim=1)
    sequence_sums = torch.where(mask, z.double(), 0.0).sum(dim=1)[present]
    lengths = mask.sum(dim=1)[present].double()
    seq_mean_abs = torch.where(mask, z.double().abs(), 0.0).sum(dim=1)[present] / lengths
    return MismatchPartials(
        tokens=int(valid.numel()),
        sequences=int(sequence_sums.numel()),
        sum_k1=float((-valid).sum()),
        sum_k2=float((0.5 * valid.square()).sum()),
        # expm1(z) - z keeps its precision for the tiny z of nearly on-policy tokens
        sum_k3=float((torch.expm1(valid) - valid).sum()),
        outside=int((valid.abs() > log_c).sum()),
        sum_expm1_z=float(torch.expm1(valid).sum()),
        sum_expm1_2z=float(torch.expm1(2 * valid).sum()),
        log_sum_r=_logsumexp(valid),
        log_sum_r2=_logsumexp(2 * valid),
        sum_abs_z=float(valid.abs().sum()),
        max_abs_z=float(valid.abs().max()) if valid.numel() else 0.0,
        **_sequence_terms(sequence_sums, lengths, seq_mean_abs),
    )


def _partials_compiled(z: Tensor, mask: Tensor, log_c: float) -> MismatchPartials:
    """:func:`_partials_torch` from two compiled passes
    (:func:`ratioscope.functional._ratio_kernels.mismatch_rows` and ``mismatch_terms``)
    over parts of the rows on the threads torch may use: the row sums and the largest z,
    then the token sums, added part after part (the same parts on any number of
    threads)."""
    import numpy as np

    from ratioscope.functional import _ratio_kernels

    values, valid = z.detach().numpy(), mask.numpy()
    rows = np.zeros((mask.shape[0], 3), dtype=np.float64)
    tops = _kernels.map_any_parts(  # each row's sums, and the largest z: any cut
        lambda start, stop: _ratio_kernels.mismatch_rows(
            values[start:stop], valid[start:stop], rows[start:stop]
        ),
        mask.shape[0],
        mask.numel(),
    )
    top = max(tops)

    def terms(start: int, stop: int) -> np.ndarray:
        part = np.zeros(10, dtype=np.float64)
        _ratio_kernels.mismatch_terms(values[start:stop], valid[start:stop], log_c, top, part)
        return part

    sums = np.zeros(10, dtype=np.float64)
    for part in _kernels.map_row_parts(terms, mask.shape[0]):  # added in order
        sums[:9] += part[:9]
        sums[9] = max(sums[9], part[9])
    return _from_sums(torch.from_numpy(rows), top, sums.tolist())


def _from_sums(per_row: Tensor, top: float, sums: list[float]) -> MismatchPartials:
    """:class:`MismatchPartials` from the two passes' results: ``per_row`` [B, 3] each
    row's valid tokens, sum z and sum |z| (float64, on the CPU), ``top`` the largest
    valid z, ``sums`` the ten token sums (``_ratio_kernels.mismatch_terms``' order)."""
    k1, k2, k3, outside, first, second, lse, lse2, size, largest = sums
    n = float(per_row[:, 0].sum())
    present = per_row[:, 0] > 0
    lengths = per_row[present, 0]
    return MismatchPartials(
        tokens=int(n),
        sequences=int(present.sum()),
        sum_k1=k1,
        sum_k2=k2,
        sum_k3=k3,
        outside=int(outside),
        sum_expm1_z=first,
        sum_expm1_2z=second,
        log_sum_r=top + math.log(lse) if n else NEG_INF,
        log_sum_r2=2 * top + math.log(lse2) if n else NEG_INF,
        sum_abs_z=size,
        max_abs_z=largest,
        **_sequence_terms(per_row[present, 1], lengths, per_row[present, 2] / lengths),
    )


def _sequence_terms(sums: Tensor, lengths: Tensor, mean_abs: Tensor) -> dict[str, float]:
    """The partials of the sequence weights exp(sum z) from [S] row sums of z, lengths
    and mean |z| of the S rows with a valid token."""
    return {
        "sum_expm1_s": float(torch.expm1(sums).sum()),
        "sum_expm1_2s": float(torch.expm1(2 * sums).sum()),
        "log_sum_seq_w": _logsumexp(sums),
        "log_sum_seq_w2": _logsumexp(2 * sums),
        "sum_seq_mean_abs_z": float(mean_abs.sum()),
        "sum_expm1_neg_seq_mean_z": float(torch.expm1(-sums / lengths).sum()),
    }


def mismatch_statistics(partials: MismatchPartials, is_threshold: float = 2.0) -> MismatchStats:
    """Final statistics from (merged) partial sums; NaN where nothing was counted.

    >>> z = torch.tensor([[0.0, 0.0], [math.log(2.0), 0.0]])
    >>> s = mismatch_statistics(mismatch_partials(z, torch.ones(2, 2, dtype=torch.bool)))
    >>> round(s.chi2_token, 6)  # E[r^2] - 1 = (1 + 1 + 4 + 1) / 4 - 1
    0.75
    """
    n, b = partials.tokens, partials.sequences
    if n == 0:
        nan = math.nan
        return MismatchStats(0, 0, nan, nan, nan, nan, nan, nan, nan, nan, nan, is_threshold)
    p = partials
    chi2_token, log_second = _moment(p.sum_expm1_2z, p.log_sum_r2, n)
    _, log_first = _moment(p.sum_expm1_z, p.log_sum_r, n)
    ess = math.exp(2 * log_first - log_second)
    chi2_seq, log_second_seq = _moment(p.sum_expm1_2s, p.log_sum_seq_w2, b)
    _, log_first_seq = _moment(p.sum_expm1_s, p.log_sum_seq_w, b)
    ess_seq = math.exp(2 * log_first_seq - log_second_seq)
    return MismatchStats(
        tokens=n,
        sequences=b,
        k1=p.sum_k1 / n,
        k2=p.sum_k2 / n,
        k3=p.sum_k3 / n,
        chi2_token=chi2_token,
        chi2_seq=chi2_seq,
        log_chi2_seq_plus_1=log_second_seq,
        ess=ess,
        ess_seq=ess_seq,
        frac_outside=p.outside / n,
        is_threshold=is_threshold,
        abs_diff=p.sum_abs_z / n,
        abs_diff_max=p.max_abs_z,
        abs_diff_seq_mean=p.sum_seq_mean_abs_z / b,
        ppl_ratio=1.0 + p.sum_expm1_neg_seq_mean_z / b,
    )


def _moment(sum_expm1: float, log_sum: float, count: int) -> tuple[float, float]:
    """(E[w] - 1, log E[w]) from the two forms kept for it: 1 + mean(expm1) keeps its
    digits near E[w] = 1; the log-sum-exp keeps them where weights overflow or where
    they are all tiny (expm1 then rounds to -1 and the mean loses everything)."""
    direct = sum_expm1 / count
    if math.isfinite(direct) and direct > -0.5:
        return direct, math.log1p(direct)
    log_mean = log_sum - math.log(count)
    return _expm1_safe(log_mean), log_mean


def _expm1_safe(x: float) -> float:
    return math.inf if x > 709.0 else math.expm1(x)
