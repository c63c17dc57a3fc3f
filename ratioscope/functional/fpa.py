"""FPA future policy: logit extrapolation, sequence weights, early-brake diagnostics
(docs/metrics-objectives.md).

Paper: "Future Policy Approximation for Offline Reinforcement Learning Improves
Mathematical Reasoning" (FPA). The future policy is Eq. (4),
``pi_hat = softmax((1 + lam) h_theta - lam h_ref)``; equivalently (Eq. 5, 7)
``log pi_hat = (1 + lam) log pi_theta - lam log pi_ref - log Z`` with
``Z = sum_v pi_theta(v)^(1+lam) pi_ref(v)^(-lam)`` (the paper writes ``+ Z'``,
``Z' = -log Z``). ``log Z = lam * D_{1+lam}(pi_theta || pi_ref) >= 0`` (a Renyi
divergence), so the unnormalised token approximation over-states ``log pi_hat`` by
exactly ``log Z``. Gradients are weighted by the length-normalised sequence probability
``pi(y|x)^(1/|y|)`` (Eq. 1-3).

Exact values need the logits; they are read in chunks of tokens (bounded memory whatever
B*T*V, half-precision or memory-mapped input upcast per chunk to float32).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import torch
from torch import Tensor

from ratioscope.errors import ParameterError, ShapeMismatchError
from ratioscope.functional import _kernels, _triton_kernels
from ratioscope.functional._paging import MappedPages
from ratioscope.functional.surrogate import sequence_means

#: The paper's "reliable rule of thumb" (section 3.3; it used 2 for Qwen3-4B-Base).
DEFAULT_LAMBDA = 1.0
#: Extrapolation strengths of the paper's ablation (Fig. 5), lambda = 0 is Off-RL.
LAMBDA_SWEEP: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0)
#: Fig. 3 (right): how often the sequence weight falls below this value.
WEIGHT_THRESHOLD = 0.2
#: Float32 elements of one [chunk, V] working buffer when chunk_tokens is not given.
_CHUNK_ELEMENTS = 1 << 22

T = TypeVar("T")


def _as_tensor(array: Tensor | np.ndarray, name: str) -> Tensor:
    if isinstance(array, Tensor):
        return array
    if isinstance(array, np.ndarray):
        with warnings.catch_warnings():
            # read-only memory maps are fine: chunks are copied before anything writes
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.from_numpy(array)
    raise ParameterError(name, f"must be a torch tensor or a numpy array, got {type(array)}")


def _check_lambdas(lams: Sequence[float], name: str = "lams") -> tuple[float, ...]:
    lams = tuple(float(lam) for lam in lams)
    if not lams or any(not math.isfinite(lam) or lam < 0 for lam in lams):
        shown = lams[0] if name == "lam" else list(lams)
        raise ParameterError(name, f"must be finite and >= 0, got {shown}")
    return lams


def _chunk_rows(chunk_tokens: int | None, vocab: int) -> int:
    if chunk_tokens is None:
        return max(1, _CHUNK_ELEMENTS // max(vocab, 1))
    if chunk_tokens < 1:
        raise ParameterError("chunk_tokens", f"must be a positive integer, got {chunk_tokens}")
    return int(chunk_tokens)


class _Rows:
    """Row-chunk reader over [..., V] logits seen as [N, V].

    For a read-only numpy memory map (``np.load(..., mmap_mode="r")``), the pages of rows
    already read are handed back to the kernel (:class:`~ratioscope.functional._paging.MappedPages`;
    the data stays in the page cache), so the process's resident memory stays bounded by
    the chunk size whatever the file size, instead of growing with every page touched.
    Tensors are left to whoever mapped them: ``analyze`` releases a memory-mapped dump's
    pages once per slice, and finding a tensor's mapping costs a read of
    ``/proc/self/smaps`` that a call per slice should not repeat.
    """

    def __init__(self, array: Tensor | np.ndarray, name: str) -> None:
        tensor = _as_tensor(array, name)
        self.shape = tuple(tensor.shape)
        self.vocab = int(tensor.shape[-1]) if tensor.ndim else 0
        self.flat = tensor.reshape(-1, max(self.vocab, 1))
        pages = MappedPages(array) if isinstance(array, np.ndarray) else None
        self._pages = pages if pages is not None and pages.active else None

    def read_into(self, buffer: Tensor, start: int, stop: int) -> Tensor:
        """Copy rows [start, stop) into ``buffer[: stop - start]`` (upcast, moved); return it."""
        chunk = buffer[: stop - start]
        rows = self.flat[start:stop]
        chunk.copy_(rows)
        if self._pages is not None:
            self._pages.release(rows)
        return chunk


def _logit_rows(
    logits: Tensor | np.ndarray, token_ids: Tensor, name: str
) -> tuple[_Rows, int, tuple[int, ...]]:
    rows = _Rows(logits, name)
    if len(rows.shape) != token_ids.ndim + 1 or rows.shape[:-1] != tuple(token_ids.shape):
        raise ShapeMismatchError(
            None, name, rows.shape, "token_ids", token_ids.shape, "token_ids shape + [V]"
        )
    return rows, rows.vocab, tuple(token_ids.shape)


def _prepare_ids(token_ids: Tensor, mask: Tensor | None, vocab: int) -> tuple[Tensor, Tensor]:
    """Flattened ids with masked positions set to 0, and the flattened mask."""
    ids = _as_tensor(token_ids, "token_ids").reshape(-1).to(torch.long)
    if mask is None:
        valid = torch.ones_like(ids, dtype=torch.bool)
    else:
        if tuple(mask.shape) != tuple(token_ids.shape):
            raise ShapeMismatchError(None, "mask", mask.shape, "token_ids", token_ids.shape)
        valid = mask.reshape(-1).to(device=ids.device, dtype=torch.bool)
    bad = valid & ((ids < 0) | (ids >= vocab))
    if bool(bad.any()):
        first = int(torch.nonzero(bad)[0])
        raise ParameterError(
            "token_ids",
            f"has {int(bad.sum())} id(s) outside the vocabulary [0, {vocab}) on valid "
            f"tokens, the first at flat position {first} (value {int(ids[first])})",
        )
    return torch.where(valid, ids, 0), valid


def _resolve_device(device: str | torch.device | None, logits: Tensor) -> torch.device:
    return logits.device if device is None else torch.device(device)


def _buffers(count: int, rows: int, vocab: int, device: torch.device) -> list[Tensor]:
    """Working [rows, V] float32 buffers, allocated once and reused for every chunk, so
    memory stays flat (no allocator churn) however many chunks there are."""
    return [torch.empty((rows, vocab), dtype=torch.float32, device=device) for _ in range(count)]


def _logsumexp_(values: Tensor) -> Tensor:
    """Row-wise log-sum-exp that uses ``values`` as scratch space (it is overwritten)."""
    top = values.amax(dim=1, keepdim=True)
    top = torch.where(torch.isfinite(top), top, 0.0)
    return top.squeeze(1) + torch.log(values.sub_(top).exp_().sum(dim=1))


def _pick_log_softmax_(values: Tensor, index: Tensor) -> Tensor:
    """``log_softmax(values)[index]`` per row; ``values`` is overwritten."""
    picked = values.gather(1, index.unsqueeze(1)).squeeze(1)
    return picked - _logsumexp_(values)


def future_log_probs_sweep(
    logits: Tensor | np.ndarray,
    ref_logits: Tensor | np.ndarray,
    token_ids: Tensor,
    lams: Sequence[float] = LAMBDA_SWEEP,
    mask: Tensor | None = None,
    chunk_tokens: int | None = None,
    device: str | torch.device | None = None,
) -> Tensor:
    """Exact ``log pi_hat_lam(y_t)`` for several lambdas, reading the logits once.

    ``log_softmax((1 + lam) h_theta - lam h_ref)[y_t]``, FPA Eq. (4). Logits are read
    ``chunk_tokens`` tokens at a time, moved to ``device`` and upcast to float32, so peak
    memory is a few ``[chunk_tokens, V]`` float32 buffers whatever B*T.

    Args:
        logits: [B, T, V] float (any float dtype, CPU/CUDA tensor or numpy memmap),
            next-token logits of pi_theta at each response position.
        ref_logits: [B, T, V], the same for pi_ref.
        token_ids: [B, T] int, the sampled tokens y_t.
        lams: extrapolation strengths lambda >= 0.
        mask: [B, T] bool valid tokens, or None; masked positions return 0 and their ids
            are not checked.
        chunk_tokens: tokens per chunk; default keeps a buffer near 4M elements (16 MB).
        device: where to compute; default the device of ``logits``.

    Returns:
        [L, B, T] float32 on ``device``, L = len(lams).
    """
    lams = _check_lambdas(lams)
    token_ids = _as_tensor(token_ids, "token_ids")
    source, vocab, shape = _logit_rows(logits, token_ids, "logits")
    ref_source, _, _ = _logit_rows(ref_logits, token_ids, "ref_logits")
    if ref_source.vocab != vocab:
        raise ShapeMismatchError(None, "ref_logits", ref_logits.shape, "logits", logits.shape)
    ids, valid = _prepare_ids(token_ids, mask, vocab)
    target = _resolve_device(device, source.flat)
    ids, valid = ids.to(target), valid.to(target)
    rows = min(_chunk_rows(chunk_tokens, vocab), max(ids.numel(), 1))
    out = torch.zeros((len(lams), ids.numel()), dtype=torch.float32, device=target)
    current_buffer, direction_buffer, work_buffer = _buffers(3, rows, vocab, target)
    for start in range(0, ids.numel(), rows):
        stop = min(start + rows, ids.numel())
        current = source.read_into(current_buffer, start, stop)
        # (1 + lam) h - lam h_ref = h + lam (h - h_ref): one buffer for the direction
        direction = ref_source.read_into(direction_buffer, start, stop).neg_().add_(current)
        # a token impossible under pi_theta stays impossible (h = h_ref = -inf gives NaN)
        impossible = torch.isneginf(current) if bool(torch.isinf(current).any()) else None
        work = work_buffer[: stop - start]
        for j, lam in enumerate(lams):
            if lam == 0.0:
                work.copy_(current)
            else:
                torch.add(current, direction, alpha=lam, out=work)
            if impossible is not None:
                work.masked_fill_(impossible, -math.inf)
            out[j, start:stop] = _pick_log_softmax_(work, ids[start:stop])
    out = torch.where(valid, out, 0.0)
    return out.reshape((len(lams), *shape))


def future_log_probs_exact(
    logits: Tensor | np.ndarray,
    ref_logits: Tensor | np.ndarray,
    token_ids: Tensor,
    lam: float = DEFAULT_LAMBDA,
    mask: Tensor | None = None,
    chunk_tokens: int | None = None,
    device: str | torch.device | None = None,
) -> Tensor:
    """Exact future-policy log-probs ``log_softmax((1+lam) h - lam h_ref)[y_t]``, FPA Eq. (4).

    See :func:`future_log_probs_sweep` for the arguments.

    Returns:
        [B, T] float32 on ``device`` (0 at masked positions).

    >>> h = torch.tensor([[[2.0, 0.0]]]); h_ref = torch.tensor([[[1.0, 0.0]]])
    >>> y = torch.tensor([[0]])
    >>> round(float(future_log_probs_exact(h, h_ref, y, lam=1.0)), 6)  # softmax([3, 0])[0]
    -0.048587
    """
    return future_log_probs_sweep(
        logits, ref_logits, token_ids, (lam,), mask, chunk_tokens, device
    )[0]


def policy_log_probs_from_logits(
    logits: Tensor | np.ndarray,
    token_ids: Tensor,
    mask: Tensor | None = None,
    chunk_tokens: int | None = None,
    device: str | torch.device | None = None,
) -> Tensor:
    """``log_softmax(h)[y_t]``, chunked as :func:`future_log_probs_sweep`.

    Returns:
        [B, T] float32 on ``device`` (0 at masked positions).

    >>> h = torch.log(torch.tensor([[[0.25, 0.75]]]))
    >>> policy_log_probs_from_logits(h, torch.tensor([[1]])).exp().item()
    0.75
    """
    token_ids = _as_tensor(token_ids, "token_ids")
    source, vocab, shape = _logit_rows(logits, token_ids, "logits")
    ids, valid = _prepare_ids(token_ids, mask, vocab)
    target = _resolve_device(device, source.flat)
    ids, valid = ids.to(target), valid.to(target)
    rows = min(_chunk_rows(chunk_tokens, vocab), max(ids.numel(), 1))
    out = torch.zeros(ids.numel(), dtype=torch.float32, device=target)
    (buffer,) = _buffers(1, rows, vocab, target)
    for start in range(0, ids.numel(), rows):
        stop = min(start + rows, ids.numel())
        current = source.read_into(buffer, start, stop)
        out[start:stop] = _pick_log_softmax_(current, ids[start:stop])
    return torch.where(valid, out, 0.0).reshape(shape)


def future_log_normaliser(
    logits: Tensor | np.ndarray,
    ref_logits: Tensor | np.ndarray,
    lam: float,
    chunk_tokens: int | None = None,
    device: str | torch.device | None = None,
) -> Tensor:
    """``log Z = log sum_v pi_theta(v)^(1+lam) pi_ref(v)^(-lam)`` per position (FPA Eq. 5, 7).

    With it, ``log pi_hat(y) = (1 + lam) log pi_theta(y) - lam log pi_ref(y) - log Z``
    exactly; ``log Z = lam * D_{1+lam}(pi_theta || pi_ref) >= 0``.

    Args:
        logits, ref_logits: [..., V] float logits of pi_theta and pi_ref.

    Returns:
        [...] float32 on ``device``.

    >>> h = torch.log(torch.tensor([[0.5, 0.5]])); h_ref = torch.log(torch.tensor([[0.5, 0.5]]))
    >>> future_log_normaliser(h, h_ref, 2.0).abs().item() < 1e-6  # same policies: Z = 1
    True
    """
    (lam,) = _check_lambdas((lam,), "lam")
    source, ref_source = _Rows(logits, "logits"), _Rows(ref_logits, "ref_logits")
    if source.shape != ref_source.shape:
        raise ShapeMismatchError(None, "ref_logits", ref_source.shape, "logits", source.shape)
    target = _resolve_device(device, source.flat)
    n = source.flat.shape[0]
    rows = min(_chunk_rows(chunk_tokens, source.vocab), max(n, 1))
    out = torch.zeros(n, dtype=torch.float32, device=target)
    current_buffer, reference_buffer, work_buffer = _buffers(3, rows, source.vocab, target)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        current = source.read_into(current_buffer, start, stop)
        reference = ref_source.read_into(reference_buffer, start, stop)
        work = work_buffer[: stop - start]
        log_norm_current = _logsumexp_(work.copy_(current))
        log_norm_reference = _logsumexp_(work.copy_(reference))
        # log Z = LSE((1+lam) h - lam h_ref) - (1+lam) LSE(h) + lam LSE(h_ref)
        torch.mul(current, 1.0 + lam, out=work)
        if lam != 0.0:
            work.sub_(reference, alpha=lam).masked_fill_(torch.isneginf(current), -math.inf)
        out[start:stop] = (
            _logsumexp_(work) - (1.0 + lam) * log_norm_current + lam * log_norm_reference
        )
    return out.reshape(source.shape[:-1])


def future_log_probs_approx(log_probs: Tensor, ref_log_probs: Tensor, lam: float) -> Tensor:
    """APPROXIMATION ``(1 + lam) log pi_theta(y_t) - lam log pi_ref(y_t)``, unnormalised.

    What can be had from token log-probs alone: FPA Eq. (7) without its normalising
    constant, i.e. the exact value plus ``log Z >= 0`` (see
    :func:`future_log_normaliser`); report it labelled as an approximation.

    Args:
        log_probs, ref_log_probs: [B, T] float.

    Returns:
        [B, T] float, in the promoted dtype of the inputs.

    >>> future_log_probs_approx(torch.tensor([-1.0]), torch.tensor([-0.5]), 2.0).item()
    -2.0
    """
    (lam,) = _check_lambdas((lam,), "lam")
    if log_probs.shape != ref_log_probs.shape:
        raise ShapeMismatchError(
            None, "ref_log_probs", ref_log_probs.shape, "log_probs", log_probs.shape
        )
    return (1.0 + lam) * log_probs - lam * ref_log_probs


def _valid_token_mean(values: Tensor, mask: Tensor) -> Tensor:
    """[B, T] -> [B] mean over each row's valid tokens (NaN for a row without any)."""
    if values.shape != mask.shape:
        raise ShapeMismatchError(None, "values", values.shape, "mask", mask.shape)
    dtype = torch.float64 if values.dtype == torch.float64 else torch.float32
    return sequence_means(values.to(dtype), mask.to(device=values.device, dtype=torch.bool))


