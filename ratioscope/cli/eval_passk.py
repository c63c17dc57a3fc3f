"""``ratioscope eval-passk``: Pass@k, avg@k and Pass@1 ± SE of sample files.

The sample-loading helper :func:`sample_fields` is shared with ``eval-ucc`` and the
evaluation plots, which import it from here (their options are in ``_options``).
"""

from __future__ import annotations

import typer

from ratioscope.cli._common import chosen
from ratioscope.cli._options import (
    DATASET_FIELD_DEFAULT,
    METHOD_FIELD_DEFAULT,
    AllowEmpty,
    Base,
    CorrectField,
    CorrectThreshold,
    DatasetField,
    EvalJsonOut,
    EvalQuiet,
    K,
    MethodField,
    ProblemField,
    ResponseField,
    Samples,
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
    samples: Samples,
    k: K = None,
    json_out: EvalJsonOut = None,
    base: Base = None,
    problem_field: ProblemField = None,
    response_field: ResponseField = None,
    correct_field: CorrectField = None,
    correct_threshold: CorrectThreshold = None,
    method_field: MethodField = METHOD_FIELD_DEFAULT,
    dataset_field: DatasetField = DATASET_FIELD_DEFAULT,
    allow_empty: AllowEmpty = False,
    quiet: EvalQuiet = False,
) -> None:
    """Pass@k (unbiased), avg@k and Pass@1 ± SE per method, side by side.

    Example: ratioscope eval-passk base.jsonl grpo.jsonl --k 1,4,16,64 --base base
    --json passk.json

    Training logs: ratioscope eval-passk verl_run/rollout_data/ (one method per step)
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
    from ratioscope.evaluation.evaluate import evaluate_passk
    from ratioscope.io.samples import load_samples
    from ratioscope.render.terminal.evaluation import show_eval, show_warnings

    check_output_paths(samples, [json_out])
    check_suffix(json_out, ".json", "--json")
    ks = parse_ints(k, "--k") if k else None
    sample_set = load_samples(samples, sample_fields(ctx, allow_empty))
    with progress_bar(not quiet) as progress:
        report = evaluate_passk(sample_set, ks, base_method=base, progress=progress)
    show_eval(report, stdout_console())
    show_warnings(report, stderr_console())
    if json_out:
        report.write_json(json_out)
    announce_written([json_out], quiet)
