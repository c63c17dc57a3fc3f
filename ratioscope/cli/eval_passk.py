"""``ratioscope eval-passk``: Pass@k, avg@k and Pass@1 ± SE of sample files.

The field options and the sample-loading helpers are shared with ``eval-ucc`` and the
evaluation plots, which import them from here.
"""

from __future__ import annotations

from pathlib import Path

import typer

from ratioscope.cli._common import QUIET_OPTION, chosen

SAMPLES_ARGUMENT = typer.Argument(
    ...,
    help="Samples JSONL file(s), flat (one sample a line) or grouped (one problem a line), "
    "or training logs of verl, AReaL, ROLL (.jsonl) and TRL (.parquet); a directory means "
    "the files under it.",
)
K_OPTION = typer.Option(
    None, "--k", help="Comma-separated budgets, e.g. 1,8,64 (default: powers of two up to n)."
)
JSON_OPTION = typer.Option(None, "--json", help="Write the report JSON here (atomically).")
BASE_OPTION = typer.Option(
    None, "--base", help="Base method: adds the flip rate of every other method against it."
)
PROBLEM_FIELD = typer.Option(
    None,
    "--problem-field",
    help="Problem id field (default: problem_id, else idx; training logs group by prompt "
    "text, named by its hash).",
)
RESPONSE_FIELD = typer.Option(
    None,
    "--response-field",
    help="Response field (default: response, else code; training logs: their completion).",
)
CORRECT_FIELD = typer.Option(
    None,
    "--correct-field",
    help="Correctness field (default: correct, else score; in training logs the reward: "
    "score, reward, scores, or TRL's only reward column).",
)
CORRECT_THRESHOLD = typer.Option(
    None,
    "--correct-threshold",
    help="A numeric correctness value counts as correct when >= this (default: 0.5 for "
    "training logs; samples files then allow only true/false and 0/1).",
)
METHOD_FIELD = typer.Option(
    "method",
    "--method-field",
    help="Method field; a line without it takes its file's stem as method (training logs: "
    "the step). A name given here must be on some line of every file.",
)
DATASET_FIELD = typer.Option(
    "dataset",
    "--dataset-field",
    help="Field that groups problems into datasets (by_dataset). A name given here must "
    "be on some line of every file.",
)
FIELD_PARAMETERS = ("problem_field", "response_field", "correct_field", "method_field")
ALLOW_EMPTY = typer.Option(
    False,
    "--allow-empty-responses",
    help="Keep empty responses (an error by default: usually a broken export).",
)


def sample_fields(ctx: typer.Context, allow_empty: bool = False):
    """SampleFields from the field options; an option left at its default is None.

    A default name is optional where the library allows it (method, dataset), while a
    name the user typed must exist, so a typo is an error and not a silent fallback.
    """
    from ratioscope.io.samples import SampleFields

    return SampleFields(
        problem=chosen(ctx, "problem_field"),
        response=chosen(ctx, "response_field"),
        correct=chosen(ctx, "correct_field"),
        method=chosen(ctx, "method_field"),
        dataset=chosen(ctx, "dataset_field") if "dataset_field" in ctx.params else None,
        allow_empty=allow_empty,
        correct_threshold=ctx.params.get("correct_threshold"),
    )


def eval_passk(
    ctx: typer.Context,
    samples: list[Path] = SAMPLES_ARGUMENT,
    k: str | None = K_OPTION,
    json_out: Path | None = JSON_OPTION,
    base: str | None = BASE_OPTION,
    problem_field: str | None = PROBLEM_FIELD,
    response_field: str | None = RESPONSE_FIELD,
    correct_field: str | None = CORRECT_FIELD,
    correct_threshold: float | None = CORRECT_THRESHOLD,
    method_field: str = METHOD_FIELD,
    dataset_field: str = DATASET_FIELD,
    allow_empty: bool = ALLOW_EMPTY,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Pass@k (unbiased), avg@k and Pass@1 ± SE per method, side by side.

    Example: ratioscope eval-passk base.jsonl grpo.jsonl --k 1,4,16,64 --base base
    --json passk.json

    Training logs: ratioscope eval-passk verl_run/rollout_data/ (one method per step)
    """
    from ratioscope.cli._common import (
        announce_written,
        check_output_paths,
        parse_ints,
        progress_bar,
        stderr_console,
        stdout_console,
    )
    from ratioscope.evaluation.evaluate import evaluate_passk
    from ratioscope.io.samples import load_samples
    from ratioscope.render.eval_tables import show_eval, show_warnings

    check_output_paths(samples, [json_out])
    ks = parse_ints(k, "--k") if k else None
    sample_set = load_samples(samples, sample_fields(ctx, allow_empty))
    with progress_bar(not quiet) as progress:
        report = evaluate_passk(sample_set, ks, base_method=base, progress=progress)
    show_eval(report, stdout_console())
    show_warnings(report, stderr_console())
    if json_out:
        report.write_json(json_out)
    announce_written([json_out], quiet)
