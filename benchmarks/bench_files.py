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

``--baseline DIR`` times another ratioscope source tree (an earlier commit:
``git archive COMMIT | tar -x -C DIR``) in the same session, each size run by both trees
one after the other so that both see the same load, and prints the ratio of their
slopes. The one-minute load average is printed beside each run: on a shared machine the
CPU seconds are the numbers to read, and even they grow with the load (cache misses,
threads spinning while they wait for a core).

    python benchmarks/bench_files.py                      # timeline, 20 / 200 / 2,000
    python benchmarks/bench_files.py --command analyze --sizes 20,200
    python benchmarks/bench_files.py --baseline /tmp/before --repeat 2
    python benchmarks/bench_files.py --sizes 20,200 --no-cache   # without the step cache

``timeline`` keeps each step in the step cache by default (docs/watch.md): a first read
writes every step's entry (a JSON document of the step's report and state), which the
slope includes; ``--no-cache`` measures without it.
"""

from __future__ import annotations

import argparse
import itertools
import math
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


#: this tree, imported by the children (before any installed ratioscope)
HERE = Path(__file__).resolve().parents[1]


def run(arguments: list[str], log: Path, tree: Path = HERE) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one child process running the ratioscope of
    ``tree`` (``PYTHONSAFEPATH``: the working directory's copy does not shadow it)."""
    env = {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    measured = measure(arguments, log, env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return measured.seconds, cpu


def load() -> str:
    """The one-minute load average, to print beside a run."""
    return f"load {os.getloadavg()[0]:.1f}"


def slopes(
    name: str, sizes: list[int], times: dict[int, tuple[float, float]]
) -> tuple[float, float]:
    """Print the slopes between consecutive sizes; return the last (wall, CPU) seconds."""
    print(f"slope of {name} (ms per extra file), target <= {TARGET_MS:g}:")
    wall = cpu = math.nan
    for low, high in itertools.pairwise(sizes):
        wall = (times[high][0] - times[low][0]) / (high - low)
        cpu = (times[high][1] - times[low][1]) / (high - low)
        ms_wall, ms_cpu = wall * 1e3, cpu * 1e3
        print(f"  {low:>5} -> {high:>5}: {ms_wall:6.1f} ms wall ({ms_wall / TARGET_MS:.2f} x "
              f"target), {ms_cpu:6.1f} ms CPU ({ms_cpu / TARGET_MS:.2f} x target)")  # fmt: skip
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", choices=("timeline", "analyze"), default="timeline")
    parser.add_argument("--sizes", default="20,200,2000", help="numbers of files")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size (best kept)")
    parser.add_argument(
        "--baseline", type=Path, default=None,
        help="another ratioscope source tree, timed in the same session",
    )  # fmt: skip
    parser.add_argument(
        "--no-cache", action="store_true",
        help="timeline without the step cache (the cost of writing each step's entry left out)",
    )  # fmt: skip
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.sizes.split(","))
    trees = {"this tree": HERE}
    if args.baseline is not None:
        if not (args.baseline / "ratioscope" / "__init__.py").is_file():
            raise SystemExit(f"--baseline {args.baseline}: not a ratioscope source tree")
        trees["baseline"] = args.baseline.resolve()
    with tempfile.TemporaryDirectory(prefix="bench_files_") as scratch:
        root = Path(scratch)
        tokens = write_steps(root / "all", sizes[-1])
        times: dict[str, dict[int, tuple[float, float]]] = {name: {} for name in trees}
        for size in sizes:
            folder = root / f"n{size}"
            folder.mkdir()
            for step in range(size):
                name = f"step_{step:05d}.pt"
                os.link(root / "all" / name, folder / name)
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for _ in range(args.repeat):
                for name, tree in trees.items():  # the trees alternate: the same load
                    command = [
                        args.command,
                        str(folder),
                        "-q",
                        "--json",
                        str(root / f"{size}.json"),
                    ]
                    if args.no_cache and args.command == "timeline":
                        command.append("--no-cache")
                    runs[name].append(run(command, root / f"{size}.log", tree))
                    wall, cpu = runs[name][-1]
                    print(f"{args.command} of {size:>5} files ({name}): {wall:7.2f} s wall, "
                          f"{cpu:7.2f} s CPU ({load()})", flush=True)  # fmt: skip
            for name in trees:
                times[name][size] = min(runs[name])
        last = {name: slopes(name, sizes, times[name]) for name in trees}
        largest = sizes[-1]
        one = root / "one.pt"
        peer_tokens = write_one_file(one, largest)
        peer_wall, peer_cpu = run(["analyze", str(one), "-q", "--json", str(root / "one.json")],
                                  root / "one.log")  # fmt: skip
        wall, cpu = times["this tree"][largest]
        print(
            f"per-token throughput, {tokens:,} tokens in {largest} files: "
            f"{tokens / wall / 1e3:,.1f} k tokens/s wall ({tokens / cpu / 1e3:,.1f} k/s CPU)"
        )
        print(
            f"peer, the same {peer_tokens:,} tokens in one file (analyze, this tree): "
            f"{peer_tokens / peer_wall / 1e3:,.1f} k tokens/s wall "
            f"({peer_tokens / peer_cpu / 1e3:,.1f} k/s CPU), {peer_wall:.2f} s ({load()})"
        )
        # the per-token work of one more file, at the peer's throughput, and the rest
        per_file = tokens / largest
        work_wall, work_cpu = per_file / peer_tokens * peer_wall, per_file / peer_tokens * peer_cpu
        print(
            f"per-token work of one file ({per_file:.0f} tokens): {work_wall * 1e3:.1f} ms wall, "
            f"{work_cpu * 1e3:.1f} ms CPU"
        )
        low, high = sizes[-2], sizes[-1]
        for name, (slope_wall, slope_cpu) in last.items():
            print(
                f"overhead per file beyond it ({name}, {low} -> {high}): "
                f"{(slope_wall - work_wall) * 1e3:.1f} ms wall, "
                f"{(slope_cpu - work_cpu) * 1e3:.1f} ms CPU (target <= {TARGET_MS:g})"
            )
        print(f"ratio, {largest} files / one file: {wall / peer_wall:.1f} x wall, "
              f"{cpu / peer_cpu:.1f} x CPU")  # fmt: skip
        if "baseline" in last:
            (new_wall, new_cpu), (old_wall, old_cpu) = last["this tree"], last["baseline"]
            print(f"ratio of the slopes, this tree / baseline ({low} -> {high}): "
                  f"{new_wall / old_wall:.2f} wall, {new_cpu / old_cpu:.2f} CPU")  # fmt: skip


if __name__ == "__main__":
    main()
