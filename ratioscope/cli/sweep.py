"""``ratioscope sweep``: the KPO Table 2 statistics for several Kalman noise ratios Q/V."""

from __future__ import annotations

from typing import Annotated

import typer

from ratioscope.cli._options import (
    DEFAULTS,
    DEVICE_DEFAULT,
    FORMAT_DEFAULT,
    NONFINITE_DEFAULT,
    ON_BAND_DEFAULT,
    QV_DEFAULT,
    SEQ_CLIP_DEFAULT,
    SEQ_ON_BAND_DEFAULT,
    TOKEN_ON_BAND_DEFAULT,
    Device,
    Format,
    JsonOut,
    Mapping,
    MaskPolicy,
    NonFinite,
    OnBand,
    Paths,
    Quiet,
    SeqClip,
    SeqOnBand,
    TokenOnBand,
    UnsafePickle,
    Window,
)

Qv = Annotated[str, typer.Option("--qv", help="Comma-separated Q/V values (V stays fixed).")]


def sweep(
    ctx: typer.Context,
    paths: Paths,
    qv: Qv = QV_DEFAULT,
    json_out: JsonOut = None,
    device: Device = DEVICE_DEFAULT,
    format: Format = FORMAT_DEFAULT,
    mapping: Mapping = None,
    nonfinite: NonFinite = NONFINITE_DEFAULT,
    unsafe_pickle: UnsafePickle = False,
    on_band: OnBand = ON_BAND_DEFAULT,
    token_on_band: TokenOnBand = TOKEN_ON_BAND_DEFAULT,
    seq_on_band: SeqOnBand = SEQ_ON_BAND_DEFAULT,
    window: Window = DEFAULTS.window,
    seq_clip: SeqClip = SEQ_CLIP_DEFAULT,
    mask_policy: MaskPolicy = DEFAULTS.mask_policy,
    quiet: Quiet = False,
) -> None:
    """Token states, switching, LFR and variance per Kalman Q/V (KPO Fig. 4 / Table 2).

    Example: ratioscope sweep sample_data/verl/ --qv 1e-6,1e-4,1e-2 --json sweep.json
    """
    from ratioscope.analysis.sweep import sweep as run_sweep
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        check_suffix,
        parse_floats,
        progress_bar,
        stderr_console,
        stdout_console,
    )
    from ratioscope.cli._options import (
        PARAMETER_OPTIONS,
        command_analysis_params,
        command_load_options,
    )
    from ratioscope.io.loaders import expand_paths
    from ratioscope.render.terminal.report import show_sweep, show_warnings

    check_output_paths(expand_paths(paths), [json_out])
    check_suffix(json_out, ".json", "--json")
    params = command_analysis_params(ctx)
    with progress_bar(not quiet) as progress:
        result = run_sweep(
            paths,
            parse_floats(qv, "--qv"),
            params=params,
            load_options=command_load_options(ctx),
            device=device,
            progress=progress,
        )
    show_sweep(result, stdout_console())
    show_warnings(result, stderr_console(), PARAMETER_OPTIONS)
    if json_out is not None:
        result.write_json(json_out)
    announce_written([json_out], quiet)