def sequence_weights(token_log_probs: Tensor, mask: Tensor) -> Tensor:
    """Length-normalised sequence probability ``pi(y|x)^(1/|y|) = exp(mean_t log pi_t)``.

    FPA Eq. (1)-(3) (the "probability" factor; ``pi_hat`` in Eq. 3). NaN for a sequence
    without valid tokens.

    Args:
        token_log_probs: [B, T] float; mask: [B, T] bool.

    Returns:
        [B] float.

    >>> lp = torch.log(torch.tensor([[0.5, 0.125, 1.0]]))
    >>> round(sequence_weights(lp, torch.tensor([[True, True, False]])).item(), 6)
    0.25
    """
    return torch.exp(_valid_token_mean(token_log_probs, mask))


def future_to_current_ratio(future_log_probs: Tensor, log_probs: Tensor, mask: Tensor) -> Tensor:
    """``pi_hat^(1/|y|) / pi^(1/|y|)`` per sequence, FPA Fig. 2 (right); in log space.

    Args:
        future_log_probs, log_probs: [B, T] float; mask: [B, T] bool.

    Returns:
        [B] float (NaN for a sequence without valid tokens).

    >>> m = torch.ones(1, 2, dtype=torch.bool)
    >>> future_to_current_ratio(torch.tensor([[-2.0, -2.0]]), torch.tensor([[-1.0, -1.0]]),
    ...                         m).log().item()
    -1.0
    """
    if future_log_probs.shape != log_probs.shape:
        raise ShapeMismatchError(
            None, "future_log_probs", future_log_probs.shape, "log_probs", log_probs.shape
        )
    return torch.exp(_valid_token_mean(future_log_probs - log_probs, mask))


