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
        curves[name] = _curve(values, f"by_method.{name}.{metric}", path, metric == "pass_at_k")
    return curves


def _curve(values: Any, where: str, path: str | Path, share: bool) -> dict[int, float]:
    """{k: value} of one stored curve: an object of budgets k (whole numbers from 1) to
    values or null, a share in [0, 1] (Pass@k) or a count >= 0 (UCC@k, clusters);
    anything else is a damaged report, named where."""
    import math

    def damaged(problem: str) -> ReportError:
        return ReportError(path, f"malformed evaluation report: {where}{problem}")

    if not isinstance(values, dict):
        raise damaged(f": expected an object of k -> value, found {type(values).__name__}")
    curve = {}
    for key, value in values.items():
        if not (str(key).isdigit() and 1 <= int(key) <= 2**31):
            raise damaged(f": key {key!r} is not a budget k (a whole number from 1)")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise damaged(f".{key}: expected a number, found {type(value).__name__}")
        if not (math.isfinite(value) and 0 <= value <= (1 if share else math.inf)):
            kind = "a share in [0, 1]" if share else "a count of clusters (>= 0)"
            raise damaged(f".{key}: {value} is not {kind}")
        curve[int(key)] = float(value)
    return curve


@dataclass(frozen=True)
class MetricCurves:
    """Curves {label: {k: value}} of one metric and the clustering they were made with.

    ``threshold`` and ``linkage`` are those of the UCC@k clusters (None for Pass@k):
    the reports' own when reports were given, so a figure's label always says what
    its numbers are. ``notes`` are lines for the figure saying what was measured on
    what: the problems, the samples per problem, and where k was cut.
    """

    metric: str
    curves: dict[str, dict[int, float]]
    threshold: float | None = None
    linkage: str | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Measured:
    """What one curve was measured on: its problems (ids when known) and n per problem."""

    label: str
    origin: str  # the report's file name, or "samples"
    problems: int
    ids: frozenset[str] | None
    n_min: int
    n_max: int
    from_report: bool


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

    Curves are compared on the same problems: methods of sample files that answer
    different problems are cut to the problems they share (a note says how many each
    lost); a report cannot be cut, so a report whose problems differ from the other
    curves' is refused. Where the methods have different numbers of samples per
    problem, k stops at the smallest, and a note says so.

    Raises:
        ParameterError: a choice that a report input cannot honour (see
            :func:`ratioscope.data.params.refuse_unlike_report`).
        UsageError: reports made with different clustering parameters; curves measured
            on different problems that cannot be cut to the same ones.
        ReportError: a report without ``metric``.
    """
    from ratioscope.io.documents import read_json_report
    from ratioscope.io.paths import is_report_path
    from ratioscope.io.samples import load_samples

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
    measured: list[_Measured] = []
    stored: dict[str, Any] = {}
    for path in report_paths:
        document = read_json_report(path)
        sources.append((path.name, curves_from_report(document, metric, path)))
        measured += _report_measures(document, path)
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
    notes: list[str] = []
    if sample_paths:
        sample_set, cut_note = common_problems(load_samples(sample_paths, fields))
        notes += [cut_note] if cut_note else []
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
        measured += _sample_measures(sample_set)
    measured = _label_measures(measured)
    _refuse_different_problems(measured)
    labelled = _label_curves(sources)
    notes += _measure_notes(measured, labelled, cut=bool(notes))
    return MetricCurves(metric, labelled, threshold, linkage, tuple(notes))


def common_problems(sample_set: SampleSet) -> tuple[SampleSet, str | None]:
    """The sample set cut to the problems every method answers, and a note if it was cut.

    Problems are matched by id (as text). The note names the count kept and, per
    method, how many were left out, e.g. ``on the 4 problems all methods share
    (left out: a: 2 of 6)``.

    Raises:
        UsageError: the methods share no problem.
    """
    from dataclasses import replace

    methods = list(sample_set.methods.values())
    ids = [{str(p.problem_id) for p in m.problems} for m in methods]
    shared = set.intersection(*ids) if ids else set()
    if all(len(i) == len(shared) for i in ids):
        return sample_set, None
    if not shared:
        sizes = ", ".join(f"{m.method}: {len(m.problems)}" for m in methods)
        raise UsageError(
            f"the methods answer different problems and share none (problems {sizes}), so "
            "their curves cannot be compared"
        )
    kept = {
        m.method: replace(m, problems=tuple(p for p in m.problems if str(p.problem_id) in shared))
        for m in methods
    }
    lost = ", ".join(
        f"{m.method}: {len(m.problems) - len(kept[m.method].problems)} of {len(m.problems)}"
        for m in methods
        if len(kept[m.method].problems) < len(m.problems)
    )
    note = f"on the {len(shared)} problems all methods share (left out: {lost})"
    return replace(sample_set, methods=kept), note


def _report_measures(document: dict[str, Any], path: Path) -> list[_Measured]:
    """Problems and samples per problem of each method of a report."""
    found = []
    for name, block in (document.get("by_method") or {}).items():
        per_problem = ((block or {}).get("clusters") or {}).get("per_problem")
        spread = block.get("samples_per_problem") or {}
        found.append(
            _Measured(
                label=name,
                origin=path.name,
                problems=int(block.get("problems") or 0),
                ids=None
                if per_problem is None
                else frozenset(str(p["problem"]) for p in per_problem),
                n_min=int(spread.get("min") or 0),
                n_max=int(spread.get("max") or 0),
                from_report=True,
            )
        )
    return found


def _label_measures(measured: list[_Measured]) -> list[_Measured]:
    """Labels as the curves get them (:func:`_label_curves`): the origin only on clashes."""
    from dataclasses import replace

    seen: dict[str, int] = {}
    for m in measured:
        seen[m.label] = seen.get(m.label, 0) + 1
    return [
        m if seen[m.label] == 1 else replace(m, label=f"{m.label} ({m.origin})") for m in measured
    ]


def _sample_measures(sample_set: SampleSet) -> list[_Measured]:
    found = []
    for method in sample_set.methods.values():
        counts = [p.n for p in method.problems]
        found.append(
            _Measured(
                label=method.method,
                origin="samples",
                problems=len(method.problems),
                ids=frozenset(str(p.problem_id) for p in method.problems),
                n_min=min(counts),
                n_max=max(counts),
                from_report=False,
            )
        )
    return found


def _refuse_different_problems(measured: list[_Measured]) -> None:
    """Refuse curves on different problems where one of them is a report (not cut)."""
    if not any(m.from_report for m in measured):
        return  # sample methods were cut to their common problems already
    first = measured[0]
    for other in measured[1:]:
        known = first.ids is not None and other.ids is not None
        differ = first.ids != other.ids if known else first.problems != other.problems
        if differ:
            what = "as many, but other" if first.problems == other.problems else str(other.problems)
            raise UsageError(
                f"{first.label} ({first.origin}) was measured on {first.problems} problems and "
                f"{other.label} ({other.origin}) on {what} problems; a report is plotted as "
                "stored and cannot be cut to the problems they share, so give the sample files"
            )


def _measure_notes(
    measured: list[_Measured], curves: dict[str, dict[int, float]], cut: bool
) -> list[str]:
    """The problems and samples per problem behind the curves, and where k stops."""
    notes = []
    if not cut:
        counts = sorted({m.problems for m in measured})
        notes.append(
            f"{counts[0]} problems per method"
            if len(counts) == 1
            else "problems: " + ", ".join(f"{m.label} {m.problems}" for m in measured)
        )
    spreads = {(m.n_min, m.n_max) for m in measured}
    if len(spreads) == 1:
        low, high = next(iter(spreads))
        each = f"{low} samples each" if low == high else f"{low}-{high} samples each"
        notes[-1:] = [f"{notes[-1]}; {each}" if notes else each]
        return notes
    by_n: dict[int, list[str]] = {}
    for m in measured:
        by_n.setdefault(m.n_min, []).append(m.label)
    listing = "; ".join(f"{', '.join(labels)}: {n}" for n, labels in sorted(by_n.items()))
    ends = {max(curve) for curve in curves.values()}
    if len(ends) > 1:
        stop = "each curve stops at the largest k its input allows or its report was made with"
    elif min(ends) == min(by_n):
        stop = f"k stops at {min(ends)}, the fewest samples per problem"
    else:
        stop = f"k stops at {min(ends)}"
    notes.append(f"{stop} (samples per problem: {listing})")
    return notes


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
    (equal as :func:`ratioscope.data.params.same_value` says)."""
    from ratioscope.data.params import refuse_unlike_report, same_value

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
