"""False-alarm and detection rates of the timeline's change rule (functional/changepoint).

Stationary series (Gaussian, and Student-t with 3 degrees of freedom for heavy tails)
around a level of 1.0 with noise sd 0.1 (a 10 % coefficient of variation, above the
rule's relative floor): every flag is a false alarm, and the rate is per step that could
be flagged (steps with enough history). Then a jump of d noise standard deviations at
step 20 of 40: detected when the flag fires at step 20 exactly.

    python benchmarks/timeline_false_alarms.py [--seeds 2000] [--steps 40]
"""

from __future__ import annotations

import argparse

import numpy as np

from ratioscope.functional.changepoint import ChangeRule, change_flags

LEVEL, SD = 1.0, 0.1
JUMP_AT = 20


def noise(rng: np.random.Generator, kind: str, size: int) -> np.ndarray:
    if kind == "gaussian":
        return rng.normal(0.0, 1.0, size)
    # Student-t with 3 degrees of freedom scaled to unit variance
    return rng.standard_t(3, size) / np.sqrt(3.0)


def false_alarm_rate(kind: str, seeds: int, steps: int, rule: ChangeRule) -> float:
    flagged = possible = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        series = LEVEL + SD * noise(rng, kind, steps)
        flags = change_flags(series.tolist(), rule)
        flagged += sum(flags)
        possible += steps - rule.min_history
    return flagged / possible


def detection_rate(kind: str, seeds: int, steps: int, jump: float, rule: ChangeRule) -> float:
    hits = 0
    for seed in range(seeds):
        rng = np.random.default_rng(10_000 + seed)
        series = LEVEL + SD * noise(rng, kind, steps)
        series[JUMP_AT:] += jump * SD
        hits += change_flags(series.tolist(), rule)[JUMP_AT]
    return hits / seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--k", type=float, default=None, help="override ChangeRule.k")
    args = parser.parse_args()
    rule = ChangeRule() if args.k is None else ChangeRule(k=args.k)
    print(f"rule: {rule.to_dict()}")
    print(f"{args.seeds} seeds x {args.steps} steps, level {LEVEL}, noise sd {SD}")
    for kind in ("gaussian", "student-t3"):
        rate = false_alarm_rate(kind, args.seeds, args.steps, rule)
        print(
            f"{kind:>10}: false alarms per step {rate:.4f} "
            f"({rate * args.steps:.2f} per {args.steps}-step run)"
        )
        for jump in (3.0, 6.0, 10.0, 20.0):
            hit = detection_rate(kind, args.seeds, args.steps, jump, rule)
            print(f"{'':>10}  jump of {jump:>4.0f} sd at step {JUMP_AT}: detected {hit:.3f}")


if __name__ == "__main__":
    main()
