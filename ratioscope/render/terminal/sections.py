"""Terminal renderers of the objective-side sections, printed by render.terminal.show_report.

Each renderer takes the :class:`~ratioscope.report.model.Report` and a rich Console and prints
its section when present (a missing section is explained by the warnings). Non-finite
numbers, null in the report's JSON, print as a dash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ratioscope.render.terminal.tables import DASH, Renderer, clip_band, num, print_table, share

if TYPE_CHECKING:
    from ratioscope.functional.fpa import BelowThreshold, ByCorrectness
    from ratioscope.report.model import Report
    from ratioscope.sections.distribution import Distribution
    from ratioscope.sections.future_policy import FuturePolicySection, MethodResult

_CLASSES = ("all", "correct", "incorrect")


def _table(title: str, columns: list[str], caption: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for index, column in enumerate(columns):
        table.add_column(column, justify="left" if index == 0 else "right", overflow="fold")
    return table


def _fraction_label(fraction: float) -> str:
    return f"{100 * fraction:.4g}%"


# ------------------------------------------------------------------------- CW-GRPO
def show_covariance(report: Report, console: Console) -> None:
    section = report.covariance
    if section is None:
        return
    scope = section.scope
    where = {"group": "each GRPO group", "batch": "each file (batch)"}.get(scope, "mixed scopes")
    error = share(section.histogram_relative_error)
    table = _table(
        f"CW-GRPO Table 1: token covariance c = (log pi - mean)(A - mean), means over {where}; "
        "top fractions of each sign ranked by |c|",
        ["top fraction", "c > 0 threshold", "c > 0 top mean", "c < 0 threshold", "c < 0 top mean"],
        caption=f"threshold: the c beyond which the top fraction lies; top mean: mean c of that "
        f"fraction ({num(section.percentiles.positive_count)} tokens with c > 0, "
        f"{num(section.percentiles.negative_count)} with c < 0; read from histograms, "
        f"within {error})",
    )
    percentiles = section.percentiles
    for positive, negative in zip(percentiles.positive, percentiles.negative, strict=True):
        table.add_row(
            _fraction_label(positive.fraction),
            num(positive.threshold),
            num(positive.top_mean),
            num(negative.threshold),
            num(negative.top_mean),
        )
    print_table(console, table)

    shares = section.cumulative_share
    share_table = _table(
        "CW-GRPO Fig. 3: share of the total |c| held by the top x of tokens (ranked by |c|)",
        ["top x of tokens", *(_fraction_label(float(x)) for x in shares)],
    )
    share_table.add_row("share of sum |c|", *(share(v) for v in shares.values()))
    print_table(console, share_table)

    weights = section.weights
    w = weights.distribution
    normalised = section.normalised_weights
    mass = section.advantage_mass
    clip_cov, kl_cov = section.clip_cov, section.kl_cov
    kernel = _table(
        "CW-GRPO Gaussian kernel w = exp(-c^2 / (2 sigma^2)), sigma = std of c per scope; "
        "w~ = w N / sum w (mean 1)",
        ["quantity", "value"],
        caption=_bound_caption(w, "weights w and w~"),
    )
    kernel.add_row("tokens / scopes", f"{num(section.tokens)} / {num(section.scopes)} ({scope})")
    kernel.add_row(
        "kernel weight w: mean, p1, p50",
        f"{num(w.mean)}, {num(w.quantiles.get('0.01'))}, {num(w.quantiles.get('0.5'))}",
    )
    below = weights.fraction_below
    kernel.add_row(
        "tokens with w < 0.5 / w < 0.1", f"{share(below.get('0.5'))} / {share(below.get('0.1'))}"
    )
    kernel.add_row(
        "normalised w~: min, p50, max",
        f"{num(normalised.min)}, {num(normalised.quantiles.get('0.5'))}, {num(normalised.max)}",
    )
    kernel.add_row("advantage mass sum|A| removed by w", share(mass.removed))
    kernel.add_row("net change after renormalising (w~)", share(mass.removed_normalised))
    kernel.add_row(
        f"Clip-Cov would detach (r = {num(clip_cov.ratio)}, 1 < c < 5)",
        f"{num(clip_cov.count)} of {num(clip_cov.total)} tokens "
        f"({share(clip_cov.fraction)}; {num(clip_cov.eligible)} eligible)",
    )
    kernel.add_row(
        f"KL-Cov would penalise (top k = {num(kl_cov.ratio)} by c)",
        f"{num(kl_cov.count)} of {num(kl_cov.total)} tokens ({share(kl_cov.fraction)})",
    )
    print_table(console, kernel)


# ----------------------------------------------------------------------------- FPA
def _by_class(
    values: ByCorrectness[Any] | None, key: str | None = "mean", quantile: str | None = None
) -> list[str]:
    """The all/correct/incorrect cells of a statistic: ``key`` of a distribution, its
    ``quantile``, or the number itself (``key`` and ``quantile`` None)."""
    if values is None:
        return [DASH] * 3
    cells = []
    for name in _CLASSES:
        value = getattr(values, name)
        if quantile is not None and value is not None:
            value = value.quantiles.get(quantile)
        cells.append(num(getattr(value, key) if key and value is not None else value))
    return cells


def _below_cells(values: ByCorrectness[BelowThreshold | None]) -> list[str]:
    cells = []
    for name in _CLASSES:
        item = getattr(values, name)
        cells.append(DASH if item is None else f"{num(item.count)} ({share(item.fraction)})")
    return cells


def show_future_policy(report: Report, console: Console) -> None:
    section = report.future_policy
    if section is None:
        return
    files = section.method_files.get(section.method, sum(section.method_files.values()))
    _show_fpa_method(section, section.lam, section.threshold, files, console)
    approximation = section.approximation
    if approximation is not None:
        _show_fpa_method(
            approximation, section.lam, section.threshold, approximation.files, console
        )
    comparison = section.comparison
    if comparison is not None:
        verdict = (
            "OPPOSITE sides of 1: the approximation reads FPA's direction the wrong way"
            if comparison.opposite_sides
            else "the same side of 1"
        )
        console.print(
            f"FPA exact vs approximation, median future/current ratio at lambda = "
            f"{num(section.lam)}: {num(comparison.exact_median)} exact, "
            f"{num(comparison.approximation_median)} approximation ({verdict}); the two are "
            "never pooled"
        )


def _show_fpa_method(
    result: FuturePolicySection | MethodResult,
    lam: float,
    threshold: float,
    files: int,
    console: Console,
) -> None:
    """The table and the lambda sweep of one FPA method."""
    label = {
        "exact": "exact, from logits",
        "approximation": "APPROXIMATION from log-probs, an upper bound",
    }.get(result.method, "exact and approximation pooled, as reports written before did")
    table = _table(
        f"FPA future policy pi_hat, lambda = {num(lam)} ({label}): means over "
        f"{num(result.sequences)} sequences of {num(files)} file(s)",
        ["quantity", "all", "correct", "incorrect"],
        caption=_bound_caption(result.current_weight.all, "weights and ratios"),
    )
    table.add_row("current weight pi^(1/|y|)", *_by_class(result.current_weight))
    table.add_row("future weight pi_hat^(1/|y|)", *_by_class(result.future_weight))
    table.add_row("ratio pi_hat^(1/|y|) / pi^(1/|y|)", *_by_class(result.future_to_current))
    table.add_row("  ratio median", *_by_class(result.future_to_current, None, quantile="0.5"))
    below = result.below_threshold
    table.add_row(f"current weight < {num(threshold)}", *_below_cells(below["current"]))
    table.add_row(f"future weight < {num(threshold)}", *_below_cells(below["future"]))
    log_ratio = result.log_ratio_ref
    table.add_row("log pi(y|x) - log pi_ref(y|x)", *_by_class(log_ratio["sequence"]))
    table.add_row("  per token", *_by_class(log_ratio["per_token"]))
    print_table(console, table)

    sweep = _table(
        f"FPA lambda sweep ({result.method}): mean future weight, mean future/current ratio, "
        f"sequences with weight < {num(threshold)}",
        [
            "lambda",
            "weight correct",
            "weight incorrect",
            "ratio correct",
            "ratio incorrect",
            f"< {num(threshold)} correct",
            f"< {num(threshold)} incorrect",
            f"< {num(threshold)} all",
        ],
    )
    for row in result.sweep:
        weight = _by_class(row.weight_mean, None)
        ratio = _by_class(row.ratio_mean, None)
        below_by_class = row.below_threshold
        counts = []
        for name in ("correct", "incorrect", "all"):
            item = getattr(below_by_class, name)
            counts.append(DASH if item is None else num(item.count))
        sweep.add_row(num(row.lam), weight[1], weight[2], ratio[1], ratio[2], *counts)
    print_table(console, sweep)


def _bound_caption(distribution: Distribution | None, what: str) -> str | None:
    """One line saying how far the quantiles of ``what`` may be from the exact ones."""
    if distribution is None:
        return None
    bound = distribution.quantile_bound
    if bound.coordinate == "log":
        return (
            f"quantiles of the {what} read in log coordinates: within {share(bound.relative)} "
            "of |log x|, so x - 1 to about that share and the side of 1 exact"
        )
    return f"quantiles of the {what} read from value histograms: within {share(bound.relative)}"


# ---------------------------------------------------------------------------- TEPO
_QUADRANT_LABELS = {
    "pos_decreasing": ("A > 0, dH < 0", "TEPO's KL mask M"),
    "pos_non_decreasing": ("A > 0, dH >= 0", ""),
    "neg_increasing": ("A < 0, dH > 0", "the other misaligned case (Table 3 E)"),
    "neg_non_increasing": ("A < 0, dH <= 0", ""),
    "zero_advantage": ("A = 0", "in none of the four"),
}


def show_tepo(report: Report, console: Console) -> None:
    section = report.tepo
    if section is None:
        return
    weight = section.weight
    q = weight.quantiles
    table = _table(
        "TEPO sequence-likelihood weight w_i = exp(mean_t log(pi/pi_old)) "
        f"over {num(section.sequences)} sequences, clip band {clip_band(section.clip_band)}",
        ["quantity", "value"],
    )
    table.add_row(
        "w: mean, p1, p50, p99",
        f"{num(weight.mean, 6)}, {num(q.get('0.01'), 6)}, {num(q.get('0.5'), 6)}, "
        f"{num(q.get('0.99'), 6)}",
    )
    table.add_row("w: min, max", f"{num(weight.min, 6)}, {num(weight.max, 6)}")
    table.add_row("sequences with w outside the band", share(section.outside_band))
    table.add_row("tokens clipped, PPO form min(wA, clip(w)A)", share(section.clip_fraction))
    table.add_row(
        "tokens clipped, printed form min(w, clip(w)) A", share(section.clip_fraction_literal)
    )
    surrogate = section.surrogate
    table.add_row("loss -J, token-mean (TEPO)", num(surrogate and surrogate.token_mean))
    table.add_row(
        "loss -J, seq-mean-token-mean (GSPO)", num(surrogate and surrogate.seq_mean_token_mean)
    )
    print_table(console, table)
    kl_mask = section.kl_mask
    if kl_mask is None:
        return
    quadrants = _table(
        "TEPO KL-mask quadrants: valid tokens by advantage sign and entropy change "
        "dH = entropy - old_entropy",
        ["quadrant", "tokens", "share", "note"],
    )
    for key, (label, note) in _QUADRANT_LABELS.items():
        quadrants.add_row(label, num(kl_mask.counts[key]), share(kl_mask.fractions[key]), note)
    print_table(console, quadrants)


# -------------------------------------------------------------------------- QUATRO
def show_trust_region(report: Report, console: Console) -> None:
    section = report.trust_region
    if section is None:
        return
    lam, mu = section.lam, section.mu
    delta = section.delta
    sizes = ", ".join(f"{n} of size {s}" for s, n in section.group_sizes.items())
    summary = _table(
        f"QUATRO per-query duals, delta = {num(delta)}: lambda* = argmin f(lambda), "
        "mu* = f(lambda*) - lambda*(delta + 1), A_i = (R_i - mu*)/lambda* - 1",
        ["quantity", "value"],
    )
    summary.add_row("groups", f"{num(section.groups)} ({num(section.rollouts)} rollouts: {sizes})")
    summary.add_row(
        "degenerate groups (advantage 0)",
        f"{num(section.degenerate)}, of which {num(section.degenerate_all_equal)} "
        "with all rewards equal",
    )
    summary.add_row(
        "lambda*: mean, p50, min, max",
        f"{num(lam.mean)}, {num(lam.quantiles.get('0.5'))}, {num(lam.min)}, {num(lam.max)}",
    )
    summary.add_row("mu*: mean, min, max", f"{num(mu.mean)}, {num(mu.min)}, {num(mu.max)}")
    quatro, grpo = section.advantage["quatro"], section.advantage["grpo"]
    summary.add_row(
        "QUATRO advantage: std, min, max",
        f"{num(quatro.std)}, {num(quatro.min)}, {num(quatro.max)}",
    )
    summary.add_row(
        "GRPO advantage: std, min, max", f"{num(grpo.std)}, {num(grpo.min)}, {num(grpo.max)}"
    )
    print_table(console, summary)

    if section.by_correct:
        table = _table(
            f"QUATRO (delta = {num(delta)}) vs GRPO advantage by number of correct rollouts "
            "(mean over groups)",
            ["size N", "correct c", "groups", "lambda*", "QUATRO A correct", "QUATRO A incorrect",
             "GRPO A correct", "GRPO A incorrect"],
            caption=None
            if not section.non_binary_groups
            else f"{num(section.non_binary_groups)} groups with more than two reward "
            "values are not in this table",
        )  # fmt: skip
        for cell in section.by_correct:
            table.add_row(
                num(cell.group_size),
                num(cell.correct),
                num(cell.groups),
                num(cell.lam_mean),
                num(cell.quatro_correct),
                num(cell.quatro_incorrect),
                num(cell.grpo_correct),
                num(cell.grpo_incorrect),
            )
        print_table(console, table)

    sweep = _table(
        "QUATRO delta sweep (advantage means over rollouts of non-degenerate groups)",
        ["delta", "degenerate", "lambda* mean", "lambda* p50", "mu* mean", "mean |A|",
         "mean A correct", "mean A incorrect"],
    )  # fmt: skip
    for row in section.sweep:
        sweep.add_row(
            num(row.delta),
            f"{num(row.degenerate)} / {num(row.groups)}",
            num(row.lam_mean),
            num(row.lam_median),
            num(row.mu_mean),
            num(row.abs_advantage_mean),
            num(row.advantage_correct_mean),
            num(row.advantage_incorrect_mean),
        )
    print_table(console, sweep)


RENDERERS: list[Renderer] = [show_covariance, show_future_policy, show_tepo, show_trust_region]
