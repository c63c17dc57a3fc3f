"""Plot kinds registered onto ``ratioscope plot`` (filled in by their feature)."""

from __future__ import annotations

import typer


def register(plot_app: typer.Typer) -> None:
    """Add this module's plot kinds to ``plot_app``."""
