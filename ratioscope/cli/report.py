"""``ratioscope report``: the run report, one self-contained HTML file (docs/report.md)."""

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
from ratioscope.cli.timeline import StepFrom
from ratioscope.views.drilldown import DEFAULT_TOKEN_BYTES, DEFAULT_TOP

ReportPaths = Annotated[
    list[str],
    typer.Argument(
        help="The run: dumps (files, directories, globs) of several steps, or analyze report "
        "JSON files (a run page without drill-down).",
        show_default=False,
    ),
]
ReportOut = Annotated[
    Path,
    path_option("--out", "-o", help="The HTML file to write (atomically).", show_default=False),
]
Baseline = Annotated[
    list[str] | None,
    typer.Option(
        "--baseline",
        help="Another run (its dumps, reports or a timeline JSON file) drawn beside this one; "
        "repeat for several paths.",
        show_default=False,
    ),
]
Tokenizer = Annotated[
    Path | None,
    path_option(
        "--tokenizer",
        help="A local Hugging Face tokenizer.json: token text instead of ids (never downloads).",
        rich_help_panel="Report",
    ),
]
Top = Annotated[
    int,
    typer.Option("--top", help="Sequences kept per ranking and step.", rich_help_panel="Report"),
]
TokenBudget = Annotated[
    float,
    typer.Option(
        "--token-budget",
        help="MiB of per-token data the file may hold; the rankings' first sequences are kept "
        "first (docs/report.md).",
        rich_help_panel="Report",
    ),
]
ReportMethods = Annotated[
    str | None,
    typer.Option(
        "--methods",
        help="Objectives whose per-token coefficients the sequence page offers, comma-separated "
        "(default: grpo,gspo,gmpo,cispo,sapo,kpo,tepo,tis,icepop,opsm; 'all' for every method).",
        rich_help_panel="Report",
        show_default=False,
    ),
]
Title = Annotated[
    str | None,
    typer.Option("--title", help="The page title.", rich_help_panel="Report", show_default=False),
]


def report(
    ctx: typer.Context,
    paths: ReportPaths,
    out: ReportOut,
    baseline: Baseline = None,
    tokenizer: Tokenizer = None,
    top: Top = DEFAULT_TOP,
    token_budget: TokenBudget = DEFAULT_TOKEN_BYTES / 2**20,
    methods: ReportMethods = None,
    title: Title = None,
    step_from: StepFrom = None,
    thresholds: ThresholdsFile = None,
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
    workers: Workers = 1,
    ray: RayAddress = None,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    cache_max_bytes: CacheMaxBytes = CACHE_MAX_BYTES_DEFAULT,
    quiet: Quiet = False,
) -> None:
    """The run report: one self-contained HTML file, from the trend to a step, a sequence
    and its tokens.

    The run page holds the verdict, the vitals, the timeline as interactive small
    multiples and the per-step table; click a step for its sequences ranked (largest
    mismatch, most clipped, largest gradient share, entropy drop, longest,
    length-limited), and a sequence for its tokens coloured by a chosen quantity.
    Opens from a file:// URL with no network access.

    Example: ratioscope report sample_data/verl_steps/ --out report.html
    """
    from ratioscope.analysis.steps import compile_step_from
    from ratioscope.cli._common import (
        announce_written,
        check_html_path,
        check_output_paths,
        progress_bar,
    )
    from ratioscope.cli._options import (
        command_analysis_params,
        command_load_options,
        given_analysis_params,
    )
    from ratioscope.errors import UsageError
    from ratioscope.io.loaders import expand_paths
    from ratioscope.judgement.verdict import load_thresholds
    from ratioscope.render.html.run_report import run_report
    from ratioscope.views.drilldown import DEFAULT_METHODS

    check_html_path(out, "--out")
    cache = cache_of(cache_dir, no_cache, cache_max_bytes)
    if not 0 <= token_budget < float("inf"):  # NaN fails both
        raise UsageError(f"--token-budget must be a finite number >= 0 MiB, got {token_budget}")
    inputs = [*expand_paths(paths, shard_reports=True), *([thresholds] if thresholds else [])]
    if baseline:
        inputs += expand_paths(baseline, shard_reports=True)
    check_output_paths(inputs, [out])
    compile_step_from(step_from)
    limits = None if thresholds is None else load_thresholds(thresholds)
    with progress_bar(not quiet) as progress:
        result = run_report(
            paths,
            baseline=baseline or None,
            params=command_analysis_params(ctx),
            load_options=command_load_options(ctx),
            fixed_params=given_analysis_params(ctx),
            device=device,
            chunk_elements=chunk_elements,
            step_from=step_from,
            thresholds=limits,
            tokenizer=tokenizer,
            methods=methods.split(",") if methods else DEFAULT_METHODS,
            top=top,
            token_bytes=int(token_budget * 2**20),
            title=title,
            progress=progress,
            runner=runner_of(workers, ray),
            cache=cache,
        )
    result.write_html(out)
    announce_written([out], quiet)
