"""ratioscope: diagnostics for importance ratios, reweighting schemes and sample diversity
in reinforcement-learning runs of language models.

The public API is re-exported here lazily, so that importing the package (and running
``ratioscope --help``) does not import torch; ``dir(ratioscope)`` lists every name, so tab
completion finds them. ``ratioscope.objectives``, ``timeline``, ``compare``, ``sweep`` and
``verdict`` are modules that are also callable as their function of the same name
(``ratioscope.verdict(report)``, ``ratioscope.judgement.verdict.Thresholds``), whatever was imported
first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratioscope._version import __version__

#: name -> (module, attribute); attribute None: the module itself
_LAZY: dict[str, tuple[str, str | None]] = {
    # reading and analysing dumps
    "load": ("ratioscope.io.loaders", "load"),
    "analyze": ("ratioscope.analysis.pipeline", "analyze"),
    "merge_reports": ("ratioscope.analysis.pipeline", "merge_reports"),
    "TokenBatch": ("ratioscope.data.batch", "TokenBatch"),
    "Report": ("ratioscope.report.model", "Report"),
    "AnalysisParams": ("ratioscope.data.params", "AnalysisParams"),
    "sweep": ("ratioscope.analysis.sweep", "sweep"),
    "SweepReport": ("ratioscope.analysis.sweep", "SweepReport"),
    # run-level views
    "timeline": ("ratioscope.views.timeline", "timeline"),
    "Timeline": ("ratioscope.views.timeline", "Timeline"),
    "compare": ("ratioscope.views.compare", "compare"),
    "Comparison": ("ratioscope.views.compare", "Comparison"),
    # the objective family side by side
    "objectives": ("ratioscope.objective_family.side_by_side", "objectives"),
    "ObjectivesReport": ("ratioscope.objective_family.side_by_side", "ObjectivesReport"),
    # judgement
    "verdict": ("ratioscope.judgement.verdict", "verdict"),
    "Verdict": ("ratioscope.judgement.verdict", "Verdict"),
    "Finding": ("ratioscope.judgement.verdict", "Finding"),
    "Note": ("ratioscope.judgement.verdict", "Note"),
    "Thresholds": ("ratioscope.judgement.verdict", "Thresholds"),
    "load_thresholds": ("ratioscope.judgement.verdict", "load_thresholds"),
    # the HTML run report (ratioscope report)
    "run_report": ("ratioscope.render.html.run_report", "run_report"),
    "RunReport": ("ratioscope.render.html.run_report", "RunReport"),
    # samples: Pass@k and UCC@k
    "load_samples": ("ratioscope.io.samples", "load_samples"),
    "evaluate_passk": ("ratioscope.evaluation", "evaluate_passk"),
    "evaluate_ucc": ("ratioscope.evaluation", "evaluate_ucc"),
    # subpackages
    "functional": ("ratioscope.functional", None),
    "capture": ("ratioscope.capture", None),
    "evaluation": ("ratioscope.evaluation", None),
}

if TYPE_CHECKING:  # pragma: no cover
    from ratioscope import capture, evaluation, functional
    from ratioscope.analysis.pipeline import analyze, merge_reports
    from ratioscope.analysis.sweep import SweepReport, sweep
    from ratioscope.data.batch import TokenBatch
    from ratioscope.data.params import AnalysisParams
    from ratioscope.evaluation import evaluate_passk, evaluate_ucc
    from ratioscope.io.loaders import load
    from ratioscope.io.samples import load_samples
    from ratioscope.judgement.verdict import (
        Finding,
        Note,
        Thresholds,
        Verdict,
        load_thresholds,
        verdict,
    )
    from ratioscope.objective_family.side_by_side import ObjectivesReport, objectives
    from ratioscope.render.html.run_report import RunReport, run_report
    from ratioscope.report.model import Report
    from ratioscope.views.compare import Comparison, compare
    from ratioscope.views.timeline import Timeline, timeline


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attribute = _LAZY[name]
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ratioscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AnalysisParams",
    "Comparison",
    "Finding",
    "Note",
    "ObjectivesReport",
    "Report",
    "RunReport",
    "SweepReport",
    "Thresholds",
    "Timeline",
    "TokenBatch",
    "Verdict",
    "__version__",
    "analyze",
    "capture",
    "compare",
    "evaluate_passk",
    "evaluate_ucc",
    "evaluation",
    "functional",
    "load",
    "load_samples",
    "load_thresholds",
    "merge_reports",
    "objectives",
    "run_report",
    "sweep",
    "timeline",
    "verdict",
]
