"""Option declarations shared by the commands, and the defaults their signatures take.

Declared once so that every command spells, documents and parses them the same way:
an option is an ``Annotated`` alias (shared ones here, a command's own at the top of its
module), and a default comes from the library (:data:`DEFAULTS`, the constants below),
so ``--help`` shows the value the library applies.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ratioscope import defaults
from ratioscope.cli._common import parse_floats, parse_mapping
from ratioscope.cli._path_params import path_argument, path_option
from ratioscope.data.params import AnalysisParams
from ratioscope.functional.token_stats import EXACT_ON_BAND
from ratioscope.io.profiles import FORMAT_CHOICES

if TYPE_CHECKING:
    from ratioscope.io.loaders import LoadOptions

#: the raw rows' default: r = 1 up to float32 rounding (AnalysisParams.token_on_band)
EXACT = "exact"
#: the library's analysis defaults; a command's analysis options default to these
DEFAULTS = AnalysisParams()

# Defaults of the library (ratioscope/defaults.py imports nothing, so --help stays fast)
FORMAT_DEFAULT = defaults.FORMAT
NONFINITE_DEFAULT = defaults.NONFINITE
#: None: the device's chunk (analysis.device.chunk_elements_for)
CHUNK_ELEMENTS_DEFAULT = None
THRESHOLD_DEFAULT = defaults.CLUSTER_THRESHOLD
LINKAGE_DEFAULT = defaults.LINKAGE
MAX_PAIRS_DEFAULT = defaults.MAX_PAIRS
METHOD_FIELD_DEFAULT = defaults.METHOD_FIELD
DATASET_FIELD_DEFAULT = defaults.DATASET_FIELD
#: the CLI's own choice (the library runs on "cpu" unless told): CUDA when present
DEVICE_DEFAULT = defaults.DEVICE
#: io.loaders.LoadOptions.trainer: the settings the capture recorded in the files
TRAINER_DEFAULT = "auto"


def option_text(values: tuple[float, ...]) -> str:
    """A tuple default as the option is typed: numbers joined by commas.

    >>> option_text((0.2, 0.28)), option_text((3e-4, 4e-4)), option_text((0.0, 0.5, 10.0))
    ('0.2,0.28', '3e-4,4e-4', '0,0.5,10')
    """
    return ",".join(_number(value) for value in values)


def band_text(band: tuple[float, float]) -> str:
    """An on-policy band default as the option is typed: 'exact' for the raw rule."""
    return EXACT if band == EXACT_ON_BAND else option_text(band)


def _number(value: float) -> str:
    if value == int(value):
        return str(int(value))
    if abs(value) < 1e-3:  # 3e-4 reads better than 0.0003
        from decimal import Decimal

        # repr's digits are the shortest that parse back to the same float
        return f"{Decimal(repr(value)):e}"
    return repr(value)


QV_DEFAULT = option_text(defaults.QVS)
# The defaults of the analysis options typed as pairs or lists, spelled once for every
# command that declares them (a number option's default is DEFAULTS.<field> itself)
CLIP_DEFAULT = option_text(DEFAULTS.clip)
SEQ_CLIP_DEFAULT = option_text(DEFAULTS.seq_clip)
ON_BAND_DEFAULT = band_text(DEFAULTS.on_band)
TOKEN_ON_BAND_DEFAULT = band_text(DEFAULTS.token_on_band)
SEQ_ON_BAND_DEFAULT = band_text(DEFAULTS.seq_on_band)
FPA_LAMBDA_SWEEP_DEFAULT = option_text(DEFAULTS.fpa_lambdas)
DELTA_SWEEP_DEFAULT = option_text(DEFAULTS.deltas)

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
    path_option("--json", help="Write the report as JSON (atomically).", rich_help_panel="Output"),
]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bar on stderr.", rich_help_panel="Run")
]

_A = "Analysis"
#: every eps_low,eps_high option takes one value for both, as PPO's single epsilon
_ONE_VALUE = "one value sets both"
Clip = Annotated[
    str,
    typer.Option(
        "--clip",
        help="Token PPO clip eps_low,eps_high: ratios clipped to [1 - eps_low, 1 + eps_high]; "
        f"{_ONE_VALUE} (PPO's single epsilon: 0.2 is [0.8, 1.2]).",
        rich_help_panel=_A,
    ),
]
SeqClip = Annotated[
    str,
    typer.Option(
        "--seq-clip",
        help="Clip eps_low,eps_high for the sequence and Kalman variants (GSPO/KPO); "
        f"{_ONE_VALUE}.",
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
        f"(KPO App. C.1); {_ONE_VALUE}.",
        rich_help_panel=_A,
    ),
]
_RAW_BAND = (
    "'exact' = r = 1 up to float32 rounding (2^-24 each side; KPO App. C.1), "
    f"0 = z == 0 bitwise, or eps_low,eps_high ({_ONE_VALUE})."
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
        help="Masked tokens inside a sequence: 'zero' (observe 0) or 'skip'.",
        rich_help_panel=_A,
    ),
]
KalmanImpl = Annotated[
    str,
    typer.Option(
        "--kalman-impl",
        help="'scan' (exact) or 'reference' (a cumulative-product closed form, for comparison).",
        rich_help_panel=_A,
    ),
]
_O = "Objectives (CW-GRPO, FPA, TEPO, QUATRO)"
CovScope = Annotated[
    str,
    typer.Option(
        "--cov-scope",
        help="CW-GRPO means and sigma per 'group' (joined across a step's files), per "
        "'batch' (file), or 'auto' (group if ids).",
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
MaxLength = Annotated[
    int | None,
    typer.Option(
        "--max-length",
        min=1,
        help="The trainer's response length limit in tokens, for the share of responses "
        "at the limit (vitals). Default: each file's padded width, with a note.",
        rich_help_panel=_A,
        show_default=False,
    ),
]
MaxLag = Annotated[
    int | None,
    typer.Option(
        "--max-lag",
        min=0,
        help="The largest policy lag (in versions) the trainer allows, e.g. prime-rl's "
        "max_off_policy_steps: tokens sampled further behind are counted and named "
        "(policy_lag; dumps with 'policy_version').",
        rich_help_panel=_A,
        show_default=False,
    ),
]
Temperature = Annotated[
    float | None,
    typer.Option(
        "--temperature",
        help="The engine's sampling temperature: with logits and token ids in the dumps, "
        "each token's log-prob under the tempered (and truncated) distribution (sampling).",
        rich_help_panel=_A,
        show_default=False,
    ),
]
TopP = Annotated[
    float | None,
    typer.Option(
        "--top-p",
        help="The engine's top-p (nucleus) threshold, in (0, 1]: the share of sampled tokens "
        "outside the nucleus and the mass removed (sampling; needs logits).",
        rich_help_panel=_A,
        show_default=False,
    ),
]
TopK = Annotated[
    int | None,
    typer.Option(
        "--top-k",
        min=1,
        help="The engine's top-k (sampling; needs logits).",
        rich_help_panel=_A,
        show_default=False,
    ),
]
ChunkElements = Annotated[
    int | None,
    typer.Option(
        "--chunk-elements",
        help=(
            "Rows x tokens per chunk (bounds memory). Default: "
            f"{defaults.CHUNK_ELEMENTS:,} on the CPU; on a GPU up to "
            f"{defaults.DEVICE_CHUNK_ELEMENTS_MAX:,}, as "
            f"{defaults.DEVICE_MEMORY_SHARE:.0%} of its free memory allows."
        ),
        show_default=False,
        rich_help_panel="Run",
        min=1,
    ),
]


FigureOut = Annotated[Path, path_option("--out", "-o", help="Figure file: .png, .svg or .pdf.")]

# Evaluation (eval-passk, eval-ucc, plot passk/ucc/similarity)
Samples = Annotated[
    list[Path],
    path_argument(
        help="Samples JSONL file(s), flat (one sample a line) or grouped (one problem a line), "
        "or training logs of verl, AReaL, ROLL (.jsonl) and TRL (.parquet); a directory means "
        "the files under it.",
    ),
]
K = Annotated[
    str | None,
    typer.Option(
        "--k", help="Comma-separated budgets, e.g. 1,8,64 (default: powers of two up to n)."
    ),
]
EvalJsonOut = Annotated[
    Path | None, path_option("--json", help="Write the report JSON here (atomically).")
]
Base = Annotated[
    str | None,
    typer.Option(
        "--base", help="Base method: adds the flip rate of every other method against it."
    ),
]
ProblemField = Annotated[
    str | None,
    typer.Option(
        "--problem-field",
        help="Problem id field (default: problem_id, else idx; training logs group by prompt "
        "text, named by its hash).",
    ),
]
ResponseField = Annotated[
    str | None,
    typer.Option(
        "--response-field",
        help="Response field (default: response, else code; training logs: their completion).",
    ),
]
CorrectField = Annotated[
    str | None,
    typer.Option(
        "--correct-field",
        help="Correctness field (default: correct, else score; in training logs the reward: "
        "score, reward, scores, or TRL's only reward column).",
    ),
]
CorrectThreshold = Annotated[
    float | None,
    typer.Option(
        "--correct-threshold",
        help="A numeric correctness value counts as correct when >= this (default: 0.5 for "
        "training logs; samples files then allow only true/false and 0/1).",
    ),
]
DumpCorrectField = Annotated[
    str | None,
    typer.Option(
        "--correct-field",
        help="The key that decides which sequences are correct: a key of the file (one "
        "reward function's column, an accuracy) or 'rewards' (default: the file's "
        "'correct', else rewards > 0). E.g. --correct-field accuracy_reward.",
        rich_help_panel="Input",
    ),
]
DumpCorrectThreshold = Annotated[
    float | None,
    typer.Option(
        "--correct-threshold",
        help="A sequence is correct when that key's value is >= this (default 0.5 with "
        "--correct-field; alone, it applies to the rewards). E.g. --correct-threshold 1.",
        rich_help_panel="Input",
    ),
]
Trainer = Annotated[
    str,
    typer.Option(
        "--trainer",
        help="Whose settings give the defaults (clip band, group size, length limit): "
        "auto = those the capture recorded in the files; trl, verl or openrlhf = recorded, "
        "else that framework's documented defaults; none = ratioscope's. An option you "
        "give always wins. E.g. --trainer trl.",
        rich_help_panel="Input",
    ),
]
MethodField = Annotated[
    str,
    typer.Option(
        "--method-field",
        help="Method field; a line without it takes its file's stem as method (training logs: "
        "the step). A name given here must be on some line of every file.",
    ),
]
DatasetField = Annotated[
    str,
    typer.Option(
        "--dataset-field",
        help="Field that groups problems into datasets (by_dataset). A name given here must "
        "be on some line of every file.",
    ),
]
AllowEmpty = Annotated[
    bool,
    typer.Option(
        "--allow-empty-responses",
        help="Keep empty responses (an error by default: usually a broken export).",
    ),
]
Threshold = Annotated[
    float,
    typer.Option(
        "--threshold", help="TF-IDF cosine similarity at which correct responses cluster."
    ),
]
Linkage = Annotated[
    str,
    typer.Option(
        "--linkage",
        help="Cluster linkage: single (connected components), average, complete.",
    ),
]
EvalQuiet = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="No progress bar and no 'wrote FILE' line on stderr."),
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
    "max_length": "--max-length",
    "max_lag": "--max-lag",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "top_k": "--top-k",
    # plot ratios
    "sequence": "--sequence",
    # timeline
    "step_from": "--step-from",
    # the runner (analyze, timeline, objectives)
    "workers": "--workers",
    "columns": "--columns",
    # compare
    "rel": "--rel",
    # objectives
    "methods": "--methods",
    # the run report
    "top": "--top",
    "length_limit": "--max-length",
    "tokenizer": "--tokenizer",
    "settings": "--set",
    "batch_rows": "--batch-rows",
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
    "correct_field": "--correct-field",
    "correct_threshold": "--correct-threshold",
    "trainer": "--trainer",
    "device": "--device",
    "qvs": "--qv",
}


@dataclass(frozen=True)
class InputOptions:
    """A command's Input options as the user gave them: how its dumps are read.

    The fields are named as the commands' parameters (``format`` for ``--format``, ...),
    so :meth:`of` takes them from the invoked command at once; an option that the command
    does not declare keeps the library's default (the plots have no ``--nonfinite``:
    "error"). :func:`load_options` turns them into the library's ``LoadOptions``.
    """

    format: str = FORMAT_DEFAULT
    #: the ``--map`` items, canonical=theirs, as typed (parsed by :func:`load_options`)
    mapping: tuple[str, ...] = ()
    nonfinite: str = NONFINITE_DEFAULT
    unsafe_pickle: bool = False
    group_size: int | None = None
    correct_field: str | None = None
    correct_threshold: float | None = None
    trainer: str = TRAINER_DEFAULT

    @classmethod
    def of(cls, ctx: typer.Context) -> InputOptions:
        """The input options of the invoked command (``ctx.params``, defaults included)."""
        given = {f.name: ctx.params[f.name] for f in fields(cls) if f.name in ctx.params}
        # an unused repeatable option is held as () or None, a used one as a list
        given["mapping"] = tuple(given.get("mapping") or ())
        return cls(**given)


def load_options(inputs: InputOptions) -> LoadOptions:
    """The library's ``LoadOptions`` from a command's input options, each checked before
    any file is read: an unknown ``--trainer``, ``--format`` or ``--nonfinite``, a
    malformed ``--map`` or a bad ``--correct-threshold`` fails in one sentence."""
    from ratioscope.data.trainer_settings import TRAINER_CHOICES
    from ratioscope.errors import UsageError
    from ratioscope.io.loaders import LoadOptions, correct_rule
    from ratioscope.io.profiles import FORMAT_CHOICES

    if inputs.trainer not in TRAINER_CHOICES:
        raise UsageError(
            f"--trainer must be one of {', '.join(TRAINER_CHOICES)}, got '{inputs.trainer}'"
        )
    if inputs.format not in FORMAT_CHOICES:
        raise UsageError(
            f"--format must be one of {', '.join(FORMAT_CHOICES)}, got '{inputs.format}'"
        )
    if inputs.nonfinite not in ("error", "mask"):
        raise UsageError(f"--nonfinite must be 'error' or 'mask', got '{inputs.nonfinite}'")
    options = LoadOptions(
        format=inputs.format,
        mapping=parse_mapping(inputs.mapping),
        nonfinite=inputs.nonfinite,
        unsafe_pickle=inputs.unsafe_pickle,
        group_size=inputs.group_size,
        correct_field=inputs.correct_field,
        correct_threshold=inputs.correct_threshold,
        trainer=inputs.trainer,
    )
    # a bad threshold fails before any read
    correct_rule(inputs.correct_field, inputs.correct_threshold)
    return options


def command_load_options(ctx: typer.Context) -> LoadOptions:
    """``LoadOptions`` from the Input options of the invoked command, so that a command
    lists them once, in its signature (as :func:`command_analysis_params` does for the
    analysis options)."""
    return load_options(InputOptions.of(ctx))


def analysis_params(**options: Any):
    """AnalysisParams from CLI strings: pairs like "0.2,0.28" are parsed here, and
    'exact' for a band is the raw rows' rule (r = 1 up to float32 rounding)."""
    from ratioscope.data.params import AnalysisParams
    from ratioscope.functional.token_stats import EXACT_ON_BAND

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


