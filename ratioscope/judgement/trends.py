"""What moves fast in a run: rules over the last few steps and the run's first steps.

The rules of the per-step verdict (:class:`ratioscope.judgement.run_verdict.RunJudge`)
that look at a quantity over steps rather than at one report. Each reads the series of
the steps so far through :class:`TrendHistory`, which keeps the run's first steps and the
last few (constant memory per quantity), and gives findings keyed ``trend.<what>``:

- **entropy against the first steps**, both ways: a policy whose token entropy doubles
  is losing its sharpness (as a learning rate too high, or stale samples, make it), one
  whose entropy halves is collapsing;
- **entropy falling fast while Cov(log pi, A) > 0**: Cui et al. (2025, Theorem 2) predict
  the entropy change of a step as ``-eta * Cov(log pi, A)``, so a fall that the
  covariance says will go on;
- **responses climbing to the length limit**: the share at the limit rising step after
  step; and **held at the limit**: a fifth of the responses truncated step after step;
- **drift or train/inference mismatch rising** (k3) and **ESS falling**, step after step;
- **reward hacking**: a reward function that rises while the correct share falls.

docs/health.md lists every threshold with its source.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from statistics import median
from typing import Any

from ratioscope.judgement.verdict import (
    FIRST_STEPS,
    Finding,
    Level,
    Thresholds,
    report_value,
)

ENTROPY = "vitals.entropy.mean"
COVARIANCE = "vitals.entropy_mechanics.covariance"
AT_LIMIT = "vitals.length.at_limit_share"
CORRECT = "vitals.correct_share"
#: (path, words) of the quantities judged for a run of rises or falls
RISING = (("mismatch.policy.k3", "policy drift k3"), ("mismatch.rollout.k3", "train/inference k3"))
FALLING = (("mismatch.policy.ess", "policy ESS"), ("mismatch.rollout.ess", "train/inference ESS"))
#: the least k3 a run of rises is judged at (below it the numbers are rounding)
K3_FLOOR = 1e-4
#: the paths the history follows, besides each reward function's mean
FOLLOWED = (
    ENTROPY, COVARIANCE, AT_LIMIT, CORRECT, *(p for p, _ in RISING), *(p for p, _ in FALLING)
)  # fmt: skip


@dataclass
class Series:
    """One quantity of a run: its first steps' values and its last few."""

    first: list[float | None] = field(default_factory=list)
    recent: deque[float | None] = field(default_factory=deque)
    #: the largest value seen (a reward function's maximum, from its reports)
    maximum: float | None = None

    def base(self) -> float | None:
        """The median of the first steps' values (the first step's alone while the run
        has at most :data:`FIRST_STEPS` steps, as the first-steps findings read it)."""
        present = [v for v in self.first if v is not None]
        if not present:
            return None
        return present[0] if len(self.first) < FIRST_STEPS else float(median(present))

    def last(self, count: int) -> list[float] | None:
        """The last ``count`` values, or None unless all of them are there."""
        values = list(self.recent)[-count:]
        if len(values) < count or any(v is None for v in values):
            return None
        return [float(v) for v in values if v is not None]


class TrendHistory:
    """The series the trend rules read, fed one step report at a time."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self.steps: deque[int] = deque(maxlen=keep)
        self.count = 0
        self.series: dict[str, Series] = {}
        #: reward function name -> the series of its mean
        self.functions: dict[str, Series] = {}
        self.limit: float | None = None

    def add(self, step: int, report: Any) -> None:
        self.count += 1
        self.steps.append(step)
        for path in FOLLOWED:
            self._push(self.series.setdefault(path, Series()), report_value(report, path))
        names = _function_names(report)
        for name in names | set(self.functions):
            series = self.functions.setdefault(name, Series())
            self._push(series, report_value(report, f"vitals.reward.per_function.{name}.mean"))
            top = report_value(report, f"vitals.reward.per_function.{name}.maximum")
            if top is not None:
                series.maximum = top if series.maximum is None else max(series.maximum, top)

    def _push(self, series: Series, value: float | None) -> None:
        if self.count <= FIRST_STEPS:
            series.first.append(value)
        series.recent.append(value)
        while len(series.recent) > self.keep:
            series.recent.popleft()

    def get(self, path: str) -> Series:
        return self.series.get(path) or Series()


def _function_names(report: Any) -> set[str]:
    """The reward functions a report has (its JSON or its typed sections)."""
    node = report
    for part in ("vitals", "reward", "per_function"):
        if node is None:
            return set()
        node = node.get(part) if isinstance(node, Mapping) else getattr(node, part, None)
    return set(node) if isinstance(node, Mapping) else set()


def trend_findings(history: TrendHistory, t: Thresholds) -> list[Finding]:
    """Every trend rule's findings for the run so far (see the module)."""
    if history.count < 2:
        return []
    return [
        *_entropy_level(history, t),
        *_entropy_falling(history, t),
        *_climbing_to_limit(history, t),
        *_held_at_limit(history, t),
        *_runs(history, t),
        *_reward_hacking(history, t),
    ]


