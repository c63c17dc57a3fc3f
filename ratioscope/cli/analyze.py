"""``ratioscope analyze``: every diagnostic a dump can feed, as tables, JSON and Parquet."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
    JsonOut,
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
    Paths,
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
    VerdictJson,
    Window,
)
from ratioscope.cli._parallel import RayAddress, Workers, runner_of
from ratioscope.cli._path_params import path_option

Sections = Annotated[
    str | None,
    typer.Option(
        "--sections",
        help="Only these sections, comma-separated: ratios, mismatch, covariance, "
        "future_policy, tepo, trust_region, staleness, vitals (default: all).",
        rich_help_panel="Run",
    ),
]
VerdictBaseline = Annotated[
    Path | None,
    path_option(
        "--baseline",
        help="A healthy run's report JSON (analyze --json): the verdict adds findings "
        "relative to it, e.g. 'policy drift k3 = 1.5e-2, 97x the baseline's 1.5e-4' "
        "(docs/health.md).",
        rich_help_panel="Output",
    ),
]
Detail = Annotated[
    bool,
    typer.Option(
        "--detail",
        help="Every table: the full verdict, KPO Table 2, CW-GRPO Table 1 and Fig. 3, FPA "
        "lambda sweeps, TEPO quadrants, QUATRO delta sweep, staleness by mini-batch. "
        "Default: the verdict, the vitals and the key numbers of each section.",
        rich_help_panel="Output",
    ),
]
AnalyzeQuiet = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="Only the verdict block and errors (with --detail: every table and the "
        "warnings, without the progress bar).",
        rich_help_panel="Run",
    ),
]
ParquetOut = Annotated[
    Path | None,
    path_option(
        "--parquet", help="Write one row per sequence (Parquet).", rich_help_panel="Output"
    ),
]


def analyze(
    ctx: typer.Context,
    paths: Paths,
    json_out: JsonOut = None,
    parquet_out: ParquetOut = None,
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
    sections: Sections = None,
    thresholds: ThresholdsFile = None,
    verdict_json: VerdictJson = None,
    baseline: VerdictBaseline = None,
    workers: Workers = 1,
    ray: RayAddress = None,
    detail: Detail = False,
    quiet: AnalyzeQuiet = False,
) -> None:
    """Diagnose a run from its dumps: the verdict, the vital signs and the key numbers of
    each section (files are streamed one by one).

    Example: ratioscope analyze sample_data/verl/ --json report.json --parquet seqs.parquet

    Example: ratioscope analyze sample_data/verl/ --detail   # every table

    Example: ratioscope analyze 'dump/step_*' --ray auto --json report.json
    """
    import ratioscope
    from ratioscope.analysis.parallel import analyze_in_tasks
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        check_suffix,
        progress_bar,
        stderr_console,
        stdout_console,
    )
    from ratioscope.cli._options import (
        PARAMETER_OPTIONS,
        command_analysis_params,
        command_load_options,
        given_analysis_params,
    )
    from ratioscope.errors import UsageError
    from ratioscope.io.loaders import expand_paths
    from ratioscope.judgement.verdict import Thresholds, load_thresholds, verdict
    from ratioscope.render.terminal.overview import Layout, show_analyze
    from ratioscope.render.terminal.report import show_warnings
    from ratioscope.report.files import read_baseline

    inputs = [*expand_paths(paths), *(p for p in (thresholds, baseline) if p is not None)]
    check_output_paths(inputs, [json_out, parquet_out, verdict_json])
    # read before the analysis: a malformed thresholds file fails in a second, not after it
    limits = Thresholds() if thresholds is None else load_thresholds(thresholds)
    reference = None if baseline is None else read_baseline(baseline)
    check_suffix(parquet_out, ".parquet", "--parquet")
    check_suffix(json_out, ".json", "--json")
    check_suffix(verdict_json, ".json", "--verdict-json")
    params = command_analysis_params(ctx)
    runner = runner_of(workers, ray)
    if runner.parallel and parquet_out is not None:
        raise UsageError(
            "--parquet needs every sequence's row, which --workers/--ray do not bring back; "
            "write it without them"
        )
    options = command_load_options(ctx)
    fixed = given_analysis_params(ctx)
    chosen = sections.split(",") if sections else None
    with progress_bar(not quiet) as progress:
        if runner.parallel:
            report = analyze_in_tasks(
                paths, runner, params=params, load_options=options, device=device,
                chunk_elements=chunk_elements, sections=chosen, progress=progress,
                fixed_params=fixed,
            )  # fmt: skip
        else:
            report = ratioscope.analyze(
                paths,
                params=params,
                load_options=options,
                device=device,
                chunk_elements=chunk_elements,
                per_sequence=parquet_out is not None,
                progress=progress,
                sections=chosen,
                fixed_params=fixed,
            )
    health = verdict(report, limits, reference)
    layout: Layout = "detail" if detail else "brief" if quiet else "default"
    show_analyze(report, health, stdout_console(), layout)
    if layout != "brief":  # -q: the verdict block and errors only (the JSON keeps them)
        show_warnings(report, stderr_console(), PARAMETER_OPTIONS)
    if json_out is not None:
        report.write_json(json_out)
    if parquet_out is not None:
        report.write_parquet(parquet_out)
    if verdict_json is not None:
        health.write_json(verdict_json)
    announce_written([json_out, parquet_out, verdict_json], quiet)
