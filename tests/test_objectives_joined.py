"""``objectives``' per-token coefficients on whole groups of a step, joined across files.

The rollout of tests/test_group_join.py (4 prompts x 4 samples) is written by 2
data-parallel ranks with slime's strided and length-balanced partitions, as capture part
files of one step (every tensor the methods read, which slime's own train dumps lack).
Every method's statistics must be those of the same rows written as one file (rank 0's
rows, then rank 1's), and Dr. GRPO's coefficient that of its formula on whole groups,
written out in numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import ratioscope
from ratioscope.data.trainer_settings import TrainerSettings
from ratioscope.io.loaders import LoadOptions
from tests.test_group_join import GROUPS, PARTITIONS, REWARDS
from tests.test_scope_join import _assert_same, _rollout, _whole_groups, _write

#: the methods whose coefficients look across a prompt's group
ACROSS = ("dr_grpo", "quatro", "cw_grpo")


def _full_rollout(seed: int = 0) -> dict[str, torch.Tensor]:
    """The rollout with the engine's and the reference policy's log-probs too, so that
    every method runs (the corrections and FPA)."""
    rollout = _rollout(seed)
    rng = np.random.default_rng(seed + 10)
    old = rollout["old_log_probs"].double().numpy()
    shape = old.shape
    rollout["rollout_log_probs"] = torch.from_numpy(old + rng.normal(0, 0.2, shape)).float()
    rollout["ref_log_probs"] = torch.from_numpy(old + rng.normal(0, 0.1, shape)).float()
    return rollout


def _dr_grpo_by_numpy(rollout, members, clip=0.2) -> dict[str, float]:
    """Dr. GRPO's coefficient (Liu et al. 2025): A_i = R_i - mean of its group's R (no
    std), the clipped surrogate's d/d log pi r A (0 where the clip binds), token sum with
    weight 1; its statistics over the valid tokens of the groups ``members``."""
    mask = rollout["mask"].numpy()
    z = (rollout["log_probs"].double() - rollout["old_log_probs"].double()).numpy()
    values = []
    for positions in members:
        rewards = np.array([REWARDS[p] for p in positions], dtype=float)
        for p, a in zip(positions, rewards - rewards.mean(), strict=True):
            r = np.exp(z[p][mask[p]])
            clipped = ((a > 0) & (r > 1 + clip)) | ((a < 0) & (r < 1 - clip))
            values.append(np.where(clipped, 0.0, r * a))
    c = np.concatenate(values)
    return {
        "tokens": c.size,
        "mean": c.mean(),
        "mean_abs": np.abs(c).mean(),
        "zero_share": np.mean(c == 0),
        "positive_share": np.mean(c > 0),
    }


def _check_dr_grpo(summary, expected) -> None:
    assert summary.tokens == expected["tokens"]
    assert summary.mean == pytest.approx(expected["mean"], rel=1e-6)
    assert summary.mean_abs == pytest.approx(expected["mean_abs"], rel=1e-6)
    assert summary.zero_share == pytest.approx(expected["zero_share"])
    assert summary.positive_share == pytest.approx(expected["positive_share"])


@pytest.mark.parametrize("layout", ["strided", "balanced"])
def test_split_ranks_give_every_method_of_one_file(tmp_path, layout):
    rollout = _full_rollout()
    ranks = PARTITIONS[layout]
    _write(tmp_path / "split", ranks, rollout)
    _write(tmp_path / "one", [[p for part in ranks for p in part]], rollout)
    split = ratioscope.objectives(tmp_path / "split")
    one = ratioscope.objectives(tmp_path / "one")
    assert not split.skipped and set(split.methods) == set(one.methods)
    assert len(split.methods) == 20
    _assert_same(split.to_dict()["methods"], one.to_dict()["methods"], "methods")
    _assert_same(split.correlation, one.correlation, "correlation")
    # one warning says what the join did, for the coefficients and the advantage schemes
    assert [w for w in split.warnings if "group(s)" in w] == [
        "objectives: 4 group(s) had samples in more than one file of their step (2 files) "
        "and were joined by group id for every method's per-token coefficients and the "
        "advantage schemes"
    ]
    # independent reference: Dr. GRPO's formula on whole groups, and not on rank parts
    expected = _dr_grpo_by_numpy(rollout, _whole_groups())
    _check_dr_grpo(split.methods["dr_grpo"], expected)
    per_rank = [
        [[p for p in part if GROUPS[p] == g] for g in sorted({GROUPS[p] for p in part})]
        for part in ranks
    ]
    cut = _dr_grpo_by_numpy(rollout, [m for members in per_rank for m in members])
    assert cut["mean_abs"] != pytest.approx(expected["mean_abs"], rel=1e-6)


def test_dr_grpo_coefficient_on_a_tiny_split_by_hand(tmp_path):
    """One prompt, rewards 1, 0, 0, 0, two samples per rank, one token each: A = R - 1/4
    over the group (3/4, -1/4, -1/4, -1/4), never over a rank's pair."""
    z = [0.1, -0.1, 0.05, 0.3]  # log pi - log pi_old
    rollout = {
        "mask": torch.ones(4, 1, dtype=torch.bool),
        "old_log_probs": torch.full((4, 1), -1.0, dtype=torch.float64),
        "log_probs": torch.tensor([[-1.0 + v] for v in z], dtype=torch.float64),
        "rewards": torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64),
    }
    _write(tmp_path, [[0, 2], [1, 3]], rollout, labels=["p"] * 4)
    result = ratioscope.objectives(tmp_path, methods="dr_grpo")
    # by hand: r = e^z, c = r A (no clip binds: r in [0.8, 1.2] or A's side is free)
    c = [np.exp(0.1) * 0.75, -np.exp(-0.1) / 4, -np.exp(0.05) / 4, -np.exp(0.3) / 4]
    summary = result.methods["dr_grpo"]
    assert summary.tokens == 4 and summary.files == 1
    # the capture stores log-probs in float32
    assert summary.mean == pytest.approx(sum(c) / 4, abs=1e-7)
    assert summary.mean_abs == pytest.approx(sum(abs(v) for v in c) / 4, rel=1e-6)
    assert summary.positive_share == 0.25


