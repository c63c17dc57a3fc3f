"""steps: every input file gets a training step, from its name, its contents or a regex."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ratioscope.analysis.steps import (
    assign_steps,
    compile_step_from,
    read_step_meta,
    step_from_name,
)
from ratioscope.errors import InputError, ParameterError


@pytest.mark.parametrize(
    ("path", "step"),
    [
        ("run/step_0032.pt", 32),  # verl-style dumps
        ("run/global_step_7.pt", 7),
        ("run/step-12.parquet", 12),
        ("out/token_exports/step_5/rank_0.jsonl", 5),  # prime-rl
        ("cap/step_000032/rank_00001_part_0003.pt", 32),  # ratioscope capture, tensors
        ("cap/step_000032/rank_00001.json", 32),  # ratioscope capture, shard reports
        ("debug/train_data/12_3.pt", 12),  # slime {rollout_id}_{rank}.pt
        ("debug/rollout_data/12.pt", 12),  # slime rollout dump
        ("logs/exp_001/train_data_step4.jsonl", 4),  # NeMo-RL GRPO
        ("logs/exp_001/val_data_step4.jsonl", None),  # its validation log: not a dump
        ("run/dump.pt", None),
        ("run/completions_00032.parquet", None),  # a TRL text log: not a timeline input
        ("run/rank_0.pt", None),
    ],
)
def test_steps_from_framework_names(path, step):
    assert step_from_name(path) == step


def test_files_of_one_step_are_grouped_in_step_order():
    files = [Path(p) for p in ("r/step_10/rank_1.pt", "r/step_2/rank_0.pt", "r/step_10/rank_0.pt")]
    groups = assign_steps(files)
    assert [(g.step, g.paths, g.source) for g in groups] == [
        (2, (files[1],), "name"),
        (10, (files[0], files[2]), "name"),
    ]


def test_step_from_a_scalar_in_the_file(tmp_path):
    for step, value in ((3, 3), (4, torch.tensor(4))):
        torch.save({"step": value, "mask": torch.ones(2, 3)}, tmp_path / f"dump_{step}x.pt")
    assert read_step_meta(tmp_path / "dump_3x.pt")["step"] == 3
    groups = assign_steps(sorted(tmp_path.iterdir()))
    assert [(g.step, g.source) for g in groups] == [(3, "meta"), (4, "meta")]


def test_step_from_regex_wins_over_names():
    files = [Path("run/step_0001/iter7.pt"), Path("run/step_0002/iter3.pt")]
    groups = assign_steps(files, r"iter(\d+)")
    assert [(g.step, g.source) for g in groups] == [(3, "step_from"), (7, "step_from")]


def test_a_file_without_a_step_is_an_error_naming_it_and_the_ways(tmp_path):
    path = tmp_path / "dump.pt"
    torch.save({"mask": torch.ones(2, 3)}, path)
    with pytest.raises(InputError) as error:
        assign_steps([path])
    message = str(error.value)
    assert str(path) in message and "step_0032.pt" in message
    assert "'step' scalar" in message and "`step_from`" in message


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [("step(", "not a regular expression"), (r"step\d+", "exactly one capture group")],
)
def test_bad_step_from_patterns(pattern, problem):
    with pytest.raises(ParameterError, match=problem) as error:
        compile_step_from(pattern)
    assert error.value.parameter == "step_from"


def test_step_from_that_does_not_match_names_the_file():
    with pytest.raises(ParameterError, match="does not match") as error:
        assign_steps([Path("a/iter_3.pt"), Path("a/other.pt")], r"iter_(\d+)")
    assert "a/other.pt" in str(error.value)
