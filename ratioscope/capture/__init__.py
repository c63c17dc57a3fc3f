"""Capture per-token data inside a training loop, for ``ratioscope analyze`` and ``merge``.

Frameworks that keep no per-token dumps (OpenRLHF, verl's actor, TRL) call
:meth:`CaptureWriter.write` once per optimisation step or micro-batch; see
``docs/capture.md`` for the file layout, sampling and the in-process report mode.

Integrations, imported on their own so that this package needs none of the frameworks:
``ratioscope.capture.trl`` (a ``GRPOTrainer`` subclass, ``with_capture``),
``ratioscope.capture.verl`` (``capture_verl_micro_batch``) and
``ratioscope.capture.openrlhf`` (``capture_openrlhf_experience``).
"""

from __future__ import annotations

from ratioscope.capture.writer import (
    FORMAT_VERSION,
    METADATA_PREFIX,
    MODES,
    CaptureSummary,
    CaptureWriter,
    part_path,
    read_capture_metadata,
    report_path,
    resolve_rank,
)

__all__ = [
    "FORMAT_VERSION",
    "METADATA_PREFIX",
    "MODES",
    "CaptureSummary",
    "CaptureWriter",
    "part_path",
    "read_capture_metadata",
    "report_path",
    "resolve_rank",
]
