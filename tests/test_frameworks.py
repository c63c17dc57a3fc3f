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
