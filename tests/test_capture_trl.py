"""ratioscope.capture.trl on a real TRL GRPOTrainer run, on the CPU, with no network.

A tiny randomly initialised GPT-2 and a character tokenizer built here train for three
optimizer steps (2 prompts x 4 generations per generation batch, 2 micro-batches per
step, ``num_iterations=2`` so that TRL computes ``old_per_token_logps``, ``beta > 0`` so
that it computes ``ref_per_token_logps``). The trainer used by the tests observes what
TRL's ``_compute_loss`` really received (row ids after the shuffle, the loss mask) and
what the reward functions really returned; the capture files and ``ratioscope analyze``
are checked against those observations, not against the capture's own bookkeeping.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest

# read by huggingface_hub and transformers at import time: never touch the network
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_DISABLED": "true",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}.items():
    os.environ.setdefault(_name, _value)

trl = pytest.importorskip("trl")

# transformers 5 renames gradient_checkpointing; TRL 1.16 still uses the old names
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*checkpointing.*deprecated:FutureWarning"),
    pytest.mark.slow,  # a real GRPOTrainer run: the slow tier (pytest -m slow, .ci/run)
]

import torch  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import ratioscope  # noqa: E402
from ratioscope.capture.trl import (  # noqa: E402
    ROW_ID_KEY,
    CaptureConfig,
    IncompatibleTrainerError,
    RatioscopeCaptureMixin,
    with_capture,
)
from ratioscope.cli import app  # noqa: E402

GENERATIONS = 4
PROMPTS = ["1+1=?", "2+3=?", "abc", "hello"]
WEIGHTS = (1.0, 0.5)
STEPS = 3


# --------------------------------------------------------------------------- the run
def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = list("abcdefghijklmnopqrstuvwxyz0123456789 +=?.,")
    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<unk>", *chars])}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tokenizer.decoder = decoders.Fuse()  # no spaces between decoded characters
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    fast.padding_side = "left"
    return fast


def save_tiny_model(directory: Path, tokenizer) -> None:
    """A saved model, so that TRL can load the reference model from its path (beta > 0)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=1,
        n_embd=32,
        n_head=2,
        n_positions=64,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