@dataclass(frozen=True)
class ApproximateSequenceTerms:
    """FPA's per-sequence quantities under the APPROXIMATION for several lambdas.

    Attributes:
        weights: [L, B] float64 ``exp(mean_t future_lam)`` (:func:`sequence_weights`).
        ratios: [L, B] float64 ``exp(mean_t (future_lam - log pi))``
            (:func:`future_to_current_ratio`).
        log_ratio: [B] float64 ``sum_t (log pi - log pi_ref)`` (:func:`sequence_log_ratio`).
        log_ratio_per_token: [B] float64 its mean over the valid tokens.
    NaN means for rows without a valid token (their sum is 0).
    """

    weights: Tensor
    ratios: Tensor
    log_ratio: Tensor
    log_ratio_per_token: Tensor


def approximate_sequence_terms(
    log_probs: Tensor, ref_log_probs: Tensor, mask: Tensor, lams: Sequence[float]
) -> ApproximateSequenceTerms:
    """:class:`ApproximateSequenceTerms` of :func:`future_log_probs_approx` for every
    lambda in ``lams``, from two float64 row sums.

    The approximation ``(1 + lam) log pi - lam log pi_ref = log pi + lam d``, with
    ``d = log pi - log pi_ref``, is linear in the token log-probs, so each row's mean is
    ``m + lam m_d`` with m and m_d the row means of log pi and d: two passes over [B, T]
    whatever the number of lambdas, instead of a [B, T] tensor and two means per lambda.
    The means are taken in float64 (the per-lambda functions keep the input's precision).

    Args:
        log_probs, ref_log_probs: [B, T] float; mask: [B, T] bool; lams: L values.
    """
    lams = _check_lambdas(lams)
    if log_probs.shape != ref_log_probs.shape:
        raise ShapeMismatchError(
            None, "ref_log_probs", ref_log_probs.shape, "log_probs", log_probs.shape
        )
    valid = mask.to(device=log_probs.device, dtype=torch.bool)
    if _triton_kernels.on_gpu(log_probs, ref_log_probs, mask=valid):
        # the two row sums in one Triton kernel on a GPU
        lengths, current_sum, difference = _triton_kernels.difference_rows(
            log_probs, ref_log_probs, valid
        )
    elif _kernels.can_take(log_probs, ref_log_probs, mask=valid):
        # the two row sums in one compiled loop (five [B, T] float64 passes in torch)
        sums, differences, counts = _kernels.row_sums_and_differences(
            log_probs.detach().numpy(), ref_log_probs.detach().numpy(), valid.numpy()
        )
        current_sum, difference = torch.from_numpy(sums), torch.from_numpy(differences)
        lengths = torch.from_numpy(counts).double()
    else:
        current = log_probs.double()
        lengths = valid.sum(dim=1).double()
        current_sum = torch.where(valid, current, 0.0).sum(dim=1)
        difference = torch.where(valid, current - ref_log_probs.double(), 0.0).sum(dim=1)
    mean = current_sum / lengths
    mean_difference = difference / lengths
    scale = torch.tensor(lams, dtype=torch.float64, device=log_probs.device).unsqueeze(1)
    return ApproximateSequenceTerms(
        weights=torch.exp(mean + scale * mean_difference),
        ratios=torch.exp(scale * mean_difference),
        log_ratio=difference,
        log_ratio_per_token=mean_difference,
    )


