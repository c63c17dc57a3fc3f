"""Pass@k and UCC@k evaluation of sample sets: SampleSet -> EvalReport (docs/evaluation.md).

The functions here only orchestrate: formulas live in ``ratioscope.functional.passk``,
``clustering`` and ``diversity``. Per-problem values are computed once per method and
then averaged over all problems (``by_method.<m>``) and over the problems of each
dataset (``by_method.<m>.by_dataset.<d>``). Means are over problems, each problem
weighing the same, as in QUATRO Tables 1-3.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ratioscope.errors import ParameterError, SampleError, UsageError
from ratioscope.evaluation.model import (
    DIVERSITY_METRICS,
    EVAL_SCHEMA_VERSION,
    NO_DATASET,
    ClusterSummary,
    DiversitySummary,
    EvalParams,
    EvalReport,
    FlipBucket,
    FlipRate,
    FlipReport,
    MethodResult,
    MetricBlock,
    Pass1SE,
    ProblemClusters,
    ProblemRow,
)
from ratioscope.functional import passk as pk
from ratioscope.functional.clustering import (
    DEFAULT_LINKAGE,
    DEFAULT_THRESHOLD,
    DEFAULT_TOKEN_PATTERN,
    LINKAGES,
    cluster_labels,
    cluster_sizes,
)
from ratioscope.functional.diversity import (
    DEFAULT_MAX_PAIRS,
    DEFAULT_SEED,
    DiversityScores,
    problem_similarity,
)
from ratioscope.io.samples import MethodSamples, ProblemSamples, SampleSet
from ratioscope.progress import ProgressCallback, ProgressUpdate, report


def default_ks(sample_set: SampleSet) -> list[int]:
    """Powers of two up to the smallest number of samples of any problem."""
    smallest = min(p.n for m in sample_set.methods.values() for p in m.problems)
    return [2**e for e in range(int(np.log2(smallest)) + 1)]


def resolve_ks(sample_set: SampleSet, ks: Sequence[int] | None) -> list[int]:
    """The budgets to evaluate: ``ks`` sorted and checked against every problem's n."""
    if not sample_set.methods:
        raise UsageError("there are no samples to evaluate")
    if ks is None or len(ks) == 0:
        return default_ks(sample_set)
    resolved = sorted({int(k) for k in ks})
    if resolved[0] < 1:
        raise ParameterError("ks", f"expects positive integers, got {resolved[0]}")
    largest = resolved[-1]
    for method in sample_set.methods.values():
        for problem in method.problems:
            if problem.n < largest:
                counts = [p.n for m in sample_set.methods.values() for p in m.problems]
                spread = (
                    f"every problem has {min(counts)} samples"
                    if min(counts) == max(counts)
                    else f"problems have between {min(counts)} and {max(counts)} samples"
                )
                # the fix is a smaller k, so it is an error of ks; the file says why
                raise ParameterError(
                    "ks",
                    f"must be at most {min(counts)}, as {spread}; {problem.source[0]}: "
                    f"{problem.where}: problem {problem.problem_id!r} of method "
                    f"'{method.method}' has {problem.n} samples, fewer than k={largest}, so "
                    f"Pass@{largest} is undefined there",
                )
    return resolved


def evaluate_passk(
    sample_set: SampleSet,
    ks: Sequence[int] | None = None,
    *,
    base_method: str | None = None,
    progress: ProgressCallback | None = None,
) -> EvalReport:
    """Pass@k, avg@k and Pass@1 ± SE per method (and per dataset), plus the flip rate.

    Args:
        sample_set: from :func:`ratioscope.io.samples.load_samples`.
        ks: budgets; default powers of two up to the smallest n. A k above some
            problem's n raises ParameterError naming that problem.
        base_method: when given, the flip rate of every other method against it.
        progress: callback, one update per method.
    """
    resolved = resolve_ks(sample_set, ks)
    params = EvalParams(
        command="eval-passk",
        k=resolved,
        base_method=base_method,
        correct_rule=sample_set.correct_rule,
        correct_threshold=sample_set.correct_threshold,
    )
    return _evaluate(sample_set, resolved, params, None, progress)


