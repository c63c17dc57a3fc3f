"""Write the small examples of each training framework's own files under this directory,
for the recipes of docs/frameworks.md (each recipe runs on them as written; a test does).

Every file has the structure the framework's source writes, cited per writer below (the
repository and commit read, the file and the function or lines). The values are small
and made up (seeded, so a rerun writes the same bytes): these files show the layouts, the
real GRPO run is sample_data/verl/ and its siblings. The reader tests build their files
with the same functions (tests/framework_files.py loads this script), so each layout is
written in one place; a builder's random draws keep their order, or the bundled bytes
change (tests/test_frameworks_guide.py checks that a rerun writes the same bytes).

Usage: python sample_data/frameworks/make_frameworks.py [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import enum
import io
import json
import pickle
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import polars as pl
import torch

HERE = Path(__file__).resolve().parent
SEED = 0
#: where SkyRL's TrainingInputBatch lives; a pickle names it
SKYRL_MODULE = "skyrl.backends.skyrl_train.training_batch"


def _jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))


# ------------------------------------------------------------------------------- verl
def write_verl(root: Path, rng: np.random.Generator) -> None:
    """``trainer.rollout_data_dir=DIR``: one JSON line per sample in
    ``DIR/{global_step}.jsonl`` with ``input``, ``output``, ``gts``, ``score``, ``step``
    (volcengine/verl b178a3cd56f5, verl/trainer/ppo/ray_trainer.py, ``_dump_generations``
    and ``_log_rollout_data``: decoded prompt and response, the summed token-level score);
    the batch is reordered by ``_balance_batch`` before the dump, so a prompt's samples are
    not adjacent."""
    for step in (1, 2):
        records = [
            {"input": f"What is {p} + {p}?", "output": f"{2 * p + (i % 2)}", "gts": str(2 * p),
             "score": float(i % 2 == 0), "step": step}
            for p in range(3) for i in range(4)
        ]  # fmt: skip
        order = rng.permutation(len(records))
        _jsonl(root / "rollouts" / f"{step}.jsonl", [records[i] for i in order])


# -------------------------------------------------------------------------------- TRL
def write_trl(root: Path, rng: np.random.Generator) -> None:
    """``GRPOConfig(log_completions=True)``: ``OUTPUT_DIR/completions/completions_{step:05d}
    .parquet`` with ``step``, ``prompt``, ``completion``, one column per reward function and
    ``advantage`` (huggingface/trl f2cd57710, trl/trainer/grpo_trainer.py lines 3308-3328,
    ``pd.DataFrame(table).to_parquet``)."""
    out = root / "completions"
    out.mkdir(parents=True, exist_ok=True)
    prompts = [p for p in ("1+1?", "2+2?") for _ in range(4)]
    accuracy = [float(i % 3 == 0) for i in range(8)]
    pl.DataFrame(
        {
            "step": [1] * 8,
            "prompt": prompts,
            "completion": [str(i) for i in range(8)],
            "accuracy_reward": accuracy,
            "format_reward": [1.0] * 8,
            "advantage": rng.normal(size=8).round(4).tolist(),
        }
    ).write_parquet(out / "completions_00001.parquet", statistics=False)


# --------------------------------------------------------------------------- prime-rl
def prime_rl_line(
    rng: np.random.Generator, index: int, prompt: list[int], length: int, *, step: int = 5
) -> dict:
    """One line of ``trainer.enable_token_export = true``
    (PrimeIntellect-ai/prime-rl 559b44772e47, src/prime_rl/trainer/rl/token_export.py
    lines 61-70, 136-157: ``token_exports/step_<step>/rank_<rank>.jsonl``, schema 1,
    per-token lists over the ``len(prompt) + length`` tokens of prompt and completion, no
    reward and no example id): sequence ``index`` of micro-step 0 on rank 0. The draws
    from ``rng`` come in a fixed order, so the bundled files stay byte for byte the same;
    tests/framework_files.py builds its lines here too."""
    n = len(prompt) + length
    inference = -rng.gamma(1.0, 0.7, size=n)
    trainer = inference + rng.normal(0, 0.05, size=n)
    log_ratio = trainer - inference
    return {
        "schema_version": 1,
        "step": step,
        "rank": 0,
        "micro_step": 0,
        "micro_sequence_idx": index,
        "export_sequence_idx": index,
        "env_name": "math",
        "token_ids": [*prompt, *rng.integers(5, 50, size=length).tolist()],
        "position_ids": list(range(n)),
        "loss_mask": [False] * len(prompt) + [True] * length,
        "advantages": [0.0] * len(prompt) + [float(rng.normal())] * length,
        "inference_logprobs": inference.tolist(),
        "trainer_logprobs": trainer.tolist(),
        "entropy": rng.uniform(0, 2, size=n).tolist(),
        "mismatch_kl": (np.exp(log_ratio) - log_ratio - 1).tolist(),
        "log_importance_ratio": log_ratio.tolist(),
        "importance_ratio": np.exp(log_ratio).tolist(),
        "prob_delta": (np.exp(trainer) - np.exp(inference)).tolist(),
        "is_masked": [False] * len(prompt) + (rng.random(length) < 0.2).tolist(),
        "is_masked_high": [None] * n,
        "is_masked_low": [None] * n,
        "rl_weights": [None] * n,
        "ce_weights": [None] * n,
        "ref_kl_weights": [None] * n,
    }


def write_prime_rl(root: Path, rng: np.random.Generator) -> None:
    step = root / "outputs" / "token_exports" / "step_5"
    lines = [prime_rl_line(rng, i, [1, 2, 3 + i % 2], 4 + i) for i in range(6)]
    _jsonl(step / "rank_0.jsonl", lines)
    (step / "STABLE").touch()  # written when the step's export is complete


# ------------------------------------------------------------------------------ slime
def slime_rollout_data(
    rng: np.random.Generator,
    indices: list[int],
    lengths: list[int],
    rewards: list[float],
    raw_reward: list[float] | None,
    *,
    cut: int | None = None,
    last_stage: bool = True,
) -> tuple[dict, list[torch.Tensor], list[torch.Tensor]]:
    """A v1 train dump's ``rollout_data`` for the samples ``indices`` with response
    ``lengths`` (slime v0.3.1, THUDM/slime a6272da0d4f3; keys from slime/ray/rollout.py
    712-889 and the trainer's forward_only / compute_advantages_and_returns), and the old
    and engine log-probs drawn for it, each ``[length]``. ``rewards`` are slime's
    group-normalised ones, ``raw_reward`` the whole rollout's; a pipeline stage other than
    the last (``last_stage=False``) holds no log-probs and no advantages, and a
    context-parallel rank's log-probs are cut to their first ``cut`` tokens."""
    old = [torch.tensor(-rng.gamma(1.0, 0.7, size=n), dtype=torch.float32) for n in lengths]
    engine = [
        o + torch.tensor(rng.normal(0, 0.02, size=o.numel()), dtype=torch.float32) for o in old
    ]
    data = {
        "tokens": [torch.tensor(rng.integers(3, 60, size=n + 5)) for n in lengths],
        "response_lengths": list(lengths),
        "total_lengths": [n + 5 for n in lengths],
        "loss_masks": [torch.ones(n, dtype=torch.int32) for n in lengths],
        "rewards": rewards,
        "raw_reward": raw_reward,
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
        # the last pipeline stage's: the old policy, recomputed
        data["log_probs"] = [o[:cut] if cut else o for o in old]
        data["advantages"] = [torch.full((n,), r) for n, r in zip(lengths, rewards, strict=True)]
    return data, old, engine


def write_slime_rollout_dump(
    directory: Path, rollout_id: int, groups: list[int], rewards: list[float], indices: list[int]
) -> None:
    """The rollout dump ``directory/{rollout_id}.pt``, ``{"rollout_id", "samples":
    [Sample.to_dict()]}`` with the raw rewards and groups (slime/ray/rollout.py 666-683)."""
    samples = [
        {"group_index": g, "index": i, "reward": r, "status": "completed", "response": "..."}
        for g, r, i in zip(groups, rewards, indices, strict=True)
    ]
    directory.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": rollout_id, "samples": samples}, directory / f"{rollout_id}.pt")


def write_slime(root: Path, rng: np.random.Generator) -> None:
    """``--dump-details DIR``: train dumps ``DIR/train_data/{rollout_id}_{rank}.pt``,
    ``{"rollout_id", "rank", "rollout_data"}`` with per-sample lists, written by every
    rank (slime/utils/train_dump_utils.py 9-22), and the rollout dump
    ``DIR/rollout_data/{rollout_id}.pt``."""
    indices, groups, lengths = [10, 11, 12, 13], [0, 0, 1, 1], [4, 5, 6, 7]
    raw = [1.0, 0.0, 1.0, 1.0]
    write_slime_rollout_dump(root / "dump" / "rollout_data", 4, groups, raw, indices)
    rewards = [(r - 0.75) / 0.5 for r in raw]  # slime's rewards are group-normalised
    data, _, _ = slime_rollout_data(rng, indices, lengths, rewards, raw)
    (root / "dump" / "train_data").mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):  # tensor-parallel peers write the same samples
        obj = {"rollout_id": 4, "rank": rank, "rollout_data": data}
        torch.save(obj, root / "dump" / "train_data" / f"4_{rank}.pt")


# ------------------------------------------------------------------------------ SkyRL
def numpy_encoding(array: np.ndarray) -> dict:
    """SkyRL's encoding of a numpy array in a pickled batch (training_batch.py 244-281)."""
    return {"format": "numpy", "data": array.tobytes(), "shape": array.shape,
            "dtype": str(array.dtype)}  # fmt: skip


def torch_bytes(tensor: torch.Tensor) -> bytes:
    """``torch.save`` of ``tensor`` to bytes: SkyRL's encoding of a torch tensor."""
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    return buffer.getvalue()


@contextmanager
def _skyrl_stand_ins() -> Iterator[types.ModuleType]:
    """SkyRL's module, with stand-ins of the three names its pickle refers to, in
    ``sys.modules`` while pickling (SkyRL need not be installed)."""

    def _rebuild_tensor_batch(cls: type, state: dict) -> None:  # pragma: no cover
        raise AssertionError("never called: only its name goes into the pickle")

    class TrainingInputBatch:
        pass

    class TensorFormat(str, enum.Enum):  # skyrl 0.4.0
        NUMPY = "numpy"
        TORCH = "torch"

    module = types.ModuleType(SKYRL_MODULE)
    for obj in (_rebuild_tensor_batch, TrainingInputBatch, TensorFormat):
        obj.__module__ = SKYRL_MODULE
        obj.__qualname__ = obj.__name__
        setattr(module, obj.__name__, obj)
    parts = SKYRL_MODULE.split(".")
    names = [".".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
    saved = {name: sys.modules.get(name) for name in names}
    for name in names[:-1]:
        sys.modules[name] = types.ModuleType(name)
    sys.modules[SKYRL_MODULE] = module
    try:
        yield module
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous


def skyrl_state(
    rng: np.random.Generator, tool_output: dict[int, tuple[int, int]]
) -> tuple[dict, dict[str, np.ndarray]]:
    """The state a ``TrainingInputBatch`` pickles, with string formats (as skyrl 0.3), and
    its arrays by batch key: 5 samples in 2 groups and a pad row. Rows as
    skyrl/train/dataset/preprocess.py lays them out: left-padded sequences ``[6, T]``,
    responses right-aligned in ``[6, R]``; a row's tool output, response columns ``[a, b)``
    of ``tool_output[row]``, is in ``response_mask`` but not ``loss_mask``, with rollout
    log-probs 0.0 there (skyrl_gym_generator.py 1181-1189); the last row is a
    data-parallel pad row, a copy of row 0 with loss mask 0 (training_batch.py 504-570)."""
    prompt_lengths, response_lengths = [3, 3, 4, 4, 4], [5, 7, 4, 6, 8]
    rows, width_r = 5, max(response_lengths)
    width_t = max(p + r for p, r in zip(prompt_lengths, response_lengths, strict=True))
    sequences = np.zeros((rows + 1, width_t), dtype=np.int64)
    attention = np.zeros_like(sequences)
    response_mask = np.zeros((rows + 1, width_r), dtype=np.int64)
    loss_mask = np.zeros((rows + 1, width_r), dtype=np.float32)
    old = np.zeros((rows + 1, width_r), dtype=np.float32)
    engine, advantages = np.zeros_like(old), np.zeros_like(old)
    for i, (p, r) in enumerate(zip(prompt_lengths, response_lengths, strict=True)):
        sequences[i, width_t - p - r :] = rng.integers(3, 90, size=p + r)
        attention[i, width_t - p - r :] = 1
        response_mask[i, width_r - r :] = 1
        loss_mask[i, width_r - r :] = 1
        old[i, width_r - r :] = -rng.gamma(1.0, 0.6, size=r)
        engine[i, width_r - r :] = old[i, width_r - r :] + rng.normal(0, 0.03, size=r)
        advantages[i, width_r - r :] = rng.normal()
        if i in tool_output:
            a, b = tool_output[i]
            tool = slice(width_r - r + a, width_r - r + b)
            loss_mask[i, tool], engine[i, tool] = 0, 0.0  # the engine does not score it
    for array in (sequences, attention, response_mask, old, engine, advantages):
        array[rows] = array[0]  # the pad row copies row 0, with loss mask 0
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
    arrays = {"sequences": sequences, "response_mask": response_mask, "loss_mask": loss_mask,
              "action_log_probs": old, "rollout_logprobs": engine}  # fmt: skip
    return state, arrays


def skyrl_pickle(state: dict, *, enum_formats: bool) -> bytes:
    """``pickle.dump`` of the ``TrainingInputBatch`` holding ``state``, which reduces to
    ``(_rebuild_tensor_batch, (TrainingInputBatch, state))`` (NovaSky-AI/SkyRL
    a9564572eb8e, skyrl/backends/skyrl_train/training_batch.py 113-117, 244-281,
    395-398), so the bytes name exactly the globals a real file names. ``enum_formats``:
    each encoding's format becomes a ``TensorFormat`` in ``state`` (skyrl 0.4), else it
    stays a string (0.3)."""
    with _skyrl_stand_ins() as skyrl:
        if enum_formats:
            for encoded in state["batch_dict"].values():
                if encoded is not None:
                    encoded["format"] = skyrl.TensorFormat(encoded["format"])

        class Batch:
            def __reduce__(self) -> tuple:
                return (skyrl._rebuild_tensor_batch, (skyrl.TrainingInputBatch, state))

        return pickle.dumps(Batch(), protocol=4)


def write_skyrl(root: Path, rng: np.random.Generator) -> None:
    """``trainer.dump_data_batch=true``: ``EXPORT_PATH/dumped_data/global_step_N_training_
    input.pkl``, ``pickle.dump`` of the ``TrainingInputBatch`` (skyrl/train/trainer.py
    1240), as skyrl 0.4 writes it; a tool observation in row 1."""
    state, _ = skyrl_state(rng, tool_output={1: (2, 4)})
    path = root / "exports" / "dumped_data" / "global_step_3_training_input.pkl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(skyrl_pickle(state, enum_formats=True))


# ---------------------------------------------------------------------------- NeMo-RL
def write_nemo_rl(root: Path, rng: np.random.Generator) -> None:
    """GRPO's ``LOG_DIR/train_data_step{N}.jsonl``, one sample a line: ``token_ids``,
    ``token_loss_mask``, ``sample_loss_mask``, ``input_lengths``, ``advantages``,
    ``generation_logprobs`` (vLLM), ``prev_logprobs`` (the trainer before the update),
    ``rewards``, ``content``, ``idx`` (NVIDIA-NeMo/RL 7ea279abfbeb,
    nemo_rl/algorithms/grpo.py 3630-3655); the log directory holds other JSON lines."""
    records = []
    for row in range(4):
        prompt, completion = [5, 6, 7 + row // 2], rng.integers(10, 50, size=5).tolist()
        n, width = 3 + 5, 10
        prev = np.zeros(width)
        prev[1:n] = -rng.gamma(1.0, 0.5, size=n - 1)
        gen = np.zeros(width)
        gen[3:n] = prev[3:n] + rng.normal(0, 0.05, size=5)
        records.append(
            {
                "content": [["q", "a"]], "rewards": [float(row % 2)], "input_lengths": [n],
                "token_ids": [prompt + completion + [0, 0]],
                "token_loss_mask": [[0, 0, 0, 1, 1, 1, 1, 1, 0, 0]],
                "sample_loss_mask": [1.0], "advantages": [[0.5] * width],
                "generation_logprobs": [gen.round(6).tolist()],
                "prev_logprobs": [prev.round(6).tolist()], "idx": row,
            }
        )  # fmt: skip
    _jsonl(root / "logs" / "exp_001" / "train_data_step4.jsonl", records)
    _jsonl(root / "logs" / "exp_001" / "val_data_step4.jsonl", [{"content": ["q"], "idx": 0}])


# ------------------------------------------------------------------------------ AReaL
def write_areal(root: Path, rng: np.random.Generator) -> None:
    """``rollout.dump_to_file=true``: ``.../rollout/{version}/{task_id}.jsonl``, one line
    per sample (inclusionAI/AReaL 4aef98d8d818, areal/infra/workflow_executor.py 870-890)."""
    for task in ("t1", "t2"):
        _jsonl(
            root / "rollout" / "3" / f"{task}.jsonl",
            [
                {"task_id": task, "sample_idx": i, "seqlen": 9, "prompt_len": 3,
                 "head_version": 3, "tail_version": 3, "reward": float(rng.random() < 0.5),
                 "prompt": f"question {task}", "completion": f"answer {i}"}
                for i in range(4)
            ],
        )  # fmt: skip


WRITERS = {
    "verl": write_verl,
    "trl": write_trl,
    "prime-rl": write_prime_rl,
    "slime": write_slime,
    "skyrl": write_skyrl,
    "nemo-rl": write_nemo_rl,
    "areal": write_areal,
}


def generate(out_dir: Path) -> list[Path]:
    """Write every framework's example under ``out_dir/<framework>/``; the files written."""
    for name, writer in WRITERS.items():
        writer(out_dir / name, np.random.default_rng([SEED, len(name)]))
    return sorted(p for p in out_dir.rglob("*") if p.is_file() and p.suffix != ".py")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=HERE)
    args = parser.parse_args(argv)
    for path in generate(args.out_dir):
        print(f"{path.relative_to(args.out_dir)}  {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
