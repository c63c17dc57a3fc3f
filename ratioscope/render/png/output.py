"""Shared figure plumbing: format by suffix, the Agg backend, atomic saving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ratioscope.errors import UsageError

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def check_figure_path(out: Path) -> None:
    """Refuse a suffix that does not name a figure format, before any work is done."""
    if out.suffix.lower() not in FIGURE_SUFFIXES:
        raise UsageError(
            f"--out {out}: the suffix must be one of {', '.join(FIGURE_SUFFIXES)} "
            "(it chooses the figure format)"
        )


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, out: Path, dpi: int = 150) -> None:
    """Write ``figure`` atomically in the format named by the suffix, then close it."""
    from ratioscope.io.atomic import atomic_path

    check_figure_path(out)
    try:
        with atomic_path(out) as tmp:
            figure.savefig(tmp, dpi=dpi, format=out.suffix.lower().lstrip("."))
    finally:
        pyplot().close(figure)
