"""Figure data of the evaluation plots: Pass@k / UCC@k curves and similarity panels.

``ratioscope plot passk``, ``plot ucc`` and ``plot similarity`` get their data here and
hand it to ``render/eval_plots.py``, which only draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ratioscope.errors import ParameterError, ReportError, UsageError
from ratioscope.evaluation.evaluate import check_clustering_options, evaluate_passk, evaluate_ucc
from ratioscope.functional.clustering import (
    DEFAULT_LINKAGE,
    DEFAULT_THRESHOLD,
    DEFAULT_TOKEN_PATTERN,
    cluster_labels,
    cluster_order,
    tfidf_cosine,
)
from ratioscope.io.samples import SampleFields, SampleSet
from ratioscope.progress import ProgressCallback


@dataclass(frozen=True)
class SimilarityPanel:
    """One method's pairwise TF-IDF similarity of a problem's correct responses.

    ``similarity`` and ``labels`` are ordered so that clusters are contiguous, largest
    first; ``sample_index`` gives each row's sample index (its position in the problem
    when the file has no indices).
    """

    method: str
    problem: int | str
    samples: int
    correct: int
    similarity: np.ndarray
    labels: np.ndarray
    sample_index: np.ndarray


def similarity_panels(
    sample_set: SampleSet,
    problem: str,
    method: str | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    linkage: str = DEFAULT_LINKAGE,
    token_pattern: str = DEFAULT_TOKEN_PATTERN,
) -> list[SimilarityPanel]:
    """Similarity matrices of one problem, one per method (or the chosen method).

    Raises:
        UsageError: no such problem, or no method has a correct response to it (a
            method without one gets an empty panel, which the figure leaves out with a
            note).
    """
    check_clustering_options(threshold, linkage)
    methods = [sample_set.method(method)] if method else list(sample_set.methods.values())
    panels = []
    for samples in methods:
        found = next((p for p in samples.problems if str(p.problem_id) == str(problem)), None)
        if found is None:
            shown = ", ".join(str(p.problem_id) for p in samples.problems[:10])
            raise UsageError(
                f"no problem '{problem}' in method '{samples.method}'; its first problems "
                f"are {shown}"
            )
        positions = np.flatnonzero(found.correct)
        texts = [found.responses[i] for i in positions.tolist()]
        indices = positions if found.sample_index is None else found.sample_index[positions]
        similarity = tfidf_cosine(texts, token_pattern)  # as eval-ucc clusters them
        labels = cluster_labels(similarity, threshold, linkage)
        order = cluster_order(labels)
        panels.append(
            SimilarityPanel(
                method=samples.method,
                problem=found.problem_id,
                samples=found.n,
                correct=found.c,
                similarity=similarity[np.ix_(order, order)],
                labels=labels[order],
                sample_index=indices[order],
            )
        )
    if panels and not any(panel.correct for panel in panels):
        names = ", ".join(f"'{panel.method}'" for panel in panels)
        raise UsageError(
            f"problem '{problem}' has no correct response in {names}: there is nothing to "
            "compare; choose a problem with correct responses"
        )
    return panels


def curves_from_report(
    document: dict[str, Any], metric: str, path: str | Path
) -> dict[str, dict[int, float]]:
    """{method: {k: value}} for ``metric`` ("pass_at_k" or "ucc_at_k") of an eval report."""
    by_method = document.get("by_method")
    if not isinstance(by_method, dict) or not by_method:
        raise ReportError(path, "not an evaluation report (no 'by_method' section)")
    curves = {}
    for name, block in by_method.items():
        values = (block or {}).get(metric)
        if not values:
            maker = "eval-ucc" if metric == "ucc_at_k" else "eval-passk"
            raise ReportError(
                path, f"method '{name}' has no '{metric}' in this report; make it with {maker}"
            )
        curves[name] = {int(k): float(v) for k, v in values.items() if v is not None}
    return curves


@dataclass(frozen=True)
class MetricCurves:
    """Curves {label: {k: value}} of one metric and the clustering they were made with.

    ``threshold`` and ``linkage`` are those of the UCC@k clusters (None for Pass@k):
    the reports' own when reports were given, so a figure's label always says what
    its numbers are.
    """

    metric: str
    curves: dict[str, dict[int, float]]
    threshold: float | None = None
    linkage: str | None = None


def metric_curves(
    paths: Sequence[str | Path],
    metric: str,
    *,
    fields: SampleFields | None = None,
    ks: Sequence[int] | None = None,
    threshold: float | None = None,
    linkage: str | None = None,
    progress: ProgressCallback | None = None,
) -> MetricCurves:
    """Curves of ``metric`` from eval reports (read as is) and sample files (evaluated).

    A path ending in ``.json`` is an eval report; every other path is a samples file,
    and all sample files are evaluated together. Labels that collide get the file name.

    ``ks``, ``threshold``, ``linkage`` and the names in ``fields`` are None unless the
    user chose them. A report is plotted as stored, so a choice that differs from the
    report's own value is refused rather than silently ignored; sample files given
    beside reports are clustered with the reports' threshold and linkage, so that all
    curves of a figure are comparable.

    Raises:
        ParameterError: a choice that a report input cannot honour (see
            :func:`ratioscope.params.refuse_unlike_report`).
        UsageError: reports made with different clustering parameters.
        ReportError: a report without ``metric``.
    """
    from ratioscope.io.paths import is_report_path
    from ratioscope.io.samples import load_samples
    from ratioscope.report_io import read_json_report

    fields = fields or SampleFields()
    report_paths = [Path(p) for p in paths if is_report_path(p)]
    sample_paths = [Path(p) for p in paths if not is_report_path(p)]
    if not sample_paths:
        _refuse_fields(fields, report_paths)
    if metric == "ucc_at_k":
        check_clustering_options(
            DEFAULT_THRESHOLD if threshold is None else threshold, linkage or DEFAULT_LINKAGE
        )
    sources: list[tuple[str, dict[str, dict[int, float]]]] = []
    stored: dict[str, Any] = {}
    for path in report_paths:
        document = read_json_report(path)
        sources.append((path.name, curves_from_report(document, metric, path)))
        _agree(stored, path, document.get("params") or {}, metric, ks, threshold, linkage)
    clustering: tuple[float, str] | None = None  # set for ucc_at_k only
    if metric == "ucc_at_k":  # the reports' clustering, else the user's, else the default
        threshold = stored["threshold"][1] if "threshold" in stored else threshold
        linkage = stored["linkage"][1] if "linkage" in stored else linkage
        clustering = (
            DEFAULT_THRESHOLD if threshold is None else threshold,
            linkage or DEFAULT_LINKAGE,
        )
        threshold, linkage = clustering
    if sample_paths:
        sample_set = load_samples(sample_paths, fields)
        if clustering is not None:
            result = evaluate_ucc(
                sample_set,
                ks,
                threshold=clustering[0],
                linkage=clustering[1],
                max_pairs=0,
                progress=progress,
            )
        else:
            result = evaluate_passk(sample_set, ks, progress=progress)
        curves = {
            name: {int(k): v for k, v in getattr(block, metric).items()}
            for name, block in result.by_method.items()
        }
        sources.append(("samples", curves))
    return MetricCurves(metric, _label_curves(sources), threshold, linkage)


def _refuse_fields(fields: SampleFields, reports: list[Path]) -> None:
    for attribute in ("problem", "response", "correct", "method", "dataset"):
        if getattr(fields, attribute) is not None:
            raise ParameterError(
                f"fields.{attribute}",
                f"applies only to samples input; the report {reports[0].name} is plotted as stored",
            )


def _agree(
    stored: dict[str, tuple[Path, Any]],
    path: Path,
    params: dict[str, Any],
    metric: str,
    ks: Sequence[int] | None,
    threshold: float | None,
    linkage: str | None,
) -> None:
    """Check a report's parameters against the user's choices and the other reports
    (equal as :func:`ratioscope.params.same_value` says)."""
    from ratioscope.params import refuse_unlike_report, same_value

    chosen: dict[str, Any] = {"k": None if ks is None else sorted({int(k) for k in ks})}
    if metric == "ucc_at_k":
        chosen.update(threshold=threshold, linkage=linkage)
    for name, value in chosen.items():
        refuse_unlike_report({name: value}, params, path, "samples")
        made_with = params.get(name)
        if name == "k" or made_with is None:
            continue  # curves over different k still share the axis
        if name in stored and not same_value(made_with, stored[name][1]):
            first, other = stored[name]
            raise UsageError(
                f"the reports were made with different {name}s ({first.name}: "
                f"{_shown(other)}, {path.name}: {_shown(made_with)}), so their curves are "
                "not comparable"
            )
        stored[name] = (path, made_with)


def _shown(value: Any) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _label_curves(
    sources: list[tuple[str, dict[str, dict[int, float]]]],
) -> dict[str, dict[int, float]]:
    """Merge the curves of all sources; a method name found in several gets its origin."""
    seen: dict[str, int] = {}
    for _, curves in sources:
        for name in curves:
            seen[name] = seen.get(name, 0) + 1
    merged = {}
    for origin, curves in sources:
        for name, curve in curves.items():
            merged[name if seen[name] == 1 else f"{name} ({origin})"] = curve
    return merged
