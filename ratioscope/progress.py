"""Progress reporting without printing: the library calls a callback, the CLI draws it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ProgressUpdate:
    """One step of a long job.

    Attributes:
        task: a stable name for the bar ("files", "chunks", "problems", ...).
        completed: units done so far in this task.
        total: units in all, or None when unknown.
        description: a short human label (a file name, a method name).
    """

    task: str
    completed: int
    total: int | None = None
    description: str = ""


ProgressCallback = Callable[[ProgressUpdate], None]


def report(callback: ProgressCallback | None, update: ProgressUpdate) -> None:
    """Call ``callback`` when there is one; the library never prints."""
    if callback is not None:
        callback(update)