class RewardLog:
    """Reward functions that remember what they returned, per (prompt, completion ids);
    both are deterministic, so a completion drawn twice gets the same values."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, tuple[int, ...]], dict[int, float]] = defaultdict(dict)

    def functions(self):
        def reward_length(prompts, completions, completion_ids, **kwargs):
            out = [len(ids) / 8.0 for ids in completion_ids]
            self._note(0, prompts, completion_ids, out)
            return out

        def reward_has_a(prompts, completions, completion_ids, **kwargs):
            out = [1.0 if "a" in text else 0.0 for text in completions]
            self._note(1, prompts, completion_ids, out)
            return out

        return [reward_length, reward_has_a]

    def _note(self, function: int, prompts, completion_ids, out) -> None:
        for prompt, ids, value in zip(prompts, completion_ids, out, strict=True):
            self.values[(prompt, tuple(ids))][function] = value

    def weighted(self, prompt: str, ids: tuple[int, ...]) -> float:
        values = self.values[(prompt, ids)]
        assert sorted(values) == [0, 1], (prompt, ids, values)  # both functions scored it
        return sum(w * values[f] for f, w in enumerate(WEIGHTS))


def observing(base: type) -> type:
    """``base`` plus what the test observes: the rows TRL generated (before the shuffle)
    and the inputs its ``_compute_loss`` received (after it). It also adds a ``tool_mask``
    as TRL builds one for tool calls (0 on tool-output tokens, here the second token),
    so that the loss mask is ``completion_mask * tool_mask``."""

    class Observed(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.generated: dict[int, dict] = {}  # row id -> prompt, completion ids
            self.losses: list[dict] = []

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            completion_mask = output["completion_mask"]
            tool_mask = torch.ones_like(completion_mask)
            tool_mask[:, 1] = 0
            output["tool_mask"] = tool_mask
            for i, row_id in enumerate(output[ROW_ID_KEY].tolist()):
                valid = completion_mask[i].bool()
                self.generated[row_id] = {
                    "prompt": inputs[i]["prompt"],
                    "ids": tuple(output["completion_ids"][i][valid].tolist()),
                }
            return output

        def _compute_loss(self, model, inputs):
            old = inputs.get("old_per_token_logps")
            self.losses.append(
                {
                    "step": self.state.global_step,
                    "row_ids": inputs[ROW_ID_KEY].tolist(),
                    "loss_mask": (inputs["completion_mask"] * inputs["tool_mask"]).bool(),
                    "old": None if old is None else old.detach().clone(),
                    "advantages": inputs["advantages"].detach().clone(),
                }
            )
            return super()._compute_loss(model, inputs)

    return Observed


def train(root: Path, trainer_class: type, capture: CaptureConfig, **overrides):
    from datasets import Dataset
    from trl import GRPOConfig

    tokenizer = build_tokenizer()
    model_dir = root / "model"
    save_tiny_model(model_dir, tokenizer)
    rewards = RewardLog()
    args = GRPOConfig(
        output_dir=str(root / "trl"),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=2,  # generation batch: 8 rows = 2 prompts x 4
        num_generations=GENERATIONS,
        num_iterations=overrides.pop("num_iterations", 2),  # old logps exist: the ratio is not 1
        beta=0.04,  # ref_per_token_logps exist
        reward_weights=list(WEIGHTS),
        max_completion_length=8,
        max_steps=overrides.pop("max_steps", STEPS),
        learning_rate=overrides.pop("learning_rate", 5e-2),  # the ratio moves after one step
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        log_completions=False,
        dataloader_num_workers=0,
        seed=0,
        **overrides,
    )
    trainer = trainer_class(
        model=str(model_dir),
        reward_funcs=rewards.functions(),
        args=args,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
        processing_class=tokenizer,
        ratioscope_capture=capture,
    )
    started = time.perf_counter()
    trainer.train()
    return SimpleNamespace(
        trainer=trainer,
        rewards=rewards,
        seconds=time.perf_counter() - started,
        dir=capture.directory,
    )


@pytest.fixture(scope="module")
def step_run(tmp_path_factory):
    """Default granularity "step", through the mixin."""
    root = tmp_path_factory.mktemp("trl_step")
    trainer_class = observing(type("Trainer", (RatioscopeCaptureMixin, trl.GRPOTrainer), {}))
    return train(root, trainer_class, CaptureConfig(root / "captures"))


@pytest.fixture(scope="module")
def micro_batch_run(tmp_path_factory):
    """Granularity "micro_batch", through with_capture."""
    root = tmp_path_factory.mktemp("trl_micro")
    trainer_class = observing(with_capture(trl.GRPOTrainer))
    return train(root, trainer_class, CaptureConfig(root / "captures", granularity="micro_batch"))


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def parts(directory) -> list[Path]:
    return sorted(Path(directory).rglob("*.pt"))


# --------------------------------------------------------------------------- checks
def test_the_run_exercises_the_shuffle_old_and_ref_log_probs(step_run):
    losses = step_run.trainer.losses
    assert len(losses) == STEPS * 2  # 2 micro-batches per optimizer step
    assert [m["step"] for m in losses] == [0, 0, 1, 1, 2, 2]
    # TRL shuffles the generation batch before splitting it into micro-batches
    assert any(m["row_ids"] != sorted(m["row_ids"]) for m in losses)
    assert all(m["old"] is not None for m in losses)
    assert step_run.seconds < 30


def test_step_files_hold_whole_groups_that_are_the_prompts(step_run):
    files = parts(step_run.dir)
    assert [p.relative_to(step_run.dir).as_posix() for p in files] == [
        f"step_{s:06d}/rank_00000_part_0000.pt" for s in range(STEPS)
    ]
    generated = step_run.trainer.generated
    for step, path in enumerate(files):
        stored = load(path)
        row_ids = sorted(
            r for m in step_run.trainer.losses if m["step"] == step for r in m["row_ids"]
        )
        group = stored["group"].tolist()
        assert len(group) == len(row_ids) == 8
        assert Counter(group) == {g: GENERATIONS for g in set(group)}
        prompts_of_group = defaultdict(set)
        for k, (g, row_id) in enumerate(zip(group, row_ids, strict=True)):
            prompts_of_group[g].add(generated[row_id]["prompt"])
            # rows are stored in generation order: row k holds these completion ids
            ids = generated[row_id]["ids"]
            assert tuple(stored["token_ids"][k, : len(ids)].tolist()) == ids
        assert all(len(p) == 1 for p in prompts_of_group.values())  # one prompt per group
        assert len({next(iter(p)) for p in prompts_of_group.values()}) == 2  # 2 prompts each
    # groups differ across generation batches: steps 0-1 reuse batch 0, step 2 is batch 1
    groups = [set(load(p)["group"].tolist()) for p in files]
    assert groups[0] == groups[1] and not groups[0] & groups[2]


def test_rewards_equal_the_weighted_reward_functions(step_run):
    generated = step_run.trainer.generated
    for step, path in enumerate(parts(step_run.dir)):
        stored = load(path)
        row_ids = sorted(
            r for m in step_run.trainer.losses if m["step"] == step for r in m["row_ids"]
        )
        expected = [
            step_run.rewards.weighted(generated[r]["prompt"], generated[r]["ids"]) for r in row_ids
        ]
        assert stored["rewards"].tolist() == pytest.approx(expected, abs=1e-6)


def test_masks_old_log_probs_and_advantages_are_those_of_the_loss(step_run):
    losses = step_run.trainer.losses
    for step, path in enumerate(parts(step_run.dir)):
        stored = load(path)
        micro = [m for m in losses if m["step"] == step]
        row_ids = torch.tensor([r for m in micro for r in m["row_ids"]])
        order = torch.argsort(row_ids)
        width = stored["mask"].shape[1]
        mask = torch.cat([m["loss_mask"] for m in micro])[order]
        assert not mask[:, width:].any()
        assert torch.equal(stored["mask"], mask[:, :width])
        assert not stored["mask"][:, 1].any()  # the tool_mask zeroes the second token
        old = torch.cat([m["old"] for m in micro])[order][:, :width]
        assert torch.equal(stored["old_log_probs"][mask[:, :width]], old[mask[:, :width]])
        advantages = torch.cat([m["advantages"] for m in micro])[order]
        assert torch.equal(stored["advantages"], advantages)
        assert {"ref_log_probs", "entropy", "token_ids"} <= set(stored)
        assert "rollout_log_probs" not in stored  # no vLLM: no sampling_per_token_logps
    # step 0 trains on the weights that computed the old log-probs; later steps do not
    z = [
        (s["log_probs"] - s["old_log_probs"])[s["mask"]].abs().max().item()
        for s in map(load, parts(step_run.dir))
    ]
    assert z[0] < 1e-5 and z[1] > 1e-4


def test_analyze_counts_the_loss_tokens_groups_and_rewards(step_run, tmp_path):
    losses = step_run.trainer.losses
    tokens = sum(int(m["loss_mask"].sum()) for m in losses)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["analyze", str(step_run.dir), "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["mismatch"]["policy"]["tokens"] == tokens
    assert report["mismatch"]["policy"]["sequences"] == 8 * STEPS
    assert report["trust_region"]["groups"] == 2 * STEPS
    assert report["trust_region"]["group_sizes"] == {str(GENERATIONS): 2 * STEPS}
    # the mean log-ratio, against the stored tensors
    z = torch.cat(
        [(s["log_probs"] - s["old_log_probs"])[s["mask"]] for s in map(load, parts(step_run.dir))]
    )
    assert math.isclose(
        report["mismatch"]["policy"]["k1"], -z.double().mean().item(), rel_tol=1e-4, abs_tol=1e-9
    )
    # the library call gives the same counts
    assert ratioscope.analyze(step_run.dir).to_dict()["mismatch"]["policy"]["tokens"] == tokens


def test_micro_batch_granularity_writes_each_loss_call_as_it_came(micro_batch_run):
    files = parts(micro_batch_run.dir)
    losses = micro_batch_run.trainer.losses
    assert [p.relative_to(micro_batch_run.dir).as_posix() for p in files] == [
        f"step_{s:06d}/rank_00000_part_{k:04d}.pt" for s in range(STEPS) for k in range(2)
    ]
    for path, micro in zip(files, losses, strict=True):
        stored = load(path)
        # the shuffled order of the loss; the group is the row's prompt group
        assert stored["group"].tolist() == [r // GENERATIONS for r in micro["row_ids"]]
        width = stored["mask"].shape[1]
        assert torch.equal(stored["mask"], micro["loss_mask"][:, :width])
    report = ratioscope.analyze(micro_batch_run.dir).to_dict()
    assert report["mismatch"]["policy"]["tokens"] == sum(int(m["loss_mask"].sum()) for m in losses)
    summary = micro_batch_run.trainer.ratioscope_writer.summary()
    assert summary.parts_written == len(files) == 2 * STEPS


# ------------------------------------------------------------------- without training
def test_row_ids_and_groups_follow_the_process_slice():
    """Rank 1 of 2, 8 local rows, G = 4: global rows 8..15 of the first generation batch,
    16 + 8..15 of the second; rewards are rank 1's slice of the gathered rewards."""
    per_func = torch.arange(32, dtype=torch.float32).reshape(16, 2)
    fake = SimpleNamespace(
        accelerator=SimpleNamespace(process_index=1, num_processes=2),
        num_generations=4,
        reward_weights=torch.tensor([1.0, 0.5]),
        _ratioscope_rewards_per_func=per_func,
        _ratioscope_rows_generated=0,
    )
    output = {"completion_ids": torch.zeros(8, 3, dtype=torch.long)}
    first = RatioscopeCaptureMixin._ratioscope_tag(fake, output)
    assert first.tolist() == list(range(8, 16))
    assert fake._ratioscope_rows.group.tolist() == [2, 2, 2, 2, 3, 3, 3, 3]
    expected = per_func[8:16, 0] + 0.5 * per_func[8:16, 1]
    assert torch.equal(fake._ratioscope_rows.rewards, expected)
    second = RatioscopeCaptureMixin._ratioscope_tag(fake, output)
    assert second.tolist() == list(range(24, 32))
    assert fake._ratioscope_rows.group.tolist() == [6, 6, 6, 6, 7, 7, 7, 7]


