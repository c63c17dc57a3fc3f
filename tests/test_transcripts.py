"""The transcripts in docs/ are what their commands print (docs/transcripts.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: output blocks that are not transcripts of a bundled file, and why
NOT_TRANSCRIPTS = {
    # generated from --help and tested by tests/test_docs.py
    "cli.md": "the CLI reference",
    # benchmark runs: timings and memory of one machine, stated with its load
    "performance.md": "benchmark output",
    "scale.md": "benchmark output",
}


def _module():
    spec = importlib.util.spec_from_file_location("transcripts", DOCS / "transcripts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


transcripts = _module()


def _pages_with_transcripts() -> list[Path]:
    return [
        page
        for page in sorted(DOCS.glob("*.md"))
        if any(b.marker == "transcript" for b in transcripts.blocks(page.read_text().splitlines()))
    ]


def test_markers_and_excerpts_are_read_as_documented():
    lines = [
        "<!-- run -->",
        "```bash",
        "ratioscope analyze sample_data/verl/ --json run.json -q",
        "```",
        '<!-- transcript: ratioscope info run.json | from "keys" | lines 2 -->',
        "```text",
        "old",
        "```",
    ]
    run, shown = transcripts.blocks(lines)
    assert (run.marker, run.language, run.command) == ("run", "bash", "")
    assert (shown.marker, shown.command) == ("transcript", "ratioscope info run.json")
    assert shown.options == {"from": "keys", "lines": "2"}
    assert (shown.start, shown.end, shown.text) == (6, 7, "old")
    output = "title\nkeys\n a\n b\n c"
    assert transcripts._shown(output, shown.options) == "keys\n a"
    assert transcripts._shown(output, {"head": "2"}) == "title\nkeys\n..."


def test_every_output_block_of_the_docs_is_a_transcript():
    """A ```text block (or a ``$ command`` session) anywhere in docs/ is produced by its
    command, except in the pages listed with their reason and the blocks marked
    ``<!-- not a transcript: REASON -->``."""
    missing = []
    for page in sorted(DOCS.glob("*.md")):
        if page.name in NOT_TRANSCRIPTS:
            continue
        for block in transcripts.blocks(page.read_text().splitlines()):
            is_output = block.language == "text" or (
                block.language == "" and block.text.startswith("$ ")
            )
            lines = page.read_text().splitlines()
            reason = lines[block.start - 2] if block.start >= 2 else ""
            excused = reason.startswith("<!-- not a transcript: ")
            if is_output and block.marker != "transcript" and not excused:
                missing.append(f"{page.name}:{block.start}")
    assert not missing, f"output blocks without a <!-- transcript --> marker: {missing}"


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages_with_transcripts(), ids=lambda page: page.name)
def test_transcripts_are_what_their_commands_print(page):
    _, changed = transcripts.render(page)
    assert not changed, f"stale transcripts (python docs/transcripts.py rewrites them): {changed}"
