"""benchmarks/bench_covariance_passes.py runs end to end: its child drives the covariance
passes through the library's current interface, so a change to that interface shows
here, not first in a measurement session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ratioscope.functional import _kernels

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not _kernels.available(), reason="numba is not available"),
]


def test_the_benchmark_times_every_pass_and_compares_the_trees_bits(tmp_path):
    command = [
        sys.executable, str(ROOT / "benchmarks" / "bench_covariance_passes.py"),
        "--dir", str(tmp_path), "-B", "48", "-T", "96", "--threads", "1,2",
        "--rounds", "1", "--repeat", "1", "--baseline", str(ROOT),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    rows = [line.split("  ")[0] for line in out.splitlines()]
    for label in ("0 scope sums", "1 c, c^2", "2 spread", "3 sum w", "4 statistics", "all five"):
        assert rows.count(label) == 2, label  # a row per thread count
    # the same tree twice: the totals must agree bit for bit
    assert out.count("totals of every run and tree: the same bits") == 2
    assert "DIFFERENT" not in out
