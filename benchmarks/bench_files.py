"""The fixed cost of one more file: ``ratioscope timeline`` (or ``analyze``) of 20, 200
and 2,000 tiny step files, and the per-token work of the same tokens in one file.

Every file is a SYNTHETIC step of 16 sequences x 64 tokens (``make_synthetic``, every
optional key: advantages, groups, rewards, entropies, reference log-probs), named
``step_NNNNN.pt``. Each run is a fresh ``python -m ratioscope`` process (imports
included, as a user pays them); the slope between two runs is the cost of one more file:

    slope = (time(n2) - time(n1)) / (n2 - n1)

measured in wall seconds and in the CPU seconds of the child (on a busy machine the
wall time includes waiting for a core; the CPU time does not). The peer, measured in the
same run, is ``analyze`` of ONE file holding the rows of all the 2,000 steps: the same
tokens with one file's fixed cost, so its throughput is the per-token work alone. The
target (issue 27) is at most 20 ms per file beyond that per-token work: the slope less
the time the peer takes for one file's tokens.

    python benchmarks/bench_files.py                      # timeline, 20 / 200 / 2,000
    python benchmarks/bench_files.py --command analyze --sizes 20,200
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _child import measure
from make_synthetic import make_synthetic, write_synthetic

ROWS, TOKENS = 16, 64
TARGET_MS = 20.0


def write_steps(folder: Path, count: int) -> int:
    """``count`` tiny step files in ``folder``; returns their valid tokens."""
    folder.mkdir(parents=True, exist_ok=True)
    tokens = 0
    for step in range(count):
        batch = make_synthetic(ROWS, TOKENS, seed=step, extras=("all",))
        tokens += int(batch["mask"].sum())
        write_synthetic(batch, folder / f"step_{step:05d}.pt")
    return tokens


def write_one_file(path: Path, count: int) -> int:
    """One file with the rows of ``count`` steps (seeds as the step files'; groups
    renumbered so that they stay apart); returns its valid tokens."""
    import torch

    batches = [make_synthetic(ROWS, TOKENS, seed=step, extras=("all",)) for step in range(count)]
    merged = {}
    for key in batches[0]:
        if key == "group":
            offsets = [b["group"] + index * (int(b["group"].max()) + 1) for index, b in
                       enumerate(batches)]  # fmt: skip
            merged[key] = torch.cat(offsets)
        else:
            merged[key] = torch.cat([b[key] for b in batches])
    write_synthetic(merged, path)
    return int(merged["mask"].sum())


def run(arguments: list[str], log: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    measured = measure(arguments, log)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return measured.seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", choices=("timeline", "analyze"), default="timeline")
    parser.add_argument("--sizes", default="20,200,2000", help="numbers of files")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size (best kept)")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.sizes.split(","))
    with tempfile.TemporaryDirectory(prefix="bench_files_") as scratch:
        root = Path(scratch)
        tokens = write_steps(root / "all", sizes[-1])
        times: dict[int, tuple[float, float]] = {}
        for size in sizes:
            folder = root / f"n{size}"
            folder.mkdir()
            for step in range(size):
                name = f"step_{step:05d}.pt"
                os.link(root / "all" / name, folder / name)
            runs = [
                run([args.command, str(folder), "-q", "--json", str(root / f"{size}.json")],
                    root / f"{size}.log")
                for _ in range(args.repeat)
            ]  # fmt: skip
            times[size] = min(runs)
            wall, cpu = times[size]
            print(f"{args.command} of {size:>5} files: {wall:7.2f} s wall, {cpu:7.2f} s CPU")
        print(f"slope (ms per extra file), target <= {TARGET_MS:g}:")
        for low, high in itertools.pairwise(sizes):
            wall = (times[high][0] - times[low][0]) / (high - low) * 1e3
            cpu = (times[high][1] - times[low][1]) / (high - low) * 1e3
            print(f"  {low:>5} -> {high:>5}: {wall:6.1f} ms wall ({wall / TARGET_MS:.2f} x "
                  f"target), {cpu:6.1f} ms CPU ({cpu / TARGET_MS:.2f} x target)")  # fmt: skip
        largest = sizes[-1]
        one = root / "one.pt"
        peer_tokens = write_one_file(one, largest)
        peer_wall, peer_cpu = run(["analyze", str(one), "-q", "--json", str(root / "one.json")],
                                  root / "one.log")  # fmt: skip
        wall, cpu = times[largest]
        print(
            f"per-token throughput, {tokens:,} tokens in {largest} files: "
            f"{tokens / wall / 1e3:,.1f} k tokens/s wall ({tokens / cpu / 1e3:,.1f} k/s CPU)"
        )
        print(
            f"peer, the same {peer_tokens:,} tokens in one file (analyze): "
            f"{peer_tokens / peer_wall / 1e3:,.1f} k tokens/s wall "
            f"({peer_tokens / peer_cpu / 1e3:,.1f} k/s CPU), {peer_wall:.2f} s"
        )
        # the per-token work of one more file, at the peer's throughput, and the rest
        per_file = tokens / largest
        work_wall, work_cpu = per_file / peer_tokens * peer_wall, per_file / peer_tokens * peer_cpu
        low, high = sizes[-2], sizes[-1]
        slope_wall = (times[high][0] - times[low][0]) / (high - low)
        slope_cpu = (times[high][1] - times[low][1]) / (high - low)
        print(
            f"per-token work of one file ({per_file:.0f} tokens): {work_wall * 1e3:.1f} ms wall, "
            f"{work_cpu * 1e3:.1f} ms CPU"
        )
        print(
            f"overhead per file beyond it ({low} -> {high}): "
            f"{(slope_wall - work_wall) * 1e3:.1f} ms wall, {(slope_cpu - work_cpu) * 1e3:.1f} ms "
            f"CPU (target <= {TARGET_MS:g})"
        )
        print(f"ratio, {largest} files / one file: {wall / peer_wall:.1f} x wall, "
              f"{cpu / peer_cpu:.1f} x CPU")  # fmt: skip


if __name__ == "__main__":
    main()
