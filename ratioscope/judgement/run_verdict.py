"""A run's verdict at every step, from the steps so far (``timeline``, ``watch``).

After step N a user watching the run sees what ``ratioscope timeline`` of the steps up to
N says. :class:`RunJudge` gives it one step at a time, with work per step that does not
grow with the run:

1. the verdict of the pooled report of the steps so far (:func:`~ratioscope.judgement.
   verdict.verdict`);
2. the latest step judged on its own, so that a run that turns bad at step 3 of 30 is
   red at step 3, not once its bad steps outweigh the good ones in the pooled numbers;
3. the changes flagged so far (the change rule of :mod:`ratioscope.functional.
   changepoint`, which looks back only, so its flags are those of the run so far);
4. the later steps against the run's first steps (:class:`~ratioscope.judgement.verdict.
   FirstSteps`);
5. what moves fast (:mod:`ratioscope.judgement.trends`): entropy against the first steps
   and falling as Cui et al. predict, responses climbing to the length limit, drift or
   mismatch rising, ESS falling, and a reward function that rises while correctness falls.

The worst of them is the step's level; :class:`StepVerdict` keeps the level, the counts
and the yellow and red findings of each step (the timeline JSON's per-step ``verdict``).
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ratioscope.judgement.trends import TrendHistory, trend_findings
from ratioscope.judgement.verdict import (
    LEVELS,
    NAMED_STEPS,
    RELATIVE,
    Finding,
    FirstSteps,
    JudgedReport,
    Level,
    Thresholds,
    Verdict,
    named_steps,
    verdict,
)

#: the quantities a timeline judges against its first steps: those of a baseline report,
#: but the entropy, which the trend rules judge both ways with tighter bounds
FIRST_STEPS_QUANTITIES = tuple(item for item in RELATIVE if item.path != "vitals.entropy.mean")

#: the headlines whose change is a problem in one direction (the verdict judges them by
#: a threshold too): a rise ("up") or a fall ("down"); a change of any other headline
#: (a rising reward, the raw switch frequency) is informational
BAD_CHANGE: dict[str, str] = {
    "mismatch.policy.k3": "up",
    "mismatch.policy.ess": "down",
    "mismatch.rollout.k3": "up",
    "mismatch.rollout.ess": "down",
    "ratios.token.clip_fraction": "up",
    "covariance.cumulative_share.0.01": "up",
    "trust_region.degenerate_share": "up",
    "vitals.entropy.mean": "down",
    "vitals.length.at_limit_share": "up",
    "vitals.advantages.zero_share": "up",
    "vitals.equal_reward_groups.share": "up",
}


@dataclass(frozen=True)
class StepFinding:
    """A yellow or red finding as a step's verdict keeps it: what, how bad, the number
    and the sentence (the threshold's source is in the run's verdict and docs/health.md)."""

    key: str
    level: Level
    value: float | None
    text: str


@dataclass(frozen=True)
class StepVerdict:
    """What the verdict said after one step: its level, how many findings of each level,
    and the yellow and red ones (a green one says nothing a reader acts on)."""

    step: int
    level: Level
    counts: dict[str, int]
    findings: tuple[StepFinding, ...] = ()

    @classmethod
    def of(cls, step: int, judged: Verdict) -> StepVerdict:
        return cls(
            step=step,
            level=judged.level,
            counts={level: judged.count(level) for level in LEVELS},
            # a finding stands after many steps in a row: its sentence is kept once
            findings=tuple(
                StepFinding(sys.intern(f.key), f.level, f.value, sys.intern(f.text))
                for f in judged.findings
                if f.level != "green"
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        from ratioscope.io.documents import to_jsonable

        return to_jsonable(
            {"level": self.level, "counts": self.counts, "findings": list(self.findings)}
        )

    @classmethod
    def from_dict(cls, step: int, document: Mapping[str, Any]) -> StepVerdict:
        findings = tuple(
            StepFinding(
                key=str(item["key"]),
                level=item["level"],
                value=None if item.get("value") is None else float(item["value"]),
                text=str(item["text"]),
            )
            for item in document.get("findings") or ()
        )
        counts = {str(level): int((document.get("counts") or {}).get(level, 0)) for level in LEVELS}
        return cls(step, document["level"], counts, findings)


def first_step_at(verdicts: Sequence[StepVerdict], level: Level) -> int | None:
    """The first step whose level is ``level`` or worse (None: none)."""
    rank = LEVELS.index(level)
    return next((v.step for v in verdicts if LEVELS.index(v.level) >= rank), None)


#: steps a change that goes its bad way stays yellow, counted from the step it was flagged
#: at: the change rule's window (by then the new level is the history the rule judges
#: against, and a lasting shift of a quantity the verdict bounds is judged against the
#: run's first steps); later it is listed as informational unless flagged again. Without
#: it one flag kept every later step of a run yellow (docs/health.md).
CHANGE_MEMORY = 10


@dataclass(frozen=True)
class _Flag:
    """One flagged change: its step, its place among the steps added (0: the first), the
    value before it and the value at it."""

    step: int
    index: int
    before: float | None
    value: float | None


class ChangeFindings:
    """One finding per headline whose series was flagged by the change rule: yellow while
    a change that goes the way :data:`BAD_CHANGE` calls bad is at most
    :data:`CHANGE_MEMORY` steps old, else green (informational); built from the flags one
    step at a time."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        #: headline key -> its words, in the order the findings are listed
        self.labels = dict(labels)
        self.changes: dict[str, list[_Flag]] = {}
        #: the last value each headline had before the step being added
        self.last: dict[str, float | None] = {}
        #: steps added so far (a run that dumps every tenth step counts each dump once,
        #: as the change rule's window does)
        self.added = 0

    def add(self, step: int, values: Mapping[str, float | None], flags: Collection[str]) -> None:
        for key in self.labels:
            value = values.get(key)
            if key in flags:
                flag = _Flag(step, self.added, self.last.get(key), value)
                self.changes.setdefault(key, []).append(flag)
            if value is not None:
                self.last[key] = value
        self.added += 1

    def findings(self) -> list[Finding]:
        out = []
        for key, label in self.labels.items():
            flags = self.changes.get(key)
            if not flags:
                continue
            bad = [f for f in flags if bad_change(key, f.before, f.value)]
            recent = [f for f in bad if self._age(f) < CHANGE_MEMORY]
            shown = recent[-1] if recent else (bad[-1] if bad else flags[0])
            steps = [f.step for f in flags]
            text = (
                f"{label}: changed at step{'s' if len(steps) > 1 else ''} {_named_steps(steps)} "
                f"({_short(shown.before)} -> {_short(shown.value)} at step {shown.step}"
            )
            if recent:
                text += ")"
            elif bad:
                text += f"; more than {CHANGE_MEMORY} steps ago: informational)"
            else:
                text += ") (informational)"
            out.append(
                Finding(
                    key=key,
                    level="yellow" if recent else "green",
                    value=shown.value,
                    threshold=None,
                    text=text,
                    source="ratioscope's change rule (docs/timeline.md)",
                    name=f"{label} changed",
                )
            )
        return out

    def _age(self, flag: _Flag) -> int:
        """Steps added after ``flag``'s (0: it was flagged at the latest step)."""
        return self.added - 1 - flag.index


