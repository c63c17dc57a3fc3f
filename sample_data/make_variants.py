"""Two variants of the bundled GRPO run, for the behaviour-policy checks.

* ``variants/async/``: asynchronous GRPO. Each step trains on groups that earlier
  weights sampled: half of the batch one step old, half two steps old (a one- and a
  two-step-off-policy rollout buffer, as AReaL's and verl's fully-async trainers fill
  it). The old log-probs are the trained weights' before the step's first update (AReaL's
  proximal policy), the engine's those of the bfloat16 engine serving the weights that
  sampled. Written in verl's layout with each trajectory's weight version
  (``min_global_steps``, one version per trajectory) and ``trainer_version``.
* ``variants/top_p/``: one synchronous step whose engine sampled at temperature 0.7 with
  top-p 0.9 and reported the log-probs of that tempered, truncated distribution, while
  the trainer's log-probs are the full softmax at T = 1 (the mismatch NeMo-RL #1288 and
  TRL #6789 describe); with the trainer's logits, of the weights that sampled (one
  optimizer update in the step).

The policy is the bundled run's supervised policy (:func:`make_sample_data.
supervised_training` with the same configuration and seed); everything else follows
:mod:`make_sample_data` (same model, task, verifier, GRPO loss and engine).

    python sample_data/make_variants.py                  # rewrites sample_data/variants/
    python sample_data/make_variants.py --out-dir /tmp/x
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_sample_data as gen

#: the async run: steps, of which the last ``RECORDED`` are written; lags of the halves
ASYNC_STEPS = 5
RECORDED = 2
LAGS = (1, 2)
#: the engine's settings of the top-p step
TEMPERATURE, TOP_P = 0.7, 0.9


def async_run(
    policy: gen.TinyCausalLM,
    reference: gen.TinyCausalLM,
    config: gen.RunConfig,
    train: list[gen.Problem],
    out_dir: Path,
    log,
) -> list[dict]:
    """Steps 1..ASYNC_STEPS; the weights at the start of step s are version s (the
    supervised policy is version 1). At the start of each step the engine samples one
    half-batch for each lag L, which step s + L trains on, so step s trains on halves
    sampled at steps s - 1 and s - 2 (before step 1: by the supervised policy)."""
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.grpo_lr)
    prompt_rng = random.Random(config.seed + 11)
    generator = torch.Generator().manual_seed(config.seed + 12)
    half = config.prompts_per_step // len(LAGS)
    # (step that trains on it, lag) -> (version of the weights that sampled, the half)
    buffer: dict[tuple[int, int], tuple[int, gen.SampledBatch]] = {}

    def sample_half(at_step: int, lag: int) -> None:
        problems = prompt_rng.sample(train, half)
        sampled = gen.sample_groups(policy, problems, config, generator)
        buffer[(at_step + lag, lag)] = (max(1, at_step), sampled)

    for at_step in range(1 - max(LAGS), 1):
        for lag in LAGS:
            if at_step + lag >= 1:
                sample_half(at_step, lag)
    summaries = []
    for step in range(1, ASYNC_STEPS + 1):
        for lag in LAGS:  # what the engine samples while the trainer trains
            sample_half(step, lag)
        halves = [buffer.pop((step, lag)) for lag in sorted(LAGS, reverse=True)]
        versions = [version for version, part in halves for _ in part.problems]
        joined = _joined([part for _, part in halves])
        record = gen.train_on(step, policy, reference, optimizer, joined, config, False)
        if step > ASYNC_STEPS - RECORDED:
            batch = gen.verl_batch(record)
            batch["min_global_steps"] = torch.tensor(versions)
            batch["trainer_version"] = step
            _save(batch, out_dir / "async" / f"step_{step:04d}.pt")
            summaries.append(
                {
                    "step": step,
                    "versions": sorted(set(versions)),
                    "reward_mean": float(record.rewards.mean()),
                }
            )
        reward = float(record.rewards.mean())
        log(f"async step {step}: versions {sorted(set(versions))}, reward {reward:.3f}")
    return summaries


def _joined(parts: list[gen.SampledBatch]) -> gen.SampledBatch:
    """Half-batches as one batch, right-padded to the longest response."""
    width = max(p.rollout.responses.shape[1] for p in parts)

    def padded(tensor: torch.Tensor, value: float | int | bool) -> torch.Tensor:
        extra = width - tensor.shape[1]
        return torch.nn.functional.pad(tensor, (0, extra), value=value) if extra else tensor

    rollout = gen.Rollout(
        torch.cat([padded(p.rollout.responses, gen.PAD) for p in parts]),
        torch.cat([padded(p.rollout.mask, False) for p in parts]),
        torch.cat([padded(p.rollout.log_probs, 0.0) for p in parts]),
    )
    return gen.SampledBatch(
        problems=[row for p in parts for row in p.problems],
        prompts=torch.cat([p.prompts for p in parts]),
        rollout=rollout,
        rollout_log_probs=torch.cat([padded(p.rollout_log_probs, 0.0) for p in parts]),
        rewards=torch.cat([p.rewards for p in parts]),
        advantages=torch.cat([p.advantages for p in parts]),
    )


def top_p_step(
    policy: gen.TinyCausalLM,
    reference: gen.TinyCausalLM,
    config: gen.RunConfig,
    train: list[gen.Problem],
    out_dir: Path,
    log,
) -> dict:
    """One step sampled at TEMPERATURE with TOP_P; the engine's log-probs are the
    sampler's own (that distribution's), the trainer's the full softmax at T = 1."""
    # one update for the step: its logits are those of the weights that sampled, which
    # the truncation check applies the settings to
    config = dataclasses.replace(config, minibatches=1)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.grpo_lr)
    problems = random.Random(config.seed + 21).sample(train, config.prompts_per_step)
    generator = torch.Generator().manual_seed(config.seed + 22)
    rows = [p for p in problems for _ in range(config.group_size)]
    prompts = torch.tensor([[gen.BOS, *gen.encode(p.prompt)] for p in rows])
    rollout = gen.sample(policy, prompts, config.max_new_tokens, generator, TEMPERATURE, TOP_P)
    sampled = gen.scored(rows, prompts, rollout, rollout.log_probs, config)
    record = gen.train_on(1, policy, reference, optimizer, sampled, config, True)
    batch = gen.verl_batch(record)
    batch.pop("ref_logits")  # the size budget; the check needs the policy's logits only
    batch["sampling_temperature"], batch["sampling_top_p"] = TEMPERATURE, TOP_P
    _save(batch, out_dir / "top_p" / "step_0001.pt")
    log(f"top-p step: reward {record.rewards.mean():.3f}")
    return {"temperature": TEMPERATURE, "top_p": TOP_P, "reward_mean": float(record.rewards.mean())}


