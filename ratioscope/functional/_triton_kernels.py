"""Fused GPU kernels (Triton): the wrappers that size, launch and read the kernels of
:mod:`ratioscope.functional._triton_source` (the Kalman filter, the histograms and
moments, the vitals, the mismatch sums, the covariance passes, the spectra's centring
and LFR band, the states' counts, and the advantage, FPA and TEPO row sums).

On a GPU their tensor code is many launches and many passes over [B, T] (the Kalman
filter's chunked scan: about 55 launches and 14 passes where the floor is one read of z
and the mask and one write of rho). A Triton kernel reads each element once, keeps its
state and sums in registers and writes each result once; these are the GPU's
counterparts of the numba loops in :mod:`ratioscope.functional._kernels`,
:mod:`ratioscope.functional._ratio_kernels`, :mod:`ratioscope.functional._vitals_kernels`
and :mod:`ratioscope.functional._covariance_kernels`, and the torch code stays the
reference the tests compare them with.

Triton comes with torch's CUDA wheels, so no install is asked of a GPU machine. It is
used where :func:`can_take` says so: Triton importable, ``RATIOSCOPE_DISABLE_TRITON``
unset, and the tensors on a CUDA (or ROCm) device of a torch built for one; or, with
``TRITON_INTERPRET=1``, on CPU tensors: Triton's interpreter then runs each kernel on
the host with numpy (about 80 us an element in a scan), which is how the tests check
these kernels on a machine without a GPU (the same kernel source, not its GPU code
generation nor its speed).

The kernels (:mod:`ratioscope.functional._triton_source`) are imported on first use.
Whether Triton compiles or interprets is fixed when Triton itself is first imported in a
process (``triton.jit`` decides as it decorates, its own helpers included), so
``TRITON_INTERPRET`` must be set before that: the tests set it first thing.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Collection
from types import ModuleType

import torch
from torch import Tensor

from ratioscope.functional import histogram as bins
from ratioscope.functional._kernels import FLOAT_DTYPES
from ratioscope.functional.moments import EMPTY, MomentSums, combine_moments

#: set to a non-empty value other than "0" to keep the torch path on a GPU
DISABLE_ENV = "RATIOSCOPE_DISABLE_TRITON"
#: Triton's own switch to its host interpreter
INTERPRET_ENV = "TRITON_INTERPRET"

#: tokens a program reads at once along a row (a power of two: the scan's tile width)
BLOCK_T = 1024
#: rows a program filters together (a power of two)
BLOCK_ROWS = 2
#: programs per streaming multiprocessor the grid aims at when rows are cut into chunks
#: filtered in parallel (their carries joined by a second, small pass) ...
PROGRAMS_PER_SM = 4
#: ... which they are when the rows alone give fewer programs than this per
#: multiprocessor: a row in chunks is read twice
MIN_PROGRAMS_PER_SM = 2
#: the multiprocessor count assumed where the device does not say (the interpreter)
DEFAULT_SMS = 8
#: warps a program of the Kalman, ratio and histogram kernels runs on: at 8 (16 values
#: of a 2,048-value tile a thread) none spills registers on an A100 or an H100, where 4
#: did (`python benchmarks/triton_compile.py`)
NUM_WARPS = 8


def interpreting() -> bool:
    """Whether Triton runs its kernels in its host interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get(INTERPRET_ENV, "") not in ("", "0")


