"""The token vitals of a batch in one compiled pass.

The ``vitals`` section bins and takes the moments of the token entropy, sums it over
correct and incorrect rows, sums the behaviour policy's entropy and the change, sums
|A| per row and counts A == 0, and takes the centred co-moments of the entropy
mechanics (:mod:`ratioscope.functional.vitals`). In tensor code that is a dozen masked
selects, float64 copies and reductions; :func:`vitals_rows` does it in one loop over
each row (and one more for the centred sums) on CPU tensors, the rows in parts on the
threads torch may use (:func:`ratioscope.functional._kernels.map_row_parts`), each
part's moments and co-moments merged in order. The tensor code stays the reference and
the path for other devices; the two agree to rounding (sums added in another order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ratioscope.functional import _kernels
from ratioscope.functional import histogram as bins
from ratioscope.functional.moments import EMPTY, MomentSums, combine_moments
from ratioscope.functional.vitals import CoMoments, TokenSums


@dataclass(frozen=True)
class VitalsRows:
    """What one pass gives (None where its input is absent).

    Attributes:
        counts: [NUM_BINS] int64 counts of the valid entropies in the fixed bins.
        moments: (count, mean, sum of squared deviations, min, max) of the entropies.
        right, wrong: entropy sums over the correct and the incorrect rows.
        old: the old entropy's sums; change: those of ``entropy - old_entropy``.
        row_abs, row_tokens: [B] float64 sums of |A| and [B] int64 valid tokens.
        zero: valid tokens with A == 0.
        pairs_a, pairs_pa: the co-moments of (log pi, A) and (log pi, pi A).
    """

    counts: Tensor | None
    moments: MomentSums | None
    right: TokenSums | None
    wrong: TokenSums | None
    old: TokenSums | None
    change: TokenSums | None
    row_abs: Tensor | None
    row_tokens: Tensor | None
    zero: int
    pairs_a: CoMoments | None
    pairs_pa: CoMoments | None


def usable(*values: Tensor | None, mask: Tensor) -> bool:
    """Whether :func:`vitals_rows` can take these: numba available, CPU float32/float64
    values of the mask's shape, at least one of them present; or Triton, on a GPU
    (:func:`on_gpu`)."""
    present = [v for v in values if v is not None]
    return bool(present) and (_kernels.can_take(*present, mask=mask) or on_gpu(*values, mask=mask))


def on_gpu(*values: Tensor | None, mask: Tensor) -> bool:
    """Whether :func:`vitals_rows` runs the Triton kernel: float32/float64 values of the
    mask's shape off the CPU, where :func:`ratioscope.functional._triton_kernels.can_take`
    them."""
    from ratioscope.functional import _triton_kernels

    return _triton_kernels.on_gpu(*(v for v in values if v is not None), mask=mask)


def vitals_rows(
    entropy: Tensor | None,
    old_entropy: Tensor | None,
    advantages: Tensor | None,
    log_probs: Tensor | None,
    mask: Tensor,
    correct: Tensor | None,
    *,
    triton: bool | None = None,
) -> VitalsRows:
    """The vitals of the valid tokens (see :class:`VitalsRows`).

    Args:
        entropy, old_entropy, advantages: [B, T] float or None.
        log_probs: [B, T] float, the log-probs of the entropy mechanics (read only with
            ``advantages``), or None.
        mask: [B, T] bool; correct: [B] bool or None.
        triton: the Triton kernel (True), the numba loop (False), or the Triton kernel
            where :func:`on_gpu` (None). The kernel's results come back to the host in
            one read.
    """
    from ratioscope.functional import _vitals_kernels as k

    inputs = (entropy, old_entropy, advantages, log_probs)
    flags = (
        entropy is not None, old_entropy is not None, advantages is not None,
        advantages is not None and log_probs is not None, correct is not None,
    )  # fmt: skip
    if on_gpu(*inputs, mask=mask) if triton is None else triton:
        from ratioscope.functional import _triton_kernels

        summary = _triton_kernels.vitals_rows(inputs, mask, correct)
        counts, slots, kernel_abs, kernel_tokens = _triton_kernels.split_vitals(
            summary.cpu(), mask.shape[0]
        )  # one read
        return _merged(flags, counts, slots, kernel_abs, kernel_tokens)
    rows = mask.shape[0]
    valid = mask.numpy()
    given = [v for v in (entropy, old_entropy, advantages, log_probs) if v is not None]
    stand_in = given[0].detach().numpy()  # read by no loop: a flag says it is absent

    def array(values: Tensor | None) -> np.ndarray:
        return stand_in if values is None else values.detach().numpy()

    right = (
        correct.to(torch.bool).numpy()
        if correct is not None
        else np.zeros(rows, dtype=np.bool_)
    )  # fmt: skip
    row_abs = np.zeros(rows, dtype=np.float64)
    row_tokens = np.zeros(rows, dtype=np.int64)
    arrays = (array(entropy), array(old_entropy), array(advantages), array(log_probs))

    def part(start: int, stop: int) -> tuple[np.ndarray, list[float]]:
        counts = np.zeros(bins.NUM_BINS, dtype=np.int64)
        sums = np.zeros(k.SLOTS, dtype=np.float64)
        # pi A of each valid token, from the first loop to the second
        products = np.empty(valid[start:stop].size if flags[3] else 1, dtype=np.float64)
        k.vitals_rows(
            *(values[start:stop] for values in arrays), valid[start:stop], right[start:stop],
            *flags, counts, sums, row_abs[start:stop], row_tokens[start:stop], products,
        )  # fmt: skip
        return counts, sums.tolist()

    parts = _kernels.map_row_parts(part, rows)
    counts = torch.from_numpy(np.sum([c for c, _ in parts], axis=0))
    return _merged(
        flags, counts, [s for _, s in parts], torch.from_numpy(row_abs),
        torch.from_numpy(row_tokens),
    )  # fmt: skip


def _merged(
    flags: tuple[bool, bool, bool, bool, bool],
    counts: Tensor,
    parts: list[list[float]],
    row_abs: Tensor,
    row_tokens: Tensor,
) -> VitalsRows:
    """:class:`VitalsRows` of the parts' slots (``_vitals_kernels``' order), merged in
    order: the numbers do not depend on how the rows were cut."""
    from ratioscope.functional import _vitals_kernels as k

    moments = EMPTY
    right_sums, wrong_sums, old_sums, change_sums = (TokenSums() for _ in range(4))
    pairs_a, pairs_pa = CoMoments(), CoMoments()
    zero = 0
    for s in parts:
        moments = combine_moments(
            moments,
            MomentSums(int(s[k.ENTROPY_N]), s[k.ENTROPY_MEAN], s[k.ENTROPY_M2],
                       s[k.ENTROPY_MIN], s[k.ENTROPY_MAX]),
        )  # fmt: skip
        right_sums.merge(TokenSums(s[k.RIGHT_TOTAL], int(s[k.RIGHT_N])))
        wrong_sums.merge(TokenSums(s[k.WRONG_TOTAL], int(s[k.WRONG_N])))
        old_sums.merge(TokenSums(s[k.OLD_TOTAL], int(s[k.OLD_N])))
        change_sums.merge(TokenSums(s[k.CHANGE_TOTAL], int(s[k.CHANGE_N])))
        zero += int(s[k.ZERO_ADVANTAGES])
        count = int(s[k.PAIRS_N])
        pairs_a.merge(CoMoments(count, s[k.MEAN_X], s[k.MEAN_A], s[k.COMOMENT_A]))
        pairs_pa.merge(CoMoments(count, s[k.MEAN_X], s[k.MEAN_PA], s[k.COMOMENT_PA]))
    has_entropy, has_old, has_adv, has_pairs, has_correct = flags
    return VitalsRows(
        counts=counts if has_entropy else None,
        moments=moments if has_entropy else None,
        right=right_sums if has_entropy and has_correct else None,
        wrong=wrong_sums if has_entropy and has_correct else None,
        old=old_sums if has_old else None,
        change=change_sums if has_entropy and has_old else None,
        row_abs=row_abs if has_adv else None,
        row_tokens=row_tokens if has_adv else None,
        zero=zero,
        pairs_a=pairs_a if has_pairs else None,
        pairs_pa=pairs_pa if has_pairs else None,
    )
