"""The side-by-side view in the terminal: one row per method, then correlations."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from ratioscope.render.terminal.tables import DASH, pct, print_table

if TYPE_CHECKING:
    from ratioscope.objective_family.side_by_side import MethodSummary, ObjectivesReport

#: the correlation matrix is printed for at most this many methods (it is in the JSON)
MATRIX_METHODS = 8

#: what the method families are called in the table
FAMILY = {
    "clip": "clipping family",
    "advantage": "advantage scheme",
    "paper": "the five papers",
    "correction": "corrections (on GRPO)",
}


def _num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    return f"{value:.{digits}f}"


def small_pct(value: float | None) -> str:
    """A share in percent, with shares below 0.01 % shown as such rather than as 0.00 %.

    >>> small_pct(3e-5), small_pct(0.0), small_pct(0.25), small_pct(None)
    ('<0.01%', '0.00%', '25.00%', '—')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return DASH
    if 0 < value < 1e-4:
        return "<0.01%"
    return pct(value)


def _rules(summary: MethodSummary) -> str:
    """The method's own rules with the share of tokens each binds on, e.g. 'clip_low 0.04 %'."""
    parts = [f"{name} {small_pct(share)}" for name, share in summary.flags.items() if share]
    return ", ".join(parts) if parts else DASH


def _reference_correlation(result: ObjectivesReport, name: str) -> float | None:
    names = result.correlation.get("methods", [])
    reference = result.params.get("reference")
    if name not in names or reference not in names:
        return None
    return result.correlation["matrix"][names.index(name)][names.index(reference)]


def show_objectives(result: ObjectivesReport, console: Console) -> None:
    """Print the method table, the correlation matrix, advantages and the notes."""
    tokens = sum(int(item["tokens"]) for item in result.inputs)
    table = Table(
        title=f"Per-token policy-gradient coefficients: {len(result.inputs)} file(s), "
        f"{tokens:,} valid tokens",
        title_justify="left",
    )
    for name, justify in (
        ("method", "left"),
        ("zero", "right"),
        ("top 1%", "right"),
        ("Gini", "right"),
        ("ESS", "right"),
        ("flips", "right"),
        ("corr", "right"),
        ("long", "right"),
        ("rules that bind", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    family = None
    for name, summary in result.methods.items():
        if summary.family != family:
            family = summary.family
            table.add_row(f"[dim]{FAMILY.get(family, family)}[/dim]", *([""] * 8))
        label = summary.label + (" *" if summary.note else "")
        table.add_row(
            label,
            small_pct(summary.zero_share),
            small_pct(summary.top_share),
            _num(summary.gini),
            _num(summary.ess),
            small_pct(summary.sign_flips),
            _num(_reference_correlation(result, name), 2),
            small_pct(summary.long_mass_share),
            _rules(summary),
        )
    print_table(console, table)
    long_tokens = next(iter(result.methods.values())).long_token_share if result.methods else None
    for line in legend(result, long_tokens):
        console.print(line, highlight=False)
    show_correlation(result, console)
    show_advantages(result, console)
    show_rollout_ratio(result, console)
    for name, reason in result.skipped.items():
        console.print(f"not run: {name} {reason}", highlight=False)
    for text in result.warnings:
        console.print(f"warning: {text}", highlight=False, style="yellow")


def legend(result: ObjectivesReport, long_tokens: float | None) -> list[str]:
    """What the columns mean, in one line each."""
    reference = result.params.get("reference", "grpo")
    lines = [
        "zero: tokens whose coefficient is 0 (clipped, masked or zero advantage); "
        "top 1%: share of sum |coef| held by the 1 % largest; Gini of |coef|; "
        "ESS: (sum |coef|)^2 / (N sum coef^2)",
        f"flips: tokens pushed the other way than {reference.upper()} pushes them "
        f"(among tokens {reference.upper()} moves); corr: Pearson correlation with "
        f"{reference.upper()}'s coefficients; long: share of sum |coef| on responses longer "
        f"than the median ({pct(long_tokens)} of the tokens)",
    ]
    notes = [f"{s.label} *: {s.note}" for s in result.methods.values() if s.note]
    return lines + notes + ["formulas and defaults: docs/objectives.md"]


def show_correlation(result: ObjectivesReport, console: Console) -> None:
    """The Pearson correlation of every pair of methods' coefficients over the tokens."""
    names = result.correlation.get("methods", [])
    if len(names) < 2:
        return
    if len(names) > MATRIX_METHODS:
        console.print(
            f"correlations between all {len(names)} methods: in the JSON (correlation.matrix), "
            f"or printed here for at most {MATRIX_METHODS} --methods",
            highlight=False,
        )
        return
    labels = [result.methods[n].label for n in names]
    table = Table(title="Correlation of coefficients over tokens", title_justify="left")
    table.add_column("")
    for label in labels:
        table.add_column(label, justify="right")
    for label, row in zip(labels, result.correlation["matrix"], strict=True):
        table.add_row(label, *(_num(v, 2) for v in row))
    print_table(console, table)


def show_advantages(result: ObjectivesReport, console: Console) -> None:
    """Advantage schemes on the group rewards: size, zeros, short vs long responses."""
    summary = result.advantages
    if summary is None:
        return
    equal = summary.zero_variance_groups / summary.groups if summary.groups else None
    table = Table(
        title=f"Advantage schemes: {summary.groups} groups, {summary.zero_variance_groups} "
        f"with equal rewards ({pct(equal)}, advantage 0 in every scheme)",
        title_justify="left",
    )
    for name in ("scheme", "mean |A|", "A = 0", "short |A|", "long |A|"):
        table.add_column(name, justify="left" if name == "scheme" else "right")
    names = {
        "grpo": "GRPO (std)",
        "dr_grpo": "Dr. GRPO (no std)",
        "quatro": "QUATRO",
        "dump": "in the dump",
    }
    for key, scheme in summary.schemes.items():
        table.add_row(
            names.get(key, key),
            _num(scheme.mean_abs),
            pct(scheme.zero_share),
            _num(scheme.short_mean_abs),
            _num(scheme.long_mean_abs),
        )
    print_table(console, table)


def show_rollout_ratio(result: ObjectivesReport, console: Console) -> None:
    """The raw train/inference ratio before any truncation or mask."""
    ratio = result.rollout_ratio
    if ratio is None:
        return
    console.print(
        "raw old/engine ratio before truncation: "
        f"min {ratio['min_ratio']:.4g}, max {ratio['max_ratio']:.4g}, "
        f"{pct(ratio['share_above_2'])} above 2, {pct(ratio['share_below_half'])} below 0.5; "
        f"sequence log-ratio in [{ratio['min_sequence_log_ratio']:.3g}, "
        f"{ratio['max_sequence_log_ratio']:.3g}]",
        highlight=False,
    )


def show_methods(console: Console) -> None:
    """The methods with their family, source and default hyper-parameters (``--list``)."""
    from ratioscope.objective_family.methods import METHODS

    table = Table(title="Methods of ratioscope objectives", title_justify="left")
    for name in ("method", "family", "defaults", "source"):
        table.add_column(name, overflow="fold")
    for method in METHODS.values():
        defaults = ", ".join(
            f"{key}={','.join(f'{v:g}' for v in value) if isinstance(value, tuple) else value}"
            for key, value in method.defaults.items()
        )
        table.add_row(method.name, method.family, defaults or DASH, method.source)
    console.print(table)
