"""Option declarations shared by the commands that read dumps (analyze, sweep, plot, info).

Declared once so that every command spells, documents and parses them the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ratioscope.cli._common import parse_floats, parse_mapping
from ratioscope.io.profiles import FORMAT_CHOICES

DUMP_HELP = (
    "Dump files (.pt .pth .safetensors .npz .parquet .jsonl, SkyRL .pkl), directories or globs."
)

Paths = Annotated[list[str], typer.Argument(help=DUMP_HELP, show_default=False)]
Format = Annotated[
    str,
    typer.Option(
        "--format",
        "-f",
        help=f"Key layout: {', '.join(FORMAT_CHOICES[:-1])} or {FORMAT_CHOICES[-1]}.",
        rich_help_panel="Input",
    ),
]
Mapping = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        help="Patch one key: canonical=theirs (repeatable), e.g. --map mask=attention_mask.",
        rich_help_panel="Input",
    ),
]
NonFinite = Annotated[
    str,
    typer.Option(
        "--nonfinite",
        help="NaN/inf on valid tokens: 'error' (default) or 'mask' them with a warning.",
        rich_help_panel="Input",
    ),
]
UnsafePickle = Annotated[
    bool,
    typer.Option(
        "--unsafe-pickle",
        help="Allow .pkl and full pickles. A pickle can run arbitrary code: trusted files only.",
        rich_help_panel="Input",
    ),
]
GroupSize = Annotated[
    int | None,
    typer.Option(
        "--group-size",
        help="Files without group ids: every N consecutive rows form a GRPO group "
        "(TRL's num_generations).",
        rich_help_panel="Input",
        min=1,
    ),
]
Device = Annotated[
    str,
    typer.Option("--device", help="auto (CUDA when present), cpu or cuda.", rich_help_panel="Run"),
]
JsonOut = Annotated[
    Path | None,
    typer.Option("--json", help="Write the report as JSON (atomically).", rich_help_panel="Output"),
]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar on stderr.", rich_help_panel="Run")
]

_A = "Analysis"
Clip = Annotated[
    str, typer.Option("--clip", help="Token PPO clip eps_low,eps_high.", rich_help_panel=_A)
]
SeqClip = Annotated[
    str,
    typer.Option(
        "--seq-clip",
        help="Clip eps_low,eps_high for the sequence and Kalman variants (GSPO/KPO).",
        rich_help_panel=_A,
    ),
]
IsThreshold = Annotated[
    float,
    typer.Option("--is-threshold", help="Count ratios outside [1/c, c].", rich_help_panel=_A),
]
OnBand = Annotated[
    str,
    typer.Option(
        "--on-band",
        help="On-policy band eps_low,eps_high around r = 1 of the Kalman-filtered ratio "
        "(KPO App. C.1).",
        rich_help_panel=_A,
    ),
]
#: the raw rows' default: r = 1 up to float32 rounding (AnalysisParams.token_on_band)
EXACT = "exact"
_RAW_BAND = (
    "'exact' = r = 1 up to float32 rounding (2^-24 each side; KPO App. C.1), "
    "0 = z == 0 bitwise, or eps_low,eps_high."
)
TokenOnBand = Annotated[
    str,
    typer.Option(
        "--token-on-band",
        help=f"On-policy band of the raw token ratio: {_RAW_BAND}",
        rich_help_panel=_A,
    ),
]
SeqOnBand = Annotated[
    str,
    typer.Option(
        "--seq-on-band",
        help=f"On-policy band of the sequence-level ratio: {_RAW_BAND}",
        rich_help_panel=_A,
    ),
]
Window = Annotated[
    int, typer.Option("--window", help="Window length in tokens (KPO: 50).", rich_help_panel=_A)
]
LfrCutoff = Annotated[
    float,
    typer.Option(
        "--lfr-cutoff", help="Low-frequency band as a fraction of Nyquist.", rich_help_panel=_A
    ),
]
Space = Annotated[
    str,
    typer.Option("--space", help="Statistics of log r ('log') or r ('ratio').", rich_help_panel=_A),
]
KalmanQ = Annotated[float, typer.Option("--kalman-q", help="Process noise Q.", rich_help_panel=_A)]
KalmanV = Annotated[
    float, typer.Option("--kalman-v", help="Observation noise V.", rich_help_panel=_A)
]
MaskPolicy = Annotated[
    str,
    typer.Option(
        "--mask-policy",
        help="Masked tokens inside a sequence: 'zero' (observe 0, the authors' code) or 'skip'.",
        rich_help_panel=_A,
    ),
]
KalmanImpl = Annotated[
    str,
    typer.Option(
        "--kalman-impl",
        help="'scan' (exact) or 'reference' (the authors' closed form, for comparison).",
        rich_help_panel=_A,
    ),
]
_O = "Objectives (CW-GRPO, FPA, TEPO, QUATRO)"
CovScope = Annotated[
    str,
    typer.Option(
        "--cov-scope",
        help="CW-GRPO means and sigma per 'group', per 'batch' (file), or 'auto' (group if ids).",
        rich_help_panel=_O,
    ),
]
FpaLambda = Annotated[
    float,
    typer.Option("--fpa-lambda", help="FPA extrapolation strength lambda.", rich_help_panel=_O),
]
FpaLambdaSweep = Annotated[
    str,
    typer.Option(
        "--fpa-lambda-sweep", help="FPA lambdas to compare (comma-separated).", rich_help_panel=_O
    ),
]
FpaThreshold = Annotated[
    float,
    typer.Option(
        "--fpa-threshold",
        help="Count FPA sequence weights below this value (FPA Fig. 3).",
        rich_help_panel=_O,
    ),
]
Delta = Annotated[
    float, typer.Option("--delta", help="QUATRO trust-region radius delta.", rich_help_panel=_O)
]
DeltaSweep = Annotated[
    str,
    typer.Option(
        "--delta-sweep", help="QUATRO radii to compare (comma-separated).", rich_help_panel=_O
    ),
]
ChunkElements = Annotated[
    int,
    typer.Option(
        "--chunk-elements",
        help="Rows x tokens per chunk (bounds memory).",
        rich_help_panel="Run",
        min=1,
    ),
]


#: library parameter -> the option that sets it. Library errors name parameters as
#: Python spells them (ParameterError); the error boundary (cli/__init__.py) names the
#: option instead. A parameter that no option sets is not here and keeps its name.
PARAMETER_OPTIONS = {
    # AnalysisParams
    "clip": "--clip",
    "seq_clip": "--seq-clip",
    "is_threshold": "--is-threshold",
    "on_band": "--on-band",
    "token_on_band": "--token-on-band",
    "seq_on_band": "--seq-on-band",
    "window": "--window",
    "lfr_cutoff": "--lfr-cutoff",
    "space": "--space",
    "kalman_q": "--kalman-q",
    "kalman_v": "--kalman-v",
    "mask_policy": "--mask-policy",
    "kalman_impl": "--kalman-impl",
    "cov_scope": "--cov-scope",
    "fpa_lambda": "--fpa-lambda",
    "fpa_lambdas": "--fpa-lambda-sweep",
    "fpa_threshold": "--fpa-threshold",
    "delta": "--delta",
    "deltas": "--delta-sweep",
    # plot ratios
    "sequence": "--sequence",
    # evaluation (eval-passk, eval-ucc, plot passk/ucc/similarity)
    "ks": "--k",
    "k": "--k",
    "threshold": "--threshold",
    "linkage": "--linkage",
    "max_pairs": "--max-pairs",
    "base_method": "--base",
    "fields.problem": "--problem-field",
    "fields.response": "--response-field",
    "fields.correct": "--correct-field",
    "fields.method": "--method-field",
    "fields.dataset": "--dataset-field",
    "fields.correct_threshold": "--correct-threshold",
    "fields.allow_empty": "--allow-empty-responses",
    # reading dumps
    "unsafe_pickle": "--unsafe-pickle",
    "nonfinite": "--nonfinite",
    # loading and running (LoadOptions, load, analyze, sweep)
    "format": "--format",
    "mapping": "--map",
    "group_size": "--group-size",
    "device": "--device",
    "qvs": "--qv",
}


def load_options(
    format: str,
    mapping: list[str] | None,
    nonfinite: str,
    unsafe_pickle: bool,
    group_size: int | None = None,
):
    from ratioscope.errors import UsageError
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.io.profiles import FORMAT_CHOICES

    if format not in FORMAT_CHOICES:
        raise UsageError(f"--format must be one of {', '.join(FORMAT_CHOICES)}, got '{format}'")
    if nonfinite not in ("error", "mask"):
        raise UsageError(f"--nonfinite must be 'error' or 'mask', got '{nonfinite}'")
    return LoadOptions(
        format=format,
        mapping=parse_mapping(mapping),
        nonfinite=nonfinite,
        unsafe_pickle=unsafe_pickle,
        group_size=group_size,
    )


def analysis_params(**options: Any):
    """AnalysisParams from CLI strings: pairs like "0.2,0.28" are parsed here, and
    'exact' for a band is the raw rows' rule (r = 1 up to float32 rounding)."""
    from ratioscope.functional.token_stats import EXACT_ON_BAND
    from ratioscope.params import AnalysisParams

    pairs = ("clip", "seq_clip", "on_band", "token_on_band", "seq_on_band")
    bands = ("on_band", "token_on_band", "seq_on_band")
    lists = ("fpa_lambdas", "deltas")
    values: dict[str, Any] = {}
    for key, value in options.items():
        if key in bands and isinstance(value, str) and value.strip().lower() == EXACT:
            value = EXACT_ON_BAND
        elif key in pairs and isinstance(value, str):
            value = parse_floats(value, PARAMETER_OPTIONS[key], count=2)
        elif key in lists and isinstance(value, str):
            value = parse_floats(value, PARAMETER_OPTIONS[key])
        values[key] = value
    return AnalysisParams(**values)
