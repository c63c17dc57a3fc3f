"""The Input options reach the library as the user typed them, through one helper.

Every command that reads dumps builds its ``LoadOptions`` with
``_options.command_load_options(ctx)``, which takes the options by parameter name; these
tests pin the names on every command and follow given, missing and malformed options to
what the library receives.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.cli._options import InputOptions, load_options
from ratioscope.errors import ParameterError, UsageError
from ratioscope.io.loaders import LoadOptions

#: flag -> the parameter name a command must give it (written out, not read from the code)
INPUT_PARAMETERS = {
    "--format": "format",
    "--map": "mapping",
    "--nonfinite": "nonfinite",
    "--unsafe-pickle": "unsafe_pickle",
    "--group-size": "group_size",
    "--correct-field": "correct_field",
    "--correct-threshold": "correct_threshold",
    "--trainer": "trainer",
}


def _dump_commands() -> list[tuple[str, Any]]:
    """(command path, click command) of every command with a --format option."""
    found = []

    def walk(path: str, command: Any) -> None:
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(f"{path} {name}", sub)
        if any("--format" in getattr(p, "opts", ()) for p in command.params):
            found.append((path, command))

    walk("ratioscope", typer.main.get_command(app))
    return found


def test_every_dump_command_names_its_input_options_as_the_helper_reads_them():
    commands = _dump_commands()
    assert len(commands) >= 10  # analyze, report, timeline, objectives, info, the plots, ...
    for path, command in commands:
        for param in command.params:
            flags = set(param.opts) & set(INPUT_PARAMETERS)
            for flag in flags:
                assert param.name == INPUT_PARAMETERS[flag], f"{path} {flag}"


SAMPLE = str(Path(__file__).resolve().parents[1] / "sample_data" / "verl")


class _Captured(UsageError):
    """Raised by the stand-in for the library: the command stops before reading a file."""


@pytest.fixture
def captured(monkeypatch) -> list[LoadOptions]:
    """The LoadOptions that ``objectives`` and ``plot objectives`` hand the library."""
    import ratioscope.objective_family.side_by_side as library

    seen: list[LoadOptions] = []

    def stand_in(paths: Any, *, load_options: LoadOptions, **_: Any) -> None:
        seen.append(load_options)
        raise _Captured("stopped before reading")

    monkeypatch.setattr(library, "objectives", stand_in)
    return seen


def _invoke(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "stopped before reading" in result.output, result.output


def test_every_given_option_reaches_the_library(captured):
    _invoke([
        "objectives", SAMPLE,
        "--format", "verl", "--map", "mask=attention_mask", "--map", " ids = input_ids ",
        "--nonfinite", "mask", "--unsafe-pickle", "--group-size", "4",
        "--correct-field", "accuracy_reward", "--correct-threshold", "1", "--trainer", "trl",
    ])  # fmt: skip
    assert captured == [
        LoadOptions(
            format="verl",
            mapping={"mask": "attention_mask", "ids": "input_ids"},
            nonfinite="mask",
            unsafe_pickle=True,
            group_size=4,
            correct_field="accuracy_reward",
            correct_threshold=1.0,
            trainer="trl",
        )
    ]


def test_no_option_given_is_the_library_default(captured):
    _invoke(["objectives", SAMPLE])
    assert captured == [LoadOptions()]


def test_an_option_the_command_lacks_keeps_the_library_default(captured, tmp_path):
    # plot objectives has --format, --map and --unsafe-pickle only
    args = ["--map", "mask=attention_mask", "--unsafe-pickle", "--out", str(tmp_path / "o.png")]
    _invoke(["plot", "objectives", SAMPLE, *args])
    (options,) = captured
    assert options.mapping == {"mask": "attention_mask"} and options.unsafe_pickle
    assert (options.nonfinite, options.trainer, options.group_size) == ("error", "auto", None)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (InputOptions(trainer="trlx"), "--trainer must be one of auto, none, trl, verl"),
        (InputOptions(format="torch"), "--format must be one of auto, canonical, verl"),
        (InputOptions(nonfinite="drop"), "--nonfinite must be 'error' or 'mask', got 'drop'"),
        (InputOptions(mapping=("mask",)), "--map expects canonical=theirs, got 'mask'"),
    ],
)
def test_a_malformed_option_is_one_usage_error(inputs, message):
    with pytest.raises(UsageError, match=message):
        load_options(inputs)


def test_a_non_finite_correct_threshold_fails_before_any_read():
    with pytest.raises(ParameterError) as caught:
        load_options(InputOptions(correct_threshold=math.inf))
    assert caught.value.parameter == "correct_threshold"
