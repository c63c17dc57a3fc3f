"""A :class:`~ratioscope.judgement.rules.CheckResult` for CI systems: JUnit XML, Markdown.

Both show the rows of the terminal table (:mod:`ratioscope.render.terminal.check`): every
rule with its value, baseline value, change, bound and verdict. JUnit maps a ``fail``
verdict to ``<failure>`` and an ``error`` verdict (a null value) to ``<error>``, one
``<testcase>`` per rule, so GitHub, GitLab and Jenkins test-report viewers list each rule.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ratioscope.errors import UsageError
from ratioscope.io.atomic import atomic_write_text
from ratioscope.judgement.rules import CheckResult, RuleOutcome
from ratioscope.render.terminal.check import change_text, check_title, number_text

#: the test cases' class name: the command, as CI viewers group it
JUNIT_CLASSNAME = "ratioscope.check"
# verdict -> (JUnit element, its type attribute)
_JUNIT_ELEMENT = {"fail": ("failure", "regression"), "error": ("error", "null-value")}


def _details(outcome: RuleOutcome) -> str:
    rule = outcome.rule
    lines = [
        f"rule: {rule.index} of {rule.source or 'the rules'}",
        f"path: {rule.path}",
        f"value: {number_text(outcome.value, 'null')}",
    ]
    if outcome.baseline is not None:
        lines += [f"baseline: {number_text(outcome.baseline)}", f"change: {change_text(outcome)}"]
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
    suite = ET.SubElement(suites, "testsuite", {"name": check_title(result), **counts})
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
            number_text(outcome.value, "null"),
            number_text(outcome.baseline),
            change_text(outcome),
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
