"""ratioscope: diagnostics for importance ratios, reweighting schemes and sample diversity
in reinforcement-learning runs of language models.

The public API (DESIGN section 6) is re-exported here lazily, so that importing the
package (and running ``ratioscope --help``) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "load": ("ratioscope.io.loaders", "load"),
    "analyze": ("ratioscope.analysis", "analyze"),
    "TokenBatch": ("ratioscope.batch", "TokenBatch"),
    "Report": ("ratioscope.report", "Report"),
}

if TYPE_CHECKING:  # pragma: no cover
    from ratioscope.analysis import analyze
    from ratioscope.batch import TokenBatch
    from ratioscope.io.loaders import load
    from ratioscope.report import Report


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attribute = _LAZY[name]
        value = getattr(importlib.import_module(module_name), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ratioscope' has no attribute {name!r}")


__all__ = ["Report", "TokenBatch", "__version__", "analyze", "load"]
