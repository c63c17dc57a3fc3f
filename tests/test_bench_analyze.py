"""benchmarks/bench_analyze.py runs end to end, alone and against a baseline tree: its
child drives ``analyze`` through the library's current interface, so a change to that
interface shows here, not first in a measurement session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_analyze.py"

pytestmark = pytest.mark.slow


def _run(*extra: str, directory: Path) -> str:
    command = [
        sys.executable, str(SCRIPT), "--dir", str(directory), "-B", "24", "-T", "300",
        "--repeat", "1", "--threads", "1", "--peer-rows", "4", *extra,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_benchmark_times_every_section_against_its_floor(tmp_path):
    out = _run(directory=tmp_path)
    rows = [line.split()[1] for line in out.splitlines() if line.startswith("analyze ")]
    for section in ("none", "all", "ratios", "covariance", "vitals"):
        assert section in rows, section
    assert "analyze, all sections:" in out and "M tokens/s" in out


def test_a_baseline_tree_is_timed_beside_this_one(tmp_path):
    # this tree as its own baseline: every section has a row with both times and ratios
    out = _run("--baseline", str(ROOT), "--rounds", "1", directory=tmp_path)
    assert f"against {ROOT}" in out
    rows = {
        line.split()[1]: line.split()[2:]
        for line in out.splitlines()
        if line.startswith("analyze ")
    }
    for section in ("all", "ratios", "covariance"):
        wall, base, ratio = (float(value) for value in rows[section][:3])
        assert wall > 0 and base > 0
        assert ratio == pytest.approx(wall / base, rel=0.05, abs=0.02)  # printed rounded
