"""Path arguments and options that refuse an empty path when the command line is parsed.

``Path("")`` is the current folder: ``eval-passk ''`` would read every sample file under
it and ``--json ''`` would name a folder. A parameter made with :func:`path_argument` or
:func:`path_option` turns ``''`` into a usage error instead (exit 2, one line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ratioscope.io.paths import EMPTY_PATH


def as_path(text: str) -> Path:
    """The path ``text`` names; ``''`` (or blanks) refused.

    Raises:
        typer.BadParameter: for an empty path.
    """
    if not text.strip():
        raise typer.BadParameter(EMPTY_PATH)
    return Path(text)


def path_argument(*declarations: Any, **settings: Any) -> Any:
    """``typer.Argument`` for a path or a list of paths (see the module's docstring)."""
    return typer.Argument(*declarations, parser=as_path, **settings)


def path_option(*declarations: Any, **settings: Any) -> Any:
    """``typer.Option`` for a path (see the module's docstring)."""
    return typer.Option(*declarations, parser=as_path, **settings)
