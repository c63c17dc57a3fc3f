"""The ``sampling`` section: did the engine sample from the distribution the ratio
assumes? (docs/sampling.md; formulas in :mod:`ratioscope.functional.sampling`).

Two checks, each where its inputs are:

* **temperature** (the engine's log-probs beside the trainer's): the line of the
  trainer/engine log-ratio on the trainer's log-prob; a slope far from 0 is a
  temperature applied on one side only.
* **truncation** (logits, token ids and the stated ``--temperature/--top-p/--top-k``):
  each sampled token's log-prob under the tempered, truncated distribution, the mass the
  truncation removed, the share of sampled tokens outside the kept set, and how far the
  full-softmax log-prob (what the ratio uses) is from it; with the engine's log-probs,
  which of the two they match.

A dump with neither gets no section and no warning.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass

import torch
from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.functional.moments import PairSums
from ratioscope.functional.sampling import (
    CHUNK_ELEMENTS,
    SamplingSettings,
    sampling_log_probs,
    slope_sums,
    temperature_fit,
)
from ratioscope.sections.base import Accumulator, listed
from ratioscope.sections.context import Context
from ratioscope.sections.state import mergeable

#: the truncation sums, in this order (float64; counts exact below 2**53)
_TRUNCATION = (
    "tokens",
    "outside",
    "removed",
    "inside",
    "shift",
    "abs_shift",
    "engine_tokens",
    "engine_vs_sampling",
    "engine_vs_full",
)


@dataclass(frozen=True)
class TemperatureCheck:
    """The line of the trainer/engine log-ratio on the trainer's log-prob.

    Attributes:
        pair: the log-ratio fitted, "old/engine" or "current/engine".
        tokens: tokens fitted.
        slope: about 1 - 1/T for an engine at temperature T (trainer at 1).
        correlation: Pearson's r of the log-ratio and the log-prob.
        implied_temperature: 1 / (1 - slope).
    """

    pair: str
    tokens: int
    slope: float
    correlation: float
    implied_temperature: float


@dataclass(frozen=True)
class TruncationCheck:
    """The stated sampling settings applied to the trainer's logits.

    Attributes:
        temperature, top_p, top_k: the settings (None: not applied).
        tokens: valid tokens with logits and a token id.
        outside: share of them outside the kept set (impossible under the settings).
        mass_removed: token mean of the tempered mass the truncation removed.
        log_shift, abs_log_shift: token means, over the tokens inside, of
            log q(y) - log softmax(l)_y and of its absolute value: what a ratio whose
            behaviour side is the full softmax at T = 1 is off by.
        engine_vs_sampling, engine_vs_full: with the engine's log-probs, token means
            (inside) of |engine - log q| and |engine - log softmax(l)|: which one the
            engine reported (None without them).
    """

    temperature: float | None
    top_p: float | None
    top_k: int | None
    tokens: int
    outside: float
    mass_removed: float
    log_shift: float
    abs_log_shift: float
    engine_vs_sampling: float | None
    engine_vs_full: float | None


@dataclass(frozen=True)
class SamplingSection:
    """The two checks, each None where its inputs are missing."""

    temperature: TemperatureCheck | None
    truncation: TruncationCheck | None


def _engine_pair(batch: TokenBatch) -> tuple[str, Tensor, Tensor] | None:
    """(pair, trainer log-probs, engine log-probs): the old policy's where the dump has
    it (the behaviour side the trainer recomputed), else the current one's."""
    engine = batch.rollout_log_probs
    if engine is None:
        return None
    if batch.old_log_probs is not None:
        return "old/engine", batch.old_log_probs, engine
    if batch.log_probs is not None:
        return "current/engine", batch.log_probs, engine
    return None


