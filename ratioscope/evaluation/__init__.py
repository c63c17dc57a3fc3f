"""Pass@k and UCC@k evaluation of sample sets: SampleSet -> EvalReport (DESIGN 3.8, 4).

Split by role: ``model`` holds the report (:class:`EvalReport` and its parts, JSON and
Parquet), ``evaluate`` the orchestration (:func:`evaluate_passk`, :func:`evaluate_ucc`).
The data of the evaluation figures lives in :mod:`ratioscope.figures.evaluation`; its
names are also importable from here, as they were before the split.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from ratioscope.figures.evaluation import (
        MetricCurves,
        SimilarityPanel,
        curves_from_report,
        metric_curves,
        similarity_panels,
    )

#: figure data, moved to ratioscope.figures.evaluation; loaded on first use because
#: that module imports this package (figures sit above the evaluation, not beside it)
_FIGURE_NAMES = (
    "MetricCurves",
    "SimilarityPanel",
    "curves_from_report",
    "metric_curves",
    "similarity_panels",
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
    "MetricCurves",
    "Pass1SE",
    "ProblemClusters",
    "ProblemRow",
    "SimilarityPanel",
    "check_clustering_options",
    "curves_from_report",
    "default_ks",
    "evaluate_passk",
    "evaluate_ucc",
    "metric_curves",
    "resolve_ks",
    "similarity_panels",
]


def __getattr__(name: str) -> Any:
    if name in _FIGURE_NAMES:
        from ratioscope.figures import evaluation as figures

        return getattr(figures, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
