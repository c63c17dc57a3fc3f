"""The ``policy_lag`` section: how many versions old the sampling policy was, and what
each lag does to the importance ratios (async training; docs/staleness.md).

Fed by dumps that carry ``policy_version`` (per token or per sequence); the formulas
are :mod:`ratioscope.functional.policy_lag`. A dump without it gets no section and no
warning, as with ``staleness``'s ``minibatch``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.errors import InputError
from ratioscope.functional.policy_lag import (
    UNKNOWN,
    LagStats,
    VersionSums,
    lag_statistics,
    lag_sums,
    version_sums,
)
from ratioscope.sections.base import Accumulator, required
from ratioscope.sections.context import Context
from ratioscope.sections.mismatch import partials_from_state
from ratioscope.sections.state import Codec, dump, mergeable


@dataclass(frozen=True)
class PolicyLagSection:
    """Lag histograms and the off-policy statistics of each lag.

    Attributes:
        trainer_version: "file" when every file said which version it trains, "newest"
            when lags were counted from the newest version the tokens carry, "mixed".
        max_lag: the largest token lag (a sequence's lag is its oldest token's).
        mean_token_lag, mean_sequence_lag: token- and sequence-weighted mean lags.
        max_allowed: the maximum lag the run allows (``--max-lag``), or None.
        beyond_allowed: tokens with a lag beyond ``max_allowed`` (0 without one).
        clip_band, is_threshold: the bands of ``clip_fraction`` and ``outside``.
        lags: lag -> its statistics, in increasing lag order.
    """

    trainer_version: str
    max_lag: int
    mean_token_lag: float
    mean_sequence_lag: float
    max_allowed: int | None
    beyond_allowed: int
    clip_band: tuple[float, float]
    is_threshold: float
    lags: dict[int, LagStats]


def _merge_versions(
    mine: dict[tuple[int, int], VersionSums], theirs: dict[tuple[int, int], VersionSums]
) -> dict[tuple[int, int], VersionSums]:
    """Key by key; a key only one side has is copied, so the other stays its own."""
    merged = dict(mine)
    for key, sums in theirs.items():
        if key not in merged:
            merged[key] = VersionSums()
        merged[key].merge(sums)
    return dict(sorted(merged.items()))


def _dump_versions(sums: dict[tuple[int, int], VersionSums]) -> dict[str, Any]:
    # JSON keys are strings: "trainer:version", the trainer -1 when the file gave none
    return {f"{trainer}:{version}": dump(value) for (trainer, version), value in sums.items()}


_SUMS_KEYS = {"sequences", "clipped", "advantage_tokens", "partials", "split"}


def _load_versions(block: dict[str, Any]) -> dict[tuple[int, int], VersionSums]:
    loaded: dict[tuple[int, int], VersionSums] = {}
    for key, value in block.items():
        trainer, version = (int(part) for part in key.split(":"))
        if set(value) != _SUMS_KEYS:
            raise KeyError(f"expected keys {sorted(_SUMS_KEYS)}, got {sorted(value)}")
        loaded[(trainer, version)] = VersionSums(
            sequences=int(value["sequences"]),
            clipped=int(value["clipped"]),
            advantage_tokens=int(value["advantage_tokens"]),
            partials=partials_from_state(value["partials"]),
            split={pair: partials_from_state(p) for pair, p in value["split"].items()},
        )
    return dict(sorted(loaded.items()))


class PolicyLagAccumulator(Accumulator):
    """Sums per (trainer version, sampled version) over every chunk, file and shard."""

    name = "policy_lag"
    requires = ("policy_version",)

    versions: dict[tuple[int, int], VersionSums] = mergeable(
        dict, _merge_versions, codec=Codec(dump=_dump_versions, load=_load_versions)
    )

    def update(self, ctx: Context) -> dict[str, Tensor]:
        batch: TokenBatch = ctx.batch
        advantages = batch.advantages
        if batch.ratio_pair == "old/engine":
            # the train/inference ratio is no PPO ratio: no update clips it (as in ratios)
            advantages = None
        current, old, engine = batch.log_probs, batch.old_log_probs, batch.rollout_log_probs
        split = None
        if current is not None and old is not None and engine is not None:
            split = {"current": current, "old": old, "engine": engine}
        found = version_sums(
            ctx.z,
            ctx.mask,
            required(batch, "policy_version"),
            batch.trainer_version,
            advantages=advantages,
            clip=self.params.clip,
            is_threshold=self.params.is_threshold,
            split=split,
        )
        self.versions = _merge_versions(self.versions, found)
        return {}

    def result(self) -> PolicyLagSection | None:
        if not self.versions:
            return None
        try:
            by_lag = lag_sums(self.versions)
        except ValueError as error:  # a shard report whose versions do not fit
            raise InputError(None, f"the policy versions do not fit together: {error}") from None
        known = {trainer != UNKNOWN for trainer, _ in self.versions}
        source = "mixed" if len(known) == 2 else ("file" if known == {True} else "newest")
        lags = {lag: lag_statistics(s, self.params.is_threshold) for lag, s in by_lag.items()}
        tokens = sum(s.tokens for s in lags.values())
        sequences = sum(s.sequences for s in lags.values())
        allowed = self.params.max_lag
        return PolicyLagSection(
            trainer_version=source,
            max_lag=max((lag for lag, s in lags.items() if s.tokens), default=0),
            mean_token_lag=_mean({lag: s.tokens for lag, s in lags.items()}, tokens),
            mean_sequence_lag=_mean({lag: s.sequences for lag, s in lags.items()}, sequences),
            max_allowed=allowed,
            beyond_allowed=0
            if allowed is None
            else sum(s.tokens for lag, s in lags.items() if lag > allowed),
            clip_band=self.params.clip,
            is_threshold=self.params.is_threshold,
            lags=lags,
        )

    def warnings(self) -> list[str]:
        # no file with versions: the common case (synchronous training), not worth a line
        if self.fed == 0:
            return []
        return super().warnings()


def _mean(counts: dict[int, int], total: int) -> float:
    return sum(lag * n for lag, n in counts.items()) / total if total else math.nan
