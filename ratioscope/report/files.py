"""Report files as the commands read them: a baseline, and the reports ``check`` holds to
its rules.

An analyze report file is read into the typed :class:`~ratioscope.report.model.Report`
(schema 1 or 2, checked by :meth:`Report.from_dict`); the rules of
:mod:`ratioscope.judgement.rules` address its JSON document.
"""

from __future__ import annotations

from pathlib import Path

from ratioscope.errors import ReportError
from ratioscope.io.documents import check_timeline_shape, read_json_report
from ratioscope.judgement.rules import Checked, CheckResult, evaluate, load_rules
from ratioscope.report.model import Report


def read_baseline(path: str | Path) -> Report:
    """The analyze report a ``--baseline`` file holds; an evaluation report, a timeline
    or another ratioscope document is refused in one sentence naming what it is."""
    document = read_json_report(path)
    kind = document.get("kind")
    if kind == "timeline":
        raise ReportError(
            path,
            "is a timeline (ratioscope timeline --json), not an analyze report: give the "
            "--json report of one run or step as the baseline (a timeline judges its "
            "later steps against its own first steps)",
        )
    if "by_method" in document:
        raise ReportError(
            path,
            "is an evaluation report (Pass@k/UCC@k of samples), not an analyze report of "
            "training dumps: give a report written by 'ratioscope analyze --json'",
        )
    if kind is not None:
        raise ReportError(
            path,
            f"is a {kind} document, not an analyze report: give a report written by "
            "'ratioscope analyze --json'",
        )
    return Report.from_dict(document, source=path)


def read_checked(path: str | Path) -> Checked:
    """A report file: an analyze report as a :class:`Report` (schema 1 or 2, checked by
    :meth:`Report.from_dict`), any other report (eval) as its JSON document."""
    document = read_json_report(path)
    if all(key in document for key in ("tool", "inputs", "params", "ratios")):
        return Report.from_dict(document, source=path)
    if document.get("kind") == "timeline":
        # as compare and plot timeline read it: a damaged series is named, not skipped
        check_timeline_shape(document, path)
    return document


def run_check(
    report_path: str | Path,
    rules_path: str | Path,
    baseline_path: str | Path | None = None,
) -> CheckResult:
    """Read the rules and the report(s) and evaluate; every input problem raises (exit 2).

    The rules are read first, then the report: a rule path missing from it (a report of
    another kind) is reported before a missing baseline.
    """
    rules = load_rules(rules_path)
    report = read_checked(report_path)
    baseline = None if baseline_path is None else read_checked(baseline_path)
    return evaluate(report, rules, baseline, report_name=report_path, baseline_name=baseline_path)
