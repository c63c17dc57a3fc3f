"""Issue 16, the command line a newcomer meets: the --clip guard and the band it prints,
--version, one-line usage errors, metavars, help at 80 columns, directories that hold
files of another kind, and the default sequence of ``plot ratios``."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from dumps import make_reference, write_layout
from typer.testing import CliRunner

from ratioscope._version import __version__
from ratioscope.cli import app
from ratioscope.cli._help import flowing
from ratioscope.data.params import AnalysisParams
from ratioscope.errors import ParameterError
from ratioscope.io.loaders import FoundPath, expand_paths

runner = CliRunner()
SAMPLES = Path(__file__).resolve().parents[1] / "sample_data" / "samples.jsonl"


def one_error_line(result, code: int = 2) -> str:
    """The one stderr line of a failed command (and no help panel, no traceback)."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "╭" not in result.stderr, result.stderr
    assert result.stderr.startswith("ratioscope: error: ")
    assert result.stderr.count("ratioscope:") == 1, result.stderr
    return result.stderr.strip()


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("newcomer")
    return write_layout(make_reference(seed=3, rows=8, width=40), "verl", directory)


# ---- --clip takes eps, prints the band --------------------------------------------


def test_clip_bounds_typed_as_a_band_are_refused_with_the_band_meant(dump):
    result = runner.invoke(app, ["analyze", str(dump), "--clip", "0.8,1.2", "-q"])
    assert one_error_line(result) == (
        "ratioscope: error: --clip takes eps_low,eps_high of the band [1 - eps_low, "
        "1 + eps_high], each below 1; 0.8,1.2 would be the band [0.2, 2.2] — for the band "
        "[0.8, 1.2] set --clip to 0.2,0.2."
    )
    result = runner.invoke(app, ["analyze", str(dump), "--seq-clip", "1.5,0.1", "-q"])
    assert "--seq-clip takes eps_low,eps_high" in one_error_line(result)


@pytest.mark.parametrize("clip", [(0.2, 1.0), (1.0, 0.2), (0.8, 1.2)])
def test_an_eps_of_one_or_more_is_a_parameter_error_on_either_side(clip):
    with pytest.raises(ParameterError) as raised:
        AnalysisParams(clip=clip)
    assert raised.value.parameter == "clip"
    with pytest.raises(ParameterError) as raised:
        AnalysisParams(seq_clip=clip)
    assert raised.value.parameter == "seq_clip"


def test_the_clip_band_column_shows_the_band_not_the_eps(dump):
    args = ["analyze", str(dump), "-q", "--detail"]
    result = runner.invoke(app, args, env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.stderr
    assert "[0.8, 1.28]" in result.stdout and "[0.9997, 1.0004]" in result.stdout
    assert "0.2, 0.28" not in result.stdout


# ---- --version, usage errors, metavars, help width ---------------------------------


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.stdout == f"ratioscope {__version__}\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["nosuch"], "no such command 'nosuch' (see ratioscope --help)."),
        (["--nosuch"], "no such option: --nosuch (see ratioscope --help)."),
        (["analyze", "--nosuch", "x"], "no such option: --nosuch (see ratioscope analyze --help)."),
        (["analyze"], "missing argument 'PATH...' (see ratioscope analyze --help)."),
    ],
)
def test_usage_errors_are_one_line_with_one_prefix(args, line):
    assert one_error_line(runner.invoke(app, args)) == f"ratioscope: error: {line}"


def _helps(columns: str) -> dict[str, str]:
    from ratioscope.cli.reference import _commands

    helps = {}
    for args in _commands():
        result = runner.invoke(
            app, [*args, "--help"], env={"COLUMNS": columns, "NO_COLOR": "1"}, color=False
        )
        assert result.exit_code == 0, (args, result.stderr)
        helps[" ".join(args) or "ratioscope"] = result.stdout
    return helps


def test_flags_take_no_metavar_and_metavars_are_not_python():
    for command, text in _helps("100").items():
        for python in ("<bool>", "<list[", "<str>", "<path>", "<float>", "{paths}", "{report"):
            assert python not in text, (command, python)
        for line in text.splitlines():
            if re.search(r"--(quiet|help|unsafe-pickle|version)\b", line):
                assert not re.search(r"--[\w-]+(\s+-\w)?\s+[A-Z]{3,}", line), (command, line)
    helps = _helps("100")
    assert "Usage: ratioscope analyze [OPTIONS] PATH..." in helps["analyze"]
    assert "KEY=VALUE" in helps["analyze"] and "--version" in helps["ratioscope"]
    assert "Rules TOML: [[rule]] tables" in helps["check"]


