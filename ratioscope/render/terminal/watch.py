"""What ``ratioscope watch`` shows: a live view on a terminal, one line a step elsewhere.

The live view (rich ``Live``) is rebuilt after each step: the run and how far behind
it the watch is, the verdict's bottom line and its yellow and red findings, the level
after each of the last steps as a strip of squares, a few vitals as sparklines, and the
latest events (a skipped step, the run folded again, ``--on-red`` run). Without a
terminal (a log file, CI) each step is one line: its level as a word, a few values and
the worst finding, so ``grep RED`` finds the step where the run broke.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text

from ratioscope.render.terminal.verdict import STYLES, TAGS, verdict_headline

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ratioscope.judgement.run_verdict import StepVerdict
    from ratioscope.judgement.verdict import Verdict
    from ratioscope.views.timeline import TimelineStep

#: the vitals drawn as sparklines, in order (those a run has)
SPARK_KEYS = (
    "vitals.reward.mean",
    "vitals.correct_share",
    "vitals.entropy.mean",
    "vitals.length.mean",
    "mismatch.policy.ess",
    "mismatch.rollout.k3",
    "ratios.token.clip_fraction",
)
#: the values one step's line shows
LINE_KEYS = (
    "vitals.reward.mean",
    "vitals.entropy.mean",
    "mismatch.policy.ess",
    "mismatch.rollout.k3",
)
#: how many steps the strip of levels and the sparklines cover
WINDOW = 60
#: eight heights of a sparkline
BLOCKS = "▁▂▃▄▅▆▇█"
SQUARE = "■"
#: how many events the live view keeps
EVENTS = 5


def sparkline(values: Sequence[float | None]) -> str:
    """One character a value, its height between the smallest and largest finite value
    (a space where there is none; all equal: the middle height)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return " " * len(values)
    low, high = min(finite), max(finite)
    chars = []
    for value in values:
        if value is None or not math.isfinite(value):
            chars.append(" ")
        elif high == low:
            chars.append(BLOCKS[3])
        else:
            chars.append(BLOCKS[round((value - low) / (high - low) * (len(BLOCKS) - 1))])
    return "".join(chars)


def short_value(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


@dataclass
class WatchState:
    """What the live view shows.

    Attributes:
        run: the watched paths, as typed.
        steps: the last steps folded (at most :data:`WINDOW`).
        labels: headline key -> short name.
        verdict: the verdict after the latest step.
        analysed: steps folded so far; waiting: steps being written; lag: seconds from
            the latest step's last write to its verdict.
        status: what the watch does now.
        events: the latest events, newest last.
    """

    run: str
    steps: list[TimelineStep] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    verdict: Verdict | None = None
    analysed: int = 0
    waiting: int = 0
    lag: float | None = None
    status: str = "looking at the run"
    events: deque[str] = field(default_factory=lambda: deque(maxlen=EVENTS))


def header(state: WatchState) -> Text:
    latest = f"latest step {state.steps[-1].step}" if state.steps else "no step yet"
    lag = "" if state.lag is None else f"  ·  lag {state.lag:.1f} s"
    waiting = f"  ·  {state.waiting} being written" if state.waiting else ""
    steps = f"{state.analysed} step{'s' if state.analysed != 1 else ''}"
    return Text.assemble(
        ("ratioscope watch  ", "bold"), state.run, f"  ·  {steps}  ·  {latest}{lag}{waiting}"
    )


def verdict_block(verdict: Verdict | None, limit: int = 6) -> list[Text]:
    """The bottom line, then the red and the yellow findings (at most ``limit``)."""
    if verdict is None:
        return [Text("health: no step analysed yet", style="dim")]
    lines = [Text(verdict_headline(verdict), style=STYLES[verdict.level])]
    worst = sorted(
        (f for f in verdict.findings if f.level != "green"),
        key=lambda f: f.level != "red",
    )
    for finding in worst[:limit]:
        lines.append(
            Text.assemble((f"  {TAGS[finding.level]:<8}", STYLES[finding.level]), finding.text)
        )
    if len(worst) > limit:
        lines.append(Text(f"  ... and {len(worst) - limit} more", style="dim"))
    return lines


def level_strip(steps: Sequence[TimelineStep]) -> Text:
    """``levels  12 ■■■■■ 42``: one square a step, coloured by its level."""
    text = Text("levels    ")
    if not steps:
        return text
    text.append(f"{steps[0].step} ")
    for step in steps:
        level = step.verdict.level if step.verdict is not None else None
        text.append(SQUARE, style=STYLES.get(level or "", "dim"))
    text.append(f" {steps[-1].step}")
    return text


def spark_table(steps: Sequence[TimelineStep], labels: dict[str, str]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(min_width=8)
    table.add_column()
    table.add_column(justify="right")
    for key in SPARK_KEYS:
        values = [step.values.get(key) for step in steps]
        if all(v is None for v in values):
            continue
        table.add_row(labels.get(key, key), sparkline(values), short_value(values[-1]))
    return table


def live_view(state: WatchState) -> RenderableType:
    """The whole live view (the bottom line names the first yellow and red steps)."""
    parts: list[RenderableType] = [header(state), *verdict_block(state.verdict)]
    parts.append(level_strip(state.steps))
    parts.append(spark_table(state.steps, state.labels))
    parts.extend(Text(event, style="dim") for event in state.events)
    parts.append(Text(state.status, style="dim italic"))
    return Group(*parts)


def step_line(step: TimelineStep, labels: dict[str, str]) -> Text:
    """One step without a terminal: ``step 12  RED     reward 0.5  ...  | worst finding``."""
    verdict: StepVerdict | None = step.verdict
    level = verdict.level if verdict is not None else None
    tag = TAGS.get(level or "", "—")
    values = "  ".join(
        f"{labels.get(key, key)} {short_value(step.values.get(key))}"
        for key in LINE_KEYS
        if key in step.values
    )
    line = Text.assemble(
        f"step {step.step:<6} ", (f"{tag:<7}", STYLES.get(level or "", "")), values
    )
    worst = None
    if verdict is not None and verdict.findings:
        worst = min(verdict.findings, key=lambda f: f.level != "red")
    if worst is not None:
        line.append(f"  | {worst.text}")
    return line