def test_a_trainer_without_the_hooks_is_refused_with_a_clear_error():
    class NotGRPO:
        def _compute_loss(self, model, inputs):
            return 0

    with pytest.raises(IncompatibleTrainerError, match="no method _calculate_rewards"):
        with_capture(NotGRPO)
    assert with_capture(trl.GRPOTrainer) is with_capture(trl.GRPOTrainer)
    assert with_capture(trl.GRPOTrainer).__name__ == "RatioscopeGRPOTrainer"
    from ratioscope.capture.trl import RatioscopeGRPOTrainer

    assert RatioscopeGRPOTrainer is with_capture()
    with pytest.raises(ValueError, match="granularity"):
        CaptureConfig("x", granularity="epoch")


# ------------------------------------------------------------ the trainer's settings
def test_each_file_records_the_trainers_settings(step_run):
    from ratioscope.data.trainer_settings import SETTINGS_KEY

    for path in parts(step_run.dir):
        recorded = json.loads(load(path)[SETTINGS_KEY])
        assert recorded["framework"] == "trl"
        settings = recorded["settings"]
        # what train() gave GRPOConfig, and TRL's defaults for the rest
        assert settings["epsilon"] == 0.2 and settings["epsilon_high"] is None
        assert settings["num_generations"] == GENERATIONS
        assert settings["num_iterations"] == 2 and settings["beta"] == 0.04
        assert settings["gradient_accumulation_steps"] == 2
        assert settings["max_completion_length"] == 8
        assert settings["loss_type"] == "dapo"
        assert recorded["reward_functions"] == [["reward_length", 1.0], ["reward_has_a", 0.5]]


