"""The covariance section's five compiled passes, one by one, against a baseline tree.

``FusedKernelPasses`` (``ratioscope.functional.covariance_fused``) over the benchmark's
SYNTHETIC dump (``bench_analyze.py``'s file: B = 1,024, T = 4,096 by default, all
extras, made here when missing), the whole batch as one chunk, every pass timed on its own (best of
``--repeat`` rounds of all five): pass 0 the scopes' sums, 1 the sums of c and c^2 with
Clip-Cov's count, 2 the spread of c, 3 the sums of w, 4 the statistics the section
reports. Inside ``analyze`` the same passes share the CPU with the file's hash and the
other sections; here they run alone, so the numbers show what a change to the passes
does, not what it does to ``analyze`` (``bench_analyze.py`` measures that).

Each measurement is a fresh child process running the ratioscope of a source tree, the
trees alternating at each thread count so that both see the same load. The peer is the
baseline (``--baseline DIR``, or ``--base REV``: a commit of this repository extracted
with ``git archive``); beside it, and alone without one, the floor: one read of the four
tensors the passes read (a reduction each), timed in the same child. The totals the passes
leave are compared between the trees bit for bit.

    python benchmarks/bench_covariance_passes.py --base 5e27629
    python benchmarks/bench_covariance_passes.py --baseline /tmp/before --threads 1,2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
PASSES = ("0 scope sums", "1 c, c^2", "2 spread", "3 sum w", "4 statistics")

#: the child: times the passes of the ratioscope on its PYTHONPATH, prints JSON
_CHILD = r"""
import hashlib, json, sys, time
import numpy as np
import torch
from safetensors.numpy import load_file

path, threads, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
from ratioscope.functional.covariance_fused import FusedKernelPasses
from ratioscope.sections.covariance import CLIP_COV_BOUNDS, WEIGHT_BINS, WEIGHT_THRESHOLDS

arrays = load_file(path)
mask = torch.from_numpy(arrays["mask"])
log_probs = torch.from_numpy(arrays["log_probs"]).masked_fill(~mask, 0)
advantages = torch.from_numpy(arrays["advantages"]).masked_fill(~mask, 0)
old = torch.from_numpy(arrays["old_log_probs"])
log_ratio = (log_probs - old).masked_fill(~mask, 0)
group = torch.from_numpy(arrays["group"])


def passes():
    fused = FusedKernelPasses((0.2, 0.28), CLIP_COV_BOUNDS, WEIGHT_THRESHOLDS, WEIGHT_BINS)
    seconds = []
    for index in range(5):
        started = time.perf_counter()
        fused.add(index, log_probs, advantages, mask, group, log_ratio)
        seconds.append(time.perf_counter() - started)
    return fused, seconds


# the mask's bytes read as int64: a uint8 sum goes through an int64 copy of the mask (32
# MB of fresh memory a call without the CLI's allocator settings)
mask_words = mask.view(torch.int64) if mask.shape[1] % 8 == 0 else mask.view(torch.uint8)


def one_pass():
    # a reduction of each tensor: every byte read once
    started = time.perf_counter()
    for tensor in (log_probs, advantages, log_ratio, mask_words):
        float(tensor.sum())
    return time.perf_counter() - started


passes()  # compiled or loaded from numba's cache
best = None
for _ in range(repeat):
    fused, seconds = passes()
    best = seconds if best is None else [min(a, b) for a, b in zip(best, seconds)]
totals = fused.totals
leaves = [fused.sums, fused.c_sums, fused.spread, fused.w_sums, totals.c_counts,
          totals.w_counts, totals.normalised_counts, totals.weight_counts, totals.extremes,
          totals.c_sums, totals.moments, totals.below, totals.mass]
digest = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in leaves))
digest.update(str(fused.eligible).encode())
print(json.dumps({"passes": best, "floor": min(one_pass() for _ in range(repeat)),
                  "tokens": fused.tokens, "digest": digest.hexdigest()}))
"""


def measure(tree: Path, path: Path, threads: int, repeat: int) -> dict:
    """The child's numbers for the ratioscope of ``tree`` (PYTHONSAFEPATH: the working
    directory's copy does not shadow it)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}
    env["OMP_NUM_THREADS"] = str(threads)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(threads), str(repeat)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the passes of {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def extracted(revision: str, folder: Path) -> Path:
    """The source tree of ``revision`` (``git archive``) in ``folder``."""
    archive = subprocess.run(
        ["git", "-C", str(HERE), "archive", revision], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"--base {revision}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_dir = Path(tempfile.gettempdir()) / "ratioscope-bench"  # bench_analyze.py's
    parser.add_argument("--dir", type=Path, default=default_dir)
    parser.add_argument("--batch", "-B", type=int, default=1024)
    parser.add_argument("--tokens", "-T", type=int, default=4096)
    parser.add_argument("--threads", default="1,2", help="thread counts, comma separated")
    parser.add_argument("--repeat", type=int, default=7, help="rounds in a child (best kept)")
    parser.add_argument("--rounds", type=int, default=2, help="children per tree and count")
    peer = parser.add_mutually_exclusive_group()
    peer.add_argument("--baseline", type=Path, help="another ratioscope source tree")
    peer.add_argument("--base", help="a commit of this repository, as the baseline")
    args = parser.parse_args()

    sys.path.insert(0, str(HERE / "benchmarks"))
    from make_synthetic import benchmark_dump

    path = benchmark_dump(args.dir, args.batch, args.tokens)  # bench_analyze.py's file too
    with tempfile.TemporaryDirectory(prefix="bench_covariance_") as scratch:
        trees = {"this tree": HERE}
        if args.base:
            trees["baseline"] = extracted(args.base, Path(scratch))
        elif args.baseline is not None:
            if not (args.baseline / "ratioscope" / "__init__.py").is_file():
                raise SystemExit(f"--baseline {args.baseline}: not a ratioscope source tree")
            trees["baseline"] = args.baseline.resolve()
        for threads in (int(n) for n in args.threads.split(",")):
            runs: dict[str, list[dict]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, tree in trees.items():  # alternating: the same load for both
                    runs[name].append(measure(tree, path, threads, args.repeat))
            report(threads, runs)


def report(threads: int, runs: dict[str, list[dict]]) -> None:
    """One table per thread count: each pass's best time per tree, and the ratio."""
    best = {name: [min(r["passes"][i] for r in rs) for i in range(5)] for name, rs in runs.items()}
    first = runs["this tree"][0]
    print(f"\n{threads} thread(s), {first['tokens']:,} valid tokens, load "
          f"{os.getloadavg()[0]:.2f}; best of every round")  # fmt: skip
    names = list(runs)
    print(f"{'pass':<16}" + "".join(f"{name + ' ms':>16}" for name in names)
          + ("   ratio" if len(names) > 1 else ""))  # fmt: skip
    for index, label in enumerate((*PASSES, "all five")):
        values = [sum(best[n]) if index == 5 else best[n][index] for n in names]
        line = f"{label:<16}" + "".join(f"{v * 1e3:>16.1f}" for v in values)
        if len(names) > 1:
            line += f"   {values[0] / values[1]:5.2f}"
        print(line)
    floor = min(r["floor"] for r in runs["this tree"])
    print(f"floor, one read of log pi, A, log r and the mask: {floor * 1e3:.1f} ms "
          f"(all five passes of this tree: {sum(best['this tree']) / floor:.0f}x)")  # fmt: skip
    digests = {r["digest"] for rs in runs.values() for r in rs}
    same = "the same bits" if len(digests) == 1 else "DIFFERENT bits"
    print(f"totals of every run and tree: {same}")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
