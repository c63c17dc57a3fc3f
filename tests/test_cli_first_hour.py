"""Issue 28, a newcomer's first hour: help texts that work as written, options that say
what they take, and messages that name the problem (a truncated file, the column of a
broken JSON line, the kind of report given where another is needed)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import typer
from dumps import make_reference, write_layout
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.report.model import OPTIONAL_SECTION_KEYS, SECTION_KEYS

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_data" / "samples.jsonl"


def one_error_line(result, code: int = 2) -> str:
    """The one stderr line of a failed command (no help panel, no traceback)."""
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("ratioscope: error: ")
    return result.stderr.strip()


def _commands(group: Any, prefix: tuple[str, ...] = ()):
    for name, command in group.commands.items():
        path = (*prefix, name)
        if hasattr(command, "commands"):
            yield from _commands(command, path)
        else:
            yield path


def _help(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, command
    return result.stdout


def _flat(text: str) -> str:
    """Help text as one line: panel borders dropped, whitespace collapsed."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("first-hour")
    return write_layout(make_reference(seed=5, rows=8, width=30), "verl", directory)


# ---- help texts ----------------------------------------------------------------------


def test_no_help_shows_sphinx_markup():
    root = typer.main.get_command(app)
    commands = list(_commands(root))
    assert ("plot", "compare") in commands and len(commands) > 15
    for command in commands:
        text = _help(*command)
        assert "``" not in text and ":func:" not in text and ":class:" not in text, command


def test_plot_similarity_help_example_runs_on_the_bundled_samples(tmp_path, monkeypatch):
    text = _flat(_help("plot", "similarity"))
    example = re.search(r"Example: ratioscope (plot similarity \S+ .*?\.png)", text)
    assert example, text
    args = shlex.split(example.group(1))
    assert args[2] == "sample_data/samples.jsonl"
    (tmp_path / "sample_data").mkdir()
    shutil.copy(SAMPLES, tmp_path / "sample_data" / "samples.jsonl")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.stderr
    out = tmp_path / args[args.index("--out") + 1]
    assert out.stat().st_size > 10_000


def test_reports_dir_takes_a_directory_metavar():
    lines = [line for line in _help("timeline").splitlines() if "--reports-dir" in line]
    assert lines and re.search(r"--reports-dir\s+DIR\b", lines[0]), lines


def test_metrics_section_lists_every_section_of_the_report():
    help_text = _flat(_help("metrics"))
    listed = re.search(r"Keep the keys of one section: ([a-z_, ]+)\.", help_text)
    assert listed, help_text
    sections = [name.strip() for name in listed.group(1).split(",")]
    # every section of the report layout, the ones added later (staleness) too
    assert sections == ["inputs", "params", *SECTION_KEYS, *OPTIONAL_SECTION_KEYS]
    result = runner.invoke(app, ["metrics", "--section", "staleness", "--json"])
    rows = json.loads(result.stdout)
    assert rows and {row["section"] for row in rows} == {"staleness"}


def test_metrics_without_a_report_imports_no_torch_and_lists_the_layout_in_order():
    code = (
        "import sys\n"
        "from ratioscope.cli import app\n"
        "try:\n"
        "    app(['metrics', '--json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('torch' in sys.modules, file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stderr.strip() == "False", out.stderr
    listed = [row["key"] for row in json.loads(out.stdout)]
    # the order of the report layout, walked from the report's types (imports torch)
    from ratioscope.report.catalog import entries_for, layout_keys

    walked = [e.pattern for key in layout_keys() for e in entries_for(key)]
    assert listed == list(dict.fromkeys(walked))


def test_one_clip_value_is_documented_as_both_sides(dump, tmp_path):
    help_text = _flat(_help("analyze"))
    assert "one value sets both (PPO's single epsilon: 0.2 is [0.8, 1.2])" in help_text
    out = tmp_path / "one.json"
    result = runner.invoke(app, ["analyze", str(dump), "--clip", "0.3", "--json", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text())["params"]["analysis"]["clip"] == [0.3, 0.3]


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "{dump}", "--json", "{out}"],
        ["analyze", "{dump}", "--verdict-json", "{out}"],
        ["sweep", "{dump}", "--json", "{out}"],
        ["eval-passk", str(SAMPLES), "--json", "{out}"],
        ["eval-ucc", str(SAMPLES), "--base", "base", "--json", "{out}"],
    ],
)
def test_a_json_output_named_like_a_figure_is_refused(command, dump, tmp_path):
    out = tmp_path / "out.png"
    args = [part.format(dump=dump, out=out) for part in command]
    line = one_error_line(runner.invoke(app, [*args, "-q"]))
    option = command[-2]
    assert line == f"ratioscope: error: {option} writes .json files; name it *.json, not out.png."
    assert not out.exists()


# ---- messages ------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [100, 5_000, 0.5, -10])
def test_a_truncated_pt_file_is_called_truncated(tmp_path, keep):
    whole = (ROOT / "sample_data" / "verl" / "step_0008.pt").read_bytes()
    size = int(len(whole) * keep) if isinstance(keep, float) else keep % len(whole)
    path = tmp_path / "cut.pt"
    path.write_bytes(whole[:size])
    line = one_error_line(runner.invoke(app, ["info", str(path)]))
    assert "cut.pt: not a readable torch file: truncated (" in line, line


def test_a_truncated_legacy_pt_file_is_called_truncated(tmp_path):
    path = tmp_path / "legacy.pt"
    torch.save({"log_probs": torch.zeros(64, 64)}, path, _use_new_zipfile_serialization=False)
    path.write_bytes(path.read_bytes()[:4000])
    line = one_error_line(runner.invoke(app, ["info", str(path)]))
    assert "legacy.pt: not a readable torch file: truncated (" in line, line


