"""AReaL's PPO batch (decoupled PPO: a policy version on every token).

Verified against inclusionAI/AReaL at 4aef98d8 (2026-05-21): ``areal/workflow/rlvr.py``
builds each trajectory aligned to the token itself (``logprobs``, ``loss_mask`` and
``versions``, -1 on prompt tokens; right-padded with 0 when batched), and
``PPOActor.compute_advantages`` (``areal/trainer/ppo/actor.py``, run before
``ppo_update``) rolls ``loss_mask`` and ``logprobs`` one position left, so that position t
holds the log-prob of token t + 1, the alignment of the recomputed ``prox_logp`` and of
the ``advantages``; ``versions`` and ``input_ids`` are not rolled. A dump of the batch
``ppo_update`` receives is read here with ``versions`` and ``input_ids`` rolled the same
way, so every column speaks of the same token.

Columns: ``loss_mask`` (mask), ``prox_logp`` (the trainer's recomputed, proximal
log-probs: old), ``logprobs`` (the inference engine's: rollout), ``advantages``,
``rewards`` [B], ``versions``. There is no current-policy log-prob (the ratio is
old/engine) and no prompt id: a prompt's samples are consecutive (``--group-size``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ratioscope.data.raw import RawDump

#: fields that identify the layout
SIGNATURE = ("prox_logp", "versions", "logprobs", "loss_mask", "attention_mask")
#: columns in the workflow's own alignment (token t), one position behind the others
UNROLLED = ("versions", "input_ids")


def prepare(path: Path, raw: RawDump) -> RawDump:
    """``versions`` and ``input_ids`` rolled one position left, as AReaL rolls
    ``loss_mask`` and ``logprobs`` (the last position takes the first's, a prompt
    token under a mask of 0)."""
    for key in UNROLLED:
        value = raw.columns.get(key)
        if isinstance(value, torch.Tensor) and value.dim() == 2:
            raw.columns[key] = torch.roll(value, shifts=-1, dims=-1)
    return raw