def clip_fraction(directory, low: float, high: float) -> float:
    """Share of loss tokens whose PPO term has no gradient in the band (low, high),
    from the stored tensors."""
    zeroed = total = 0
    for s in map(load, parts(directory)):
        ratio = (s["log_probs"] - s["old_log_probs"]).double().exp()[s["mask"]]
        advantage = s["advantages"][:, None].expand_as(s["mask"])[s["mask"]]
        zeroed += int(((advantage > 0) & (ratio > 1 + high)).sum())
        zeroed += int(((advantage < 0) & (ratio < 1 - low)).sum())
        total += int(s["mask"].sum())
    return zeroed / total


def test_analyze_takes_trls_clip_band_unless_an_option_is_given(step_run, tmp_path):
    out = tmp_path / "report.json"
    result = CliRunner().invoke(app, ["analyze", str(step_run.dir), "--json", str(out), "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    # TRL: epsilon_high None means epsilon, so the band is (0.2, 0.2), not ratioscope's 0.28
    assert report["params"]["analysis"]["clip"] == [0.2, 0.2]
    assert report["params"]["trainer"]["applied"]["clip"].startswith("trainer settings")
    # the length limit of the vitals: TRL's max_completion_length, said so
    assert report["vitals"]["length"]["limit"] == 8
    assert report["vitals"]["length"]["limit_source"] == "trainer settings"
    assert report["ratios"]["token"]["clip_fraction"] == pytest.approx(
        clip_fraction(step_run.dir, 0.2, 0.2), abs=1e-12
    )
    given = CliRunner().invoke(
        app, ["analyze", str(step_run.dir), "--clip", "0.2,0.28", "--json", str(out), "-q"]
    )
    assert given.exit_code == 0, given.output
    report = json.loads(out.read_text())
    assert report["params"]["analysis"]["clip"] == [0.2, 0.28]
    assert report["params"]["trainer"]["applied"]["clip"] == "option"
    assert report["ratios"]["token"]["clip_fraction"] == pytest.approx(
        clip_fraction(step_run.dir, 0.2, 0.28), abs=1e-12
    )
    # the library: an option named in the call wins too
    assert ratioscope.analyze(step_run.dir, clip=(0.1, 0.1)).params["analysis"]["clip"] == [
        0.1,
        0.1,
    ]


def test_each_reward_function_is_recorded_and_can_decide_correctness(step_run, tmp_path):
    generated = step_run.trainer.generated
    expected_has_a = []
    for step, path in enumerate(parts(step_run.dir)):
        stored = load(path)
        row_ids = sorted(
            r for m in step_run.trainer.losses if m["step"] == step for r in m["row_ids"]
        )
        values = [
            step_run.rewards.values[(generated[r]["prompt"], generated[r]["ids"])] for r in row_ids
        ]
        assert stored["reward:reward_length"].tolist() == pytest.approx([v[0] for v in values])
        assert stored["reward:reward_has_a"].tolist() == pytest.approx([v[1] for v in values])
        expected_has_a += [v[1] >= 0.5 for v in values]
    report = ratioscope.analyze(
        step_run.dir, correct_field="reward:reward_has_a", per_sequence=True
    )
    assert report.sequences.frame()["correct"].to_list() == expected_has_a
    # the vitals of each reward function, over the stored values it gave (NaN: None)
    stored = [load(path) for path in parts(step_run.dir)]
    for name in ("reward_length", "reward_has_a"):
        values = torch.cat([s[f"reward:{name}"] for s in stored]).double()
        values = values[~values.isnan()]
        function = report.vitals.reward.per_function[name]
        assert function.sequences == values.numel() > 0
        assert function.mean == pytest.approx(float(values.mean()), rel=1e-9)
        assert function.std == pytest.approx(float(values.std(correction=0)), rel=1e-9)


@pytest.fixture(scope="module")
def report_run(tmp_path_factory):
    """Mode "report": every optimizer step analysed in process and logged."""
    root = tmp_path_factory.mktemp("trl_report")
    return train(
        root, with_capture(trl.GRPOTrainer), CaptureConfig(root / "reports", mode="report")
    )


@pytest.mark.slow
def test_report_mode_logs_the_headlines_to_the_trainer_each_step(report_run):
    logged = [
        entry for entry in report_run.trainer.state.log_history
        if any(key.startswith("ratioscope/") for key in entry)
    ]  # fmt: skip
    # TRL numbers an update one higher than the step it was captured under
    assert [entry["step"] for entry in logged] == [step + 1 for step in range(STEPS)]
    for step, entry in enumerate(logged):
        report = json.loads(
            (Path(report_run.dir) / f"step_{step:06d}" / "rank_00000.json").read_text()
        )
        assert entry["ratioscope/mismatch.policy.k3"] == report["mismatch"]["policy"]["k3"]
        assert (
            entry["ratioscope/ratios.token.clip_fraction"]
            == (report["ratios"]["token"]["clip_fraction"])
        )
        assert "loss" not in entry  # apart from TRL's own entry of the step
        # the in-process analysis reads each reward function too
        functions = report["vitals"]["reward"]["per_function"]
        assert list(functions) == ["reward_has_a", "reward_length"]
    # TRL's own metrics still come once per logging step, not merged into ratioscope's
    assert sum("loss" in entry for entry in report_run.trainer.state.log_history) == STEPS


# ------------------------------------------- a generation batch over two optimizer steps
@pytest.fixture(scope="module")
def split_run(tmp_path_factory):
    """steps_per_generation 4 > gradient_accumulation_steps 2: one generation batch of
    4 prompts x 4 completions is shuffled over two optimizer steps, so each step's file
    holds parts of groups."""
    root = tmp_path_factory.mktemp("trl_split")
    trainer_class = observing(with_capture(trl.GRPOTrainer))
    return train(
        root, trainer_class, CaptureConfig(root / "captures"), max_steps=2, steps_per_generation=4
    )


def test_groups_split_over_two_steps_are_joined_whole(split_run):
    files = parts(split_run.dir)
    assert len(files) == 2
    sizes = [Counter(load(p)["group"].tolist()) for p in files]
    assert any(n != GENERATIONS for s in sizes for n in s.values())  # each step: parts
    together = sizes[0] + sizes[1]
    assert sorted(together.values()) == [GENERATIONS] * 4  # the generation batch: whole
    report = ratioscope.analyze(split_run.dir)
    section = report.trust_region
    assert section.groups == 4 and section.group_sizes == {str(GENERATIONS): 4}
    assert any("completed from the next step" in w for w in report.warnings)
    # equal-reward groups, from the stored rewards of both steps
    rewards = defaultdict(list)
    for path in files:
        stored = load(path)
        for g, r in zip(stored["group"].tolist(), stored["rewards"].tolist(), strict=True):
            rewards[g].append(r)
    equal = sum(max(v) - min(v) == 0 for v in rewards.values())
    assert section.degenerate_all_equal == equal


# --------------------------------------------------------------------------- stop on red
#: the tiny random model writes until the length limit from the first step: those rules
#: are set aside, so that what stops the run is what its learning rate does to it
NO_LENGTH_RULE = {
    "length_limit_yellow": 1.01, "length_limit_red": 1.01, "length_held_red": 1.01,
    "length_climb_yellow": 1.01,
}  # fmt: skip


def stop_run(root: Path, learning_rate: float, max_steps: int):
    from ratioscope.judgement.verdict import Thresholds

    thresholds = Thresholds(**NO_LENGTH_RULE)
    capture = CaptureConfig(root / "reports", mode="report", stop_on="red", thresholds=thresholds)
    run = train(
        root,
        with_capture(trl.GRPOTrainer),
        capture,
        learning_rate=learning_rate,
        max_steps=max_steps,
        num_iterations=1,
    )
    # the verdict of the reports the run wrote, by the command line's own timeline
    timeline = ratioscope.timeline(root / "reports", thresholds=thresholds)
    return run, timeline


def test_stop_on_red_stops_a_run_whose_learning_rate_is_too_high(tmp_path, caplog):
    caplog.set_level("WARNING", logger="ratioscope")
    run, timeline = stop_run(tmp_path, learning_rate=0.3, max_steps=40)
    writer = run.trainer.ratioscope_writer
    first_red = timeline.verdict.first_red
    assert first_red is not None and 1 <= first_red < 39
    # stopped at the end of the step that turned red: no step after it was trained
    assert writer.stop_step == first_red
    assert run.trainer.state.global_step == first_red + 1
    assert [s.step for s in timeline.steps] == list(range(first_red + 1))
    (message,) = [r.getMessage() for r in caplog.records if "stopping the training" in r.message]
    assert f"reached red at step {first_red}" in message
    turned = timeline.steps[-1].verdict
    assert any(f.text in message for f in turned.findings if f.level == "red")
    # the verdict's level reached the trainer's loggers, step by step
    levels = [e["ratioscope/verdict.level"] for e in run.trainer.state.log_history
              if "ratioscope/verdict.level" in e]  # fmt: skip
    assert levels[-1] == 2.0 and 2.0 not in levels[:-1]


def test_a_run_at_a_sound_learning_rate_is_not_stopped(tmp_path):
    run, timeline = stop_run(tmp_path, learning_rate=0.003, max_steps=10)
    assert run.trainer.state.global_step == 10
    assert run.trainer.ratioscope_writer.stop_step is None
    assert timeline.verdict.first_red is None