def evaluate_ucc(
    sample_set: SampleSet,
    ks: Sequence[int] | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    linkage: str = DEFAULT_LINKAGE,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    base_method: str | None = None,
    token_pattern: str = DEFAULT_TOKEN_PATTERN,
    seed: int = DEFAULT_SEED,
    progress: ProgressCallback | None = None,
) -> EvalReport:
    """Everything of :func:`evaluate_passk`, plus UCC@k, clusters and diversity.

    Args:
        threshold: TF-IDF cosine similarity at or above which two correct responses
            may share a cluster, in (0, 1].
        linkage: ``single`` (connected components), ``average`` or ``complete``.
        max_pairs: pairs per problem sampled for ROUGE-L, Jaccard and edit similarity;
            0 skips them.
        token_pattern: TF-IDF token regular expression.
        seed: seed of the pair sampler.
        progress: callback, one update per problem.
    """
    check_clustering_options(threshold, linkage, max_pairs)
    resolved = resolve_ks(sample_set, ks)
    params = EvalParams(
        command="eval-ucc",
        k=resolved,
        threshold=threshold,
        linkage=linkage,
        max_pairs=max_pairs,
        seed=seed,
        token_pattern=token_pattern,
        base_method=base_method,
        correct_rule=sample_set.correct_rule,
        correct_threshold=sample_set.correct_threshold,
    )
    options = _ClusterOptions(threshold, linkage, max_pairs, seed, token_pattern)
    return _evaluate(sample_set, resolved, params, options, progress)


def check_clustering_options(threshold: float, linkage: str, max_pairs: int = 0) -> None:
    if not 0.0 < threshold <= 1.0:
        raise ParameterError("threshold", f"must lie in (0, 1], got {threshold}")
    if linkage not in LINKAGES:
        raise ParameterError("linkage", f"must be one of {', '.join(LINKAGES)}, got '{linkage}'")
    if max_pairs < 0:
        raise ParameterError("max_pairs", f"must be 0 or more, got {max_pairs}")


@dataclass(frozen=True)
class _ClusterOptions:
    threshold: float
    linkage: str
    max_pairs: int
    seed: int
    token_pattern: str


@dataclass
class _ClusterValues:
    """Per-problem clustering values of one method (eval-ucc), rows as in _MethodValues."""

    ucc_at_k: np.ndarray  # [P, K]
    sizes: list[np.ndarray]
    diversity: np.ndarray  # [P, 4], NaN where no pair
    pairs: np.ndarray  # [P]


@dataclass
class _MethodValues:
    """Per-problem values of one method, rows aligned with ``method.problems``."""

    method: MethodSamples
    n: np.ndarray
    c: np.ndarray
    pass_at_k: np.ndarray  # [P, K]
    clusters: _ClusterValues | None = None  # eval-ucc only


def _evaluate(
    sample_set: SampleSet,
    ks: list[int],
    params: EvalParams,
    options: _ClusterOptions | None,
    progress: ProgressCallback | None,
) -> EvalReport:
    from ratioscope.io.documents import tool_info

    if params.base_method is not None:
        _check_base(sample_set, params.base_method)  # before the long part, not after
    warnings: list[str] = []
    total = sum(len(m.problems) for m in sample_set.methods.values())
    done = 0
    values: dict[str, _MethodValues] = {}
    for name, method in sample_set.methods.items():
        values[name] = _method_values(method, ks, options, progress, done, total)
        done += len(method.problems)
    by_method = {name: _method_result(v, ks, warnings) for name, v in values.items()}
    flip = None
    if params.base_method is not None:
        flip = _flip_report(sample_set, params.base_method, ks, warnings)
    rows = [row for v in values.values() for row in _problem_rows(v, ks)]
    return EvalReport(
        schema_version=EVAL_SCHEMA_VERSION,
        tool=tool_info(),
        inputs=list(sample_set.files),
        params=params,
        by_method=by_method,
        flip_rate=flip,
        warnings=warnings,
        per_problem=rows,
    )


def _method_values(
    method: MethodSamples,
    ks: list[int],
    options: _ClusterOptions | None,
    progress: ProgressCallback | None,
    done: int,
    total: int,
) -> _MethodValues:
    n, c = method.counts()
    passes = np.stack([pk.pass_at_k(n, c, k) for k in ks], axis=1)
    values = _MethodValues(method, n, c, passes)
    if options is None:
        report(progress, ProgressUpdate("problems", done + len(n), total, method.method))
        return values
    problems = len(method.problems)
    clusters = _ClusterValues(
        ucc_at_k=np.empty((problems, len(ks))),
        sizes=[],
        diversity=np.full((problems, len(DIVERSITY_METRICS)), np.nan),
        pairs=np.zeros(problems, dtype=np.int64),
    )
    values.clusters = clusters
    from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

    # One problem's TF-IDF product is small (~100 x 300): BLAS threads cost more to wake
    # than they save, 13x slower than one thread on a busy 2-core machine (measured).
    with threadpool_limits(limits=1, user_api="blas"):
        for row, problem in enumerate(method.problems):
            sizes, scores = _cluster_problem(problem, options)
            clusters.sizes.append(sizes)
            clusters.ucc_at_k[row] = [pk.ucc_at_k(problem.n, sizes, k) for k in ks]
            if scores is not None:
                clusters.diversity[row] = [getattr(scores, key) for key in DIVERSITY_METRICS]
                clusters.pairs[row] = scores.pairs
            report(progress, ProgressUpdate("problems", done + row + 1, total, method.method))
    return values


