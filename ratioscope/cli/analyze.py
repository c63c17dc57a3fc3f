"""``ratioscope analyze``: every diagnostic a dump can feed, as tables, JSON and Parquet."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._options import (
    ChunkElements,
    Clip,
    CovScope,
    Delta,
    DeltaSweep,
    Device,
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
    NonFinite,
    OnBand,
    Paths,
    Quiet,
    SeqClip,
    SeqOnBand,
    Space,
    TokenOnBand,
    UnsafePickle,
    Window,
)

Sections = Annotated[
    str | None,
    typer.Option(
        "--sections",
        help="Only these sections, comma-separated: ratios, mismatch, covariance, "
        "future_policy, tepo, trust_region (default: all).",
        rich_help_panel="Run",
    ),
]
ParquetOut = Annotated[
    Path | None,
    typer.Option(
        "--parquet", help="Write one row per sequence (Parquet).", rich_help_panel="Output"
    ),
]


def analyze(
    paths: Paths,
    json_out: JsonOut = None,
    parquet_out: ParquetOut = None,
    device: Device = "auto",
    format: Format = "auto",
    mapping: Mapping = None,
    nonfinite: NonFinite = "error",
    unsafe_pickle: UnsafePickle = False,
    group_size: GroupSize = None,
    clip: Clip = "0.2,0.28",
    seq_clip: SeqClip = "3e-4,4e-4",
    is_threshold: IsThreshold = 2.0,
    on_band: OnBand = "3e-4,4e-4",
    token_on_band: TokenOnBand = "exact",
    seq_on_band: SeqOnBand = "exact",
    window: Window = 50,
    lfr_cutoff: LfrCutoff = 0.1,
    space: Space = "log",
    kalman_q: KalmanQ = 1e-6,
    kalman_v: KalmanV = 1.0,
    mask_policy: MaskPolicy = "zero",
    kalman_impl: KalmanImpl = "scan",
    cov_scope: CovScope = "auto",
    fpa_lambda: FpaLambda = 1.0,
    fpa_lambda_sweep: FpaLambdaSweep = "0,0.5,1,2,5,10",
    fpa_threshold: FpaThreshold = 0.2,
    delta: Delta = 0.01,
    delta_sweep: DeltaSweep = "0.1,0.01,0.001",
    chunk_elements: ChunkElements = 1 << 20,
    sections: Sections = None,
    quiet: Quiet = False,
) -> None:
    """Diagnose importance ratios in one or more dumps (files are streamed one by one).

    Example: ratioscope analyze sample_data/verl/ --json report.json --parquet seqs.parquet
    """
    import ratioscope
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        check_suffix,
        progress_bar,
        stderr_console,
        stdout_console,
    )
    from ratioscope.cli._options import analysis_params, load_options
    from ratioscope.io.loaders import expand_paths
    from ratioscope.render.terminal import show_report, show_warnings

    check_output_paths(expand_paths(paths), [json_out, parquet_out])
    check_suffix(parquet_out, ".parquet", "--parquet")
    params = analysis_params(
        clip=clip, seq_clip=seq_clip, is_threshold=is_threshold, on_band=on_band,
        token_on_band=token_on_band, seq_on_band=seq_on_band,
        window=window, lfr_cutoff=lfr_cutoff, space=space, kalman_q=kalman_q,
        kalman_v=kalman_v, mask_policy=mask_policy, kalman_impl=kalman_impl,
        cov_scope=cov_scope, fpa_lambda=fpa_lambda, fpa_lambdas=fpa_lambda_sweep,
        fpa_threshold=fpa_threshold, delta=delta, deltas=delta_sweep,
    )  # fmt: skip
    with progress_bar(not quiet) as progress:
        report = ratioscope.analyze(
            paths,
            params=params,
            load_options=load_options(format, mapping, nonfinite, unsafe_pickle, group_size),
            device=device,
            chunk_elements=chunk_elements,
            per_sequence=parquet_out is not None,
            progress=progress,
            sections=sections.split(",") if sections else None,
        )
    show_report(report, stdout_console())
    show_warnings(report, stderr_console())
    if json_out is not None:
        report.write_json(json_out)
    if parquet_out is not None:
        report.write_parquet(parquet_out)
    announce_written([json_out, parquet_out], quiet)
