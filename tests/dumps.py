"""Small dumps written in each framework's real layout and file type, for the tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass
class Reference:
    """What a fixture file holds, in canonical terms, for independent checks."""

    mask: np.ndarray  # [B, T] bool, right-padded
    log_probs: np.ndarray  # [B, T] float64
    old_log_probs: np.ndarray
    advantages: np.ndarray  # [B, T]
    rewards: np.ndarray  # [B]
    group: list  # [B] labels
    rollout_log_probs: np.ndarray | None = None
    ref_log_probs: np.ndarray | None = None
    entropy: np.ndarray | None = None
    token_ids: np.ndarray | None = None

    @property
    def z(self) -> np.ndarray:
        return self.log_probs - self.old_log_probs


def make_reference(seed: int = 0, rows: int = 8, width: int = 12, group_size: int = 4) -> Reference:
    """A small ragged batch with GRPO-like groups and a real off-policy log-ratio."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, width + 1, size=rows)
    lengths[0] = width
    mask = np.arange(width)[None, :] < lengths[:, None]
    old = -rng.gamma(1.0, 0.8, size=(rows, width))
    new = old + rng.normal(0, 0.15, size=(rows, width))
    rollout = old + rng.normal(0, 0.01, size=(rows, width))
    ref = old + rng.normal(0, 0.3, size=(rows, width))
    rewards = rng.integers(0, 2, size=rows).astype(np.float64)
    group = [f"prompt-{i // group_size}" for i in range(rows)]
    adv = np.zeros(rows)
    for label in set(group):
        idx = [i for i, g in enumerate(group) if g == label]
        r = rewards[idx]
        adv[idx] = (r - r.mean()) / (r.std() + 1e-6)
    advantages = np.repeat(adv[:, None], width, axis=1)
    entropy = rng.uniform(0.1, 2.0, size=(rows, width))
    token_ids = rng.integers(0, 50, size=(rows, width))
    # padding holds garbage that must never leak into results
    for array in (old, new, rollout, ref, advantages, entropy):
        array[~mask] = 123.0
    return Reference(
        mask=mask,
        log_probs=new,
        old_log_probs=old,
        advantages=advantages,
        rewards=rewards,
        group=group,
        rollout_log_probs=rollout,
        ref_log_probs=ref,
        entropy=entropy,
        token_ids=token_ids,
    )


def _t(array: np.ndarray, dtype=torch.float32) -> torch.Tensor:
    return torch.tensor(array, dtype=dtype)


def _rows(array: np.ndarray, mask: np.ndarray) -> list[list[float]]:
    return [array[i, : int(mask[i].sum())].tolist() for i in range(mask.shape[0])]


