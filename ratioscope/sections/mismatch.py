"""The ``mismatch`` section: how far the policies that produced the dump disagree.

``policy``: the current policy against the behaviour policy (z = log_probs -
old_log_probs). ``rollout``: the behaviour policy as the trainer computes it against
the inference engine that sampled (z = old_log_probs - rollout_log_probs), the
train/inference mismatch; present only when ``rollout_log_probs`` is dumped.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from torch import Tensor

from ratioscope.functional.mismatch import (
    MismatchPartials,
    MismatchStats,
    mismatch_partials,
    mismatch_statistics,
)
from ratioscope.functional.surrogate import sequence_means
from ratioscope.params import AnalysisParams
from ratioscope.sections.base import Accumulator, listed
from ratioscope.sections.context import Context


@dataclass(frozen=True)
class MismatchSection:
    policy: MismatchStats
    rollout: MismatchStats | None


class MismatchAccumulator(Accumulator):
    name = "mismatch"

    def __init__(self, params: AnalysisParams) -> None:
        super().__init__(params)
        self.policy = MismatchPartials()
        self.rollout = MismatchPartials()
        self.rollout_missing: list[str] = []

    def update(self, ctx: Context) -> dict[str, Tensor]:
        c = self.params.is_threshold
        self.policy.merge(mismatch_partials(ctx.z, ctx.mask, c))
        columns = {"policy_log_ratio_mean": sequence_means(ctx.z.double(), ctx.mask)}
        batch = ctx.batch
        if batch.rollout_log_probs is not None and batch.old_log_probs is not None:
            z_rollout = batch.old_log_probs - batch.rollout_log_probs
            self.rollout.merge(mismatch_partials(z_rollout, ctx.mask, c))
            columns["rollout_log_ratio_mean"] = sequence_means(z_rollout.double(), ctx.mask)
        elif batch.row_offset == 0:
            self.rollout_missing.append(batch.source)
        return columns

    def merge(self, other: Accumulator) -> None:
        assert isinstance(other, MismatchAccumulator)
        self.merge_base(other)
        self.policy.merge(other.policy)
        self.rollout.merge(other.rollout)
        self.rollout_missing.extend(other.rollout_missing)

    def state(self) -> dict[str, Any]:
        return {
            **self.base_state(),
            "policy": vars(self.policy),
            "rollout": vars(self.rollout),
            "rollout_missing": self.rollout_missing,
        }

    @classmethod
    def from_state(cls, params: AnalysisParams, state: dict[str, Any]) -> MismatchAccumulator:
        acc = cls(params)
        acc.restore_base(state)
        acc.policy = _partials(state["policy"])
        acc.rollout = _partials(state["rollout"])
        acc.rollout_missing = list(state.get("rollout_missing", []))
        return acc

    def result(self) -> MismatchSection | None:
        if self.policy.tokens == 0:
            return None
        c = self.params.is_threshold
        rollout = mismatch_statistics(self.rollout, c) if self.rollout.tokens else None
        return MismatchSection(policy=mismatch_statistics(self.policy, c), rollout=rollout)

    def warnings(self) -> list[str]:
        if not self.rollout_missing:
            return []
        return [
            "mismatch.rollout: needs 'rollout_log_probs' and 'old_log_probs' (train/inference "
            f"mismatch), missing in {listed(self.rollout_missing)}"
        ]


def _partials(state: dict[str, Any]) -> MismatchPartials:
    expected = {f.name for f in fields(MismatchPartials)}
    if set(state) != expected:
        raise KeyError(f"expected keys {sorted(expected)}, got {sorted(state)}")
    # JSON has no -inf: an empty log-sum was written as null
    values = {k: (-float("inf") if v is None else v) for k, v in state.items()}
    return MismatchPartials(**values)
