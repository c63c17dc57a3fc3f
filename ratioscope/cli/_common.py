"""Helpers shared by the command modules: option parsing, progress bars, the console.

Only light imports here (typer, rich pulls itself in lazily through the functions).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import typer

from ratioscope.errors import UsageError
from ratioscope.progress import ProgressCallback, ProgressUpdate


def parse_floats(text: str, option: str, count: int | None = None) -> tuple[float, ...]:
    """Parse ``"0.2,0.28"`` into floats; ``count`` fixes how many are allowed.

    A single value is repeated when ``count`` is 2, so ``--clip 0.2`` means (0.2, 0.2).
    """
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip() != "")
    except ValueError:
        raise UsageError(f"{option} expects comma-separated numbers, got '{text}'") from None
    if not values:
        raise UsageError(f"{option} expects at least one number, got '{text}'")
    if count == 2 and len(values) == 1:
        values = (values[0], values[0])
    if count is not None and len(values) != count:
        raise UsageError(f"{option} expects {count} comma-separated numbers, got '{text}'")
    return values


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    """Parse ``"1,2,4"`` into positive integers."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip() != "")
    except ValueError:
        raise UsageError(f"{option} expects comma-separated integers, got '{text}'") from None
    if not values or any(v < 1 for v in values):
        raise UsageError(f"{option} expects positive integers, got '{text}'")
    return values


def parse_mapping(items: Sequence[str] | None) -> dict[str, str]:
    """Parse repeated ``--map canonical=theirs`` options."""
    mapping: dict[str, str] = {}
    for item in items or []:
        canonical, sep, theirs = item.partition("=")
        if not sep or not canonical.strip() or not theirs.strip():
            raise UsageError(f"--map expects canonical=theirs, got '{item}'")
        mapping[canonical.strip()] = theirs.strip()
    return mapping


def stderr_console():
    """A rich console on stderr (progress and warnings never mix with stdout output).

    Soft wrapping keeps each warning on one line, so logs can be grepped.
    """
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def stdout_console():
    """A rich console on stdout; when not a terminal (files, CI logs), as wide as
    ``COLUMNS`` says, else 160 columns (rich's own fallback, 80, squeezes wide tables).
    """
    import os
    import sys

    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() else 160)


@contextlib.contextmanager
def progress_bar(enabled: bool = True) -> Iterator[ProgressCallback | None]:
    """A rich progress display on stderr driven by :class:`ProgressUpdate` callbacks.

    Yields None when disabled or when stderr is not a terminal (a log file gains
    nothing from a live bar), so the library skips progress work entirely.
    """
    import sys

    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("[bold]{task.fields[label]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=stderr_console(),
        transient=True,
    )
    tasks: dict[str, TaskID] = {}

    def callback(update: ProgressUpdate) -> None:
        if update.task not in tasks:
            tasks[update.task] = progress.add_task(
                update.description, total=update.total, label=update.task
            )
        progress.update(
            tasks[update.task],
            completed=update.completed,
            total=update.total,
            description=update.description,
        )

    with progress:
        yield callback


def show_notes(notes: list[str]) -> None:
    """One ``note:`` line on stderr per note (files a directory walk left out, ...)."""
    for note in notes:
        typer.echo(f"note: {note}", err=True)


def check_output_paths(inputs: list[Path], outputs: list[Path | None]) -> None:
    """Validate every output path before any work is done (docs/formats.md: nothing is
    half-written): none may be an input, another output or a directory, and each must
    go to an existing directory.
    """
    resolved_inputs = {p.resolve() for p in inputs if p.exists()}
    seen: dict[Path, Path] = {}
    for out in outputs:
        if out is None:
            continue
        target = out.resolve()
        if target in resolved_inputs:
            raise UsageError(f"refusing to overwrite the input file {out} with an output")
        if target in seen:
            raise UsageError(f"two outputs would be written to the same file {out}")
        if out.is_dir():
            raise UsageError(f"cannot write {out}: it is a directory; give a file name")
        if not target.parent.is_dir():
            raise UsageError(f"cannot write {out}: the directory {out.parent} does not exist")
        seen[target] = out
    # renamed into place together when the command ends (io/atomic.outputs_together)
    from ratioscope.io.atomic import hold_together

    hold_together(seen)


def announce_written(paths: list[Path | None], quiet: bool = False) -> None:
    """One stderr line naming the files a command wrote ("wrote u.json, u.parquet").

    Stderr, so that the tables on stdout stay clean for a pipe; nothing under --quiet.
    """
    written = [str(path) for path in paths if path is not None]
    if written and not quiet:
        typer.echo(f"wrote {', '.join(written)}", err=True)


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the user set parameter ``name`` (rather than leaving its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def chosen(ctx: typer.Context, name: str):
    """The value of parameter ``name`` when the user set it, else None."""
    return ctx.params[name] if given(ctx, name) else None


def check_suffix(path: Path | None, suffix: str, option: str) -> None:
    """Refuse an output whose suffix names another format (``--parquet x.csv``)."""
    if path is not None and path.suffix.lower() != suffix:
        raise UsageError(f"{option} writes {suffix} files; name it *{suffix}, not {path.name}")


def check_html_path(path: Path | None, option: str) -> None:
    """Refuse an HTML output whose name says another format."""
    if path is not None and path.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"{option} writes an HTML file; name it *.html, not {path.name}")
