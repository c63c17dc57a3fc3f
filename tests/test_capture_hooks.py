"""ratioscope.capture.verl and .openrlhf: the hook functions on inputs shaped as the
frameworks hold them at the hook line, checked through ``ratioscope analyze`` against
a direct computation on those inputs.

Layouts (the line numbers are those of the versions named):

* verl legacy worker, volcengine/verl@b178a3cd (0.8.0.dev),
  ``verl/workers/actor/dp_actor.py``: ``select_keys`` 509-529 (``responses``,
  ``response_mask``, ``input_ids``, ``attention_mask``, ``position_ids``,
  ``old_log_probs``, ``advantages``, ``ref_log_prob``, ``rollout_log_probs``), the
  micro-batch ``model_inputs = {**micro_batch.batch, **micro_batch.non_tensor_batch,
  "pad_token_id": pad_token_id}`` 565, ``log_prob = outputs["log_probs"]`` 584
  ``(bsz, response_length)``, the on-policy ``old_log_prob = log_prob.detach()`` 591-592.
  Prompts are left-padded, responses right-padded, ``response_mask`` is the response
  part of ``attention_mask`` (int64).
* verl 0.9.1 new engine, ``verl/workers/utils/losses.py::ppo_loss`` 57-91: ``data`` is
  the micro-batch ``TensorDict`` of the whole ``DataProto``
  (``verl/protocol.py::to_tensordict`` 1099-1123: non-tensor keys such as ``uid``
  become a ``NonTensorStack``), ``input_ids``/``position_ids`` nested (jagged) after
  ``left_right_2_no_padding`` (``verl/workers/utils/padding.py`` 23-88), ``log_prob``
  padded to ``(bsz, max_response_len)`` by ``no_padding_2_padding`` 91-134.
* OpenRLHF, OpenRLHF/OpenRLHF@3c3be623 (0.11.0) and the 0.11.2 wheel:
  ``Experience`` (``openrlhf/trainer/ppo_utils/experience.py`` 28-69) built by
  ``samples_generator.py::_process_response_into_experience`` 247-314: ``sequences``
  right-padded ``[prompt + response]``, ``action_mask = mask[1:]`` (int64, 1 on the
  response), ``rollout_log_probs[1:]``; the actor returns
  ``log_probs[:, -A:] * action_mask`` (``openrlhf/models/actor.py`` 290-294) and
  ``output.entropy = entropy[:, :-1]`` (269-274).

Where the real packages are installed (``pip install --no-deps verl openrlhf
pylatexenc tensordict``: verl itself needs ray to import, OpenRLHF's trainer needs ray
and flash-attn), the tests also check the installed sources: OpenRLHF's real
``Experience`` class, a real ``TensorDict``, and the hook lines in the installed files.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import torch

import ratioscope
from ratioscope.capture import CaptureWriter
from ratioscope.capture.openrlhf import capture_openrlhf_experience, left_align
from ratioscope.capture.verl import capture_verl_micro_batch
from ratioscope.errors import DumpKeyError

N = 4  # responses per prompt


def analyzed(directory: Path) -> dict:
    return ratioscope.analyze(directory).to_dict()


def assert_ratio_stats(report: dict, new: torch.Tensor, old: torch.Tensor, mask: torch.Tensor):
    """Valid tokens and mean log-ratio (k1 = -mean z) of the report, against the inputs."""
    valid = mask.bool()
    z = (new.detach().float().double() - old.float().double())[valid]
    policy = report["mismatch"]["policy"]
    assert policy["tokens"] == int(valid.sum())
    assert math.isclose(policy["k1"], -z.mean().item(), rel_tol=1e-5, abs_tol=1e-9)


# --------------------------------------------------------------------------------- verl
def verl_batch(seed: int, rows: int = 8, prompt_len: int = 6, response_len: int = 10) -> dict:
    """A legacy ``model_inputs`` dict: left-padded prompts, right-padded responses,
    ``uid`` per prompt (4 responses each, rows reordered as ``_balance_batch`` does)."""
    g = torch.Generator().manual_seed(seed)
    p_lens = torch.randint(2, prompt_len + 1, (rows,), generator=g)
    r_lens = torch.randint(1, response_len + 1, (rows,), generator=g)
    r_lens[0] = response_len
    prompt_mask = torch.arange(prompt_len)[None, :] >= (prompt_len - p_lens)[:, None]
    response_mask = torch.arange(response_len)[None, :] < r_lens[:, None]
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1).long()
    responses = torch.randint(3, 1000, (rows, response_len), generator=g) * response_mask
    prompts = torch.randint(3, 1000, (rows, prompt_len), generator=g) * prompt_mask
    old = -torch.rand(rows, response_len, generator=g) * 3 * response_mask
    scores = torch.zeros(rows, response_len)
    scores[torch.arange(rows), r_lens - 1] = torch.randint(0, 2, (rows,), generator=g).float()
    order = torch.randperm(rows, generator=g)
    uid = np.array([f"uid-{seed}-{i // N}" for i in order.tolist()], dtype=object)
    return {
        "responses": responses,
        "response_mask": attention_mask[:, prompt_len:],
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(1) - 1).clamp(min=0),
        "old_log_probs": old,
        "advantages": torch.randn(rows, 1, generator=g).expand(rows, response_len) * response_mask,
        "ref_log_prob": old + 0.1 * torch.randn(rows, response_len, generator=g),
        "rollout_log_probs": old + 0.01 * torch.randn(rows, response_len, generator=g),
        "token_level_scores": scores,
        "uid": uid,
        "pad_token_id": 0,
    }


def current(old: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 100)
    return (old + 0.05 * torch.randn(old.shape, generator=g)).requires_grad_()


def test_verl_legacy_micro_batches_analyze_to_their_tokens_and_log_ratio(tmp_path):
    writer = CaptureWriter(tmp_path, rank=0)
    batches = [verl_batch(seed) for seed in range(2)]
    news = [current(b["old_log_probs"], i) for i, b in enumerate(batches)]
    for batch, new in zip(batches, news, strict=True):
        entropy = torch.rand(new.shape)
        capture_verl_micro_batch(writer, 5, batch, new, entropy)
    report = analyzed(tmp_path)
    mask = torch.cat([b["response_mask"] for b in batches])
    assert_ratio_stats(
        report, torch.cat(news), torch.cat([b["old_log_probs"] for b in batches]), mask
    )
    assert report["trust_region"]["groups"] == 4  # 2 uids per micro-batch
    stored = torch.load(tmp_path / "step_000005" / "rank_00000_part_0000.pt", weights_only=True)
    batch = batches[0]
    assert stored["group"] == [str(u) for u in batch["uid"]]
    assert torch.equal(stored["rewards"], batch["token_level_scores"].sum(-1))
    assert torch.equal(stored["token_ids"].long(), batch["responses"])
    valid = batch["response_mask"].bool()
    for name, key in [
        ("ref_log_probs", "ref_log_prob"),
        ("rollout_log_probs", "rollout_log_probs"),
    ]:
        assert torch.equal(stored[name][valid], batch[key][valid]), name


def test_verl_on_policy_old_log_prob_overrides_the_batch(tmp_path):
    batch = verl_batch(3)
    new = current(batch["old_log_probs"], 3)
    del batch["uid"], batch["token_level_scores"]  # the legacy default: neither is selected
    capture_verl_micro_batch(CaptureWriter(tmp_path), 0, batch, new, old_log_prob=new.detach())
    report = analyzed(tmp_path)
    assert report["mismatch"]["policy"]["tokens"] == int(batch["response_mask"].sum())
    assert report["mismatch"]["policy"]["k1"] == 0.0  # the ratio is exactly 1


def verl_trainer_config(train_batch_size: int) -> dict:
    """verl's top-level Hydra config (nested mappings; sizes in prompts), 2 prompts per
    mini-batch and one PPO epoch, as ``RayPPOTrainer`` holds it."""
    actor = {"clip_ratio": 0.2, "ppo_mini_batch_size": 2, "ppo_epochs": 1}
    return {
        "actor_rollout_ref": {"actor": actor, "rollout": {"n": N}},
        "data": {"train_batch_size": train_batch_size, "max_response_length": 10},
        "algorithm": {"adv_estimator": "grpo", "rollout_correction": {"bypass_mode": False}},
    }


@pytest.mark.parametrize(
    ("train_batch_size", "noise", "level"),
    [(2, 0.0, "green"), (2, 0.01, "yellow"), (4, 0.01, None)],
)
def test_verl_capture_records_the_settings_of_the_whole_step_rule(
    tmp_path, train_batch_size, noise, level
):
    """One step of 2 prompts x 4 responses: with ``train_batch_size`` 2 and mini-batches
    of 2 prompts it is one update from the sampling policy, where the new engine's loss
    takes the recomputed ``old_log_probs``: a log-ratio != 0 is trainer noise. With 4
    prompts the step has two mini-batches and no whole-step claim."""
    from ratioscope.data.trainer_settings import SETTINGS_KEY, verl_settings
    from ratioscope.judgement.verdict import verdict

    batch = verl_batch(4)
    mask = batch["response_mask"].bool()
    g = torch.Generator().manual_seed(4)
    new = batch["old_log_probs"] + noise * torch.randn(mask.shape, generator=g) * mask
    settings = verl_settings(verl_trainer_config(train_batch_size))
    with CaptureWriter(tmp_path, trainer_settings=settings) as writer:
        capture_verl_micro_batch(writer, 0, batch, new)
    stored = torch.load(next(tmp_path.rglob("*.pt")), weights_only=True)
    recorded = json.loads(stored[SETTINGS_KEY])["settings"]
    assert recorded["data.train_batch_size"] == train_batch_size
    assert (recorded["actor.ppo_mini_batch_size"], recorded["actor.ppo_epochs"]) == (2, 1)
    assert recorded["algorithm.rollout_correction.bypass_mode"] is False
    findings = {f.key: f for f in verdict(ratioscope.analyze(tmp_path))}
    whole = findings.get("ratios.token.proportion_pooled.on")
    assert (whole and whole.level) == level
    if level is not None:
        changed = int((new != batch["old_log_probs"])[mask].sum())
        assert whole.value == pytest.approx(changed / int(mask.sum()))
        assert "verl data.train_batch_size=2" in whole.source


def test_verl_missing_response_mask_names_the_key(tmp_path):
    batch = verl_batch(0)
    del batch["response_mask"]
    with pytest.raises(DumpKeyError, match=r"response_mask.*keys found: advantages"):
        capture_verl_micro_batch(CaptureWriter(tmp_path), 0, batch, batch["old_log_probs"])


def test_verl_091_tensordict_with_nested_fields(tmp_path):
    tensordict = pytest.importorskip("tensordict")
    from tensordict.tensorclass import NonTensorData, NonTensorStack

    batch = verl_batch(7)
    rows = batch["responses"].shape[0]
    lengths = batch["response_mask"].sum(1)
    # what DataProto.to_tensordict + left_right_2_no_padding leave: uid a NonTensorStack,
    # input_ids/position_ids jagged; responses jagged as well, to exercise the padding
    nested = {
        "input_ids": [
            batch["input_ids"][i][batch["attention_mask"][i].bool()] for i in range(rows)
        ],
        "responses": [batch["responses"][i, : lengths[i]] for i in range(rows)],
    }
    dense = {k: v for k, v in batch.items() if k not in ("uid", "pad_token_id", *nested)}
    data = tensordict.TensorDict(
        {
            **dense,
            **{k: torch.nested.as_nested_tensor(v, layout=torch.jagged) for k, v in nested.items()},
            "uid": NonTensorStack.from_list([NonTensorData(u) for u in batch["uid"].tolist()]),
        },
        batch_size=[rows],
    )
    new = current(batch["old_log_probs"], 7)
    capture_verl_micro_batch(CaptureWriter(tmp_path, rank=1), 2, data, new, None)
    report = analyzed(tmp_path)
    assert_ratio_stats(report, new, batch["old_log_probs"], batch["response_mask"])
    assert report["trust_region"]["groups"] == 2
    stored = torch.load(tmp_path / "step_000002" / "rank_00001_part_0000.pt", weights_only=True)
    assert torch.equal(stored["token_ids"].long(), batch["responses"])


def installed_source(package: str, relative: str) -> str:
    """The text of a file of an installed package, without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.exists():
        pytest.skip(f"{path} is not in this version of {package}")
    return path.read_text()


