"""``ratioscope check``: the CI regression gate over a report JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from ratioscope.cli._path_params import path_argument, path_option

CheckedReport = Annotated[
    Path,
    path_argument(
        help="Report JSON from analyze, eval-passk or eval-ucc, or a timeline JSON "
        "(timeline --json) for series rules."
    ),
]
Rules = Annotated[
    Path, path_option("--rules", help="Rules TOML: \\[\\[rule]] tables (docs/ci.md).")
]
Baseline = Annotated[
    Path | None,
    path_option(
        "--baseline",
        help="Older report (or timeline) for max_increase/max_decrease(_pct) bounds.",
    ),
]
Junit = Annotated[Path | None, path_option("--junit", help="Write JUnit XML (one test a rule).")]
Summary = Annotated[
    Path | None, path_option("--summary", help="Write a Markdown summary for a pull request.")
]


def check(
    report: CheckedReport,
    rules: Rules,
    baseline: Baseline = None,
    junit: Junit = None,
    summary: Summary = None,
) -> None:
    """Check a report or a timeline against rules; exit 1 when a rule does not hold, 2 on
    bad input.

    Example: ratioscope check run.json --rules examples/rules.toml --baseline base.json
    --junit check.xml --summary check.md
    """
    from ratioscope.cli._common import check_output_paths, stdout_console
    from ratioscope.errors import RegressionFound
    from ratioscope.render.ci.check import write_outputs
    from ratioscope.render.terminal.check import show
    from ratioscope.report.files import run_check

    inputs = [path for path in (report, rules, baseline) if path is not None]
    check_output_paths(inputs, [junit, summary])
    result = run_check(report, rules, baseline)
    show(result, stdout_console())
    write_outputs(result, junit=junit, summary=summary)
    if not result.passed:
        raise RegressionFound(f"{report}: {result.summary_line()}")