@dataclass(frozen=True)
class BelowThreshold:
    """Sequences whose weight falls below a threshold (FPA Fig. 3 right).

    Attributes:
        count: sequences with weight < threshold (among the selected, finite ones).
        total: selected sequences with a finite weight.
        fraction: count / total (NaN when total is 0).
    """

    count: int
    total: int
    fraction: float

    @classmethod
    def of(cls, count: int, total: int) -> BelowThreshold:
        """From the two counts (which add over chunks and files), with their fraction.

        >>> BelowThreshold.of(1, 4).fraction
        0.25
        """
        return cls(count, total, count / total if total else math.nan)


def count_below(
    weights: Tensor, threshold: float = WEIGHT_THRESHOLD, select: Tensor | None = None
) -> BelowThreshold:
    """How many sequence weights are below ``threshold`` (default 0.2, FPA section 3.3).

    Args:
        weights: [B] float sequence weights (from :func:`sequence_weights`).
        threshold: the paper's 0.2.
        select: [B] bool, e.g. ``~correct`` to count incorrect trajectories only, or None.

    >>> count_below(torch.tensor([0.1, 0.5, 0.15, float("nan")])).count
    2
    """
    keep = torch.isfinite(weights)
    if select is not None:
        if select.shape != weights.shape:
            raise ShapeMismatchError(None, "select", select.shape, "weights", weights.shape)
        keep = keep & select.to(device=weights.device, dtype=torch.bool)
    total = int(keep.sum())
    count = int((keep & (weights < threshold)).sum())
    return BelowThreshold.of(count, total)


