"""The timeline in the terminal: steps as rows, a few headline columns, flagged cells marked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ratioscope.render.terminal.tables import DASH, print_table

if TYPE_CHECKING:
    from ratioscope.views.timeline import Headline, Timeline

#: the columns shown by default, beside the step, its files and its verdict: they fit 100
#: terminal columns (the raw ratios' switch frequency, informational, with --columns)
DEFAULT_COLUMNS = (
    "vitals.entropy.mean",
    "vitals.length.at_limit_share",
    "vitals.reward.mean",
    "mismatch.policy.k3",
    "mismatch.rollout.k3",
    "ratios.token.clip_fraction",
    "covariance.cumulative_share.0.01",
    # with --objectives
    "objectives.grpo.top_share",
    "objectives.opsm.flags.masked",
)
#: what marks a flagged cell
MARK = "*"


#: findings of a turning step shown in full (the rest are counted)
TURNING_FINDINGS = 2


def turning_lines(timeline: Timeline) -> list[Text]:
    """Why the run first turned yellow and red: the findings of that level at those
    steps ("first red at step 5: step 5 alone: policy drift ..."). The pooled verdict
    above lists what holds of the run now; the step that turned it may have been one
    step's spike, named nowhere else."""
    from ratioscope.render.terminal.verdict import STYLES, TAGS

    verdict = timeline.verdict
    if verdict is None:
        return []
    by_step = {s.step: s.verdict for s in timeline.steps}
    lines = []
    for level, step in (("yellow", verdict.first_yellow), ("red", verdict.first_red)):
        judged = by_step.get(step) if step is not None else None
        if judged is None or not hasattr(judged, "findings"):
            continue
        texts = [f.text for f in judged.findings if f.level == level]
        if not texts:
            continue
        more = len(texts) - TURNING_FINDINGS
        said = "; ".join(texts[:TURNING_FINDINGS]) + (f" (and {more} more)" if more > 0 else "")
        lines.append(
            Text.assemble(
                (f"  {TAGS[level]:<8}", STYLES[level]), f"first {level} at step {step}: {said}"
            )
        )
    return lines


def choose_columns(timeline: Timeline, columns: Sequence[str] | None) -> list[Headline]:
    """The headlines to show: ``columns`` (keys or short names, or "all"), else the
    defaults that the timeline has."""
    from ratioscope.views.timeline import headline

    if columns is None:
        keys = [h.key for h in timeline.headlines]
        return [headline(key) for key in DEFAULT_COLUMNS if key in keys]
    if list(columns) == ["all"]:
        return list(timeline.headlines)
    by_short = {h.short: h.key for h in timeline.headlines}
    return [headline(by_short.get(name, name)) for name in columns]


def show_timeline(
    timeline: Timeline, console: Console, columns: Sequence[str] | None = None
) -> None:
    """Print the per-step table and its legend."""
    shown = choose_columns(timeline, columns)
    table = Table(title=f"Timeline: {len(timeline.steps)} steps", title_justify="left")
    table.add_column("step", justify="right")
    table.add_column("files", justify="right")
    levels = timeline.levels()
    with_levels = any(level is not None for level in levels)
    if with_levels:
        table.add_column("verdict", justify="left")
    for item in shown:
        table.add_column(item.short, justify="right")
    for step, level in zip(timeline.steps, levels, strict=True):
        cells: list[str | Text] = [str(step.step), str(len(step.inputs))]
        if with_levels:
            cells.append(level_cell(level))
        for item in shown:
            cells.append(_cell(step.values.get(item.key), item.key in step.flags))
        table.add_row(*cells)
    print_table(console, table)
    for line in legend(timeline, shown):
        console.print(line, highlight=False)
    mechanics = mechanics_line(timeline)
    if mechanics:
        console.print(mechanics, highlight=False)
    law = performance_line(timeline)
    if law:
        console.print(law, highlight=False)


