"""Make ratioscope's sample data with a real, small GRPO run on the CPU.

A tiny causal transformer learns a verifiable task (n mod k by repeated subtraction,
answers of 100-146 tokens) by supervised learning on demonstrations, then trains 32 GRPO
steps in the set-up of KPO App. B.1: a batch of prompts with a group of 8 samples each,
split into 4 mini-batches of one optimizer step each, so the first mini-batch is
on-policy and the next three are off-policy. Every 8th GRPO step is recorded as a verl
actor batch; the last recorded step also carries logits and is written in the TRL and
prime-rl layouts; every 2nd step is also written, without logits, as a per-step run in
verl_steps/ (for timelines); then both policies answer held-out problems 64 times each
for the evaluation commands. See README.md beside this file.

Usage: python sample_data/make_sample_data.py [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

# ---------------------------------------------------------------------------------------
# Task: n mod k by repeated subtraction.
#
# The prompt "095%7:" asks for 95 mod 7. The answer is the whole subtraction trace, one
# step per subtraction, then the remainder after "#":
#   "095-7=088,088-7=081,081-7=074,...,018-7=011,011-7=004#4"
# Numbers are zero-padded to three digits so that every step has the same shape, and the
# subtrahend "-7" is one token, so a step is 9 tokens. Problems have 11 to 16 steps, so
# correct answers are 101 to 146 tokens long (with <eos>). Only the final answer is
# checked, as in RL with verifiable rewards.
# ---------------------------------------------------------------------------------------

DATASET = "mod-by-subtraction"
MODULI = range(3, 10)
MIN_STEPS, MAX_STEPS = 11, 16  # n // k of the evaluated and GRPO problems
VOCAB: tuple[str, ...] = (
    "<pad>",
    "<bos>",
    "<eos>",
    *"0123456789",
    "%",
    ":",
    "=",
    ",",
    "#",
    *(f"-{k}" for k in MODULI),
)
TOKEN_ID = {token: index for index, token in enumerate(VOCAB)}
PAD, BOS, EOS = TOKEN_ID["<pad>"], TOKEN_ID["<bos>"], TOKEN_ID["<eos>"]
PROMPT_LEN = 7  # <bos> + "nnn%k:"
PER_STEP_DIR = "verl_steps"  # the per-step run (every per_step_every-th step, no logits)
_PROMPT_RE = re.compile(r"^(\d{3})%(\d):$")
_ANSWER_RE = re.compile(r"#(\d+)$")


@dataclass(frozen=True)
class Problem:
    """One instance: compute ``n mod k`` (``k`` in 3..9) by subtracting ``k``."""

    n: int
    k: int

    @property
    def problem_id(self) -> str:
        return f"{self.n:03d}%{self.k}"

    @property
    def prompt(self) -> str:
        return f"{self.problem_id}:"

    @property
    def answer(self) -> str:
        return str(self.n % self.k)


def solution(problem: Problem, stop_early: bool = False) -> str:
    """The demonstration: every subtraction, then ``#`` and the remainder.

    ``stop_early`` writes the flawed trace of a sloppy demonstrator, who stops one
    subtraction too soon (when x < 2k) and so answers x instead of x - k.
    """
    steps = []
    x = problem.n
    stop_below = 2 * problem.k if stop_early else problem.k
    while x >= stop_below:
        steps.append(f"{x:03d}-{problem.k}={x - problem.k:03d}")
        x -= problem.k
    return ",".join(steps) + f"#{x}"


def encode(text: str) -> list[int]:
    """Token ids of ``text`` (no <bos>/<eos>); ``-k`` is a single token."""
    ids = []
    i = 0
    while i < len(text):
        piece = text[i : i + 2] if text[i] == "-" else text[i]
        if piece not in TOKEN_ID:
            raise ValueError(f"cannot tokenize {text[i : i + 2]!r} at offset {i} of {text!r}")
        ids.append(TOKEN_ID[piece])
        i += len(piece)
    return ids


def tokenizer_json() -> dict:
    """:data:`VOCAB` as a Hugging Face ``tokenizer.json`` (a word-level model whose
    pre-tokenizer splits the text like :func:`encode`), for token text in
    ``ratioscope report --tokenizer``."""
    specials = ("<pad>", "<bos>", "<eos>")
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": TOKEN_ID[token],
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for token in specials
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Split",
            "pattern": {"Regex": "-[3-9]|[0-9%:=,#]"},
            "behavior": "Isolated",
            "invert": False,
        },
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": dict(TOKEN_ID), "unk_token": "<pad>"},
    }


def decode(ids: Sequence[int]) -> str:
    """Text of ``ids`` up to the first <eos>, without <pad>/<bos>."""
    out = []
    for token in ids:
        if token == EOS:
            break
        if token not in (PAD, BOS):
            out.append(VOCAB[token])
    return "".join(out)


def verify(prompt: str, response: str) -> bool:
    """The verifier: does the text after the last ``#`` equal ``n mod k``?"""
    match = _PROMPT_RE.match(prompt)
    if match is None:
        raise ValueError(f"not a prompt of this task: {prompt!r}")
    n, k = int(match.group(1)), int(match.group(2))
    answer = _ANSWER_RE.search(response)
    return answer is not None and int(answer.group(1)) == n % k


