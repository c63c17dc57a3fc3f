"""Choosing the device analyses run on (``--device auto|cpu|cuda``)."""

from __future__ import annotations

import torch

from ratioscope import defaults
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


def chunk_elements_for(device: torch.device, asked: int | None = None) -> int:
    """Elements ([rows x tokens]) per chunk on ``device``: ``asked`` when given; on the
    CPU :data:`ratioscope.defaults.CHUNK_ELEMENTS`; on a GPU the largest power of two
    from that up to :data:`~ratioscope.defaults.DEVICE_CHUNK_ELEMENTS_MAX` whose peak
    (:data:`~ratioscope.defaults.DEVICE_BYTES_PER_ELEMENT` an element) fits in
    :data:`~ratioscope.defaults.DEVICE_MEMORY_SHARE` of its free memory now. A GPU pays
    a launch per tensor operation and a chunk is a fixed count of them, so the larger the
    chunk the fewer launches a token (4 chunks of 2^22 elements: 5,700 launches; one of
    2^24: 1,449; the bytes they move stay, docs/performance.md "The GPU check")."""
    if asked is not None:
        return asked
    chunk = defaults.CHUNK_ELEMENTS
    if device.type != "cuda":
        return chunk
    free, _ = torch.cuda.mem_get_info(device)
    budget = defaults.DEVICE_MEMORY_SHARE * free
    while (
        chunk < defaults.DEVICE_CHUNK_ELEMENTS_MAX
        and 2 * chunk * defaults.DEVICE_BYTES_PER_ELEMENT <= budget
    ):
        chunk *= 2
    return chunk
