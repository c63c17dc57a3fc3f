"""Pass@k and UCC@k evaluation of sample sets: SampleSet -> EvalReport (docs/evaluation.md).

Split by role: ``model`` holds the report (:class:`EvalReport` and its parts, JSON and
Parquet), ``evaluate`` the orchestration (:func:`evaluate_passk`, :func:`evaluate_ucc`).
The data of the evaluation figures lives in :mod:`ratioscope.figures.evaluation`,
which sits above this package and imports it.
"""

from __future__ import annotations

from ratioscope.evaluation.evaluate import (
    check_clustering_options,
    default_ks,
    evaluate_passk,
    evaluate_ucc,
    resolve_ks,
)
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

__all__ = [
    "DIVERSITY_METRICS",
    "EVAL_SCHEMA_VERSION",
    "NO_DATASET",
    "ClusterSummary",
    "DiversitySummary",
    "EvalParams",
    "EvalReport",
    "FlipBucket",
    "FlipRate",
    "FlipReport",
    "MethodResult",
    "MetricBlock",
    "Pass1SE",
    "ProblemClusters",
    "ProblemRow",
    "check_clustering_options",
    "default_ks",
    "evaluate_passk",
    "evaluate_ucc",
    "resolve_ks",
]