#: below these, a change of the quantity is a change of its rounding (the floors of the
#: verdict's relative findings, :data:`~ratioscope.judgement.verdict.RELATIVE`)
CHANGE_FLOORS: dict[str, float] = {item.path: item.floor for item in RELATIVE}


def change_floor(key: str) -> float | None:
    """The change rule's least scale for headline ``key``: a quantity bad when it rises
    moves by less than its :data:`CHANGE_FLOORS` floor in float rounding or by a token or
    two of a share, which is no change; None: no floor."""
    return CHANGE_FLOORS.get(key) if BAD_CHANGE.get(key) == "up" else None


def bad_change(key: str, before: float | None, value: float | None) -> bool:
    """Whether a flagged change of headline ``key`` goes its bad way (unknown: yes); a
    rise that stays below the quantity's floor (a train/inference k3 of 1e-13 becoming
    3e-13: float32 rounding) is not."""
    direction = BAD_CHANGE.get(key)
    if direction is None:
        return False
    if before is None or value is None:
        return True
    if direction == "up" and value <= CHANGE_FLOORS.get(key, 0.0):
        return False
    return value > before if direction == "up" else value < before


def _named_steps(steps: Sequence[int]) -> str:
    """The flagged steps of a change finding, as :func:`named_steps` names them."""
    return named_steps(steps[:NAMED_STEPS], steps[-2:], len(steps)).replace(" steps)", " changes)")


