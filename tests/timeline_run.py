"""A synthetic training run for the timeline tests: canonical dumps, one or more per step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


def write_step(path: Path, seed: int, noise: float, rows: int = 32, width: int = 48) -> Path:
    """One dump whose log-ratio log_probs - old_log_probs is N(0, noise^2) per token."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(width // 2, width + 1, size=rows)
    mask = np.arange(width)[None, :] < lengths[:, None]
    old = -rng.gamma(1.0, 0.8, size=(rows, width))
    new = old + rng.normal(0.0, noise, size=(rows, width))
    rollout = old + rng.normal(0.0, 0.01, size=(rows, width))
    rewards = rng.integers(0, 2, size=rows).astype(np.float64)
    group = np.arange(rows) // 8
    adv = np.zeros(rows)
    for g in np.unique(group):
        r = rewards[group == g]
        adv[group == g] = (r - r.mean()) / (r.std() + 1e-6)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "mask": torch.tensor(mask),
            "log_probs": torch.tensor(new, dtype=torch.float32),
            "old_log_probs": torch.tensor(old, dtype=torch.float32),
            "rollout_log_probs": torch.tensor(rollout, dtype=torch.float32),
            "advantages": torch.tensor(np.repeat(adv[:, None], width, axis=1), dtype=torch.float32),
            "rewards": torch.tensor(rewards),
            "group": torch.tensor(group),
        },
        path,
    )
    return path


def write_run(
    directory: Path, steps: int, jump_at: int | None = None, ranks: int = 1
) -> list[Path]:
    """``steps`` steps (``step_N/rank_R.pt``); log-ratio noise 0.05, 0.3 from ``jump_at``."""
    files = []
    for step in range(steps):
        noise = 0.3 if jump_at is not None and step >= jump_at else 0.05
        for rank in range(ranks):
            path = directory / f"step_{step}" / f"rank_{rank}.pt"
            files.append(write_step(path, seed=1000 * step + rank, noise=noise))
    return files


def comparable(result) -> dict:
    """A timeline's document without what names the tool (version, time)."""
    document = result.to_dict()
    document.pop("tool", None)
    return document