def sequence_log_ratio(
    log_probs: Tensor, ref_log_probs: Tensor, mask: Tensor, normalise: bool = False
) -> Tensor:
    """``log pi_theta(y|x) - log pi_ref(y|x)`` per sequence, FPA Fig. 2-3 (left).

    The sum over valid tokens (the sequence log-probability, as the figures' label), or
    the mean when ``normalise`` (the per-token value, comparable across lengths).

    Returns:
        [B] float (NaN for a sequence without valid tokens when ``normalise``).

    >>> m = torch.tensor([[True, True, False]])
    >>> sequence_log_ratio(torch.tensor([[-1.0, -2.0, -9.0]]), torch.tensor([[-1.5, -1.0, 0.0]]),
    ...                    m).item()
    -0.5
    """
    if log_probs.shape != ref_log_probs.shape:
        raise ShapeMismatchError(
            None, "ref_log_probs", ref_log_probs.shape, "log_probs", log_probs.shape
        )
    difference = log_probs - ref_log_probs
    if normalise:
        return _valid_token_mean(difference, mask)
    valid = mask.to(device=difference.device, dtype=torch.bool)
    return torch.where(valid, difference, 0.0).sum(dim=-1)


@dataclass(frozen=True)
class ByCorrectness(Generic[T]):
    """A per-sequence statistic over all sequences and over the correct and the incorrect
    ones (FPA Fig. 2-3), e.g. a mean, a distribution or a :class:`BelowThreshold`.

    Attributes:
        all, correct, incorrect: the statistic of each class (a report holds None for
            ``correct`` and ``incorrect`` where correctness is unknown).
    """

    all: T
    correct: T
    incorrect: T