def _num(value: float) -> str:
    from ratioscope.judgement.verdict import _num as shown

    return shown(value)


def _entropy_level(history: TrendHistory, t: Thresholds) -> Iterator[Finding]:
    """Token entropy at the latest step against the first steps', both ways; a rise is
    red once it holds on each of the last ``trend_steps`` steps."""
    series = history.get(ENTROPY)
    base, now = series.base(), series.last(1)
    if base is None or now is None or base <= 0:
        return
    value = now[0]
    factor = value / base
    step = history.steps[-1]
    k = int(t.trend_steps)
    if factor >= 1:
        recent = series.last(k)
        held = recent is not None and history.count > k and min(recent) / base >= t.entropy_rise_red
        level: Level = "red" if held else "yellow" if factor >= t.entropy_rise_yellow else "green"
        bound = t.entropy_rise_red if level == "red" else t.entropy_rise_yellow
        field_name = "entropy_rise_red" if level == "red" else "entropy_rise_yellow"
        relation = (
            f"above {_num(bound)}x on each of the last {k} steps"
            if level == "red"
            else f"{'above' if level == 'yellow' else 'within'} {_num(bound)}x"
        )
        advice = ": the policy is losing its sharpness (a step size too large, stale samples)"
    else:
        level = _level(1 / factor if value > 0 else math.inf, 1 / t.entropy_fall_yellow,
                       1 / t.entropy_fall_red)  # fmt: skip
        bound = t.entropy_fall_red if level == "red" else t.entropy_fall_yellow
        field_name = "entropy_fall_red" if level == "red" else "entropy_fall_yellow"
        relation = f"{'below' if level != 'green' else 'within'} {_num(bound)}x"
        advice = ": entropy collapse, the policy stops exploring"
    yield Finding(
        "trend.entropy", level, value, bound,
        f"token entropy at step {step} = {_num(value)} nats, {_num(factor)}x the first steps' "
        f"{_num(base)}: {relation}" + (advice if level != "green" else ""),
        Thresholds.source(field_name), "entropy vs first steps",
    )  # fmt: skip


def _entropy_falling(history: TrendHistory, t: Thresholds) -> Iterator[Finding]:
    """Entropy fell by ``entropy_drop_yellow`` or more within the last steps, and the
    covariance of log pi and A says it goes on falling (Cui et al., Theorem 2)."""
    k = int(t.trend_steps)
    entropy = history.get(ENTROPY).last(k + 1)
    covariance = history.get(COVARIANCE).last(k)
    if entropy is None or covariance is None:
        return
    top, now = max(entropy[:-1]), entropy[-1]
    if top <= 0 or now > (1 - t.entropy_drop_yellow) * top or min(covariance) <= 0:
        return
    yield Finding(
        "trend.entropy_falling", "yellow", now, t.entropy_drop_yellow,
        f"token entropy fell from {_num(top)} to {_num(now)} nats within {k} steps "
        f"({_num(1 - now / top)} of it) and Cov(log pi, A) > 0 on each (last "
        f"{_num(covariance[-1])}): predicted to keep falling",
        Thresholds.source("entropy_drop_yellow"), "entropy falling",
    )  # fmt: skip


def _climbing_to_limit(history: TrendHistory, t: Thresholds) -> Iterator[Finding]:
    """The share of responses at the length limit rose on each of the last steps."""
    k = int(t.trend_steps)
    shares = history.get(AT_LIMIT).last(k + 1)
    if shares is None or not _monotone(shares, up=True) or shares[-1] < t.length_climb_yellow:
        return
    shown = " -> ".join(f"{100 * s:.0f} %" for s in shares)
    yield Finding(
        "trend.length_limit", "yellow", shares[-1], t.length_climb_yellow,
        f"responses at the length limit rose on each of the last {k} steps ({shown}): "
        "length blow-up (loops, rambling, a reward paid for length)",
        Thresholds.source("length_climb_yellow"), "climbing to the length limit",
    )  # fmt: skip


