"""The whole report through the tensor code alone equals the report with the compiled
loops, on the CPU.

The tensor code (torch) is what runs on a GPU (``--device cuda``), without numba, and
with ``RATIOSCOPE_DISABLE_NUMBA=1``; each compiled loop has a test against its torch
function. Here every section of a real dump goes both ways end to end: the same
counts, strings and integers, floats to rounding (sums taken in another order). The
Kalman row is the exception in its floats: the filter is stored in the input's
precision (float32 here), and the compiled recurrence and the torch scan agree to its
rounding (tests/test_compiled_kernels.py), so what is computed from it agrees to 1e-6.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from documents import assert_documents_close

import ratioscope
from ratioscope.functional import _kernels

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data"

pytestmark = pytest.mark.skipif(not _kernels.available(), reason="compiled kernels disabled")


def _document(path: Path, *, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    with monkeypatch.context() as patch:
        if not compiled:
            patch.setenv(_kernels.DISABLE_ENV, "1")
        _kernels.available.cache_clear()
        try:
            assert _kernels.available() is compiled
            report = ratioscope.analyze(path, chunk_elements=4096, per_sequence=True)
        finally:
            _kernels.available.cache_clear()
    document = report.to_dict()
    document.pop("tool")
    document["sequences"] = report.sequences.frame().to_dict(as_series=False)
    return document


def _kalman_parts(document: dict) -> dict:
    """Take the parts computed from the Kalman row out of ``document``."""
    parts = {
        "row": document["ratios"].pop("kalman"),
        "state": document["state"]["ratios"]["variants"].pop("kalman"),
    }
    parts["columns"] = {
        name: document["sequences"].pop(name)
        for name in list(document["sequences"])
        if name.startswith("kalman")
    }
    return parts


@pytest.mark.parametrize("run", ["verl", "trl", "prime_rl"])
def test_report_of_the_tensor_code_equals_the_compiled_one(run, monkeypatch):
    compiled = _document(SAMPLE / run, compiled=True, monkeypatch=monkeypatch)
    tensors = _document(SAMPLE / run, compiled=False, monkeypatch=monkeypatch)
    assert compiled["covariance"] and compiled["tepo"] and compiled["mismatch"] is not None
    assert_documents_close(
        _kalman_parts(tensors), _kalman_parts(compiled), rel=1e-6, abs_tol=1e-9, where=run
    )
    assert_documents_close(tensors, compiled, rel=1e-9, abs_tol=1e-12, where=run)
