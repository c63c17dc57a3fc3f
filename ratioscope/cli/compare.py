"""``ratioscope compare``: two runs side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._options import FigureOut, Quiet
from ratioscope.cli._path_params import path_option
from ratioscope.views.compare import DEFAULT_REL

CompareInput = Annotated[
    str,
    typer.Argument(
        help="An analyze report JSON, a timeline JSON, or dumps (a file or run directory, "
        "analysed with the default options).",
        show_default=False,
        metavar="PATH",
    ),
]
CompareJson = Annotated[
    Path | None,
    path_option(
        "--json", help="Write the comparison as JSON (atomically).", rich_help_panel="Output"
    ),
]
Rel = Annotated[
    float,
    typer.Option(
        "--rel",
        help="Divergence threshold: |B - A| > REL * max(|A|, |B|, 1e-6).",
        rich_help_panel="Run",
    ),
]


def compare(
    a: CompareInput,
    b: CompareInput,
    json_out: CompareJson = None,
    rel: Rel = DEFAULT_REL,
    quiet: Quiet = False,
) -> None:
    """Two runs side by side: the timeline's headline quantities of A and B, their
    differences, and (for two timelines) the steps where they diverge.

    Example: ratioscope compare run_a/report.json run_b/report.json --json diff.json
    """
    import ratioscope
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        check_suffix,
        stdout_console,
    )
    from ratioscope.render.terminal.compare import show_comparison

    check_output_paths([Path(a), Path(b)], [json_out])
    check_suffix(json_out, ".json", "--json")
    result = ratioscope.compare(a, b, rel=rel)
    show_comparison(result, stdout_console())
    if json_out is not None:
        result.write_json(json_out)
    announce_written([json_out], quiet)


def plot_compare(
    a: CompareInput,
    b: CompareInput,
    out: FigureOut,
    rel: Rel = DEFAULT_REL,
    quiet: Quiet = False,
) -> None:
    """The figure of ratioscope compare: two timelines as small multiples (A and B over steps,
    diverging steps in red), two reports or dumps as bars of (B - A)/|A| per headline.

    Example: ratioscope plot compare run_a/report.json run_b/report.json --out diff.png
    """
    import ratioscope
    from ratioscope.cli._common import announce_written, check_output_paths
    from ratioscope.figures.compare import compare_figure
    from ratioscope.render.png.compare import plot_compare as draw
    from ratioscope.render.png.output import check_figure_path

    check_figure_path(out)
    check_output_paths([Path(a), Path(b)], [out])
    draw(compare_figure(ratioscope.compare(a, b, rel=rel)), out)
    announce_written([out], quiet)
