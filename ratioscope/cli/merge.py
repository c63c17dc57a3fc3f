"""``ratioscope merge``: combine analyze reports of shards into the report of the whole."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._path_params import path_argument, path_option

Reports = Annotated[list[Path], path_argument(help="Analyze report JSON files of one run.")]
Out = Annotated[Path, path_option("--out", "-o", help="Merged report JSON to write.")]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="Do not print the merged tables (the verdict still prints)."
    ),
]


def merge(reports: Reports, out: Out, quiet: Quiet = False) -> None:
    """Merge shard reports (files, steps, ranks) exactly from their stored sums.

    Counts, means and variances merge exactly; quantiles come from the shared fixed
    histograms (relative error <= 1.16 %). Reports made with different parameters or
    schema versions are refused. The health verdict of the merged report opens the output,
    as in analyze.

    Example: ratioscope merge shard_*.json --out run.json
    """
    from ratioscope.analysis.pipeline import merge_reports
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        check_suffix,
        stderr_console,
        stdout_console,
    )
    from ratioscope.cli._options import PARAMETER_OPTIONS
    from ratioscope.io.documents import read_json_report
    from ratioscope.io.paths import REPORT_SUFFIX
    from ratioscope.render.terminal.report import show_report, show_warnings
    from ratioscope.render.terminal.verdict import show_verdict

    check_output_paths(list(reports), [out])
    check_suffix(out, REPORT_SUFFIX, "--out")
    # one report in memory at a time, however many shards there are
    documents = (read_json_report(path) for path in reports)
    merged = merge_reports(documents, names=[str(path) for path in reports])
    merged.write_json(out)
    announce_written([out], quiet)
    show_verdict(stdout_console(), merged.verdict())
    if not quiet:
        show_report(merged, stdout_console())
        show_warnings(merged, stderr_console(), PARAMETER_OPTIONS)
