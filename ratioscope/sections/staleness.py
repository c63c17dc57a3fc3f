"""The ``staleness`` section: the off-policy statistics of each mini-batch index.

Fed by dumps whose rows carry ``minibatch`` (the index of the optimizer update of its
step that used the row: the mini-batch, counted on over PPO epochs when there are
several); the formulas are :mod:`ratioscope.functional.staleness`. Most trainers write
no such key, so a run without it gets a null section and no warning; a run where only
some files have it says which lacked it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from ratioscope.data.batch import TokenBatch
from ratioscope.functional.staleness import (
    MinibatchStats,
    MinibatchSums,
    minibatch_statistics,
    minibatch_sums,
)
from ratioscope.sections.base import Accumulator, required
from ratioscope.sections.context import Context
from ratioscope.sections.mismatch import partials_from_state
from ratioscope.sections.state import Codec, dump, mergeable


@dataclass(frozen=True)
class StalenessSection:
    """Off-policy statistics by mini-batch index.

    Attributes:
        clip_band: (eps_low, eps_high) of ``clip_fraction``, the token band (``clip``).
        minibatches: mini-batch index -> its statistics, in increasing index order.
    """

    clip_band: tuple[float, float]
    minibatches: dict[int, MinibatchStats]


def _merge_indices(
    mine: dict[int, MinibatchSums], theirs: dict[int, MinibatchSums]
) -> dict[int, MinibatchSums]:
    """Index by index; an index only one side has is taken over (a copy: the other
    accumulator stays its own). Sorted, so the order never depends on the merge order."""
    merged = dict(mine)
    for index, sums in theirs.items():
        if index in merged:
            merged[index].merge(sums)
        else:
            merged[index] = copy.deepcopy(sums)
    return dict(sorted(merged.items()))


def _dump_indices(sums: dict[int, MinibatchSums]) -> dict[str, Any]:
    # JSON keys are strings; the block is read back by _load_indices
    return {str(index): dump(value) for index, value in sums.items()}


_SUMS_KEYS = {"rows", "exact_on", "clipped", "advantage_tokens", "partials"}


def _load_indices(block: dict[str, Any]) -> dict[int, MinibatchSums]:
    loaded: dict[int, MinibatchSums] = {}
    for key, value in block.items():
        if set(value) != _SUMS_KEYS:
            raise KeyError(f"expected keys {sorted(_SUMS_KEYS)}, got {sorted(value)}")
        loaded[int(key)] = MinibatchSums(
            rows=int(value["rows"]),
            exact_on=int(value["exact_on"]),
            clipped=int(value["clipped"]),
            advantage_tokens=int(value["advantage_tokens"]),
            partials=partials_from_state(value["partials"]),
        )
    return dict(sorted(loaded.items()))


class StalenessAccumulator(Accumulator):
    """Sums per mini-batch index over every chunk, file and shard."""

    name = "staleness"
    requires = ("minibatch",)

    minibatches: dict[int, MinibatchSums] = mergeable(
        dict, _merge_indices, codec=Codec(dump=_dump_indices, load=_load_indices)
    )

    def update(self, ctx: Context) -> dict[str, Tensor]:
        batch: TokenBatch = ctx.batch
        advantages = batch.advantages
        if batch.ratio_pair == "old/engine":
            # the train/inference ratio is no PPO ratio: no update clips it (as in ratios)
            advantages = None
        found = minibatch_sums(
            ctx.z, ctx.mask, required(batch, "minibatch"), advantages, self.params.clip
        )
        self.minibatches = _merge_indices(self.minibatches, found)
        return {}  # the index is the file's own column; nothing new per sequence

    def result(self) -> StalenessSection | None:
        if not self.minibatches:
            return None
        return StalenessSection(
            clip_band=self.params.clip,
            minibatches={i: minibatch_statistics(s) for i, s in self.minibatches.items()},
        )

    def warnings(self) -> list[str]:
        # no file with the key: the common case, not worth a line (docs/staleness.md)
        if self.fed == 0:
            return []
        return super().warnings()
