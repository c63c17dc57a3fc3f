"""prime-rl's token export (``enable_token_export = true``).

Verified against PrimeIntellect-ai/prime-rl at 559b44772e47 (2026-08-21),
``src/prime_rl/trainer/rl/token_export.py`` and ``src/prime_rl/trainer/rl/loss.py``:

* ``token_exports/step_N/rank_R.jsonl``, one training sample (one rollout branch) a line,
  per-token lists over prompt and completion; ``loss_mask`` marks the trained tokens.
* ``trainer_logprobs`` (the trainer at the loss step) and ``inference_logprobs`` (the
  engine that sampled): prime-rl keeps no separate old policy, its importance ratio is
  trainer / inference (``log_importance_ratio``, ``mismatch_kl`` = r - log r - 1).
* No reward and no example id since 2026-06-27 (commit 0be5ac452): the samples of one
  prompt are recognised by their identical prompt tokens (the tokens before the first
  trained one).
* ``rl_weights`` scale the policy-gradient loss; a token of weight 0 is not trained by it
  (an all-null stream means weight 1 on the loss mask). ``is_masked`` is the DPPO trust
  region of the default loss (probability moved by more than 0.2 in the direction of the
  advantage): those tokens get no policy gradient.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from ratioscope.data.raw import RawDump, is_rows
from ratioscope.io.frameworks.common import prompt_label

#: derived column: one label per sample, equal for samples with the same prompt tokens
PROMPT_GROUP = "prompt_prefix_group"


def prepare(path: Path, raw: RawDump) -> RawDump:
    """Groups from prompt prefixes, the policy-gradient mask from ``rl_weights``, and a
    note with the share of trained tokens the DPPO mask removed."""
    masks = raw.columns.get("loss_mask")
    if not is_rows(masks) or "loss_mask" not in raw.ragged:
        return raw
    tokens = raw.columns.get("token_ids")
    has_id = any(k in raw.columns for k in ("example_id", "problem_id"))
    if is_rows(tokens) and not has_id:
        envs = raw.columns.get("env_name")
        raw.columns[PROMPT_GROUP] = [
            prompt_label(row, mask, envs[i] if isinstance(envs, list) else None)
            for i, (row, mask) in enumerate(zip(tokens, masks, strict=True))
        ]
    weights = raw.columns.get("rl_weights")
    if is_rows(weights) and "rl_weights" in raw.ragged:
        raw.columns["loss_mask"] = [
            _weighted_mask(mask, weight) for mask, weight in zip(masks, weights, strict=True)
        ]
        dropped = sum(
            int(m.bool().sum() - n.sum())
            for m, n in zip(masks, raw.columns["loss_mask"], strict=True)
        )
        if dropped:
            raw.warn(
                f"prime-rl: {dropped} trained token(s) with rl_weights 0 (no policy-gradient "
                "loss) are left out"
            )
    masked = raw.columns.get("is_masked")
    if is_rows(masked) and "is_masked" in raw.ragged:
        trained = sum(int(m.bool().sum()) for m in raw.columns["loss_mask"])
        hits = sum(
            int((m.bool() & _true(x)).sum())
            for m, x in zip(raw.columns["loss_mask"], masked, strict=True)
        )
        if trained and hits:
            raw.warn(
                f"prime-rl: is_masked (DPPO trust region) on {hits} of {trained} trained "
                f"tokens ({100 * hits / trained:.2f}%); ratioscope reports their ratios too, "
                "before any masking"
            )
    return raw


def _weighted_mask(mask: Tensor, weights: Tensor) -> Tensor:
    """Trained tokens whose rl weight is not 0 (a null weight counts as 1)."""
    zero = weights.double() == 0  # NaN (null) compares False: weight 1
    return mask.bool() & ~zero


def _true(values: Tensor) -> Tensor:
    """bool/0-1/NaN(null) per token -> True where set."""
    if values.dtype == torch.bool:
        return values
    return torch.nan_to_num(values.double(), nan=0.0) != 0
