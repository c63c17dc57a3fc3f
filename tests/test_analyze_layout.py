"""analyze leads with the answer: line budgets of its layouts, and the transcripts of
README.md and docs/getting-started.md, which must be what analyze prints.

Regenerate docs/getting-started.md with ``python docs/transcripts.py`` and the README's
with ``COLUMNS=100 ratioscope analyze sample_data/verl/`` (its first lines).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.render.terminal.overview import BRIEF_LINES, DEFAULT_LINES

ROOT = Path(__file__).resolve().parents[1]
VERL = ROOT / "sample_data" / "verl"
runner = CliRunner()
WIDTH = {"COLUMNS": "100"}
#: the marker that opens a checked transcript in a page
MARK = "<!-- analyze transcript -->"


@pytest.fixture(scope="module")
def printed() -> dict[str, tuple[list[str], list[str]]]:
    """layout -> (stdout lines, stderr lines) of analyze on the bundled run."""
    out = {}
    for name, options in {"default": [], "brief": ["-q"], "detail": ["--detail"]}.items():
        result = runner.invoke(app, ["analyze", str(VERL), *options], env=WIDTH)
        assert result.exit_code == 0, result.stderr
        out[name] = (result.stdout.splitlines(), result.stderr.splitlines())
    return out


def test_the_default_fits_60_lines_with_the_verdict_vitals_and_key_numbers(printed):
    stdout, stderr = printed["default"]
    assert len(stdout) + len(stderr) <= DEFAULT_LINES == 60
    text = "\n".join(stdout)
    assert stdout[0].startswith("health: ")
    for part in ("vitals:", "token entropy", "key numbers by section", "--detail"):
        assert part in text
    # the tables' titles (the last line names them, without a colon)
    for paper_table in ("CW-GRPO Table 1:", "FPA lambda sweep (", "QUATRO delta sweep ("):
        assert paper_table not in text


def test_quiet_prints_the_verdict_block_alone(printed):
    stdout, stderr = printed["brief"]
    assert 1 < len(stdout) + len(stderr) <= BRIEF_LINES == 15
    assert stdout[0].startswith("health: ") and not stderr
    assert not any("vitals" in line or "┃" in line for line in stdout)
    default, _ = printed["default"]
    assert default[: len(stdout)] == stdout  # the same block that opens the default


def test_detail_prints_every_table(printed):
    stdout, _ = printed["detail"]
    text = "\n".join(stdout)
    for table in ("CW-GRPO Table 1", "FPA lambda sweep", "QUATRO delta sweep", "token states"):
        assert table in text
    assert "vitals:" in text


def _transcript(page: str, mark: str = MARK, after: str = "") -> list[str]:
    """The text block after the page's marker ``mark`` (the first after ``after``),
    without the ``$`` line."""
    text = (ROOT / page).read_text()
    text = text[text.index(after) :] if after else text
    assert mark in text, f"{page} has no {mark}"
    block = re.search(re.escape(mark) + r"\s*```text\n(.*?)```", text, re.S)
    assert block is not None, f"{page}: no text block after {mark}"
    lines = block.group(1).rstrip("\n").splitlines()
    return [line for line in lines if not line.startswith("$ ")]


def test_the_getting_started_transcript_is_what_analyze_prints(printed):
    """Its transcript (docs/transcripts.py: stdout, then the warnings of stderr, then the
    files written) opens with the default layout, whole."""
    stdout, _ = printed["default"]
    page = "docs/getting-started.md"
    shown = _transcript(page, "<!-- transcript -->", after="## Analyse")
    assert shown[: len(stdout)] == [line.rstrip() for line in stdout]
    assert shown[len(stdout)].startswith("warning: ")


def test_the_readme_transcript_opens_what_analyze_prints(printed):
    stdout, _ = printed["default"]
    shown = _transcript("README.md")
    assert len(shown) >= 5
    assert shown == [line.rstrip() for line in stdout[: len(shown)]]