def _held_at_limit(history: TrendHistory, t: Thresholds) -> Iterator[Finding]:
    """The share of responses at the length limit at or above ``length_held_red`` on each
    of the last steps: red."""
    k = int(t.trend_steps)
    shares = history.get(AT_LIMIT).last(k)
    if shares is None or min(shares) < t.length_held_red:
        return
    shown = ", ".join(f"{100 * s:.0f} %" for s in shares)
    yield Finding(
        "trend.length_held", "red", min(shares), t.length_held_red,
        f"responses at the length limit on each of the last {k} steps ({shown}), at or "
        f"above {100 * t.length_held_red:.0f} % on each: a length blow-up that holds "
        "(rambling, loops, a reward paid for length or for an answer anywhere)",
        Thresholds.source("length_held_red"), "held at the length limit",
    )  # fmt: skip


def _runs(history: TrendHistory, t: Thresholds) -> Iterator[Finding]:
    """k3 rising, or ESS falling, on each of the last steps."""
    k = int(t.trend_steps)
    for path, words in RISING:
        values = history.get(path).last(k + 1)
        if values is None or not _monotone(values, up=True) or values[-1] < K3_FLOOR:
            continue
        factor = values[-1] / values[0] if values[0] > 0 else math.inf
        if factor < t.rise_factor_yellow:
            continue
        yield Finding(
            f"trend.{path}", "yellow", values[-1], t.rise_factor_yellow,
            f"{words} rose on each of the last {k} steps, {_num(values[0])} -> "
            f"{_num(values[-1])} ({_num(factor)}x)",
            Thresholds.source("rise_factor_yellow"), f"{words} rising",
        )  # fmt: skip
    for path, words in FALLING:
        values = history.get(path).last(k + 1)
        if values is None or not _monotone(values, up=False):
            continue
        if values[0] - values[-1] < t.ess_fall_yellow:
            continue
        yield Finding(
            f"trend.{path}", "yellow", values[-1], t.ess_fall_yellow,
            f"{words} fell on each of the last {k} steps, {_num(values[0])} -> "
            f"{_num(values[-1])}",
            Thresholds.source("ess_fall_yellow"), f"{words} falling",
        )  # fmt: skip


def _reward_hacking(history: TrendHistory, t: Thresholds) -> Iterator[Finding]:
    """A reward function rises (or sits at its maximum) while the correct share falls."""
    k = int(t.trend_steps)
    correct = history.get(CORRECT)
    right_base, right_now = correct.base(), correct.last(k)
    if right_base is None or right_now is None or right_base <= 0:
        return
    right = sum(right_now) / k
    fall = 1 - right / right_base
    if fall < t.hack_fall_yellow:
        return
    for name, series in sorted(history.functions.items()):
        base, now = series.base(), series.last(k)
        if base is None or now is None:
            continue
        mean = sum(now) / k
        rose = mean >= base + t.hack_rise_yellow * abs(base) and mean > base
        at_top = series.maximum is not None and series.maximum > 0 and mean >= 0.9 * series.maximum
        if not (rose or at_top):
            continue
        level: Level = "red" if fall >= t.hack_fall_red else "yellow"
        bound = t.hack_fall_red if level == "red" else t.hack_fall_yellow
        top = f", its maximum {_num(series.maximum)}" if series.maximum is not None else ""
        yield Finding(
            f"trend.reward_hacking.{name}", level, mean, bound,
            f"reward function '{name}' rose to {_num(mean)} (first steps {_num(base)}{top}) "
            f"while the correct share fell to {_num(right)} (first steps {_num(right_base)}, "
            f"{_num(fall)} of it) over the last {k} steps: the reward is earned without "
            "solving (reward hacking)",
            Thresholds.source("hack_fall_red" if level == "red" else "hack_fall_yellow"),
            "reward hacking",
        )  # fmt: skip


def _monotone(values: Sequence[float], up: bool) -> bool:
    pairs = list(pairwise(values))
    return all(b > a for a, b in pairs) if up else all(b < a for a, b in pairs)


def _level(factor: float, yellow: float, red: float) -> Level:
    return "red" if factor >= red else "yellow" if factor >= yellow else "green"
