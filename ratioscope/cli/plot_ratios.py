"""Token-ratio figures for ``ratioscope plot``: spectrum, ratios, windows, runlengths."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._options import (
    DEFAULTS,
    DEVICE_DEFAULT,
    FORMAT_DEFAULT,
    ON_BAND_DEFAULT,
    SEQ_ON_BAND_DEFAULT,
    TOKEN_ON_BAND_DEFAULT,
    Device,
    FigureOut,
    Format,
    KalmanQ,
    KalmanV,
    Mapping,
    MaskPolicy,
    OnBand,
    Quiet,
    SeqOnBand,
    TokenOnBand,
    UnsafePickle,
    Window,
)

Inputs = Annotated[
    list[str],
    typer.Argument(
        help="Dumps (analysed) or analyze report JSON file(s) (plotted as stored; the "
        "analysis options must then match the report's params or be left out).",
        show_default=False,
    ),
]
TraceInputs = Annotated[
    list[str],
    typer.Argument(
        help="Dump files, directories or globs; a report JSON holds no per-token ratios.",
        show_default=False,
    ),
]
Sequence = Annotated[
    int | None,
    typer.Option(
        "--sequence",
        "-s",
        help="Sequence index, counted over all files (default: the first file's sequence "
        "of at least median length that switches state most often).",
        min=0,
    ),
]


def register(plot_app: typer.Typer) -> None:
    """Add this module's plot kinds to ``plot_app``."""
    for kind, doc in _REPORT_FIGURES.items():
        plot_app.command(kind)(_report_figure(kind, doc))
    plot_app.command("ratios")(ratios)


#: figures drawn from a report's ``ratios`` section: kind -> help text
_REPORT_FIGURES = {
    "spectrum": """Mean periodogram per ratio variant with the low-frequency band marked (KPO C.2).

    Example: ratioscope plot spectrum sample_data/verl/ --out spectrum.png
    """,
    "windows": """Window-wise off-policy frequency, mean ± std over window index (KPO Fig. 1).

    Example: ratioscope plot windows sample_data/verl/ --out windows.png
    """,
    "runlengths": """Run-length distributions of the up, down and on states per ratio variant.

    Example: ratioscope plot runlengths sample_data/verl/ --out runs.png
    """,
}


def _report_figure(kind: str, doc: str):
    """A command drawing ``kind`` from a dump (analysed, ratios only) or a report JSON."""

    def command(
        ctx: typer.Context,
        paths: Inputs,
        out: FigureOut,
        window: Window = DEFAULTS.window,
        on_band: OnBand = ON_BAND_DEFAULT,
        token_on_band: TokenOnBand = TOKEN_ON_BAND_DEFAULT,
        seq_on_band: SeqOnBand = SEQ_ON_BAND_DEFAULT,
        kalman_q: KalmanQ = DEFAULTS.kalman_q,
        kalman_v: KalmanV = DEFAULTS.kalman_v,
        format: Format = FORMAT_DEFAULT,
        mapping: Mapping = None,
        unsafe_pickle: UnsafePickle = False,
        device: Device = DEVICE_DEFAULT,
        quiet: Quiet = False,
    ) -> None:
        from ratioscope.analysis.pipeline import report_or_analysis
        from ratioscope.cli._common import announce_written, check_output_paths, progress_bar
        from ratioscope.cli._options import command_analysis_params, command_load_options
        from ratioscope.render.png import ratios as ratio_plots
        from ratioscope.render.png.output import check_figure_path

        check_figure_path(out)
        check_output_paths([Path(p) for p in paths], [out])
        bands = ("on_band", "token_on_band", "seq_on_band")
        refuse_report_options(ctx, paths, ("window", *bands, "kalman_q", "kalman_v"))
        params = command_analysis_params(ctx)
        with progress_bar(not quiet) as progress:
            report, source = report_or_analysis(
                paths,
                params=params,
                load_options=command_load_options(ctx),
                device=device,
                progress=progress,
                sections=["ratios"],
            )
        getattr(ratio_plots, f"plot_{kind}")(report, out, source)
        announce_written([out], quiet)

    command.__name__ = kind
    command.__doc__ = doc
    return command


def ratios(
    ctx: typer.Context,
    paths: TraceInputs,
    out: FigureOut,
    sequence: Sequence = None,
    on_band: OnBand = ON_BAND_DEFAULT,
    token_on_band: TokenOnBand = TOKEN_ON_BAND_DEFAULT,
    seq_on_band: SeqOnBand = SEQ_ON_BAND_DEFAULT,
    kalman_q: KalmanQ = DEFAULTS.kalman_q,
    kalman_v: KalmanV = DEFAULTS.kalman_v,
    mask_policy: MaskPolicy = DEFAULTS.mask_policy,
    format: Format = FORMAT_DEFAULT,
    mapping: Mapping = None,
    unsafe_pickle: UnsafePickle = False,
    quiet: Quiet = False,
) -> None:
    """One sequence's raw, sequence-level and Kalman-filtered log-ratio (KPO Fig. 1).

    Needs a dump: reports hold no per-token values.

    Example: ratioscope plot ratios sample_data/verl/step_0032.pt --out seq.png
    """
    from ratioscope.cli._common import announce_written, check_output_paths
    from ratioscope.cli._options import command_analysis_params, command_load_options
    from ratioscope.errors import UsageError
    from ratioscope.figures.ratios import ratio_trace
    from ratioscope.io.paths import is_report_path
    from ratioscope.render.png.output import check_figure_path
    from ratioscope.render.png.ratios import plot_trace

    check_figure_path(out)
    check_output_paths([Path(p) for p in paths], [out])
    if any(is_report_path(p) for p in paths):
        raise UsageError("plot ratios needs a dump: a report JSON holds no per-token ratios")
    params = command_analysis_params(ctx)
    trace = ratio_trace(paths, sequence, params, command_load_options(ctx))
    plot_trace(trace, out)
    announce_written([out], quiet)


def refuse_report_options(ctx: typer.Context, paths: list[str], names: tuple[str, ...]) -> None:
    """A report is plotted as stored: an analysis option the user set must match it.

    Checked before any work, against the reports' ``params.analysis``, by the library's
    one rule (:func:`ratioscope.data.params.refuse_unlike_report`).
    """
    from ratioscope.cli._common import given
    from ratioscope.cli._options import analysis_params
    from ratioscope.data.params import refuse_unlike_report, stored_analysis
    from ratioscope.io.documents import read_json_report
    from ratioscope.io.paths import is_report_path

    reports = [Path(p) for p in paths if is_report_path(p)]
    wanted = [name for name in names if given(ctx, name)]
    if not reports or not wanted:
        return
    params = analysis_params(**{name: ctx.params[name] for name in wanted})
    chosen = {name: getattr(params, name) for name in wanted}
    for path in reports:
        stored = (read_json_report(path).get("params") or {}).get("analysis") or {}
        refuse_unlike_report(chosen, stored_analysis(stored), path, "dump")
