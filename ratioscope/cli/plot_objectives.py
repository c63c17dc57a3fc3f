"""Objective-side figures for ``ratioscope plot``: covariance (CW-GRPO) and objectives
(every method's per-token coefficient side by side)."""

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
    plot_app.command("objectives")(objectives)


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
    from ratioscope.analysis.pipeline import section_or_analysis
    from ratioscope.cli._common import announce_written, check_output_paths, progress_bar
    from ratioscope.cli._options import command_analysis_params, command_load_options
    from ratioscope.cli.plot_ratios import refuse_report_options
    from ratioscope.render.png.covariance import plot_covariance
    from ratioscope.render.png.output import check_figure_path

    check_figure_path(out)
    check_output_paths([Path(p) for p in paths], [out])
    refuse_report_options(ctx, paths, ("cov_scope",))
    with progress_bar(not quiet) as progress:
        report, source = section_or_analysis(
            paths,
            "covariance",
            params=command_analysis_params(ctx),
            load_options=command_load_options(ctx),
            device=device,
            progress=progress,
        )
    assert report.covariance is not None  # section_or_analysis raises otherwise
    plot_covariance(report.covariance, out, source)
    announce_written([out], quiet)


ObjectiveInputs = Annotated[
    list[str],
    typer.Argument(
        help="Dump files, directories or globs; each file is one batch.", show_default=False
    ),
]


def objectives(
    ctx: typer.Context,
    paths: ObjectiveInputs,
    out: FigureOut,
    sequence: Annotated[
        int | None,
        typer.Option(
            "--sequence",
            "-s",
            help="Sequence index, counted over all files (default: the first file's sequence "
            "with a non-zero coefficient on which the methods' rules bind most often).",
            min=0,
        ),
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            "--methods",
            help="Methods to draw, comma-separated (default: all that the dump allows).",
            show_default=False,
        ),
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a method's hyper-parameter, METHOD.KEY=VALUE (repeatable).",
            show_default=False,
            metavar="METHOD.KEY=VALUE",
        ),
    ] = None,
    format: Format = FORMAT_DEFAULT,
    mapping: Mapping = None,
    unsafe_pickle: UnsafePickle = False,
    quiet: Quiet = False,
) -> None:
    """Each method's per-token policy-gradient coefficient along one sequence (small
    multiples sharing the token axis) and the concentration curves of all methods.

    Example: ratioscope plot objectives sample_data/verl/ --methods grpo,gspo,kpo --out obj.png
    """
    import ratioscope.objective_family.side_by_side as library
    from ratioscope.cli._common import announce_written, check_output_paths, progress_bar
    from ratioscope.cli._options import command_load_options
    from ratioscope.figures.objectives import coefficient_trace
    from ratioscope.objective_family.methods import parse_settings
    from ratioscope.render.png.objectives import plot_objectives
    from ratioscope.render.png.output import check_figure_path

    check_figure_path(out)
    check_output_paths([Path(p) for p in paths], [out])
    overrides = parse_settings(settings)
    options = command_load_options(ctx)
    with progress_bar(not quiet) as progress:
        result = library.objectives(
            paths, methods=methods, settings=overrides, load_options=options, progress=progress
        )
        trace = coefficient_trace(paths, sequence, methods, overrides, options)
    plot_objectives(trace, result, out, ", ".join(paths))
    announce_written([out], quiet)
