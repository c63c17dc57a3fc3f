"""What the CLI sets up once per process, before any command imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from typer.testing import CliRunner

from ratioscope.analysis import threads
from ratioscope.cli import app

_PROBE = """
import json, os, sys
{before}
from ratioscope.analysis.threads import short_thread_waits
set_now = short_thread_waits()
import torch  # OpenMP reads the variable here
print(json.dumps([set_now, os.environ.get("GOMP_SPINCOUNT")]))
"""
_CHOICES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def _probe(before: str = "", **chosen: str) -> list:
    env = {k: v for k, v in os.environ.items() if k not in _CHOICES}
    env.update(chosen)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(before=before)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_short_waits_before_torch_set_the_spin_count():
    assert _probe() == [True, str(threads.SPIN_COUNT)]


def test_short_waits_keep_the_users_choice():
    assert _probe(GOMP_SPINCOUNT="5") == [False, "5"]
    assert _probe(OMP_WAIT_POLICY="ACTIVE") == [False, None]


def test_short_waits_after_torch_change_nothing():
    # too late for OpenMP: setting it then would only mislead a child process's reader
    assert _probe(before="import torch") == [False, None]


def test_the_cli_sets_it_up_before_the_command(monkeypatch, tmp_path):
    calls: list[bool] = []
    monkeypatch.setattr(threads, "short_thread_waits", lambda: calls.append(True) or False)
    result = CliRunner().invoke(app, ["analyze", str(tmp_path / "absent.pt")])
    assert result.exit_code == 2  # the command ran (and refused the missing file)
    assert calls == [True]