def all_problems() -> list[Problem]:
    """Every problem whose trace has MIN_STEPS..MAX_STEPS subtractions (252 of them)."""
    return [
        Problem(n, k)
        for k in MODULI
        for n in range(MIN_STEPS * k, 1000)
        if MIN_STEPS <= n // k <= MAX_STEPS
    ]


def short_problems() -> list[Problem]:
    """Problems with 1..MIN_STEPS-1 subtractions, used only as extra demonstrations."""
    return [Problem(n, k) for k in MODULI for n in range(k, MIN_STEPS * k)]


def split_problems(seed: int, held_out: int) -> tuple[list[Problem], list[Problem]]:
    """(train, held_out): a fixed random split of :func:`all_problems`."""
    problems = all_problems()
    random.Random(seed).shuffle(problems)
    return problems[held_out:], sorted(problems[:held_out], key=lambda p: (p.k, p.n))


# ---------------------------------------------------------------------------------------
# Model: a pre-norm causal transformer with rotary position embeddings.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = len(VOCAB)
    d_model: int = 64
    n_heads: int = 2
    n_layers: int = 2
    d_ff: int = 256
    max_len: int = 160


def _rotary_tables(max_len: int, head_dim: int) -> tuple[Tensor, Tensor]:
    inverse_frequency = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.arange(max_len).float()[:, None] * inverse_frequency[None]
    return torch.cos(angles), torch.sin(angles)


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


