"""ratioscope: diagnostics for importance ratios, reweighting schemes and sample diversity
in reinforcement-learning runs of language models.

The public API is re-exported here lazily, so that importing the
package (and running ``ratioscope --help``) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ratioscope._version import __version__

_LAZY = {
    "load": ("ratioscope.io.loaders", "load"),
    "analyze": ("ratioscope.analysis", "analyze"),
    "merge_reports": ("ratioscope.analysis", "merge_reports"),
    "sweep": ("ratioscope.sweep", "sweep"),
    "timeline": ("ratioscope.timeline", "timeline"),
    "Timeline": ("ratioscope.timeline", "Timeline"),
    "compare": ("ratioscope.compare", "compare"),
    "Comparison": ("ratioscope.compare", "Comparison"),
    "TokenBatch": ("ratioscope.batch", "TokenBatch"),
    "Report": ("ratioscope.report", "Report"),
    "AnalysisParams": ("ratioscope.params", "AnalysisParams"),
    "load_samples": ("ratioscope.io.samples", "load_samples"),
    "evaluate_passk": ("ratioscope.evaluation", "evaluate_passk"),
    "evaluate_ucc": ("ratioscope.evaluation", "evaluate_ucc"),
}

if TYPE_CHECKING:  # pragma: no cover
    from ratioscope.analysis import analyze, merge_reports
    from ratioscope.batch import TokenBatch
    from ratioscope.compare import Comparison, compare
    from ratioscope.evaluation import evaluate_passk, evaluate_ucc
    from ratioscope.io.loaders import load
    from ratioscope.io.samples import load_samples
    from ratioscope.params import AnalysisParams
    from ratioscope.report import Report
    from ratioscope.sweep import sweep
    from ratioscope.timeline import Timeline, timeline


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module_name), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ratioscope' has no attribute {name!r}")


__all__ = [
    "AnalysisParams",
    "Comparison",
    "Report",
    "Timeline",
    "TokenBatch",
    "__version__",
    "analyze",
    "compare",
    "evaluate_passk",
    "evaluate_ucc",
    "load",
    "load_samples",
    "merge_reports",
    "sweep",
    "timeline",
]
