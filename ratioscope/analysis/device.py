"""Choosing the device analyses run on (``--device auto|cpu|cuda``)."""

from __future__ import annotations

import torch

from ratioscope.errors import ParameterError

DEVICE_CHOICES = ("auto", "cpu", "cuda")


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when available; asking for CUDA without one is an error.

    Raises:
        ParameterError: ``device`` (the parameter of ``analyze`` and ``sweep`` that
            ``name`` comes from) is not a choice, or names CUDA on a machine without it.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or name.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ParameterError("device", "cuda was requested but no CUDA device is available")
        return torch.device(name)
    raise ParameterError("device", f"must be one of {', '.join(DEVICE_CHOICES)}, got '{name}'")