@dataclass(frozen=True)
class MeansByCorrectness(ByCorrectness[float]):
    """Means over each class's finite values (NaN where there are none), and their counts.

    Attributes:
        counts: sequences with a finite value in each class.
    """

    counts: ByCorrectness[int]

    # the flat names of the record this replaced
    @property
    def correct_mean(self) -> float:
        return self.correct

    @property
    def incorrect_mean(self) -> float:
        return self.incorrect

    @property
    def correct_count(self) -> int:
        return self.counts.correct

    @property
    def incorrect_count(self) -> int:
        return self.counts.incorrect


def mean_by_correctness(values: Tensor, correct: Tensor) -> MeansByCorrectness:
    """Split a [B] per-sequence value by correctness and average each side (and the whole).

    >>> r = mean_by_correctness(torch.tensor([1.0, 3.0, -2.0]), torch.tensor([True, True, False]))
    >>> r.correct_mean, r.incorrect_mean, r.correct_count, r.incorrect_count
    (2.0, -2.0, 2, 1)
    >>> r.all, r.counts.all
    (0.6666666666666666, 3)
    """
    if values.shape != correct.shape:
        raise ShapeMismatchError(None, "values", values.shape, "correct", correct.shape)
    correct = correct.to(device=values.device, dtype=torch.bool)
    finite = torch.isfinite(values)
    values64 = values.to(torch.float64)

    def side(select: Tensor) -> tuple[float, int]:
        n = int(select.sum())
        return (float(values64[select].mean()) if n else math.nan), n

    all_mean, all_count = side(finite)
    correct_mean, correct_count = side(finite & correct)
    incorrect_mean, incorrect_count = side(finite & ~correct)
    counts = ByCorrectness(all_count, correct_count, incorrect_count)
    return MeansByCorrectness(all_mean, correct_mean, incorrect_mean, counts)
