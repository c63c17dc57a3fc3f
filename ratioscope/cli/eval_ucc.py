"""``ratioscope eval-ucc``: UCC@k, clusters and diversity of correct responses."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ratioscope.cli._options import (
    DATASET_FIELD_DEFAULT,
    LINKAGE_DEFAULT,
    MAX_PAIRS_DEFAULT,
    METHOD_FIELD_DEFAULT,
    THRESHOLD_DEFAULT,
    AllowEmpty,
    Base,
    CorrectField,
    CorrectThreshold,
    DatasetField,
    EvalJsonOut,
    EvalQuiet,
    K,
    Linkage,
    MethodField,
    ProblemField,
    ResponseField,
    Samples,
    Threshold,
)
from ratioscope.cli._path_params import path_option
from ratioscope.cli.eval_passk import sample_fields

MaxPairs = Annotated[
    int,
    typer.Option("--max-pairs", help="Pairs per problem for ROUGE-L, Jaccard, edit (0: skip)."),
]
PerProblem = Annotated[
    Path | None,
    path_option("--per-problem", help="Write one row per method and problem to this .parquet."),
]


def eval_ucc(
    ctx: typer.Context,
    samples: Samples,
    k: K = None,
    threshold: Threshold = THRESHOLD_DEFAULT,
    linkage: Linkage = LINKAGE_DEFAULT,
    max_pairs: MaxPairs = MAX_PAIRS_DEFAULT,
    base: Base = None,
    json_out: EvalJsonOut = None,
    per_problem: PerProblem = None,
    problem_field: ProblemField = None,
    response_field: ResponseField = None,
    correct_field: CorrectField = None,
    correct_threshold: CorrectThreshold = None,
    method_field: MethodField = METHOD_FIELD_DEFAULT,
    dataset_field: DatasetField = DATASET_FIELD_DEFAULT,
    allow_empty: AllowEmpty = False,
    quiet: EvalQuiet = False,
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
    from ratioscope.render.terminal.evaluation import show_eval, show_warnings

    check_output_paths(samples, [json_out, per_problem])
    check_suffix(per_problem, ".parquet", "--per-problem")
    check_suffix(json_out, ".json", "--json")
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
