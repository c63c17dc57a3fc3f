"""A corpus of real GRPO runs on the CPU, healthy and failing, captured as users capture.

Each run trains the tiny causal transformer of ``sample_data/make_sample_data.py`` on
its task (n mod k by repeated subtraction, here with 2 to 6 subtractions: answers of 19
to 55 tokens), starting from a supervised policy, with GRPO: a batch of prompts with a
group of samples each, split into mini-batches of one optimizer step each. Every
mini-batch's tensors are written by :class:`ratioscope.capture.CaptureWriter` (one part
file per mini-batch: ``RUN/capture/step_NNNNNN/rank_00000_part_NNNN.pt``, the trainer
settings recorded), and the trainer logs its own numbers per step to
``RUN/trainer_log.jsonl``; ``RUN/run.json`` holds the scenario and the label.
The run's label comes from that log alone (``labels.py``).

The scenarios make failures the way they happen in real training:

======================  ==============================================================
healthy                 the default settings (3 seeds), and a second setting: one
                        mini-batch per step (on-policy) with 4 samples a prompt
lr_high                 a learning rate 30x the default
shaping_hack            a shaping reward for long responses beside correctness
lenient_verifier        a verifier that accepts the answer anywhere after a ``#``
many_updates            8 mini-batches and 4 epochs per batch at 3x the learning rate
stale_behaviour         samples drawn by the policy of 8 steps ago, no correction
bf16_engine             samples drawn by a bfloat16 copy of the policy, no correction
too_easy / too_hard     prompts every sample solves / none does
======================  ==============================================================

Usage::

    python benchmarks/runs/make_runs.py --out /tmp/runs            # the whole corpus
    python benchmarks/runs/make_runs.py --out /tmp/runs --only healthy-s1,lr_high-s1
    python benchmarks/runs/make_runs.py --bundled                  # sample_data/runs/

Runs go on ``--jobs`` processes (default: the CPU count), one thread each; every run is
deterministic (fixed seeds, deterministic kernels, one thread).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "sample_data"))
sys.path.insert(0, str(HERE))

import make_sample_data as task  # noqa: E402
from labels import CORRECT, label_run  # noqa: E402

#: subtractions per problem of the runs (answers of 19 to 55 tokens with <eos>)
MIN_STEPS, MAX_STEPS = 2, 6
MAX_NEW_TOKENS = 64
#: the supervised start: steps, batch, learning rate, the sloppy demonstrator's habit
SFT_STEPS, SFT_BATCH, SFT_LR, STOP_EARLY = 600, 32, 3e-3, 0.4


@dataclass(frozen=True)
class Scenario:
    """How one kind of run is trained."""

    name: str
    description: str
    lr: float = 2e-4
    prompts: int = 16
    group: int = 8
    minibatches: int = 2
    epochs: int = 1
    #: the behaviour policy is the policy of this many steps ago (0: the current one)
    staleness: int = 0
    #: "float32", or "bfloat16": samples drawn by a bfloat16 copy of the policy
    engine: str = "float32"
    #: the shaping reward for long responses (weight 0: none), its maximum is the weight
    length_weight: float = 0.0
    #: the reward function: "answer" (the number after the last '#', the strict verifier),
    #: "lenient" (the answer anywhere in the response) or "trace" (the whole trace exact)
    verifier: str = "answer"
    #: subtractions per prompt (the supervised policy learned 1 to MAX_STEPS)
    difficulty: tuple[int, int] = (MIN_STEPS, MAX_STEPS)
    clip: float = 0.2
    kl_coef: float = 0.001
    steps: int = 60
    #: what the scenario is expected to do (documentation only: labels come from the log)
    expected: str = "healthy"


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("healthy", "the default settings"),
        Scenario(
            "healthy_onpolicy",
            "one mini-batch per step (exactly on-policy), 4 samples a prompt, 32 prompts",
            prompts=32,
            group=4,
            minibatches=1,
        ),
        Scenario("lr_high", "learning rate 4x the default", lr=8e-4, expected="failure"),
        Scenario(
            "shaping_hack",
            "a shaping reward of 1.0 x length / limit beside correctness; 3.5x the learning rate",
            length_weight=1.0,
            lr=7e-4,
            expected="failure",
        ),
        Scenario(
            "lenient_verifier",
            "a reward that accepts the answer as any number in the response",
            verifier="lenient",
            lr=3e-4,
            expected="failure",
        ),
        Scenario(
            "many_updates",
            "8 mini-batches x 4 epochs per batch (32 updates instead of 2) at 1.5x the "
            "learning rate",
            minibatches=8,
            epochs=4,
            lr=3e-4,
            expected="failure",
        ),
        Scenario(
            "stale_behaviour",
            "samples drawn by the policy of 8 steps ago; old log-probs recomputed, no "
            "correction; 2.5x the learning rate",
            staleness=8,
            lr=5e-4,
            expected="failure",
        ),
        Scenario(
            "bf16_engine",
            "samples drawn by a bfloat16 copy of the policy; no correction",
            engine="bfloat16",
            expected="either",
        ),
        Scenario(
            "too_easy",
            "prompts of one subtraction, which the supervised policy solves",
            difficulty=(1, 1),
            expected="failure",
        ),
        Scenario(
            "too_hard",
            "a reward for the exact whole trace, on prompts whose traces (14 to 20 "
            "subtractions) are longer than the generation limit",
            verifier="trace",
            difficulty=(14, 20),
            expected="failure",
        ),
    )
}

#: the corpus: (scenario, seed)
CORPUS: tuple[tuple[str, int], ...] = (
    ("healthy", 1),
    ("healthy", 2),
    ("healthy", 3),
    ("healthy_onpolicy", 1),
    ("healthy_onpolicy", 2),
    ("lr_high", 1),
    ("lr_high", 2),
    ("lr_high", 3),
    ("shaping_hack", 1),
    ("shaping_hack", 2),
    ("shaping_hack", 3),
    ("lenient_verifier", 1),
    ("lenient_verifier", 2),
    ("many_updates", 1),
    ("many_updates", 2),
    ("stale_behaviour", 1),
    ("stale_behaviour", 2),
    ("bf16_engine", 1),
    ("too_easy", 1),
    ("too_hard", 1),
)
#: the runs bundled in sample_data/runs/ (a healthy one and one that fails), and the
#: share of each step's groups they keep (CaptureWriter's sample_fraction)
BUNDLED: tuple[str, ...] = ("healthy-s1", "shaping_hack-s1")
BUNDLED_FRACTION = 0.25
#: the bundled runs' steps (the shaping run's label is step 18), captured in one call a
#: step without token ids: the size budget of sample_data/
BUNDLED_STEPS = 30


def run_name(scenario: str, seed: int) -> str:
    return f"{scenario}-s{seed}"


# ------------------------------------------------------------------------------- task
def problems(low: int, high: int) -> list[task.Problem]:
    """Every problem whose trace has ``low`` to ``high`` subtractions (n < 1000)."""
    return [
        task.Problem(n, k) for k in task.MODULI for n in range(k, 1000) if low <= n // k <= high
    ]


def rewarded(problem: task.Problem, response: str, verifier: str) -> bool:
    """What the run's reward function accepts: the strict verifier ("answer": the number
    after the last '#'), a lenient one ("lenient": the answer as any number in the
    response, so a trace that runs on past the remainder, or rambles through many
    numbers, is more likely to contain it), or the whole trace ("trace": every
    subtraction and the answer exactly as the demonstration writes them)."""
    if verifier == "answer":
        return task.verify(problem.prompt, response)
    if verifier == "lenient":
        return any(int(number) == int(problem.answer) for number in re.findall(r"\d+", response))
    if verifier == "trace":
        return response == task.solution(problem)
    raise ValueError(f"unknown verifier {verifier!r}")


# ------------------------------------------------------------------------ the sampler
@torch.no_grad()
def sample_rows(
    model: task.TinyCausalLM, prompts: Tensor, max_new: int, generator: torch.Generator
) -> task.Rollout:
    """:func:`make_sample_data.sample` for a model of any dtype (its KV cache in that
    dtype); the log-probs are the sampler's own, as float32."""
    dtype = next(model.parameters()).dtype
    batch, prompt_len = prompts.shape
    config = model.config
    shape = (batch, config.n_heads, config.max_len, config.d_model // config.n_heads)
    cache = task.KVCache(
        keys=[torch.zeros(shape, dtype=dtype) for _ in range(config.n_layers)],
        values=[torch.zeros(shape, dtype=dtype) for _ in range(config.n_layers)],
    )
    for pos in range(prompt_len - 1):
        model.step(prompts[:, pos], cache, pos)
    token = prompts[:, -1]
    responses = torch.full((batch, max_new), task.PAD, dtype=torch.long)
    log_probs = torch.zeros(batch, max_new)
    lengths = torch.full((batch,), max_new, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    width = max_new
    for t in range(max_new):
        logits = model.step(token, cache, prompt_len - 1 + t).float()
        token_log_probs = torch.log_softmax(logits, dim=-1)
        token = torch.multinomial(token_log_probs.exp(), 1, generator=generator)[:, 0]
        token = token.masked_fill(done, task.PAD)
        responses[:, t] = token
        log_probs[:, t] = token_log_probs.gather(1, token[:, None])[:, 0].masked_fill(done, 0.0)
        finished = ~done & (token == task.EOS)
        lengths[finished] = t + 1
        done |= finished
        if bool(done.all()):
            width = t + 1
            break
    mask = torch.arange(width)[None] < lengths[:, None]
    return task.Rollout(responses[:, :width], mask, log_probs[:, :width])


# ------------------------------------------------------------------ the supervised start
def supervised_start(seed: int) -> task.TinyCausalLM:
    """The supervised policy every run of ``seed`` starts from (1 to MAX_STEPS
    subtractions, the sloppy demonstrator of make_sample_data)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = task.TinyCausalLM(task.ModelConfig(max_len=96))
    optimizer = torch.optim.AdamW(model.parameters(), lr=SFT_LR, betas=(0.9, 0.98))
    pool = problems(1, MAX_STEPS)
    for step in range(SFT_STEPS):
        batch = rng.sample(pool, SFT_BATCH)
        ids, targets = task.demonstration_batch(batch, STOP_EARLY, rng)
        loss = F.cross_entropy(model(ids).flatten(0, 1), targets.flatten(), ignore_index=task.PAD)
        warmup = min(1.0, (step + 1) / 30)
        cosine = 0.5 * (1 + math.cos(math.pi * step / SFT_STEPS))
        for group in optimizer.param_groups:
            group["lr"] = SFT_LR * warmup * cosine
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return model


# ---------------------------------------------------------------------------- a step
@dataclass
class StepLog:
    """What the trainer logs of one step (its own dashboard; the labels read this)."""

    values: dict[str, float] = field(default_factory=dict)


def trainer_settings(scenario: Scenario) -> Any:
    """The run's configuration as verl names it, recorded in every part file."""
    from ratioscope.data.trainer_settings import TrainerSettings

    rows = scenario.prompts * scenario.group
    functions: tuple[tuple[str, float], ...] = (
        ("correct" if scenario.verifier == "answer" else scenario.verifier, 1.0),
    )
    if scenario.length_weight:
        functions += (("length", scenario.length_weight),)
    return TrainerSettings(
        framework="verl",
        settings={
            "actor.clip_ratio": scenario.clip,
            "actor.ppo_mini_batch_size": scenario.prompts // scenario.minibatches,
            "actor.ppo_epochs": scenario.epochs,
            "data.train_batch_size": scenario.prompts,
            "rollout.n": scenario.group,
            "data.max_response_length": MAX_NEW_TOKENS,
            "rows_per_step": rows,
        },
        reward_functions=functions,
        source="recorded by the corpus generator",
    )


def grpo_run(scenario: Scenario, seed: int, start: task.TinyCausalLM, out: Path,
             sample_fraction: float = 1.0, steps: int | None = None,
             one_call: bool = False) -> dict[str, Any]:  # fmt: skip
    """Train one run, writing its capture and trainer log under ``out``; returns its
    summary (the label included)."""
    from ratioscope.capture import CaptureWriter

    torch.manual_seed(seed * 1000 + 7)
    policy = copy.deepcopy(start)
    reference = copy.deepcopy(start).requires_grad_(False)
    optimizer = torch.optim.Adam(policy.parameters(), lr=scenario.lr)
    prompt_rng = random.Random(seed * 1000 + 1)
    generator = torch.Generator().manual_seed(seed * 1000 + 2)
    pool = problems(*scenario.difficulty)
    history: list[task.TinyCausalLM] = []
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "trainer_log.jsonl"
    log_lines = []
    # the capture in a folder of its own, as ratioscope reads it; the trainer's log beside
    writer = CaptureWriter(
        out / "capture",
        sample_fraction=sample_fraction,
        seed=seed,
        trainer_settings=trainer_settings(scenario),
    )
    total_steps = steps or scenario.steps
    for step in range(1, total_steps + 1):
        history.append(copy.deepcopy(policy).requires_grad_(False))
        history = history[-(scenario.staleness + 1) :]
        behaviour = history[0]
        if scenario.engine == "bfloat16":
            behaviour = copy.deepcopy(policy).to(torch.bfloat16)
        chosen = [prompt_rng.choice(pool) for _ in range(scenario.prompts)]
        values = grpo_step(step, scenario, policy, behaviour, reference, optimizer, chosen,
                           generator, writer, one_call=one_call)  # fmt: skip
        writer.end_step(step)
        log_lines.append(json.dumps({"step": step, **values}, sort_keys=True))
    writer.close()
    log_path.write_text("\n".join(log_lines) + "\n")
    log = [json.loads(line) for line in log_lines]
    maxima = {"reward/length": scenario.length_weight} if scenario.length_weight else {}
    label = label_run(log, maxima)
    summary = {
        "run": out.name,
        "scenario": asdict(scenario),
        "seed": seed,
        "steps": total_steps,
        "sample_fraction": sample_fraction,
        "label": label.to_dict(),
        "maxima": maxima,
    }
    (out / "run.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def grpo_step(
    step: int,
    scenario: Scenario,
    policy: task.TinyCausalLM,
    behaviour: task.TinyCausalLM,
    reference: task.TinyCausalLM,
    optimizer: torch.optim.Optimizer,
    chosen: Sequence[task.Problem],
    generator: torch.Generator,
    writer: Any,
    one_call: bool = False,
) -> dict[str, float]:
    """Sample with ``behaviour``, score, then ``epochs`` passes of mini-batch updates;
    every mini-batch of the last epoch is captured (``one_call``: all of them in one call,
    without token ids). Returns the trainer's log values."""
    group = scenario.group
    rows = [p for p in chosen for _ in range(group)]
    prompts = torch.tensor([[task.BOS, *task.encode(p.prompt)] for p in rows])
    rollout = sample_rows(behaviour, prompts, MAX_NEW_TOKENS, generator)
    responses, mask = rollout.responses, rollout.mask
    texts = [task.decode(r.tolist()) for r in responses]
    strict = torch.tensor(
        [float(task.verify(p.prompt, t)) for p, t in zip(rows, texts, strict=True)]
    )
    lengths = mask.sum(1).float()
    if scenario.verifier == "answer":
        functions = {"correct": strict}
    else:
        functions = {
            scenario.verifier: torch.tensor(
                [float(rewarded(p, t, scenario.verifier)) for p, t in zip(rows, texts, strict=True)]
            )
        }
    if scenario.length_weight:
        functions["length"] = scenario.length_weight * lengths / MAX_NEW_TOKENS
    rewards = sum(functions.values())
    assert isinstance(rewards, Tensor)
    advantages = task.group_advantages(rewards, group)
    grouped = rewards.view(-1, group)
    equal_groups = (grouped.max(1).values == grouped.min(1).values).float().mean()
    batch = len(rows)
    per_minibatch = batch // scenario.minibatches
    token_advantages = advantages[:, None] * mask

    def logits_of(model: task.TinyCausalLM, rows_slice: slice) -> Tensor:
        return task.response_logits(model, prompts[rows_slice], responses[rows_slice])

    with torch.no_grad():
        old_log_probs, old_entropy = task.token_log_probs_and_entropy(
            logits_of(policy, slice(None)), responses
        )
        ref_log_probs, _ = task.token_log_probs_and_entropy(
            logits_of(reference, slice(None)), responses
        )
    old_log_probs, old_entropy = old_log_probs * mask, old_entropy * mask
    ref_log_probs = ref_log_probs * mask
    clipped_tokens = 0.0
    parts: list[dict[str, Tensor]] = []
    groups: list[list[str]] = []
    for epoch in range(scenario.epochs):
        for start in range(0, batch, per_minibatch):
            part = slice(start, start + per_minibatch)
            log_probs, entropy = task.token_log_probs_and_entropy(
                logits_of(policy, part), responses[part]
            )
            loss, _, _ = task.grpo_loss(
                log_probs, old_log_probs[part], ref_log_probs[part], token_advantages[part],
                mask[part], scenario.clip, scenario.kl_coef,
            )  # fmt: skip
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            optimizer.step()
            ratio = (log_probs.detach() - old_log_probs[part]).exp()
            outside = ((ratio - 1).abs() > scenario.clip) & mask[part]
            clipped_tokens += float(outside.sum())
            if epoch == scenario.epochs - 1:
                parts.append(
                    {
                        "mask": mask[part],
                        "log_probs": log_probs.detach() * mask[part],
                        "old_log_probs": old_log_probs[part],
                        "rollout_log_probs": rollout.log_probs[part],
                        "ref_log_probs": ref_log_probs[part],
                        "advantages": token_advantages[part],
                        "entropy": entropy.detach() * mask[part],
                        "old_entropy": old_entropy[part],
                        "rewards": rewards[part],
                        "token_ids": responses[part],
                        **{f"reward:{name}": v[part] for name, v in functions.items()},
                    }
                )
                groups.append([p.problem_id for p in rows[part]])
    # as a loss hook captures: one call per mini-batch (or, for the bundled runs, the
    # step's mini-batches in one call)
    calls = (
        [(parts, groups)] if one_call else [([a], [g]) for a, g in zip(parts, groups, strict=True)]
    )
    for batch_parts, batch_groups in calls:
        joined = {key: torch.cat([p[key] for p in batch_parts]) for key in batch_parts[0]}
        functions_of = {k: joined.pop(k) for k in list(joined) if k.startswith("reward:")}
        token_ids = joined.pop("token_ids")
        writer.write(
            step,
            **joined,
            group=[label for labels in batch_groups for label in labels],
            token_ids=None if one_call else token_ids,
            per_sequence=functions_of,
        )
    valid = mask.sum()
    values = {
        CORRECT: float(strict.mean()),
        "reward/total": float(rewards.mean()),
        "groups/equal_reward_share": float(equal_groups),
        "response/length_mean": float(lengths.mean()),
        "response/at_limit_share": float((lengths >= MAX_NEW_TOKENS).float().mean()),
        "actor/entropy": float(old_entropy.sum() / valid),
        "actor/clipfrac": clipped_tokens / float(valid) / scenario.epochs,
    }
    for name, value in functions.items():
        if name != "correct":
            values[f"reward/{name}"] = float(value.mean())
    return values


# ------------------------------------------------------------------------- the corpus
def _deterministic() -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def _start_path(folder: Path, seed: int) -> Path:
    return folder / f"supervised_seed{seed}.pt"


def _make_start(job: tuple[int, str]) -> float:
    """Train the supervised start of a seed and save its weights; returns CPU seconds."""
    seed, folder = job
    _deterministic()
    started = time.process_time()
    model = supervised_start(seed)
    torch.save(model.state_dict(), _start_path(Path(folder), seed))
    return time.process_time() - started


def _one(job: tuple[str, int, str, str, float, int | None]) -> dict[str, Any]:
    scenario_name, seed, out, starts, fraction, steps = job
    one_call = steps is not None  # the bundled runs
    _deterministic()
    started = time.process_time()
    start = task.TinyCausalLM(task.ModelConfig(max_len=96))
    start.load_state_dict(torch.load(_start_path(Path(starts), seed), weights_only=True))
    summary = grpo_run(
        SCENARIOS[scenario_name], seed, start, Path(out), fraction, steps, one_call=one_call
    )
    summary["cpu_seconds"] = round(time.process_time() - started, 1)
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="the corpus folder")
    parser.add_argument("--only", default=None, help="comma-separated run names")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--bundled", action="store_true", help=f"write {', '.join(BUNDLED)} to sample_data/runs/"
    )
    args = parser.parse_args(argv)
    if args.bundled:
        out = args.out or ROOT / "sample_data" / "runs"
        wanted = list(BUNDLED)
        fraction, steps = BUNDLED_FRACTION, BUNDLED_STEPS
    else:
        if args.out is None:
            parser.error("--out is required (or --bundled)")
        out = args.out
        wanted = [run_name(s, seed) for s, seed in CORPUS]
        fraction, steps = 1.0, None
    if args.only:
        wanted = [name for name in wanted if name in set(args.only.split(","))]
    by_name = {run_name(s, seed): (s, seed) for s in SCENARIOS for seed in range(1, 10)}
    started, cpu = time.perf_counter(), time.process_time()
    out.mkdir(parents=True, exist_ok=True)
    summaries = []
    with tempfile.TemporaryDirectory() as starts, ProcessPoolExecutor(args.jobs) as pool:
        # the supervised start of each seed once, shared by the runs of that seed
        seeds = sorted({by_name[name][1] for name in wanted})
        start_cpu = sum(pool.map(_make_start, [(seed, starts) for seed in seeds]))
        print(f"supervised starts of seeds {seeds}: {start_cpu:.0f} s CPU", flush=True)
        jobs = [(*by_name[name], str(out / name), starts, fraction, steps) for name in wanted]
        for summary in pool.map(_one, jobs):
            label = summary["label"]
            outcome = f"{label['rule'] or 'healthy'}; {label['detail']}"
            print(
                f"{summary['run']:<22} label {label['step']!s:>4} ({outcome}), "
                f"{summary['cpu_seconds']} s CPU",
                flush=True,
            )
            summaries.append(summary)
    child_cpu = start_cpu + sum(s["cpu_seconds"] for s in summaries)
    print(
        f"{len(summaries)} runs in {time.perf_counter() - started:.0f} s wall, "
        f"{child_cpu + time.process_time() - cpu:.0f} s CPU"
    )
    index = {s["run"]: {k: s[k] for k in ("scenario", "seed", "steps", "label")} for s in summaries}
    (out / "corpus.json").write_text(json.dumps(index, indent=1) + "\n")


if __name__ == "__main__":
    main()
