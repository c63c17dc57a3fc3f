"""Rich terminal output for ``info`` and ``analyze``.

Renderers read the report's JSON document (``Report.to_dict()`` or a report file), so
a merged or re-loaded report prints exactly like a fresh one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ratioscope.dump_info import DumpInfo, OtherFile
from ratioscope.render import sections
from ratioscope.render.tables import DASH, Renderer, fmt, pct, print_table, transposed

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
    "show_ratios",
    "show_report",
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
def show_report(document: Mapping[str, Any], console: Console) -> None:
    """Print the analyze report: inputs, the Table 2 layout, mismatch, other sections."""
    for renderer in report_renderers():
        renderer(document, console)


def report_renderers() -> list[Renderer]:
    """The section printers of :func:`show_report`, in the order they print."""
    return [show_inputs, show_ratios, show_mismatch, *sections.RENDERERS]


def show_warnings(document: Mapping[str, Any], console: Console) -> None:
    for warning in document.get("warnings", []):
        console.print(Text(f"warning: {warning}", style="yellow"))


def show_ratios(document: Mapping[str, Any], console: Console) -> None:
    ratios = document.get("ratios")
    if ratios:
        _ratio_distributions(ratios, console)
        _ratio_states(ratios, console)


def show_mismatch(document: Mapping[str, Any], console: Console) -> None:
    mismatch = document.get("mismatch")
    if mismatch:
        _mismatch(mismatch, console)


def show_inputs(document: Mapping[str, Any], console: Console) -> None:
    inputs = document.get("inputs", [])
    sequences = sum(i["sequences"] for i in inputs)
    tokens = sum(i["tokens"] for i in inputs)
    layouts = sorted({i["profile"] for i in inputs})
    console.print(
        f"[bold]{len(inputs)}[/] file(s), {fmt(sequences)} sequences, {fmt(tokens)} valid "
        f"tokens, layout {', '.join(layouts)}"
    )
    pairs = list(dict.fromkeys(i.get("ratio_pair", "current/old") for i in inputs))
    console.print("importance ratio z = log " + "; ".join(ratio_label(p) for p in pairs))


def ratio_label(pair: str) -> str:
    """``current/old`` -> ``current policy / behaviour (old) policy`` for headings."""
    from ratioscope.batch import RATIO_PAIRS

    return RATIO_PAIRS.get(pair, pair)


def _ratio_distributions(ratios: Mapping[str, Any], console: Console) -> None:
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
        d = stats["distribution"]
        q = d["quantiles"]
        surrogate = stats.get("surrogate") or {}
        clipped = surrogate.get("clipped") or {}
        band = stats.get("clip_band")
        table.add_row(
            variant,
            fmt(d["mean"]),
            fmt(d["std"]),
            fmt(q.get("0.01")),
            fmt(q.get("0.5")),
            fmt(q.get("0.99")),
            fmt(max(abs(d["min"]), abs(d["max"])) if d["min"] is not None else None),
            f"{fmt(band[0])}, {fmt(band[1])}" if band else DASH,
            pct(stats.get("clip_fraction")),
            fmt(clipped.get("token_mean")),
            fmt(clipped.get("seq_mean_token_mean")),
        )
    print_table(console, table)


def _ratio_states(ratios: Mapping[str, Any], console: Console) -> None:
    if not any(s and s.get("proportion") for s in ratios.values()):
        return
    state_table(
        list(ratios.items()),
        "token states (KPO Table 2): proportions, mean run lengths, switching, LFR, variance",
        console,
    )


def state_table(
    rows: Sequence[tuple[str, Mapping[str, Any] | None]], title: str, console: Console
) -> None:
    """The KPO Table 2 layout: one row per ratio variant (or per Kalman Q/V)."""
    table = Table(title=title, title_justify="left")
    columns = (
        "variant", "up", "down", "on", "run up", "run down", "run on",
        "switch freq", "LFR", "var global", "var window", "clip frac",
    )  # fmt: skip
    for column in columns:
        table.add_column(
            column, justify="left" if column == "variant" else "right", overflow="fold"
        )
    for label, stats in rows:
        if not stats or not stats.get("proportion"):
            table.add_row(label, *[DASH] * (len(columns) - 1))
            continue
        prop, runs = stats["proportion"], stats.get("run_length_mean") or {}
        variance = stats.get("variance") or {}
        table.add_row(
            label,
            pct(prop.get("up")),
            pct(prop.get("down")),
            pct(prop.get("on")),
            fmt(runs.get("up")),
            fmt(runs.get("down")),
            fmt(runs.get("on")),
            fmt(stats.get("switch_frequency")),
            fmt(stats.get("lfr")),
            fmt(variance.get("global")),
            fmt(variance.get("window_local")),
            pct(stats.get("clip_fraction")),
        )
    print_table(console, table)


def show_sweep(document: Mapping[str, Any], console: Console) -> None:
    """The Q/V sweep: token and sequence rows, then one Kalman row per Q/V."""
    show_inputs(document, console)
    sweep = document["sweep"]
    rows = [("token", sweep["token"]), ("sequence", sweep["sequence"])]
    rows += [(f"kalman Q/V={key}", stats) for key, stats in sweep["kalman"].items()]
    state_table(rows, "Kalman Q/V sweep (KPO Fig. 4 / Table 2)", console)


def _mismatch(mismatch: Mapping[str, Any], console: Console) -> None:
    table = Table(
        title="off-policy mismatch (before truncation): KL estimators, chi-square, ESS",
        title_justify="left",
    )
    columns = ("pair", "tokens", "k1", "k2", "k3", "chi2 token", "chi2 seq", "ESS", "r outside")
    for column in columns:
        table.add_column(column, justify="left" if column == "pair" else "right", overflow="fold")
    pairs = mismatch.get("pairs") or {"policy": "current/old", "rollout": "old/engine"}
    defaults = {"policy": "current/old", "rollout": "old/engine"}
    for key in ("policy", "rollout"):
        pair = pairs.get(key) or defaults[key]
        label = f"{key}: " + " + ".join(p.replace("/", " / ") for p in pair.split(" + "))
        stats = mismatch.get(key)
        if stats is None:
            table.add_row(label, *[DASH] * (len(columns) - 1))
            continue
        chi2_seq = stats["chi2_seq"]
        if chi2_seq is None and stats.get("log_chi2_seq_plus_1") is not None:
            chi2_seq_text = f"exp({fmt(stats['log_chi2_seq_plus_1'])})"
        else:
            chi2_seq_text = fmt(chi2_seq)
        c = stats["is_threshold"]
        table.add_row(
            label,
            fmt(stats["tokens"]),
            fmt(stats["k1"]),
            fmt(stats["k2"]),
            fmt(stats["k3"]),
            fmt(stats["chi2_token"]),
            chi2_seq_text,
            fmt(stats["ess"]),
            f"{pct(stats['frac_outside'])} of [1/{fmt(c)}, {fmt(c)}]",
        )
    print_table(console, table)
