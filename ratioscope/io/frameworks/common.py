"""Pieces that several framework readers share."""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor


def prompt_label(tokens: Tensor, mask: Tensor, extra: object = None) -> str:
    """A short stable label of the tokens before the first trained one (and ``extra``,
    e.g. the environment): samples of one prompt share it, as GRPO groups do.

    Args:
        tokens: [T] int, prompt and completion of one sample.
        mask: [T] bool or 0/1, the trained tokens.
    """
    trained = mask.bool().nonzero()
    start = int(trained[0, 0]) if trained.numel() else int(tokens.numel())
    digest = hashlib.sha1(usedforsecurity=False)
    digest.update(str(extra).encode())
    digest.update(tokens[:start].to(torch.int64).numpy().tobytes())
    return f"prompt-{digest.hexdigest()[:12]}"
