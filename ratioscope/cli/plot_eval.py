"""Evaluation figures for ``ratioscope plot``: passk, ucc and similarity."""

from __future__ import annotations

from pathlib import Path

import typer

from ratioscope.cli._common import QUIET_OPTION
from ratioscope.cli.eval_passk import (
    CORRECT_FIELD,
    K_OPTION,
    METHOD_FIELD,
    PROBLEM_FIELD,
    RESPONSE_FIELD,
    load,
)
from ratioscope.cli.eval_ucc import LINKAGE_OPTION, THRESHOLD_OPTION

INPUTS_ARGUMENT = typer.Argument(
    ..., help="Eval report JSON(s) (plotted as is) and/or samples JSONL file(s) (evaluated)."
)
OUT_OPTION = typer.Option(..., "--out", help="Figure file; .png, .svg or .pdf.")


def register(plot_app: typer.Typer) -> None:
    """Add this module's plot kinds to ``plot_app``."""
    plot_app.command("passk")(passk)
    plot_app.command("ucc")(ucc)
    plot_app.command("similarity")(similarity)


def _curves(metric, inputs, out, k, threshold, linkage, fields, quiet) -> None:
    from ratioscope.cli._common import check_output_paths, parse_ints, progress_bar
    from ratioscope.evaluation import metric_curves
    from ratioscope.io.samples import SampleFields
    from ratioscope.render.eval_plots import check_figure_path, plot_curves

    check_output_paths(inputs, [out])
    check_figure_path(out)
    ks = parse_ints(k, "--k") if k else None
    with progress_bar(not quiet) as progress:
        curves = metric_curves(
            inputs, metric, fields=SampleFields(*fields), ks=ks, threshold=threshold,
            linkage=linkage, progress=progress,
        )  # fmt: skip
    subtitle = "" if metric == "pass_at_k" else f"TF-IDF clusters at cosine >= {threshold}"
    plot_curves(curves, metric, out, subtitle)


def passk(
    inputs: list[Path] = INPUTS_ARGUMENT,
    out: Path = OUT_OPTION,
    k: str | None = K_OPTION,
    problem_field: str | None = PROBLEM_FIELD,
    response_field: str | None = RESPONSE_FIELD,
    correct_field: str | None = CORRECT_FIELD,
    method_field: str = METHOD_FIELD,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Pass@k against k (log2 axis), one line per method.

    Example: ratioscope plot passk passk.json --out passk.png
    """
    fields = (problem_field, response_field, correct_field, method_field)
    _curves("pass_at_k", inputs, out, k, 0.8, "single", fields, quiet)


def ucc(
    inputs: list[Path] = INPUTS_ARGUMENT,
    out: Path = OUT_OPTION,
    k: str | None = K_OPTION,
    threshold: float = THRESHOLD_OPTION,
    linkage: str = LINKAGE_OPTION,
    problem_field: str | None = PROBLEM_FIELD,
    response_field: str | None = RESPONSE_FIELD,
    correct_field: str | None = CORRECT_FIELD,
    method_field: str = METHOD_FIELD,
    quiet: bool = QUIET_OPTION,
) -> None:
    """UCC@k against k (log2 axis), one line per method.

    Example: ratioscope plot ucc base.jsonl grpo.jsonl --threshold 0.8 --out ucc.png
    """
    fields = (problem_field, response_field, correct_field, method_field)
    _curves("ucc_at_k", inputs, out, k, threshold, linkage, fields, quiet)


def similarity(
    samples: list[Path] = typer.Argument(..., help="Samples JSONL file(s)."),
    problem: str = typer.Option(..., "--problem", help="Problem id to draw."),
    out: Path = OUT_OPTION,
    method: str | None = typer.Option(
        None, "--method", help="Only this method (default: every method)."
    ),
    threshold: float = THRESHOLD_OPTION,
    linkage: str = LINKAGE_OPTION,
    problem_field: str | None = PROBLEM_FIELD,
    response_field: str | None = RESPONSE_FIELD,
    correct_field: str | None = CORRECT_FIELD,
    method_field: str = METHOD_FIELD,
) -> None:
    """Heatmap of pairwise TF-IDF similarity of one problem's correct responses.

    Responses are ordered by cluster (white squares), one panel per method, like
    QUATRO Fig. III.

    Example: ratioscope plot similarity samples.jsonl --problem 17 --out sim17.png
    """
    from ratioscope.cli._common import check_output_paths
    from ratioscope.evaluation import similarity_panels
    from ratioscope.render.eval_plots import check_figure_path, plot_similarity

    check_output_paths(samples, [out])
    check_figure_path(out)
    sample_set = load(samples, problem_field, response_field, correct_field, method_field)
    panels = similarity_panels(sample_set, problem, method, threshold=threshold, linkage=linkage)
    plot_similarity(panels, out, threshold, linkage)
