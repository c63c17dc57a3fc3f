"""Capture from verl's actor loss: one call per micro-batch, right after the forward pass.

verl writes no per-token data. Its actor has, at one line of the loss step, every tensor
ratioscope reads: the current log-probs from the forward pass and the micro-batch with
``old_log_probs``, ``advantages``, ``response_mask`` and, when configured,
``rollout_log_probs`` and ``ref_log_prob``. :func:`capture_verl_micro_batch` takes that
micro-batch as verl holds it there and writes it with a
:class:`~ratioscope.capture.CaptureWriter`. The lines to add are in ``docs/capture.md``
("verl"):

* legacy worker (``verl/workers/actor/dp_actor.py``, ``update_policy``): after
  ``old_log_prob`` is chosen (volcengine/verl@b178a3cd, after line 594)::

      capture_verl_micro_batch(WRITER, step, model_inputs, log_prob, entropy,
                               old_log_prob=old_log_prob)

* new engine (verl 0.9.1, ``verl/workers/utils/losses.py``, ``ppo_loss``): after the
  entropy is padded (line 62), before ``data = data.select(...)`` (line 91)::

      capture_verl_micro_batch(WRITER, step, data, log_prob, entropy)

In mode "report", :func:`end_verl_step` ends the step at the end of ``update_policy``
and adds ratioscope's headline quantities to the metrics dict it returns, so they reach
verl's logger (``trainer.logger``: console, W&B, TensorBoard, MLflow, ...) with its own.

verl itself is never imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ratioscope.capture.writer import CaptureWriter
from ratioscope.errors import DumpKeyError

SOURCE = "verl micro-batch"


def capture_verl_micro_batch(
    writer: CaptureWriter,
    step: int,
    data: Any,
    log_prob: Tensor,
    entropy: Tensor | None = None,
    *,
    old_log_prob: Tensor | None = None,
    group: Sequence[str] | Tensor | None = None,
    policy_version: Tensor | None = None,
    trainer_version: int | None = None,
) -> Path | None:
    """Record one verl actor micro-batch with ``writer``.

    Args:
        writer: the capture writer of this rank.
        step: the training step (verl's ``global_steps``, or any counter of updates).
        data: the micro-batch at the hook: the legacy worker's ``model_inputs`` dict
            (tensors and numpy arrays), verl 0.9.1's ``TensorDict`` in ``ppo_loss``
            (nested response fields are padded here), or a ``DataProto``. Keys read:
            ``response_mask`` (required), ``old_log_probs`` (unless ``old_log_prob``
            is given), ``advantages``, ``rollout_log_probs``, ``ref_log_prob``,
            ``responses`` (token ids), ``token_level_scores`` (rewards: their sum over
            the response) and ``uid`` (the GRPO group). Absent optional keys are
            skipped.
        log_prob: [B, R] current log-probs (``outputs["log_probs"]`` / ``log_prob``).
        entropy: [B, R] entropies, or None.
        old_log_prob: [B, R] the old log-probs the loss uses, when they are not
            ``data["old_log_probs"]`` (the legacy worker's on-policy step uses
            ``log_prob.detach()``).
        group: [B] group labels, overriding ``data["uid"]``.
        policy_version, trainer_version: async training (docs/staleness.md): [B] or
            [B, R] versions of the weights that sampled each sequence or token (the
            fully-async trainer's ``non_tensor_batch["min_global_steps"]``) and the
            version being trained (verl counts staleness from ``global_steps - 1``);
            see :meth:`CaptureWriter.write`.

    Returns:
        The part file written, or None (see :meth:`CaptureWriter.write`).

    Raises:
        DumpKeyError: ``response_mask``, or ``old_log_probs`` without ``old_log_prob``,
            is missing from ``data``.
    """
    keys, get = _fields(data)
    width = int(log_prob.shape[1])

    def dense(name: str) -> Tensor | None:
        value = get(name)
        return None if value is None else _dense(value, width)

    mask = dense("response_mask")
    if mask is None:
        raise DumpKeyError(SOURCE, "response_mask", keys)
    if old_log_prob is None:
        old_log_prob = dense("old_log_probs")
        if old_log_prob is None:
            raise DumpKeyError(SOURCE, "old_log_probs", keys, hint="or pass old_log_prob=")
    scores = dense("token_level_scores")
    uid = get("uid")
    if group is None and uid is not None:
        group = _labels(uid)
    return writer.write(
        step,
        mask=mask,
        log_probs=log_prob,
        old_log_probs=old_log_prob,
        rollout_log_probs=dense("rollout_log_probs"),
        ref_log_probs=dense("ref_log_prob"),
        advantages=dense("advantages"),
        entropy=None if entropy is None else _dense(entropy, width),
        rewards=None if scores is None else scores.sum(dim=-1),
        group=group,
        token_ids=dense("responses"),
        policy_version=policy_version,
        trainer_version=trainer_version,
    )


def end_verl_step(
    writer: CaptureWriter, step: int, metrics: dict[str, Any] | None = None
) -> dict[str, float]:
    """End ``step`` and, in mode "report", put its headline quantities into ``metrics``.

    Call it where the actor's ``update_policy`` returns its metrics dict (legacy worker:
    before ``return metrics`` in ``dp_actor.py``; see docs/capture.md, "verl"); verl
    averages each value of that dict (``reduce_metrics``) and hands it to its logger.

    Args:
        writer: the capture writer of this rank.
        step: the step the micro-batches were written under.
        metrics: verl's metrics dict, updated in place (None: only returned).

    Returns:
        ``{"ratioscope/<key>": value}`` (docs/framework-metrics.md); empty in mode
        "tensors" or when the step held no rows.
    """
    writer.end_step(step)
    values = writer.step_metrics(step)
    if metrics is not None:
        metrics.update(values)
    return values


def _fields(data: Any) -> tuple[list[str], Callable[[str], Any]]:
    """The keys of a dict, a TensorDict or a DataProto (batch and non-tensor batch), and
    a getter that returns None for an absent key; values are read only when asked for."""
    if hasattr(data, "batch") and hasattr(data, "non_tensor_batch"):
        batch, non_tensor = data.batch, data.non_tensor_batch
        keys = [*batch.keys(), *non_tensor.keys()]

        def get(name: str) -> Any:
            # a TensorDict iterates over its rows, not its keys
            if name in batch.keys():  # noqa: SIM118
                return batch[name]
            return non_tensor.get(name)

        return [str(k) for k in keys], get
    keys = [str(k) for k in data.keys()]  # noqa: SIM118 (a TensorDict iterates over rows)
    return keys, lambda name: data[name] if name in keys else None


def _dense(value: Any, width: int) -> Tensor:
    """A padded [B, width] tensor: nested (jagged) tensors are padded with 0 and the
    columns cut or padded to the log-probs' width, as verl's ``no_padding_2_padding``
    lays out responses."""
    if not isinstance(value, Tensor):
        value = torch.as_tensor(value)
    if value.is_nested:
        value = value.to_padded_tensor(0)
    if value.dim() == 2 and value.shape[1] != width:
        if value.shape[1] > width:
            value = value[:, :width]
        else:
            value = torch.nn.functional.pad(value, (0, width - value.shape[1]))
    return value


def _labels(value: Any) -> list[str]:
    """verl's ``uid``: a numpy object array (DataProto) or a list-like (TensorDict)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    return [str(v) for v in value]
