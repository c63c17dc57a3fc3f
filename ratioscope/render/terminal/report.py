"""Rich terminal output for ``info``, ``analyze``, ``merge`` and ``sweep``.

Renderers take the typed :class:`~ratioscope.report.model.Report` (fresh, merged or read with
``Report.from_dict``) and print a non-finite number, which the JSON stores as null, as a
dash: a re-loaded report prints exactly like a fresh one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ratioscope.analysis.dump_info import DumpInfo, OtherFile
from ratioscope.render.terminal import sections
from ratioscope.render.terminal.tables import (
    DASH,
    Renderer,
    clip_band,
    fmt,
    known,
    num,
    pct,
    print_table,
    share,
    transposed,
)

if TYPE_CHECKING:
    from ratioscope.analysis.sweep import SweepReport
    from ratioscope.functional.mismatch import MismatchStats
    from ratioscope.report.model import Report
    from ratioscope.sections.mismatch import MismatchSection
    from ratioscope.sections.policy_lag import PolicyLagSection
    from ratioscope.sections.ratios import VariantStats
    from ratioscope.sections.sampling import SamplingSection
    from ratioscope.sections.staleness import StalenessSection

# The table helpers moved to render.tables; they stay importable from here.
__all__ = [
    "DASH",
    "Renderer",
    "fmt",
    "pct",
    "print_table",
    "ratio_label",
    "report_renderers",
    "show_info",
    "show_inputs",
    "show_mismatch",
    "show_policy_lag",
    "show_ratios",
    "show_report",
    "show_sampling",
    "show_staleness",
    "show_sweep",
    "show_warnings",
    "state_table",
    "transposed",
]


# ----------------------------------------------------------------------------- info
def show_info(infos: Sequence[DumpInfo | OtherFile], console: Console) -> None:
    for info in infos:
        console.rule(f"[bold]{info.path}")
        if isinstance(info, OtherFile):
            console.print(f"not a per-token dump: {info.what}.")
            continue
        console.print(
            f"file type [bold]{info.file_format}[/], layout [bold]{info.profile}[/], "
            f"padding [bold]{info.padding}[/] "
            f"({'shifted to the right at load' if info.padding == 'left' else 'as stored'})"
        )
        console.print(
            f"{fmt(info.sequences)} sequences, {fmt(info.tokens)} valid tokens, "
            f"valid length min/mean/max {info.length_min}/{info.length_mean:.1f}/"
            f"{info.length_max} of {info.max_length} positions"
        )
        console.print("importance ratio z = log " + ratio_label(info.ratio_pair))
        if info.groups is not None and info.group_sizes is not None:
            sizes = ", ".join(f"{n} of size {s}" for s, n in sorted(info.group_sizes.items()))
            console.print(f"{info.groups} groups ({sizes}), {info.group_note}")
        else:
            console.print(info.group_note)
        table = Table(title="keys", title_justify="left", show_edge=False)
        for column in ("key in file", "canonical", "shape", "dtype"):
            table.add_column(column)
        for key in info.keys:
            canonical = key.canonical or Text("ignored", style="dim")
            table.add_row(key.key, canonical, key.shape, key.dtype)
        print_table(console, table)
        features = Table(title="what analyze can compute", title_justify="left", show_edge=False)
        for column in ("section", "quantity", "available"):
            features.add_column(column)
        for feature in info.features:
            status = (
                Text("yes", style="green")
                if feature.available
                else Text(f"no: needs {', '.join(feature.missing)}", style="yellow")
            )
            features.add_row(feature.section, feature.what, status)
        print_table(console, features)
        for warning in info.warnings:
            console.print(Text(f"note: {warning}", style="yellow"))


# -------------------------------------------------------------------------- analyze
def show_report(report: Report, console: Console) -> None:
    """Print the analyze report: inputs, the Table 2 layout, mismatch, other sections."""
    for renderer in report_renderers():
        renderer(report, console)


def report_renderers() -> list[Renderer]:
    """The section printers of :func:`show_report`, in the order they print."""
    from ratioscope.render.terminal.vitals import show_vitals

    return [
        show_inputs,
        show_vitals,
        show_ratios,
        show_mismatch,
        show_staleness,
        show_policy_lag,
        show_sampling,
        *sections.RENDERERS,
    ]


def show_warnings(
    report: Report | SweepReport | Mapping[str, Any],
    console: Console,
    names: Mapping[str, str] | None = None,
) -> None:
    """The report's warnings, one line each (a JSON document's too: ``sweep`` hands it);
    ``names``: parameter -> what the reader sets it with (the command line's options),
    for the parameters a warning mentions in backquotes (:func:`errors.naming_options`)."""
    from ratioscope.errors import naming_options

    warnings = report.get("warnings", []) if isinstance(report, Mapping) else report.warnings
    for warning in warnings:
        shown = warning if names is None else naming_options(warning, names)
        console.print(Text(f"warning: {shown}", style="yellow"))


def show_ratios(report: Report, console: Console) -> None:
    if report.ratios:
        _ratio_distributions(report.ratios, console)
        _ratio_states(report.ratios, console)


def show_mismatch(report: Report, console: Console) -> None:
    if report.mismatch is not None:
        _mismatch(report.mismatch, console)


def show_staleness(report: Report, console: Console) -> None:
    """The off-policy statistics by mini-batch, when the dumps carry ``minibatch``."""
    if report.staleness is not None:
        _staleness(report.staleness, console)


def show_inputs(report: Report | SweepReport, console: Console) -> None:
    inputs = report.inputs
    sequences = sum(i.sequences for i in inputs)
    tokens = sum(i.tokens for i in inputs)
    layouts = sorted({i.profile for i in inputs})
    console.print(
        f"[bold]{len(inputs)}[/] file(s), {fmt(sequences)} sequences, {fmt(tokens)} valid "
        f"tokens, layout {', '.join(layouts)}"
    )
    pairs = list(dict.fromkeys(i.ratio_pair for i in inputs))
    console.print("importance ratio z = log " + "; ".join(ratio_label(p) for p in pairs))
    console.print(f"correct: {correct_text(report)}")
    trainer = report.params.get("trainer")
    if isinstance(trainer, Mapping):
        applied = trainer.get("applied") or {}
        told = "; ".join(f"{name} from {where}" for name, where in applied.items())
        console.print(
            f"trainer settings: {trainer.get('source', '')}" + (f"; {told}" if told else "")
        )


def correct_text(report: Report | SweepReport) -> str:
    """How ``correct`` was decided: the rule of the report's load options."""
    from ratioscope.io.loaders import correct_rule_text, stored_correct_rule

    return correct_rule_text(*stored_correct_rule(report.params))


def ratio_label(pair: str) -> str:
    """``current/old`` -> ``current policy / behaviour (old) policy`` for headings."""
    from ratioscope.data.batch import RATIO_PAIRS

    return RATIO_PAIRS.get(pair, pair)


def _ratio_distributions(ratios: Mapping[str, VariantStats | None], console: Console) -> None:
    table = Table(
        title="importance ratios: log-ratio z over valid tokens, clip fraction, surrogate loss",
        title_justify="left",
    )
    for column in ("variant", "mean z", "std z", "p1", "p50", "p99", "max |z|", "clip band"):
        table.add_column(
            column, justify="right" if column != "variant" else "left", overflow="fold"
        )
    table.add_column("clip frac", justify="right", overflow="fold")
    table.add_column("loss tok-mean", justify="right", overflow="fold")
    table.add_column("loss seq-mean", justify="right", overflow="fold")
    for variant, stats in ratios.items():
        if stats is None:
            table.add_row(variant, *[DASH] * 10)
            continue
        d = stats.distribution
        q = d.quantiles
        clipped = stats.surrogate.clipped if stats.surrogate is not None else None
        band = stats.clip_band
        largest = max(abs(d.min), abs(d.max)) if known(d.min) is not None else None
        table.add_row(
            variant,
            num(d.mean),
            num(d.std),
            num(q.get("0.01")),
            num(q.get("0.5")),
            num(q.get("0.99")),
            num(largest),
            clip_band(band),
            share(stats.clip_fraction),
            num(None if clipped is None else clipped.token_mean),
            num(None if clipped is None else clipped.seq_mean_token_mean),
        )
    print_table(console, table)


def _ratio_states(ratios: Mapping[str, VariantStats | None], console: Console) -> None:
    if not any(s is not None and _proportion(s) for s in ratios.values()):
        return
    state_table(
        list(ratios.items()),
        "token states (KPO Table 2): proportions, mean run lengths, switching, LFR, variance",
        console,
    )


def state_table(
    rows: Sequence[tuple[str, VariantStats | None]], title: str, console: Console
) -> None:
    """The KPO Table 2 layout: one row per ratio variant (or per Kalman Q/V).

    Proportions are averaged over sequences, as the paper's; a report written before
    that holds them pooled over tokens only, which are shown marked with ``*``. The
    caption says which on-policy band set each row's states.
    """
    table = Table(title=title, title_justify="left", caption=_state_caption(rows))
    table.caption_justify = "left"
    columns = (
        "variant", "up", "down", "on", "run up", "run down", "run on",
        "switch freq", "LFR", "var global", "var window", "clip frac",
    )  # fmt: skip
    for column in columns:
        table.add_column(
            column, justify="left" if column == "variant" else "right", overflow="fold"
        )
    for label, stats in rows:
        prop = _proportion(stats) if stats is not None else None
        if stats is None or not prop:
            table.add_row(label, *[DASH] * (len(columns) - 1))
            continue
        runs = stats.run_length_mean or {}
        variance = stats.variance or {}
        mark = "" if stats.proportion else "*"
        table.add_row(
            label,
            share(prop.get("up")) + mark,
            share(prop.get("down")) + mark,
            share(prop.get("on")) + mark,
            num(runs.get("up")),
            num(runs.get("down")),
            num(runs.get("on")),
            num(stats.switch_frequency),
            num(stats.lfr),
            num(variance.get("global")),
            num(variance.get("window_local")),
            share(stats.clip_fraction),
        )
    print_table(console, table)


def _proportion(stats: VariantStats) -> dict[str, float] | None:
    """Per-sequence proportions, else (reports older than them) the pooled ones."""
    return stats.proportion or stats.proportion_pooled


def _band_text(band: tuple[float, float]) -> str:
    from ratioscope.functional.token_stats import EXACT_ON_BAND

    if tuple(band) == EXACT_ON_BAND:
        return "r = 1 up to float32 rounding (2^-24)"
    if band[0] == band[1] == 0:
        return "r = 1 exactly"
    return f"r in [1 - {num(band[0])}, 1 + {num(band[1])}]"


def _state_caption(rows: Sequence[tuple[str, VariantStats | None]]) -> str | None:
    """'on' per row: one clause per band, naming the rows it applies to."""
    by_band: dict[tuple[float, float], list[str]] = {}
    for label, stats in rows:
        if stats is not None and stats.on_band is not None:
            low, high = stats.on_band
            by_band.setdefault((low, high), []).append(label.split(" ")[0])
    lines = []
    if by_band:
        clauses = [
            f"{'/'.join(dict.fromkeys(labels))} {_band_text(band)}"
            for band, labels in by_band.items()
        ]
        lines.append("on: " + "; ".join(clauses) + ". Proportions: mean over sequences.")
    if any(s is not None and not s.proportion and s.proportion_pooled for _, s in rows):
        lines.append("* pooled over tokens: the report predates per-sequence proportions.")
    short = short_sequences_note(rows)
    if short:
        lines.append(short)
    return "\n".join(lines) or None


def short_sequences_note(rows: Sequence[tuple[str, VariantStats | None]]) -> str | None:
    """The sentence saying how many sequences were too short for the LFR, the spectrum
    and the window statistics (None when none was)."""
    counted = [
        (s.short_excluded, s.spectral_min_length)
        for _, s in rows
        if s is not None and s.short_excluded and s.spectral_min_length
    ]
    if not counted:
        return None
    excluded, length = counted[0]
    return (
        f"LFR, spectrum and windows: {excluded} sequence(s) shorter than {length} tokens "
        "are left out (too short for a spectrum)."
    )


def show_sweep(sweep: SweepReport | Mapping[str, Any], console: Console) -> None:
    """The Q/V sweep: token and sequence rows, then one Kalman row per Q/V.

    Takes the :class:`~ratioscope.analysis.sweep.SweepReport` or its JSON document (rebuilt).
    """
    if isinstance(sweep, Mapping):
        sweep = _sweep_report(sweep)
    show_inputs(sweep, console)
    rows = [("token", sweep.token), ("sequence", sweep.sequence)]
    rows += [(f"kalman Q/V={key}", stats) for key, stats in sweep.kalman.items()]
    state_table(rows, "Kalman Q/V sweep (KPO Fig. 4 / Table 2)", console)


def _sweep_report(document: Mapping[str, Any]) -> SweepReport:
    from ratioscope.analysis.sweep import SweepReport
    from ratioscope.io.documents import from_jsonable

    body = dict(document)
    body.update(body.pop("sweep"))
    sweep: SweepReport = from_jsonable(SweepReport, body)
    return sweep


def _mismatch(mismatch: MismatchSection, console: Console) -> None:
    table = Table(
        title="off-policy mismatch (before truncation): KL estimators, chi-square, ESS",
        title_justify="left",
    )
    columns = ("pair", "tokens", "k1", "k2", "k3", "chi2 token", "chi2 seq", "ESS", "r outside")
    for column in columns:
        table.add_column(column, justify="left" if column == "pair" else "right", overflow="fold")
    pairs = mismatch.pairs or {"policy": "current/old", "rollout": "old/engine"}
    defaults = {"policy": "current/old", "rollout": "old/engine"}
    for key in ("policy", "rollout"):
        pair = pairs.get(key) or defaults[key]
        label = f"{key}: " + " + ".join(p.replace("/", " / ") for p in pair.split(" + "))
        stats: MismatchStats | None = getattr(mismatch, key)
        if stats is None:
            table.add_row(label, *[DASH] * (len(columns) - 1))
            continue
        # chi2_seq overflows float64 on long sequences; its log stays finite
        if known(stats.chi2_seq) is None and known(stats.log_chi2_seq_plus_1) is not None:
            chi2_seq_text = f"exp({num(stats.log_chi2_seq_plus_1)})"
        else:
            chi2_seq_text = num(stats.chi2_seq)
        c = stats.is_threshold
        table.add_row(
            label,
            num(stats.tokens),
            num(stats.k1),
            num(stats.k2),
            num(stats.k3),
            num(stats.chi2_token),
            chi2_seq_text,
            num(stats.ess),
            f"{share(stats.frac_outside)} of [1/{num(c)}, {num(c)}]",
        )
    print_table(console, table)


def show_policy_lag(report: Report, console: Console) -> None:
    """The lag table, for dumps whose tokens carry the version that sampled them."""
    if report.policy_lag is not None:
        _policy_lag(report.policy_lag, console)


def _policy_lag(section: PolicyLagSection, console: Console) -> None:
    counted = {
        "file": "the version being trained, as the files give it",
        "newest": "the newest version the tokens carry (the files give no trainer_version)",
        "mixed": "the version being trained where the files give it, else the newest",
    }[section.trainer_version]
    allowed = ""
    if section.max_allowed is not None:
        allowed = (
            f"; {num(section.beyond_allowed)} token(s) beyond the allowed lag {section.max_allowed}"
        )
    split = any(s.split is not None for s in section.lags.values())
    table = Table(
        title="by policy lag (policy_lag): how many versions behind the sampling policy was",
        title_justify="left",
        caption=f"lag counted from {counted}; a sequence's lag is its oldest token's; "
        f"mean lag {num(section.mean_token_lag)} per token, "
        f"{num(section.mean_sequence_lag)} per sequence{allowed}. k1 = mean(-z), "
        f"k3 = mean(r - 1 - z); outside [1/{num(section.is_threshold)}, "
        f"{num(section.is_threshold)}]; clip frac at {clip_band(section.clip_band)}"
        + (
            "; k1 split: current/old (updates of this step) + old/engine (versions and "
            "engine) = current/engine"
            if split
            else ""
        ),
        caption_justify="left",
    )
    columns = ["lag", "tokens", "sequences", "k1", "k3", "ESS", "outside", "clip frac"]
    if split:
        columns += ["k1 cur/old", "k1 old/eng", "k3 old/eng"]
    for column in columns:
        table.add_column(column, justify="left" if column == "lag" else "right", overflow="fold")
    for lag, stats in section.lags.items():
        row = [
            str(lag),
            num(stats.tokens),
            num(stats.sequences),
            num(stats.k1),
            num(stats.k3),
            num(stats.ess, 6),
            share(stats.outside),
            share(stats.clip_fraction),
        ]
        if split:
            parts = stats.split
            row += (
                [
                    num(parts.k1["current/old"]),
                    num(parts.k1["old/engine"]),
                    num(parts.k3["old/engine"]),
                ]
                if parts is not None
                else ["-"] * 3
            )
        table.add_row(*row)
    print_table(console, table)


def show_sampling(report: Report, console: Console) -> None:
    """The engine's sampling distribution: the temperature line and the truncation."""
    if report.sampling is not None:
        _sampling(report.sampling, console)


def _sampling(section: SamplingSection, console: Console) -> None:
    table = Table(
        title="sampling: did the engine sample from the distribution the ratio assumes?",
        title_justify="left",
        caption="temperature: the line of the trainer/engine log-ratio on the trainer's "
        "log-prob (slope about 1 - 1/T for an engine at T); truncation: the stated settings "
        "applied to the trainer's logits (docs/sampling.md)",
        caption_justify="left",
    )
    table.add_column("check")
    table.add_column("quantity", overflow="fold")
    table.add_column("value", justify="right")
    check = section.temperature
    if check is not None:
        table.add_row(
            "temperature", f"slope ({check.pair}, {num(check.tokens)} tokens)", num(check.slope)
        )
        table.add_row("", "correlation", num(check.correlation))
        table.add_row("", "implied engine temperature / trainer's", num(check.implied_temperature))
    cut = section.truncation
    if cut is not None:
        stated = ", ".join(
            f"{name} {value:g}"
            for name, value in (("T", cut.temperature), ("top-p", cut.top_p), ("top-k", cut.top_k))
            if value is not None
        )
        table.add_row("truncation", f"settings ({num(cut.tokens)} tokens)", stated)
        table.add_row("", "sampled tokens outside the kept set", share(cut.outside))
        table.add_row("", "mass removed (token mean)", num(cut.mass_removed))
        table.add_row(
            "",
            "log q - log softmax (mean, |mean|)",
            f"{num(cut.log_shift)}, {num(cut.abs_log_shift)}",
        )
        if cut.engine_vs_sampling is not None and cut.engine_vs_full is not None:
            table.add_row(
                "",
                "|engine - log q| / |engine - full softmax|",
                f"{num(cut.engine_vs_sampling)} / {num(cut.engine_vs_full)}",
            )
    print_table(console, table)


def _staleness(section: StalenessSection, console: Console) -> None:
    table = Table(
        title="by mini-batch (staleness): off-policy statistics of each update of a step",
        title_justify="left",
        caption="z = 0: share of tokens exactly on-policy; k3: token mean of r - 1 - z; "
        f"clip frac at the token clip band {clip_band(section.clip_band)}; "
        "ESS = (sum r)^2 / (N sum r^2)",
        caption_justify="left",
    )
    columns = ("mini-batch", "rows", "tokens", "z = 0", "mean |z|", "mean z", "k3")
    for column in (*columns, "clip frac", "ESS"):
        table.add_column(
            column, justify="left" if column == "mini-batch" else "right", overflow="fold"
        )
    for index, stats in section.minibatches.items():
        table.add_row(
            str(index),
            num(stats.rows),
            num(stats.tokens),
            share(stats.exact_on),
            num(stats.mean_abs_z),
            num(stats.mean_z),
            num(stats.k3),
            share(stats.clip_fraction),
            # 6 digits: the ESS of a nearly on-policy batch differs from 1 in the 5th
            num(stats.ess, 6),
        )
    print_table(console, table)