@dataclass
class KVCache:
    """Keys and values of every layer: ``[B, H, max_len, head_dim]`` each."""

    keys: list[Tensor]
    values: list[Tensor]


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.norm_attention = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)
        self.norm_mlp = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff),
            nn.GELU(),
            nn.Linear(config.d_ff, config.d_model),
        )

    def _qkv(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        batch, length, width = x.shape
        q, k, v = (
            self.qkv(self.norm_attention(x))
            .view(batch, length, 3, self.n_heads, width // self.n_heads)
            .permute(2, 0, 3, 1, 4)
        )
        return _rotate(q, cos, sin), _rotate(k, cos, sin), v

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        q, k, v = self._qkv(x, cos, sin)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).flatten(2))
        return x + self.mlp(self.norm_mlp(x))

    def step(
        self, x: Tensor, cos: Tensor, sin: Tensor, cache: KVCache, layer: int, pos: int
    ) -> Tensor:
        """Incremental path: ``x`` [B, 1, D] at position ``pos`` attends over the cache."""
        q, k, v = self._qkv(x, cos, sin)
        cache.keys[layer][:, :, pos] = k[:, :, 0]
        cache.values[layer][:, :, pos] = v[:, :, 0]
        keys = cache.keys[layer][:, :, : pos + 1]
        values = cache.values[layer][:, :, : pos + 1]
        # The sampler's own attention kernel (explicit softmax over the cache), as
        # inference engines differ from the trainer's fused kernel. In float32 it agrees
        # with the trainer to ~1e-7; the recorded rollout log-probs come from a bfloat16
        # copy of the policy instead (bfloat16_engine_log_probs).
        scores = (q @ keys.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        attended = torch.softmax(scores, dim=-1) @ values
        x = x + self.out(attended.transpose(1, 2).flatten(2))
        return x + self.mlp(self.norm_mlp(x))


class TinyCausalLM(nn.Module):
    """A few-layer causal transformer over :data:`VOCAB`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size)
        cos, sin = _rotary_tables(config.max_len, config.d_model // config.n_heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, ids: Tensor) -> Tensor:
        """Full forward pass (the trainer's path): ``ids`` [B, L] -> logits [B, L, V]."""
        length = ids.shape[1]
        cos, sin = self.cos[:length], self.sin[:length]
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))

    def new_cache(self, batch: int) -> KVCache:
        c = self.config
        shape = (batch, c.n_heads, c.max_len, c.d_model // c.n_heads)
        return KVCache(
            keys=[torch.zeros(shape) for _ in range(c.n_layers)],
            values=[torch.zeros(shape) for _ in range(c.n_layers)],
        )

    def step(self, token: Tensor, cache: KVCache, pos: int) -> Tensor:
        """Incremental path: ``token`` [B] at position ``pos`` -> next-token logits [B, V]."""
        cos, sin = self.cos[pos : pos + 1], self.sin[pos : pos + 1]
        x = self.embed(token[:, None])
        for layer, block in enumerate(self.blocks):
            x = block.step(x, cos, sin, cache, layer, pos)
        return self.head(self.norm(x))[:, 0]


# ---------------------------------------------------------------------------------------
# Rollout engine: incremental decoding with a KV cache, temperature 1.
# ---------------------------------------------------------------------------------------


@dataclass
class Rollout:
    """Sampled responses, right-padded; ``mask`` is True up to and including <eos>."""

    responses: Tensor  # [B, T] int64
    mask: Tensor  # [B, T] bool
    # [B, T] float32, the float32 sampler's own log-probs (0 on padding); the recorded
    # rollout log-probs are the bfloat16 engine's (bfloat16_engine_log_probs)
    log_probs: Tensor


@torch.no_grad()
def sample(
    model: TinyCausalLM,
    prompts: Tensor,
    max_new: int,
    generator: torch.Generator,
    temperature: float | None = None,
    top_p: float | None = None,
) -> Rollout:
    """Sample one response per row of ``prompts`` [B, P] with the KV-cache path; with
    ``temperature`` and ``top_p`` from the tempered distribution truncated to its nucleus
    (the rollout's log-probs are then that distribution's: :func:`nucleus_log_probs`)."""
    batch, prompt_len = prompts.shape
    cache = model.new_cache(batch)
    for pos in range(prompt_len - 1):
        model.step(prompts[:, pos], cache, pos)
    token = prompts[:, -1]
    responses = torch.full((batch, max_new), PAD, dtype=torch.long)
    log_probs = torch.zeros(batch, max_new)
    lengths = torch.full((batch,), max_new, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    width = max_new
    for t in range(max_new):
        logits = model.step(token, cache, prompt_len - 1 + t)
        if temperature is None and top_p is None:
            token_log_probs = torch.log_softmax(logits, dim=-1)
        else:
            token_log_probs = nucleus_log_probs(logits, temperature or 1.0, top_p or 1.0)
        token = torch.multinomial(token_log_probs.exp(), 1, generator=generator)[:, 0]
        token = token.masked_fill(done, PAD)
        responses[:, t] = token
        log_probs[:, t] = token_log_probs.gather(1, token[:, None])[:, 0].masked_fill(done, 0.0)
        finished = ~done & (token == EOS)
        lengths[finished] = t + 1
        done |= finished
        if bool(done.all()):
            width = t + 1
            break
    mask = torch.arange(width)[None] < lengths[:, None]
    return Rollout(responses[:, :width], mask, log_probs[:, :width])


def nucleus_log_probs(logits: Tensor, temperature: float, top_p: float) -> Tensor:
    """log-probs of softmax(logits / temperature) kept to its nucleus and renormalised:
    the most likely tokens, in order, while the mass before each is below ``top_p``
    (the first always); -inf for the others. [B, V] -> [B, V]."""
    tempered = torch.log_softmax(logits / temperature, dim=-1)
    ordered, order = torch.sort(tempered, dim=-1, descending=True)
    mass_before = torch.cumsum(ordered.exp(), dim=-1) - ordered.exp()
    keep_sorted = mass_before < top_p
    keep_sorted[:, 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(1, order, keep_sorted)
    return torch.log_softmax(tempered.masked_fill(~keep, float("-inf")), dim=-1)


def token_log_probs_and_entropy(logits: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
    """log pi(y_t) and the entropy of pi at every position: logits [B, T, V] -> [B, T]."""
    log_p = torch.log_softmax(logits, dim=-1)
    chosen = log_p.gather(-1, tokens[..., None])[..., 0]
    entropy = -(log_p.exp() * log_p).sum(-1)
    return chosen, entropy


def response_logits(model: TinyCausalLM, prompts: Tensor, responses: Tensor) -> Tensor:
    """Full-pass logits that predict each response token: [B, T, V]."""
    ids = torch.cat((prompts, responses), dim=1)[:, :-1]
    return model(ids)[:, prompts.shape[1] - 1 :]


@torch.no_grad()
def bfloat16_engine_log_probs(
    model: TinyCausalLM, prompts: Tensor, responses: Tensor, mask: Tensor
) -> Tensor:
    """The inference engine's log-probs of the sampled tokens, from a bfloat16 copy of
    ``model``: prompts [B, P], responses [B, T], mask [B, T] bool -> [B, T] float32.

    Inference engines (vLLM, SGLang) serve the policy with bfloat16 weights and
    activations and report sampling log-probs as a float32 log-softmax of those bfloat16
    logits; the trainer computes the same log-probs in float32. This copy does the same:
    every parameter and buffer (rotary tables included) cast to bfloat16, one full
    bfloat16 forward pass over prompt + response, log-softmax in float32. bfloat16 keeps 8
    significant bits (relative rounding error up to 2^-8), so the result differs from the
    float32 policy's log-probs by a small, real amount: the train/inference mismatch that
    ``rollout_log_probs`` records. The pass draws no random numbers (the copy is made with
    ``deepcopy``, not a new initialisation), so the run's tokens and training are the same
    as with a float32 engine. Padding positions (``~mask``) are 0.
    """
    engine = copy.deepcopy(model).to(torch.bfloat16)
    logits = response_logits(engine, prompts, responses)
    log_p = torch.log_softmax(logits.float(), dim=-1)
    return log_p.gather(-1, responses[..., None])[..., 0].masked_fill(~mask, 0.0)


# ---------------------------------------------------------------------------------------
# Supervised learning on demonstrations.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunConfig:
    """Every knob of the run; the defaults make the committed sample data."""

    seed: int = 20260101
    threads: int = 2
    model: ModelConfig = ModelConfig()
    held_out: int = 50
    sft_steps: int = 600
    sft_batch: int = 32
    sft_lr: float = 3e-3
    sft_short_every: int = 2  # every 2nd step is a batch of short demonstrations
    # The demonstrator stops one subtraction early in 40% of its traces; the supervised
    # policy inherits the habit and GRPO learns to drop it.
    sft_stop_early_probability: float = 0.4
    grpo_steps: int = 32
    prompts_per_step: int = 16
    group_size: int = 8
    minibatches: int = 4
    grpo_lr: float = 1.5e-4
    clip_eps: float = 0.2
    kl_coef: float = 0.001
    max_grad_norm: float = 1.0
    max_new_tokens: int = 152
    record_every: int = 8  # steps 8, 16, 24, 32 are written; the last one with logits
    # Steps 2, 4, ..., 32 are also written to verl_steps/, without logits (0: none). Only
    # extra writes: the training and the files above do not depend on it.
    per_step_every: int = 2
    eval_samples: int = 64
    eval_chunk_rows: int = 512


def demonstration_batch(
    problems: Sequence[Problem], stop_early_probability: float, rng: random.Random
) -> tuple[Tensor, Tensor]:
    """(ids [B, L], targets [B, L]) for teacher forcing; prompt and padding targets are PAD."""
    sequences = [
        [BOS, *encode(p.prompt), *encode(solution(p, rng.random() < stop_early_probability)), EOS]
        for p in problems
    ]
    length = max(map(len, sequences))
    ids = torch.full((len(sequences), length), PAD, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence)
    targets = ids[:, 1:].clone()
    targets[:, : PROMPT_LEN - 1] = PAD
    return ids[:, :-1], targets


def supervised_training(
    model: TinyCausalLM, config: RunConfig, train: Sequence[Problem], rng: random.Random
) -> list[float]:
    """Cross-entropy on demonstrations, AdamW with warm-up and cosine decay; returns losses."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.sft_lr, betas=(0.9, 0.98))
    short = short_problems()
    losses = []
    for step in range(config.sft_steps):
        use_short = config.sft_short_every > 0 and step % config.sft_short_every == 1
        problems = rng.sample(short if use_short else list(train), config.sft_batch)
        ids, targets = demonstration_batch(problems, config.sft_stop_early_probability, rng)
        logits = model(ids)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD)
        warmup = min(1.0, (step + 1) / 30)
        cosine = 0.5 * (1 + math.cos(math.pi * step / config.sft_steps))
        for group in optimizer.param_groups:
            group["lr"] = config.sft_lr * warmup * cosine
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


# ---------------------------------------------------------------------------------------
# GRPO, recorded as KPO App. B.1 describes: one batch of prompts x group, four
# mini-batches, one optimizer step each; mini-batch 0 is on-policy.
# ---------------------------------------------------------------------------------------


def group_advantages(rewards: Tensor, group_size: int, eps: float = 1e-6) -> Tensor:
    """GRPO advantages (r - mean) / (std + eps) per group of consecutive rows: [B] -> [B].

    The standard deviation is the population one (ddof = 0); a group whose rewards are
    all equal gets advantage 0.
    """
    grouped = rewards.view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True, correction=0)
    return ((grouped - mean) / (std + eps)).flatten()


def grpo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    ref_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float,
    kl_coef: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Clipped surrogate (GRPO, KPO Eq. 2) + k3 KL to the reference, "seq-mean-token-mean".

    Args: per-token tensors [B, T]; ``advantages`` [B, T] (broadcast over the response).
    Returns: (loss scalar, per-token policy-gradient loss [B, T], per-token KL [B, T]).
    """
    log_ratio = log_probs - old_log_probs
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages
    pg = -torch.minimum(unclipped, clipped)
    ref_minus_current = ref_log_probs - log_probs
    kl = ref_minus_current.exp() - ref_minus_current - 1
    per_token = (pg + kl_coef * kl) * mask
    per_sequence = per_token.sum(1) / mask.sum(1).clamp(min=1)
    return per_sequence.mean(), pg * mask, kl * mask


@dataclass
class StepRecord:
    """Everything recorded for one GRPO step (all rows, right-padded)."""

    step: int
    problems: list[Problem]  # one per row
    prompts: Tensor  # [B, P] int64
    rollout: Rollout
    rollout_log_probs: Tensor  # [B, T] the bfloat16 engine's log-probs of the tokens
    rewards: Tensor  # [B]
    advantages: Tensor  # [B]
    minibatch: Tensor  # [B] int64
    old_log_probs: Tensor
    old_entropy: Tensor
    ref_log_probs: Tensor
    log_probs: Tensor
    entropy: Tensor
    pg_loss: Tensor
    kl: Tensor
    logits: Tensor | None  # [B, T, V] float32, only when asked for
    ref_logits: Tensor | None


@dataclass
class SampledBatch:
    """A group per prompt, sampled and scored by the engine, with its rewards."""

    problems: list[Problem]
    prompts: Tensor  # [B, P]
    rollout: Rollout
    rollout_log_probs: Tensor  # [B, T] the engine's
    rewards: Tensor  # [B]
    advantages: Tensor  # [B]


def sample_groups(
    policy: TinyCausalLM,
    problems: Sequence[Problem],
    config: RunConfig,
    generator: torch.Generator,
) -> SampledBatch:
    """A group of ``config.group_size`` responses per prompt, scored by the bfloat16
    engine (before any optimizer step of this batch: the engine serves pi_old)."""
    rows = [p for p in problems for _ in range(config.group_size)]
    prompts = torch.tensor([[BOS, *encode(p.prompt)] for p in rows])
    rollout = sample(policy, prompts, config.max_new_tokens, generator)
    rollout_log_probs = bfloat16_engine_log_probs(policy, prompts, rollout.responses, rollout.mask)
    return scored(rows, prompts, rollout, rollout_log_probs, config)


def scored(
    rows: list[Problem], prompts: Tensor, rollout: Rollout, engine: Tensor, config: RunConfig
) -> SampledBatch:
    """The batch with its verifier rewards and group advantages."""
    texts = [decode(r.tolist()) for r in rollout.responses]
    rewards = torch.tensor([float(verify(p.prompt, t)) for p, t in zip(rows, texts, strict=True)])
    advantages = group_advantages(rewards, config.group_size)
    return SampledBatch(rows, prompts, rollout, engine, rewards, advantages)


def grpo_step(
    step: int,
    policy: TinyCausalLM,
    reference: TinyCausalLM,
    optimizer: torch.optim.Optimizer,
    problems: Sequence[Problem],
    config: RunConfig,
    generator: torch.Generator,
    keep_logits: bool,
) -> StepRecord:
    """Sample a group per prompt, then one optimizer step per mini-batch."""
    sampled = sample_groups(policy, problems, config, generator)
    return train_on(step, policy, reference, optimizer, sampled, config, keep_logits)


def train_on(
    step: int,
    policy: TinyCausalLM,
    reference: TinyCausalLM,
    optimizer: torch.optim.Optimizer,
    sampled: SampledBatch,
    config: RunConfig,
    keep_logits: bool,
) -> StepRecord:
    """One optimizer step per mini-batch on a sampled batch; the old log-probs are the
    policy's before the first of them."""
    rows, prompts, rollout = sampled.problems, sampled.prompts, sampled.rollout
    responses, mask = rollout.responses, rollout.mask
    rollout_log_probs, rewards, advantages = (
        sampled.rollout_log_probs,
        sampled.rewards,
        sampled.advantages,
    )
    batch, length = responses.shape
    rows_per_minibatch = batch // config.minibatches
    minibatch = torch.arange(batch) // rows_per_minibatch
    token_advantages = advantages[:, None] * mask

    def per_minibatch(model: TinyCausalLM) -> Iterator[tuple[slice, Tensor]]:
        # Every pass over the batch uses the same row slices and padded width, so that the
        # on-policy mini-batch reproduces old_log_probs bit for bit.
        for start in range(0, batch, rows_per_minibatch):
            rows_slice = slice(start, start + rows_per_minibatch)
            yield rows_slice, response_logits(model, prompts[rows_slice], responses[rows_slice])

    def empty() -> Tensor:
        return torch.zeros(batch, length)

    old_log_probs, old_entropy, ref_log_probs, log_probs, entropy = (empty() for _ in range(5))
    pg_loss, kl = empty(), empty()
    vocab = policy.config.vocab_size
    logits_all = torch.zeros(batch, length, vocab) if keep_logits else None
    ref_logits_all = torch.zeros(batch, length, vocab) if keep_logits else None
    with torch.no_grad():
        for rows_slice, logits in per_minibatch(policy):
            lp, ent = token_log_probs_and_entropy(logits, responses[rows_slice])
            old_log_probs[rows_slice], old_entropy[rows_slice] = lp, ent
        for rows_slice, logits in per_minibatch(reference):
            lp, _ = token_log_probs_and_entropy(logits, responses[rows_slice])
            ref_log_probs[rows_slice] = lp
            if ref_logits_all is not None:
                ref_logits_all[rows_slice] = logits
    # The generator computes each mini-batch's logits when it is reached, i.e. after the
    # optimizer steps of the mini-batches before it.
    for rows_slice, logits in per_minibatch(policy):
        lp, ent = token_log_probs_and_entropy(logits, responses[rows_slice])
        loss, pg, kl_token = grpo_loss(
            lp,
            old_log_probs[rows_slice],
            ref_log_probs[rows_slice],
            token_advantages[rows_slice],
            mask[rows_slice],
            config.clip_eps,
            config.kl_coef,
        )
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
        optimizer.step()
        log_probs[rows_slice], entropy[rows_slice] = lp.detach(), ent.detach()
        pg_loss[rows_slice], kl[rows_slice] = pg.detach(), kl_token.detach()
        if logits_all is not None:
            logits_all[rows_slice] = logits.detach()
    zero_padding = [old_log_probs, old_entropy, ref_log_probs, log_probs, entropy]
    for tensor in zero_padding:
        tensor.mul_(mask)
    if logits_all is not None and ref_logits_all is not None:
        logits_all.mul_(mask[..., None])
        ref_logits_all.mul_(mask[..., None])
    return StepRecord(
        step=step,
        problems=rows,
        prompts=prompts,
        rollout=rollout,
        rollout_log_probs=rollout_log_probs,
        rewards=rewards,
        advantages=advantages,
        minibatch=minibatch,
        old_log_probs=old_log_probs,
        old_entropy=old_entropy,
        ref_log_probs=ref_log_probs,
        log_probs=log_probs,
        entropy=entropy,
        pg_loss=pg_loss,
        kl=kl,
        logits=logits_all,
        ref_logits=ref_logits_all,
    )


# ---------------------------------------------------------------------------------------
# Evaluation samples.
# ---------------------------------------------------------------------------------------


def evaluation_samples(
    model: TinyCausalLM,
    problems: Sequence[Problem],
    method: str,
    config: RunConfig,
    generator: torch.Generator,
) -> list[dict]:
    """``eval_samples`` responses per problem, in the flat samples.jsonl layout."""
    n = config.eval_samples
    per_chunk = max(1, config.eval_chunk_rows // n)
    out = []
    for start in range(0, len(problems), per_chunk):
        chunk = problems[start : start + per_chunk]
        prompts = torch.tensor([[BOS, *encode(p.prompt)] for p in chunk for _ in range(n)])
        rollout = sample(model, prompts, config.max_new_tokens, generator)
        for row, response in enumerate(rollout.responses.tolist()):
            problem = chunk[row // n]
            text = decode(response)
            out.append(
                {
                    "problem_id": problem.problem_id,
                    "response": text,
                    "correct": verify(problem.prompt, text),
                    "answer": problem.answer,
                    "method": method,
                    "sample_index": row % n,
                    "dataset": DATASET,
                }
            )
    return out


# ---------------------------------------------------------------------------------------
# Writers: verl actor batch, TRL GRPO inputs, prime-rl token export, samples.jsonl.
# ---------------------------------------------------------------------------------------


def verl_batch(record: StepRecord) -> dict:
    """The step as verl's actor sees it, keyed by verl's names."""
    mask = record.rollout.mask
    scores = torch.zeros_like(record.old_log_probs)
    last = mask.sum(1) - 1
    scores[torch.arange(len(last)), last] = record.rewards
    batch = {
        "prompts": record.prompts,
        "responses": record.rollout.responses,
        "response_mask": mask,
        "old_log_probs": record.old_log_probs,
        "log_probs": record.log_probs,
        "ref_log_prob": record.ref_log_probs,
        "rollout_log_probs": record.rollout_log_probs,
        "advantages": record.advantages[:, None] * mask,
        "entropys": record.entropy,
        "old_entropy": record.old_entropy,
        "token_level_scores": scores,
        "uid": [p.problem_id for p in record.problems],
        "minibatch": record.minibatch,
        "step": record.step,
    }
    if record.logits is not None and record.ref_logits is not None:
        # float16 keeps the file small; logits of this model stay well inside its range.
        batch["logits"] = record.logits.to(torch.float16)
        batch["ref_logits"] = record.ref_logits.to(torch.float16)
    return batch


def trl_batch(record: StepRecord) -> dict:
    """The step in the layout of TRL's GRPOTrainer inputs."""
    mask = record.rollout.mask
    return {
        "prompt_ids": record.prompts,
        "prompt_mask": torch.ones_like(record.prompts),
        "completion_ids": record.rollout.responses,
        "completion_mask": mask.long(),
        "old_per_token_logps": record.old_log_probs,
        "per_token_logps": record.log_probs,
        "ref_per_token_logps": record.ref_log_probs,
        "sampling_per_token_logps": record.rollout_log_probs,
        "advantages": record.advantages,
        "rewards": record.rewards,
    }


def _float32_texts(values: Tensor) -> list[str]:
    """Each value in the shortest text that reads back as the same float32; non-finite ->
    ``null`` (JSON has no NaN or infinity)."""
    import numpy as np

    array = values.detach().to(torch.float32).numpy()
    return [str(v) if np.isfinite(v) else "null" for v in array]


def _json_list(items: Sequence[str]) -> str:
    return "[" + ",".join(items) + "]"


def prime_rl_lines(record: StepRecord, example_ids: dict[Problem, int]) -> list[str]:
    """One JSON line per sequence, prime-rl token-export style, over prompt + completion.

    ``inference_logprobs`` are the rollout engine's, ``trainer_logprobs`` the policy's at
    use time; ``log_importance_ratio`` is their difference and ``mismatch_kl`` its k3
    estimate exp(x) - 1 - x; ``losses`` holds this run's per-token loss terms. Prompt
    positions carry null log-probs, zero advantages and rewards, and zero losses.
    """
    prompt_len = record.prompts.shape[1]
    lines = []
    for row, problem in enumerate(record.problems):
        length = int(record.rollout.mask[row].sum())
        inference = record.rollout_log_probs[row, :length]
        trainer = record.log_probs[row, :length]
        log_ratio = trainer - inference
        per_token = {
            "inference_logprobs": (inference, "null"),
            "trainer_logprobs": (trainer, "null"),
            "advantages": (record.advantages[row].expand(length), "0.0"),
            "rewards": (record.rewards[row].expand(length), "0.0"),
            "entropy": (record.entropy[row, :length], "null"),
            "log_importance_ratio": (log_ratio, "null"),
            "mismatch_kl": (log_ratio.exp() - 1 - log_ratio, "null"),
        }
        token_ids = record.prompts[row].tolist() + record.rollout.responses[row, :length].tolist()
        losses = [
            f'{{"pg":{pg},"kl":{kl}}}'
            for pg, kl in zip(
                _float32_texts(record.pg_loss[row, :length]),
                _float32_texts(record.kl[row, :length]),
                strict=True,
            )
        ]
        fields = [
            '"schema_version":1',
            f'"step":{record.step}',
            '"rank":0',
            f'"micro_step":{int(record.minibatch[row])}',
            f'"env_name":"{DATASET}"',
            f'"example_id":{example_ids[problem]}',
            f'"token_ids":{_json_list([str(t) for t in token_ids])}',
            f'"loss_mask":{_json_list(["false"] * prompt_len + ["true"] * length)}',
        ]
        for name, (values, prompt_value) in per_token.items():
            texts = [prompt_value] * prompt_len + _float32_texts(values)
            fields.append(f'"{name}":{_json_list(texts)}')
        prompt_losses = ['{"pg":0.0,"kl":0.0}'] * prompt_len
        fields.append(f'"losses":{_json_list(prompt_losses + losses)}')
        lines.append("{" + ",".join(fields) + "}")
    return lines


def _step_summary(record: StepRecord) -> dict:
    """Per-step numbers for the manifest: reward and per-mini-batch log-ratio sizes."""
    mask = record.rollout.mask
    log_ratio = (record.log_probs - record.old_log_probs).abs()
    mismatch = (record.rollout_log_probs - record.old_log_probs).abs()
    per_minibatch = []
    for index in range(int(record.minibatch.max()) + 1):
        rows = record.minibatch == index
        valid = mask[rows]
        per_minibatch.append(float(log_ratio[rows][valid].mean()))
    return {
        "step": record.step,
        "reward_mean": float(record.rewards.mean()),
        "response_length_mean": float(mask.sum(1).float().mean()),
        "mean_abs_log_ratio_per_minibatch": per_minibatch,
        "mean_abs_rollout_minus_old": float(mismatch[mask].mean()),
        "max_abs_rollout_minus_old": float(mismatch[mask].max()),
    }


def _accuracy(samples: Sequence[dict], method: str) -> float:
    chosen = [s["correct"] for s in samples if s["method"] == method]
    return sum(chosen) / len(chosen)


def generate(config: RunConfig, out_dir: Path, log: Callable[[str], None] = print) -> dict:
    """Run the whole pipeline and write every sample file under ``out_dir``; returns the
    manifest (also written as ``manifest.json``)."""
    _check(config)
    with _reproducible_torch(config.threads, config.seed):
        return _generate(config, out_dir, log)


@contextmanager
def _reproducible_torch(threads: int, seed: int) -> Iterator[None]:
    """Deterministic kernels, a fixed thread count (reduction order depends on it) and a
    seeded global generator for the run; the caller's settings are restored afterwards."""
    previous_threads = torch.get_num_threads()
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.set_num_threads(previous_threads)
        torch.use_deterministic_algorithms(previous_deterministic)


def _generate(config: RunConfig, out_dir: Path, log: Callable[[str], None]) -> dict:
    started = time.perf_counter()

    def elapsed() -> str:
        return f"{time.perf_counter() - started:6.1f}s"

    train, held_out = split_problems(config.seed, config.held_out)
    example_ids = {p: index for index, p in enumerate(all_problems())}
    policy = TinyCausalLM(config.model)
    sft_losses = supervised_training(policy, config, train, random.Random(config.seed))
    log(f"{elapsed()} supervised training: {config.sft_steps} steps, loss {sft_losses[-1]:.4f}")
    reference = copy.deepcopy(policy).requires_grad_(False)

    optimizer = torch.optim.Adam(policy.parameters(), lr=config.grpo_lr)
    prompt_rng = random.Random(config.seed + 1)
    rollout_generator = torch.Generator().manual_seed(config.seed + 2)
    recorded = [s for s in range(1, config.grpo_steps + 1) if s % config.record_every == 0]
    export_step = recorded[-1]
    per_step = [
        s
        for s in range(1, config.grpo_steps + 1)
        if config.per_step_every and s % config.per_step_every == 0
    ]
    steps_summary = []
    per_step_summary = []
    for step in range(1, config.grpo_steps + 1):
        problems = prompt_rng.sample(train, config.prompts_per_step)
        record = grpo_step(
            step,
            policy,
            reference,
            optimizer,
            problems,
            config,
            rollout_generator,
            keep_logits=step == export_step,
        )
        if step in recorded:
            _save(verl_batch(record), out_dir / "verl" / f"step_{step:04d}.pt")
            steps_summary.append(_step_summary(record))
            log(f"{elapsed()} GRPO step {step}: reward {record.rewards.mean():.3f} (recorded)")
        if step in per_step:
            # Everything of the verl file but the logits, which would not fit the budget.
            batch = verl_batch(record)
            batch.pop("logits", None)
            batch.pop("ref_logits", None)
            _save(batch, out_dir / PER_STEP_DIR / f"step_{step:04d}.pt")
            per_step_summary.append(_step_summary(record))
        if step == export_step:
            _save(trl_batch(record), out_dir / "trl" / f"step_{step:04d}.pt")
            lines = prime_rl_lines(record, example_ids)
            prime_path = out_dir / "prime_rl" / "token_exports" / f"step_{step}" / "rank_0.jsonl"
            _write_text(prime_path, "\n".join(lines) + "\n")

    eval_generator_seed = config.seed + 3
    samples = []
    for method, model in (("base", reference), ("grpo", policy)):
        # The same sampling seed for both policies: common random numbers make the
        # base-vs-trained difference less noisy.
        generator = torch.Generator().manual_seed(eval_generator_seed)
        samples += evaluation_samples(model, held_out, method, config, generator)
    _write_text(
        out_dir / "samples.jsonl",
        "".join(json.dumps(s, separators=(",", ":")) + "\n" for s in samples),
    )
    manifest = {
        "config": asdict(config),
        "parameters": sum(p.numel() for p in policy.parameters()),
        "recorded_steps": recorded,
        "export_step": export_step,
        "steps": steps_summary,
        "per_step_run": {
            "directory": PER_STEP_DIR,
            "steps": per_step,
            "logits": False,
            "summaries": per_step_summary,
        },
        "accuracy": {"base": _accuracy(samples, "base"), "grpo": _accuracy(samples, "grpo")},
    }
    _write_text(out_dir / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    _write_text(out_dir / "tokenizer.json", json.dumps(tokenizer_json(), indent=1) + "\n")
    log(
        f"{elapsed()} held-out accuracy: base {manifest['accuracy']['base']:.3f}, "
        f"grpo {manifest['accuracy']['grpo']:.3f}"
    )
    return manifest


def _check(config: RunConfig) -> None:
    rows_per_minibatch, rest = divmod(
        config.prompts_per_step * config.group_size, config.minibatches
    )
    if rest or rows_per_minibatch % config.group_size:
        raise ValueError("each mini-batch must hold whole groups")
    if PROMPT_LEN + config.max_new_tokens > config.model.max_len:
        raise ValueError("prompt + max_new_tokens exceeds the model's max_len")
    longest_demonstration = max(len(encode(solution(p))) for p in all_problems())
    if PROMPT_LEN + longest_demonstration > config.model.max_len:
        raise ValueError("the longest demonstration exceeds the model's max_len")
    if config.grpo_steps < config.record_every:
        raise ValueError("no GRPO step would be recorded")
    if config.per_step_every < 0:
        raise ValueError("per_step_every must be >= 0 (0: no per-step run)")


def _save(obj: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(obj, path)


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="where to write verl/, verl_steps/, trl/, prime_rl/, samples.jsonl and manifest.json",
    )
    args = parser.parse_args(argv)
    generate(RunConfig(), args.out_dir)


if __name__ == "__main__":
    main()
