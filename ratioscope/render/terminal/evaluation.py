"""Terminal tables for an :class:`~ratioscope.evaluation.model.EvalReport`.

Laid out like QUATRO's tables: Pass@k in percent with one column per k (Table 1/II),
UCC@k as expected counts (Table 3), then the diversity similarities (App. C.5) and the
flip rate per difficulty bucket (App. C.7). With more than one method the best value
of each column is bold (highest, or lowest for similarities, where lower means more
diverse).

Each number is shown once: Pass@1, avg@k and the mean of Pass@1 ± SE are one quantity
(the mean accuracy), so the Pass@k table has one ``Pass@1 ± SE`` column and no ``k=1``
or ``avg`` column; UCC@k at k = n is the mean number of correct clusters, so the
``clusters/problem`` column is shown only when the largest k is not every problem's n.
With datasets, the first group of rows, ``all datasets``, holds every problem of each
method, as the Pass@k table's caption says (the tables below it share its rows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratioscope.evaluation.model import ClusterSummary, DiversitySummary, EvalReport, MetricBlock
from ratioscope.render.terminal.tables import DASH

if TYPE_CHECKING:
    from rich.table import Table


def show_eval(report: EvalReport, console: Any) -> None:
    """Print every table the report has data for."""
    console.print(_inputs_line(report))
    console.print(passk_table(report))
    if report.params.command == "eval-ucc":
        console.print(ucc_table(report))
        console.print(diversity_table(report))
    if report.flip_rate is not None:
        for table in flip_tables(report):
            console.print(table)


def show_warnings(report: EvalReport, console: Any) -> None:
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


def _inputs_line(report: EvalReport) -> str:
    parts = [
        f"{f.path} ({f.layout}, {f.problems} problems, "
        + (f"{len(f.methods)} methods, " if len(f.methods) > 1 else "")
        + f"{f.samples} samples)"
        for f in report.inputs
    ]
    return "[dim]" + "; ".join(parts) + "[/]"


#: label of the group of rows over every problem of a method when datasets are shown
ALL_DATASETS = "all datasets"
ALL_DATASETS_NOTE = (
    f"{ALL_DATASETS} = every problem of the method, each weighing the same (not the mean "
    "of the dataset rows); methods are never pooled"
)


def _groups(report: EvalReport) -> list[tuple[str, dict[str, MetricBlock]]]:
    """(dataset label, {method: block}) in display order: all problems first."""
    groups: list[tuple[str, dict[str, MetricBlock]]] = [(ALL_DATASETS, dict(report.by_method))]
    names: dict[str, None] = {}
    for result in report.by_method.values():
        names.update(dict.fromkeys(result.by_dataset or {}))
    if len(names) == 1:
        only = next(iter(names))
        covers_all = all(
            r.by_dataset is not None and r.by_dataset[only].problems == r.problems
            for r in report.by_method.values()
        )
        if covers_all:  # one dataset holding every problem: no second, identical group
            return [(only, dict(report.by_method))]
    for name in names:
        blocks = {
            method: result.by_dataset[name]
            for method, result in report.by_method.items()
            if result.by_dataset and name in result.by_dataset
        }
        groups.append((name, blocks))
    return groups


def _best(values: list[float | None], lower_is_better: bool = False) -> float | None:
    present = [v for v in values if v is not None]
    if len(present) < 2:
        return None
    return min(present) if lower_is_better else max(present)


def _cell(value: float | None, best: float | None, fmt: str) -> str:
    if value is None:
        return DASH
    text = format(value, fmt)
    return f"[bold]{text}[/]" if best is not None and value == best else text


def _new_table(title: str, first_columns: list[str], caption: str = "") -> Table:
    from rich.table import Table

    table = Table(
        title=title, caption=caption or None, title_justify="left", caption_justify="left"
    )
    for name in first_columns:
        table.add_column(name, no_wrap=True)
    return table


def passk_table(report: EvalReport) -> Table:
    """Pass@k (%) per method and k; Pass@1 (= avg@k) once, with its SE (FPA App. B.3)."""
    ks = [str(k) for k in report.params.k if k != 1]  # k = 1 is the Pass@1 column
    groups = _groups(report)
    with_datasets = len(groups) > 1
    blocks_shown = [b for _, blocks in groups for b in blocks.values()]
    caption = [
        "Pass@1 = mean accuracy (avg@k, the same for every k); ± SE over sample positions "
        "(FPA App. B.3)"
    ]
    if any(b.pass1_se is None for b in blocks_shown):
        caption.append("± —: no SE, the problems' sample indices differ (see the warning)")
    if with_datasets:
        caption.append(ALL_DATASETS_NOTE)
    table = _new_table(
        "Pass@k (%) — chance that k samples contain a correct one",
        ["dataset", "method"] if with_datasets else ["method"],
        caption="\n".join(caption),
    )
    table.add_column("problems", justify="right")
    table.add_column("Pass@1 ± SE", justify="right")
    for k in ks:
        table.add_column(f"k={k}", justify="right")
    for label, blocks in groups:
        best = {k: _best([b.pass_at_k[k] for b in blocks.values()]) for k in ks}
        best_avg = _best([b.avg for b in blocks.values()])
        for row, (method, block) in enumerate(blocks.items()):
            lead = [label if row == 0 else "", method] if with_datasets else [method]
            se = block.pass1_se
            pass1 = _cell(100 * block.avg, _pct(best_avg), ".2f")
            pass1 += f" ± {DASH}" if se is None else f" ± {100 * se.se:.2f}"
            cells = [_cell(100 * block.pass_at_k[k], _pct(best[k]), ".2f") for k in ks]
            table.add_row(*lead, str(block.problems), pass1, *cells)
        if with_datasets:
            table.add_section()
    return table


def _pct(value: float | None) -> float | None:
    return None if value is None else 100 * value


def ucc_table(report: EvalReport) -> Table:
    """UCC@k per method and k (QUATRO Table 3), with clusters per problem and UCR.

    The clusters-per-problem column is left out when the largest k is every problem's
    n: UCC@n is that number, already in the table.
    """
    ks = [str(k) for k in report.params.k]
    groups = _groups(report)
    with_datasets = len(groups) > 1
    params = report.params
    full_k = _largest_k_is_every_n(report)
    caption = [
        f"clusters: TF-IDF cosine >= {params.threshold}, {params.linkage} linkage; "
        "UCR = clusters / samples (QUATRO C.7)"
    ]
    if full_k:
        caption.append(f"k={ks[-1]} = n: UCC@n is the mean number of correct clusters per problem")
    table = _new_table(
        "UCC@k — expected number of distinct correct solutions among k samples",
        ["dataset", "method"] if with_datasets else ["method"],
        caption="\n".join(caption),
    )
    for k in ks:
        table.add_column(f"k={k}", justify="right")
    if not full_k:
        table.add_column("clusters/problem", justify="right")
    table.add_column("UCR", justify="right")
    for label, blocks in groups:
        ucc = {method: _ucc(method, block) for method, block in blocks.items()}
        best = {k: _best([u[k] for u, _ in ucc.values()]) for k in ks}
        for row, (method, (ucc_at_k, clusters)) in enumerate(ucc.items()):
            lead = [label if row == 0 else "", method] if with_datasets else [method]
            cells = [_cell(ucc_at_k[k], best[k], ".2f") for k in ks]
            if not full_k:
                cells.append(f"{clusters.mean:.2f}")
            table.add_row(*lead, *cells, f"{clusters.unique_correct_ratio:.3f}")
        if with_datasets:
            table.add_section()
    return table


def _largest_k_is_every_n(report: EvalReport) -> bool:
    """True when every problem of every method has exactly max(k) samples."""
    largest = max(report.params.k)
    return all(
        r.samples_per_problem["min"] == r.samples_per_problem["max"] == largest
        for r in report.by_method.values()
    )


def diversity_table(report: EvalReport) -> Table:
    """Mean pairwise similarity of correct responses (lower = more diverse)."""
    columns = [
        ("tfidf_cosine", "TF-IDF cos"),
        ("rouge_l", "ROUGE-L F"),
        ("jaccard", "Jaccard"),
        ("edit_similarity", "edit sim"),
    ]
    groups = _groups(report)
    with_datasets = len(groups) > 1
    table = _new_table(
        "Similarity of correct responses — lower means more diverse",
        ["dataset", "method"] if with_datasets else ["method"],
        caption="mean over problems with >= 2 correct responses; " + _pairs_note(report),
    )
    for _, title in columns:
        table.add_column(title, justify="right")
    table.add_column("problems", justify="right")
    table.add_column("pairs", justify="right")
    for label, blocks in groups:
        summaries = {method: _diversity(method, block) for method, block in blocks.items()}
        best = {
            key: _best([getattr(d, key) for d in summaries.values()], True) for key, _ in columns
        }
        for row, (method, div) in enumerate(summaries.items()):
            lead = [label if row == 0 else "", method] if with_datasets else [method]
            cells = [_cell(getattr(div, key), best[key], ".3f") for key, _ in columns]
            table.add_row(*lead, *cells, str(div.problems), str(div.pairs))
        if with_datasets:
            table.add_section()
    return table


def _ucc(method: str, block: MetricBlock) -> tuple[dict[str, float], ClusterSummary]:
    """UCC@k and clusters of an eval-ucc block, which has both."""
    if block.ucc_at_k is None or block.clusters is None:
        raise ValueError(f"method '{method}' has no UCC@k: the report is not from eval-ucc")
    return block.ucc_at_k, block.clusters


def _diversity(method: str, block: MetricBlock) -> DiversitySummary:
    """Diversity of an eval-ucc block, which has it."""
    if block.diversity is None:
        raise ValueError(f"method '{method}' has no diversity: the report is not from eval-ucc")
    return block.diversity


def _pairs_note(report: EvalReport) -> str:
    if not report.params.max_pairs:
        return "ROUGE-L, Jaccard and edit similarity skipped (--max-pairs 0)"
    return (
        f"ROUGE-L, Jaccard and edit similarity on at most {report.params.max_pairs} "
        "sampled pairs per problem"
    )


def flip_tables(report: EvalReport) -> list[Table]:
    """One table per trained method: flip@k (%) per difficulty bucket of the base."""
    flip = report.flip_rate
    if flip is None:  # no --base, so no flip rate
        return []
    ks = [str(k) for k in report.params.k]
    tables = []
    for method, rate in flip.by_method.items():
        table = _new_table(
            f"Flip rate (%) of '{method}' vs base '{flip.base}' ({rate.problems} prompts)",
            ["bucket", "base c/n"],
            caption=(
                "flip@k = mean over the bucket of (1 - Pass@k base) x Pass@k trained; "
                "0->solved = prompts with no correct base sample and >= 1 trained"
            ),
        )
        table.add_column("prompts", justify="right")
        for k in ks:
            table.add_column(f"k={k}", justify="right")
        table.add_column("0->solved", justify="right")
        for bucket in rate.buckets:
            low, high = bucket.base_fraction
            span = f"[{_fraction(low)}, {_fraction(high)}{']' if high == 1 else ')'}"
            flips = [bucket.flip_at_k[k] for k in ks]
            cells = [DASH if f is None else f"{100 * f:.2f}" for f in flips]
            table.add_row(
                bucket.name, span, str(bucket.prompts), *cells, str(bucket.unsolved_to_solved)
            )
        tables.append(table)
    return tables


def _fraction(value: float) -> str:
    """1/32 rather than 0.03125: the bucket edges are fractions of the base n."""
    from fractions import Fraction

    return str(Fraction(value).limit_denominator(1024))
