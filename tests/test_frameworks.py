"""Native readers: files built with the exact structure each framework's source writes,
checked for roles, valid tokens, mean log-ratio, groups and correctness against direct
computations from the values written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.errors import InputError

runner = CliRunner()


# ----------------------------------------------------------------------------- prime-rl
def _prime_rl_line(rng, *, step, micro_sequence_idx, prompt, completion_len, export_idx):
    """One line as prime-rl writes it (PrimeIntellect-ai/prime-rl 559b44772e47,
    src/prime_rl/trainer/rl/token_export.py lines 61-70, 136-157: schema 1, per-token
    lists over prompt + completion, no reward and no example id)."""
    n = len(prompt) + completion_len
    inference = -rng.gamma(1.0, 0.7, size=n)
    trainer = inference + rng.normal(0, 0.05, size=n)
    log_ratio = trainer - inference
    loss_mask = [False] * len(prompt) + [True] * completion_len
    advantage = float(rng.normal())
    return {
        "schema_version": 1,
        "step": step,
        "rank": 0,
        "micro_step": 0,
        "micro_sequence_idx": micro_sequence_idx,
        "export_sequence_idx": export_idx,
        "env_name": "math",
        "token_ids": [*prompt, *rng.integers(5, 50, size=completion_len).tolist()],
        "position_ids": list(range(n)),
        "loss_mask": loss_mask,
        "advantages": [0.0] * len(prompt) + [advantage] * completion_len,
        "inference_logprobs": inference.tolist(),
        "trainer_logprobs": trainer.tolist(),
        "entropy": rng.uniform(0, 2, size=n).tolist(),
        "mismatch_kl": (np.exp(log_ratio) - log_ratio - 1).tolist(),
        "log_importance_ratio": log_ratio.tolist(),
        "importance_ratio": np.exp(log_ratio).tolist(),
        "prob_delta": (np.exp(trainer) - np.exp(inference)).tolist(),
        "is_masked": [False] * len(prompt) + (rng.random(completion_len) < 0.2).tolist(),
        "is_masked_high": [None] * n,
        "is_masked_low": [None] * n,
        "rl_weights": [None] * n,
        "ce_weights": [None] * n,
        "ref_kl_weights": [None] * n,
    }


def test_prime_rl_export_groups_by_prompt_tokens_and_compares_trainer_with_engine(tmp_path):
    rng = np.random.default_rng(0)
    prompts = {"a": [1, 2, 3, 4], "b": [1, 2, 9], "c": [7, 8, 9, 10, 11]}
    order = ["b", "a", "c", "a", "b", "c", "a", "b"]  # packing order, not rollout order
    lines = [
        _prime_rl_line(
            rng, step=5, micro_sequence_idx=i, prompt=prompts[p], completion_len=3 + i,
            export_idx=i,
        )
        for i, p in enumerate(order)
    ]  # fmt: skip
    path = tmp_path / "token_exports" / "step_5" / "rank_0.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    (path.parent / "STABLE").touch()

    batch = ratioscope.load(path)
    assert batch.profile == "prime-rl"
    assert batch.ratio_pair == "current/engine"
    # groups: samples with the same prompt tokens, ids in order of first appearance
    first = list(dict.fromkeys(order))
    assert batch.group.tolist() == [first.index(p) for p in order]
    trained = [np.array(line["loss_mask"]) for line in lines]
    assert batch.num_tokens == sum(int(m.sum()) for m in trained)
    z = np.concatenate(
        [
            np.array(line["trainer_logprobs"])[m] - np.array(line["inference_logprobs"])[m]
            for line, m in zip(lines, trained, strict=True)
        ]
    )
    assert float(batch.log_ratio[batch.mask].double().mean()) == pytest.approx(z.mean(), abs=1e-7)
    # the export's own log_importance_ratio is the same quantity
    own = np.concatenate(
        [np.array(line["log_importance_ratio"])[m] for line, m in zip(lines, trained, strict=True)]
    )
    np.testing.assert_allclose(batch.log_ratio[batch.mask].double().numpy(), own, atol=1e-6)
    masked = sum(
        int(np.array(line["is_masked"])[m].sum()) for line, m in zip(lines, trained, strict=True)
    )
    assert any(f"is_masked (DPPO trust region) on {masked} of" in w for w in batch.warnings)

    report = ratioscope.analyze(tmp_path / "token_exports")
    assert report.mismatch.pairs["policy"] == "current/engine"
    # prime-rl's mismatch_kl is the k3 estimator of the same ratio
    kl = np.concatenate(
        [np.array(line["mismatch_kl"])[m] for line, m in zip(lines, trained, strict=True)]
    )
    assert report.mismatch.policy.k3 == pytest.approx(kl.mean(), rel=1e-6)
    assert report.trust_region is None  # no rewards in the export: said, not guessed


def test_prime_rl_rl_weights_of_zero_are_not_policy_gradient_tokens(tmp_path):
    rng = np.random.default_rng(1)
    line = _prime_rl_line(
        rng, step=1, micro_sequence_idx=0, prompt=[1, 2], completion_len=6, export_idx=0
    )
    line["rl_weights"] = [None, None, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    path = tmp_path / "rank_0.jsonl"
    path.write_text(json.dumps(line) + "\n")
    batch = ratioscope.load(path, format="prime-rl")
    assert batch.num_tokens == 4
    trainer = np.array(line["trainer_logprobs"])[[2, 3, 6, 7]]
    inference = np.array(line["inference_logprobs"])[[2, 3, 6, 7]]
    kept = batch.log_ratio[batch.mask].double().numpy()
    np.testing.assert_allclose(np.sort(kept), np.sort(trainer - inference), atol=1e-6)


def test_group_size_is_refused_for_prime_rl(tmp_path):
    rng = np.random.default_rng(2)
    line = _prime_rl_line(
        rng, step=1, micro_sequence_idx=0, prompt=[1], completion_len=4, export_idx=0
    )
    path = tmp_path / "rank_0.jsonl"
    path.write_text(json.dumps(line) + "\n")
    result = runner.invoke(app, ["analyze", str(path), "--group-size", "1"])
    assert result.exit_code == 2
    assert "identical prompt tokens" in result.stderr


# -------------------------------------------------------------------------------- slime
def _slime_v1_rank(rng, indices, *, lengths, rollout_id=4, rank=0, cut=None, last_stage=True):
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


def _write_rollout_dump(directory: Path, rollout_id: int, groups, rewards, indices) -> None:
    """``{"rollout_id", "samples": [Sample.to_dict()]}`` (slime/ray/rollout.py 666-683)."""
    samples = [
        {"group_index": g, "index": i, "reward": r, "status": "completed", "response": "..."}
        for g, r, i in zip(groups, rewards, indices, strict=True)
    ]
    directory.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": rollout_id, "samples": samples}, directory / f"{rollout_id}.pt")


def test_slime_v1_ranks_rank_copies_and_the_rollout_dump(tmp_path):
    rng = np.random.default_rng(3)
    # a rollout of 8 samples in 2 groups; data-parallel rank 0 trains positions 0-3 and
    # rank 1 positions 4-7; tensor-parallel peers (ranks 1 and 3) write the same data again
    indices = list(range(40, 48))
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    raw = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    dump = tmp_path / "dump"
    _write_rollout_dump(dump / "rollout_data", 4, groups, raw, indices)
    expected_z, expected_lengths = [], []
    for dp, rows in enumerate(([0, 1, 2, 3], [4, 5, 6, 7])):
        lengths = rng.integers(3, 9, size=4).tolist()
        obj, old, engine = _slime_v1_rank(rng, [indices[r] for r in rows], lengths=lengths)
        obj["rollout_data"]["raw_reward"] = raw
        for tp in range(2):
            obj["rank"] = 2 * dp + tp
            (dump / "train_data").mkdir(parents=True, exist_ok=True)
            torch.save(obj, dump / "train_data" / f"4_{2 * dp + tp}.pt")
        expected_z += [(o - e).double().numpy() for o, e in zip(old, engine, strict=True)]
        expected_lengths += lengths

    report = ratioscope.analyze(dump / "train_data")
    assert [i.path.rsplit("/", 1)[1] for i in report.inputs] == ["4_0.pt", "4_2.pt"]
    assert sum("same samples as" in w for w in report.warnings) == 2
    z = np.concatenate(expected_z)
    assert report.mismatch.policy is None  # no current policy in a slime dump
    assert report.mismatch.rollout.tokens == sum(expected_lengths)
    assert report.mismatch.rollout.k1 == pytest.approx(-z.mean(), rel=1e-6)
    assert report.ratios["token"].clip_fraction is None

    batch = ratioscope.load(dump / "train_data" / "4_2.pt")
    assert batch.ratio_pair == "old/engine"
    assert batch.group.tolist() == [0, 0, 0, 0]  # all of group 1, ids from first appearance
    assert batch.rewards.tolist() == raw[4:]  # raw, not the group-normalised 'rewards'
    assert batch.correct.tolist() == [r > 0 for r in raw[4:]]
    # the whole directory, rollout dump included: the dump is skipped with a note
    report = ratioscope.analyze(dump)
    assert len(report.inputs) == 2
    assert any("slime rollout dump" in w for w in report.warnings)
    assert report.trust_region is not None and report.trust_region.groups == 2


def test_slime_v1_without_the_rollout_dump_uses_no_normalised_reward(tmp_path):
    rng = np.random.default_rng(4)
    obj, _, _ = _slime_v1_rank(rng, [0, 1, 2], lengths=[4, 5, 6])
    obj["rollout_data"]["raw_reward"] = [1.0, 0.0, 1.0, 0.0]
    path = tmp_path / "4_0.pt"
    torch.save(obj, path)
    batch = ratioscope.load(path)
    assert batch.rewards is None and batch.group is None
    assert any("group-normalised" in w for w in batch.warnings)


def test_slime_files_that_cannot_give_a_ratio_say_why(tmp_path):
    rng = np.random.default_rng(5)
    # a pipeline stage other than the last holds no log-probs and no advantages
    obj, _, _ = _slime_v1_rank(rng, [0, 1], lengths=[3, 4], last_stage=False)
    torch.save(obj, tmp_path / "4_0.pt")
    result = runner.invoke(app, ["analyze", str(tmp_path / "4_0.pt")])
    assert result.exit_code == 2 and "pipeline stage" in result.stderr
    # one optimizer step per rollout: slime does not recompute the old policy
    obj, _, _ = _slime_v1_rank(rng, [0, 1], lengths=[3, 4])
    del obj["rollout_data"]["log_probs"]
    torch.save(obj, tmp_path / "4_1.pt")
    result = runner.invoke(app, ["analyze", str(tmp_path / "4_1.pt")])
    assert result.exit_code == 2 and "--get-mismatch-metrics" in result.stderr
    # context-parallel ranks of v1 hold slices of each response
    obj, _, _ = _slime_v1_rank(rng, [0, 1], lengths=[6, 8], cut=3)
    torch.save(obj, tmp_path / "4_2.pt")
    with pytest.raises(InputError, match="context-parallel slice"):
        ratioscope.load(tmp_path / "4_2.pt")


def test_slime_v2_samples_and_rollout_positions(tmp_path):
    """v2 as slime 624b824a898a writes it (slime/observability/train_data_utils.py
    112-242): one dict per sample, whole-rollout raw_reward at the top, dp_shards."""
    rng = np.random.default_rng(6)
    lengths = [5, 3, 7, 4]
    positions = [2, 0, 3, 1]
    raw = [0.0, 1.0, 1.0, 0.0]
    samples = []
    zs = []
    for k, (n, pos) in enumerate(zip(lengths, positions, strict=True)):
        old = torch.tensor(-rng.gamma(1.0, 0.7, size=n), dtype=torch.float32)
        engine = old + torch.tensor(rng.normal(0, 0.05, size=n), dtype=torch.float32)
        zs.append((old - engine).double().numpy())
        samples.append(
            {
                "data_parallel_rank": k % 2,
                "sample_index": 10 + pos,
                "rollout_position": pos,
                "tokens": torch.tensor(rng.integers(3, 60, size=n + 2)),
                "response_lengths": n,
                "total_lengths": n + 2,
                "loss_masks": torch.ones(n, dtype=torch.int32),
                "rollout_mask_sums": torch.tensor(float(n)),
                "rewards": float(rng.normal()),
                "local_raw_reward": raw[pos],
                "truncated": 0,
                "rollout_ids": 10 + pos,
                "rollout_log_probs": engine,
                "log_probs": old,
                "advantages": torch.full((n,), 0.5),
            }
        )
    samples.sort(key=lambda s: s["rollout_position"])
    payload = {
        "format_version": 2,
        "rollout_id": 9,
        "rank": 0,
        "samples": samples,
        "dp_shards": [
            {"rank": 0, "data_parallel_rank": 0, "sample_indices": [10, 12], "partition": [0, 2]}
        ],
        "raw_reward": raw,
    }
    (tmp_path / "train_data").mkdir()
    torch.save(payload, tmp_path / "train_data" / "9.pt")
    _write_rollout_dump(tmp_path / "rollout_data", 9, [0, 0, 1, 1], raw, [10, 11, 12, 13])
    batch = ratioscope.load(tmp_path / "train_data" / "9.pt")
    assert batch.profile == "slime" and batch.ratio_pair == "old/engine"
    assert batch.rewards.tolist() == raw
    assert batch.group.tolist() == [0, 0, 1, 1]
    order = sorted(range(4), key=lambda k: positions[k])
    z = np.concatenate([zs[k] for k in order])
    assert float(batch.log_ratio[batch.mask].double().mean()) == pytest.approx(z.mean(), abs=1e-7)
    assert batch.num_tokens == sum(lengths)


# -------------------------------------------------------------------------------- SkyRL
SKYRL_MODULE = "skyrl.backends.skyrl_train.training_batch"


def _skyrl_pickle(monkeypatch, state: dict, enum_formats: bool) -> bytes:
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


def _numpy_encoding(array: np.ndarray) -> dict:
    return {
        "format": "numpy",
        "data": array.tobytes(),
        "shape": array.shape,
        "dtype": str(array.dtype),
    }


def _skyrl_state(rng):
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
            "sequences": _numpy_encoding(sequences),
            "attention_mask": _numpy_encoding(attention),
            "response_mask": _numpy_encoding(response_mask),
            "loss_mask": _numpy_encoding(loss_mask),
            "rollout_logprobs": _numpy_encoding(engine),
            "action_log_probs": {"format": "torch", "data": _torch_bytes(torch.tensor(old))},
            "base_action_log_probs": None,
            "values": None,
            "advantages": _numpy_encoding(advantages),
            "returns": _numpy_encoding(advantages),
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


def _torch_bytes(tensor: torch.Tensor) -> bytes:
    import io

    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("enum_formats", [False, True], ids=["skyrl-0.3", "skyrl-0.4"])
def test_skyrl_pickle_is_decoded_with_its_loss_mask_without_running_it(
    tmp_path, monkeypatch, enum_formats
):
    rng = np.random.default_rng(7)
    state, loss, response, old, engine, sequences = _skyrl_state(rng)
    path = tmp_path / "dumped_data" / "global_step_3_training_input.pkl"
    path.parent.mkdir()
    path.write_bytes(_skyrl_pickle(monkeypatch, state, enum_formats))
    for name in [m for m in __import__("sys").modules if m.startswith("skyrl")]:
        monkeypatch.delitem(__import__("sys").modules, name)  # no SkyRL at read time

    batch = ratioscope.load(path)
    assert batch.profile == "skyrl" and batch.ratio_pair == "old/engine"
    assert batch.num_sequences == 5  # the pad row is gone
    assert batch.num_tokens == int(loss.sum())
    z = (old[:5] - engine[:5])[loss]
    assert float(batch.log_ratio[batch.mask].double().mean()) == pytest.approx(z.mean(), abs=1e-6)
    # the silent wrong answer this replaces: response_mask takes tool output in, where
    # the engine's 0.0 turns the mean log-ratio's sign
    wrong = (old[:5] - engine[:5])[response]
    assert np.sign(wrong.mean()) != np.sign(z.mean())
    assert batch.group.tolist() == [0, 0, 1, 1, 1]
    assert batch.rewards is None
    response_ids = sequences[:5, sequences.shape[1] - loss.shape[1] :]
    first_valid = np.argmax(loss, axis=1)
    assert batch.token_ids[:, 0].tolist() == [
        int(response_ids[i, first_valid[i]]) for i in range(5)
    ]
    result = runner.invoke(app, ["info", str(path)])
    assert result.exit_code == 0 and "layout skyrl" in result.stdout


def test_a_hostile_pickle_naming_skyrl_runs_no_code(tmp_path, monkeypatch):
    import os
    import pickle

    marker = tmp_path / "ran"

    class Hostile:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    rng = np.random.default_rng(8)
    state, *_ = _skyrl_state(rng)
    state["metadata"]["metrics"] = Hostile()  # a global call hidden inside the state
    path = tmp_path / "global_step_1_training_input.pkl"
    path.write_bytes(_skyrl_pickle(monkeypatch, state, enum_formats=False))
    result = runner.invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2
    assert "does not decode" in result.stderr and (
        "posix.system" in result.stderr or "os.system" in result.stderr
    )
    assert not marker.exists()
    # the allowed names themselves cannot be turned into a call of something else
    path.write_bytes(
        b"\x80\x04c" + SKYRL_MODULE.encode() + b"\n_rebuild_tensor_batch\n"
        + b"cbuiltins\nprint\n}\x86R."
    )  # fmt: skip
    result = runner.invoke(app, ["analyze", str(path)])
    assert result.exit_code == 2 and "builtins.print" in result.stderr
    assert not marker.exists()
    assert pickle  # the module is only used to build the hostile bytes above


# ------------------------------------------------------------------------------ NeMo-RL
def test_nemo_rl_train_data_lines(tmp_path):
    """``train_data_step{N}.jsonl`` as NeMo-RL writes it (NVIDIA-NeMo/RL 7ea279abfbeb,
    nemo_rl/algorithms/grpo.py 3630-3655 and nemo_rl/utils/logger.py 1071-1097): one
    sample a line, every value but ``idx`` a one-element list, per-token lists over prompt
    and completion right-padded to the batch, log-prob 0 at position 0."""
    rng = np.random.default_rng(9)
    prompts = [[5, 6, 7], [8, 9]]
    width = 16
    lines, expected_z, expected_groups, kept_rows = [], [], [], []
    for row in range(6):
        prompt = prompts[row // 3]  # groups: consecutive blocks of num_generations_per_prompt
        completion = rng.integers(10, 80, size=int(rng.integers(3, 8))).tolist()
        n = len(prompt) + len(completion)
        token_ids = prompt + completion + [0] * (width - n)
        loss = [0] * len(prompt) + [1] * len(completion) + [0] * (width - n)
        prev = np.zeros(width)
        prev[1:n] = -rng.gamma(1.0, 0.5, size=n - 1)  # the trainer scores the prompt too
        gen = np.zeros(width)
        gen[len(prompt) : n] = prev[len(prompt) : n] + rng.normal(0, 0.04, size=len(completion))
        sample_mask = 0.0 if row == 4 else 1.0  # e.g. an overlong sample the loss ignores
        lines.append(
            {
                "content": [["prompt", "answer"]],
                "rewards": [float(row % 2)],
                "input_lengths": [n],
                "token_ids": [token_ids],
                "token_loss_mask": [loss],
                "sample_loss_mask": [sample_mask],
                "advantages": [[float(row % 2) - 0.5] * width],
                "generation_logprobs": [gen.tolist()],
                "prev_logprobs": [prev.tolist()],
                "idx": row,
            }
        )
        if sample_mask:
            m = np.array(loss, dtype=bool)
            expected_z.append(prev[m] - gen[m])
        kept_rows.append(row)
        expected_groups.append(row // 3)
    path = tmp_path / "logs" / "exp_001" / "train_data_step4.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    batch = ratioscope.load(path)
    assert batch.profile == "nemo-rl" and batch.ratio_pair == "old/engine"
    z = np.concatenate(expected_z)
    assert batch.num_tokens == z.size
    assert float(batch.log_ratio[batch.mask].double().mean()) == pytest.approx(z.mean(), abs=1e-9)
    assert batch.group.tolist() == expected_groups
    assert batch.rewards.tolist() == [float(r % 2) for r in range(6)]
    report = ratioscope.analyze(path)
    # NeMo-RL's gen_kl_error (k3 of prev - generation, nemo_rl/algorithms/loss/
    # loss_functions.py 414-425) is the rollout row's k3
    assert report.mismatch.rollout.k3 == pytest.approx(np.mean(np.expm1(z) - z), rel=1e-9)


# ---------------------------------------------------------------------------- OpenRLHF
def test_openrlhf_experience_fields(tmp_path):
    """The fields of OpenRLHF's ``Experience`` (OpenRLHF/OpenRLHF 3c3be6234e0c,
    openrlhf/trainer/ppo_utils/experience.py 28-69), saved as a dict: action tensors
    [B, T-1] right-padded, ``action_log_probs`` the policy at experience time (old),
    ``rollout_log_probs`` vLLM's, episode ``scores`` [B], ``prompts`` text."""
    rng = np.random.default_rng(10)
    rows, width = 6, 9
    lengths = rng.integers(2, width + 1, size=rows)
    mask = np.arange(width)[None, :] < lengths[:, None]
    old = np.where(mask, -rng.gamma(1.0, 0.5, size=(rows, width)), 0.0)
    rollout = np.where(mask, old + rng.normal(0, 0.05, size=(rows, width)), 0.0)
    prompts = ["2+2?", "2+2?", "capital?", "2+2?", "capital?", "capital?"]  # shuffled
    scores = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    path = tmp_path / "experience_3.pt"
    torch.save(
        {
            "sequences": torch.tensor(rng.integers(3, 50, size=(rows, width + 1))),
            "attention_mask": torch.ones(rows, width + 1, dtype=torch.long),
            "action_mask": torch.tensor(mask),
            "action_log_probs": torch.tensor(old, dtype=torch.float32),
            "base_action_log_probs": torch.tensor(old - 0.1, dtype=torch.float32),
            "rollout_log_probs": torch.tensor(rollout, dtype=torch.float32),
            "advantages": torch.tensor(np.where(mask, 0.3, 0.0), dtype=torch.float32),
            "scores": torch.tensor(scores),
            "prompts": prompts,
        },
        path,
    )
    batch = ratioscope.load(path)
    assert batch.profile == "openrlhf" and batch.ratio_pair == "old/engine"
    assert batch.num_tokens == int(mask.sum())
    z = (old - rollout)[mask]
    assert float(batch.log_ratio[batch.mask].double().mean()) == pytest.approx(z.mean(), abs=1e-6)
    assert batch.group.tolist() == [0, 0, 1, 0, 1, 1]
    assert batch.correct.tolist() == (scores > 0).tolist()


def test_info_describes_text_logs_and_unknown_pickles(tmp_path):
    import pickle

    log = tmp_path / "12.jsonl"  # verl trainer.rollout_data_dir: {global_step}.jsonl
    log.write_text(
        json.dumps({"input": "q", "output": "a", "gts": "4", "score": 1.0, "step": 12}) + "\n"
    )
    result = runner.invoke(app, ["info", str(log)])
    assert result.exit_code == 0
    assert "not a per-token dump" in result.stdout and "verl rollout log" in result.stdout
    other = tmp_path / "batch.pkl"
    other.write_bytes(pickle.dumps({"x": 1}))
    result = runner.invoke(app, ["info", str(other)])
    assert result.exit_code == 2
    assert "arbitrary code" in result.stderr and "--unsafe-pickle" in result.stderr
