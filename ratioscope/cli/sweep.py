"""``ratioscope sweep``: the KPO Table 2 statistics for several Kalman noise ratios Q/V."""

from __future__ import annotations

from typing import Annotated

import typer

from ratioscope.cli._options import (
    DEFAULTS,
    DEVICE_DEFAULT,
    FORMAT_DEFAULT,
    NONFINITE_DEFAULT,
    QV_DEFAULT,
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
    band_text,
    option_text,
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
    on_band: OnBand = band_text(DEFAULTS.on_band),
    token_on_band: TokenOnBand = band_text(DEFAULTS.token_on_band),
    seq_on_band: SeqOnBand = band_text(DEFAULTS.seq_on_band),
    window: Window = DEFAULTS.window,
    seq_clip: SeqClip = option_text(DEFAULTS.seq_clip),
    mask_policy: MaskPolicy = DEFAULTS.mask_policy,
    quiet: Quiet = False,
) -> None:
    """Token states, switching, LFR and variance per Kalman Q/V (KPO Fig. 4 / Table 2).

    Example: ratioscope sweep sample_data/verl/ --qv 1e-6,1e-4,1e-2 --json sweep.json
    """
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        check_suffix,
        parse_floats,
        progress_bar,
        stderr_console,
        stdout_console,
    )
    from ratioscope.cli._options import command_analysis_params, load_options
    from ratioscope.io.loaders import expand_paths
    from ratioscope.render.terminal import show_sweep, show_warnings
    from ratioscope.sweep import sweep as run_sweep

    check_output_paths(expand_paths(paths), [json_out])
    check_suffix(json_out, ".json", "--json")
    params = command_analysis_params(ctx)
    with progress_bar(not quiet) as progress:
        result = run_sweep(
            paths,
            parse_floats(qv, "--qv"),
            params=params,
            load_options=load_options(format, mapping, nonfinite, unsafe_pickle),
            device=device,
            progress=progress,
        )
    show_sweep(result, stdout_console())
    show_warnings(result, stderr_console())
    if json_out is not None:
        result.write_json(json_out)
    announce_written([json_out], quiet)
