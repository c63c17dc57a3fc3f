"""``--workers`` and ``--ray``: the options that spread a command's tasks (docs/scale.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from ratioscope.analysis.parallel import Runner

Workers = Annotated[
    int,
    typer.Option(
        "--workers",
        min=1,
        help="Local worker processes, one task per training step (or file) each; the "
        "results are merged in order, so the numbers equal one process's. With --ray "
        "local: the CPUs of the local Ray cluster.",
        rich_help_panel="Parallel",
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="local|auto|ADDRESS",
        help="Run the tasks on Ray: 'local' starts a cluster here, 'auto' joins the one "
        "running ($RAY_ADDRESS or ray start --head), or give its address "
        "(ray://head:10001). Every worker must see the inputs under the same paths. "
        "Needs ratioscope\\[ray].",
        rich_help_panel="Parallel",
    ),
]


def runner_of(workers: int, ray: str | None) -> Runner:
    """The :class:`~ratioscope.analysis.parallel.Runner` of ``--workers`` and ``--ray``."""
    from ratioscope.analysis.parallel import Runner

    if ray is not None and not ray.strip():
        from ratioscope.errors import UsageError

        raise UsageError("--ray needs 'local', 'auto' or a cluster address")
    return Runner(workers=workers, ray=ray)
