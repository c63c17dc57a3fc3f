"""The label of a corpus run: the step where it goes wrong, or none, from the trainer's log.

These rules were written down before ratioscope's early-warning rules and read nothing
ratioscope computes: only what the trainer itself logs every step (``trainer_log.jsonl``
beside each run: the strict verifier's mean, each reward function's mean, the share of
groups whose rewards are all equal). They are what a person watching the trainer's own
dashboard would call "broken":

- **collapse**: the correctness reward's running mean (over the last ``WINDOW`` steps)
  falls below ``COLLAPSE_SHARE`` of the best running mean so far, once that best is at
  least ``MIN_BEST`` (a run that never learned anything cannot collapse). The label is
  the first such step.
- **reward hacking**: with a shaping reward (any reward function other than the
  correctness one), its running mean reaches ``HACK_SHARE`` of the function's maximum
  while the correctness running mean is at most its first running mean (it did not
  rise). The label is the first such step.
- **no learning signal**: the share of groups whose rewards are all equal is at least
  ``EQUAL_SHARE`` for ``WINDOW`` steps in a row. The label is the first of those steps.

The earliest of the three is the run's label; a run none of them fires on is healthy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: steps in a running mean, and in a row for "no learning signal"
WINDOW = 3
#: collapse: the running mean of correctness below this share of its best so far
COLLAPSE_SHARE = 0.5
#: collapse: a best running mean below this is no learning to lose
MIN_BEST = 0.2
#: reward hacking: a shaping function's running mean at this share of its maximum
HACK_SHARE = 0.9
#: no learning signal: this share of the groups with all rewards equal
EQUAL_SHARE = 0.75
#: the trainer-log key of the correctness reward's mean
CORRECT = "reward/correct"


@dataclass(frozen=True)
class Label:
    """A run's outcome: the step where it goes wrong (None: healthy) and the rule."""

    step: int | None
    rule: str | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "rule": self.rule, "detail": self.detail}


def running_mean(values: Sequence[float], window: int = WINDOW) -> list[float]:
    """Mean of each value and the ``window - 1`` before it (fewer at the start)."""
    out = []
    for index in range(len(values)):
        part = values[max(0, index - window + 1) : index + 1]
        out.append(sum(part) / len(part))
    return out


def _collapse(steps: Sequence[int], correct: Sequence[float]) -> tuple[int, str] | None:
    running = running_mean(correct)
    best = -1.0
    for step, value in zip(steps, running, strict=True):
        best = max(best, value)
        if best >= MIN_BEST and value < COLLAPSE_SHARE * best:
            return step, (
                f"correctness running mean {value:.3f} < {COLLAPSE_SHARE:g} x its best {best:.3f}"
            )
    return None


def _hacking(
    steps: Sequence[int],
    correct: Sequence[float],
    shaping: Mapping[str, Sequence[float]],
    maxima: Mapping[str, float],
) -> tuple[int, str] | None:
    if not shaping:
        return None
    right = running_mean(correct)
    found = []
    for name, values in shaping.items():
        running = running_mean(values)
        for index, step in enumerate(steps):
            if running[index] >= HACK_SHARE * maxima[name] and right[index] <= right[0]:
                found.append(
                    (
                        step,
                        f"{name} running mean {running[index]:.3f} >= {HACK_SHARE:g} x its "
                        f"maximum {maxima[name]:g} while correctness {right[index]:.3f} <= "
                        f"its first {right[0]:.3f}",
                    )
                )
                break
    return min(found) if found else None


def _no_signal(steps: Sequence[int], equal: Sequence[float]) -> tuple[int, str] | None:
    streak = 0
    for index, share in enumerate(equal):
        streak = streak + 1 if share >= EQUAL_SHARE else 0
        if streak == WINDOW:
            first = steps[index - WINDOW + 1]
            return first, (
                f"{share:.0%} of groups with equal rewards, >= {EQUAL_SHARE:.0%} for "
                f"{WINDOW} steps from step {first}"
            )
    return None


def label_run(log: Sequence[Mapping[str, Any]], maxima: Mapping[str, float]) -> Label:
    """The label of a run from its trainer log (one record per step, in order).

    ``maxima``: each shaping reward function's largest possible value, by log key.
    """
    steps = [int(record["step"]) for record in log]
    correct = [float(record[CORRECT]) for record in log]
    shaping = {
        key: [float(record[key]) for record in log]
        for key in log[0]
        if key.startswith("reward/") and key != CORRECT and key in maxima
    }
    equal = [float(record["groups/equal_reward_share"]) for record in log]
    candidates = [
        (found[0], rule, found[1])
        for rule, found in (
            ("collapse", _collapse(steps, correct)),
            ("reward hacking", _hacking(steps, correct, shaping, maxima)),
            ("no learning signal", _no_signal(steps, equal)),
        )
        if found is not None
    ]
    if not candidates:
        return Label(None, None, "no rule fired")
    step, rule, detail = min(candidates)
    return Label(step, rule, detail)


def read_log(path: str | Path) -> list[dict[str, Any]]:
    """The trainer log: one JSON object per line."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
