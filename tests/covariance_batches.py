"""Random batches for the covariance section's compiled passes (numba and Triton)
against its torch path: interleaved groups spanning chunks, an empty row, a masked token
inside a row, a group whose advantages are all equal (flat weights), and log-ratios
packed around the PPO clip bounds (Clip-Cov leaves out clipped tokens)."""

from __future__ import annotations

import numpy as np
import torch

#: the PPO clip (eps_low, eps_high) the batches pack log-ratios around
CLIP = (0.2, 0.28)


def covariance_arrays(
    seed: int, rows: int = 40, width: int = 33, dtype=np.float32
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, size=rows)
    lengths[3] = 0  # an empty row
    mask = np.arange(width)[None, :] < lengths[:, None]
    mask[5, 0] = False  # a masked token inside a row
    group = rng.permutation(np.arange(rows) % 7)  # groups spread over every chunk
    adv = rng.normal(size=rows)
    adv[group == 2] = 0.5  # equal advantages: sigma counts as 0, flat weights
    old = -rng.gamma(1.0, 0.8, size=(rows, width))
    # log-ratios on both sides of the clip bounds, some exactly at their float32 value
    z = rng.normal(0.0, 0.25, size=(rows, width))
    edges = np.log(np.array([1 + CLIP[1], 1 - CLIP[0]], dtype=np.float32).astype(np.float64))
    z[::4, ::3] = rng.choice(edges, size=z[::4, ::3].shape)
    new = old + z
    new[0, :4] -= 5.0  # covariances inside Clip-Cov's band (1, 5)
    return {
        "mask": mask,
        "old_log_probs": old.astype(dtype),
        "log_probs": new.astype(dtype),
        "advantages": (np.repeat(adv[:, None], width, axis=1) * mask).astype(dtype),
        "group": group,
    }


def write_arrays(arrays: dict[str, np.ndarray], path) -> None:
    from safetensors.torch import save_file

    save_file({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}, str(path))
