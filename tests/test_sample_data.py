"""The committed sample data holds what its README promises.

Files are read with ``torch.load(..., weights_only=True)`` and ``json`` directly, not with
ratioscope's loaders, so that these checks stand on their own. The generator's tokenizer
and verifier are imported from its path to re-check every reward.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch

SAMPLE_DIR = Path(__file__).resolve().parents[1] / "sample_data"
SCRIPT = SAMPLE_DIR / "make_sample_data.py"
VERL_KEYS = {
    "prompts",
    "responses",
    "response_mask",
    "old_log_probs",
    "log_probs",
    "ref_log_prob",
    "rollout_log_probs",
    "advantages",
    "entropys",
    "old_entropy",
    "token_level_scores",
    "uid",
    "minibatch",
    "step",
}
PER_TOKEN_FLOAT_KEYS = (
    "old_log_probs",
    "log_probs",
    "ref_log_prob",
    "rollout_log_probs",
    "advantages",
    "entropys",
    "old_entropy",
    "token_level_scores",
)
GROUP_SIZE = 8
MINIBATCHES = 4


@pytest.fixture(scope="module")
def gen():
    """The generator script as a module (for its tokenizer, verifier and building blocks)."""
    spec = importlib.util.spec_from_file_location("make_sample_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve the module's annotations through sys.modules
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def verl_steps() -> dict[int, dict]:
    paths = sorted((SAMPLE_DIR / "verl").glob("step_*.pt"))
    return {int(p.stem.split("_")[1]): torch.load(p, weights_only=True) for p in paths}


@pytest.fixture(scope="module")
def per_step_run() -> dict[int, dict]:
    paths = sorted((SAMPLE_DIR / "verl_steps").glob("step_*.pt"))
    return {int(p.stem.split("_")[1]): torch.load(p, weights_only=True) for p in paths}


@pytest.fixture(scope="module")
def samples() -> list[dict]:
    lines = (SAMPLE_DIR / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _valid_rows(batch: dict, rows: torch.Tensor) -> torch.Tensor:
    return batch["response_mask"] & rows[:, None]


# --- verl dumps --------------------------------------------------------------------------


def test_several_verl_steps_with_the_documented_keys_and_shapes(verl_steps):
    assert len(verl_steps) >= 3
    for step, batch in verl_steps.items():
        assert set(batch) >= VERL_KEYS
        assert batch["step"] == step
        rows, width = batch["responses"].shape
        assert rows % GROUP_SIZE == 0 and rows >= 64
        assert batch["responses"].dtype == torch.int64
        assert batch["response_mask"].dtype == torch.bool
        for key in PER_TOKEN_FLOAT_KEYS:
            assert batch[key].shape == (rows, width), key
            assert batch[key].dtype == torch.float32, key
            assert torch.isfinite(batch[key]).all(), key
        assert len(batch["uid"]) == rows and all(isinstance(u, str) for u in batch["uid"])
        assert torch.equal(
            torch.bincount(batch["minibatch"], minlength=MINIBATCHES),
            torch.full((MINIBATCHES,), rows // MINIBATCHES),
        )
    with_logits = [b for b in verl_steps.values() if "logits" in b]
    assert len(with_logits) >= 1
    for batch in with_logits:
        rows, width = batch["responses"].shape
        assert batch["logits"].shape == batch["ref_logits"].shape
        assert batch["logits"].shape[:2] == (rows, width)


def test_first_minibatch_is_exactly_on_policy_and_later_ones_are_not(verl_steps):
    for batch in verl_steps.values():
        log_ratio = batch["log_probs"] - batch["old_log_probs"]
        first = _valid_rows(batch, batch["minibatch"] == 0)
        assert first.any()
        assert (log_ratio[first] == 0).all()
        later = _valid_rows(batch, batch["minibatch"] > 0)
        assert (log_ratio[later] != 0).any()
        # each later mini-batch has been trained on by at least one optimizer step
        for index in range(1, MINIBATCHES):
            valid = _valid_rows(batch, batch["minibatch"] == index)
            assert log_ratio[valid].abs().mean() > 1e-6


def test_minibatches_hold_whole_groups_in_order(verl_steps):
    for batch in verl_steps.values():
        members = defaultdict(set)
        for uid, index in zip(batch["uid"], batch["minibatch"].tolist(), strict=True):
            members[uid].add(index)
        assert all(len(indices) == 1 for indices in members.values())
        assert torch.equal(batch["minibatch"], batch["minibatch"].sort().values)


def test_advantages_are_group_normalised_rewards(verl_steps):
    for batch in verl_steps.values():
        mask = batch["response_mask"]
        rewards = batch["token_level_scores"].sum(1).numpy().astype(np.float64)
        advantage = batch["advantages"][:, 0].numpy().astype(np.float64)
        # one value per sequence, broadcast over its valid tokens, 0 on padding
        expected_tokens = batch["advantages"][:, :1] * mask
        assert torch.equal(batch["advantages"], expected_tokens)
        groups = defaultdict(list)
        for row, uid in enumerate(batch["uid"]):
            groups[uid].append(row)
        assert all(len(rows) == GROUP_SIZE for rows in groups.values())
        for rows in groups.values():
            group_rewards = rewards[rows]
            assert abs(advantage[rows].mean()) < 1e-5
            expected = (group_rewards - group_rewards.mean()) / (group_rewards.std() + 1e-6)
            np.testing.assert_allclose(advantage[rows], expected, rtol=1e-5, atol=1e-6)


def test_masks_are_prefixes_ending_at_the_end_of_sequence_token(gen, verl_steps):
    max_new = gen.RunConfig().max_new_tokens
    for batch in verl_steps.values():
        mask, responses = batch["response_mask"], batch["responses"]
        lengths = mask.sum(1)
        positions = torch.arange(mask.shape[1])
        assert torch.equal(mask, positions[None] < lengths[:, None])
        for row in range(len(lengths)):
            tokens = responses[row, : lengths[row]].tolist()
            assert gen.EOS not in tokens[:-1]
            truncated = tokens[-1] != gen.EOS
            assert not truncated or len(tokens) == max_new
            assert (responses[row, lengths[row] :] == gen.PAD).all()
        assert (lengths > 0).all() and lengths.max() == mask.shape[1]


def test_rewards_agree_with_the_verifier_on_the_decoded_text(gen, verl_steps):
    checked = 0
    for batch in verl_steps.values():
        scores = batch["token_level_scores"]
        lengths = batch["response_mask"].sum(1)
        for row in range(len(lengths)):
            prompt = gen.decode(batch["prompts"][row].tolist())
            response = gen.decode(batch["responses"][row].tolist())
            reward = float(gen.verify(prompt, response))
            assert scores[row, lengths[row] - 1].item() == reward
            assert scores[row].sum().item() == reward
            assert prompt == batch["uid"][row] + ":"
            checked += 1
    assert checked >= 3 * 64


def test_log_probs_are_log_probabilities_and_zero_on_padding(verl_steps):
    for batch in verl_steps.values():
        mask = batch["response_mask"]
        for key in ("old_log_probs", "log_probs", "ref_log_prob", "rollout_log_probs"):
            assert (batch[key][mask] <= 0).all(), key
            assert (batch[key][~mask] == 0).all(), key
        for key in ("entropys", "old_entropy"):
            assert (batch[key][mask] >= 0).all(), key
            assert (batch[key][mask] <= math.log(64)).all(), key


def test_rollout_engine_mismatch_is_real_but_small(verl_steps):
    """The engine is pi_old in bfloat16, the trainer pi_old in float32: the log-probs of
    one token differ by bfloat16 rounding. bfloat16 keeps 8 significant bits (relative
    error up to 2^-8 per rounding), float32 24 (2^-24): a float32 engine differs by ~1e-7
    on average (the KV-cache path: 6e-8), a bfloat16 one by about a bfloat16 rounding of
    the logit gaps, less on the many near-certain tokens (log p ~ 0, whose log-prob moves
    by (1 - p) times the logit error)."""
    for batch in verl_steps.values():
        mask = batch["response_mask"]
        mismatch = (batch["rollout_log_probs"] - batch["old_log_probs"])[mask].double()
        # real: nearly every token differs, and by far more than float32 rounding
        assert (mismatch != 0).double().mean() > 0.5
        assert mismatch.abs().mean() > 2**-8 / 64
        # small: below one bfloat16 rounding unit on average, and no token's engine
        # probability off by a factor 2 (the same policy, rounded)
        assert mismatch.abs().mean() < 2**-8
        assert mismatch.abs().max() < math.log(2)


def test_logits_reproduce_log_probs_and_entropy(verl_steps):
    batch = next(b for b in verl_steps.values() if "logits" in b)
    mask = batch["response_mask"]
    tokens = batch["responses"][..., None]
    for logits_key, log_prob_key in (("logits", "log_probs"), ("ref_logits", "ref_log_prob")):
        log_softmax = torch.log_softmax(batch[logits_key].double(), dim=-1)
        from_logits = log_softmax.gather(-1, tokens)[..., 0]
        # float16 logits: about 3 decimal digits
        torch.testing.assert_close(
            from_logits[mask].float(), batch[log_prob_key][mask], atol=1e-2, rtol=0
        )
    log_softmax = torch.log_softmax(batch["logits"].double(), dim=-1)
    entropy = -(log_softmax.exp() * log_softmax).sum(-1)
    torch.testing.assert_close(entropy[mask].float(), batch["entropys"][mask], atol=2e-2, rtol=0)


def test_on_policy_entropy_equals_old_entropy(verl_steps):
    for batch in verl_steps.values():
        first = _valid_rows(batch, batch["minibatch"] == 0)
        assert torch.equal(batch["entropys"][first], batch["old_entropy"][first])


# --- the per-step run (verl_steps/): every 2nd step, verl layout without logits ---------


def test_per_step_run_has_every_second_step_without_logits(per_step_run, verl_steps):
    manifest = json.loads((SAMPLE_DIR / "manifest.json").read_text(encoding="utf-8"))
    run = manifest["per_step_run"]
    assert run["directory"] == "verl_steps"
    assert sorted(per_step_run) == run["steps"] == list(range(2, 33, 2))
    assert [summary["step"] for summary in run["summaries"]] == run["steps"]
    reference = next(iter(verl_steps.values()))
    for step, batch in per_step_run.items():
        assert set(batch) == VERL_KEYS, step
        assert batch["step"] == step
        for key in VERL_KEYS:
            if isinstance(batch[key], torch.Tensor):
                assert batch[key].dtype == reference[key].dtype, (step, key)
                assert batch[key].shape[0] == reference[key].shape[0], (step, key)
            else:
                assert type(batch[key]) is type(reference[key]), (step, key)


@pytest.mark.parametrize(
    "check",
    [
        test_first_minibatch_is_exactly_on_policy_and_later_ones_are_not,
        test_minibatches_hold_whole_groups_in_order,
        test_advantages_are_group_normalised_rewards,
        test_log_probs_are_log_probabilities_and_zero_on_padding,
        test_rollout_engine_mismatch_is_real_but_small,
        test_on_policy_entropy_equals_old_entropy,
        test_masks_are_prefixes_ending_at_the_end_of_sequence_token,
        test_rewards_agree_with_the_verifier_on_the_decoded_text,
    ],
    ids=lambda check: check.__name__.removeprefix("test_"),
)
def test_per_step_run_holds_the_invariants_of_the_recorded_steps(check, gen, per_step_run):
    if "gen" in check.__code__.co_varnames[: check.__code__.co_argcount]:
        check(gen, per_step_run)
    else:
        check(per_step_run)


# --- the TRL and prime-rl copies ---------------------------------------------------------


def _only_file(directory: Path, pattern: str) -> Path:
    found = sorted(directory.glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_trl_step_agrees_with_its_verl_step(verl_steps):
    path = _only_file(SAMPLE_DIR / "trl", "step_*.pt")
    trl = torch.load(path, weights_only=True)
    verl = verl_steps[int(path.stem.split("_")[1])]
    pairs = {
        "old_per_token_logps": "old_log_probs",
        "per_token_logps": "log_probs",
        "ref_per_token_logps": "ref_log_prob",
        "sampling_per_token_logps": "rollout_log_probs",
        "completion_ids": "responses",
        "prompt_ids": "prompts",
    }
    for trl_key, verl_key in pairs.items():
        assert torch.equal(trl[trl_key], verl[verl_key]), trl_key
    assert torch.equal(trl["completion_mask"].bool(), verl["response_mask"])
    assert trl["advantages"].shape == (len(verl["uid"]),)
    assert torch.equal(trl["advantages"][:, None] * verl["response_mask"], verl["advantages"])
    assert torch.equal(trl["rewards"], verl["token_level_scores"].sum(1))


def _float32(values: list) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def test_prime_rl_export_agrees_with_its_verl_step(gen):
    path = _only_file(SAMPLE_DIR / "prime_rl" / "token_exports", "step_*/rank_0.jsonl")
    step = int(path.parent.name.split("_")[1])
    verl = torch.load(SAMPLE_DIR / "verl" / f"step_{step:04d}.pt", weights_only=True)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(records) == len(verl["uid"])
    prompt_len = verl["prompts"].shape[1]
    example_of_uid = {}
    for row, record in enumerate(records):
        length = int(verl["response_mask"][row].sum())
        assert record["schema_version"] == 1 and record["rank"] == 0
        assert record["step"] == step
        assert record["micro_step"] == int(verl["minibatch"][row])
        assert record["env_name"] == gen.DATASET
        example_of_uid.setdefault(verl["uid"][row], record["example_id"])
        assert example_of_uid[verl["uid"][row]] == record["example_id"]
        expected_ids = verl["prompts"][row].tolist() + verl["responses"][row, :length].tolist()
        assert record["token_ids"] == expected_ids
        assert record["loss_mask"] == [False] * prompt_len + [True] * length
        for field in ("inference_logprobs", "trainer_logprobs", "entropy", "mismatch_kl"):
            assert len(record[field]) == prompt_len + length
            assert record[field][:prompt_len] == [None] * prompt_len
        completion = slice(prompt_len, None)
        inference = _float32(record["inference_logprobs"][completion])
        trainer = _float32(record["trainer_logprobs"][completion])
        np.testing.assert_array_equal(inference, verl["rollout_log_probs"][row, :length].numpy())
        np.testing.assert_array_equal(trainer, verl["log_probs"][row, :length].numpy())
        np.testing.assert_array_equal(
            _float32(record["entropy"][completion]), verl["entropys"][row, :length].numpy()
        )
        log_ratio = _float32(record["log_importance_ratio"][completion])
        np.testing.assert_allclose(log_ratio, trainer - inference, atol=1e-7, rtol=0)
        expected_kl = np.expm1(log_ratio.astype(np.float64)) - log_ratio
        np.testing.assert_allclose(
            _float32(record["mismatch_kl"][completion]), expected_kl, atol=1e-7, rtol=0
        )
        advantage = float(verl["advantages"][row, 0])
        assert record["advantages"] == [0.0] * prompt_len + [pytest.approx(advantage)] * length
        reward = float(verl["token_level_scores"][row].sum())
        assert record["rewards"] == [0.0] * prompt_len + [reward] * length
        assert len(record["losses"]) == prompt_len + length
        assert all(set(loss) == {"pg", "kl"} for loss in record["losses"])
    # the export's example ids partition the rows exactly as verl's uids do
    assert len(set(example_of_uid.values())) == len(example_of_uid)


# --- evaluation samples ------------------------------------------------------------------


def test_samples_have_64_per_problem_for_both_policies(samples):
    counts = defaultdict(list)
    for sample in samples:
        assert {"problem_id", "response", "correct", "method", "sample_index", "answer"} <= set(
            sample
        )
        assert sample["dataset"] == "mod-by-subtraction"
        counts[(sample["method"], sample["problem_id"])].append(sample["sample_index"])
    problems = {problem for _, problem in counts}
    assert len(problems) >= 50
    assert {method for method, _ in counts} == {"base", "grpo"}
    for method in ("base", "grpo"):
        for problem in problems:
            assert sorted(counts[(method, problem)]) == list(range(64))


def test_samples_correctness_matches_the_verifier_and_the_answer(gen, samples):
    for sample in samples:
        n, k = (int(part) for part in sample["problem_id"].split("%"))
        assert sample["answer"] == str(n % k)
        assert sample["correct"] == gen.verify(sample["problem_id"] + ":", sample["response"])
        # independent check of the verifier: the text after the last '#' is the answer
        _, sep, tail = sample["response"].rpartition("#")
        assert sample["correct"] == (sep == "#" and tail.isdigit() and int(tail) == n % k)


def test_grpo_policy_beats_the_supervised_policy_on_held_out_problems(samples):
    by_method = defaultdict(list)
    per_problem = defaultdict(lambda: defaultdict(int))
    for sample in samples:
        by_method[sample["method"]].append(sample["correct"])
        per_problem[sample["problem_id"]][sample["method"]] += sample["correct"]
    base = sum(by_method["base"]) / len(by_method["base"])
    grpo = sum(by_method["grpo"]) / len(by_method["grpo"])
    assert 0.1 < base < 0.9, "the supervised policy should be decent but imperfect"
    assert grpo > base
    improved = sum(c["grpo"] > c["base"] for c in per_problem.values())
    worsened = sum(c["grpo"] < c["base"] for c in per_problem.values())
    assert improved > worsened


def test_committed_sample_data_stays_within_its_budget():
    sizes = {
        p: p.stat().st_size
        for p in SAMPLE_DIR.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    per_step = sum(size for p, size in sizes.items() if "verl_steps" in p.parts)
    runs = sum(size for p, size in sizes.items() if "runs" in p.parts)
    # the async and top-p variants have a budget of their own (tests/test_variants.py)
    variants = sum(size for p, size in sizes.items() if "variants" in p.parts)
    # 10 MB for the recorded steps, copies and samples; the per-step run (16 steps of the
    # verl layout without logits, about 0.8 MB each) on top; and the two runs of the
    # corpus of real runs (30 captured steps each, a quarter of the groups: about 2 MB)
    assert sum(sizes.values()) - per_step - runs - variants < 10_000_000
    assert per_step < 13_500_000
    assert runs < 4_500_000


# --- the generator's building blocks -----------------------------------------------------


def test_tokenizer_round_trip_and_verifier(gen):
    problem = gen.Problem(95, 7)
    text = gen.solution(problem)
    assert text.startswith("095-7=088,088-7=081,") and text.endswith(",011-7=004#4")
    ids = gen.encode(text)
    assert len(ids) == 9 * (95 // 7) + 1
    assert gen.decode([*ids, gen.EOS, gen.PAD]) == text
    assert gen.verify(problem.prompt, text)
    assert not gen.verify(problem.prompt, gen.solution(problem, stop_early=True))
    assert not gen.verify(problem.prompt, text + ",")


def _tiny_config(gen):
    model = gen.ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32)
    return dataclasses.replace(
        gen.RunConfig(),
        model=model,
        held_out=2,
        sft_steps=3,
        sft_batch=4,
        grpo_steps=2,
        prompts_per_step=4,
        record_every=1,
        max_new_tokens=24,
        eval_samples=4,
    )


def test_generator_is_deterministic_on_a_tiny_run(gen, tmp_path):
    config = _tiny_config(gen)
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    first = gen.generate(config, tmp_path / "a", log=lambda _: None)
    second = gen.generate(config, tmp_path / "b", log=lambda _: None)
    assert first == second
    # the run leaves the caller's torch settings as they were
    assert torch.get_num_threads() == threads
    assert torch.are_deterministic_algorithms_enabled() == deterministic
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.*"))
    assert {f.parts[0] for f in files} >= {
        "verl",
        "verl_steps",
        "trl",
        "prime_rl",
        "samples.jsonl",
    }
    for relative in files:
        a, b = tmp_path / "a" / relative, tmp_path / "b" / relative
        if relative.suffix == ".pt":
            left, right = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
            assert left.keys() == right.keys()
            for key, value in left.items():
                if isinstance(value, torch.Tensor):
                    assert torch.equal(value, right[key]), (relative, key)
                else:
                    assert value == right[key], (relative, key)
        else:
            assert a.read_bytes() == b.read_bytes(), relative


def test_per_step_run_only_adds_files(gen, tmp_path):
    """Writing verl_steps/ consumes no random numbers: the other files stay byte-identical."""
    config = dataclasses.replace(_tiny_config(gen), record_every=2, grpo_steps=4)
    with_run = gen.generate(config, tmp_path / "a", log=lambda _: None)
    without = gen.generate(
        dataclasses.replace(config, per_step_every=0), tmp_path / "b", log=lambda _: None
    )
    assert with_run["per_step_run"]["steps"] == [2, 4]
    assert with_run["steps"] == without["steps"] and with_run["accuracy"] == without["accuracy"]
    files_a = {p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.*")}
    files_b = {p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*.*")}
    assert files_a - files_b == {
        Path("verl_steps", "step_0002.pt"),
        Path("verl_steps", "step_0004.pt"),
    }
    for relative in files_b - {Path("manifest.json")}:
        assert (tmp_path / "a" / relative).read_bytes() == (
            tmp_path / "b" / relative
        ).read_bytes(), relative
    # the per-step file of a recorded step is that step's verl batch without the logits
    recorded = torch.load(tmp_path / "a" / "verl" / "step_0004.pt", weights_only=True)
    per_step = torch.load(tmp_path / "a" / "verl_steps" / "step_0004.pt", weights_only=True)
    assert "logits" in recorded and set(recorded) - set(per_step) == {"logits", "ref_logits"}
    for key, value in per_step.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, recorded[key]), key
        else:
            assert value == recorded[key], key


def test_rollout_engine_log_probs_match_the_full_forward_pass(gen):
    torch.manual_seed(0)
    model = gen.TinyCausalLM(gen.ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32))
    prompts = torch.tensor([[gen.BOS, *gen.encode(gen.Problem(95, 7).prompt)]] * 6)
    rollout = gen.sample(model, prompts, 30, torch.Generator().manual_seed(1))
    logits = gen.response_logits(model, prompts, rollout.responses)
    full, _ = gen.token_log_probs_and_entropy(logits, rollout.responses)
    torch.testing.assert_close(
        full[rollout.mask], rollout.log_probs[rollout.mask], atol=1e-5, rtol=0
    )
    assert (rollout.log_probs[~rollout.mask] == 0).all()


def test_bfloat16_engine_scores_the_tokens_at_bfloat16_precision_and_draws_nothing(gen):
    torch.manual_seed(0)
    model = gen.TinyCausalLM(gen.ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32))
    prompts = torch.tensor([[gen.BOS, *gen.encode(gen.Problem(95, 7).prompt)]] * 6)
    rollout = gen.sample(model, prompts, 30, torch.Generator().manual_seed(1))
    before = {name: value.clone() for name, value in model.state_dict().items()}
    rng_state = torch.get_rng_state()
    engine = gen.bfloat16_engine_log_probs(model, prompts, rollout.responses, rollout.mask)
    # no random number drawn, the float32 policy left as it was
    assert torch.equal(torch.get_rng_state(), rng_state)
    for name, value in model.state_dict().items():
        assert value.dtype == torch.float32 and torch.equal(value, before[name]), name
    assert engine.dtype == torch.float32 and (engine[~rollout.mask] == 0).all()
    # the same tokens scored by the float32 policy (full pass): a real but bfloat16-sized
    # difference. bfloat16 rounds to 8 significant bits (relative error up to 2^-8), float32
    # to 24 (2^-24): at float32 the mean difference would be ~1e-7 (the KV-cache path's)
    logits = gen.response_logits(model, prompts, rollout.responses)
    float32, _ = gen.token_log_probs_and_entropy(logits, rollout.responses)
    difference = (engine - float32)[rollout.mask].abs()
    assert 2**-8 / 64 < difference.mean() < 2**-8 * 8
    assert (difference > 0).float().mean() > 0.5


def test_group_advantages_match_a_hand_computed_case(gen):
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    advantages = gen.group_advantages(rewards, group_size=4)
    std = math.sqrt(0.25 * 0.75)  # population std of (1, 0, 0, 0)
    expected = [0.75 / (std + 1e-6)] + [-0.25 / (std + 1e-6)] * 3 + [0.0] * 4
    torch.testing.assert_close(advantages, torch.tensor(expected), atol=1e-6, rtol=0)


# --- benchmarks/make_synthetic.py: synthetic dumps for benchmarks, never sample data -----


@pytest.fixture(scope="module")
def synthetic():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "make_synthetic.py"
    spec = importlib.util.spec_from_file_location("make_synthetic", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_synthetic_dump_is_deterministic_and_shaped(synthetic):
    first = synthetic.make_synthetic(40, 64, seed=5, extras=["all"])
    second = synthetic.make_synthetic(40, 64, seed=5, extras=["all"])
    assert set(first) == {"mask", "old_log_probs", "log_probs", *synthetic.EXTRAS}
    for key, value in first.items():
        assert torch.equal(value, second[key]), key
    mask = first["mask"]
    assert mask.shape == (40, 64) and mask[:, 0].all() and mask.sum(1).max() == 64
    assert (mask.sum(1) < 64).any()
    for key in ("old_log_probs", "log_probs", "ref_log_probs", "advantages", "entropy"):
        assert (first[key][~mask] == 0).all(), key
    other = synthetic.make_synthetic(40, 64, seed=6)
    assert not torch.equal(other["log_probs"], first["log_probs"])


def test_synthetic_log_ratio_is_ar1_with_exact_zeros(synthetic):
    rows, width, phi = 64, 512, 0.9
    batch = synthetic.make_synthetic(
        rows,
        width,
        seed=1,
        phi=phi,
        spike_probability=0.0,
        zero_probability=0.0,
        min_length=width,
    )
    log_ratio = (batch["log_probs"] - batch["old_log_probs"]).double()
    on_policy = rows // 4
    assert (log_ratio[:on_policy] == 0).all()
    z = log_ratio[on_policy:]
    lag1 = (z[:, 1:] * z[:, :-1]).sum() / (z[:, :-1] ** 2).sum()
    assert abs(lag1.item() - phi) < 0.02
    spiky = synthetic.make_synthetic(rows, width, seed=1, spike_probability=0.01)
    spiky_ratio = (spiky["log_probs"] - spiky["old_log_probs"])[spiky["mask"]]
    assert (spiky_ratio == 0).float().mean() > 0.25
    assert spiky_ratio.abs().max() > 0.1


def test_synthetic_left_padding_holds_the_same_sequences(synthetic):
    right = synthetic.make_synthetic(24, 48, seed=2, extras=["advantages", "group"])
    left = synthetic.make_synthetic(24, 48, seed=2, extras=["advantages", "group"], padding="left")
    assert left["mask"][:, -1].all()
    for row in range(24):
        for key in ("log_probs", "old_log_probs", "advantages"):
            assert torch.equal(
                right[key][row][right["mask"][row]], left[key][row][left["mask"][row]]
            )
    advantage = right["advantages"][:, 0]
    for group in right["group"].unique():
        assert abs(advantage[right["group"] == group].mean().item()) < 1e-6


def test_synthetic_files_are_labelled(synthetic, tmp_path):
    batch = synthetic.make_synthetic(8, 16, seed=0)
    saved = torch.load(synthetic.write_synthetic(batch, tmp_path / "s.pt"), weights_only=True)
    assert "SYNTHETIC" in saved["synthetic"]
    from safetensors import safe_open

    with safe_open(synthetic.write_synthetic(batch, tmp_path / "s.safetensors"), "pt") as f:
        assert "SYNTHETIC" in f.metadata()["synthetic"]
        assert torch.equal(f.get_tensor("log_probs"), batch["log_probs"])