@pytest.mark.parametrize("layout", ["strided", "balanced"])
def test_batch_rows_cut_the_joined_set_between_groups(tmp_path, layout):
    """Batches of at most 5 rows: each batch is one whole group of 4 (in the files the
    groups are interleaved, so a cut every 5 rows would split each of them)."""
    rollout = _full_rollout(3)
    ranks = PARTITIONS[layout]
    _write(tmp_path / "split", ranks, rollout)
    _write(tmp_path / "one", [[p for part in ranks for p in part]], rollout)
    split = ratioscope.objectives(tmp_path / "split", batch_rows=5)
    one = ratioscope.objectives(tmp_path / "one", batch_rows=5)
    _assert_same(split.to_dict()["methods"], one.to_dict()["methods"], "methods")
    assert {s.files for s in split.methods.values()} == {4}
    _check_dr_grpo(split.methods["dr_grpo"], _dr_grpo_by_numpy(rollout, _whole_groups()))
    # CW-GRPO's weights are per group and its aggregation per row: the cut between
    # groups leaves every coefficient as in one batch of the whole step
    whole = ratioscope.objectives(tmp_path / "one", methods="cw_grpo").methods["cw_grpo"]
    cut = split.methods["cw_grpo"]
    assert (cut.tokens, cut.zero_share) == (whole.tokens, whole.zero_share)
    assert cut.mean == pytest.approx(whole.mean, rel=1e-9)
    assert cut.mean_abs == pytest.approx(whole.mean_abs, rel=1e-9)