def function_args(source: str, name: str, within: str | None = None) -> list[str]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and within is not None and node.name == within:
            return function_args(ast.unparse(node), name)
        if within is None and isinstance(node, ast.FunctionDef) and node.name == name:
            return [a.arg for a in node.args.args]
    raise AssertionError(f"no {name} in the source")


def test_the_installed_verl_ppo_loss_has_the_hook_lines():
    """verl imports ray at its top, so its source is read, not imported."""
    source = installed_source("verl", "workers/utils/losses.py")
    assert function_args(source, "ppo_loss") == ["config", "model_output", "data", "dp_group"]
    lines = [line.strip() for line in source.splitlines()]
    hook = lines.index("entropy = no_padding_2_padding(entropy, data)")
    select = lines.index("data = data.select(*fields).to_padded_tensor()")
    assert lines.index('log_prob = no_padding_2_padding(model_output["log_probs"], data)') < hook
    assert hook < select  # the capture line goes between them, on the full micro-batch
    for key in ("response_mask", "old_log_probs", "advantages", "ref_log_prob"):
        assert f'"{key}"' in source


# ----------------------------------------------------------------------------- OpenRLHF
@dataclass
class LocalExperience:
    """The fields of OpenRLHF's ``Experience`` that the hook reads (its layout)."""

    sequences: torch.Tensor = None
    attention_mask: torch.Tensor = None
    action_mask: torch.Tensor = None
    action_log_probs: torch.Tensor = None
    base_action_log_probs: torch.Tensor = None
    rollout_log_probs: torch.Tensor = None
    advantages: torch.Tensor = None
    rewards: torch.Tensor = None
    index: list = None
    prompts: list = field(default_factory=list)
    info: dict = field(default_factory=dict)


