"""``ratioscope eval-ucc``: UCC@k, clusters and diversity of correct responses."""

from __future__ import annotations

from pathlib import Path

import typer

from ratioscope.cli._common import QUIET_OPTION
from ratioscope.cli.eval_passk import (
    ALLOW_EMPTY,
    BASE_OPTION,
    CORRECT_FIELD,
    CORRECT_THRESHOLD,
    DATASET_FIELD,
    JSON_OPTION,
    K_OPTION,
    METHOD_FIELD,
    PROBLEM_FIELD,
    RESPONSE_FIELD,
    SAMPLES_ARGUMENT,
    sample_fields,
)

THRESHOLD_OPTION = typer.Option(
    0.8, "--threshold", help="TF-IDF cosine similarity at which correct responses cluster."
)
LINKAGE_OPTION = typer.Option(
    "single", "--linkage", help="Cluster linkage: single (connected components), average, complete."
)


def eval_ucc(
    ctx: typer.Context,
    samples: list[Path] = SAMPLES_ARGUMENT,
    k: str | None = K_OPTION,
    threshold: float = THRESHOLD_OPTION,
    linkage: str = LINKAGE_OPTION,
    max_pairs: int = typer.Option(
        500, "--max-pairs", help="Pairs per problem for ROUGE-L, Jaccard, edit (0: skip)."
    ),
    base: str | None = BASE_OPTION,
    json_out: Path | None = JSON_OPTION,
    per_problem: Path | None = typer.Option(
        None, "--per-problem", help="Write one row per method and problem to this .parquet."
    ),
    problem_field: str | None = PROBLEM_FIELD,
    response_field: str | None = RESPONSE_FIELD,
    correct_field: str | None = CORRECT_FIELD,
    correct_threshold: float | None = CORRECT_THRESHOLD,
    method_field: str = METHOD_FIELD,
    dataset_field: str = DATASET_FIELD,
    allow_empty: bool = ALLOW_EMPTY,
    quiet: bool = QUIET_OPTION,
) -> None:
    """UCC@k (distinct correct solutions among k samples), Pass@k and diversity.

    Example: ratioscope eval-ucc base.jsonl grpo.jsonl --k 8,32,64 --threshold 0.8
    --base base --json ucc.json --per-problem ucc.parquet

    Training logs: ratioscope eval-ucc trl_run/completions/ --correct-field accuracy_reward
    """
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        check_suffix,
        parse_ints,
        progress_bar,
        stderr_console,
        stdout_console,
    )
    from ratioscope.evaluation.evaluate import check_clustering_options, evaluate_ucc
    from ratioscope.io.samples import load_samples
    from ratioscope.render.eval_tables import show_eval, show_warnings

    check_output_paths(samples, [json_out, per_problem])
    check_suffix(per_problem, ".parquet", "--per-problem")
    check_clustering_options(threshold, linkage, max_pairs)
    ks = parse_ints(k, "--k") if k else None
    sample_set = load_samples(samples, sample_fields(ctx, allow_empty))
    with progress_bar(not quiet) as progress:
        report = evaluate_ucc(
            sample_set,
            ks,
            threshold=threshold,
            linkage=linkage,
            max_pairs=max_pairs,
            base_method=base,
            progress=progress,
        )
    show_eval(report, stdout_console())
    show_warnings(report, stderr_console())
    if json_out:
        report.write_json(json_out)
    if per_problem:
        report.write_parquet(per_problem)
    announce_written([json_out, per_problem], quiet)
