"""Files in the exact structure each training framework's source writes (cited per
builder), for the reader tests. The builders the bundled examples use too come from
sample_data/frameworks/make_frameworks.py, so one function writes each layout."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "sample_data" / "frameworks" / "make_frameworks.py"


def _make_frameworks() -> types.ModuleType:
    """The script that writes sample_data/frameworks/, whose builders the tests share (a
    script, not a package module: loaded by path, once)."""
    if "make_frameworks" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_frameworks", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["make_frameworks"] = module
    return sys.modules["make_frameworks"]


_script = _make_frameworks()
SKYRL_MODULE = _script.SKYRL_MODULE
prime_rl_line = _script.prime_rl_line


def slime_v1_rank(rng, indices, *, lengths, rollout_id=4, rank=0, cut=None, last_stage=True):
    """``rollout_data`` as slime v0.3.1 saves it (THUDM/slime a6272da0d4f3,
    slime/utils/train_dump_utils.py 9-22; keys from slime/ray/rollout.py 712-889 and the
    trainer's forward_only / compute_advantages_and_returns)."""
    old = [torch.tensor(-rng.gamma(1.0, 0.7, size=n), dtype=torch.float32) for n in lengths]
    engine = [
        o + torch.tensor(rng.normal(0, 0.02, size=o.numel()), dtype=torch.float32) for o in old
    ]
    data = {
        "tokens": [torch.tensor(rng.integers(3, 60, size=n + 5)) for n in lengths],
        "response_lengths": list(lengths),
        "total_lengths": [n + 5 for n in lengths],
        "loss_masks": [torch.ones(n, dtype=torch.int32) for n in lengths],
        "rewards": rng.normal(size=len(lengths)).tolist(),  # group-normalised
        "raw_reward": None,  # set by the caller: the whole rollout
        "truncated": [0] * len(lengths),
        "sample_indices": list(indices),
        "rollout_ids": list(indices),
        "rollout_mask_sums": torch.tensor([float(n) for n in lengths]),
        "rollout_log_probs": engine,
        "micro_batch_indices": [[0, 1]],
        "num_microbatches": [1],
        "global_batch_sizes": [2],
    }
    if last_stage:
        data["log_probs"] = [o[:cut] if cut else o for o in old]
        data["advantages"] = [
            torch.full((n,), r) for n, r in zip(lengths, data["rewards"], strict=True)
        ]
    return {"rollout_id": rollout_id, "rank": rank, "rollout_data": data}, old, engine


def write_rollout_dump(directory: Path, rollout_id: int, groups, rewards, indices) -> None:
    """``{"rollout_id", "samples": [Sample.to_dict()]}`` (slime/ray/rollout.py 666-683)."""
    samples = [
        {"group_index": g, "index": i, "reward": r, "status": "completed", "response": "..."}
        for g, r, i in zip(groups, rewards, indices, strict=True)
    ]
    directory.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": rollout_id, "samples": samples}, directory / f"{rollout_id}.pt")


def skyrl_pickle(monkeypatch, state: dict, enum_formats: bool) -> bytes:
    """Pickle ``state`` the way SkyRL's ``TensorBatch.save`` does (NovaSky-AI/SkyRL
    a9564572eb8e, skyrl/backends/skyrl_train/training_batch.py 113-117, 244-281, 395-398:
    ``pickle.dump`` of an object reducing to ``(_rebuild_tensor_batch,
    (TrainingInputBatch, state))``), with stand-ins under SkyRL's module name, so the
    bytes name exactly the globals a real file names."""
    import enum
    import pickle
    import sys
    import types

    module = types.ModuleType(SKYRL_MODULE)

    def _rebuild_tensor_batch(cls, state):  # pragma: no cover - never called here
        raise AssertionError

    class TrainingInputBatch:
        pass

    class TensorFormat(str, enum.Enum):  # skyrl 0.4.0 (wheel, lines 28-35)
        NUMPY = "numpy"
        TORCH = "torch"

    for obj in (_rebuild_tensor_batch, TrainingInputBatch, TensorFormat):
        obj.__module__ = SKYRL_MODULE
        obj.__qualname__ = obj.__name__
        setattr(module, obj.__name__, obj)
    parts = SKYRL_MODULE.split(".")
    for depth in range(1, len(parts)):  # pickle imports the module, parents first
        name = ".".join(parts[:depth])
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, SKYRL_MODULE, module)
    if enum_formats:
        for encoded in state["batch_dict"].values():
            if encoded is not None:
                encoded["format"] = TensorFormat(encoded["format"])

    class Batch:
        def __reduce__(self):
            return (_rebuild_tensor_batch, (TrainingInputBatch, state))

    return pickle.dumps(Batch(), protocol=4)