def generate(out_dir: Path, config: gen.RunConfig | None = None, log=print) -> dict:
    """Both variants under ``out_dir`` (``async/``, ``top_p/``, ``manifest.json``)."""
    config = config or gen.RunConfig()
    started = time.perf_counter()
    with gen._reproducible_torch(config.threads, config.seed):
        train, _ = gen.split_problems(config.seed, config.held_out)
        policy = gen.TinyCausalLM(config.model)
        gen.supervised_training(policy, config, train, random.Random(config.seed))
        log(f"{time.perf_counter() - started:6.1f}s supervised policy")
        reference = copy.deepcopy(policy).requires_grad_(False)
        start = copy.deepcopy(policy.state_dict())
        async_steps = async_run(policy, reference, config, train, out_dir, log)
        policy.load_state_dict(start)  # the top-p step starts from the supervised policy
        top_p = top_p_step(policy, reference, config, train, out_dir, log)
    manifest = {
        "config": dataclasses.asdict(config),
        "async": {"steps": ASYNC_STEPS, "recorded": async_steps, "lags": list(LAGS)},
        "top_p": top_p,
        "seconds": round(time.perf_counter() - started, 1),
    }
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _save(obj: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir", type=Path, default=Path(__file__).resolve().parent / "variants"
    )
    args = parser.parse_args()
    generate(args.out_dir)


if __name__ == "__main__":
    main()