def available() -> bool:
    """True when Triton imports and ``RATIOSCOPE_DISABLE_TRITON`` does not turn it off."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return False
    return importlib.util.find_spec("triton") is not None


def can_take(*tensors: Tensor) -> bool:
    """Whether the kernels here can run on ``tensors``: Triton :func:`available`, and
    every tensor on the CPU with the interpreter on, or on a GPU of a torch built with
    CUDA or ROCm without it (a CPU build that reports ``cuda`` tensors has no GPU to
    compile for)."""
    if not available():
        return False
    if interpreting():
        return all(t.device.type == "cpu" for t in tensors)
    built_for_gpu = torch.version.cuda is not None or torch.version.hip is not None
    return built_for_gpu and all(t.device.type == "cuda" for t in tensors)


def on_gpu(
    *values: Tensor,
    mask: Tensor | None = None,
    dtypes: Collection[torch.dtype] = FLOAT_DTYPES,
) -> bool:
    """Whether ``auto`` takes a kernel here for these, as ``_kernels.can_take`` says for
    numba's loops: ``values`` of ``dtypes`` and ``mask`` (when given) bool of their
    shape, all off the CPU (there numba's loops run), where :func:`can_take` them."""
    tensors = [*values] if mask is None else [*values, mask]
    if not values or any(t.device.type == "cpu" for t in tensors):
        return False
    if any(v.dtype not in dtypes for v in values):
        return False
    if mask is not None and (
        mask.dtype != torch.bool or any(v.shape != mask.shape for v in values)
    ):
        return False
    return can_take(*tensors)


def _kernels() -> ModuleType:
    """The kernels' module, once the mode Triton was imported in is the one the
    environment asks for now (a process cannot switch modes)."""
    import triton.language as tl

    from ratioscope.functional import _triton_source

    helpers_interpreted = type(tl.zeros).__name__ == "InterpretedFunction"
    if helpers_interpreted != interpreting():
        raise RuntimeError(
            f"Triton was imported with {INTERPRET_ENV}={int(helpers_interpreted)} and is now "
            f"asked for {INTERPRET_ENV}={int(interpreting())}: set it before Triton is imported"
        )
    return _triton_source


def _multiprocessors(device: torch.device) -> int:
    if device.type == "cuda" and not interpreting():
        return int(torch.cuda.get_device_properties(device).multi_processor_count)
    return DEFAULT_SMS


def kalman_chunks(rows: int, length: int, multiprocessors: int) -> tuple[int, int]:
    """(n_chunks, chunk_len) of a [rows, length] filter: one chunk a row where the rows
    alone give ``MIN_PROGRAMS_PER_SM`` programs per multiprocessor, else as many chunks
    (of whole tiles) as give ``PROGRAMS_PER_SM``; a row in chunks is read twice, so only
    short batches of long rows take them."""
    row_blocks = -(-rows // BLOCK_ROWS)
    tiles = max(1, -(-length // BLOCK_T))
    if row_blocks >= MIN_PROGRAMS_PER_SM * multiprocessors or tiles == 1:
        return 1, tiles * BLOCK_T
    n_chunks = min(tiles, -(-PROGRAMS_PER_SM * multiprocessors // row_blocks))
    chunk_len = -(-tiles // n_chunks) * BLOCK_T
    return -(-length // chunk_len), chunk_len


def kalman(
    z: Tensor,
    mask: Tensor,
    keep: Tensor,
    gains: Tensor,
    initial: Tensor,
    skip: bool,
    out: Tensor,
    zero_masked: bool = False,
) -> None:
    """Fill ``out`` with the filtered states, as ``_kernels.kalman`` does on the CPU.

    Args:
        z: [B, T] float32 or float64 log-ratios, contiguous.
        mask: [B, T] bool, contiguous.
        keep, gains: [T] float64, 1 - K_t (exactly V / (P_pred + V)) and K_t.
        initial: [1] float64, rho0, the state before the first token.
        skip: mask policy "skip" (the n-th valid token takes K_n; a masked position
            holds the last state) rather than "zero" (a masked token observes 0).
        out: [B, T] of z's dtype, written.
        zero_masked: 0 at masked positions instead of the state.

    The state is float64, rounded once when stored. Rows are cut into chunks only when
    they are too few to fill the GPU (see :func:`kalman_chunks`); then a first pass
    leaves each chunk's product of keeps and end state, a small pass joins them, and a
    second pass writes rho: 14 bytes an element read and written instead of 9.
    """
    kernels = _kernels()
    rows, length = z.shape
    if rows == 0 or length == 0:
        return
    mask_bytes = mask.view(torch.uint8)
    n_chunks, chunk_len = kalman_chunks(rows, length, _multiprocessors(z.device))
    grid = (-(-rows // BLOCK_ROWS), n_chunks)
    sizes = (rows, length, chunk_len, n_chunks)
    flags = {
        "SKIP": skip, "ZERO_MASKED": zero_masked, "HAS_OFFSETS": skip and n_chunks > 1,
        "BLOCK_ROWS": BLOCK_ROWS, "BLOCK_T": BLOCK_T,
    }  # fmt: skip
    if n_chunks == 1:
        unused = out  # a pointer the kernel is given but does not follow
        kernels.kalman_scan[grid](
            z, mask_bytes, keep, gains, initial, unused, unused, out, unused, unused, *sizes,
            HAS_START=False, WRITE_OUT=True, WRITE_ENDS=False, num_warps=NUM_WARPS, **flags,
        )  # fmt: skip
        return
    offsets = _chunk_offsets(mask_bytes, n_chunks, chunk_len) if skip else out
    ends = torch.empty((3, rows, n_chunks), dtype=torch.float64, device=z.device)
    end_keep, end_state, starts = ends[0], ends[1], ends[2]
    kernels.kalman_scan[grid](
        z, mask_bytes, keep, gains, initial, starts, offsets, out, end_keep, end_state, *sizes,
        HAS_START=False, WRITE_OUT=False, WRITE_ENDS=True, num_warps=NUM_WARPS, **flags,
    )  # fmt: skip
    block = 128
    kernels.chunk_starts[(-(-rows // block),)](
        end_keep, end_state, initial, starts, rows, n_chunks, BLOCK=block
    )
    kernels.kalman_scan[grid](
        z, mask_bytes, keep, gains, initial, starts, offsets, out, end_keep, end_state, *sizes,
        HAS_START=True, WRITE_OUT=True, WRITE_ENDS=False, num_warps=NUM_WARPS, **flags,
    )  # fmt: skip


def _chunk_offsets(mask_bytes: Tensor, n_chunks: int, chunk_len: int) -> Tensor:
    """[B, n_chunks] int32: the valid tokens of a row before each chunk (policy "skip":
    where a chunk's gains start)."""
    rows, length = mask_bytes.shape
    padded = torch.nn.functional.pad(mask_bytes, (0, n_chunks * chunk_len - length))
    counts = padded.view(rows, n_chunks, chunk_len).sum(-1, dtype=torch.int32)
    return (counts.cumsum(1, dtype=torch.int32) - counts).contiguous()


@functools.lru_cache(maxsize=16)
def float64_constants(values: tuple[float, ...], device: str) -> Tensor:
    """``values`` as a float64 tensor on ``device``, uploaded once: a kernel's float
    argument would reach it as float32."""
    return torch.tensor(values, dtype=torch.float64, device=device)


def ratio_rows(
    signal: Tensor, advantages: Tensor | None, mask: Tensor, bounds: tuple[float, float]
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """A log-ratio signal's histogram, moments and PPO row sums in one pass (what
    ``_ratio_kernels.histogram_ppo_rows`` does on the CPU).

    Args:
        signal: [B, T] float32 or float64; advantages: [B, T] float or None; mask:
            [B, T] bool; bounds: (1 - eps_low, 1 + eps_high).

    Returns:
        ``(summary, row_sums [B, 2] float64, clipped [B] int64)`` on the device, the last
        two None without advantages; ``summary`` is one int32 buffer, so that one copy
        brings it to the host, where :func:`split_summary` reads it.
    """
    kernels = _kernels()
    rows, length = signal.shape
    device = signal.device
    programs = -(-rows // BLOCK_ROWS)
    summary = _summary_buffer(programs, False, device)
    counts, partials, _ = _summary_views(summary, programs, False)
    has_adv = advantages is not None
    row_sums = torch.empty((rows, 2), dtype=torch.float64, device=device) if has_adv else None
    clipped = torch.empty(rows, dtype=torch.int64, device=device) if has_adv else None
    if rows == 0:
        return summary, row_sums, clipped
    signal = signal.contiguous()
    kernels.ratio_rows[(programs,)](
        signal, signal if advantages is None else advantages.contiguous(),
        mask.contiguous().view(torch.uint8), float64_constants(bounds, str(device)), counts,
        partials, partials if row_sums is None else row_sums,
        partials if clipped is None else clipped, rows, length, HAS_ADV=has_adv,
        BLOCK_ROWS=BLOCK_ROWS, BLOCK_T=BLOCK_T, num_warps=NUM_WARPS, **_BIN_CONSTANTS,
    )  # fmt: skip
    return summary, row_sums, clipped


def histogram_moments(values: Tensor, with_sums: bool = False) -> Tensor:
    """Counts (and with ``with_sums`` the per-bin sums) and moments of ``values`` [n]
    (finite, float32 or float64) in one pass: programs of ``HISTOGRAM_BLOCK``-value
    tiles, a contiguous span each. Returns the int32 summary buffer on the device
    (:func:`split_summary` reads it once it is on the host)."""
    kernels = _kernels()
    n = values.numel()
    wanted = PROGRAMS_PER_SM * _multiprocessors(values.device)
    span = -(-max(1, -(-n // wanted)) // HISTOGRAM_BLOCK) * HISTOGRAM_BLOCK
    programs = -(-n // span)
    summary = _summary_buffer(programs, with_sums, values.device)
    counts, partials, sums = _summary_views(summary, programs, with_sums)
    if n:
        kernels.histogram_moments[(programs,)](
            values.contiguous(), counts, partials, partials if sums is None else sums, n, span,
            HAS_SUMS=with_sums, BLOCK=HISTOGRAM_BLOCK, num_warps=NUM_WARPS, **_BIN_CONSTANTS,
        )  # fmt: skip
    return summary


#: the tile width of the mismatch sums' second pass, which keeps ten float64 sums beside
#: an exp, an expm1 and a log a value: at 1,024 it spilled on an A100
MISMATCH_BLOCK_T = 512
#: float64 slots a program of :func:`vitals_rows` leaves (``_vitals_kernels``' order)
VITALS_SLOTS = 20


def vitals_rows(
    inputs: tuple[Tensor | None, Tensor | None, Tensor | None, Tensor | None],
    mask: Tensor,
    correct: Tensor | None,
) -> Tensor:
    """The vitals of the valid tokens in one pass (what ``_vitals_kernels.vitals_rows``
    does on the CPU).

    Args:
        inputs: (entropy, old entropy, advantages, log-probs of the mechanics), each
            [B, T] float or None (the log-probs are read only with advantages).
        mask: [B, T] bool; correct: [B] bool or None.

    Returns:
        One int32 buffer on the device, so that one copy brings it to the host:
        :func:`split_vitals` reads it as the entropy's [NUM_BINS] counts, each program's
        [VITALS_SLOTS] float64 slots, and each row's sum of |A| and valid tokens.
    """
    kernels = _kernels()
    rows, length = mask.shape
    programs = -(-rows // BLOCK_ROWS)
    words = _COUNT_WORDS + 2 * VITALS_SLOTS * programs + 4 * rows
    summary = torch.zeros(words, dtype=torch.int32, device=mask.device)
    counts, slots, row_abs, row_tokens = _vitals_views(summary, programs, rows)
    if rows == 0:
        return summary
    entropy, old, advantages, log_probs = inputs
    given = next(t for t in (entropy, old, advantages, log_probs, mask) if t is not None)
    flags = {
        "HAS_ENTROPY": entropy is not None, "HAS_OLD": old is not None,
        "HAS_ADV": advantages is not None,
        "HAS_PAIRS": advantages is not None and log_probs is not None,
        "HAS_CORRECT": correct is not None,
    }  # fmt: skip

    def pointer(values: Tensor | None) -> Tensor:
        return given if values is None else values.contiguous()  # absent: never read

    right = mask if correct is None else correct.to(torch.bool).contiguous().view(torch.uint8)
    kernels.vitals_rows[(programs,)](
        pointer(entropy), pointer(old), pointer(advantages), pointer(log_probs),
        mask.contiguous().view(torch.uint8), right, counts, slots, row_abs, row_tokens, rows,
        length, BLOCK_ROWS=BLOCK_ROWS, BLOCK_T=BLOCK_T, num_warps=NUM_WARPS, **flags,
        **_BIN_CONSTANTS,
    )  # fmt: skip
    return summary


def _vitals_views(summary: Tensor, programs: int, rows: int) -> tuple[Tensor, ...]:
    """(counts [NUM_BINS] int32, slots [programs, VITALS_SLOTS] float64, row |A| sums [rows]
    float64, row tokens [rows] int64): views of a vitals buffer."""
    slots_end = _COUNT_WORDS + 2 * VITALS_SLOTS * programs
    wide = summary[_COUNT_WORDS:].view(torch.float64)
    slots = wide[: VITALS_SLOTS * programs].view(programs, VITALS_SLOTS)
    after = summary[slots_end:]
    row_abs = after[: 2 * rows].view(torch.float64)
    row_tokens = after[2 * rows :].view(torch.int64)
    return summary[: bins.NUM_BINS], slots, row_abs, row_tokens


def split_vitals(summary: Tensor, rows: int) -> tuple[Tensor, list[list[float]], Tensor, Tensor]:
    """(counts [NUM_BINS] int64, each program's slots, row |A| sums [rows] float64, row
    tokens [rows] int64) of a vitals buffer brought to the host."""
    programs = (summary.numel() - _COUNT_WORDS - 4 * rows) // (2 * VITALS_SLOTS)
    counts, slots, row_abs, row_tokens = _vitals_views(summary, programs, rows)
    return counts.long(), slots.tolist(), row_abs, row_tokens


def mismatch(z: Tensor, mask: Tensor, log_c: float) -> Tensor:
    """The mismatch sums in two passes (what ``_ratio_kernels.mismatch_rows`` and
    ``mismatch_terms`` do on the CPU): each row's valid tokens, sum z and sum |z|, each
    program's largest z, then each program's ten token sums about the largest of those.

    Args:
        z: [B, T] float32 or float64; mask: [B, T] bool; log_c: log of the threshold.

    Returns:
        One float64 buffer on the device, read by :func:`split_mismatch` once it is on
        the host: [B, 3] row sums, [P] largest z, [P, 10] token sums.
    """
    kernels = _kernels()
    rows, length = mask.shape
    programs = -(-rows // BLOCK_ROWS)
    summary = torch.zeros(3 * rows + 11 * programs, dtype=torch.float64, device=mask.device)
    row_sums, tops, terms = _mismatch_views(summary, rows, programs)
    if rows == 0:
        return summary
    values, valid = z.contiguous(), mask.contiguous().view(torch.uint8)
    blocks = {"BLOCK_ROWS": BLOCK_ROWS, "num_warps": NUM_WARPS}
    kernels.mismatch_rows[(programs,)](
        values, valid, row_sums, tops, rows, length, BLOCK_T=BLOCK_T, **blocks
    )
    kernels.mismatch_terms[(programs,)](
        values, valid, tops, float64_constants((log_c,), str(mask.device)), terms, rows,
        length, programs, BLOCK_T=MISMATCH_BLOCK_T, BLOCK_TOPS=1024, **blocks,
    )  # fmt: skip
    return summary


def _mismatch_views(summary: Tensor, rows: int, programs: int) -> tuple[Tensor, Tensor, Tensor]:
    """([rows, 3] row sums, [programs] largest z, [programs, 10] token sums): views of a
    mismatch buffer."""
    tops_at = 3 * rows
    return (
        summary[:tops_at].view(rows, 3),
        summary[tops_at : tops_at + programs],
        summary[tops_at + programs :].view(programs, 10),
    )


def split_mismatch(summary: Tensor, rows: int) -> tuple[Tensor, float, list[float]]:
    """([rows, 3] row sums, the largest valid z, the ten token sums: the first nine added
    in program order, the last the largest) of a mismatch buffer on the host."""
    programs = (summary.numel() - 3 * rows) // 11
    row_sums, tops, terms = _mismatch_views(summary, rows, programs)
    sums = [0.0] * 10
    for part in terms.tolist():
        sums[:9] = [a + b for a, b in zip(sums[:9], part[:9], strict=True)]
        sums[9] = max(sums[9], part[9])
    top = max(tops.tolist(), default=float("-inf"))
    return row_sums, top, sums


#: float64 slots a program of :func:`covariance_statistics` leaves: the moments of c,
#: w and w~ (5 each), sum |A|, sum w |A|, sum w~ |A|, and the tokens under each threshold
COVARIANCE_SLOTS = 20
#: columns of the covariance kernels' per-scope float64 table: mean log pi, mean A,
#: mean c, 2 sigma^2, flat (1.0), N / sum w
SCOPE_COLUMNS = 6
#: the covariance kernels' constants: the batch's mean log pi and mean A, Clip-Cov's c
#: band, the PPO ratio bounds 1 + eps_high and 1 - eps_low, the two weight thresholds
COVARIANCE_CONSTANTS = 8


def covariance_rows(
    index: int,
    inputs: tuple[Tensor, Tensor, Tensor, Tensor],
    scope: Tensor,
    table: Tensor,
    constants: Tensor,
) -> Tensor:
    """Pass ``index`` (0-3) of CW-GRPO's kernel over a chunk: [B, 3] float64 row sums
    (``_triton_source.covariance_rows`` says which).

    Args:
        inputs: (log pi, A, mask, log-ratio), [B, T] each: float32 or float64, the mask
            bool; the log-ratio is read by pass 1 only.
        scope: [B] int64 each row's scope; table: [S, SCOPE_COLUMNS] float64 (the
            columns a pass reads filled); constants: [COVARIANCE_CONSTANTS] float64.
    """
    kernels = _kernels()
    logp, adv, mask, log_ratio = inputs
    rows, length = mask.shape
    out = torch.empty((rows, 3), dtype=torch.float64, device=mask.device)
    if rows == 0:
        return out
    kernels.covariance_rows[(-(-rows // BLOCK_ROWS),)](
        logp.contiguous(), adv.contiguous(), mask.contiguous().view(torch.uint8),
        log_ratio.contiguous(), scope.contiguous(), table, constants, out, rows, length,
        PASS=index, NARROW=logp.dtype != torch.float64,
        NARROW_Z=log_ratio.dtype != torch.float64, BLOCK_ROWS=BLOCK_ROWS, BLOCK_T=BLOCK_T,
        num_warps=NUM_WARPS,
    )  # fmt: skip
    return out


def covariance_statistics(
    inputs: tuple[Tensor, Tensor, Tensor],
    scope: Tensor,
    table: Tensor,
    constants: Tensor,
    weight_bins: int,
) -> tuple[Tensor, Tensor]:
    """The last pass of CW-GRPO's kernel over a chunk, into the ``covariance`` section's
    statistics (``_triton_source.covariance_statistics``).

    Args:
        inputs: (log pi, A, mask), [B, T] each; scope, table, constants: as
            :func:`covariance_rows`; weight_bins: equal bins of w on [0, 1].

    Returns:
        (one int32 buffer on the device, read by :func:`split_covariance` once on the
        host; [B, 3] float64 each row's sums of c, w and w~).
    """
    kernels = _kernels()
    logp, adv, mask = inputs
    rows, length = mask.shape
    programs = -(-rows // BLOCK_ROWS)
    summary = torch.zeros(
        _covariance_count_words(weight_bins) + 2 * (bins.NUM_BINS + COVARIANCE_SLOTS * programs),
        dtype=torch.int32, device=mask.device,
    )  # fmt: skip
    counts, sums, slots = _covariance_views(summary, weight_bins, programs)
    row_sums = torch.empty((rows, 3), dtype=torch.float64, device=mask.device)
    if rows == 0:
        return summary, row_sums
    kernels.covariance_statistics[(programs,)](
        logp.contiguous(), adv.contiguous(), mask.contiguous().view(torch.uint8),
        scope.contiguous(), table, constants, counts, sums, slots, row_sums, rows, length,
        WEIGHT_BINS=weight_bins, NARROW=logp.dtype != torch.float64,
        NUM_BINS=bins.NUM_BINS, BLOCK_ROWS=BLOCK_ROWS, BLOCK_T=COVARIANCE_BLOCK_T,
        num_warps=NUM_WARPS, **_BIN_CONSTANTS,
    )  # fmt: skip
    return summary, row_sums


#: the tile width of the covariance statistics, which keep three moments, three masses
#: and five atomic adds a value
COVARIANCE_BLOCK_T = 512


def _covariance_count_words(weight_bins: int) -> int:
    """int32 words of a covariance buffer's counts, even so that the float64 parts after
    them are aligned."""
    words = 3 * bins.NUM_BINS + weight_bins
    return words + words % 2


def _covariance_views(
    summary: Tensor, weight_bins: int, programs: int
) -> tuple[Tensor, Tensor, Tensor]:
    """(counts [3 NUM_BINS + weight_bins] int32, c sums [NUM_BINS] float64, slots
    [programs, COVARIANCE_SLOTS] float64): views of a covariance buffer."""
    words = _covariance_count_words(weight_bins)
    wide = summary[words:].view(torch.float64)
    slots = wide[bins.NUM_BINS :].view(programs, COVARIANCE_SLOTS)
    return summary[: 3 * bins.NUM_BINS + weight_bins], wide[: bins.NUM_BINS], slots


def split_covariance(summary: Tensor, weight_bins: int) -> tuple[Tensor, Tensor, list[list[float]]]:
    """(counts [3 NUM_BINS + weight_bins] int64, c sums [NUM_BINS] float64, each
    program's [COVARIANCE_SLOTS] slots) of a covariance buffer brought to the host."""
    words = _covariance_count_words(weight_bins)
    programs = (summary.numel() - words - 2 * bins.NUM_BINS) // (2 * COVARIANCE_SLOTS)
    counts, sums, slots = _covariance_views(summary, weight_bins, programs)
    return counts.long(), sums, slots.tolist()


#: lags a program of :func:`lfr_band` reads at once (a power of two): at 1,024 its
#: sines spilled 16 bytes on an A100, at 512 none spills (48 registers a thread)
LFR_BLOCK_T = 512


def lfr_band(auto: Tensor, lengths: Tensor, widths: Tensor) -> tuple[Tensor, Tensor]:
    """The LFR's band energy of each row from its linear autocorrelation, one read of
    its L lags (what ``_ratio_kernels.lfr_band`` does on the CPU).

    Args:
        auto: [B, >= max L] float64, each row's autocorrelation at lags 0, 1, ... (rows
            may be strided; lags at or past a row's L are not read);
        lengths: [B] int64, L; widths: [B] float64, the band's bins 2 k_c + 1 (odd
            integers, as ``token_stats._band_widths`` gives them).

    Returns:
        (band [B], a(0) [B]) float64 on the device.
    """
    kernels = _kernels()
    rows = auto.shape[0]
    out = torch.empty((2, rows), dtype=torch.float64, device=auto.device)
    if rows == 0:
        return out[0], out[1]
    if auto.stride(1) != 1:
        auto = auto.contiguous()
    kernels.lfr_band[(rows,)](
        auto, lengths.to(torch.int64).contiguous(), widths.to(torch.float64).contiguous(),
        out[0], out[1], auto.stride(0), BLOCK_T=LFR_BLOCK_T, num_warps=NUM_WARPS,
    )  # fmt: skip
    return out[0], out[1]


#: tokens a program of :func:`centre_rows` reads at once (a power of two) ...
CENTRE_BLOCK_T = 1024
#: ... and lanes of its windows' tile (windows of 50 tokens: 8 windows of 64 lanes; at
#: 1,024 lanes it spilled on an A100 and an H100)
CENTRE_WINDOW_LANES = 512
#: the widest window :func:`centre_rows` takes (its lanes: the next power of two)
MAX_WINDOW = 1024


def centre_rows(values: Tensor, lengths: Tensor, window: int, ratio: bool) -> tuple[Tensor, Tensor]:
    """Packed rows centred on their means, with their variances, in one program a row
    (what ``_ratio_kernels.centre_rows`` does on the CPU, on rows already packed).

    Args:
        values: [B, T] float32 or float64, each row's L valid tokens first;
        lengths: [B] int64, L; window: tokens a window of the local variance (at most
            :data:`MAX_WINDOW`); ratio: centre exp(values) rather than the values.

    Returns:
        (centred [B, T] float64, 0 past L; stats [B, 3] float64: the variance, the mean
        of the windows' variances, and 1.0 where the row has energy), on the device.
    """
    if not 1 <= window <= MAX_WINDOW:
        raise ValueError(f"the kernel takes windows of 1 to {MAX_WINDOW} tokens, got {window}")
    kernels = _kernels()
    rows, length = values.shape
    out = torch.empty((rows, length), dtype=torch.float64, device=values.device)
    stats = torch.empty((rows, 3), dtype=torch.float64, device=values.device)
    if rows == 0:
        return out, stats
    window_block = 1 << (window - 1).bit_length()
    kernels.centre_rows[(rows,)](
        values.contiguous(), lengths.to(torch.int64).contiguous(), out, stats, length, window,
        RATIO=ratio, BLOCK_T=CENTRE_BLOCK_T, WINDOW_BLOCK=window_block,
        WINDOWS=max(1, CENTRE_WINDOW_LANES // window_block), num_warps=NUM_WARPS,
    )  # fmt: skip
    return out, stats


def advantage_rows(advantages: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Each row's sums of its positive and negative valid advantages, and their counts,
    in one pass (what ``_kernels.advantage_row_sums`` does on the CPU).

    Args:
        advantages: [B, T] float32 or float64; mask: [B, T] bool.

    Returns:
        (sums [2, B] float64: positive, negative; counts [2, B] int64), on the device.
    """
    kernels = _kernels()
    rows, length = mask.shape
    sums = torch.empty((2, rows), dtype=torch.float64, device=mask.device)
    counts = torch.empty((2, rows), dtype=torch.int64, device=mask.device)
    if rows:
        kernels.advantage_rows[(-(-rows // BLOCK_ROWS),)](
            advantages.contiguous(), mask.contiguous().view(torch.uint8), sums, counts, rows,
            length, BLOCK_ROWS=BLOCK_ROWS, BLOCK_T=BLOCK_T, num_warps=NUM_WARPS,
        )  # fmt: skip
    return sums, counts


def difference_rows(log_probs: Tensor, reference: Tensor, mask: Tensor) -> Tensor:
    """Each row's valid tokens, sum log pi and sum (log pi - log pi_ref) in one pass
    (what ``_kernels.row_sums_and_differences`` does on the CPU).

    Args:
        log_probs, reference: [B, T] float32 or float64; mask: [B, T] bool.

    Returns:
        [3, B] float64 on the device: the counts, the sums, the differences' sums.
    """
    kernels = _kernels()
    rows, length = mask.shape
    sums = torch.empty((3, rows), dtype=torch.float64, device=mask.device)
    if rows:
        kernels.difference_rows[(-(-rows // BLOCK_ROWS),)](
            log_probs.contiguous(), reference.contiguous(), mask.contiguous().view(torch.uint8),
            sums, rows, length, BLOCK_ROWS=BLOCK_ROWS, BLOCK_T=BLOCK_T, num_warps=NUM_WARPS,
        )  # fmt: skip
    return sums


#: tokens a program of :func:`state_runs` reads at once (a power of two)
STATES_BLOCK_T = 1024


def state_runs(
    values: Tensor, mask: Tensor, lower: float, upper: float, window: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The states' counts of each row in one program a row (what ``_kernels.state_runs``
    does on the CPU), from the unpacked signal.

    Args:
        values: [B, T] float32 or float64 log-ratios; mask: [B, T] bool;
        lower, upper: a token is down below ``lower``, up above ``upper`` (values of
            ``values``' dtype); window: tokens a window.

    Returns:
        (lengths [B], state_counts [B, 3], run_counts [B, 3], histogram [3, T + 1],
        changes [B, ceil(T / window)], off [B, T // window]), int64 on the device; off
        counts partial windows too (``token_stats._window_rates`` reads full ones only).
    """
    kernels = _kernels()
    rows, length = mask.shape
    n_changes, n_off = -(-length // window), length // window
    device = mask.device
    counts = torch.empty((rows, 6), dtype=torch.int64, device=device)
    # one fill for the three tallies the kernel adds to
    tallies = torch.zeros(
        3 * (length + 1) + rows * (n_changes + n_off), dtype=torch.int64, device=device
    )
    histogram = tallies[: 3 * (length + 1)].view(3, length + 1)
    changes = tallies[3 * (length + 1) : 3 * (length + 1) + rows * n_changes]
    off = tallies[3 * (length + 1) + rows * n_changes :]
    if rows:
        kernels.state_runs[(rows,)](
            values.contiguous(), mask.contiguous().view(torch.uint8),
            float64_constants((lower, upper), str(device)), counts, histogram, changes, off,
            length, window, n_changes, n_off, BLOCK_T=STATES_BLOCK_T, num_warps=NUM_WARPS,
        )  # fmt: skip
    state_counts, run_counts = counts[:, :3], counts[:, 3:]
    return (
        state_counts.sum(1), state_counts, run_counts, histogram,
        changes.view(rows, n_changes), off.view(rows, n_off),
    )  # fmt: skip


def entropy_quadrants(
    advantages: Tensor, entropy: Tensor, old_entropy: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor]:
    """TEPO's entropy quadrants of the valid tokens in one pass (what
    ``_ratio_kernels.entropy_quadrants`` does on the CPU).

    Args:
        advantages, entropy, old_entropy: [B, T] float32 or float64; mask: [B, T] bool.

    Returns:
        (counts [6] int64: A > 0 with dH < 0, A > 0 otherwise, A < 0 with dH > 0, A < 0
        otherwise, A == 0, all; each row's KL-mask tokens [B] int64), on the device.
    """
    kernels = _kernels()
    rows, length = mask.shape
    counts = torch.zeros(6 + rows, dtype=torch.int64, device=mask.device)
    if rows:
        kernels.entropy_quadrants[(-(-rows // BLOCK_ROWS),)](
            advantages.contiguous(), entropy.contiguous(), old_entropy.contiguous(),
            mask.contiguous().view(torch.uint8), counts, counts[6:], rows, length,
            BLOCK_ROWS=BLOCK_ROWS, BLOCK_T=BLOCK_T, num_warps=NUM_WARPS,
        )  # fmt: skip
    return counts[:6], counts[6:]


#: rows the one program of :func:`aggregation_rows` reads at once (a power of two)
AGGREGATION_BLOCK = 1024
#: its warps: a few [B]-sized columns, no tile worth eight
AGGREGATION_WARPS = 4


def aggregation_rows(clipped: Tensor, first: Tensor, second: Tensor, lengths: Tensor) -> Tensor:
    """A chunk's PPO totals in one program (``surrogate.ppo_aggregation_terms``'s
    numbers, where its tensor code took some twenty-four launches).

    Args:
        clipped: [B] int64; first, second: [B] float64 row sums (strided columns taken as
            they are); lengths: [B] int64.

    Returns:
        [7] float64 on the device: the clipped tokens, the valid tokens, the rows with
        tokens, the sum of ``first`` and of its rows' means over the rows with tokens,
        the same of ``second``.
    """
    kernels = _kernels()
    rows = lengths.shape[0]
    totals = torch.empty(7, dtype=torch.float64, device=lengths.device)
    kernels.aggregation_rows[(1,)](
        clipped.contiguous(), first, second, lengths.contiguous(), totals, rows,
        first.stride(0), second.stride(0), BLOCK=AGGREGATION_BLOCK,
        num_warps=AGGREGATION_WARPS,
    )  # fmt: skip
    return totals


#: values a program of :func:`class_cells` reads at once (a power of two)
CELLS_BLOCK = 1024


def class_cells(values: Tensor, keep: Tensor, log: bool) -> tuple[Tensor, Tensor]:
    """``device_histogram.class_cells`` in one program a cell: the counts and moments of the
    values each cell of [K, C] keeps.

    Args:
        values: [K, B] float32 or float64; keep: [K, C, B] bool; log: bins of log x.

    Returns:
        (counts [K, C, NUM_BINS] int64, moments [K, C, 5] float64), on the device.
    """
    kernels = _kernels()
    rows, classes, length = keep.shape
    counts = torch.zeros((rows, classes, bins.NUM_BINS), dtype=torch.int64, device=keep.device)
    table = torch.empty((rows, classes, 5), dtype=torch.float64, device=keep.device)
    if rows * classes:
        kernels.class_cells[(rows * classes,)](
            values.contiguous(), keep.contiguous().view(torch.uint8), counts, table, classes,
            length, LOG=log, NUM_BINS=bins.NUM_BINS, BLOCK=CELLS_BLOCK, num_warps=NUM_WARPS,
            **_BIN_CONSTANTS,
        )  # fmt: skip
    return counts, table


#: values a program of :func:`histogram_moments` reads at once (a power of two)
HISTOGRAM_BLOCK = 2048
#: the fixed bins, as the kernels take them
_BIN_CONSTANTS = {
    "MIN_EXP": bins.MIN_EXP, "PER_DECADE": bins.PER_DECADE,
    "MAGNITUDE_BINS": bins.MAGNITUDE_BINS, "CENTER": bins.CENTER,
}  # fmt: skip
#: int32 words of the counts in a summary buffer, even so that the float64 parts after
#: them are aligned
_COUNT_WORDS = bins.NUM_BINS + bins.NUM_BINS % 2


def _summary_buffer(programs: int, with_sums: bool, device: torch.device) -> Tensor:
    """A zeroed int32 buffer of [NUM_BINS] counts, [programs, 5] float64 moments and,
    with ``with_sums``, [NUM_BINS] float64 sums: one fill, and one copy back."""
    words = _COUNT_WORDS + 10 * programs + (2 * _COUNT_WORDS if with_sums else 0)
    return torch.zeros(words, dtype=torch.int32, device=device)


def _summary_views(
    summary: Tensor, programs: int, with_sums: bool
) -> tuple[Tensor, Tensor, Tensor | None]:
    """(counts [NUM_BINS] int32, moments [programs, 5] float64, sums [NUM_BINS] float64
    or None): views of a summary buffer."""
    moments_end = _COUNT_WORDS + 10 * programs
    partials = summary[_COUNT_WORDS:moments_end].view(torch.float64).view(programs, 5)
    sums = None
    if with_sums:
        sums = summary[moments_end:].view(torch.float64)[: bins.NUM_BINS]
    return summary[: bins.NUM_BINS], partials, sums


def split_summary(
    summary: Tensor, with_sums: bool = False
) -> tuple[Tensor, MomentSums, Tensor | None]:
    """(counts [NUM_BINS] int64, the moments of all programs merged in order, sums
    [NUM_BINS] float64 or None) of a summary buffer brought to the host."""
    extra = 2 * _COUNT_WORDS if with_sums else 0
    programs = (summary.numel() - _COUNT_WORDS - extra) // 10
    counts, partials, sums = _summary_views(summary, programs, with_sums)
    moments = EMPTY
    for n, mean, spread, low, high in partials.tolist():
        moments = combine_moments(moments, MomentSums(int(n), mean, spread, low, high))
    return counts.long(), moments, sums