def _cluster_problem(
    problem: ProblemSamples, options: _ClusterOptions
) -> tuple[np.ndarray, DiversityScores | None]:
    """Correct-cluster sizes [C] and diversity (None below two correct) of one problem."""
    texts = [r for r, ok in zip(problem.responses, problem.correct.tolist(), strict=True) if ok]
    if not texts:
        return np.zeros(0, dtype=np.int64), None
    # one tokenisation feeds the TF-IDF of the clusters and the diversity scores
    found = problem_similarity(texts, options.max_pairs, options.seed, options.token_pattern)
    sizes = cluster_sizes(cluster_labels(found.similarity, options.threshold, options.linkage))
    return sizes, found.diversity


def _method_result(values: _MethodValues, ks: list[int], warnings: list[str]) -> MethodResult:
    problems = values.method.problems
    everything = np.arange(len(problems))
    block = _block(values, everything, ks, warnings, per_problem=True)
    datasets = [p.dataset for p in problems]
    by_dataset: dict[str, MetricBlock] | None = None
    if any(d is not None for d in datasets):
        names = sorted({d for d in datasets if d is not None})
        names += [NO_DATASET] if None in datasets else []
        by_dataset = {}
        for name in names:
            rows = np.array(
                [i for i, d in enumerate(datasets) if (NO_DATASET if d is None else d) == name]
            )
            by_dataset[name] = _block(values, rows, ks, None, per_problem=False)
    return MethodResult(**vars(block), by_dataset=by_dataset)


def _block(
    values: _MethodValues,
    rows: np.ndarray,
    ks: list[int],
    warnings: list[str] | None,
    per_problem: bool,
) -> MetricBlock:
    n, c = values.n[rows], values.c[rows]
    keys = [str(k) for k in ks]
    ucc: dict[str, float] | None = None
    clusters: ClusterSummary | None = None
    diversity: DiversitySummary | None = None
    if values.clusters is not None:
        found = values.clusters
        ucc = dict(zip(keys, found.ucc_at_k[rows].mean(axis=0).tolist(), strict=True))
        clusters = _cluster_summary(values, found, rows, per_problem)
        diversity = _diversity_summary(found, rows)
    return MetricBlock(
        problems=int(rows.size),
        samples=int(n.sum()),
        samples_per_problem={"min": int(n.min()), "max": int(n.max())},
        pass_at_k=dict(zip(keys, values.pass_at_k[rows].mean(axis=0).tolist(), strict=True)),
        avg=float(pk.avg_at_k(n, c).mean()),
        pass1_se=_pass1_se(values, rows, warnings),
        ucc_at_k=ucc,
        clusters=clusters,
        diversity=diversity,
    )


def _pass1_se(
    values: _MethodValues, rows: np.ndarray, warnings: list[str] | None
) -> Pass1SE | None:
    problems = [values.method.problems[i] for i in rows.tolist()]
    first = problems[0].sample_index
    aligned = first is not None and all(
        p.sample_index is not None and np.array_equal(p.sample_index, first) for p in problems
    )
    if not aligned:
        if warnings is not None:
            warnings.append(
                f"method '{values.method.method}': no Pass@1 ± SE, which needs the same "
                "sample indices for every problem (a sample_index field, the grouped layout, "
                "or a training log whose prompts all have as many samples)"
            )
        return None
    mean, se = pk.pass1_with_se(np.stack([p.correct for p in problems]))
    return Pass1SE(mean=mean, se=se, samples_per_problem=int(first.size))


