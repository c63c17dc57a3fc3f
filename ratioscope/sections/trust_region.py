"""The ``trust_region`` section: QUATRO's per-query duals and advantages
(docs/metrics-objectives.md).

For every group (prompt) of a file, :func:`~ratioscope.functional.quatro.quatro_delta_sweep`
solves lambda* and mu* for ``delta`` and every radius of ``deltas`` at once
(all groups vectorised, float64, log-sum-exp); degenerate groups (no interior optimum:
all rewards equal, or ``delta >= log(N/m)``) are counted and get advantage 0. Beside it
the GRPO advantage ``(R - mean R) / (std R + 1e-6)`` (population std). Groups are the
rollouts of one prompt within one file, so the section is fed whole files.

Kept across files: exact counts and sums (means, the table by number of correct
rollouts) and fixed histograms for the quantiles of lambda*, mu* and the advantages
(about 1.16 % relative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ratioscope.data.params import AnalysisParams
from ratioscope.functional.objectives import zero_variance_groups
from ratioscope.functional.quatro import grpo_advantages, quatro_delta_sweep
from ratioscope.sections.base import Accumulator, required
from ratioscope.sections.context import Context
from ratioscope.sections.distribution import Distribution, distribution_of
from ratioscope.sections.state import Codec, Record, StateError, check_number, mergeable
from ratioscope.sections.summaries import Counter, Histogram

#: GRPO advantage conventions used beside QUATRO (ratioscope's population std)
GRPO_EPS = 1e-6
GRPO_STD_DDOF = 0
#: per (group size, #correct) cell: groups, degenerate, sum lambda*, non-degenerate groups,
#: then the sums over groups of the mean QUATRO/GRPO advantage of correct/incorrect rollouts
_CELL_FIELDS = (
    "groups",
    "degenerate",
    "lam_sum",
    "lam_groups",
    "quatro_correct",
    "quatro_incorrect",
    "grpo_correct",
    "grpo_incorrect",
)


@dataclass(frozen=True)
class CorrectCell:
    """Groups of one size N with c correct rollouts (two-valued rewards): mean advantages.

    Means over groups; ``*_correct`` is None when c = 0, ``*_incorrect`` when c = N;
    ``lam_mean`` is over the non-degenerate groups (NaN when all are degenerate).
    """

    group_size: int
    correct: int
    groups: int
    degenerate: int
    lam_mean: float
    quatro_correct: float | None
    quatro_incorrect: float | None
    grpo_correct: float | None
    grpo_incorrect: float | None


@dataclass(frozen=True)
class DeltaRow:
    """One radius of the sweep; advantage means are over rollouts of non-degenerate groups."""

    delta: float
    groups: int
    degenerate: int
    lam_mean: float
    lam_median: float
    mu_mean: float
    abs_advantage_mean: float
    advantage_correct_mean: float
    advantage_incorrect_mean: float


@dataclass(frozen=True)
class TrustRegionSection:
    """The ``trust_region`` report section (keys in docs/metrics-objectives.md)."""

    delta: float
    groups: int
    rollouts: int
    group_sizes: dict[str, int]
    degenerate: int
    degenerate_all_equal: int
    lam: Distribution
    mu: Distribution
    advantage: dict[str, Distribution]
    by_correct: list[CorrectCell]
    non_binary_groups: int
    sweep: list[DeltaRow]
    grpo: dict[str, float]
    #: degenerate / groups: the share the verdict judges (``check`` rules address it);
    #: None in reports written before it was kept
    degenerate_share: float | None = None


class _DeltaState(Record):
    """Sums for one radius."""

    groups = mergeable(int, "sum")
    degenerate = mergeable(int, "sum")
    lam = mergeable(Histogram, "merge")
    mu = mergeable(Histogram, "merge")
    #: |A| sum, rollouts, correct A sum, correct rollouts, incorrect A sum, incorrect rollouts
    sums = mergeable(lambda: torch.zeros(6, dtype=torch.float64), "sum")

    def row(self, delta: float) -> DeltaRow:
        abs_sum, rollouts, correct_sum, correct_n, incorrect_sum, incorrect_n = self.sums.tolist()
        moments = self.lam.moments
        return DeltaRow(
            delta=delta,
            groups=self.groups,
            degenerate=self.degenerate,
            lam_mean=moments.mean if moments.count else math.nan,
            lam_median=self.lam.quantile(0.5),
            mu_mean=self.mu.moments.mean if self.mu.moments.count else math.nan,
            abs_advantage_mean=abs_sum / rollouts if rollouts else math.nan,
            advantage_correct_mean=correct_sum / correct_n if correct_n else math.nan,
            advantage_incorrect_mean=incorrect_sum / incorrect_n if incorrect_n else math.nan,
        )


def _read_cells(block: Any) -> dict[str, list[float]]:
    """The cells of a state block: keys ``size,correct`` (0 <= correct <= size), each
    with one number a field of :data:`_CELL_FIELDS` (a damaged shard is named here, not
    by the merge that would trip over it with the other shard's name)."""
    if not isinstance(block, dict):
        raise StateError([], f"is {type(block).__name__}, not an object")
    cells = {}
    for key, values in block.items():
        parts = str(key).split(",")
        if len(parts) != 2 or not all(p.isdigit() for p in parts) or int(parts[1]) > int(parts[0]):
            raise StateError([key], "is not a cell 'size,correct' (0 <= correct <= size)")
        if not isinstance(values, list) or len(values) != len(_CELL_FIELDS):
            raise StateError([key], f"holds no list of {len(_CELL_FIELDS)} numbers")
        cells[key] = [check_number(v) for v in values]
    return cells


class TrustRegionAccumulator(Accumulator):
    """QUATRO duals and advantages, GRPO beside them, one file at a time."""

    name = "trust_region"
    per_file = True
    joins_groups = True
    requires = ("rewards", "group")

    #: params.delta first, then the sweep's other radii, each solved once
    deltas: tuple[float, ...] = mergeable(tuple, "same")
    per_delta: list[_DeltaState] = mergeable(list, "merge")  # in the order of ``deltas``
    rollouts = mergeable(int, "sum")
    group_sizes = mergeable(Counter, "merge")
    all_equal = mergeable(int, "sum")
    non_binary = mergeable(int, "sum")
    quatro = mergeable(Histogram, "merge")
    grpo = mergeable(Histogram, "merge")
    #: "size,correct" -> the sums of _CELL_FIELDS over the groups of that cell
    cells: dict[str, list[float]] = mergeable(dict, "sum", codec=Codec(load=_read_cells))
    #: groups joined across the files of a step, completed from the next step, and
    #: left out incomplete (size -> groups) (ratioscope.sections.group_join)
    groups_joined = mergeable(int, "sum", optional=True)
    groups_completed = mergeable(int, "sum", optional=True)
    groups_incomplete: dict[str, int] = mergeable(dict, "sum", optional=True)

    def __init__(self, params: AnalysisParams) -> None:
        super().__init__(params)
        self.deltas = tuple(dict.fromkeys([float(params.delta), *map(float, params.deltas)]))
        self.per_delta = [_DeltaState() for _ in self.deltas]

    def update(self, ctx: Context) -> dict[str, Tensor]:
        batch = ctx.batch
        rewards = required(batch, "rewards").to(torch.float64)
        keep = torch.isfinite(rewards)
        _, group = torch.unique(required(batch, "group")[keep], return_inverse=True)
        # every batch with rewards has correct (rewards > 0 unless dumped)
        correct = required(batch, "correct")[keep].to(rewards.device)
        rewards = rewards[keep]
        quatro_column = torch.full(keep.shape, math.nan, dtype=torch.float64, device=keep.device)
        grpo_column = quatro_column.clone()
        if rewards.numel() == 0:
            return {"quatro_advantage": quatro_column, "grpo_advantage": grpo_column}
        n_groups = int(group.max()) + 1
        sweep = quatro_delta_sweep(rewards, group, self.deltas)
        grpo = grpo_advantages(rewards, group, GRPO_EPS, GRPO_STD_DDOF)
        for index, state in enumerate(self.per_delta):
            lam, mu, adv, degenerate = sweep.single(index)
            _add_delta(state, lam, mu, adv, degenerate, group, correct)
        lam, _, adv, degenerate = sweep.single(0)
        self.rollouts += int(rewards.numel())
        self.quatro.add(adv)
        self.grpo.add(grpo)
        sizes = torch.bincount(group, minlength=n_groups)
        self.group_sizes.add_tensor(sizes)
        self.all_equal += zero_variance_groups(rewards, group)[0]
        self._add_cells(lam, adv, grpo, degenerate, group, correct, rewards, sizes)
        quatro_column[keep], grpo_column[keep] = adv, grpo
        return {"quatro_advantage": quatro_column, "grpo_advantage": grpo_column}

    def _add_cells(
        self,
        lam: Tensor,
        adv: Tensor,
        grpo: Tensor,
        degenerate: Tensor,
        group: Tensor,
        correct: Tensor,
        rewards: Tensor,
        sizes: Tensor,
    ) -> None:
        """The table by (group size, #correct) over groups whose rewards are two-valued:
        one reward for every correct rollout and one for every incorrect one."""
        n_groups = sizes.numel()
        n_correct = _group_sum(correct.double(), group, n_groups)
        n_incorrect = sizes.double() - n_correct
        binary = torch.ones(n_groups, dtype=torch.bool, device=sizes.device)
        for select in (correct, ~correct):
            values = torch.where(select, rewards, math.nan)
            low = _group_reduce(values, group, n_groups, "amin", ignore_nan=True)
            high = _group_reduce(values, group, n_groups, "amax", ignore_nan=True)
            binary &= (low == high) | torch.isnan(low)
        self.non_binary += int((~binary).sum())

        def group_mean(values: Tensor, select: Tensor, count: Tensor) -> Tensor:
            return _group_sum(torch.where(select, values, 0.0), group, n_groups) / count.clamp_min(
                1
            )

        columns = {
            "groups": torch.ones(n_groups, dtype=torch.float64, device=sizes.device),
            "degenerate": degenerate.double(),
            "lam_sum": torch.where(degenerate, 0.0, lam),
            "lam_groups": (~degenerate).double(),
            "quatro_correct": group_mean(adv, correct, n_correct),
            "quatro_incorrect": group_mean(adv, ~correct, n_incorrect),
            "grpo_correct": group_mean(grpo, correct, n_correct),
            "grpo_incorrect": group_mean(grpo, ~correct, n_incorrect),
        }
        keys = sizes * (int(sizes.max()) + 1) + n_correct.long()
        for key in torch.unique(keys[binary]).tolist():
            select = binary & (keys == key)
            size, count = int(sizes[select][0]), int(n_correct[select][0])
            sums = [float(columns[name][select].sum()) for name in _CELL_FIELDS]
            cell = self.cells.setdefault(f"{size},{count}", [0.0] * len(_CELL_FIELDS))
            for index, value in enumerate(sums):
                cell[index] += value

    def result(self) -> TrustRegionSection | None:
        return self._section(brief=False)

    def brief_result(self) -> TrustRegionSection | None:
        """The section without the advantage distributions, the cells by correctness and
        the sweep over radii (empty), which no finding reads."""
        return self._section(brief=True)

    def _section(self, brief: bool) -> TrustRegionSection | None:
        main = self.per_delta[0]
        if main.groups == 0:
            return None
        quantiles = self.params.quantiles
        return TrustRegionSection(
            delta=self.deltas[0],
            groups=main.groups,
            rollouts=self.rollouts,
            group_sizes={str(k): v for k, v in sorted(self.group_sizes.counts.items())},
            degenerate=main.degenerate,
            degenerate_all_equal=self.all_equal,
            lam=distribution_of(main.lam, quantiles),
            mu=distribution_of(main.mu, quantiles),
            advantage={}
            if brief
            else {
                "quatro": distribution_of(self.quatro, quantiles),
                "grpo": distribution_of(self.grpo, quantiles),
            },
            by_correct=[]
            if brief
            else [_cell(key, values) for key, values in sorted(self.cells.items(), key=_order)],
            non_binary_groups=self.non_binary,
            sweep=[]
            if brief
            else [
                self.per_delta[self.deltas.index(float(d))].row(float(d))
                for d in self.params.deltas
            ],
            grpo={"eps": GRPO_EPS, "std_ddof": GRPO_STD_DDOF},
            degenerate_share=main.degenerate / main.groups,
        )

    def record_join(self, counts: Any) -> None:
        self.groups_joined += counts.joined
        self.groups_completed += counts.completed
        for size, n in counts.incomplete_sizes.items():
            self.groups_incomplete[str(size)] = self.groups_incomplete.get(str(size), 0) + n

    def warnings(self) -> list[str]:
        from ratioscope.sections.group_join import join_notes

        incomplete = sum(self.groups_incomplete.values())
        notes = join_notes(
            self.name, self.groups_joined, self.groups_completed, incomplete,
            self.groups_incomplete,
        )  # fmt: skip
        return self._input_warnings() + notes

    def _input_warnings(self) -> list[str]:
        if not self.skipped:
            return []
        where = self._where()
        if self.fed == 0:
            return [
                "trust_region: not computed; QUATRO needs 'rewards' and 'group' "
                f"(prompt ids), missing in {where}"
            ]
        return [f"trust_region: computed without {where}, which lack 'rewards' or 'group'"]


def _order(item: tuple[str, list[float]]) -> tuple[int, int]:
    size, correct = item[0].split(",")
    return int(size), int(correct)


def _cell(key: str, values: list[float]) -> CorrectCell:
    size, correct = (int(v) for v in key.split(","))
    sums = dict(zip(_CELL_FIELDS, values, strict=True))
    groups = sums["groups"]
    has_correct, has_incorrect = correct > 0, correct < size

    def mean(name: str, exists: bool) -> float | None:
        return sums[name] / groups if exists else None

    return CorrectCell(
        group_size=size,
        correct=correct,
        groups=int(groups),
        degenerate=int(sums["degenerate"]),
        lam_mean=sums["lam_sum"] / sums["lam_groups"] if sums["lam_groups"] else math.nan,
        quatro_correct=mean("quatro_correct", has_correct),
        quatro_incorrect=mean("quatro_incorrect", has_incorrect),
        grpo_correct=mean("grpo_correct", has_correct),
        grpo_incorrect=mean("grpo_incorrect", has_incorrect),
    )


def _add_delta(
    state: _DeltaState,
    lam: Tensor,
    mu: Tensor,
    adv: Tensor,
    degenerate: Tensor,
    group: Tensor,
    correct: Tensor,
) -> None:
    state.groups += int(degenerate.numel())
    state.degenerate += int(degenerate.sum())
    state.lam.add(lam[~degenerate])
    state.mu.add(mu[~degenerate])
    live = ~degenerate[group]
    live_correct, live_incorrect = live & correct, live & ~correct
    state.sums += torch.tensor(
        [
            float(adv[live].abs().sum()),
            int(live.sum()),
            float(adv[live_correct].sum()),
            int(live_correct.sum()),
            float(adv[live_incorrect].sum()),
            int(live_incorrect.sum()),
        ],
        dtype=torch.float64,
    )


def _group_sum(values: Tensor, group: Tensor, n_groups: int) -> Tensor:
    return torch.zeros(n_groups, dtype=torch.float64, device=values.device).index_add_(
        0, group, values.double()
    )


def _group_reduce(
    values: Tensor, group: Tensor, n_groups: int, how: str, ignore_nan: bool = False
) -> Tensor:
    """Per-group min or max (NaN for a group without a value when ``ignore_nan``)."""
    values = values.double()
    present = ~torch.isnan(values) if ignore_nan else torch.ones_like(values, dtype=torch.bool)
    fill = math.inf if how == "amin" else -math.inf
    out = torch.full((n_groups,), fill, dtype=torch.float64, device=values.device)
    out = out.scatter_reduce(0, group[present], values[present], how, include_self=True)
    return torch.where(torch.isinf(out) & (out == fill), math.nan, out)
