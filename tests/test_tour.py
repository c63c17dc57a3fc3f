"""Every command of the README's short tour and of docs/getting-started.md runs as written.

Each block is run in order in a fresh directory that holds only the bundled
``sample_data/`` and ``examples/`` (so the tour makes its own baseline and shards), with
the ``ratioscope`` of this environment; each command must exit 0 as the docs say. The
install lines are left out (the suite runs installed). docs/ci.md's walk-through has its
own test (tests/test_ci_guide.py), with the exit codes it states.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every command of the tour, in order: the slow tier

ROOT = Path(__file__).resolve().parents[1]


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def _commands(blocks: list[str]) -> list[str]:
    lines = [line for block in blocks for line in block.splitlines()]
    return [line for line in lines if line.strip() and not line.startswith("pip install")]


def _tour() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## A short tour", 1)[1].split("\n## ", 1)[0]
    return _commands(_bash_blocks(section))


def _getting_started() -> list[str]:
    return _commands(_bash_blocks((ROOT / "docs" / "getting-started.md").read_text()))


def _run_in_fresh_directory(commands: list[str], directory: Path) -> None:
    for name in ("sample_data", "examples"):
        (directory / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command in commands:
        result = subprocess.run(
            ["bash", "-c", command], cwd=directory, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, f"{command}\n{result.stderr[-2000:]}"


def test_the_commands_are_found():
    tour, guide = _tour(), _getting_started()
    assert len(tour) >= 10 and any(c.startswith("ratioscope check") for c in tour)
    assert any(c.startswith("ratioscope merge") for c in tour)
    assert len(guide) >= 8 and any(c.startswith("ratioscope info") for c in guide)


@pytest.mark.parametrize("source", ["README.md", "docs/getting-started.md"])
def test_every_command_runs_as_written(source: str, tmp_path: Path) -> None:
    commands = _tour() if source == "README.md" else _getting_started()
    _run_in_fresh_directory(commands, tmp_path)
