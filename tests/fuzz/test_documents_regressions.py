"""The JSON and TOML cases of the hostile-input report, by name: nesting past the
parser's stack, integers past Python's 4300 digits, FIFOs, in every command that reads
such a file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from fuzz import files
from fuzz.harness import error_line, promise
from fuzz.profiles import matrix

pytestmark = pytest.mark.fuzz

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data" / "samples.jsonl"
RULES = ROOT / "examples" / "rules.toml"
DEEP = files.nested(100_000)
DIGITS = '{"schema_version": 1, "x": ' + "7" * 5000 + "}"


REPORT_COMMANDS = [
    ["merge", "bad.json", "bad.json", "--out", "m.json"],
    ["check", "bad.json", "--rules", str(RULES)],
    ["compare", "bad.json", "bad.json"],
    ["timeline", "bad.json"],
    ["metrics", "bad.json"],
]


@pytest.mark.parametrize(
    ("command", "text"),
    matrix(
        REPORT_COMMANDS,
        [DEEP, files.nested(900, "{"), DIGITS],
        [c[0] for c in REPORT_COMMANDS],
        ["deep", "deep-dict", "digits"],
    ),
)
def test_report_json(tmp_path: Path, command: list[str], text: str) -> None:
    (tmp_path / "bad.json").write_text(text)
    line = error_line(promise(command, tmp_path))
    assert "bad.json" in line


@pytest.mark.parametrize("text", [DEEP, DIGITS], ids=["deep", "digits"])
def test_check_baseline(tmp_path: Path, text: str, report: Path) -> None:
    shutil.copy(report, tmp_path / "run.json")
    (tmp_path / "base.json").write_text(text)
    line = error_line(
        promise(["check", "run.json", "--rules", str(RULES), "--baseline", "base.json"], tmp_path)
    )
    assert "base.json" in line


@pytest.mark.parametrize(
    ("command", "line_text"),
    matrix(
        ["analyze", "eval-passk", "eval-ucc", "info"],
        [DEEP, '{"mask": [' + "1" * 5000 + "]}", '{"problem_id": 1, "response": ' + DEEP + "}"],
        ["analyze", "eval-passk", "eval-ucc", "info"],
        ["deep", "digits", "deep-field"],
    ),
)
def test_jsonl_lines(tmp_path: Path, command: str, line_text: str) -> None:
    (tmp_path / "a.jsonl").write_text(SAMPLES.read_text().splitlines()[0] + "\n" + line_text + "\n")
    args = [command, "a.jsonl"] + (["-q"] if command == "analyze" else [])
    assert "a.jsonl" in error_line(promise(args, tmp_path))


@pytest.mark.parametrize(
    "text", ["x = " + "[" * 5000 + "]" * 5000, "x = " + "7" * 5000], ids=["deep", "digits"]
)
def test_rules_toml(tmp_path: Path, text: str, report: Path) -> None:
    shutil.copy(report, tmp_path / "run.json")
    (tmp_path / "r.toml").write_text(text)
    assert "r.toml" in error_line(promise(["check", "run.json", "--rules", "r.toml"], tmp_path))


@pytest.mark.parametrize(
    "command",
    [
        ["eval-passk", "a.jsonl"],
        ["eval-ucc", "a.jsonl"],
        ["merge", "b.json", "--out", "m.json"],
        ["analyze", "a.jsonl"],
        ["info", "a.jsonl"],
        ["check", "b.json", "--rules", str(RULES)],
        ["timeline", "b.json"],
    ],
    ids=lambda c: c[0],
)
def test_fifo_refused(tmp_path: Path, command: list[str]) -> None:
    os.mkfifo(tmp_path / "a.jsonl")
    os.mkfifo(tmp_path / "b.json")
    line = error_line(promise(command, tmp_path, seconds=20))
    assert "FIFO" in line