def numpy_encoding(array: np.ndarray) -> dict:
    return {
        "format": "numpy",
        "data": array.tobytes(),
        "shape": array.shape,
        "dtype": str(array.dtype),
    }


def skyrl_state(rng):
    """Rows as skyrl/train/dataset/preprocess.py lays them out: each row left-padded,
    the response right-aligned in [B, R]; the second sample of each group has a tool
    call whose observation tokens are in response_mask but not in loss_mask, with
    rollout log-probs 0.0 there (skyrl_gym_generator.py 1181-1189); the last row is a pad
    row, a copy of row 0 with loss_mask 0 (training_batch.py 504-570)."""
    prompt_lengths = [3, 3, 4, 4, 4]
    response_lengths = [5, 7, 4, 6, 8]
    observation = {1: (2, 4), 3: (1, 3)}  # row -> response columns [a, b) of tool output
    rows, width_r = 5, max(response_lengths)
    width_t = max(p + r for p, r in zip(prompt_lengths, response_lengths, strict=True))
    sequences = np.zeros((rows + 1, width_t), dtype=np.int64)
    attention = np.zeros_like(sequences)
    response_mask = np.zeros((rows + 1, width_r), dtype=np.int64)
    loss_mask = np.zeros((rows + 1, width_r), dtype=np.float32)
    old = np.zeros((rows + 1, width_r), dtype=np.float32)
    engine = np.zeros_like(old)
    advantages = np.zeros_like(old)
    for i, (p, r) in enumerate(zip(prompt_lengths, response_lengths, strict=True)):
        tokens = rng.integers(3, 90, size=p + r)
        sequences[i, width_t - p - r :] = tokens
        attention[i, width_t - p - r :] = 1
        response_mask[i, width_r - r :] = 1
        loss_mask[i, width_r - r :] = 1
        old[i, width_r - r :] = -rng.gamma(1.0, 0.6, size=r)
        engine[i, width_r - r :] = old[i, width_r - r :] + rng.normal(0, 0.03, size=r)
        advantages[i, width_r - r :] = rng.normal()
        if i in observation:
            a, b = observation[i]
            cols = slice(width_r - r + a, width_r - r + b)
            loss_mask[i, cols] = 0
            engine[i, cols] = 0.0  # the engine does not score tool output
    for array in (sequences, attention, response_mask, old, engine, advantages):
        array[rows] = array[0]  # the pad row copies row 0 ...
    # ... except its loss mask, which is 0
    state = {
        "batch_dict": {
            "sequences": numpy_encoding(sequences),
            "attention_mask": numpy_encoding(attention),
            "response_mask": numpy_encoding(response_mask),
            "loss_mask": numpy_encoding(loss_mask),
            "rollout_logprobs": numpy_encoding(engine),
            "action_log_probs": {"format": "torch", "data": torch_bytes(torch.tensor(old))},
            "base_action_log_probs": None,
            "values": None,
            "advantages": numpy_encoding(advantages),
            "returns": numpy_encoding(advantages),
        },
        "batch_size": rows + 1,
        "device": torch.device("cpu"),
        "metadata": {
            "response_length": width_r,
            "avg_response_length": float(np.mean(response_lengths)),
            "pad_size": 1,
            "policy_mini_batch_boundaries": [(0, 5)],
            "policy_prompt_boundaries": [(0, 2), (2, 5)],
            "metrics": {"avg_final_rewards": 0.4},
        },
    }
    return (
        state,
        loss_mask[:rows].astype(bool),
        response_mask[:rows].astype(bool),
        old,
        engine,
        sequences,
    )


def torch_bytes(tensor: torch.Tensor) -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    return buffer.getvalue()
