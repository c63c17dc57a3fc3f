"""The terminal transcripts in docs/, produced by the commands they show.

A transcript is a ```text block preceded by a marker line:

    <!-- transcript -->                      the output of the nearest ```bash block above
    <!-- transcript: COMMAND -->             the output of COMMAND, which the page shows
                                             (in a bash block or as inline code)
    <!-- transcript | from TEXT | lines N -->  an excerpt: N lines from the first that
                                             contains TEXT (``offset -1``: from the line
                                             before it; ``until TEXT``: up to the next line
                                             that contains TEXT; ``grep TEXT``: only the
                                             lines that contain TEXT; ``head N``: the first
                                             N lines, then ``...``)

A transcript block whose lines start with ``$ `` is a session: each ``$ COMMAND`` line is
followed by that command's output.

The output is stdout and stderr as a terminal interleaves them, of bash at a fixed width
of 100 columns. A bash block preceded by ``<!-- run -->`` is run too, its output not
shown (a set-up step, such as the baseline a later check reads). The blocks of one page
run in order, in one scratch directory that sees the repository's ``sample_data/`` and
``examples/``, so a page's steps build on each other as they do for a reader who follows
it.

    python docs/transcripts.py            # rewrite every transcript from its command
    python docs/transcripts.py --check    # exit 1 naming each transcript that differs

tests/test_transcripts.py runs the check.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
WIDTH = 100
#: what the scratch directory of a page sees of the repository
SHARED = ("sample_data", "examples")
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!-- (transcript|run)(:[^|]*?)?((?: \| [^|]+?)*) -->\s*$")


@dataclass
class Block:
    """A fenced block: its language, first and last content lines (0-based, the fence
    lines excluded), its text, and the marker before it ("transcript", "run" or "")."""

    language: str
    start: int
    end: int
    text: str
    marker: str
    command: str
    options: dict[str, str]


def blocks(lines: list[str]) -> list[Block]:
    """The fenced blocks of a page, in order."""
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        close = next(j for j in range(index + 1, len(lines)) if lines[j].startswith("```"))
        marker = MARKER.match(lines[index - 1]) if index else None
        command = (marker.group(2) or ":")[1:].strip() if marker else ""
        options: dict[str, str] = {}
        for part in (marker.group(3) if marker else "").split(" | ")[1:]:
            key, _, value = part.strip().partition(" ")
            options[key] = value.strip().strip('"')
        found.append(
            Block(
                opening.group(1), index + 1, close, "\n".join(lines[index + 1 : close]),
                marker.group(1) if marker else "", command, options,
            )
        )  # fmt: skip
        index = close + 1
    return found


def run_block(script: str, directory: Path) -> str:
    """The output of ``script`` run by bash in ``directory``, as a terminal of
    :data:`WIDTH` columns shows it (no colour, Python unbuffered so that stdout and stderr
    keep their order)."""
    env = {
        **os.environ,
        "COLUMNS": str(WIDTH),
        "LINES": "50",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(ROOT),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        ["bash", "-c", script], cwd=directory, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, check=False,
    )  # fmt: skip
    return "\n".join(line.rstrip() for line in done.stdout.rstrip("\n").splitlines())


def _shown(output: str, options: dict[str, str]) -> str:
    """The part of ``output`` the marker's options keep."""
    lines = output.splitlines()
    if "from" in options:
        starts = [i for i, line in enumerate(lines) if options["from"] in line]
        if not starts:
            raise ValueError(f"no line of the output contains {options['from']!r}")
        lines = lines[max(0, starts[0] + int(options.get("offset", "0"))) :]
    if "until" in options:
        ends = [i for i, line in enumerate(lines) if i and options["until"] in line]
        if not ends:
            raise ValueError(f"no line of the output contains {options['until']!r}")
        lines = lines[: ends[0]]
    if "grep" in options:
        lines = [line for line in lines if options["grep"] in line]
    if "lines" in options:
        lines = lines[: int(options["lines"])]
    head = options.get("head")
    if head is not None and len(lines) > int(head):
        lines = [*lines[: int(head)], "..."]
    return "\n".join(lines)


def render(page: Path) -> tuple[str, list[str]]:
    """The page with every transcript produced anew, and the transcripts that changed
    (named by page and line)."""
    text = page.read_text()
    lines = text.splitlines()
    found = blocks(lines)
    outputs: dict[str, str] = {}  # a command shown twice on a page runs once
    if not any(block.marker == "transcript" for block in found):
        return text, []
    replaced: dict[int, tuple[int, str]] = {}
    changed = []
    with tempfile.TemporaryDirectory(prefix="transcripts-") as scratch:
        directory = Path(scratch)
        for name in SHARED:
            (directory / name).symlink_to(ROOT / name, target_is_directory=True)
        last_bash: Block | None = None
        for block in found:
            if block.language == "bash":
                last_bash = block
                if block.marker == "run":
                    run_block(block.text, directory)
                continue
            if block.marker != "transcript":
                continue
            if block.text.startswith("$ ") and not block.command:
                output = _session(block.text, directory)
            else:
                if block.command:
                    if block.command not in " ".join(text.split()):
                        raise ValueError(f"{page.name}:{block.start}: the page does not show "
                                         f"the command {block.command!r}")  # fmt: skip
                    script = block.command
                elif last_bash is not None:
                    script = last_bash.text
                    last_bash = None  # a block's output is shown once
                else:
                    raise ValueError(f"{page.name}:{block.start}: a transcript without a command")
                if script not in outputs:
                    outputs[script] = run_block(script, directory)
                output = _shown(outputs[script], block.options)
            if output != block.text:
                changed.append(f"{_name(page)}:{block.start}")
            replaced[block.start] = (block.end, output)
    result: list[str] = []
    index = 0
    while index < len(lines):
        if index in replaced:
            end, output = replaced.pop(index)  # an empty block starts where it ends
            result.extend(output.splitlines())
            index = end
            continue
        result.append(lines[index])
        index += 1
    return "\n".join(result) + "\n", changed


def _session(text: str, directory: Path) -> str:
    """A ``$ COMMAND`` session: each command line, then its output."""
    shown = []
    for line in text.splitlines():
        if line.startswith("$ "):
            shown.append(line)
            output = run_block(line[2:], directory)
            if output:
                shown.append(output)
    return "\n".join(shown)


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def pages() -> list[Path]:
    """The pages with transcripts: docs/*.md."""
    return sorted(DOCS.glob("*.md"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Produce the transcripts of docs/.")
    parser.add_argument("--check", action="store_true", help="Only say which differ.")
    parser.add_argument("pages", nargs="*", type=Path, help="Pages (default: docs/*.md).")
    args = parser.parse_args(argv)
    stale = []
    for page in [p.resolve() for p in args.pages] or pages():
        text, changed = render(page)
        stale.extend(changed)
        if changed and not args.check:
            page.write_text(text)
    for name in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {name}")
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
