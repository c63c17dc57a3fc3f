"""NeMo-RL's GRPO train data (``train_data_step{N}.jsonl``).

Verified against NVIDIA-NeMo/RL at 7ea279abfbeb (2026-08-22),
``nemo_rl/algorithms/grpo.py`` (the block after ``policy.train``) and
``nemo_rl/utils/logger.py`` (``log_batched_dict_as_jsonl``):

* one sample a line; every value but ``idx`` is wrapped in a one-element list, because
  the logger writes slices of one row of a batched dict;
* per token over prompt and completion, right-padded to the batch: ``token_ids``,
  ``token_loss_mask`` (generated assistant tokens), ``advantages``, ``prev_logprobs``
  (the old policy, recomputed by the trainer before the update) and
  ``generation_logprobs`` (vLLM); per sample ``rewards``, ``sample_loss_mask`` (0 for
  samples the loss ignores) and ``input_lengths``;
* no current-policy log-probs (the ratio is the train/inference mismatch) and no prompt
  id: the samples of a prompt share its tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ratioscope.data.raw import RawDump, is_rows
from ratioscope.io.frameworks.common import prompt_label

#: fields that identify the layout
SIGNATURE = ("token_loss_mask", "prev_logprobs", "generation_logprobs")
PROMPT_GROUP = "prompt_prefix_group"


def unwrap(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records with their one-element lists opened; other records unchanged."""
    first = records[0]
    if not all(k in first for k in SIGNATURE):
        return records
    return [
        {
            key: value[0] if key != "idx" and isinstance(value, list) and len(value) == 1 else value
            for key, value in record.items()
        }
        for record in records
    ]


def prepare(path: Path, raw: RawDump) -> RawDump:
    """Trained tokens of samples the loss uses, within each sample's length; groups."""
    columns = raw.columns
    masks, tokens = columns.get("token_loss_mask"), columns.get("token_ids")
    if not is_rows(masks):
        return raw
    lengths = columns.get("input_lengths")
    samples = columns.get("sample_loss_mask")
    kept = []
    for row, mask in enumerate(masks):
        valid = mask.bool().clone()
        if isinstance(lengths, torch.Tensor):
            valid[int(lengths[row]) :] = False
        if isinstance(samples, torch.Tensor) and float(samples[row]) == 0.0:
            valid[:] = False
        kept.append(valid)
    dropped = sum(int(m.bool().sum() - k.sum()) for m, k in zip(masks, kept, strict=True))
    if dropped:
        raw.warn(
            f"NeMo-RL: {dropped} loss-mask token(s) of samples with sample_loss_mask 0 or past "
            "input_lengths are left out"
        )
    if is_rows(tokens):
        # the prompt ends where generation starts, also in samples the loss ignores
        columns[PROMPT_GROUP] = [prompt_label(t, m) for t, m in zip(tokens, masks, strict=True)]
    columns["token_loss_mask"] = kept
    return raw
