"""A :class:`~ratioscope.judgement.rules.CheckResult` in the terminal: a rich table.

It shows the rows that the CI files (:mod:`ratioscope.render.ci.check`: JUnit XML,
Markdown) show: every rule with its value, baseline value, change, bound and verdict.
"""

from __future__ import annotations

from typing import Any

from ratioscope.judgement.rules import CheckResult, RuleOutcome

_VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold magenta"}


def number_text(value: float | None, missing: str = "-") -> str:
    return missing if value is None else f"{value:.6g}"


def change_text(outcome: RuleOutcome) -> str:
    change = outcome.change
    if change is None:
        return "-"
    pct = outcome.change_pct
    return f"{change:+.4g}" + ("" if pct is None else f" ({pct:+.1f}%)")


def check_title(result: CheckResult) -> str:
    against = f" vs baseline {result.baseline}" if result.baseline else ""
    rules = f" (rules: {result.rules})" if result.rules else ""
    return f"ratioscope check: {result.report or 'report'}{against}{rules}"


def dotted_lines(path: str, width: int) -> list[str]:
    """Break a report key path into lines of at most ``width`` characters, after its dots.

    A segment longer than ``width`` keeps its own line (folded there, as nothing better
    exists); elsewhere a key is never cut inside a name, so it can be read and searched for.

    >>> dotted_lines("ratios.token.window_frequency.mean.-1", 24)
    ['ratios.token.', 'window_frequency.mean.-1']
    """
    segments = [part + "." for part in path.split(".")]
    segments[-1] = segments[-1][:-1]
    lines: list[str] = []
    for segment in segments:
        if lines and len(lines[-1]) + len(segment) <= width:
            lines[-1] += segment
        else:
            lines.append(segment)
    return lines


class _KeyPath:
    """A rich renderable for a key path that wraps after dots, not inside names."""

    def __init__(self, path: str, style: str = "dim") -> None:
        self.path = path
        self.style = style

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        longest = max(len(part) + 1 for part in self.path.split("."))
        return Measurement(min(longest, len(self.path)), len(self.path))

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        for line in dotted_lines(self.path, options.max_width):
            yield Text(line, style=self.style, overflow="fold")


def _rule_cell(label: str, path: str) -> Any:
    from rich.console import Group
    from rich.text import Text

    if label == path:
        return _KeyPath(path, style="")
    return Group(Text(label), _KeyPath(path))


def check_table(result: CheckResult) -> Any:
    """A rich Table with one row per rule (the reasons are printed below it by :func:`show`)."""
    from rich.table import Table

    with_baseline = result.baseline is not None
    table = Table(title=check_title(result))
    table.add_column("#", justify="right")
    table.add_column("rule", overflow="fold", ratio=2)
    table.add_column("value", justify="right")
    if with_baseline:
        table.add_column("baseline", justify="right")
        table.add_column("change", justify="right")
    table.add_column("bound", overflow="fold", ratio=1)
    table.add_column("verdict")
    for outcome in result.outcomes:
        rule = outcome.rule
        cells = [
            str(rule.index),
            _rule_cell(rule.label, rule.path),
            number_text(outcome.value, "null"),
        ]
        if with_baseline:
            cells += [number_text(outcome.baseline), change_text(outcome)]
        verdict = f"[{_VERDICT_STYLE[outcome.verdict]}]{outcome.verdict.upper()}[/]"
        cells += [outcome.bound_description.replace("; ", "\n"), verdict]
        table.add_row(*cells)
    return table


def show(result: CheckResult, console: Any) -> None:
    """Print the table, one line per rule that did not hold, and the overall verdict last."""
    from rich.markup import escape

    console.print(check_table(result))
    for outcome in result.outcomes:
        if outcome.verdict != "pass":
            style = _VERDICT_STYLE[outcome.verdict]
            console.print(
                f"[{style}]{outcome.verdict.upper()}[/] rule {outcome.rule.index} "
                f"{escape(outcome.rule.label)}: {escape(outcome.reason)}"
            )
    style = _VERDICT_STYLE["pass" if result.passed else "fail"]
    console.print(f"[{style}]{escape(result.summary_line())}[/]")
