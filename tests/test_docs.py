"""The docs cannot fall behind the code: CLI reference, README commands, CI script."""

from __future__ import annotations

import re
from pathlib import Path

from ratioscope.cli.reference import render_reference

ROOT = Path(__file__).resolve().parents[1]


def test_cli_reference_is_up_to_date():
    stale = (ROOT / "docs" / "cli.md").read_text() != render_reference()
    assert not stale, "docs/cli.md is stale: python -m ratioscope.cli.reference > docs/cli.md"


def test_readme_starts_with_the_two_set_up_commands():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block is not None and text.index("```bash") < 40
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2
    assert (
        commands[0].startswith("pip install") and "ratioscope analyze sample_data/" in commands[0]
    )
    assert commands[1].startswith("pip install") and commands[1].endswith("pytest -q")


def test_ci_runs_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    assert "README.md" in script and "pytest" in script
    readme = (ROOT / "README.md").read_text()
    pattern = re.compile(r"^pip install .*&& *(python -m )?pytest", re.M)
    assert pattern.search(readme)
