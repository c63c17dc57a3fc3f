"""Comparing report documents (nested dicts and lists of JSON values) in tests."""

from __future__ import annotations

import math
from typing import Any


def assert_documents_close(
    got: Any, want: Any, rel: float, abs_tol: float, where: str = "document"
) -> None:
    """Same keys, lengths, strings and integers; floats within ``rel`` / ``abs_tol``
    (NaN only where ``want`` is NaN). ``where`` names the first differing place."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            assert_documents_close(got[key], want[key], rel, abs_tol, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for index, (mine, theirs) in enumerate(zip(got, want, strict=True)):
            assert_documents_close(mine, theirs, rel, abs_tol, f"{where}[{index}]")
    elif isinstance(want, float) and isinstance(got, float):
        if math.isnan(want):
            assert math.isnan(got), (where, got, want)
        else:
            assert math.isclose(got, want, rel_tol=rel, abs_tol=abs_tol), (where, got, want)
    else:
        assert got == want, (where, got, want)
