"""The ``mismatch`` section: how far the policies that produced the dump disagree.

``policy``: the current policy against the behaviour policy, which is the trainer's old
policy (z = log_probs - old_log_probs) or, in dumps without one (prime-rl), the inference
engine that sampled (z = log_probs - rollout_log_probs). ``rollout``: the trainer's old
policy against the inference engine (z = old_log_probs - rollout_log_probs), the
train/inference mismatch, present when both are dumped. A dump whose only log-probs are
old vs engine (slime, SkyRL, NeMo-RL) fills ``rollout`` alone. ``pairs`` names, per row,
the two log-probs compared (keys of :data:`ratioscope.data.batch.RATIO_PAIRS`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.functional.mismatch import (
    MismatchPartials,
    MismatchStats,
    mismatch_partials,
    mismatch_statistics,
)
from ratioscope.sections.base import Accumulator, listed
from ratioscope.sections.context import Context
from ratioscope.sections.state import Codec, check_fields, mergeable


@dataclass(frozen=True)
class MismatchSection:
    policy: MismatchStats | None
    rollout: MismatchStats | None
    pairs: dict[str, str | None]


_ADDED_LATER = {"sum_abs_z", "max_abs_z", "sum_seq_mean_abs_z", "sum_expm1_neg_seq_mean_z"}


def partials_from_state(state: dict[str, Any]) -> MismatchPartials:
    """The :class:`MismatchPartials` a state block wrote as its fields (an empty log-sum,
    -inf, as null); reports written before the framework-named sums lack those."""
    expected = {f.name for f in fields(MismatchPartials)}
    # reports written before the framework-named sums were added lack them
    required = expected - _ADDED_LATER
    if not required <= set(state) <= expected:
        raise KeyError(f"expected keys {sorted(expected)}, got {sorted(state)}")
    # JSON has no -inf: an empty log-sum was written as null; Any: JSON values are
    # untyped, and the keys were checked against the fields above
    # (a count is never written as null: it stays null, and check_fields says so)
    logs = {f.name for f in fields(MismatchPartials) if isinstance(f.default, float)}
    values: dict[str, Any] = {
        k: (-float("inf") if v is None and k in logs else v) for k, v in state.items()
    }
    return check_fields(MismatchPartials(**values))


#: the partials are written as their fields; reading accepts the older layouts
_PARTIALS = Codec(load=partials_from_state)


class MismatchAccumulator(Accumulator):
    name = "mismatch"

    policy = mergeable(MismatchPartials, "merge", codec=_PARTIALS)
    rollout = mergeable(MismatchPartials, "merge", codec=_PARTIALS)
    rollout_missing: list[str] = mergeable(list, "extend", optional=True)
    #: what the policy row compares in the files that fed it ("current/old", ...);
    #: reports written before pairs were recorded compared current and old policies
    policy_pairs: list[str] = mergeable(
        list, "union", legacy=lambda acc: ["current/old"] if acc.policy.tokens else []
    )

    def begin_file(self, batch: TokenBatch) -> bool:
        if not super().begin_file(batch):
            return False
        if batch.ratio_pair != "old/engine" and batch.ratio_pair not in self.policy_pairs:
            self.policy_pairs.append(batch.ratio_pair)
        # with current/engine the policy row already holds the engine comparison
        has_rollout = batch.has("rollout_log_probs") and batch.has("old_log_probs")
        if batch.ratio_pair == "current/old" and not has_rollout:
            self.rollout_missing.append(batch.source)
        return True

    def update(self, ctx: Context) -> dict[str, Tensor]:
        c = self.params.is_threshold
        batch = ctx.batch
        columns: dict[str, Tensor] = {}
        if batch.ratio_pair == "old/engine":
            z_rollout: Tensor | None = ctx.z
        else:
            self.policy.merge(mismatch_partials(ctx.z, ctx.mask, c))
            # the batch's token tensors are 0 behind the mask: a row's sum is its valid sum
            columns["policy_log_ratio_mean"] = ctx.z64_sums / ctx.lengths
            z_rollout = None
            if batch.rollout_log_probs is not None and batch.old_log_probs is not None:
                z_rollout = batch.old_log_probs - batch.rollout_log_probs
        if z_rollout is not None:
            self.rollout.merge(mismatch_partials(z_rollout, ctx.mask, c))
            columns["rollout_log_ratio_mean"] = z_rollout.double().sum(dim=1) / ctx.lengths
        return columns

    def result(self) -> MismatchSection | None:
        if self.policy.tokens == 0 and self.rollout.tokens == 0:
            return None
        c = self.params.is_threshold
        policy = mismatch_statistics(self.policy, c) if self.policy.tokens else None
        rollout = mismatch_statistics(self.rollout, c) if self.rollout.tokens else None
        pairs = {
            "policy": " + ".join(self.policy_pairs) if policy else None,
            "rollout": "old/engine" if rollout else None,
        }
        return MismatchSection(policy=policy, rollout=rollout, pairs=pairs)

    def warnings(self) -> list[str]:
        messages = []
        if len(self.policy_pairs) > 1:
            messages.append(
                "mismatch.policy: the files compare different log-probs ("
                + ", ".join(self.policy_pairs)
                + "); the pooled row mixes them"
            )
        if self.rollout_missing:
            messages.append(
                "mismatch.rollout: needs 'rollout_log_probs' and 'old_log_probs' (train/"
                f"inference mismatch), missing in {listed(self.rollout_missing)}"
            )
        return messages
