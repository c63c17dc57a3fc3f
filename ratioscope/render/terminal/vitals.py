"""The vitals table of ``analyze``: one row per vital sign, its value and the detail."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ratioscope.render.terminal.tables import DASH, num, print_table, share

if TYPE_CHECKING:
    from ratioscope.report.model import Report
    from ratioscope.sections.vitals import VitalsSection


def show_vitals(report: Report, console: Console) -> None:
    """The vitals table, when the report has the section (reports made before it do not)."""
    if report.vitals is not None:
        print_table(console, vitals_table(report.vitals))
        if report.vitals.length.note:
            console.print(Text(f"note: {report.vitals.length.note}", style="dim"))


def _maybe(value: float | None, digits: int = 4) -> str:
    return DASH if value is None else num(value, digits)


def vitals_rows(section: VitalsSection) -> list[tuple[str, str, str]]:
    """(vital, value, detail) per row; parts the inputs cannot feed are left out."""
    rows: list[tuple[str, str, str]] = []
    entropy = section.entropy
    if entropy is not None:
        detail = []
        if entropy.distribution is not None:
            q = entropy.distribution.quantiles
            detail.append(f"p50 {_maybe(q.get('0.5'))}, p95 {_maybe(q.get('0.95'))}")
        if entropy.correct_mean is not None or entropy.incorrect_mean is not None:
            detail.append(
                f"correct {_maybe(entropy.correct_mean)} / incorrect "
                f"{_maybe(entropy.incorrect_mean)}"
            )
        if entropy.change_mean is not None:
            detail.append(f"change in step {num(entropy.change_mean, 3)}")
        elif entropy.old_mean is not None:
            detail.append(f"old policy {num(entropy.old_mean)}")
        rows.append(("token entropy (nats)", _maybe(entropy.mean), "; ".join(detail)))
    length = section.length
    q = length.distribution.quantiles
    limit = (
        "length limit unknown (see the note)"
        if length.limit is None
        else f"{share(length.at_limit_share)} at the limit {length.limit} ({length.limit_source})"
    )
    rows.append(
        (
            "response length",
            num(length.mean),
            f"p50 {_maybe(q.get('0.5'))}, p95 {_maybe(q.get('0.95'))}; {limit}",
        )
    )
    if section.reward is not None:
        reward = section.reward
        functions = reward.per_function or {}
        below = f"; {len(functions)} reward functions below" if len(functions) > 1 else ""
        rows.append(("reward", num(reward.mean), f"std {num(reward.std)}{below}"))
        for name, function in functions.items():
            rows.append(
                (
                    f"  reward: {name}",
                    _maybe(function.mean if function.sequences else None),
                    f"std {_maybe(function.std if function.sequences else None)}; "
                    f"{function.sequences} of {section.sequences} responses scored",
                )
            )
    if section.correct_share is not None:
        rows.append(("correct", share(section.correct_share), f"of {section.sequences} responses"))
    if section.advantages is not None:
        adv = section.advantages
        rows.append(
            (
                "advantage |A|",
                num(adv.mean_abs),
                f"A = 0 on {share(adv.zero_share)} of tokens; short responses "
                f"{_maybe(adv.short_mean_abs)} / long {_maybe(adv.long_mean_abs)}",
            )
        )
    mechanics = section.entropy_mechanics
    if mechanics is not None:
        direction = "fall" if mechanics.covariance > 0 else "rise"
        observed = ""
        if entropy is not None and entropy.change_mean is not None:
            observed = f"; observed change {num(entropy.change_mean, 3)}"
        rows.append(
            (
                "Cov(log pi, A)",
                num(mechanics.covariance),
                f"entropy predicted to {direction} (Cui et al. 2025, Thm 2: dH ~ -eta Cov)"
                f"{observed}",
            )
        )
    if section.equal_reward_groups is not None:
        groups = section.equal_reward_groups
        rows.append(("equal-reward groups", share(groups.share), groups.text))
    return rows


def vitals_table(section: VitalsSection) -> Table:
    table = Table(
        title="vitals: what the trainer's tracker would show for these steps",
        title_justify="left",
    )
    table.add_column("vital")
    table.add_column("value", justify="right")
    table.add_column("detail", overflow="fold")
    for row in vitals_rows(section):
        table.add_row(*row)
    return table
