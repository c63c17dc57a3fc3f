"""What the verdict after every step adds to ``timeline``'s CPU, per step.

A timeline reads each step, merges it into the pooled report of the run (which it needs
anyway: the pooled report equals ``analyze`` of every file), and, for the verdict after
each step, builds the pooled report of the steps so far (brief: the sections the verdict
reads, without their display tables), judges it and the step alone, and runs the
change, first-steps and trend rules. This script times those three parts in the same
run as the whole timeline (process CPU, one thread, no step cache, each run folded
``--repeat`` times) and prints them against the rest of the timeline, the peer:

    overhead = (pooled report + pooled verdict + step verdict) / (timeline - those)

Usage::

    python benchmarks/bench_step_verdict.py                      # the bundled run
    python benchmarks/bench_step_verdict.py /tmp/runs/healthy-s1/capture
    python benchmarks/bench_step_verdict.py --synthetic 256x1024 --steps 8
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "sample_data" / "verl_steps"


class Timed:
    """CPU seconds spent inside some library functions, by name (wrapped in place)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, owner: Any, attribute: str, name: str, when: Callable[..., bool]) -> None:
        original = getattr(owner, attribute)
        self.seconds.setdefault(name, 0.0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not when(*args, **kwargs):
                return original(*args, **kwargs)
            started = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[name] += time.process_time() - started

        setattr(owner, attribute, timed)

    def reset(self) -> None:
        for name in self.seconds:
            self.seconds[name] = 0.0


def per_step_parts() -> Timed:
    """Wrap the parts the verdict after each step adds."""
    from ratioscope.analysis.pipeline import ReportMerge
    from ratioscope.judgement.run_verdict import RunJudge
    from ratioscope.views.pooled_run import PooledRun

    timed = Timed()
    # the pooled report of the steps so far is the one built without state (the last
    # step's, with state, is the pooled report a timeline returns: not counted)
    timed.wrap(ReportMerge, "result", "pooled report", lambda *a, state=True, **k: not state)
    timed.wrap(PooledRun, "_judged", "pooled verdict", lambda *a, **k: True)
    timed.wrap(RunJudge, "add", "step verdict and rules", lambda *a, **k: True)
    return timed


def synthetic_run(shape: str, steps: int, folder: Path) -> Path:
    """``steps`` synthetic step files of B x T tokens (benchmarks/make_synthetic.py)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from make_synthetic import make_synthetic, write_synthetic

    rows, tokens = (int(x) for x in shape.lower().split("x"))
    for step in range(1, steps + 1):
        batch = make_synthetic(rows, tokens, seed=step, extras=["all"])
        write_synthetic(batch, folder / f"step_{step:04d}.pt")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", nargs="?", type=Path, default=BUNDLED, help="a run's steps")
    parser.add_argument("--repeat", type=int, default=3, help="folds of the run timed")
    parser.add_argument("--synthetic", default=None, help="BxT: a synthetic run instead")
    parser.add_argument("--steps", type=int, default=8, help="steps of the synthetic run")
    args = parser.parse_args(argv)
    import torch

    import ratioscope

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        run = args.run
        if args.synthetic:
            run = synthetic_run(args.synthetic, args.steps, Path(scratch))
        timed = per_step_parts()
        ratioscope.timeline(str(run), device="cpu")  # warm: imports, kernels
        timed.reset()
        started = time.process_time()
        for _ in range(args.repeat):
            result = ratioscope.timeline(str(run), device="cpu")
        whole = time.process_time() - started
    steps = len(result.steps) * args.repeat
    added = sum(timed.seconds.values())
    print(f"run: {args.synthetic or run} ({len(result.steps)} steps, folded {args.repeat}x)")
    print(f"{'part':<26} {'ms a step':>10}")
    for name, seconds in timed.seconds.items():
        print(f"{name:<26} {1000 * seconds / steps:>10.2f}")
    print(f"{'the rest (the peer)':<26} {1000 * (whole - added) / steps:>10.2f}")
    print(f"verdict after every step: +{100 * added / (whole - added):.1f} % of the timeline's CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
