"""``--cache``, ``--no-cache`` and ``--cache-max-bytes``: the step cache of the commands
that analyse a run step by step (``timeline``, ``report``, ``watch``; docs/watch.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ratioscope import defaults
from ratioscope.cli._path_params import path_option

if TYPE_CHECKING:
    from ratioscope.analysis.cache import StepCache

CacheDir = Annotated[
    Path | None,
    path_option(
        "--cache",
        metavar="DIR",
        help="Keep each analysed step here, keyed by its files' content and the options, and "
        "read it back next time instead of analysing it again (default: "
        "$XDG_CACHE_HOME/ratioscope/steps, else ~/.cache/ratioscope/steps).",
        rich_help_panel="Run",
    ),
]
NoCache = Annotated[
    bool,
    typer.Option(
        "--no-cache", help="Analyse every step; read and write no cache.", rich_help_panel="Run"
    ),
]
CacheMaxBytes = Annotated[
    int,
    typer.Option(
        "--cache-max-bytes",
        min=0,
        metavar="BYTES",
        help="Bound on the cache's size; past it the entries used least recently go.",
        rich_help_panel="Run",
    ),
]
#: the default of --cache-max-bytes (2 GiB)
CACHE_MAX_BYTES_DEFAULT = defaults.CACHE_MAX_BYTES


def cache_of(directory: Path | None, no_cache: bool, max_bytes: int) -> StepCache | None:
    """The step cache the options ask for (None with --no-cache)."""
    if no_cache:
        if directory is not None:
            from ratioscope.errors import UsageError

            raise UsageError("--cache DIR and --no-cache contradict each other: give one")
        return None
    from ratioscope.analysis.cache import StepCache

    return StepCache(directory, max_bytes)