def _cluster_summary(
    values: _MethodValues, found: _ClusterValues, rows: np.ndarray, per_problem: bool
) -> ClusterSummary:
    counts = np.array([found.sizes[i].size for i in rows.tolist()], dtype=np.float64)
    listing = None
    if per_problem:
        listing = [
            ProblemClusters(
                problem=values.method.problems[i].problem_id,
                dataset=values.method.problems[i].dataset,
                samples=int(values.n[i]),
                correct=int(values.c[i]),
                clusters=int(found.sizes[i].size),
                sizes=found.sizes[i].tolist(),
            )
            for i in rows.tolist()
        ]
    return ClusterSummary(
        mean=float(counts.mean()),
        unique_correct_ratio=float((counts / values.n[rows]).mean()),
        per_problem=listing,
    )


def _diversity_summary(found: _ClusterValues, rows: np.ndarray) -> DiversitySummary:
    table = found.diversity[rows]
    has_pair = ~np.isnan(table[:, 0])
    means = {}
    for column, key in enumerate(DIVERSITY_METRICS):
        present = table[:, column][~np.isnan(table[:, column])]
        means[key] = float(present.mean()) if present.size else None
    return DiversitySummary(
        **means, problems=int(has_pair.sum()), pairs=int(found.pairs[rows].sum())
    )


def _check_base(sample_set: SampleSet, base_name: str) -> MethodSamples:
    base = sample_set.method(base_name)
    if len(sample_set.methods) < 2:
        raise ParameterError(
            "base_method",
            f"{base_name} needs at least one other method to compare with; "
            f"methods found: {', '.join(sample_set.methods)}",
        )
    return base


def _flip_report(
    sample_set: SampleSet, base_name: str, ks: list[int], warnings: list[str]
) -> FlipReport:
    base = _check_base(sample_set, base_name)
    others = [m for name, m in sample_set.methods.items() if name != base_name]
    return FlipReport(
        base=base_name,
        by_method={m.method: _flip_rate(base, m, ks, warnings) for m in others},
    )


def _flip_rate(
    base: MethodSamples, trained: MethodSamples, ks: list[int], warnings: list[str]
) -> FlipRate:
    trained_by_id = {p.problem_id: p for p in trained.problems}
    pairs = [
        (p, trained_by_id[p.problem_id]) for p in base.problems if p.problem_id in trained_by_id
    ]
    if not pairs:
        raise SampleError(
            base.problems[0].source[0],
            f"methods '{base.method}' and '{trained.method}' have no problem in common, "
            "so there is no flip rate to compute",
        )
    unmatched = len(base.problems) + len(trained.problems) - 2 * len(pairs)
    if unmatched:
        warnings.append(
            f"flip rate '{trained.method}' vs '{base.method}': {unmatched} problem(s) found "
            f"in only one of them were left out; {len(pairs)} compared"
        )
    n_base = np.array([b.n for b, _ in pairs])
    c_base = np.array([b.c for b, _ in pairs])
    n_trained = np.array([t.n for _, t in pairs])
    c_trained = np.array([t.c for _, t in pairs])
    bucket = pk.difficulty_bucket(n_base, c_base)
    flips = {k: pk.flip_at_k(n_base, c_base, n_trained, c_trained, k) for k in ks}
    edges = (0.0, *pk.BUCKET_FRACTIONS, 1.0)
    buckets = []
    for index, name in enumerate(pk.DIFFICULTY_BUCKETS):
        members = bucket == index
        count = int(members.sum())
        buckets.append(
            FlipBucket(
                name=name,
                base_fraction=[edges[index], edges[index + 1]],
                prompts=count,
                flip_at_k={
                    str(k): float(f[members].mean()) if count else None for k, f in flips.items()
                },
                unsolved_to_solved=int(((c_base == 0) & (c_trained > 0) & members).sum()),
            )
        )
    return FlipRate(problems=len(pairs), buckets=buckets)


def _problem_rows(values: _MethodValues, ks: list[int]) -> list[ProblemRow]:
    keys = [str(k) for k in ks]
    rows = []
    for i, problem in enumerate(values.method.problems):
        extra: dict[str, Any] = {}
        found = values.clusters
        if found is not None:
            extra = {
                "clusters": int(found.sizes[i].size),
                "ucc_at_k": dict(zip(keys, found.ucc_at_k[i].tolist(), strict=True)),
                "diversity": dict(zip(DIVERSITY_METRICS, found.diversity[i].tolist(), strict=True)),
                "pairs": int(found.pairs[i]),
            }
        rows.append(
            ProblemRow(
                method=values.method.method,
                problem=str(problem.problem_id),
                dataset=problem.dataset,
                samples=problem.n,
                correct=problem.c,
                pass_at_k=dict(zip(keys, values.pass_at_k[i].tolist(), strict=True)),
                **extra,
            )
        )
    return rows
