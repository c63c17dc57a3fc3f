"""``ratioscope timeline``: the headline quantities of a run, step by step, with changes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._cache import (
    CACHE_MAX_BYTES_DEFAULT,
    CacheDir,
    CacheMaxBytes,
    NoCache,
    cache_of,
)
from ratioscope.cli._options import (
    CHUNK_ELEMENTS_DEFAULT,
    CLIP_DEFAULT,
    DEFAULTS,
    DELTA_SWEEP_DEFAULT,
    DEVICE_DEFAULT,
    FORMAT_DEFAULT,
    FPA_LAMBDA_SWEEP_DEFAULT,
    NONFINITE_DEFAULT,
    ON_BAND_DEFAULT,
    SEQ_CLIP_DEFAULT,
    SEQ_ON_BAND_DEFAULT,
    TOKEN_ON_BAND_DEFAULT,
    TRAINER_DEFAULT,
    ChunkElements,
    Clip,
    CovScope,
    Delta,
    DeltaSweep,
    Device,
    DumpCorrectField,
    DumpCorrectThreshold,
    FigureOut,
    Format,
    FpaLambda,
    FpaLambdaSweep,
    FpaThreshold,
    GroupSize,
    IsThreshold,
    KalmanImpl,
    KalmanQ,
    KalmanV,
    LfrCutoff,
    Mapping,
    MaskPolicy,
    MaxLag,
    MaxLength,
    NonFinite,
    OnBand,
    Quiet,
    SeqClip,
    SeqOnBand,
    Space,
    Temperature,
    ThresholdsFile,
    TokenOnBand,
    TopK,
    TopP,
    Trainer,
    UnsafePickle,
    Window,
)
from ratioscope.cli._parallel import RayAddress, Workers, runner_of
from ratioscope.cli._path_params import path_option

TimelinePaths = Annotated[
    list[str],
    typer.Argument(
        help="Dumps (files, directories, globs) of several steps, or analyze report JSON "
        "files (capture shard reports).",
        show_default=False,
    ),
]
TimelineJson = Annotated[
    Path | None,
    path_option(
        "--json", help="Write the timeline as JSON (atomically).", rich_help_panel="Output"
    ),
]
TimelineParquet = Annotated[
    Path | None,
    path_option("--parquet", help="Write one row per step (Parquet).", rich_help_panel="Output"),
]
StepFrom = Annotated[
    str | None,
    typer.Option(
        "--step-from",
        help="Regular expression with one capture group: the step from each file's path "
        "(wins over file names and stored steps).",
        rich_help_panel="Run",
    ),
]
ReportsDir = Annotated[
    Path | None,
    path_option(
        "--reports-dir",
        metavar="DIR",
        help="Write each step's analyze report there (step_NNNNNN.json, for merge).",
        rich_help_panel="Output",
    ),
]
WithObjectives = Annotated[
    bool,
    typer.Option(
        "--objectives",
        help="Also follow the side-by-side view's headlines (ratioscope objectives: GRPO's "
        "top-1% share and zeroed tokens, GSPO's zeroed tokens, the off-policy sequence mask, "
        "TIS truncation), computed from each step's dumps.",
        rich_help_panel="Run",
    ),
]
TimelineHtml = Annotated[
    Path | None,
    path_option(
        "--html",
        help="Also write the run report there (the HTML file of ratioscope report).",
        rich_help_panel="Output",
    ),
]
HtmlTokenizer = Annotated[
    Path | None,
    path_option(
        "--tokenizer",
        help="With --html: a local Hugging Face tokenizer.json for token text (never downloads).",
        rich_help_panel="Output",
    ),
]
TensorBoardDir = Annotated[
    Path | None,
    path_option(
        "--tensorboard",
        help="Also write each step's headline quantities as TensorBoard scalars "
        "(ratioscope/<key>) to this log directory. Needs ratioscope\\[trackers].",
        rich_help_panel="Trackers",
    ),
]
MlflowUri = Annotated[
    str | None,
    typer.Option(
        "--mlflow",
        help="Also log them to a new run of this MLflow tracking store: a directory "
        "(file store), file:, sqlite:/// or http(s):// URI; experiment "
        "$MLFLOW_EXPERIMENT_NAME or 'ratioscope'. Needs ratioscope\\[trackers].",
        rich_help_panel="Trackers",
    ),
]
WandbRun = Annotated[
    bool,
    typer.Option(
        "--wandb",
        help="Also log them to a W&B run, offline unless $WANDB_MODE says otherwise "
        "(files under $WANDB_DIR or ./wandb; upload later with 'wandb sync'); project "
        "$WANDB_PROJECT or 'ratioscope'. Needs ratioscope\\[trackers].",
        rich_help_panel="Trackers",
    ),
]
TimelineDetail = Annotated[
    bool,
    typer.Option(
        "--detail",
        help="Print the whole verdict: every finding in full (the green ones too) and "
        "each note about the analysis in full. Default: the bottom line, the problems in "
        "full, the rest by name.",
        rich_help_panel="Output",
    ),
]
Columns = Annotated[
    str | None,
    typer.Option(
        "--columns",
        help="Table columns: headline keys or short names, comma-separated, or 'all'.",
        rich_help_panel="Output",
    ),
]


def timeline(
    ctx: typer.Context,
    paths: TimelinePaths,
    json_out: TimelineJson = None,
    parquet_out: TimelineParquet = None,
    html_out: TimelineHtml = None,
    tokenizer: HtmlTokenizer = None,
    step_from: StepFrom = None,
    reports_dir: ReportsDir = None,
    columns: Columns = None,
    detail: TimelineDetail = False,
    objectives: WithObjectives = False,
    thresholds: ThresholdsFile = None,
    tensorboard: TensorBoardDir = None,
    mlflow: MlflowUri = None,
    wandb: WandbRun = False,
    workers: Workers = 1,
    ray: RayAddress = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    cache_max_bytes: CacheMaxBytes = CACHE_MAX_BYTES_DEFAULT,
    device: Device = DEVICE_DEFAULT,
    format: Format = FORMAT_DEFAULT,
    mapping: Mapping = None,
    nonfinite: NonFinite = NONFINITE_DEFAULT,
    unsafe_pickle: UnsafePickle = False,
    group_size: GroupSize = None,
    correct_field: DumpCorrectField = None,
    correct_threshold: DumpCorrectThreshold = None,
    trainer: Trainer = TRAINER_DEFAULT,
    clip: Clip = CLIP_DEFAULT,
    seq_clip: SeqClip = SEQ_CLIP_DEFAULT,
    is_threshold: IsThreshold = DEFAULTS.is_threshold,
    on_band: OnBand = ON_BAND_DEFAULT,
    token_on_band: TokenOnBand = TOKEN_ON_BAND_DEFAULT,
    seq_on_band: SeqOnBand = SEQ_ON_BAND_DEFAULT,
    window: Window = DEFAULTS.window,
    lfr_cutoff: LfrCutoff = DEFAULTS.lfr_cutoff,
    space: Space = DEFAULTS.space,
    kalman_q: KalmanQ = DEFAULTS.kalman_q,
    kalman_v: KalmanV = DEFAULTS.kalman_v,
    mask_policy: MaskPolicy = DEFAULTS.mask_policy,
    kalman_impl: KalmanImpl = DEFAULTS.kalman_impl,
    cov_scope: CovScope = DEFAULTS.cov_scope,
    fpa_lambda: FpaLambda = DEFAULTS.fpa_lambda,
    fpa_lambda_sweep: FpaLambdaSweep = FPA_LAMBDA_SWEEP_DEFAULT,
    fpa_threshold: FpaThreshold = DEFAULTS.fpa_threshold,
    delta: Delta = DEFAULTS.delta,
    delta_sweep: DeltaSweep = DELTA_SWEEP_DEFAULT,
    max_length: MaxLength = None,
    max_lag: MaxLag = None,
    temperature: Temperature = None,
    top_p: TopP = None,
    top_k: TopK = None,
    chunk_elements: ChunkElements = CHUNK_ELEMENTS_DEFAULT,
    quiet: Quiet = False,
) -> None:
    """The headline quantities of a run, one row per training step, with change flags.

    Steps come from the files' names (step_0032.pt, step_N/rank_R.*, slime's
    {rollout_id}_{rank}.pt, NeMo-RL's train_data_step{N}.jsonl), a 'step' scalar in the
    file, or --step-from. Files of one
    step are analysed together; analysis options apply to every step.

    Example: ratioscope timeline sample_data/verl/ --json timeline.json

    Example: ratioscope timeline sample_data/verl/ --detail --columns all

    Example: ratioscope timeline run/ --tensorboard runs/ratioscope --mlflow mlruns --wandb

    Example: ratioscope timeline 'dump/step_*' --ray auto --json timeline.json
    """
    import ratioscope
    from ratioscope.analysis.steps import compile_step_from
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        check_suffix,
        progress_bar,
        stdout_console,
    )
    from ratioscope.cli._options import (
        command_analysis_params,
        command_load_options,
        given_analysis_params,
    )
    from ratioscope.io.loaders import expand_paths
    from ratioscope.judgement.verdict import load_thresholds
    from ratioscope.render.terminal.overview import show_verdict_brief
    from ratioscope.render.terminal.timeline import show_timeline, turning_lines
    from ratioscope.render.terminal.verdict import show_verdict
    from ratioscope.views.trackers import log_timeline, open_trackers, require_trackers

    require_trackers(tensorboard=tensorboard is not None, mlflow=mlflow is not None, wandb=wandb)
    runner = runner_of(workers, ray)
    cache = cache_of(cache_dir, no_cache, cache_max_bytes)
    inputs = [*expand_paths(paths, shard_reports=True), *([thresholds] if thresholds else [])]
    check_output_paths(inputs, [json_out, parquet_out, html_out])
    from ratioscope.io.paths import refuse_file_as_folder

    refuse_file_as_folder(tensorboard, "--tensorboard")  # before any work
    check_suffix(json_out, ".json", "--json")
    check_suffix(parquet_out, ".parquet", "--parquet")
    compile_step_from(step_from)  # a bad pattern fails before any file is read
    if tokenizer is not None and html_out is None:
        from ratioscope.errors import UsageError

        raise UsageError("--tokenizer gives token text to the HTML report: add --html FILE")
    if html_out is not None:
        from ratioscope.cli._common import check_html_path
        from ratioscope.io.tokenizer import TokenText

        check_html_path(html_out, "--html")
        if tokenizer is not None:
            TokenText(tokenizer)
    limits = None if thresholds is None else load_thresholds(thresholds)
    params = command_analysis_params(ctx)
    with progress_bar(not quiet) as progress:
        load = command_load_options(ctx)
        result = ratioscope.timeline(
            paths,
            params=params,
            load_options=load,
            fixed_params=given_analysis_params(ctx),
            device=device,
            chunk_elements=chunk_elements,
            step_from=step_from,
            reports_dir=reports_dir,
            thresholds=limits,
            objectives=objectives,
            progress=progress,
            runner=runner,
            cache=cache,
        )
        html_report = None
        if html_out is not None:
            from ratioscope.render.html.run_report import report_from_timeline

            html_report = report_from_timeline(
                result, params=params, load_options=load, tokenizer=tokenizer, progress=progress
            )
    console = stdout_console()
    if result.verdict is not None and detail:
        show_verdict(console, result.verdict)
    elif result.verdict is not None:
        # the answer first, as analyze prints it; the JSON keeps every finding in full
        show_verdict_brief(console, result.verdict, short_notes=True)
    for line in turning_lines(result):
        console.print(line, highlight=False)
    show_timeline(result, console, columns.split(",") if columns else None)
    if not quiet:  # as analyze shows them (a file left out, an approximation made)
        from ratioscope.cli._common import stderr_console
        from ratioscope.cli._options import PARAMETER_OPTIONS
        from ratioscope.render.terminal.report import show_warnings

        show_warnings({"warnings": result.warnings}, stderr_console(), PARAMETER_OPTIONS)
    if json_out is not None:
        result.write_json(json_out)
    if parquet_out is not None:
        result.write_parquet(parquet_out)
    if html_report is not None and html_out is not None:
        html_report.write_html(html_out)
    log_timeline(result, open_trackers(tensorboard=tensorboard, mlflow=mlflow, wandb=wandb))
    announce_written([json_out, parquet_out, html_out, reports_dir, tensorboard], quiet)


PlotInputs = Annotated[
    list[str],
    typer.Argument(
        help="A timeline JSON file (drawn as stored), or dumps or analyze reports of a run "
        "(a timeline is computed with the default analysis options).",
        show_default=False,
    ),
]


def plot_timeline(
    ctx: typer.Context,
    paths: PlotInputs,
    out: FigureOut,
    step_from: StepFrom = None,
    format: Format = FORMAT_DEFAULT,
    mapping: Mapping = None,
    unsafe_pickle: UnsafePickle = False,
    device: Device = DEVICE_DEFAULT,
    quiet: Quiet = False,
) -> None:
    """Small multiples of the headline quantities over training steps, changes in red.

    Example: ratioscope plot timeline timeline.json --out timeline.png
    """
    from ratioscope.analysis.steps import compile_step_from
    from ratioscope.cli._common import announce_written, check_output_paths, progress_bar
    from ratioscope.cli._options import command_load_options
    from ratioscope.figures.timeline import timeline_figure, timeline_or_analysis
    from ratioscope.render.png.output import check_figure_path
    from ratioscope.render.png.timeline import plot_timeline as draw

    check_figure_path(out)
    check_output_paths([Path(p) for p in paths], [out])
    compile_step_from(step_from)
    with progress_bar(not quiet) as progress:
        result, source = timeline_or_analysis(
            paths,
            load_options=command_load_options(ctx),
            device=device,
            step_from=step_from,
            progress=progress,
        )
    draw(timeline_figure(result, source), out)
    announce_written([out], quiet)
