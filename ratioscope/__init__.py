"""ratioscope: diagnostics for importance ratios, reweighting schemes and sample diversity
in reinforcement-learning runs of language models.

The public API is re-exported here lazily, so that importing the package (and running
``ratioscope --help``) does not import torch; ``dir(ratioscope)`` lists every name, so tab
completion finds them. ``ratioscope.objectives``, ``timeline``, ``compare``, ``sweep`` and
``verdict`` are modules that are also callable as their function of the same name
(``ratioscope.verdict(report)``, ``ratioscope.verdict.Thresholds``), whatever was imported
first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratioscope._version import __version__

#: name -> (module, attribute); attribute None: the module itself
_LAZY: dict[str, tuple[str, str | None]] = {
    # reading and analysing dumps
    "load": ("ratioscope.io.loaders", "load"),
    "analyze": ("ratioscope.analysis", "analyze"),
    "merge_reports": ("ratioscope.analysis", "merge_reports"),
    "TokenBatch": ("ratioscope.batch", "TokenBatch"),
    "Report": ("ratioscope.report", "Report"),
    "AnalysisParams": ("ratioscope.params", "AnalysisParams"),
    # modules callable as their function
    "sweep": ("ratioscope.sweep", None),
    "timeline": ("ratioscope.timeline", None),
    "compare": ("ratioscope.compare", None),
    "objectives": ("ratioscope.objectives", None),
    "verdict": ("ratioscope.verdict", None),
    "SweepReport": ("ratioscope.sweep", "SweepReport"),
    "Timeline": ("ratioscope.timeline", "Timeline"),
    "Comparison": ("ratioscope.compare", "Comparison"),
    "ObjectivesReport": ("ratioscope.objectives", "ObjectivesReport"),
    "Verdict": ("ratioscope.verdict", "Verdict"),
    "Finding": ("ratioscope.verdict", "Finding"),
    "Note": ("ratioscope.verdict", "Note"),
    "Thresholds": ("ratioscope.verdict", "Thresholds"),
    "load_thresholds": ("ratioscope.verdict", "load_thresholds"),
    # the HTML run report (ratioscope report)
    "run_report": ("ratioscope.run_report", None),
    "RunReport": ("ratioscope.run_report", "RunReport"),
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
    # the type checker sees the callable modules as their functions
    from ratioscope import capture, evaluation, functional
    from ratioscope.analysis import analyze, merge_reports
    from ratioscope.batch import TokenBatch
    from ratioscope.compare import Comparison, compare
    from ratioscope.evaluation import evaluate_passk, evaluate_ucc
    from ratioscope.io.loaders import load
    from ratioscope.io.samples import load_samples
    from ratioscope.objectives import ObjectivesReport, objectives
    from ratioscope.params import AnalysisParams
    from ratioscope.report import Report
    from ratioscope.run_report import RunReport, run_report
    from ratioscope.sweep import SweepReport, sweep
    from ratioscope.timeline import Timeline, timeline
    from ratioscope.verdict import Finding, Note, Thresholds, Verdict, load_thresholds, verdict


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
