"""Settings of the fuzz suite's generators (docs/formats.md, "Limits").

The default test run uses the fast profile: a few examples per generator, well under a
minute in all. ``RATIOSCOPE_FUZZ=long python -m pytest -m fuzz tests/fuzz`` runs the
long one (300 examples per generator, over 2,000 cases in all). The settings are given
to each test by :data:`FUZZ` rather than loaded as the global profile, so that the
project's other property tests keep their own.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

#: examples per generator: the fast profile of the default run, or the long one
EXAMPLES = {"fast": 5, "long": 300}[os.environ.get("RATIOSCOPE_FUZZ", "fast")]

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # a case's time is bounded by the harness's time limit instead
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
    database=None,
)


@pytest.fixture(scope="session")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An analyze report of a bundled sample dump (the report JSON of a real run)."""
    from ratioscope.analysis import analyze

    path = tmp_path_factory.mktemp("report") / "run.json"
    root = Path(__file__).resolve().parents[2]
    analyze([root / "sample_data" / "verl" / "step_0008.pt"]).write_json(path)
    return path