@pytest.fixture(params=["layout", "openrlhf"])
def experience_class(request):
    if request.param == "layout":
        return LocalExperience
    module = pytest.importorskip("openrlhf.trainer.ppo_utils.experience")
    read = {"sequences", "action_mask", "action_log_probs", "base_action_log_probs"}
    read |= {"rollout_log_probs", "advantages", "rewards", "prompts"}
    assert read <= set(inspect.signature(module.Experience).parameters)
    return module.Experience


def openrlhf_micro_batch(experience_class, seed: int, rows: int = 8):
    """Samples as ``_process_response_into_experience`` builds them, padded right and
    stacked as the replay buffer's collate does; the second of each pair of prompts
    has a multi-turn response (an environment span inside, action_mask 0)."""
    g = torch.Generator().manual_seed(seed)
    sequences, action_masks, rollouts, prompts = [], [], [], []
    for i in range(rows):
        prompt_len = int(torch.randint(2, 7, (1,), generator=g))
        response_len = int(torch.randint(3, 12, (1,), generator=g))
        tokens = torch.randint(3, 1000, (prompt_len + response_len,), generator=g)
        mask = torch.zeros(prompt_len + response_len, dtype=torch.long)
        mask[prompt_len:] = 1
        if (i // N) % 2 == 1 and response_len > 4:
            mask[prompt_len + 1 : prompt_len + 3] = 0  # tool output inside the response
        rollout = torch.zeros(prompt_len + response_len)
        rollout[prompt_len:] = -torch.rand(response_len, generator=g) * 3
        sequences.append(tokens)
        action_masks.append(mask[1:])
        rollouts.append(rollout[1:])
        prompts.append(f"prompt {seed}-{i // N}")
    width = max(len(s) for s in sequences)

    def right_padded(items, length):  # zero_pad_sequences(side="right")
        return torch.stack([torch.nn.functional.pad(x, (0, length - len(x))) for x in items])

    sequences = right_padded(sequences, width)
    action_mask = right_padded(action_masks, width - 1)  # A = T - 1
    rollout = right_padded(rollouts, width - 1)
    old = (rollout + 0.02 * torch.randn(rollout.shape, generator=g)) * action_mask
    experience = experience_class(
        sequences=sequences,
        attention_mask=(sequences != 0).long(),
        action_mask=action_mask,
        action_log_probs=old,
        base_action_log_probs=(old + 0.1 * torch.randn(old.shape, generator=g)) * action_mask,
        rollout_log_probs=rollout,
        advantages=torch.randn(rows, 1, generator=g) * action_mask,
        rewards=torch.randint(0, 2, (rows,), generator=g).float(),
        prompts=prompts,
    )
    new = ((old + 0.05 * torch.randn(old.shape, generator=g)) * action_mask).requires_grad_()
    return experience, new


def test_openrlhf_experiences_analyze_to_their_tokens_and_log_ratio(tmp_path, experience_class):
    writer = CaptureWriter(tmp_path, rank=0)
    pairs = [openrlhf_micro_batch(experience_class, seed) for seed in range(2)]
    for experience, new in pairs:
        # the actor's output.entropy is [B, T - 1]; the hook takes its last A columns
        entropy = torch.rand(new.shape[0], new.shape[1])
        capture_openrlhf_experience(writer, 11, experience, new, entropy)
    report = analyzed(tmp_path)
    news = [new for _, new in pairs]
    olds = [e.action_log_probs for e, _ in pairs]
    masks = [e.action_mask for e, _ in pairs]
    width = max(m.shape[1] for m in masks)

    def cat(items):
        return torch.cat(
            [torch.nn.functional.pad(x.detach(), (0, width - x.shape[1])) for x in items]
        )

    assert_ratio_stats(report, cat(news), cat(olds), cat(masks))
    assert report["trust_region"]["groups"] == 4  # 2 prompts per micro-batch


def test_openrlhf_rows_start_at_their_first_response_token(tmp_path, experience_class):
    experience, new = openrlhf_micro_batch(experience_class, 5)
    capture_openrlhf_experience(CaptureWriter(tmp_path), 0, experience, new)
    stored = torch.load(tmp_path / "step_000000" / "rank_00000_part_0000.pt", weights_only=True)
    mask = experience.action_mask.bool()
    for i in range(mask.shape[0]):
        columns = mask[i].nonzero().flatten()
        first, last = int(columns[0]), int(columns[-1])
        span = slice(first, last + 1)
        length = last - first + 1
        assert stored["mask"][i, 0] and torch.equal(stored["mask"][i, :length], mask[i, span])
        assert not stored["mask"][i, length:].any()
        # action column a scores sequences[:, a + 1]: the response tokens themselves
        tokens = experience.sequences[i, first + 1 : last + 2]
        assert torch.equal(stored["token_ids"][i, :length].long(), tokens)
        assert torch.equal(stored["log_probs"][i, :length], new[i, span].detach())
        assert torch.equal(
            stored["rollout_log_probs"][i, :length], experience.rollout_log_probs[i, span]
        )
    assert stored["group"] == experience.prompts
    assert torch.equal(stored["rewards"], experience.rewards)


def test_the_installed_openrlhf_training_step_has_the_hook_lines():
    """OpenRLHF's trainer imports ray, so its source is read, not imported."""
    source = installed_source("openrlhf", "trainer/ray/ppo_actor.py")
    args = function_args(source, "training_step", within="ActorPPOTrainer")
    assert args[:4] == ["self", "experience", "kl_ctl", "step"]
    assert "old_action_log_probs = experience.action_log_probs" in source
    assert "action_log_probs, output = self.actor(" in source
    assert "output.entropy[:, -experience.action_mask.shape[1] :]" in source


def test_left_align_against_a_loop():
    g = torch.Generator().manual_seed(0)
    mask = torch.rand(6, 9, generator=g) > 0.5
    mask[2] = False  # a row without valid tokens stays in place
    values = torch.randn(6, 9, generator=g)
    shifted_mask, shifted = left_align(mask, {"v": values, "none": None})
    assert shifted["none"] is None
    for i in range(6):
        first = int(mask[i].nonzero()[0]) if mask[i].any() else 0
        expected = values[i, first:]
        assert torch.equal(shifted["v"][i, : len(expected)], expected)
        assert torch.equal(shifted_mask[i, : len(expected)], mask[i, first:])
        assert not shifted_mask[i, len(expected) :].any()


def plain_signature(function) -> str:
    """``name(a, b, c=None, *, d=None)``: the signature without annotations."""
    parts, star = [], False
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        default = "" if parameter.default is parameter.empty else f"={parameter.default!r}"
        parts.append(parameter.name + default)
    return f"{function.__name__}({', '.join(parts)})"


@pytest.mark.parametrize("function", [capture_verl_micro_batch, capture_openrlhf_experience])
def test_the_docs_give_the_signatures_and_syntactically_valid_hook_lines(function):
    text = (Path(__file__).resolve().parents[1] / "docs" / "capture.md").read_text()
    flat = " ".join(text.split())
    assert plain_signature(function) in flat
    section = text[text.index("## TRL") :]
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        compile(block, "docs/capture.md", "exec")
        for module, names in re.findall(r"from (ratioscope[.\w]*) import ([\w, ]+)", block):
            imported = importlib.import_module(module)  # the TRL module imports no TRL
            assert all(hasattr(imported, n.strip()) for n in names.split(",")), block


def test_the_capture_modules_import_no_framework():
    import subprocess
    import sys

    code = (
        "import sys, ratioscope.capture, ratioscope.capture.trl, ratioscope.capture.verl, "
        "ratioscope.capture.openrlhf\n"
        "loaded = [m for m in ('trl', 'transformers', 'verl', 'openrlhf', 'tensordict') "
        "if m in sys.modules]\n"
        "assert not loaded, loaded"
    )
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
