"""``ratioscope info``: what a dump holds and what analyze can compute from it."""

from __future__ import annotations

from pathlib import Path

import typer

from ratioscope.cli._options import (
    FORMAT_DEFAULT,
    NONFINITE_DEFAULT,
    Format,
    GroupSize,
    Mapping,
    NonFinite,
    Paths,
    UnsafePickle,
)


def info(
    ctx: typer.Context,
    paths: Paths,
    format: Format = FORMAT_DEFAULT,
    mapping: Mapping = None,
    nonfinite: NonFinite = NONFINITE_DEFAULT,
    unsafe_pickle: UnsafePickle = False,
    group_size: GroupSize = None,
) -> None:
    """Show layout, keys, shapes, dtypes, padding, token counts and feedable sections.

    Example: ratioscope info sample_data/verl/step_0032.pt
    """
    from ratioscope.analysis.dump_info import inspect_paths
    from ratioscope.cli._common import show_notes, stdout_console
    from ratioscope.cli._options import command_load_options
    from ratioscope.render.terminal.report import show_info

    options = command_load_options(ctx)
    targets: list[str | Path] = list(paths)
    notes: list[str] = []  # files of another kind that a directory walk left out
    show_info(inspect_paths(targets, options, notes), stdout_console())
    show_notes(notes)
