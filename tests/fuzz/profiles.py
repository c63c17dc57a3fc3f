"""Settings of the fuzz suite's generators (docs/formats.md, "Limits").

The default test run uses the fast profile: a few examples per generator, well under a
minute in all. ``RATIOSCOPE_FUZZ=long python -m pytest -m fuzz tests/fuzz`` runs the
long one (200 examples per generator, 2,000 generated cases in all; a number instead of
``long`` sets the examples per generator). The settings are given
to each test by :data:`FUZZ` rather than loaded as the global profile, so that the
project's other property tests keep their own.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings

#: examples per generator: the fast profile of the default run, or the long one
_PROFILE = os.environ.get("RATIOSCOPE_FUZZ", "fast")
EXAMPLES = int(_PROFILE) if _PROFILE.isdigit() else {"fast": 3, "long": 200}[_PROFILE]

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,  # a case's time is bounded by the harness's time limit instead
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
    database=None,
    # the default run is a gate: the same cases every time, so that it passes or fails
    # for a change, not for a draw; the long profile explores with fresh draws
    derandomize=_PROFILE == "fast",
)

#: whether the long profile runs (then every combination of a matrix of cases runs)
LONG = EXAMPLES >= 50


def matrix(
    first: list[Any], second: list[Any], first_ids: list[str], second_ids: list[str]
) -> list[Any]:
    """Cases that pair each of ``first`` with each of ``second`` in the long profile, and
    in the default run with one of ``second`` in turn (every value of both is still
    tried once, in fewer runs)."""
    import pytest

    if LONG:
        pairs = [(i, j) for i in range(len(first)) for j in range(len(second))]
    else:
        count = max(len(first), len(second))
        pairs = [(k % len(first), k % len(second)) for k in range(count)]
    return [
        pytest.param(first[i], second[j], id=f"{first_ids[i]}-{second_ids[j]}") for i, j in pairs
    ]
