"""``ratioscope objectives``: what each objective would do to the batch, side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._options import (
    FORMAT_DEFAULT,
    NONFINITE_DEFAULT,
    TRAINER_DEFAULT,
    DumpCorrectField,
    DumpCorrectThreshold,
    Format,
    GroupSize,
    Mapping,
    NonFinite,
    Quiet,
    Trainer,
    UnsafePickle,
)
from ratioscope.cli._parallel import RayAddress, Workers, runner_of
from ratioscope.cli._path_params import path_option
from ratioscope.objective_family.methods import METHODS

ObjectivePaths = Annotated[
    list[str] | None,
    typer.Argument(
        help="Dump files, directories or globs; each file is one batch.", show_default=False
    ),
]
Methods = Annotated[
    str | None,
    typer.Option(
        "--methods",
        help=f"Methods to compare, comma-separated (default: all): {', '.join(METHODS)}.",
        rich_help_panel="Methods",
        show_default=False,
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a method's hyper-parameter, METHOD.KEY=VALUE (repeatable), e.g. "
        "--set dapo.clip=0.2,0.3 --set tis.cap=4. The defaults are listed by --list.",
        rich_help_panel="Methods",
        show_default=False,
        metavar="METHOD.KEY=VALUE",
    ),
]
ListMethods = Annotated[
    bool,
    typer.Option(
        "--list",
        help="List the methods with their sources and default hyper-parameters, and exit.",
        rich_help_panel="Methods",
    ),
]
BatchRows = Annotated[
    int | None,
    typer.Option(
        "--batch-rows",
        help="Cut each file into batches of this many sequences, as a trainer computes its "
        "loss per mini-batch; a large file is then streamed one batch at a time (default: "
        "one file is one batch). Batches are cut only between groups: files of a step that "
        "share a split group are one batch first (held in memory to be cut), and so is a "
        "file whose cuts would split a group (choose a multiple of the group size).",
        min=1,
        rich_help_panel="Methods",
        show_default=False,
    ),
]
ObjectivesJson = Annotated[
    Path | None,
    path_option(
        "--json", help="Write the comparison as JSON (atomically).", rich_help_panel="Output"
    ),
]


def objectives(
    ctx: typer.Context,
    paths: ObjectivePaths = None,
    methods: Methods = None,
    settings: SetOption = None,
    list_methods: ListMethods = False,
    batch_rows: BatchRows = None,
    json_out: ObjectivesJson = None,
    format: Format = FORMAT_DEFAULT,
    mapping: Mapping = None,
    nonfinite: NonFinite = NONFINITE_DEFAULT,
    unsafe_pickle: UnsafePickle = False,
    group_size: GroupSize = None,
    correct_field: DumpCorrectField = None,
    correct_threshold: DumpCorrectThreshold = None,
    trainer: Trainer = TRAINER_DEFAULT,
    workers: Workers = 1,
    ray: RayAddress = None,
    quiet: Quiet = False,
) -> None:
    """What GRPO, DAPO, GSPO, GMPO, CISPO, SAPO, KPO, CW-GRPO, TEPO, QUATRO, FPA and the
    train/inference corrections would each do to this batch: the per-token policy-gradient
    coefficient of every method, compared (zeroed tokens, concentration, Gini, ESS, sign
    flips against GRPO, correlations).

    Example: ratioscope objectives sample_data/verl/ --methods grpo,dapo,gspo,kpo

    Example: ratioscope objectives 'dump/step_*' --workers 4 --json objectives.json
    """
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        check_suffix,
        progress_bar,
        stdout_console,
    )
    from ratioscope.cli._options import command_load_options
    from ratioscope.errors import UsageError
    from ratioscope.io.loaders import expand_paths
    from ratioscope.objective_family.methods import parse_settings
    from ratioscope.render.terminal.objectives import show_methods, show_objectives

    if list_methods:
        show_methods(stdout_console())
        return
    if not paths:
        raise UsageError("give dump files or directories (or --list to see the methods)")
    check_output_paths(list(expand_paths(paths)), [json_out])
    check_suffix(json_out, ".json", "--json")
    overrides = parse_settings(settings)
    runner = runner_of(workers, ray)
    import ratioscope.objective_family.side_by_side as library

    with progress_bar(not quiet) as progress:
        result = library.objectives(
            paths,
            methods=methods,
            settings=overrides,
            load_options=command_load_options(ctx),
            batch_rows=batch_rows,
            progress=progress,
            runner=runner,
        )
    show_objectives(result, stdout_console())
    if json_out is not None:
        result.write_json(json_out)
    announce_written([json_out], quiet)
