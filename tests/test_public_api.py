"""The public names of the Python API exist and are the functions they name."""

from __future__ import annotations

import subprocess
import sys

import ratioscope
import ratioscope.functional as F


def test_design_section_6_names():
    for name in ("load", "analyze", "TokenBatch", "Report"):
        assert hasattr(ratioscope, name)
    from ratioscope.functional import kalman, passk, token_stats

    assert F.kalman_filter is kalman.kalman_filter
    assert F.kalman_gains is kalman.kalman_gains
    assert F.token_states is token_stats.token_states
    assert F.low_frequency_ratio is token_stats.low_frequency_ratio
    assert F.pass_at_k is passk.pass_at_k and F.ucc_at_k is passk.ucc_at_k
    assert callable(F.covariance_weights) and callable(F.quatro_duals)


def test_numpy_only_submodules_do_not_import_torch():
    code = "import sys, ratioscope.functional.passk; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_all_lists_match_the_lazy_tables():
    assert set(ratioscope.__all__) == {"__version__", *ratioscope._LAZY}
    assert set(F.__all__) == set(F._LAZY)
