"""Shared pytest fixtures (helpers live in tests/dumps.py, importable as ``dumps``)."""

from __future__ import annotations

import pytest
from dumps import Reference, make_reference


@pytest.fixture
def reference() -> Reference:
    return make_reference()
