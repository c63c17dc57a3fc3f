"""Fixtures of the fuzz suite (its Hypothesis settings are in tests/fuzz/profiles.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An analyze report of a bundled sample dump (the report JSON of a real run)."""
    from ratioscope.analysis.pipeline import analyze

    path = tmp_path_factory.mktemp("report") / "run.json"
    root = Path(__file__).resolve().parents[2]
    analyze([root / "sample_data" / "verl" / "step_0008.pt"]).write_json(path)
    return path
