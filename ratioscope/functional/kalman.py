"""KPO causal Kalman filter over token log-ratios (KPO Sec. 4.2, Eqs. 5-9, Algorithm 1).

Local-level model per sequence, in log space: rho_t = rho_{t-1} + eta_t, z_t = rho_t + eps_t
with Var(eta) = Q and Var(eps) = V. One step of the filter is

    P_pred = P_prev + Q;  K_t = P_pred / (P_pred + V);  P_t = (1 - K_t) P_pred
    rho_t = rho_{t-1} + K_t (z_t - rho_{t-1}) = (1 - K_t) rho_{t-1} + K_t z_t.

The gains K_t do not depend on the data, so rho is a first-order linear recurrence whose
coefficients are shared by every row of a batch. :func:`kalman_filter` evaluates it as a
chunked scan: inside a chunk of C tokens the recurrence is one data-independent
lower-triangular [C, C] map applied to all rows at once (rescaled so that the map is a
plain cumulative sum), and the chunk-to-chunk carries form the same kind of recurrence
one level up (solved recursively, in float64). Gains and transition products are computed
in float64 from the exact per-step factors 1 - K_t = V / (P_pred + V), so nothing
underflows or is clamped; the error against a float64 per-token loop is a few float32
roundings of |rho|.

:func:`kalman_filter_closed_form` reproduces a global cumulative-product form of the
filter (docs/metrics-ratios.md), which is exact in exact arithmetic but silently wrong
once its clamps bind (from token 697 at Q/V = 1e-2); :func:`closed_form_deviation`
says where.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ratioscope.errors import ParameterError, ShapeMismatchError

if TYPE_CHECKING:
    from torch import Tensor

MaskPolicy = Literal["zero", "skip"]
#: how :func:`kalman_filter` runs the recurrence: numba kernel (CPU), Triton kernel (GPU),
#: torch scan, or the first that applies
Backend = Literal["auto", "compiled", "triton", "torch"]

#: Tokens per chunk of the scan. Tuned on a 2-core CPU (benchmarks/bench_kalman.py): the
#: in-chunk work is a pass over the data whatever C is; C sets the size of the (float64)
#: chunk-carry problem, T / C per row, and of the per-chunk matrices of the Q >> V path.
DEFAULT_CHUNK = 32

# How far (in log) a chunk's running product (1 - K) may fall before K / E risks overflow
# or denormals in the shared-matrix path: e^80 ~ 5e34 < float32 max 3e38.
_SHARED_PATH_LOG_LIMIT = {"float32": 80.0, "float64": 600.0}

_CLOSED_FORM_GAIN_CLAMP = 1e-6
_CLOSED_FORM_LOG_FLOOR = math.log(1e-30)
_CLOSED_FORM_EXP_CAP = 80.0


def _check_params(q: float, v: float, p0: float) -> None:
    if not (math.isfinite(q) and q >= 0.0):
        raise ParameterError(
            "q", f"must be finite and >= 0, got {q}", subject="the Kalman process-noise variance Q"
        )
    if not (math.isfinite(v) and v > 0.0):
        raise ParameterError(
            "v",
            f"must be finite and > 0, got {v}",
            subject="the Kalman observation-noise variance V",
        )
    if not (math.isfinite(p0) and p0 >= 0.0):
        raise ParameterError(
            "p0", f"must be finite and >= 0, got {p0}", subject="the Kalman initial variance P0"
        )


def _check_inputs(z: Tensor, mask: Tensor | None) -> Tensor:
    """Validate shapes and return a bool mask (all True when ``mask`` is None)."""
    import torch

    if z.dim() != 2:
        raise ParameterError(
            "z",
            f"must be a [B, T] tensor, got shape {list(z.shape)}",
            subject="the Kalman filter's log-ratios z",
        )
    if mask is None:
        return torch.ones(z.shape, dtype=torch.bool, device=z.device)
    if mask.shape != z.shape:
        raise ShapeMismatchError(None, "mask", mask.shape, "z", z.shape, expected="equal shapes")
    if mask.dtype != torch.bool:
        mask = mask != 0
    return mask.to(z.device)


def _predicted_variances(T: int, q: float, v: float, p0: float, device=None) -> Tensor:
    """P_pred_t for t = 1..T in float64, without a Python loop over tokens.

    The variance recursion P_pred_{t+1} = V P_pred_t / (P_pred_t + V) + Q is the linear
    fractional map of G = [[V + Q, Q V], [1, V]], so P_pred_{m+j+1} is the map of G^m
    applied to P_pred_{j+1}: doubling fills the sequence in log2(T) vector steps. All
    entries are non-negative, so no step loses precision to cancellation.
    """
    import numpy as np
    import torch

    p_pred = np.empty(T, dtype=np.float64)
    p_pred[0] = p0 + q
    g_pow = np.array([[v + q, q * v], [1.0, v]], dtype=np.float64)
    done = 1
    while done < T:
        g_pow /= g_pow.max()  # projective: the scale is irrelevant, keep it finite
        (g00, g01), (g10, g11) = g_pow
        head = p_pred[: min(done, T - done)]
        p_pred[done : done + head.size] = (g00 * head + g01) / (g10 * head + g11)
        done += head.size
        g_pow = g_pow @ g_pow
    return torch.from_numpy(p_pred).to(device)


def _gain_terms(T: int, q: float, v: float, p0: float, device=None) -> tuple[Tensor, Tensor]:
    """(K_t, log(1 - K_t)) for t = 1..T, float64; log(1 - K) = log V - log(P_pred + V)."""
    import torch

    p_pred = _predicted_variances(T, q, v, p0, device)
    gains = p_pred / (p_pred + v)
    log_keep = math.log(v) - torch.log(p_pred + v)
    return gains, log_keep


def kalman_gains(T: int, q: float, v: float, p0: float = 0.0) -> Tensor:
    """Kalman gains K_1..K_T of the local-level filter (KPO Eqs. 6 and 8).

    P starts at ``p0``; then P_pred = P_prev + Q, K = P_pred / (P_pred + V),
    P = (1 - K) P_pred. The gains do not depend on the observations.

    Args:
        T: number of tokens (>= 0).
        q: process-noise variance Q >= 0.
        v: observation-noise variance V > 0.
        p0: initial posterior variance P_0|0 >= 0.

    Returns:
        [T] float64 on the CPU; element t - 1 is K_t.

    >>> [round(k, 6) for k in kalman_gains(3, q=1.0, v=1.0).tolist()]  # P_pred 1, 1.5, 1.6
    [0.5, 0.6, 0.615385]
    """
    import torch

    _check_params(q, v, p0)
    if T < 0:
        raise ParameterError("T", f"must be >= 0, got {T}", subject="the number of tokens T")
    if T == 0:
        return torch.zeros(0, dtype=torch.float64)
    return _gain_terms(T, q, v, p0)[0]


def _transfer_matrices(cum_log_keep: Tensor, gains: Tensor, dtype) -> Tensor:
    """[n, C, C] lower-triangular maps M[j, t, s] = K_s prod_{s < u <= t} (1 - K_u).

    ``cum_log_keep`` [n, C] holds within-chunk cumulative sums of log(1 - K). The products
    are exp(cum_t) * (K_s / exp(cum_s)), one outer product, while exp(-cum) stays far
    from float64 overflow; otherwise (huge gains with long chunks) exp(cum_t - cum_s)
    is formed entry by entry.
    """

    if float(cum_log_keep.min()) > -600.0:
        outer = cum_log_keep.exp().unsqueeze(-1) * (gains * (-cum_log_keep).exp()).unsqueeze(-2)
        return outer.tril_().to(dtype)
    diff = cum_log_keep.unsqueeze(-1) - cum_log_keep.unsqueeze(-2)
    return (diff.clamp(max=0.0).exp() * gains.unsqueeze(-2)).tril_().to(dtype)


def _dense_recurrence(u: Tensor, gains: Tensor, log_keep: Tensor, x0: Tensor | float) -> Tensor:
    """x_t = (1 - K_t) x_{t-1} + K_t u_t along a short last axis, as one matmul; x_{-1} = x0."""
    cum = log_keep.cumsum(0)
    matrix = _transfer_matrices(cum.unsqueeze(0), gains.unsqueeze(0), u.dtype)[0]
    out = u @ matrix.T
    decay = cum.exp().to(u.dtype)
    if isinstance(x0, float):
        if x0 != 0.0:
            out.add_(decay, alpha=x0)
        return out
    return out.addcmul_(x0.to(u.dtype).unsqueeze(-1), decay.unsqueeze(0))


def _chunked_recurrence(
    u: Tensor, gains: Tensor, log_keep: Tensor, x0: Tensor | float, chunk: int
) -> Tensor:
    """Solve x_t = exp(log_keep_t) x_{t-1} + gains_t u_t along the last axis of u [R, N].

    ``u`` is scratch: it may be overwritten. Within a chunk, with E_t the running product
    of (1 - K) since the chunk start, x_t = E_t (carry + sum_{s <= t} (K_s / E_s) u_s):
    the inner sums are a cumulative sum within each chunk (the all-ones lower-triangular
    [C, C] map, shared by every chunk and row), done in place, row-major. This needs
    K / E to stay well inside the float range (always so unless the gains are near 1,
    i.e. Q >> V); otherwise each chunk gets its own exact transfer matrix (one batched
    matmul). The chunk-end values obey the same recurrence over chunks (gain 1,
    transition = the chunk's product), solved recursively in float64.
    """
    import torch

    rows, length = u.shape
    n_chunks = length // chunk
    if n_chunks <= 1:
        return _dense_recurrence(u, gains, log_keep, x0)
    main = n_chunks * chunk
    cum = log_keep[:main].view(n_chunks, chunk).cumsum(1)
    body = u[:, :main].view(rows, n_chunks, chunk)
    limit = _SHARED_PATH_LOG_LIMIT[str(u.dtype).removeprefix("torch.")]
    if float(cum.min()) > -limit:
        scale = cum.exp()
        body.mul_((gains[:main].view(n_chunks, chunk) / scale).to(u.dtype))
        # A cumsum over the short last axis beats the equivalent triangular GEMM on CPU.
        local = body.cumsum_(-1) if main == length else body.cumsum(-1)
        ends = local[:, :, -1].to(torch.float64) * scale[:, -1]
    else:
        scale = None
        matrices = _transfer_matrices(cum, gains[:main].view(n_chunks, chunk), u.dtype)
        # [n, R, C] view of the row-major input: BLAS reads it in place with row stride N.
        local = torch.bmm(body.transpose(0, 1), matrices.transpose(1, 2))
        ends = local[:, :, -1].T.to(torch.float64)
    ones_n = torch.ones(n_chunks, dtype=torch.float64, device=u.device)
    chunk_ends = _chunked_recurrence(ends, ones_n, cum[:, -1], x0, chunk)
    if isinstance(x0, float):
        first = torch.full((rows, 1), x0, dtype=torch.float64, device=u.device)
    else:
        first = x0.to(torch.float64).unsqueeze(-1)
    carries = torch.cat([first, chunk_ends[:, :-1]], dim=1).to(u.dtype).unsqueeze(-1)
    if scale is not None and main == length:
        return local.add_(carries).mul_(scale.to(u.dtype)).view(rows, length)
    out = torch.empty_like(u)
    target = out[:, :main].view(rows, n_chunks, chunk)
    if scale is not None:
        torch.mul(local.add_(carries), scale.to(u.dtype), out=target)
    else:
        torch.addcmul(local.transpose(0, 1), carries, cum.exp().to(u.dtype), out=target)
    if main < length:
        out[:, main:] = _dense_recurrence(
            u[:, main:], gains[main:], log_keep[main:], chunk_ends[:, -1]
        )
    return out


def _compute_dtype(z: Tensor):
    import torch

    return torch.float64 if z.dtype == torch.float64 else torch.float32


def kalman_filter(
    z: Tensor,
    mask: Tensor | None,
    q: float = 1e-6,
    v: float = 1.0,
    p0: float = 0.0,
    rho0: float = 0.0,
    mask_policy: MaskPolicy = "zero",
    *,
    chunk: int = DEFAULT_CHUNK,
    backend: Backend = "auto",
    zero_masked: bool = False,
) -> Tensor:
    """Causal Kalman-filtered log-ratios rho_t|t (KPO Algorithm 1, Eqs. 6-9).

    rho_t = (1 - K_t) rho_{t-1} + K_t z_t with rho_0 = ``rho0`` and the gains of
    :func:`kalman_gains`; defaults Q = 1e-6, V = 1 (KPO Sec. 5.1), P0 = 0,
    rho0 = 0 (ratioscope's choices, docs/decisions.md). Computed as a chunked scan (no
    loop over tokens); float32 input is
    filtered in float32 with float64 gains, transitions and chunk carries, and agrees
    with the float64 loop to ~1e-7 |rho|.

    Args:
        z: [B, T] float log-ratios log pi_theta - log pi_old (CPU or CUDA).
        mask: [B, T] bool, valid tokens; None means all valid.
        q, v, p0: process-noise variance Q >= 0, observation-noise variance V > 0,
            initial variance P0 >= 0.
        rho0: initial state rho_0|0 (0 = on-policy).
        mask_policy: how masked tokens enter the filter.
            ``"zero"`` (default; ratioscope's choice): a masked token is an observation
            z = 0 and the gain advances; the output there is the filter state after that
            zero observation.
            ``"skip"``: masked tokens are invisible; token t uses the gain indexed by
            the number of valid tokens up to t, so left- and right-padded copies of a
            sequence give the same values on valid tokens. The output at a masked
            position holds the state after the last valid token before it (``rho0``
            before the first valid token).
            Either way, values of z at masked positions are never used (NaN is fine).
        chunk: tokens per scan chunk (a speed knob; results agree to rounding).
        backend: ``"compiled"``: a numba kernel runs the recurrence token by token per
            row with a float64 state (CPU only; ``chunk`` is unused); ``"triton"``: a
            Triton kernel reads z and the mask once and writes rho once, its state
            float64 (a GPU, or Triton's interpreter; ``chunk`` is unused);
            ``"torch"``: the chunked scan (any device); ``"auto"`` (default): the numba
            kernel on the CPU where numba is installed, the Triton kernel on a GPU where
            Triton is, else the scan. They agree to a few float32 roundings.
        zero_masked: the output at masked positions is 0 instead of what
            ``mask_policy`` says there (the valid positions are the same): the signal
            the analysis reads, written by the compiled loop as it goes.

    Returns:
        [B, T] rho, same dtype and device as ``z`` (float32 for non-float input).

    >>> import torch
    >>> z = torch.tensor([[1.0, 1.0, 1.0]], dtype=torch.float64)
    >>> [round(r, 6) for r in kalman_filter(z, None, q=1.0, v=1.0)[0].tolist()]  # K 1/2, 3/5, 8/13
    [0.5, 0.8, 0.923077]
    """
    import torch

    _check_params(q, v, p0)
    if mask_policy not in ("zero", "skip"):
        raise ParameterError(
            "mask_policy",
            f"must be 'zero' or 'skip', got '{mask_policy}'",
            subject="the Kalman mask policy",
        )
    if chunk < 2:
        raise ParameterError(
            "chunk", f"must be >= 2 tokens, got {chunk}", subject="the Kalman scan chunk"
        )
    mask = _check_inputs(z, mask)
    rho0 = float(rho0)
    rows, length = z.shape
    dtype = _compute_dtype(z)
    out_dtype = z.dtype if z.is_floating_point() else dtype
    if rows == 0 or length == 0:
        return torch.empty(z.shape, dtype=out_dtype, device=z.device)
    path = _path(z, backend)
    if path == "triton" and backend == "auto" and _TRITON_FAILED:
        path = "torch"
    if path != "torch":
        try:
            filtered = _filter_kernel(
                path, z.to(dtype), mask, q, v, p0, rho0, mask_policy, zero_masked
            )
        except Exception as error:
            if path != "triton" or backend != "auto":
                raise
            _give_up_triton(error)
        else:
            return filtered.to(out_dtype)
    gains, log_keep = _gain_terms(length, q, v, p0, z.device)
    zc = z.to(dtype)
    if mask_policy == "skip":
        out = _filter_skip(zc, mask, gains, log_keep, rho0, chunk)
    else:
        # Multiplying by the mask's bytes is ~4x cheaper than torch.where; it turns a
        # non-finite masked value into NaN, which reaches the last column through the
        # carries, so that (rare) case is redone with the NaN-proof torch.where.
        out = _chunked_recurrence(zc * mask.view(torch.uint8), gains, log_keep, rho0, chunk)
        if not bool(torch.isfinite(out[:, -1]).all()):
            observed = torch.where(mask, zc, torch.zeros((), dtype=dtype, device=z.device))
            out = _chunked_recurrence(observed, gains, log_keep, rho0, chunk)
    if zero_masked:
        out = torch.where(mask, out, torch.zeros((), dtype=out.dtype, device=out.device))
    return out.to(out_dtype)


#: set when the Triton kernel failed to build or run on this machine: "auto" then takes
#: the scan for the rest of the process
_TRITON_FAILED = False


def _give_up_triton(error: Exception) -> None:
    """Warn once that the Triton kernel failed (a GPU or Triton release it does not
    build for) and let "auto" take the scan from now on: an analysis still runs."""
    import warnings

    global _TRITON_FAILED
    _TRITON_FAILED = True
    warnings.warn(
        f"the Triton Kalman kernel failed here ({type(error).__name__}: {error}); "
        "the torch scan is used instead (RATIOSCOPE_DISABLE_TRITON=1 skips the try)",
        RuntimeWarning,
        stacklevel=3,
    )


def _path(z: Tensor, backend: Backend) -> Literal["compiled", "triton", "torch"]:
    """Which loop :func:`kalman_filter` runs (see its ``backend``)."""
    from ratioscope.functional import _kernels, _triton_kernels

    if backend not in ("auto", "compiled", "triton", "torch"):
        raise ParameterError(
            "backend",
            f"must be 'auto', 'compiled', 'triton' or 'torch', got '{backend}'",
            subject="the Kalman filter backend",
        )
    if backend == "torch":
        return "torch"
    numba_ok = z.device.type == "cpu" and _kernels.available()
    if backend == "compiled" and not numba_ok:
        raise ParameterError(
            "backend",
            "'compiled' needs numba installed and a CPU tensor",
            subject="the Kalman filter backend",
        )
    # the interpreter takes CPU tensors too, but on the CPU numba is the fast loop
    triton_ok = _triton_kernels.can_take(z) and (backend == "triton" or z.device.type != "cpu")
    if backend == "triton" and not triton_ok:
        raise ParameterError(
            "backend",
            "'triton' needs Triton installed and a GPU tensor (or TRITON_INTERPRET=1)",
            subject="the Kalman filter backend",
        )
    if backend == "compiled" or (backend == "auto" and numba_ok):
        return "compiled"
    return "triton" if triton_ok else "torch"


@functools.lru_cache(maxsize=8)
def _constants(T: int, q: float, v: float, p0: float, rho0: float, device: str) -> Tensor:
    """[2 T + 1] float64 on ``device``: 1 - K_t (exactly V / (P_pred + V)), then K_t,
    then rho0. One upload, kept for the next call, so that filtering step after step on
    a GPU uploads nothing; rho0 travels as a float64 value (a kernel's float argument
    would be rounded to float32)."""
    import numpy as np
    import torch

    p_pred = _predicted_variances(T, q, v, p0).numpy()
    table = np.concatenate([v / (p_pred + v), p_pred / (p_pred + v), [rho0]])
    return torch.from_numpy(table).to(device)


def _filter_kernel(
    path: Literal["compiled", "triton"],
    z: Tensor,
    mask: Tensor,
    q: float,
    v: float,
    p0: float,
    rho0: float,
    policy: MaskPolicy,
    zero_masked: bool = False,
) -> Tensor:
    """The recurrence token by token in a compiled loop (numba on the CPU, Triton on a
    GPU): [B, T] of z's dtype (0 at masked positions with ``zero_masked``).

    rho_t = (1 - K_t) rho_{t-1} + K_t z_t with the state kept in float64 and rounded once
    per stored value; 1 - K_t = V / (P_pred + V) exactly, as in the scan's log terms.
    """
    import torch

    from ratioscope.functional import _kernels, _triton_kernels

    device = "cpu" if path == "compiled" else str(z.device)
    length = z.shape[1]
    table = _constants(length, q, v, p0, rho0, device)
    keep, gains, initial = table[:length], table[length : 2 * length], table[2 * length :]
    values = z.detach().contiguous()
    out = torch.empty(values.shape, dtype=values.dtype, device=values.device)
    if path == "triton":
        _triton_kernels.kalman(
            values, mask.contiguous(), keep, gains, initial, policy == "skip", out, zero_masked
        )
        return out
    _kernels.kalman(
        values.numpy(), mask.contiguous().numpy(), keep.numpy(), gains.numpy(), rho0,
        policy == "skip", out.numpy(), zero_masked,
    )  # fmt: skip
    return out


def _filter_skip(
    z: Tensor, mask: Tensor, gains: Tensor, log_keep: Tensor, rho0: float, chunk: int
) -> Tensor:
    """Filter each row's valid tokens compacted to the front, then scatter back."""
    import torch

    valid_upto = mask.cumsum(1)
    n_valid = valid_upto[:, -1:]
    positions = torch.arange(z.shape[1], device=z.device).unsqueeze(0)
    # A permutation: valid tokens keep their order at the front, masked ones go behind.
    target = torch.where(mask, valid_upto - 1, n_valid + positions - valid_upto)
    observed = torch.where(mask, z, torch.zeros((), dtype=z.dtype, device=z.device))
    compact = torch.empty_like(observed).scatter_(1, target, observed)
    filtered = _chunked_recurrence(compact, gains, log_keep, rho0, chunk)
    latest = filtered.gather(1, (valid_upto - 1).clamp(min=0))
    return latest.masked_fill_(valid_upto == 0, rho0)


def kalman_filter_loop(
    z: Tensor,
    mask: Tensor | None,
    q: float = 1e-6,
    v: float = 1.0,
    p0: float = 0.0,
    rho0: float = 0.0,
    mask_policy: MaskPolicy = "zero",
) -> Tensor:
    """Reference: Algorithm 1 as a plain loop over tokens, vectorised over rows, float64.

    Same semantics as :func:`kalman_filter` (including what masked positions hold) but
    written step by step from the paper; used by tests and benchmarks as the oracle.

    Args:
        z: [B, T] float log-ratios.
        mask: [B, T] bool or None.

    Returns:
        [B, T] float64 on z's device.
    """
    import torch

    _check_params(q, v, p0)
    if mask_policy not in ("zero", "skip"):
        raise ParameterError(
            "mask_policy",
            f"must be 'zero' or 'skip', got '{mask_policy}'",
            subject="the Kalman mask policy",
        )
    mask = _check_inputs(z, mask)
    z64 = torch.where(
        mask, z.to(torch.float64), torch.zeros((), dtype=torch.float64, device=z.device)
    )
    rows, length = z.shape
    rho = torch.full((rows,), float(rho0), dtype=torch.float64, device=z.device)
    variance = torch.full((rows,), float(p0), dtype=torch.float64, device=z.device)
    out = torch.empty(rows, length, dtype=torch.float64, device=z.device)
    for t in range(length):
        p_pred = variance + q
        gain = p_pred / (p_pred + v)
        updated = rho + gain * (z64[:, t] - rho)
        if mask_policy == "skip":
            step = mask[:, t]
            rho = torch.where(step, updated, rho)
            variance = torch.where(step, (1.0 - gain) * p_pred, variance)
        else:
            rho = updated
            variance = (1.0 - gain) * p_pred
        out[:, t] = rho
    return out


def kalman_filter_closed_form(
    z: Tensor,
    mask: Tensor | None,
    q: float,
    v: float,
    p0: float = 0.0,
    rho0: float = 0.0,
) -> Tensor:
    """A global cumulative-product form of the filter, kept to reproduce and flag it.

    In float32, with gains clamped to [1e-6, 1 - 1e-6] and masked tokens observed as 0:
    L_t = max(sum_{u <= t} log(1 - K_u), log 1e-30) and
    rho_t = exp(L_t) (rho0 + sum_{s <= t} K_s z_s exp(min(-L_s, 80))).
    Exact in exact arithmetic; wrong once a clamp binds (docs/metrics-ratios.md), e.g. after about
    700 tokens at Q/V = 1e-2. Use :func:`kalman_filter` for real work.

    Args:
        z: [B, T] float log-ratios; mask: [B, T] bool or None.

    Returns:
        [B, T] float32 on z's device.
    """
    import torch

    _check_params(q, v, p0)
    mask = _check_inputs(z, mask)
    length = z.shape[1]
    gains = kalman_gains(length, q, v, p0).to(device=z.device, dtype=torch.float32)
    gains = gains.clamp(_CLOSED_FORM_GAIN_CLAMP, 1.0 - _CLOSED_FORM_GAIN_CLAMP)
    cum_log = torch.log(1.0 - gains).cumsum(0).clamp(min=_CLOSED_FORM_LOG_FLOOR)
    weights = gains * torch.exp((-cum_log).clamp(max=_CLOSED_FORM_EXP_CAP))
    observed = torch.where(mask, z.to(torch.float32), torch.zeros((), device=z.device))
    return torch.exp(cum_log) * (rho0 + (observed * weights).cumsum(1))


def closed_form_clamp_index(T: int, q: float, v: float, p0: float = 0.0) -> int | None:
    """First 0-based token index where the closed form's clamps bind, or None.

    From there on :func:`kalman_filter_closed_form` is no longer the filter even in
    exact arithmetic (data-independent; the gain clamp is counted only where it moves a
    gain by more than 1e-3 relative, since a clamp of the tiny first gains is harmless).
    """
    import torch

    gains = kalman_gains(T, q, v, p0)
    if T == 0:
        return None
    cum_log = torch.log1p(-gains).cumsum(0)
    floored = cum_log < _CLOSED_FORM_LOG_FLOOR
    clamped = gains.clamp(_CLOSED_FORM_GAIN_CLAMP, 1.0 - _CLOSED_FORM_GAIN_CLAMP)
    moved = (clamped - gains).abs() > 1e-3 * gains.clamp(min=1e-300)
    bad = (floored | moved).nonzero()
    return int(bad[0, 0]) if bad.numel() else None


@dataclass(frozen=True)
class ClosedFormDeviation:
    """Where the reference closed form departs from the exact filter on given data.

    Attributes:
        q, v: the filter parameters checked.
        first_index: smallest 0-based token index (over all rows, valid tokens only)
            with |closed form - exact| > atol, or None if there is none.
        max_abs_error: largest |closed form - exact| over valid tokens (NaN/inf count
            as infinite).
        clamp_index: :func:`closed_form_clamp_index` for the same T, Q, V, P0.
        atol: the tolerance used.
    """

    q: float
    v: float
    first_index: int | None
    max_abs_error: float
    clamp_index: int | None
    atol: float


def closed_form_deviation(
    z: Tensor,
    mask: Tensor | None,
    q: float,
    v: float,
    p0: float = 0.0,
    rho0: float = 0.0,
    atol: float = 1e-6,
) -> ClosedFormDeviation:
    """Compare :func:`kalman_filter_closed_form` with the exact float64 filter on z.

    Call it once per (Q, V) to tell users where ``--kalman-impl reference`` goes wrong.

    Args:
        z: [B, T] float log-ratios; mask: [B, T] bool or None (zero mask policy).

    Returns:
        :class:`ClosedFormDeviation`.
    """
    import torch

    mask = _check_inputs(z, mask)
    exact = kalman_filter(z.to(torch.float64), mask, q, v, p0, rho0)
    closed = kalman_filter_closed_form(z, mask, q, v, p0, rho0).to(torch.float64)
    error = (closed - exact).abs().nan_to_num(nan=math.inf)
    error = torch.where(mask, error, torch.zeros((), dtype=error.dtype, device=error.device))
    over = (error > atol).any(dim=0).nonzero()
    return ClosedFormDeviation(
        q=q,
        v=v,
        first_index=int(over[0, 0]) if over.numel() else None,
        max_abs_error=float(error.max()) if error.numel() else 0.0,
        clamp_index=closed_form_clamp_index(z.shape[1], q, v, p0),
        atol=atol,
    )
