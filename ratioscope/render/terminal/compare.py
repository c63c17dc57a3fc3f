"""Two runs side by side in the terminal: one row per headline, diverging cells marked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ratioscope.render.terminal.tables import DASH, print_table

if TYPE_CHECKING:
    from ratioscope.views.compare import Comparison, Difference

#: the most diverging steps listed in a cell before "... (N in all)"
MAX_STEPS = 6


def show_comparison(comparison: Comparison, console: Console) -> None:
    """Print the headline table, the divergence rule and, for timelines, the step sets."""
    timelines = comparison.kind == "timelines"
    title = f"A = {comparison.a}, B = {comparison.b}"
    if timelines:
        title += f" ({len(comparison.steps)} shared steps; A and B are means over them)"
    table = Table(title=title, title_justify="left")
    table.add_column("headline")
    for name in ("A", "B", "Δ (B − A)", "Δ %"):
        table.add_column(name, justify="right")
    if timelines:
        table.add_column("diverging steps")
    for row in comparison.headlines:
        total = row.total
        cells: list[str | Text] = [row.short, _num(total.a), _num(total.b)]
        cells += [_num(total.diff), _delta_pct(total)]
        if timelines:
            cells.append(_steps(row.diverging_steps))
        table.add_row(*cells)
    print_table(console, table)
    console.print(
        f"* diverges: |B − A| > {comparison.rel:g} · max(|A|, |B|, {comparison.floor:g}); "
        "see docs/timeline.md",
        highlight=False,
    )
    for note in comparison.notes:
        console.print(f"note: {note}", highlight=False)
    if comparison.only_a or comparison.only_b:
        console.print(
            f"steps only in A: {_steps(comparison.only_a, None)}; "
            f"only in B: {_steps(comparison.only_b, None)}",
            highlight=False,
        )


def _num(value: float | None) -> str:
    return DASH if value is None else f"{value:.3g}"


def _delta_pct(total: Difference) -> str | Text:
    text = DASH if total.rel_diff is None else f"{100 * total.rel_diff:+.1f}%"
    return Text(text + "*", style="bold red") if total.diverges else text + " "


def _steps(steps: tuple[int, ...], limit: int | None = MAX_STEPS) -> str:
    if not steps:
        return DASH
    if limit is None or len(steps) <= limit:
        return ", ".join(map(str, steps))
    return ", ".join(map(str, steps[:limit])) + f", ... ({len(steps)} in all)"
