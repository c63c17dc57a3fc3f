"""``ratioscope check``: the CI regression gate over a report JSON."""

from __future__ import annotations

from pathlib import Path

import typer


def check(
    report: Path = typer.Argument(..., help="Report JSON from analyze, eval-passk or eval-ucc."),
    rules: Path = typer.Option(..., "--rules", help="Rules TOML: \\[[rule]] tables."),
    baseline: Path | None = typer.Option(
        None, "--baseline", help="Older report for max_increase/max_decrease(_pct) bounds."
    ),
    junit: Path | None = typer.Option(None, "--junit", help="Write JUnit XML (one test a rule)."),
    summary: Path | None = typer.Option(
        None, "--summary", help="Write a Markdown summary for a pull request."
    ),
) -> None:
    """Check a report against rules; exit 1 when a rule does not hold, 2 on bad input.

    Example: ratioscope check run.json --rules examples/rules.toml --baseline base.json
    --junit check.xml --summary check.md
    """
    from ratioscope.check import run_check
    from ratioscope.cli._common import check_output_paths, stdout_console
    from ratioscope.errors import RegressionFound
    from ratioscope.render import check_table

    inputs = [path for path in (report, rules, baseline) if path is not None]
    check_output_paths(inputs, [junit, summary])
    result = run_check(report, rules, baseline)
    check_table.show(result, stdout_console())
    check_table.write_outputs(result, junit=junit, summary=summary)
    if not result.passed:
        raise RegressionFound(f"{report}: {result.summary_line()}")
