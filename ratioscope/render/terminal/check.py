"""Render a :class:`~ratioscope.check.CheckResult`: a rich table, JUnit XML, Markdown.

All three show the same rows: every rule with its value, baseline value, change, bound
and verdict. JUnit maps a ``fail`` verdict to ``<failure>`` and an ``error`` verdict (a
null value) to ``<error>``, one ``<testcase>`` per rule, so GitHub, GitLab and Jenkins
test-report viewers list each rule.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from ratioscope.check import CheckResult, RuleOutcome
from ratioscope.errors import UsageError
from ratioscope.io.atomic import atomic_write_text

_VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold magenta"}
JUNIT_CLASSNAME = "ratioscope.check"
# verdict -> (JUnit element, its type attribute)
_JUNIT_ELEMENT = {"fail": ("failure", "regression"), "error": ("error", "null-value")}


def _number(value: float | None, missing: str = "-") -> str:
    return missing if value is None else f"{value:.6g}"


def _change(outcome: RuleOutcome) -> str:
    change = outcome.change
    if change is None:
        return "-"
    pct = outcome.change_pct
    return f"{change:+.4g}" + ("" if pct is None else f" ({pct:+.1f}%)")


def _title(result: CheckResult) -> str:
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
    table = Table(title=_title(result))
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
        cells = [str(rule.index), _rule_cell(rule.label, rule.path), _number(outcome.value, "null")]
        if with_baseline:
            cells += [_number(outcome.baseline), _change(outcome)]
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


def _details(outcome: RuleOutcome) -> str:
    rule = outcome.rule
    lines = [
        f"rule: {rule.index} of {rule.source or 'the rules'}",
        f"path: {rule.path}",
        f"value: {_number(outcome.value, 'null')}",
    ]
    if outcome.baseline is not None:
        lines += [f"baseline: {_number(outcome.baseline)}", f"change: {_change(outcome)}"]
    lines.append(f"bound: {outcome.bound_description}")
    lines.append(f"verdict: {outcome.verdict}" + (f" ({outcome.reason})" if outcome.reason else ""))
    if rule.description:
        lines.append(f"description: {rule.description}")
    return "\n".join(lines)


def junit_xml(result: CheckResult) -> str:
    """JUnit XML: one ``<testsuite>`` for the report, one ``<testcase>`` per rule."""
    counts = {
        "tests": str(len(result.outcomes)),
        "failures": str(result.count("fail")),
        "errors": str(result.count("error")),
        "skipped": "0",
        "time": "0",
    }
    suites = ET.Element("testsuites", {"name": "ratioscope check", **counts})
    suite = ET.SubElement(suites, "testsuite", {"name": _title(result), **counts})
    properties = ET.SubElement(suite, "properties")
    for key in ("report", "baseline", "rules"):
        value = getattr(result, key)
        if value is not None:
            ET.SubElement(properties, "property", {"name": key, "value": value})
    for outcome in result.outcomes:
        case = ET.SubElement(
            suite,
            "testcase",
            {"name": outcome.rule.label, "classname": JUNIT_CLASSNAME, "time": "0"},
        )
        if outcome.verdict != "pass":
            tag, kind = _JUNIT_ELEMENT[outcome.verdict]
            element = ET.SubElement(case, tag, {"message": outcome.reason, "type": kind})
            element.text = _details(outcome)
        ET.SubElement(case, "system-out").text = _details(outcome)
    ET.indent(suites)
    body = ET.tostring(suites, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_summary(result: CheckResult) -> str:
    """A pull-request comment: the one-line verdict, then a table of every rule."""
    files = [f"report `{result.report}`"] if result.report else []
    if result.baseline:
        files.append(f"baseline `{result.baseline}`")
    if result.rules:
        files.append(f"rules `{result.rules}`")
    verdict, _, detail = result.summary_line().partition(": ")
    lines = [
        f"**ratioscope check: {verdict}**: {detail}" + (f"; {', '.join(files)}" if files else ""),
        "",
        "| # | rule | value | baseline | change | bound | verdict | reason |",
        "|---:|---|---:|---:|---:|---|---|---|",
    ]
    for outcome in result.outcomes:
        rule = outcome.rule
        label = f"`{rule.path}`" if rule.label == rule.path else f"{rule.label} (`{rule.path}`)"
        row = [
            str(rule.index),
            label,
            _number(outcome.value, "null"),
            _number(outcome.baseline),
            _change(outcome),
            outcome.bound_description,
            f"**{outcome.verdict.upper()}**" if outcome.verdict != "pass" else "pass",
            outcome.reason,
        ]
        lines.append("| " + " | ".join(_cell(cell) for cell in row) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(
    result: CheckResult, junit: Path | None = None, summary: Path | None = None
) -> None:
    """Write the JUnit and Markdown files atomically; check both directories first so
    that a bad second path does not leave the first file written."""
    renderers = ((junit, junit_xml), (summary, markdown_summary))
    planned = [(path, render(result)) for path, render in renderers if path is not None]
    for path, _ in planned:
        directory = path.parent if str(path.parent) else Path(".")
        if not directory.is_dir():
            raise UsageError(f"cannot write {path}: the directory {directory} does not exist")
    for path, text in planned:
        atomic_write_text(path, text)
