"""Whole groups across the files of a step: slime's rank files, and the join's rules.

slime (THUDM/slime 624b824a898a, slime/utils/dp_schedule.py ``build_dp_schedule``, called
by ``RolloutManager._split_train_data_by_dp`` in slime/ray/rollout.py) packs a step's
samples into micro-batches and gives data-parallel rank r the micro-batches r, r + dp,
... (strided), or a length-balanced set of them (``--balance-data``). A prompt's samples
then sit on several ranks, and slime v1 writes one train file per rank. Here a rollout of
4 prompts x 4 samples is written by 2 ranks both ways; the report must see 4 groups of 4.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import ratioscope
from ratioscope.functional.quatro import quatro_duals
from ratioscope.sections.group_join import FileSequences, StepGroupJoin, join_notes
from tests.framework_files import slime_v1_rank, write_rollout_dump

PROMPTS, SAMPLES, ROLLOUT = 4, 4, 7
REWARDS = [1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 1]  # group 1: all equal
INDICES = list(range(100, 116))
GROUPS = [i // SAMPLES for i in range(PROMPTS * SAMPLES)]
#: micro-batches of 2 samples, in rollout order: mb k holds positions 2k, 2k + 1
MICRO_BATCHES = [[2 * k, 2 * k + 1] for k in range(8)]
PARTITIONS = {
    # rank r: micro-batches r, r + 2, ... (dp_schedule.py, balance_data off)
    "strided": [[p for k in range(r, 8, 2) for p in MICRO_BATCHES[k]] for r in range(2)],
    # a balanced assignment (get_seqlen_balanced_partitions, equal_size=True)
    "balanced": [
        [p for k in (0, 3, 5, 6) for p in MICRO_BATCHES[k]],
        [p for k in (1, 2, 4, 7) for p in MICRO_BATCHES[k]],
    ],
    "one rank": [list(range(16))],
}


def write_v1(root, partition) -> None:
    rng = np.random.default_rng(0)
    write_rollout_dump(root / "rollout_data", ROLLOUT, GROUPS, REWARDS, INDICES)
    (root / "train_data").mkdir(parents=True)
    for rank, positions in enumerate(partition):
        lengths = rng.integers(3, 8, size=len(positions)).tolist()
        obj, _, _ = slime_v1_rank(
            rng, [INDICES[p] for p in positions], lengths=lengths, rollout_id=ROLLOUT, rank=rank
        )
        obj["rollout_data"]["raw_reward"] = [float(r) for r in REWARDS]
        torch.save(obj, root / "train_data" / f"{ROLLOUT}_{rank}.pt")


def write_v2(root, partition) -> None:
    """One file gathered from both data-parallel ranks (train_data_utils.py
    ``save_debug_train_data``: the DP source rank writes every shard)."""
    rng = np.random.default_rng(1)
    write_rollout_dump(root / "rollout_data", ROLLOUT, GROUPS, REWARDS, INDICES)
    samples = []
    for rank, positions in enumerate(partition):
        for p in positions:
            n = int(rng.integers(3, 8))
            old = torch.tensor(-rng.gamma(1.0, 0.7, size=n), dtype=torch.float32)
            samples.append(
                {
                    "data_parallel_rank": rank, "sample_index": INDICES[p],
                    "rollout_position": p, "tokens": torch.tensor(rng.integers(3, 60, n + 2)),
                    "response_lengths": n, "total_lengths": n + 2,
                    "loss_masks": torch.ones(n, dtype=torch.int32),
                    "rollout_mask_sums": torch.tensor(float(n)), "rewards": 0.0,
                    "local_raw_reward": float(REWARDS[p]), "truncated": 0,
                    "rollout_ids": INDICES[p], "log_probs": old,
                    "rollout_log_probs": old + 0.01, "advantages": torch.zeros(n),
                }
            )  # fmt: skip
    shards = [
        {"rank": r, "data_parallel_rank": r, "sample_indices": [INDICES[p] for p in part],
         "partition": part}
        for r, part in enumerate(partition)
    ]  # fmt: skip
    payload = {
        "format_version": 2, "rollout_id": ROLLOUT, "rank": 0, "samples": samples,
        "dp_shards": shards, "raw_reward": [float(r) for r in REWARDS],
    }  # fmt: skip
    (root / "train_data").mkdir(parents=True)
    torch.save(payload, root / "train_data" / f"{ROLLOUT}_0.pt")


def whole_group_reference(delta: float):
    """QUATRO on the rollout's whole groups, straight from the rollout's order."""
    rewards = torch.tensor(REWARDS, dtype=torch.float64)
    return quatro_duals(rewards, torch.tensor(GROUPS), delta)


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("layout", ["strided", "balanced"])
def test_slime_ranks_give_whole_groups(tmp_path, version, layout):
    (write_v1 if version == "v1" else write_v2)(tmp_path, PARTITIONS[layout])
    report = ratioscope.analyze(tmp_path / "train_data", per_sequence=True)
    section = report.trust_region
    assert section.groups == PROMPTS
    assert section.group_sizes == {str(SAMPLES): PROMPTS}
    assert section.degenerate_all_equal == 1  # group 1 only
    lam, _, adv, degenerate = whole_group_reference(section.delta)
    live = ~degenerate
    row = next(r for r in section.sweep if r.delta == section.delta)
    assert row.lam_mean == pytest.approx(float(lam[live].mean()), rel=1e-9)
    # per sequence: each row's QUATRO advantage is that of its whole group
    frame = report.sequences.frame()
    by_file = {f"{ROLLOUT}_{rank}.pt": part for rank, part in enumerate(PARTITIONS[layout])}
    gathered = [p for part in PARTITIONS[layout] for p in part]  # v2: shards in rank order
    for file, row, value in zip(
        frame["file"].to_list(),
        frame["row"].to_list(),
        frame["quatro_advantage"].to_list(),
        strict=True,
    ):
        p = by_file[file.rsplit("/", 1)[-1]][row] if version == "v1" else gathered[row]
        assert value == pytest.approx(float(adv[p]), abs=1e-9)


def test_one_rank_and_two_ranks_give_the_same_section(tmp_path):
    write_v1(tmp_path / "one", PARTITIONS["one rank"])
    write_v1(tmp_path / "two", PARTITIONS["strided"])
    one = ratioscope.analyze(tmp_path / "one" / "train_data").to_dict()["trust_region"]
    two = ratioscope.analyze(tmp_path / "two" / "train_data").to_dict()["trust_region"]
    assert two["groups"] == one["groups"] == PROMPTS
    for a, b in zip(two["sweep"], one["sweep"], strict=True):
        assert a == pytest.approx(b)
    assert two["grpo"] == pytest.approx(one["grpo"])
    assert two["group_sizes"] == one["group_sizes"] == {str(SAMPLES): PROMPTS}


def equal_groups_by_loop(members):
    """(groups, equal-reward groups) of the rollout positions grouped by ``members``:
    a list of position lists, one per group (plain Python, independent of the code)."""
    return len(members), sum(len({REWARDS[p] for p in m}) == 1 for m in members)


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("layout", ["strided", "balanced"])
def test_vitals_count_equal_reward_groups_on_the_joined_groups(tmp_path, version, layout):
    (write_v1 if version == "v1" else write_v2)(tmp_path, PARTITIONS[layout])
    section = ratioscope.analyze(tmp_path / "train_data").vitals.equal_reward_groups
    whole = [[p for p in range(16) if GROUPS[p] == g] for g in range(PROMPTS)]
    groups, equal = equal_groups_by_loop(whole)
    assert (section.groups, section.equal) == (groups, equal) == (4, 1)
    assert section.share == pytest.approx(equal / groups)
    # counted per rank file instead, the split groups would give other numbers
    per_file = [
        [[p for p in part if GROUPS[p] == g] for g in sorted({GROUPS[p] for p in part})]
        for part in PARTITIONS[layout]
    ]
    split = [equal_groups_by_loop(members) for members in per_file]
    assert (sum(g for g, _ in split), sum(e for _, e in split)) != (groups, equal)


def mean_abs_by_loop(members, eps):
    """Mean |A| over the rollout's rows of Dr. GRPO (eps None: R - mean) or GRPO
    ((R - mean) / (std + eps), population std) on the groups ``members``."""
    values = []
    for m in members:
        r = np.array([REWARDS[p] for p in m], dtype=float)
        a = r - r.mean()
        values += list(np.abs(a if eps is None else a / (r.std() + eps)))
    return float(np.mean(values))


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("layout", ["strided", "balanced"])
def test_objectives_advantage_schemes_on_the_joined_groups(tmp_path, version, layout):
    (write_v1 if version == "v1" else write_v2)(tmp_path, PARTITIONS[layout])
    result = ratioscope.objectives(tmp_path / "train_data", methods=["grpo"])
    advantages = result.advantages
    whole = [[p for p in range(16) if GROUPS[p] == g] for g in range(PROMPTS)]
    assert (advantages.groups, advantages.zero_variance_groups) == equal_groups_by_loop(whole)
    assert advantages.sequences == PROMPTS * SAMPLES
    schemes = advantages.schemes
    assert schemes["dr_grpo"].mean_abs == pytest.approx(mean_abs_by_loop(whole, None))
    assert schemes["grpo"].mean_abs == pytest.approx(mean_abs_by_loop(whole, 1e-6))
    zero = sum(1 for m in whole if len({REWARDS[p] for p in m}) == 1) * SAMPLES
    assert schemes["grpo"].zero_share == pytest.approx(zero / 16)
    # on the groups cut by the rank files the numbers would differ
    per_file = [
        [[p for p in part if GROUPS[p] == g] for g in sorted({GROUPS[p] for p in part})]
        for part in PARTITIONS[layout]
    ]
    split = [m for members in per_file for m in members]
    assert mean_abs_by_loop(split, None) != pytest.approx(mean_abs_by_loop(whole, None))
    if version == "v1":
        assert any("joined by group id for" in w and "advantage schemes" in w
                   for w in result.warnings)  # fmt: skip


def rows(index, labels, rewards, step_files=None):
    ids = {label: i for i, label in enumerate(dict.fromkeys(labels))}
    return FileSequences(
        index=index,
        source=f"f{index}",
        rewards=torch.tensor(rewards, dtype=torch.float64),
        correct=None,
        group=torch.tensor([ids[x] for x in labels]),
        labels=list(ids),
    )


def test_an_incomplete_group_waits_for_the_next_step_then_is_left_out_and_counted():
    join = StepGroupJoin(group_size=4)
    # step 0: group "a" whole, "b" has 3 of 4, "c" 2 of 4
    assert join.add(0, rows(0, ["a", "a", "b", "c"], [1, 0, 1, 0])) == []
    assert join.add(0, rows(1, ["a", "a", "b", "b", "c"], [1, 1, 0, 0, 1])) == []
    # step 1: the last sample of "b"; "c" is not there
    closed = join.add(1, rows(2, ["b", "d", "d", "d", "d"], [1, 0, 0, 1, 1]))
    assert len(closed) == 1 and torch.bincount(closed[0].group).tolist() == [4]  # "a"
    closed = join.finish()
    sizes = sorted(torch.bincount(closed[0].group).tolist())
    assert sizes == [4, 4]  # "b" completed from step 1, and "d"
    assert join.counts.completed == 1
    assert join.counts.incomplete == 1 and join.counts.incomplete_sizes == {2: 1}
    notes = " ".join(join_notes("trust_region", 0, join.counts.completed, 1, {"2": 1}))
    assert "1 group(s) (2 samples)" in notes and "left out" in notes
    assert "completed from the next step" in notes


def test_without_a_group_size_joined_groups_count_as_whole():
    join = StepGroupJoin(group_size=None)
    join.add(0, rows(0, ["a", "b"], [1, 0]))
    join.add(0, rows(1, ["a"], [0]))
    closed = join.finish()
    assert sorted(torch.bincount(closed[0].group).tolist()) == [1, 2]
    assert join.counts.joined == 1 and join.counts.incomplete == 0
    assert not math.isnan(float(closed[0].rewards.sum()))


def test_a_group_short_of_the_recorded_size_is_left_out_and_counted(tmp_path):
    from ratioscope.capture import CaptureWriter
    from ratioscope.data.trainer_settings import TrainerSettings

    settings = TrainerSettings("trl", {"epsilon": 0.2, "num_generations": 4})
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])  # group 0: 4, group 1: 3
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    old = -torch.rand(7, 3, generator=torch.Generator().manual_seed(0))
    with CaptureWriter(tmp_path, trainer_settings=settings) as writer:
        for rank_rows in (slice(0, 5), slice(5, 7)):  # two parts of step 0
            writer.write(
                0, mask=torch.ones(rank_rows.stop - rank_rows.start, 3, dtype=torch.bool),
                log_probs=old[rank_rows], old_log_probs=old[rank_rows],
                rewards=rewards[rank_rows], group=group[rank_rows],
            )  # fmt: skip
    report = ratioscope.analyze(tmp_path)
    assert report.trust_region.groups == 1 and report.trust_region.rollouts == 4
    assert any("1 group(s) (3 samples)" in w and "left out" in w for w in report.warnings)
    assert any("1 group(s) had samples in more than one file" in w for w in report.warnings)
    # the same files with the group size unknown: both groups count, as they are
    report = ratioscope.analyze(tmp_path, trainer="none")
    assert report.trust_region.groups == 2


def write_short_group_capture(root, trainer_settings=True):
    """A capture of step 0 in two parts with the recorded group size 4: group 0 whole
    (4 rows), group 1 three rows only (its fourth sample never written)."""
    from ratioscope.capture import CaptureWriter
    from ratioscope.data.trainer_settings import TrainerSettings

    settings = TrainerSettings("trl", {"epsilon": 0.2, "num_generations": 4})
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])  # group 0: 4, group 1: 3
    group = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    old = -torch.rand(7, 3, generator=torch.Generator().manual_seed(0))
    new = old + 0.05 * torch.randn(7, 3, generator=torch.Generator().manual_seed(1))
    with CaptureWriter(root, trainer_settings=settings if trainer_settings else None) as writer:
        for part in (slice(0, 5), slice(5, 7)):  # two parts of step 0
            writer.write(
                0, mask=torch.ones(part.stop - part.start, 3, dtype=torch.bool),
                log_probs=new[part], old_log_probs=old[part],
                advantages=torch.ones(part.stop - part.start, 3),
                rewards=rewards[part], group=group[part],
            )  # fmt: skip
    return rewards.tolist(), group.tolist()


def test_objectives_leave_out_a_group_short_of_the_recorded_size(tmp_path):
    from ratioscope.io.loaders import LoadOptions

    rewards, group = write_short_group_capture(tmp_path)
    result = ratioscope.objectives(tmp_path, methods=["grpo"])
    advantages = result.advantages
    # group 0 only, by a plain loop: rewards 1, 0, 0, 1
    whole = [r for r, g in zip(rewards, group, strict=True) if g == 0]
    mean = sum(whole) / 4
    std = (sum((r - mean) ** 2 for r in whole) / 4) ** 0.5
    assert (advantages.groups, advantages.sequences) == (1, 4)
    assert advantages.schemes["dr_grpo"].mean_abs == pytest.approx(
        sum(abs(r - mean) for r in whole) / 4
    )
    assert advantages.schemes["grpo"].mean_abs == pytest.approx(
        sum(abs(r - mean) / (std + 1e-6) for r in whole) / 4
    )
    assert any(
        "1 group(s) (3 samples" in w and "left out of the advantage schemes" in w
        for w in result.warnings
    )
    assert result.params["trainer"]["applied"]["group_size"].startswith("trainer settings")
    # with the settings ignored the group size is unknown: the three samples count
    unknown = ratioscope.objectives(
        tmp_path, methods=["grpo"], load_options=LoadOptions(trainer="none")
    )
    assert unknown.advantages.groups == 2
