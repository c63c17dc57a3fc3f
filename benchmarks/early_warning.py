"""The per-step verdict on a corpus of real runs: how early it is red, and how often it is
wrong.

For each run of the corpus (``benchmarks/runs/make_runs.py``; the label of each is the
step where the trainer's own log says it went wrong, or none, by the rule of
``benchmarks/runs/labels.py``, written before the verdict's rules), ``ratioscope.timeline``
of its capture gives the verdict after every step, from the steps so far. Per run: the
label, the first yellow and the first red step, and the lead (label - first red). Over
the corpus:

- detection: the failing runs red at or before their label, and those red at least 3
  steps before it;
- false alarms: red and yellow steps of the healthy runs, per 1,000 steps, with the
  findings that made them (a yellow there should name a property that truly holds);
- runs of a failure setting that did not fail within their steps (censored: their
  outcome after the last step is unknown) are listed apart, counted neither way.

Usage::

    python benchmarks/runs/make_runs.py --out /tmp/runs   # the corpus (about 13 CPU-minutes)
    python benchmarks/early_warning.py /tmp/runs
    python benchmarks/early_warning.py sample_data/runs   # the bundled subset
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

#: the lead the issue asks of most failing runs (steps before the label)
LEAD = 3


def capture_of(run: Path) -> str:
    """Where a corpus run's capture is (its ``capture/`` folder)."""
    return str(run / "capture")


def judge_run(run: str) -> dict[str, Any]:
    """The per-step levels of one run, its label and scenario, and the CPU it took."""
    import torch

    import ratioscope

    torch.set_num_threads(1)
    started = time.process_time()
    summary = json.loads((Path(run) / "run.json").read_text())
    result = ratioscope.timeline(capture_of(Path(run)), device="cpu")
    steps = []
    for step in result.steps:
        verdict = step.verdict
        assert verdict is not None
        steps.append(
            {
                "step": step.step,
                "level": verdict.level,
                "findings": [(kind_of(f.key, f.text), f.level) for f in verdict.findings],
            }
        )
    return {
        "run": Path(run).name,
        "label": summary["label"],
        "expected": summary["scenario"]["expected"],
        "scenario": summary["scenario"]["name"],
        "steps": steps,
        "bottom_line": result.verdict.bottom_line() if result.verdict is not None else "",
        "cpu_seconds": time.process_time() - started,
    }


def kind_of(key: str, text: str) -> str:
    """A finding's rule, for the counts: the change rule, the run's first steps, a trend,
    the step alone, or the pooled report; with its key."""
    if "changed at step" in text:
        return f"change {key}"
    if key.startswith(("relative", "trend")):
        return key
    if text.startswith("step ") and " alone: " in text:
        return f"step alone {key}"
    return f"pooled {key}"


def first(steps: list[dict[str, Any]], levels: tuple[str, ...]) -> int | None:
    return next((s["step"] for s in steps if s["level"] in levels), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="the corpus folder (one folder per run)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, default=None, help="write the per-run results")
    args = parser.parse_args(argv)
    runs = sorted(str(p) for p in args.corpus.iterdir() if (p / "run.json").is_file())
    if not runs:
        print(f"{args.corpus}: no run (a folder with run.json)", file=sys.stderr)
        return 2
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(judge_run, runs))

    print(f"{'run':<22} {'label':>5} {'rule':<18} {'1st yel':>7} {'1st red':>7} {'lead':>5}")
    failing, healthy, censored = [], [], []
    for r in results:
        label = r["label"]["step"]
        yellow = first(r["steps"], ("yellow", "red"))
        red = first(r["steps"], ("red",))
        lead = None if label is None or red is None else label - red
        rule = r["label"]["rule"] or (
            "healthy" if r["expected"] in ("healthy", "either") else "did not fail"
        )
        print(
            f"{r['run']:<22} {label!s:>5} {rule:<18} {yellow!s:>7} {red!s:>7} "
            f"{'' if lead is None else lead:>5}"
        )
        if label is not None:
            failing.append((r, lead))
        elif r["expected"] in ("healthy", "either"):
            healthy.append(r)
        else:
            censored.append(r)

    detected = [lead for _, lead in failing if lead is not None and lead >= 0]
    early = [lead for lead in detected if lead >= LEAD]
    print()
    print(f"failing runs: {len(failing)}; red at or before the label: {len(detected)}; "
          f"red >= {LEAD} steps before it: {len(early)}")  # fmt: skip
    if detected:
        leads = sorted(detected)
        print(f"lead (label - first red) of the detected: median {leads[len(leads) // 2]}, "
              f"min {leads[0]}, max {leads[-1]}")  # fmt: skip
    missed = [r["run"] for r, lead in failing if lead is None or lead < 0]
    if missed:
        print(f"not red by their label: {', '.join(missed)}")
    steps = sum(len(r["steps"]) for r in healthy)
    red_steps = [(r["run"], s) for r in healthy for s in r["steps"] if s["level"] == "red"]
    yellow_steps = [(r["run"], s) for r in healthy for s in r["steps"] if s["level"] == "yellow"]
    print(
        f"healthy runs: {len(healthy)}, {steps} steps; red steps {len(red_steps)} "
        f"({1000 * len(red_steps) / max(steps, 1):.1f} per 1,000), yellow steps "
        f"{len(yellow_steps)} ({1000 * len(yellow_steps) / max(steps, 1):.1f} per 1,000)"
    )
    why = Counter(key for _, s in red_steps + yellow_steps for key, level in s["findings"])
    if why:
        print("findings on healthy steps: " + ", ".join(f"{k} {n}" for k, n in why.most_common()))
    for r in censored:
        red = first(r["steps"], ("red",))
        print(f"censored ({r['scenario']}, did not fail in {len(r['steps'])} steps): "
              f"{r['run']}, first red {red}")  # fmt: skip
    cpu = sum(r["cpu_seconds"] for r in results)
    total = sum(len(r["steps"]) for r in results)
    print(f"timeline CPU: {cpu:.0f} s for {total} steps ({1000 * cpu / total:.0f} ms a step)")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