def test_a_group_short_of_the_group_size_is_left_out_of_the_group_methods(tmp_path):
    """Position 7 (group 1) was never written; with the recorded group size 4 the
    group methods run on groups 0, 2 and 3 only, the others on every row, and a note
    counts the group."""
    rollout = _full_rollout(4)
    settings = TrainerSettings("trl", {"num_generations": 4})
    ranks = [[p for p in part if p != 7] for part in PARTITIONS["strided"]]
    _write(tmp_path, ranks, rollout, settings=settings)
    result = ratioscope.objectives(tmp_path)
    kept = [g for g in _whole_groups() if 7 not in g]
    _check_dr_grpo(result.methods["dr_grpo"], _dr_grpo_by_numpy(rollout, kept))
    mask = rollout["mask"].numpy()
    kept_tokens = int(sum(mask[p].sum() for g in kept for p in g))
    all_tokens = int(sum(mask[p].sum() for p in range(16) if p != 7))
    for name in ACROSS:
        assert result.methods[name].tokens == kept_tokens, name
    assert result.methods["grpo"].tokens == result.methods["dapo"].tokens == all_tokens
    (joined,) = [w for w in result.warnings if "group(s)" in w]
    assert joined.startswith("objectives: 4 group(s) had samples in more than one file")
    assert joined.endswith(
        "; 1 group(s) (3 samples: 1 of size 3) held fewer samples than the trainer's group "
        "size after joining the files of their step and the next, and are left out of "
        "Dr. GRPO, CW-GRPO, QUATRO and the advantage schemes (the other methods take their "
        "rows)"
    )
    # the group size unknown: the three samples are a group of their own
    unknown = ratioscope.objectives(
        tmp_path, methods="dr_grpo", load_options=LoadOptions(trainer="none")
    )
    assert unknown.methods["dr_grpo"].tokens == all_tokens


def test_a_group_completed_from_the_next_step_is_one_batch(tmp_path):
    """Group "b" has 3 samples in step 0 (both ranks) and its 4th in step 1; "c" has 2
    and never more. With the group size 4, Dr. GRPO runs on "a", "b" (whole, across
    the steps) and "d"; "c" is left out of it and counted; cutting batches of 3 rows
    between groups changes none of its coefficients."""
    from ratioscope.capture import CaptureWriter

    settings = TrainerSettings("trl", {"num_generations": 4})
    rng = np.random.default_rng(5)
    parts = [  # (step, rank, labels, rewards)
        (0, 0, ["a", "a", "b", "b"], [1, 0, 1, 0]),
        (0, 1, ["a", "a", "b", "c", "c"], [1, 1, 0, 0, 1]),
        (1, 0, ["b", "d", "d", "d", "d"], [1, 0, 0, 1, 1]),
    ]
    rows = []  # (label, reward, z of its 3 tokens)
    for step, rank, labels, rewards in parts:
        old = -rng.gamma(1.0, 0.5, size=(len(labels), 3))
        z = rng.normal(0, 0.1, size=old.shape)
        rows += list(zip(labels, rewards, z, strict=True))
        with CaptureWriter(tmp_path, rank=rank, trainer_settings=settings) as writer:
            writer.write(
                step, mask=torch.ones(len(labels), 3, dtype=torch.bool),
                log_probs=torch.from_numpy(old + z), old_log_probs=torch.from_numpy(old),
                advantages=torch.ones(len(labels), 3),
                rewards=torch.tensor(rewards, dtype=torch.float64), group=labels,
            )  # fmt: skip
    values = []
    for label in ("a", "b", "d"):
        members = [(r, z) for lab, r, z in rows if lab == label]
        mean = np.mean([r for r, _ in members])
        for r, z in members:
            ratio, a = np.exp(z), r - mean
            clipped = ((a > 0) & (ratio > 1.2)) | ((a < 0) & (ratio < 0.8))
            values.append(np.where(clipped, 0.0, ratio * a))
    c = np.concatenate(values)
    for batch_rows in (None, 3):
        result = ratioscope.objectives(tmp_path, methods="grpo,dr_grpo", batch_rows=batch_rows)
        summary = result.methods["dr_grpo"]
        assert summary.tokens == c.size == 36
        assert summary.mean_abs == pytest.approx(np.abs(c).mean(), rel=1e-6)
        assert summary.mean == pytest.approx(c.mean(), rel=1e-6, abs=1e-9)
        assert result.methods["grpo"].tokens == 42
        (joined,) = [w for w in result.warnings if "group(s)" in w]
        assert "; 1 group(s) incomplete in their step were completed" in joined
        assert "; 1 group(s) (2 samples: 1 of size 2)" in joined
        assert "left out of Dr. GRPO" in joined and "advantage schemes" in joined
        if batch_rows is None:  # the same groups for both: one clause says it
            assert joined.startswith("objectives: 2 group(s) had samples in more than one ")
            assert "step (3 files)" in joined
            assert "left out of Dr. GRPO and the advantage schemes" in joined