def test_an_intact_zip_that_is_no_torch_file_is_not_called_truncated(tmp_path):
    import zipfile

    path = tmp_path / "other.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "not a tensor")
    line = one_error_line(runner.invoke(app, ["info", str(path)]))
    assert "truncated" not in line, line


@pytest.mark.parametrize("command", [["info"], ["analyze", "-q"]])
def test_a_broken_json_line_names_the_parsers_column(tmp_path, command):
    record = {
        "input_ids": [1, 2, 3],
        "old_log_probs": [-1.0, -2.0, -0.5],
        "log_probs": [-1.0, -2.0, -0.5],
        "advantages": [1.0, 1.0, 1.0],
        "response_mask": [1, 1, 1],
    }
    line = json.dumps(record)
    at = line.index("[")  # the first value: "x[1, 2, 3]" is not JSON from its x on
    broken = line[:at] + "x" + line[at:]
    path = tmp_path / "dump.jsonl"
    path.write_text(f"{line}\n{broken}\n{line}\n")
    message = one_error_line(runner.invoke(app, [command[0], str(path), *command[1:]]))
    expected = f"dump.jsonl: line 2: not valid JSON (Expecting value at column {at + 1})."
    assert message.endswith(expected), message


def test_a_broken_samples_line_names_the_parsers_column(tmp_path):
    good = SAMPLES.read_text().splitlines()[:3]
    broken = good[1].replace('"correct":false', '"correct":fals', 1)
    column = broken.index('"correct":fals') + len('"correct":') + 1
    path = tmp_path / "samples.jsonl"
    path.write_text("\n".join([good[0], broken, good[2]]) + "\n")
    message = one_error_line(runner.invoke(app, ["eval-passk", str(path)]))
    assert f"line 2: not valid JSON (Expecting value at column {column})" in message, message


@pytest.fixture(scope="module")
def documents(tmp_path_factory, dump) -> dict[str, Path]:
    """An analyze report, an evaluation report and a timeline, written by the commands."""
    directory = tmp_path_factory.mktemp("kinds")
    kinds = ("report", "shard", "eval", "timeline")
    paths = {kind: directory / f"{kind}.json" for kind in kinds}
    other = write_layout(make_reference(seed=6, rows=8, width=30), "verl", directory, "other")
    steps = directory / "steps"
    steps.mkdir()
    for step in (1, 2):
        shutil.copy(dump, steps / f"step_{step:06d}.pt")
    for args in (
        ["analyze", str(dump), "--json", str(paths["report"]), "-q"],
        ["analyze", str(other), "--json", str(paths["shard"]), "-q"],
        ["eval-passk", str(SAMPLES), "--json", str(paths["eval"]), "-q"],
        ["timeline", str(steps), "--json", str(paths["timeline"]), "-q"],
    ):
        assert runner.invoke(app, args).exit_code == 0, args
    return paths


@pytest.mark.parametrize(
    ("baseline", "named"),
    [
        ("eval", "an evaluation report (eval-passk or eval-ucc --json)"),
        ("timeline", "a timeline (ratioscope timeline --json)"),
    ],
)
def test_a_baseline_of_another_kind_is_named_as_such(documents, baseline, named):
    report, base = documents["report"], documents[baseline]
    rules = ROOT / "examples" / "rules.toml"
    args = ["check", str(report), "--rules", str(rules), "--baseline", str(base)]
    line = one_error_line(runner.invoke(app, args))
    assert line == (
        f"ratioscope: error: {base}: the baseline is {named} but {report} is an analyze "
        "report; compare like with like."
    )


def test_merge_and_compare_name_an_evaluation_report(documents, tmp_path):
    report, evaluation = documents["report"], documents["eval"]
    kind = "an evaluation report (eval-passk or eval-ucc --json)"
    args = ["merge", str(report), str(evaluation), "--out", str(tmp_path / "m.json")]
    line = one_error_line(runner.invoke(app, args))
    assert line == f"ratioscope: error: {evaluation}: {kind}, not an analyze report."
    line = one_error_line(runner.invoke(app, ["compare", str(report), str(evaluation)]))
    assert line.startswith(f"ratioscope: error: {evaluation}: {kind}; compare takes")
    line = one_error_line(runner.invoke(app, ["metrics", str(documents["timeline"])]))
    assert line.endswith("a timeline (ratioscope timeline --json), not an analyze report.")


def test_merge_prints_the_verdict_of_the_merged_report(documents, tmp_path):
    from ratioscope.judgement.verdict import verdict
    from ratioscope.report.model import Report

    report, copy = documents["report"], documents["shard"]
    out = tmp_path / "merged.json"
    result = runner.invoke(app, ["merge", str(report), str(copy), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.stderr
    health = verdict(Report.read_json(out))
    lines = result.stdout.splitlines()
    assert lines[0].startswith("health:")
    # -q: the verdict alone, one line per finding under its headline
    assert len(lines) == 1 + len(health.findings)
    for line, finding in zip(lines[1:], health.findings, strict=True):
        assert line.split()[0] == finding.level
    full = runner.invoke(app, ["merge", str(report), str(copy), "--out", str(out)])
    assert full.stdout.startswith(result.stdout) and len(full.stdout) > 3 * len(result.stdout)


@pytest.mark.parametrize(
    ("baseline", "named"),
    [("eval", "is an evaluation report"), ("timeline", "is a timeline (ratioscope timeline")],
)
def test_analyze_names_a_baseline_of_another_kind(documents, dump, baseline, named):
    base = documents[baseline]
    line = one_error_line(runner.invoke(app, ["analyze", str(dump), "--baseline", str(base)]))
    assert line.startswith(f"ratioscope: error: {base}: {named}"), line
    assert "not an analyze report" in line
