"""Capture from OpenRLHF's actor training step: one call per micro-batch ``Experience``.

OpenRLHF writes no per-sample or per-token files. In ``PolicyActor.training_step``
(``openrlhf/trainer/ray/ppo_actor.py``; OpenRLHF/OpenRLHF@3c3be623, lines 294-304) the
actor forward returns ``action_log_probs`` and the ``Experience`` holds the rest; the
line to add after the forward is in ``docs/capture.md`` ("OpenRLHF")::

    capture_openrlhf_experience(WRITER, step, experience, action_log_probs,
                                output.entropy if return_entropy else None)

OpenRLHF's per-action tensors are ``[B, A]`` with ``A = T - 1``: column ``i`` scores the
token ``sequences[:, T - A + i]``, rows are right-padded ``[prompt + response]``
sequences, so the first response token of each row sits at a different column (the
``action_mask`` is False on the prompt). ratioscope indexes tokens from the first valid
one (causal filters, windows), so :func:`capture_openrlhf_experience` shifts every row
left to start at its first action token. OpenRLHF itself is never imported.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ratioscope.capture.writer import CaptureWriter
from ratioscope.errors import DumpKeyError

SOURCE = "OpenRLHF experience"


def capture_openrlhf_experience(
    writer: CaptureWriter,
    step: int,
    experience: Any,
    action_log_probs: Tensor,
    entropy: Tensor | None = None,
    *,
    old_action_log_probs: Tensor | None = None,
    group: Sequence[str] | Sequence[int] | Tensor | None = None,
) -> Path | None:
    """Record one OpenRLHF micro-batch with ``writer``.

    Args:
        writer: the capture writer of this rank.
        step: the training step (e.g. a counter of ``ppo_train`` calls; the ``step``
            argument of ``training_step`` counts micro-batches within an epoch).
        experience: the ``Experience`` (any object with its attributes). Read:
            ``action_mask`` [B, A] (required), ``action_log_probs`` (old, unless
            ``old_action_log_probs`` is given), ``rollout_log_probs``,
            ``base_action_log_probs`` (reference), ``advantages`` [B, A],
            ``sequences`` [B, T] (token ids), ``rewards`` [B] and ``prompts`` (the
            group, by prompt text). Absent (None) optional fields are skipped.
        action_log_probs: [B, A] current log-probs from the actor forward.
        entropy: [B, A] entropies, or the actor's ``output.entropy`` [B, T - 1] (its
            last ``A`` columns are used), or None.
        old_action_log_probs: [B, A], when the loss uses other old log-probs than
            ``experience.action_log_probs``.
        group: [B] group labels, overriding the prompt text.

    Returns:
        The part file written, or None (see :meth:`CaptureWriter.write`).

    Raises:
        DumpKeyError: the experience has no ``action_mask``, or no old log-probs.
    """
    mask = getattr(experience, "action_mask", None)
    if mask is None:
        raise DumpKeyError(SOURCE, "action_mask", _names(experience))
    if old_action_log_probs is None:
        old_action_log_probs = getattr(experience, "action_log_probs", None)
        if old_action_log_probs is None:
            raise DumpKeyError(
                SOURCE, "action_log_probs", _names(experience), hint="or pass old_action_log_probs="
            )
    actions = int(mask.shape[1])
    per_action = {
        "log_probs": action_log_probs,
        "old_log_probs": old_action_log_probs,
        "rollout_log_probs": getattr(experience, "rollout_log_probs", None),
        "ref_log_probs": getattr(experience, "base_action_log_probs", None),
        "advantages": getattr(experience, "advantages", None),
        "entropy": None if entropy is None else entropy[:, -actions:],
    }
    sequences = getattr(experience, "sequences", None)
    if sequences is not None:
        per_action["token_ids"] = sequences[:, -actions:]
    aligned_mask, aligned = left_align(mask, per_action)
    if group is None:
        prompts = getattr(experience, "prompts", None)
        if prompts is not None and len(prompts) == mask.shape[0]:
            group = [str(p) for p in prompts]
    return writer.write(
        step,
        mask=aligned_mask,
        rewards=getattr(experience, "rewards", None),
        group=group,
        **aligned,
    )


def left_align(mask: Tensor, tensors: dict[str, Tensor | None]) -> tuple[Tensor, dict[str, Any]]:
    """Shift each row left so that its first valid column becomes column 0.

    Args:
        mask: [B, A] bool (or 0/1), valid positions.
        tensors: name -> [B, A] tensor (or None, passed through).

    Returns:
        (the shifted mask [B, W] bool, the shifted tensors [B, W]), W = A - the smallest
        first-valid column; vacated columns are masked and hold 0.

    >>> m = torch.tensor([[0, 0, 1, 1], [0, 1, 1, 0]]).bool()
    >>> x = torch.arange(8.0).reshape(2, 4)
    >>> mask, out = left_align(m, {"x": x})
    >>> mask.int().tolist(), out["x"].tolist()
    ([[1, 1, 0], [1, 1, 0]], [[2.0, 3.0, 0.0], [5.0, 6.0, 7.0]])
    """
    mask = mask.bool()
    rows, width = mask.shape
    # argmax of a bool row is its first True; rows without one stay where they are
    first = torch.where(
        mask.any(dim=1), mask.int().argmax(dim=1), torch.zeros_like(mask[:, 0], dtype=torch.long)
    )
    shifted_width = width - int(first.min()) if rows else width
    columns = first[:, None] + torch.arange(shifted_width, device=mask.device)[None, :]
    inside = columns < width
    columns = columns.clamp(max=width - 1)

    def shift(value: Tensor) -> Tensor:
        taken = value.gather(1, columns.to(value.device))
        return taken.masked_fill(~inside.to(value.device), 0)

    shifted = {name: None if value is None else shift(value) for name, value in tensors.items()}
    return shift(mask), shifted


def _names(experience: Any) -> list[str]:
    return [name for name, value in vars(experience).items() if value is not None]
