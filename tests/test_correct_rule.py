"""Which sequences are correct, as the user defines it (--correct-field, --correct-threshold)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.errors import ParameterError

ROWS, WIDTH, G = 16, 6, 4


def shaped_dump(path):
    """Shaped rewards (every one > 0) beside a 0/1 accuracy column: by rewards > 0 every
    sequence is correct, by accuracy a quarter to three quarters per group."""
    gen = torch.Generator().manual_seed(3)
    accuracy = torch.tensor([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1], dtype=torch.float32)
    rewards = 0.1 + 0.8 * accuracy + 0.05 * torch.rand(ROWS, generator=gen)
    old = -torch.rand(ROWS, WIDTH, generator=gen)
    save_file(
        {
            "mask": torch.ones(ROWS, WIDTH, dtype=torch.bool),
            "old_log_probs": old,
            "log_probs": old + 0.01 * torch.randn(ROWS, WIDTH, generator=gen),
            "advantages": torch.randn(ROWS, WIDTH, generator=gen),
            "rewards": rewards,
            "accuracy": accuracy,
            "group": torch.arange(ROWS) // G,
        },
        str(path),
    )
    return rewards, accuracy


def correct_column(report) -> list[bool]:
    """The per-sequence ``correct`` column (the Parquet table)."""
    return report.sequences.frame()["correct"].to_list()


@pytest.mark.parametrize("stream_bytes", [1 << 60, 0])
def test_the_correct_field_decides_correctness(tmp_path, stream_bytes):
    path = tmp_path / "d.safetensors"
    _, accuracy = shaped_dump(path)
    default = ratioscope.analyze(path, stream_bytes=stream_bytes, per_sequence=True)
    assert correct_column(default) == [True] * ROWS  # shaped rewards: all "correct"
    chosen = ratioscope.analyze(
        path, stream_bytes=stream_bytes, per_sequence=True, correct_field="accuracy"
    )
    assert correct_column(chosen) == [bool(a >= 0.5) for a in accuracy]
    assert chosen.params["load"]["correct_field"] == "accuracy"


def test_a_threshold_alone_applies_to_the_rewards(tmp_path):
    path = tmp_path / "d.safetensors"
    rewards, _ = shaped_dump(path)
    report = ratioscope.analyze(path, correct_threshold=0.5, per_sequence=True)
    assert correct_column(report) == [bool(r >= 0.5) for r in rewards]


def test_a_missing_field_and_a_bad_threshold_are_named(tmp_path):
    path = tmp_path / "d.safetensors"
    shaped_dump(path)
    with pytest.raises(ParameterError, match=r"'accuracy_reward'.*its keys are"):
        ratioscope.analyze(path, correct_field="accuracy_reward")
    result = CliRunner().invoke(app, ["analyze", str(path), "--correct-field", "nope", "-q"])
    assert result.exit_code == 2
    assert "--correct-field" in result.output and "nope" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(app, ["analyze", str(path), "--correct-threshold", "nan"])
    assert result.exit_code == 2 and "--correct-threshold" in result.output


@pytest.mark.parametrize("command", ["analyze", "timeline", "objectives"])
def test_every_dump_command_takes_the_rule_and_says_it(tmp_path, command):
    path = tmp_path / "step_1.safetensors"
    shaped_dump(path)
    out = tmp_path / "out.json"
    args = [command, str(path), "--correct-field", "accuracy", "--correct-threshold", "1"]
    detail = ["--detail"] if command == "analyze" else []  # -q alone: the verdict only
    result = CliRunner().invoke(app, [*args, "--json", str(out), "-q", *detail])
    assert result.exit_code == 0, result.output
    if command == "analyze":
        assert "correct: accuracy >= 1" in result.output
        report = json.loads(out.read_text())
        assert report["params"]["load"]["correct_threshold"] == 1.0


# --- the default with several reward functions ----------------------------------------
def functions_dump(path, functions: dict[str, list[float]], rewards: list[float]) -> None:
    gen = torch.Generator().manual_seed(5)
    rows = len(rewards)
    old = -torch.rand(rows, WIDTH, generator=gen)
    save_file(
        {
            "mask": torch.ones(rows, WIDTH, dtype=torch.bool),
            "old_log_probs": old,
            "log_probs": old + 0.01 * torch.randn(rows, WIDTH, generator=gen),
            "rewards": torch.tensor(rewards),
            **{f"reward:{name}": torch.tensor(v) for name, v in functions.items()},
        },
        str(path),
    )


def test_of_several_reward_functions_the_one_scoring_0_or_1_decides(tmp_path):
    # a verifier's 0/1 beside a shaping reward paid to every rollout: rewards > 0 would
    # call all four correct; the verifier calls the first and the third correct
    accuracy = [1.0, 0.0, 1.0, 0.0]
    length = [0.5, 0.75, 1.0, 0.25]
    path = tmp_path / "d.safetensors"
    functions_dump(path, {"accuracy": accuracy, "length": length},
                   [a + b for a, b in zip(accuracy, length, strict=True)])  # fmt: skip
    report = ratioscope.analyze(path, per_sequence=True)
    assert correct_column(report) == [True, False, True, False]
    assert report.vitals.correct_share == 0.5
    assert any("0/1 function 'accuracy'" in w for w in report.warnings)


def test_two_functions_scoring_0_or_1_choose_the_verifier_by_name(tmp_path):
    # a length reward that happens to be 0 or 1 everywhere (every response at the limit
    # or none) beside the verifier: the name settles it
    path = tmp_path / "d.safetensors"
    at_limit, correct = [1.0, 1.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0]
    functions_dump(path, {"at_limit": at_limit, "correctness": correct},
                   [a + b for a, b in zip(at_limit, correct, strict=True)])  # fmt: skip
    report = ratioscope.analyze(path, per_sequence=True)
    assert correct_column(report) == [False, True, False, False]


def test_no_function_scoring_0_or_1_gives_no_correct_share_and_says_so(tmp_path):
    path = tmp_path / "d.safetensors"
    functions_dump(path, {"length": [0.5, 0.25, 1.0, 0.75], "style": [0.1, 0.2, 0.3, 0.4]},
                   [0.6, 0.45, 1.3, 1.15])  # fmt: skip
    report = ratioscope.analyze(path)
    assert report.vitals.correct_share is None
    note = next(w for w in report.warnings if w.startswith("correct:"))
    assert "no correct share" in note and "`correct_field`" in note
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert result.exit_code == 0 and "--correct-field" in result.output


def test_one_reward_function_keeps_rewards_above_0(tmp_path):
    path = tmp_path / "d.safetensors"
    functions_dump(path, {"shaped": [0.2, 0.0, 0.7, 0.1]}, [0.2, 0.0, 0.7, 0.1])
    report = ratioscope.analyze(path, per_sequence=True)
    assert correct_column(report) == [True, False, True, True]


def test_the_function_is_chosen_for_the_whole_file_not_per_chunk(tmp_path):
    # 'b' scores 0 or 1 on the first half of the rows only: over the file 'a' is the one
    # 0/1 function; a chunk of the first half alone would see two and choose neither
    rows = 64
    a = [float(i % 3 == 0) for i in range(rows)]
    b = [float(i % 2) if i < rows // 2 else 0.5 for i in range(rows)]
    path = tmp_path / "d.safetensors"
    functions_dump(path, {"a": a, "b": b}, [x + y for x, y in zip(a, b, strict=True)])
    whole = ratioscope.analyze(path, per_sequence=True, stream_bytes=1 << 60)
    streamed = ratioscope.analyze(path, per_sequence=True, stream_bytes=0, chunk_elements=256)
    assert correct_column(whole) == correct_column(streamed) == [x == 1.0 for x in a]
    assert whole.warnings == streamed.warnings