class SamplingAccumulator(Accumulator):
    """Sums of both checks over every chunk, file and shard."""

    name = "sampling"

    slope = mergeable(lambda: torch.zeros(6, dtype=torch.float64), "sum")
    truncation = mergeable(lambda: torch.zeros(len(_TRUNCATION), dtype=torch.float64), "sum")
    pairs: dict[str, int] = mergeable(dict, "sum")
    #: files the stated settings could not be applied to (no logits or token ids)
    no_logits: list[str] = mergeable(list, "extend", optional=True)

    @property
    def settings(self) -> SamplingSettings:
        p = self.params
        return SamplingSettings(p.temperature, p.top_p, p.top_k)

    def missing(self, batch: TokenBatch) -> list[str]:
        if _engine_pair(batch) is not None or self._truncates(batch):
            return []
        return ["rollout_log_probs"]

    def begin_file(self, batch: TokenBatch) -> bool:
        if self.settings.stated and not self._truncates(batch):
            self.no_logits.append(batch.source)
        return super().begin_file(batch)

    def _truncates(self, batch: TokenBatch) -> bool:
        return self.settings.stated and batch.logits is not None and batch.token_ids is not None

    def update(self, ctx: Context) -> dict[str, Tensor]:
        batch, mask = ctx.batch, ctx.mask
        pair = _engine_pair(batch)
        if pair is not None:
            name, trainer, engine = pair
            sums = slope_sums(trainer.double() - engine.double(), trainer, mask)
            self.slope += torch.tensor(astuple(sums), dtype=torch.float64)
            self.pairs[name] = self.pairs.get(name, 0) + 1
        if self._truncates(batch):
            assert batch.logits is not None and batch.token_ids is not None
            self.truncation += self._truncation_sums(batch, mask)
        return {}

    def _truncation_sums(self, batch: TokenBatch, mask: Tensor) -> Tensor:
        """The truncation sums of a chunk, its logits gathered a block of rows at a time
        (a memory-mapped [B, T, V] is never copied whole)."""
        logits, tokens = batch.logits, batch.token_ids
        assert logits is not None and tokens is not None
        width, vocab = logits.shape[1], logits.shape[2]
        rows = max(1, CHUNK_ELEMENTS // max(1, width * vocab))
        # the logits stay where the file put them (the CPU, often a mapped file) while
        # the mask and tokens are on the analysis' device: each block of rows goes there
        parts = [
            sampling_log_probs(
                logits[start : start + rows].to(mask.device)[mask[start : start + rows]],
                tokens[start : start + rows][mask[start : start + rows]],
                self.settings,
            )
            for start in range(0, logits.shape[0], rows)
        ]
        log_q, full, kept = (torch.cat(values) for values in zip(*parts, strict=True))
        inside = torch.isfinite(log_q)
        shift = (log_q - full)[inside]
        values = [
            float(log_q.numel()),
            float((~inside).sum()),
            float((1.0 - kept).sum()),
            float(inside.sum()),
            float(shift.sum()),
            float(shift.abs().sum()),
            0.0,
            0.0,
            0.0,
        ]
        if batch.rollout_log_probs is not None:
            engine = batch.rollout_log_probs[mask].double()[inside]
            values[6] = float(inside.sum())
            values[7] = float((engine - log_q[inside]).abs().sum())
            values[8] = float((engine - full[inside]).abs().sum())
        return torch.tensor(values, dtype=torch.float64)

    def result(self) -> SamplingSection | None:
        temperature = None
        if self.slope[0] > 0:
            # the state holds PairSums' fields in order (n, then the float sums)
            fit = temperature_fit(PairSums(int(self.slope[0]), *self.slope[1:].tolist()))
            pair = "old/engine" if "old/engine" in self.pairs else "current/engine"
            if len(self.pairs) > 1:
                pair = "mixed"
            temperature = TemperatureCheck(
                pair, fit.tokens, fit.slope, fit.correlation, fit.implied_temperature
            )
        truncation = None
        t = dict(zip(_TRUNCATION, self.truncation.tolist(), strict=True))
        if t["tokens"] > 0:
            inside, engine = t["inside"], t["engine_tokens"]
            s = self.settings
            truncation = TruncationCheck(
                temperature=s.temperature,
                top_p=s.top_p,
                top_k=s.top_k,
                tokens=int(t["tokens"]),
                outside=t["outside"] / t["tokens"],
                mass_removed=t["removed"] / t["tokens"],
                log_shift=t["shift"] / inside if inside else math.nan,
                abs_log_shift=t["abs_shift"] / inside if inside else math.nan,
                engine_vs_sampling=t["engine_vs_sampling"] / engine if engine else None,
                engine_vs_full=t["engine_vs_full"] / engine if engine else None,
            )
        if temperature is None and truncation is None:
            return None
        return SamplingSection(temperature, truncation)

    def warnings(self) -> list[str]:
        # a file without the engine's log-probs has nothing to check: no line (the
        # verdict's notes name the missing train/inference row); stated settings that
        # found no logits are worth one
        if not self.no_logits:
            return []
        return [
            "sampling.truncation: --temperature/--top-p/--top-k need 'logits' and "
            f"'token_ids', missing in {listed(self.no_logits)}"
        ]
