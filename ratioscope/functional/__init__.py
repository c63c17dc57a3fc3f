"""Pure tensor/array functions: no I/O, no printing, device-agnostic.

The public names are re-exported here lazily, so that importing one
submodule (say the numpy-only ``passk``) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "kalman_gains": "kalman",
    "kalman_filter": "kalman",
    "token_states": "token_stats",
    "low_frequency_ratio": "token_stats",
    "covariance_weights": "covariance",
    "quatro_duals": "quatro",
    "pass_at_k": "passk",
    "ucc_at_k": "passk",
}

if TYPE_CHECKING:  # pragma: no cover
    from ratioscope.functional.covariance import covariance_weights
    from ratioscope.functional.kalman import kalman_filter, kalman_gains
    from ratioscope.functional.passk import pass_at_k, ucc_at_k
    from ratioscope.functional.quatro import quatro_duals
    from ratioscope.functional.token_stats import low_frequency_ratio, token_states


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module = importlib.import_module(f"ratioscope.functional.{_LAZY[name]}")
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ratioscope.functional' has no attribute {name!r}")


__all__ = [
    "covariance_weights",
    "kalman_filter",
    "kalman_gains",
    "low_frequency_ratio",
    "pass_at_k",
    "quatro_duals",
    "token_states",
    "ucc_at_k",
]
