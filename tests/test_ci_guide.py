"""docs/ci.md works as written: its walk-through and its GitHub Actions gate step run here.

The ``bash`` blocks of the guide's walk-through run in document order, each in a fresh
``bash``, in a scratch directory holding links to ``sample_data/`` and ``examples/`` (the
guide's paths are relative to the repository root); ``ratioscope`` and ``python`` resolve
to the interpreter running the tests. A line ``echo "exit code: $?"  # N`` in a block
states an exit code, and the test holds the real one to it. An ERR trap records every
command that fails, so a failure the guide does not announce (a broken degradation
script, a missing file) fails the test too. The install block is checked, not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "ci.md"

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
STATED = re.compile(r'^echo "exit code: \$\?"\s*#\s*(\d+)', re.M)
ECHOED = re.compile(r"^exit code: (\d+)$", re.M)

pytestmark = [
    pytest.mark.skipif(
        shutil.which("bash") is None or shutil.which("sed") is None,
        reason="the guide's commands need bash and sed",
    ),
    pytest.mark.slow,  # the whole guide, analyses included: the slow tier
]


# ------------------------------------------------------------------ reading the guide


def section(text: str, heading: str) -> str:
    """The text from the ``## heading...`` line to the next ``## `` heading."""
    start = text.index(f"\n## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def fenced(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def commands(script: str) -> list[str]:
    """Shell command lines with backslash continuations joined, whitespace collapsed."""
    joined = re.sub(r"\\\n", " ", script)
    lines = (line.strip() for line in joined.splitlines())
    return [" ".join(line.split()) for line in lines if line and not line.startswith("#")]


def yaml_commands(block: str) -> list[str]:
    """The ``ratioscope ...`` commands of a workflow, from ``run: |`` scripts or lists."""
    joined = re.sub(r"\\\n\s*", " ", block)
    found = []
    for line in joined.splitlines():
        line = line.strip().removeprefix("- ").strip()
        if line.startswith("ratioscope "):
            found.append(" ".join(line.split()))
    return found


def run_steps(block: str) -> dict[str, str]:
    """``{step name: script}`` for the ``run: |`` steps of a GitHub Actions workflow."""
    steps, name, lines = {}, None, block.splitlines()
    for number, line in enumerate(lines):
        named = re.match(r"\s*- name: (.+)$", line)
        if named:
            name = named.group(1).strip()
        opened = re.match(r"(\s*)run: \|\s*$", line)
        if opened:
            indent, body = len(opened.group(1)), []
            for following in lines[number + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                body.append(following)
            steps[name] = textwrap.dedent("\n".join(body)).strip() + "\n"
    return steps


TEXT = GUIDE.read_text(encoding="utf-8")
WALK = section(TEXT, "Walk-through")
WALK_BLOCKS = fenced(WALK, "bash")
INSTALL_BLOCKS = [block for block in WALK_BLOCKS if "pip install" in block]
RUN_BLOCKS = [block for block in WALK_BLOCKS if "pip install" not in block]
WORKFLOW = next(block for block in fenced(TEXT, "yaml") if ".github/workflows" in block)


# ---------------------------------------------------------------------- running it


@dataclass
class BlockRun:
    script: str
    returncode: int
    stdout: str
    stderr: str
    failed: list[int]  # exit codes of the commands that failed, from the ERR trap

    @property
    def stated(self) -> list[int]:
        return [int(code) for code in STATED.findall(self.script)]

    @property
    def echoed(self) -> list[int]:
        return [int(code) for code in ECHOED.findall(self.stdout)]


def shims(directory: Path) -> dict[str, str]:
    """An environment where ``ratioscope`` and ``python`` are this interpreter's."""
    directory.mkdir()
    for name, target in (("ratioscope", "-m ratioscope "), ("python", "")):
        shim = directory / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {target}"$@"\n')
        shim.chmod(0o755)
    return {**os.environ, "PATH": f"{directory}{os.pathsep}{os.environ['PATH']}"}


def checkout(directory: Path) -> Path:
    """A scratch directory that looks like the repository root to the guide's paths."""
    directory.mkdir()
    for name in ("sample_data", "examples"):
        (directory / name).symlink_to(ROOT / name, target_is_directory=True)
    return directory


def run_block(script: str, cwd: Path, env: dict[str, str], log: Path) -> BlockRun:
    trap = f"trap 'echo $? >> \"{log}\"' ERR\n"
    done = subprocess.run(
        ["bash", "-c", trap + script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    failed = [int(code) for code in log.read_text().split()] if log.exists() else []
    log.unlink(missing_ok=True)
    return BlockRun(script, done.returncode, done.stdout, done.stderr, failed)


@pytest.fixture(scope="module")
def walk(tmp_path_factory) -> tuple[Path, dict[str, str], list[BlockRun]]:
    base = tmp_path_factory.mktemp("ci_guide")
    env = shims(base / "bin")
    cwd = checkout(base / "repo")
    runs = [run_block(block, cwd, env, base / "failed.txt") for block in RUN_BLOCKS]
    return cwd, env, runs


# --------------------------------------------------------------------------- tests


def test_the_guide_has_a_walk_through_with_every_exit_code():
    stated = [int(code) for block in RUN_BLOCKS for code in STATED.findall(block)]
    assert {0, 1, 2} <= set(stated)
    assert stated.index(0) < stated.index(1) < stated.index(2)


def test_install_is_from_the_checkout_with_cpu_torch():
    assert len(INSTALL_BLOCKS) == 1
    lines = commands(INSTALL_BLOCKS[0])
    assert "pip install ." in lines
    assert any("download.pytorch.org/whl/cpu" in line for line in lines)
    workflow = commands(run_steps(WORKFLOW)["Install ratioscope"])
    assert workflow == lines


def test_walk_through_exit_codes_are_as_stated(walk):
    _, _, runs = walk
    for run in runs:
        context = f"block:\n{run.script}\nstdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr}"
        assert run.echoed == run.stated, context
        assert run.failed == [code for code in run.stated if code != 0], context
        assert run.returncode == 0, context  # the last command of each block is an echo


def test_setup_error_writes_no_file(walk):
    cwd, _, runs = walk
    (typo,) = [run for run in runs if 2 in run.stated]
    junit = re.search(r"--junit (\S+)", typo.script).group(1)
    assert not (cwd / junit).exists()
    assert "ratioscope: error: " in typo.stderr
    assert "Traceback" not in typo.stderr


def test_outputs_quoted_in_the_guide_are_real(walk):
    """Verdict lines and FAIL reasons shown in the guide appear in the real output."""
    _, _, runs = walk
    stdout = "\n".join(run.stdout for run in runs)
    quoted = "\n".join(fenced(WALK, "text"))
    verdicts = re.findall(r"^((?:PASS|FAIL): .+)$", quoted, re.M)
    reasons = re.findall(r"^(FAIL rule \d+ [^:]+):", quoted, re.M)
    assert len(verdicts) >= 4 and len(reasons) >= 5
    for line in verdicts:
        assert line in stdout
    for prefix in reasons:
        assert f"\n{prefix}:" in stdout
    # the verdict's bottom line of the degraded run, as the guide quotes it
    (headline,) = re.findall(r"^(health: 1 problem: trainer noise) \(", quoted, re.M)
    assert f"\n{headline} (" in stdout
    # every report the walk-through names was written
    cwd, _, _ = walk
    for name in ("run.json", "eval.json", "degraded.json", "regressed.json"):
        assert (cwd / name).is_file(), name
    assert "ratioscope check: FAIL" in (cwd / "check-degraded.md").read_text()


def test_workflow_runs_the_walk_through_commands():
    walked = {line for block in RUN_BLOCKS for line in commands(block)}
    for block in fenced(TEXT, "yaml"):
        used = yaml_commands(block)
        assert used, block
        for line in used:
            assert line in walked, f"workflow command not in the walk-through: {line}"
    steps = run_steps(WORKFLOW)
    assert commands(steps["Analyze the run and evaluate the samples"]) == commands(RUN_BLOCKS[0])


def test_workflow_gate_step_passes_then_fails_on_the_degraded_run(walk, tmp_path):
    cwd, env, _ = walk
    gate = run_steps(WORKFLOW)["Regression gate"]
    summary = tmp_path / "step_summary.md"
    env = {**env, "GITHUB_STEP_SUMMARY": str(summary)}
    shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", gate]  # GitHub's default

    good = checkout(tmp_path / "good")
    degraded = checkout(tmp_path / "degraded")
    for target, run_json in ((good, "run.json"), (degraded, "degraded.json")):
        (target / "ci").mkdir()
        shutil.copytree(cwd / "ci" / "baseline", target / "ci" / "baseline")
        shutil.copy(cwd / run_json, target / "run.json")
        shutil.copy(cwd / "eval.json", target / "eval.json")

    passed = subprocess.run(shell, cwd=good, env=env, capture_output=True, text=True)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert summary.read_text().count("**ratioscope check: PASS**") == 2
    assert (good / "check-run.xml").is_file() and (good / "check-eval.xml").is_file()

    summary.unlink()
    failed = subprocess.run(shell, cwd=degraded, env=env, capture_output=True, text=True)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    text = summary.read_text()
    assert "**ratioscope check: FAIL**" in text and "**ratioscope check: PASS**" in text
    assert (degraded / "check-eval.xml").is_file()  # the second check ran despite the first