def performance_line(timeline: Timeline) -> str | None:
    """The entropy-performance law over the run in one sentence (None when not fitted)."""
    found = timeline.entropy_performance
    if found is None or found.fit.a is None or found.fit.b is None:
        return None
    fit = found.fit
    what = "correct share" if found.performance.endswith("correct_share") else "reward"
    ceiling = DASH if fit.ceiling is None else f"{fit.ceiling:.3g}"
    interval = (
        ""
        if fit.ceiling_interval is None
        else f" [{fit.ceiling_interval[0]:.3g}, {fit.ceiling_interval[1]:.3g}]"
    )
    head = (
        f"; the first {fit.head_steps} steps' fit predicts the other {fit.steps - fit.head_steps}"
        f" with RMSE {fit.holdout_rmse:.3g}"
        if fit.holdout_rmse is not None
        else ""
    )
    # a share cannot pass 1: a ceiling above it is the law extrapolated past its data
    beyond = (
        ", above the 1 a share can reach (the law extrapolated to H = 0)"
        if what == "correct share" and fit.ceiling is not None and fit.ceiling > 1
        else ""
    )
    return (
        f"entropy-performance law (Cui et al. 2025: R = -a exp(H) + b, R the {what}): over "
        f"{fit.steps} steps a = {fit.a:.3g}, b = {fit.b:.3g}, predicted ceiling b - a = "
        f"{ceiling}{interval} (95 %){beyond}{head} (docs/timeline.md)"
    )


def mechanics_line(timeline: Timeline) -> str | None:
    """The run's entropy mechanics in one sentence (None when not computed)."""
    fit = timeline.entropy_mechanics
    if fit is None:
        return None
    r = DASH if fit.correlation is None else f"{fit.correlation:.2f}"
    eta = DASH if fit.eta is None else f"{fit.eta:.3g}"
    agree = DASH if fit.sign_agreement is None else f"{fit.sign_agreement:.0%}"
    return (
        f"entropy mechanics (Cui et al. 2025, Thm 2: dH ~ -eta Cov(log pi, A)): over "
        f"{fit.steps} steps the observed change within the step has the predicted sign in "
        f"{agree} of them and correlates with -Cov at r = {r}; fitted eta = {eta} "
        "(docs/timeline.md)"
    )


#: how a step's verdict reads in the table: the word, and its style
LEVEL_CELLS = {"green": ("green", "green"), "yellow": ("yellow", "bold yellow"),
               "red": ("RED", "bold red")}  # fmt: skip


def level_cell(level: str | None) -> str | Text:
    """A step's verdict level as a table cell (the level word, coloured)."""
    if level is None:
        return DASH
    word, style = LEVEL_CELLS[level]
    return Text(word, style=style)


def _cell(value: float | None, flagged: bool) -> str | Text:
    text = DASH if value is None else f"{value:.3g}"
    if not flagged:
        return text + " "
    return Text(text + MARK, style="bold red")


def legend(timeline: Timeline, shown: Sequence[Headline]) -> list[str]:
    """The legend: the change rule, the columns' names, flags in columns not shown."""
    rule = timeline.params.get("change", {})
    lines = [
        "verdict: the level after each step, from the steps so far (the pooled report, "
        "that step alone, changes, first steps, trends); docs/health.md",
        f"{MARK} change: departs from the median of the last {rule.get('window')} steps by "
        f"more than {rule.get('k')} robust sd (1.4826 MAD, at least {rule.get('floor_rel')} "
        "of the median); see docs/timeline.md",
        "columns: " + "; ".join(f"{h.short} = {h.label}" for h in shown),
    ]
    keys = {h.key for h in shown}
    labels = {h.key: h.short for h in timeline.headlines}
    hidden = [
        f"step {step.step}: {', '.join(labels.get(k, k) for k in step.flags if k not in keys)}"
        for step in timeline.steps
        if any(k not in keys for k in step.flags)
    ]
    if hidden:
        lines.append("flags in columns not shown (--columns all): " + "; ".join(hidden))
    functions = [h.short for h in timeline.headlines if h.key not in keys and _is_function(h)]
    if functions:
        lines.append("each reward function's mean: --columns " + ",".join(functions) + " (or all)")
    return lines


def _is_function(item: Headline) -> bool:
    from ratioscope.views.timeline import function_name

    return function_name(item.key) is not None
