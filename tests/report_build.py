"""The run report of the bundled 16-step run, built once per test session and shared by
tests/test_run_report.py and tests/test_report_browser.py."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

import ratioscope.render.html.run_report

ROOT = Path(__file__).resolve().parents[1]
STEPS = ROOT / "sample_data" / "verl_steps"
TOKENIZER = ROOT / "sample_data" / "tokenizer.json"


@functools.cache
def sample_report() -> tuple[ratioscope.render.html.run_report.RunReport, Path, int]:
    """(the report with token text, its HTML file, the file's size in bytes)."""
    # the run as a user names it from the repository (the page shows the paths given)
    relative = os.path.relpath(STEPS)
    steps = relative if not relative.startswith("..") else STEPS
    result = ratioscope.render.html.run_report.run_report(steps, tokenizer=TOKENIZER)
    directory = tempfile.mkdtemp(prefix="ratioscope-report-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    out = Path(directory) / "report.html"
    size = result.write_html(out)
    return result, out, size


def kalman_loop(z: list[float], q: float = 1e-6, v: float = 1.0) -> list[float]:
    """KPO's filter written out (P0 = 0, rho0 = 0): the reference for the report's
    Kalman-filtered series."""
    p, rho, out = 0.0, 0.0, []
    for value in z:
        predicted = p + q
        gain = predicted / (predicted + v)
        p = (1 - gain) * predicted
        rho = rho + gain * (value - rho)
        out.append(rho)
    return out