def _short(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


class RunJudge:
    """The verdict of a run after each of its steps (see the module).

    Args:
        thresholds: the verdict's thresholds (default :class:`Thresholds`).
        labels: the followed headlines, key -> words, for the change findings.
    """

    def __init__(
        self, thresholds: Thresholds | None = None, labels: Mapping[str, str] | None = None
    ) -> None:
        self.t = thresholds or Thresholds()
        self.changes = ChangeFindings(labels or {})
        self.first = FirstSteps(self.t, quantities=FIRST_STEPS_QUANTITIES)
        self.history = TrendHistory()
        self.verdicts: list[StepVerdict] = []
        self.current: Verdict | None = None

    def add(
        self,
        step: int,
        report: JudgedReport | Mapping[str, Any],
        *,
        pooled: JudgedReport | Verdict | None = None,
        values: Mapping[str, float | None] | None = None,
        flags: Collection[str] = (),
        own: Verdict | None = None,
    ) -> Verdict:
        """Judge the run after ``step``, whose own report is ``report``.

        Args:
            step: the step number (steps come in order).
            report: the step's own report (typed, or its JSON document with ``own``).
            pooled: the pooled report of the steps so far, or its verdict (None: the
                step's own, as for a run's first step).
            values: the step's headline values (key -> value) for the change findings.
            flags: the headlines the change rule flags at this step.
            own: the step's own verdict, where it is known (a cached step); else it is
                judged from ``report``.

        Returns:
            The verdict after this step (also :attr:`current`, and a :class:`StepVerdict`
            appended to :attr:`verdicts`).
        """
        if own is None:
            assert not isinstance(report, Mapping), "a report document needs its own verdict"
            own = verdict(report, self.t)
        latest = own
        if pooled is None:
            pooled_verdict = own
        elif isinstance(pooled, Verdict):
            pooled_verdict = pooled
        else:
            pooled_verdict = verdict(pooled, self.t)
        self.changes.add(step, values or {}, flags)
        self.first.add(step, report)
        self.history.add(step, report)
        findings = (
            _worse_of(pooled_verdict.findings, latest.findings, step)
            + tuple(self.changes.findings())
            + tuple(self.first.findings())
            + tuple(trend_findings(self.history, self.t))
        )
        judged = Verdict(findings, pooled_verdict.overridden, pooled_verdict.notes)
        self.current = judged
        self.verdicts.append(StepVerdict.of(step, judged))
        return judged


def _worse_of(
    pooled: Sequence[Finding], latest: Sequence[Finding], step: int
) -> tuple[Finding, ...]:
    """The pooled findings, each replaced by the latest step's of the same key where that
    one is worse (its text then says it is the step's own); the latest step's findings
    of keys the pooled report has not, where not green."""
    by_key = {f.key: f for f in latest}
    out = []
    for finding in pooled:
        own = by_key.pop(finding.key, None)
        if own is not None and LEVELS.index(own.level) > LEVELS.index(finding.level):
            out.append(_own(own, step))
        else:
            out.append(finding)
    out += [_own(f, step) for f in by_key.values() if f.level != "green"]
    return tuple(out)


def _own(finding: Finding, step: int) -> Finding:
    return replace(finding, text=f"step {step} alone: {finding.text}")
