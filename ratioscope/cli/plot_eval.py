"""Evaluation figures for ``ratioscope plot``: passk, ucc and similarity."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._common import chosen
from ratioscope.cli._options import (
    LINKAGE_DEFAULT,
    METHOD_FIELD_DEFAULT,
    THRESHOLD_DEFAULT,
    CorrectField,
    EvalQuiet,
    FigureOut,
    Linkage,
    MethodField,
    ProblemField,
    ResponseField,
    Threshold,
)
from ratioscope.cli._path_params import path_argument
from ratioscope.cli.eval_passk import sample_fields

Inputs = Annotated[
    list[Path],
    path_argument(
        help="Eval report JSON(s) (plotted as stored) and/or samples JSONL file(s) (evaluated).",
    ),
]
CurveK = Annotated[
    str | None,
    typer.Option(
        "--k",
        help="Comma-separated budgets for samples input, e.g. 1,8,64 (default: powers of two "
        "up to n). A report is plotted at the k it was made with.",
    ),
]
SimilaritySamples = Annotated[list[Path], path_argument(help="Samples JSONL file(s).")]
Problem = Annotated[str, typer.Option("--problem", help="Problem id to draw.")]
Method = Annotated[
    str | None, typer.Option("--method", help="Only this method (default: every method).")
]


def register(plot_app: typer.Typer) -> None:
    """Add this module's plot kinds to ``plot_app``."""
    plot_app.command("passk")(passk)
    plot_app.command("ucc")(ucc)
    plot_app.command("similarity")(similarity)


def _curves(ctx: typer.Context, metric: str, inputs: list[Path], out: Path, quiet: bool) -> None:
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        parse_ints,
        progress_bar,
    )
    from ratioscope.figures.evaluation import metric_curves
    from ratioscope.render.png.evaluation import plot_curves
    from ratioscope.render.png.output import check_figure_path

    check_output_paths(inputs, [out])
    check_figure_path(out)
    k = ctx.params["k"]
    with progress_bar(not quiet) as progress:
        curves = metric_curves(
            inputs,
            metric,
            fields=sample_fields(ctx),
            ks=parse_ints(k, "--k") if k else None,
            threshold=chosen(ctx, "threshold") if metric == "ucc_at_k" else None,
            linkage=chosen(ctx, "linkage") if metric == "ucc_at_k" else None,
            progress=progress,
        )
    plot_curves(curves, out)
    announce_written([out], quiet)


def passk(
    ctx: typer.Context,
    inputs: Inputs,
    out: FigureOut,
    k: CurveK = None,
    problem_field: ProblemField = None,
    response_field: ResponseField = None,
    correct_field: CorrectField = None,
    method_field: MethodField = METHOD_FIELD_DEFAULT,
    quiet: EvalQuiet = False,
) -> None:
    """Pass@k against k (log2 axis), one line per method.

    A report is plotted as stored: --k and the field options apply to samples input
    only, and are refused for a report unless they match what it was made with.
    Curves share their problems: sample methods are cut to the problems they all
    answer, a report on other problems is refused; the figure names the problems,
    the samples per problem and where k stops.

    Example: ratioscope plot passk passk.json --out passk.png
    """
    _curves(ctx, "pass_at_k", inputs, out, quiet)


def ucc(
    ctx: typer.Context,
    inputs: Inputs,
    out: FigureOut,
    k: CurveK = None,
    threshold: Threshold = THRESHOLD_DEFAULT,
    linkage: Linkage = LINKAGE_DEFAULT,
    problem_field: ProblemField = None,
    response_field: ResponseField = None,
    correct_field: CorrectField = None,
    method_field: MethodField = METHOD_FIELD_DEFAULT,
    quiet: EvalQuiet = False,
) -> None:
    """UCC@k against k (log2 axis), one line per method.

    A report is plotted as stored, labelled with the threshold and linkage it was made
    with: --k, --threshold, --linkage and the field options apply to samples input only
    (samples given beside reports are clustered as the reports were), and are refused
    for a report unless they match its params. Curves share their problems, as for
    plot passk.

    Example: ratioscope plot ucc base.jsonl grpo.jsonl --threshold 0.8 --out ucc.png
    """
    _curves(ctx, "ucc_at_k", inputs, out, quiet)


def similarity(
    ctx: typer.Context,
    samples: SimilaritySamples,
    problem: Problem,
    out: FigureOut,
    method: Method = None,
    threshold: Threshold = THRESHOLD_DEFAULT,
    linkage: Linkage = LINKAGE_DEFAULT,
    problem_field: ProblemField = None,
    response_field: ResponseField = None,
    correct_field: CorrectField = None,
    method_field: MethodField = METHOD_FIELD_DEFAULT,
    quiet: EvalQuiet = False,
) -> None:
    """Heatmap of pairwise TF-IDF similarity of one problem's correct responses.

    Responses are ordered by cluster (red squares), one panel per method on shared axes,
    like QUATRO Fig. III.

    Example: ratioscope plot similarity sample_data/samples.jsonl --problem 075%5 --out sim.png
    """
    from ratioscope.cli._common import announce_written, check_output_paths
    from ratioscope.evaluation.evaluate import check_clustering_options
    from ratioscope.figures.evaluation import similarity_panels
    from ratioscope.io.samples import load_samples
    from ratioscope.render.png.evaluation import plot_similarity
    from ratioscope.render.png.output import check_figure_path

    check_output_paths(samples, [out])
    check_figure_path(out)
    check_clustering_options(threshold, linkage)
    sample_set = load_samples(samples, sample_fields(ctx))
    panels = similarity_panels(sample_set, problem, method, threshold=threshold, linkage=linkage)
    plot_similarity(panels, out, threshold, linkage)
    announce_written([out], quiet)