def test_help_paragraphs_fill_80_columns_without_breaking_mid_sentence():
    for command, text in _helps("80").items():
        head = text.split("╭")[0]  # the description, before the option panels
        for paragraph in re.split(r"\n\s*\n", head):
            lines = [line.strip() for line in paragraph.splitlines() if line.strip()]
            for line in lines[:-1]:  # every line but a paragraph's last is filled
                assert len(line) >= 50, (command, line)


def test_flowing_joins_the_lines_of_a_paragraph():
    assert flowing("a\n  b\n\nc\nd") == "a b\n\nc d"
    assert flowing(None) is None


# ---- a directory does not pick up files of another kind ----------------------------


def test_a_directory_skips_a_samples_file_with_one_note(tmp_path):
    write_layout(make_reference(seed=4, rows=4, width=20), "verl", tmp_path, "step_1")
    shutil.copy(SAMPLES, tmp_path / "samples.jsonl")
    result = runner.invoke(app, ["analyze", str(tmp_path), "-q", "--detail"])
    assert result.exit_code == 0, result.stderr
    skipped = [line for line in result.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 1 and "samples.jsonl: this is a samples file" in skipped[0]
    assert "eval-passk" in skipped[0]
    result = runner.invoke(app, ["info", str(tmp_path)])
    assert result.exit_code == 0, result.stderr
    assert "not a per-token dump" not in result.stdout
    assert result.stderr.startswith("note: skipped ") and result.stderr.count("\n") == 1


def test_a_directory_of_other_files_only_fails_with_one_sentence(tmp_path):
    shutil.copy(SAMPLES, tmp_path / "samples.jsonl")
    for command in ("analyze", "info"):
        line = one_error_line(runner.invoke(app, [command, str(tmp_path)]))
        assert "no input holds token data" in line and "this is a samples file" in line


def test_a_file_named_on_its_own_fails_with_its_kind_and_command(tmp_path, dump):
    line = one_error_line(runner.invoke(app, ["analyze", str(SAMPLES), str(dump), "-q"]))
    assert "this is a samples file" in line and "'ratioscope eval-passk'" in line
    report = tmp_path / "run.json"
    assert runner.invoke(app, ["analyze", str(dump), "--json", str(report), "-q"]).exit_code == 0
    line = one_error_line(runner.invoke(app, ["analyze", str(report), "-q"]))
    assert "run.json: this is an analyze report" in line and "'ratioscope check'" in line
    timeline = tmp_path / "steps.json"
    timeline.write_text(json.dumps({"schema_version": 1, "kind": "timeline"}))
    line = one_error_line(runner.invoke(app, ["analyze", str(timeline), "-q"]))
    assert "this is a timeline" in line
    result = runner.invoke(app, ["info", str(report)])  # info says what it is
    assert result.exit_code == 0 and "this is an analyze report" in result.stdout


def test_found_files_are_marked_and_a_named_file_stays_named(tmp_path):
    dump = write_layout(make_reference(seed=4, rows=4, width=20), "verl", tmp_path, "a")
    found = expand_paths([tmp_path])
    assert found == [dump] and isinstance(found[0], FoundPath)
    named = expand_paths([tmp_path, dump])
    assert named == [dump] and not isinstance(named[0], FoundPath)


# ---- plot ratios draws an informative sequence by default --------------------------


def test_plot_ratios_defaults_to_a_sequence_that_switches(tmp_path):
    from ratioscope.figures.ratios import CHOSEN_BECAUSE, informative_row, ratio_trace

    ref = make_reference(seed=6, rows=8, width=40)
    ref.log_probs[:3] = ref.old_log_probs[:3]  # rows 0-2 exactly on-policy
    path = write_layout(ref, "verl", tmp_path)
    trace = ratio_trace([path])
    assert trace.row >= 3 and trace.chosen_because == CHOSEN_BECAUSE
    assert any(value != 0 for value in trace.token)
    z = torch.tensor(ref.log_probs - ref.old_log_probs)
    assert informative_row(z, torch.tensor(ref.mask), AnalysisParams()) == trace.row
    assert ratio_trace([path], 0).chosen_because == ""  # asked for: no reason given
    out = tmp_path / "trace.png"
    result = runner.invoke(app, ["plot", "ratios", str(path), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
