"""The commands' outputs on the bundled data, byte for byte, from this tree and another.

A change that should not move a number (moving modules, renaming, a faster pass that
claims to be exact) is checked here: each command below runs once with this source tree
and once with a baseline tree (an earlier commit), both as fresh ``python -m
ratioscope`` processes in the same working folder (the bundled data linked in at the same
relative path, so every path a report records is the same), and the files they write
are compared byte for byte, but for the one timestamp a document records (``tool.created``,
the time it was written), which is masked in both before the comparison.

    python benchmarks/same_outputs.py --base 899ac6c          # a commit of this repository
    python benchmarks/same_outputs.py --baseline /tmp/before  # a source tree

``--base REV`` extracts the commit with ``git archive`` into a temporary folder. Exit 0
when every file is identical, 1 when any differs (the differing files are named, with
the first differing byte), 2 when a command fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (name, arguments, files written): the outputs the issue names, on the bundled data
COMMANDS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    (
        "analyze",
        ("analyze", "sample_data/verl/", "--json", "analyze.json", "--parquet", "seqs.parquet"),
        ("analyze.json", "seqs.parquet"),
    ),
    (
        "timeline",
        ("timeline", "sample_data/verl_steps/", "--json", "timeline.json"),
        ("timeline.json",),
    ),
    (
        "objectives",
        ("objectives", "sample_data/verl/", "--json", "objectives.json"),
        ("objectives.json",),
    ),
    (
        "report",
        (
            "report",
            "sample_data/verl_steps/",
            "--tokenizer",
            "sample_data/tokenizer.json",
            "--out",
            "report.html",
        ),
        ("report.html",),
    ),
    (
        "eval-ucc",
        ("eval-ucc", "sample_data/samples.jsonl", "--base", "base", "--json", "eval_ucc.json"),
        ("eval_ucc.json",),
    ),
    (
        "eval-passk",
        ("eval-passk", "sample_data/samples.jsonl", "--json", "eval_passk.json"),
        ("eval_passk.json",),
    ),
)


def run_tree(tree: Path, work: Path) -> dict[str, float]:
    """Every command with ``tree``'s package in ``work``; returns seconds per command."""
    work.mkdir(parents=True)
    (work / "sample_data").symlink_to(ROOT / "sample_data")
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "100"}
    located = subprocess.run(
        [sys.executable, "-c", "import ratioscope; print(ratioscope.__file__)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not Path(located).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"{tree}: python imports ratioscope from {located}, not this tree")
    seconds = {}
    for name, arguments, _ in COMMANDS:
        start = time.perf_counter()
        result = subprocess.run(
            [sys.executable, "-m", "ratioscope", *arguments, "-q"],
            cwd=work, env=env, capture_output=True, text=True,
        )  # fmt: skip
        seconds[name] = time.perf_counter() - start
        if result.returncode != 0:
            print(f"{tree}: ratioscope {' '.join(arguments)} exited {result.returncode}")
            print(result.stderr[-2000:])
            raise SystemExit(2)
    return seconds


#: the creation time in a report's ``tool`` block, in JSON and in the HTML that embeds it
_CREATED = re.compile(rb'("created":\s*")[0-9T:+.\-]+(")')


def contents(path: Path) -> bytes:
    """The file's bytes with the creation time masked."""
    return _CREATED.sub(rb"\1<created>\2", path.read_bytes())


def first_difference(left: bytes, right: bytes) -> str:
    """Where two files first differ: a byte offset, or their sizes."""
    for offset, (x, y) in enumerate(zip(left, right, strict=False)):
        if x != y:
            return f"first differing byte at {offset:,}"
    return f"sizes {len(left):,} and {len(right):,} bytes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--base", help="a commit of this repository to compare with")
    group.add_argument("--baseline", type=Path, help="a ratioscope source tree")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ratioscope-same-") as scratch:
        scratch_dir = Path(scratch)
        if args.base is not None:
            baseline = scratch_dir / "baseline-tree"
            baseline.mkdir()
            archive = subprocess.run(
                ["git", "archive", args.base, "ratioscope"],
                cwd=ROOT, capture_output=True, check=True,
            ).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", str(baseline)], input=archive, check=True)
            label = args.base
        else:
            baseline = args.baseline.resolve()
            label = str(baseline)
        if not (baseline / "ratioscope" / "__init__.py").is_file():
            raise SystemExit(f"{label}: not a ratioscope source tree")
        # the same folder name for both, so that nothing that records the working folder
        # differs: each run works in 'run', moved aside after
        times = {}
        for which, tree in (("this tree", ROOT), ("baseline", baseline)):
            times[which] = run_tree(tree, scratch_dir / "run")
            shutil.move(scratch_dir / "run", scratch_dir / which.replace(" ", "_"))
        print(f"{'command':<12} {'file':<18} {'this tree':>10} {'baseline':>10}  same bytes")
        differing = []
        for name, _, files in COMMANDS:
            for file in files:
                mine = scratch_dir / "this_tree" / file
                theirs = scratch_dir / "baseline" / file
                left, right = contents(mine), contents(theirs)
                same = left == right
                note = "yes" if same else f"NO: {first_difference(left, right)}"
                print(
                    f"{name:<12} {file:<18} {times['this tree'][name]:>9.1f}s "
                    f"{times['baseline'][name]:>9.1f}s  {note}"
                )
                if not same:
                    differing.append(file)
        if differing:
            print(f"{len(differing)} file(s) differ from {label}: {', '.join(differing)}")
            raise SystemExit(1)
        print(f"every file identical to {label}'s")


if __name__ == "__main__":
    main()
