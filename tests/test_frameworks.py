"""Native readers: files built with the exact structure each framework's source writes,
checked for roles, valid tokens, mean log-ratio, groups and correctness against direct
computations from the values written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from framework_files import (
    SKYRL_MODULE,
    prime_rl_line,
    skyrl_pickle,
    skyrl_state,
    slime_v1_rank,
    write_rollout_dump,
)
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.errors import InputError

runner = CliRunner()


# ----------------------------------------------------------------------------- prime-rl


def test_prime_rl_export_groups_by_prompt_tokens_and_compares_trainer_with_engine(tmp_path):
    rng = np.random.default_rng(0)
    prompts = {"a": [1, 2, 3, 4], "b": [1, 2, 9], "c": [7, 8, 9, 10, 11]}
    order = ["b", "a", "c", "a", "b", "c", "a", "b"]  # packing order, not rollout order
    lines = [prime_rl_line(rng, i, prompts[p], 3 + i, step=5) for i, p in enumerate(order)]
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
    line = prime_rl_line(rng, 0, [1, 2], 6, step=1)
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
    line = prime_rl_line(rng, 0, [1], 4, step=1)
    path = tmp_path / "rank_0.jsonl"
    path.write_text(json.dumps(line) + "\n")
    result = runner.invoke(app, ["analyze", str(path), "--group-size", "1"])
    assert result.exit_code == 2
    assert "identical prompt tokens" in result.stderr


# -------------------------------------------------------------------------------- slime


def test_slime_v1_ranks_rank_copies_and_the_rollout_dump(tmp_path):
    rng = np.random.default_rng(3)
    # a rollout of 8 samples in 2 groups; data-parallel rank 0 trains positions 0-3 and
    # rank 1 positions 4-7; tensor-parallel peers (ranks 1 and 3) write the same data again
    indices = list(range(40, 48))
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    raw = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
    dump = tmp_path / "dump"
    write_rollout_dump(dump / "rollout_data", 4, groups, raw, indices)
    expected_z, expected_lengths = [], []
    for dp, rows in enumerate(([0, 1, 2, 3], [4, 5, 6, 7])):
        lengths = rng.integers(3, 9, size=4).tolist()
        obj, old, engine = slime_v1_rank(rng, [indices[r] for r in rows], lengths=lengths)
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
    # each file's hash starts before the file is read; a skipped copy's is dropped
    for entry in report.inputs:
        assert entry.sha256 == hashlib.sha256(Path(entry.path).read_bytes()).hexdigest()
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
    obj, _, _ = slime_v1_rank(rng, [0, 1, 2], lengths=[4, 5, 6])
    obj["rollout_data"]["raw_reward"] = [1.0, 0.0, 1.0, 0.0]
    path = tmp_path / "4_0.pt"
    torch.save(obj, path)
    batch = ratioscope.load(path)
    assert batch.rewards is None and batch.group is None
    assert any("group-normalised" in w for w in batch.warnings)


def test_slime_files_that_cannot_give_a_ratio_say_why(tmp_path):
    rng = np.random.default_rng(5)
    # a pipeline stage other than the last holds no log-probs and no advantages
    obj, _, _ = slime_v1_rank(rng, [0, 1], lengths=[3, 4], last_stage=False)
    torch.save(obj, tmp_path / "4_0.pt")
    result = runner.invoke(app, ["analyze", str(tmp_path / "4_0.pt")])
    assert result.exit_code == 2 and "pipeline stage" in result.stderr
    # one optimizer step per rollout: slime does not recompute the old policy
    obj, _, _ = slime_v1_rank(rng, [0, 1], lengths=[3, 4])
    del obj["rollout_data"]["log_probs"]
    torch.save(obj, tmp_path / "4_1.pt")
    result = runner.invoke(app, ["analyze", str(tmp_path / "4_1.pt")])
    assert result.exit_code == 2 and "--get-mismatch-metrics" in result.stderr
    # context-parallel ranks of v1 hold slices of each response
    obj, _, _ = slime_v1_rank(rng, [0, 1], lengths=[6, 8], cut=3)
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
    write_rollout_dump(tmp_path / "rollout_data", 9, [0, 0, 1, 1], raw, [10, 11, 12, 13])
    batch = ratioscope.load(tmp_path / "train_data" / "9.pt")
    assert batch.profile == "slime" and batch.ratio_pair == "old/engine"
    assert batch.rewards.tolist() == raw
    assert batch.group.tolist() == [0, 0, 1, 1]
    order = sorted(range(4), key=lambda k: positions[k])
    z = np.concatenate([zs[k] for k in order])
    assert float(batch.log_ratio[batch.mask].double().mean()) == pytest.approx(z.mean(), abs=1e-7)
    assert batch.num_tokens == sum(lengths)


# -------------------------------------------------------------------------------- SkyRL


@pytest.mark.parametrize("enum_formats", [False, True], ids=["skyrl-0.3", "skyrl-0.4"])
def test_skyrl_pickle_is_decoded_with_its_loss_mask_without_running_it(tmp_path, enum_formats):
    rng = np.random.default_rng(7)
    state, loss, response, old, engine, sequences = skyrl_state(rng)
    path = tmp_path / "dumped_data" / "global_step_3_training_input.pkl"
    path.parent.mkdir()
    path.write_bytes(skyrl_pickle(state, enum_formats=enum_formats))
    # no SkyRL at read time: the stand-ins were only there while pickling
    assert not [m for m in __import__("sys").modules if m.startswith("skyrl")]

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


def test_a_hostile_pickle_naming_skyrl_runs_no_code(tmp_path):
    import os
    import pickle

    marker = tmp_path / "ran"

    class Hostile:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    rng = np.random.default_rng(8)
    state, *_ = skyrl_state(rng)
    state["metadata"]["metrics"] = Hostile()  # a global call hidden inside the state
    path = tmp_path / "global_step_1_training_input.pkl"
    path.write_bytes(skyrl_pickle(state, enum_formats=False))
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
def test_a_nemo_rl_log_folder_skips_its_validation_log_and_steps_come_from_names(tmp_path):
    """The log directory holds val_data_step{N}.jsonl (no per-token data) beside the
    dumps: a folder given whole stopped at its missing mask, and timeline found no step
    in train_data_step{N}.jsonl."""
    import shutil

    logs = tmp_path / "exp_001"
    source = Path(__file__).parents[1] / "sample_data/frameworks/nemo-rl/logs/exp_001"
    shutil.copytree(source, logs)
    shutil.copy(logs / "train_data_step4.jsonl", logs / "train_data_step5.jsonl")
    out = tmp_path / "timeline.json"
    result = runner.invoke(app, ["timeline", str(logs), "--json", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert [step["step"] for step in json.loads(out.read_text())["steps"]] == [4, 5]
    assert "warning: skipped" in result.stderr and "a NeMo-RL validation log" in result.stderr
    result = runner.invoke(app, ["analyze", str(logs)])
    assert result.exit_code == 0, result.output
    assert "warning: skipped" in result.stderr and "a NeMo-RL validation log" in result.stderr
    alone = runner.invoke(app, ["analyze", str(logs / "val_data_step4.jsonl")])
    assert alone.exit_code == 2 and "train_data_step*.jsonl files beside it" in alone.stderr


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


def test_load_of_a_slime_directory_takes_rank_copies_once(tmp_path):
    rng = np.random.default_rng(11)
    obj, _, _ = slime_v1_rank(rng, [0, 1, 2], lengths=[3, 4, 5])
    obj["rollout_data"]["raw_reward"] = [1.0, 0.0, 1.0]
    for rank in (0, 1):  # tensor-parallel peers
        torch.save(obj, tmp_path / f"4_{rank}.pt")
    batch = ratioscope.load(tmp_path)
    assert batch.num_sequences == 3
    assert batch.num_tokens == 12


def test_info_says_which_ratio_and_where_groups_come_from(tmp_path):
    rng = np.random.default_rng(12)
    lines = [prime_rl_line(rng, i, [1, 2], 3, step=1) for i in range(4)]
    path = tmp_path / "rank_0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = runner.invoke(app, ["info", str(path)]).stdout
    assert "importance ratio z = log current policy (trainer) / inference engine" in out
    assert "from identical prompt tokens" in out
    for line in lines:  # an older export with its own id column
        line["example_id"] = 7
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = runner.invoke(app, ["info", str(path)]).stdout
    assert "1 groups (1 of size 4), from 'example_id'" in out
