"""Objective-side figures for ``ratioscope plot``: covariance (CW-GRPO)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._options import (
    DEFAULTS,
    DEVICE_DEFAULT,
    FORMAT_DEFAULT,
    CovScope,
    Device,
    FigureOut,
    Format,
    Mapping,
    Quiet,
    UnsafePickle,
)

Inputs = Annotated[
    list[str],
    typer.Argument(
        help="Dump files, directories or globs (analysed), or analyze report JSON file(s) "
        "(plotted as stored; --cov-scope must then match the report's or be left out).",
        show_default=False,
    ),
]


def register(plot_app: typer.Typer) -> None:
    """Add this module's plot kinds to ``plot_app``."""
    plot_app.command("covariance")(covariance)


def covariance(
    ctx: typer.Context,
    paths: Inputs,
    out: FigureOut,
    cov_scope: CovScope = DEFAULTS.cov_scope,
    format: Format = FORMAT_DEFAULT,
    mapping: Mapping = None,
    unsafe_pickle: UnsafePickle = False,
    device: Device = DEVICE_DEFAULT,
    quiet: Quiet = False,
) -> None:
    """CW-GRPO: share of the total |c| held by the top tokens (Fig. 3) and the kernel weights.

    Example: ratioscope plot covariance sample_data/verl/ --out covariance.png
    """
    from ratioscope.analysis import section_or_analysis
    from ratioscope.cli._common import announce_written, check_output_paths, progress_bar
    from ratioscope.cli._options import analysis_params, load_options
    from ratioscope.cli.plot_ratios import refuse_report_options
    from ratioscope.render.figures import check_figure_path
    from ratioscope.render.objective_plots import plot_covariance

    check_figure_path(out)
    check_output_paths([Path(p) for p in paths], [out])
    refuse_report_options(ctx, paths, ("cov_scope",))
    with progress_bar(not quiet) as progress:
        report, source = section_or_analysis(
            paths,
            "covariance",
            params=analysis_params(cov_scope=cov_scope),
            load_options=load_options(format, mapping, "error", unsafe_pickle),
            device=device,
            progress=progress,
        )
    assert report.covariance is not None  # section_or_analysis raises otherwise
    plot_covariance(report.covariance, out, source)
    announce_written([out], quiet)