def write_layout(ref: Reference, layout: str, directory: Path, name: str = "dump") -> Path:
    """Write ``ref`` as a framework would: verl, trl, prime-rl, slime or canonical files."""
    m = ref.mask
    if layout == "verl":
        scores = np.zeros_like(ref.log_probs)
        last = m.sum(1) - 1
        scores[np.arange(len(last)), last] = ref.rewards
        path = directory / f"{name}.pt"
        torch.save(
            {
                "response_mask": _t(m, torch.int64),
                "old_log_probs": _t(ref.old_log_probs),
                "log_probs": _t(ref.log_probs),
                "ref_log_prob": _t(ref.ref_log_probs),
                "rollout_log_probs": _t(ref.rollout_log_probs),
                "advantages": _t(ref.advantages),
                "entropys": _t(ref.entropy),
                "token_level_scores": _t(scores),
                "uid": list(ref.group),
                "responses": _t(ref.token_ids, torch.int64),
            },
            path,
        )
    elif layout == "trl":
        path = directory / f"{name}.pt"
        torch.save(
            {
                "completion_mask": _t(m, torch.int64),
                "old_per_token_logps": _t(ref.old_log_probs),
                "per_token_logps": _t(ref.log_probs),
                "ref_per_token_logps": _t(ref.ref_log_probs),
                "sampling_per_token_logps": _t(ref.rollout_log_probs),
                "advantages": _t(ref.advantages[:, 0]),
                "completion_ids": _t(ref.token_ids, torch.int64),
                "rewards": _t(ref.rewards),
            },
            path,
        )
    elif layout == "prime-rl":
        path = directory / f"{name}.jsonl"
        prompt = 3
        with path.open("w") as handle:
            for i in range(m.shape[0]):
                n = int(m[i].sum())
                line = {
                    "schema_version": 1,
                    "step": 7,
                    "rank": 0,
                    "micro_step": 0,
                    "env_name": "arith",
                    "example_id": ref.group[i],
                    "token_ids": [1, 2, 3, *ref.token_ids[i, :n].tolist()],
                    "inference_logprobs": [None] * prompt + ref.old_log_probs[i, :n].tolist(),
                    "trainer_logprobs": [None] * prompt + ref.log_probs[i, :n].tolist(),
                    "loss_mask": [False] * prompt + [True] * n,
                    "advantages": [0.0] * prompt + ref.advantages[i, :n].tolist(),
                    "rewards": [float(ref.rewards[i])] * (prompt + n),
                    "entropy": [0.0] * prompt + ref.entropy[i, :n].tolist(),
                    "losses": [{"pg": 0.0}] * (prompt + n),
                }
                handle.write(json.dumps(line) + "\n")
    elif layout == "slime":
        # slime v0.3.1, slime/utils/train_dump_utils.py + slime/ray/rollout.py
        # (THUDM/slime a6272da0d4f3): `{rollout_id}_{rank}.pt` with the rank's samples under
        # "rollout_data"; `log_probs` are the old policy recomputed by the trainer, the
        # engine's are `rollout_log_probs`; `rewards` are group-normalised and the raw ones
        # are `raw_reward` for the whole rollout, placed by the rollout dump
        # (`D/rollout_data/{rollout_id}.pt`, samples with `index` and `group_index`).
        rows = range(m.shape[0])
        n = [int(m[i].sum()) for i in rows]
        labels = list(dict.fromkeys(ref.group))
        normalised = ref.advantages[:, 0]
        train = directory / "train_data"
        train.mkdir(exist_ok=True)
        path = train / f"{name}.pt"
        torch.save(
            {
                "rollout_id": 3,
                "rank": 0,
                "rollout_data": {
                    "tokens": [torch.tensor([1, 2, *ref.token_ids[i, : n[i]]]) for i in rows],
                    "response_lengths": n,
                    "total_lengths": [n[i] + 2 for i in rows],
                    "loss_masks": [torch.ones(n[i], dtype=torch.int32) for i in rows],
                    "log_probs": [_t(ref.old_log_probs[i, : n[i]]) for i in rows],
                    "rollout_log_probs": [_t(ref.rollout_log_probs[i, : n[i]]) for i in rows],
                    "advantages": [_t(ref.advantages[i, : n[i]]) for i in rows],
                    "rewards": [float(r) for r in normalised],
                    "raw_reward": [float(r) for r in ref.rewards],
                    "sample_indices": [100 + i for i in rows],
                    "truncated": [0 for _ in rows],
                },
            },
            path,
        )
        rollout = directory / "rollout_data"
        rollout.mkdir(exist_ok=True)
        samples = [
            {
                "group_index": labels.index(ref.group[i]),
                "index": 100 + i,
                "response_length": n[i],
                "reward": float(ref.rewards[i]),
                "status": "completed",
                "rollout_log_probs": ref.rollout_log_probs[i, : n[i]].tolist(),
            }
            for i in rows
        ]
        torch.save({"rollout_id": 3, "samples": samples}, rollout / "3.pt")
    else:
        raise ValueError(layout)
    return path


def write_canonical(ref: Reference, suffix: str, directory: Path, name: str = "dump") -> Path:
    """Write ``ref`` with canonical keys in one of the five file types."""
    path = directory / f"{name}{suffix}"
    dense = {
        "mask": ref.mask,
        "log_probs": ref.log_probs.astype(np.float32),
        "old_log_probs": ref.old_log_probs.astype(np.float32),
        "advantages": ref.advantages.astype(np.float32),
        "rewards": ref.rewards,
    }
    if suffix in (".pt", ".pth"):
        torch.save({k: torch.tensor(v) for k, v in dense.items()}, path)
    elif suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: torch.tensor(v) for k, v in dense.items()}, str(path))
    elif suffix == ".npz":
        np.savez(path, **dense)
    elif suffix == ".parquet":
        import polars as pl

        m = ref.mask
        pl.DataFrame(
            {
                "mask": [[True] * int(m[i].sum()) for i in range(m.shape[0])],
                "log_probs": _rows(ref.log_probs.astype(np.float32).astype(np.float64), m),
                "old_log_probs": _rows(ref.old_log_probs.astype(np.float32).astype(np.float64), m),
                "advantages": _rows(ref.advantages.astype(np.float32).astype(np.float64), m),
                "rewards": ref.rewards,
            }
        ).write_parquet(path)
    elif suffix == ".jsonl":
        m = ref.mask
        with path.open("w") as handle:
            for i in range(m.shape[0]):
                n = int(m[i].sum())
                handle.write(
                    json.dumps(
                        {
                            "mask": [1] * n,
                            "log_probs": dense["log_probs"][i, :n].astype(float).tolist(),
                            "old_log_probs": dense["old_log_probs"][i, :n].astype(float).tolist(),
                            "advantages": dense["advantages"][i, :n].astype(float).tolist(),
                            "rewards": float(ref.rewards[i]),
                        }
                    )
                    + "\n"
                )
    else:
        raise ValueError(suffix)
    return path


LAYOUTS = ("verl", "trl", "prime-rl", "slime")
SUFFIXES = (".pt", ".safetensors", ".npz", ".parquet", ".jsonl")


def ragged_mask(rows: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """[rows, length] bool: ragged right-padded rows (row 0 empty, row 1 full) with a
    tenth of the positions inside them masked as holes, for the compiled passes' tests."""
    lengths = torch.randint(0, length + 1, (rows,), generator=generator)
    lengths[0], lengths[1] = 0, length
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return mask & (torch.rand(rows, length, generator=generator) >= 0.1)