#: command parameters named otherwise than the AnalysisParams field they set
_FIELD_OF_PARAMETER = {"fpa_lambda_sweep": "fpa_lambdas", "delta_sweep": "deltas"}


def command_analysis_params(ctx: typer.Context):
    """AnalysisParams from every analysis option of the invoked command (``ctx.params``,
    defaults included), so that a command lists its options once, in its signature."""
    from dataclasses import fields

    from ratioscope.data.params import AnalysisParams

    names = {f.name for f in fields(AnalysisParams)}
    options = {_FIELD_OF_PARAMETER.get(key, key): value for key, value in ctx.params.items()}
    return analysis_params(**{key: value for key, value in options.items() if key in names})


def given_analysis_params(ctx: typer.Context) -> list[str]:
    """The AnalysisParams fields the user set on the command line (they win over the
    trainer's recorded settings)."""
    from dataclasses import fields

    from ratioscope.cli._common import given
    from ratioscope.data.params import AnalysisParams

    names = {f.name for f in fields(AnalysisParams)}
    return [
        _FIELD_OF_PARAMETER.get(key, key)
        for key in ctx.params
        if _FIELD_OF_PARAMETER.get(key, key) in names and given(ctx, key)
    ]


# the health verdict (ratioscope.verdict): thresholds from a TOML file, the verdict as JSON
ThresholdsFile = Annotated[
    Path | None,
    path_option(
        "--thresholds",
        help="TOML file whose \\[thresholds] table overrides the verdict's thresholds "
        "(docs/health.md); a check rules file may hold it.",
        rich_help_panel="Output",
    ),
]
VerdictJson = Annotated[
    Path | None,
    path_option(
        "--verdict-json",
        help="Write the health verdict (findings, levels, thresholds) as JSON.",
        rich_help_panel="Output",
    ),
]
