"""``plot objectives`` and the run report's sequence pages show each sequence's
coefficients on the batch ``objectives`` gives it: its groups joined across its step's
files, never a rank's half group.

The rollout of tests/test_objectives_joined.py (4 prompts x 4 samples, every tensor the
methods read) is written by 2 data-parallel ranks (slime's strided and balanced
partitions) and as one file (rank 0's rows, then rank 1's): sequence k of the split run
is sequence k of the one file, and every method's coefficients along it must be the
same. Dr. GRPO's are also checked against its formula written out in numpy, and shown to
differ from those of the rank's half group (what a per-file computation gives).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ratioscope.data.params import AnalysisParams
from ratioscope.data.trainer_settings import TrainerSettings
from ratioscope.figures.objectives import coefficient_trace
from ratioscope.io.loaders import LoadOptions
from ratioscope.objective_family.methods import METHODS
from ratioscope.views.drilldown import drilldown
from tests.test_group_join import GROUPS, PARTITIONS, REWARDS
from tests.test_objectives_joined import _full_rollout
from tests.test_scope_join import STEP, _write

#: the methods that look across a prompt's group
ACROSS = ("dr_grpo", "quatro", "cw_grpo")


def _runs(root, layout, seed=0):
    """(split run, one-file run, rollout, the rollout position of each sequence)."""
    rollout = _full_rollout(seed)
    ranks = PARTITIONS[layout]
    _write(root / "split", ranks, rollout)
    _write(root / "one", [[p for part in ranks for p in part]], rollout)
    return root / "split", root / "one", rollout, [p for part in ranks for p in part]


def _dr_grpo_row(rollout, position, members, clip=0.2) -> np.ndarray:
    """Dr. GRPO's coefficient along one sequence up to its batch constant: r A with
    A = R - mean of the rewards of ``members`` (no std), 0 where the clip binds."""
    mask = rollout["mask"].numpy()[position]
    z = (rollout["log_probs"].double() - rollout["old_log_probs"].double()).numpy()[position]
    a = REWARDS[position] - np.mean([REWARDS[p] for p in members])
    r = np.exp(z[mask])
    clipped = ((a > 0) & (r > 1 + clip)) | ((a < 0) & (r < 1 - clip))
    return np.where(clipped, 0.0, r * a)


def _same_trace(mine, theirs, where) -> None:
    assert mine.keys() == theirs.keys(), where
    for name in mine:
        np.testing.assert_allclose(mine[name], theirs[name], rtol=1e-9, atol=1e-12,
                                   err_msg=f"{where} {name}")  # fmt: skip


@pytest.mark.parametrize("layout", ["strided", "balanced"])
def test_the_plotted_trace_is_that_of_one_file(tmp_path, layout):
    split, one, rollout, order = _runs(tmp_path, layout)
    constants: list[float] = []
    for index in (0, 5, 9, 14):  # rows of rank 0 and rank 1
        mine = coefficient_trace([split], index)
        theirs = coefficient_trace([one], index)
        assert len(mine.values) == 20 and mine.index == index
        _same_trace(mine.values, theirs.values, f"sequence {index}")
        assert mine.bound == theirs.bound
        assert mine.notes == [
            "plot objectives' coefficients: 4 group(s) with samples in more than one file of "
            "their step were joined by group id (2 files)"
        ]
        # Dr. GRPO: r A with A from the whole group, times one batch constant for all
        position = order[index]
        whole = [p for p in range(len(GROUPS)) if GROUPS[p] == GROUPS[position]]
        expected = _dr_grpo_row(rollout, position, whole)
        drawn = np.array(mine.values["dr_grpo"])
        assert np.count_nonzero(expected) == np.count_nonzero(drawn)
        constants += list(drawn[expected != 0] / expected[expected != 0])
    assert len(constants) > 4
    np.testing.assert_allclose(constants, constants[0], rtol=1e-5)
    # the informative choice still looks at the first file's sequences only
    chosen = coefficient_trace([split])
    assert chosen.chosen_because and chosen.index < 8
    _same_trace(chosen.values, coefficient_trace([one], chosen.index).values, "chosen")


def test_a_group_short_of_the_group_size_is_not_drawn_and_counted(tmp_path):
    """Position 7 (group 1) was never written: its group's other three sequences show
    the methods that do not look across a group only, and the note counts the group."""
    rollout = _full_rollout(4)
    settings = TrainerSettings("trl", {"num_generations": 4})
    ranks = [[p for p in part if p != 7] for part in PARTITIONS["strided"]]
    _write(tmp_path, ranks, rollout, settings=settings)
    order = [p for part in ranks for p in part]
    short = order.index(5)  # group 1, on rank 1
    trace = coefficient_trace([tmp_path], short)
    assert not set(ACROSS) & set(trace.values) and "grpo" in trace.values
    assert set(trace.left_out) == {METHODS[n].label for n in ACROSS}
    assert any("1 group(s) (3 samples)" in n and "left out" in n for n in trace.notes)
    whole = coefficient_trace([tmp_path], order.index(0))
    assert set(ACROSS) <= set(whole.values) and not whole.left_out
    # the sequence pages: no series of those methods for the group's sequences
    files = sorted((tmp_path / f"step_{STEP:06d}").iterdir())
    drill = _tokens(files, tuple(METHODS))
    (step,) = drill.steps
    assert len(drill.tokens) == 15
    assert any("1 group(s) (3 samples) still short" in n for n in step.notes)
    for key, tokens in drill.tokens.items():
        rank, row = (int(part[1:]) for part in key.split("_")[1:])
        position = ranks[rank][row]
        present = {m for m in ACROSS if f"coef_{m}" in tokens.series}
        assert present == (set() if GROUPS[position] == 1 else set(ACROSS)), key
        assert "coef_grpo" in tokens.series


def _tokens(step_files, methods):
    drill = drilldown(
        [(STEP, step_files)], params=AnalysisParams(), load_options=LoadOptions(),
        methods=methods, top=16, token_bytes=10**8,
    )  # fmt: skip
    return drill


@pytest.mark.parametrize("layout", ["strided", "balanced"])
def test_the_sequence_pages_coefficients_are_those_of_one_file(tmp_path, layout):
    split, one, rollout, order = _runs(tmp_path, layout, seed=2)
    methods = tuple(METHODS)
    split_files = sorted((split / f"step_{STEP:06d}").iterdir())
    one_files = sorted((one / f"step_{STEP:06d}").iterdir())
    mine = _tokens(split_files, methods)
    theirs = _tokens(one_files, methods)
    assert len(mine.tokens) == len(theirs.tokens) == 16
    assert any("4 group(s) with samples in more" in n for n in mine.steps[0].notes)
    rows = [0] * 2
    for index in range(16):
        rank = int(index >= 8)
        key = f"s{STEP}_f{rank}_r{index - 8 * rank}"
        series, reference = mine.tokens[key].series, theirs.tokens[f"s{STEP}_f0_r{index}"].series
        coefs = {k for k in series if k.startswith("coef_")}
        assert coefs == {f"coef_{m}" for m in methods}, key
        for name in series:
            np.testing.assert_allclose(series[name], reference[name], rtol=1e-6, atol=1e-7,
                                       err_msg=f"{key} {name}")  # fmt: skip
        position = order[index]
        whole = [p for p in range(len(GROUPS)) if GROUPS[p] == GROUPS[position]]
        expected = _dr_grpo_row(rollout, position, whole)
        shown = series["coef_dr_grpo"].astype(float)
        np.testing.assert_allclose(shown, expected, rtol=1e-5, atol=1e-6, err_msg=key)
        rows[rank] += 1
    assert rows == [8, 8]
    # the rankings use the same coefficients: every score as in one file (the gradient
    # share too: a share of the step's sum, whatever file holds the sequence)
    for index in range(16):
        rank = int(index >= 8)
        a = mine.steps[0].rows[f"s{STEP}_f{rank}_r{index - 8 * rank}"]["scores"]
        b = theirs.steps[0].rows[f"s{STEP}_f0_r{index}"]["scores"]
        assert a.keys() == b.keys()
        for name in a:
            assert math.isclose(a[name], b[name], rel_tol=1e-5, abs_tol=1e-9), name
