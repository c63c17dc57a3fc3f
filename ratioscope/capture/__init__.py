"""Capture per-token data inside a training loop, for ``ratioscope analyze`` and ``merge``.

Frameworks that keep no per-token dumps (OpenRLHF, verl's actor, TRL) call
:meth:`CaptureWriter.write` once per optimisation step or micro-batch; see
``docs/capture.md`` for the file layout, sampling and the in-process report mode.
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
