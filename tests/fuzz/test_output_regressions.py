"""The output cases of the hostile-input report: a file size limit, a closed stdout,
SIGTERM while writing, and the leftovers of a killed run."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from fuzz import files
from fuzz.harness import error_line, promise

pytestmark = pytest.mark.fuzz

ROOT = Path(__file__).resolve().parents[2]
DUMP = "d.npz"  # a small dump each test writes (tests/fuzz/files.py)
SAMPLES = ROOT / "sample_data" / "samples.jsonl"


@pytest.mark.parametrize(
    ("args", "out"),
    [
        (["analyze", str(DUMP), "-q", "--json", "o.json"], "o.json"),
        (["analyze", str(DUMP), "-q", "--parquet", "o.parquet"], "o.parquet"),
        (["merge", "run.json", "--out", "o.json"], "o.json"),
        (["eval-ucc", str(SAMPLES), "--json", "o.json", "-q"], "o.json"),
        (["eval-passk", str(SAMPLES), "--json", "o.json", "-q"], "o.json"),
    ],
    ids=["analyze-json", "analyze-parquet", "merge", "eval-ucc", "eval-passk"],
)
def test_file_size_limit(tmp_path: Path, report: Path, args: list[str], out: str) -> None:
    (tmp_path / "run.json").write_bytes(report.read_bytes())
    files.write_npz(tmp_path / DUMP, files.valid_npz_members(8, 16))
    line = error_line(promise(args, tmp_path, file_limit=2048))
    assert "file size limit" in line and not (tmp_path / out).exists()


@pytest.mark.parametrize(
    "args",
    [["info", str(DUMP)], ["eval-passk", "--help"], ["analyze", str(DUMP), "--json", "o.json"]],
    ids=["info", "help", "analyze-json"],
)
def test_closed_stdout(tmp_path: Path, args: list[str]) -> None:
    files.write_npz(tmp_path / DUMP, files.valid_npz_members(8, 16))
    written = ["o.json"] if "o.json" in args else []
    outcome = promise(args, tmp_path, stdout_closed=True, codes=[0], written=written)
    assert "error" not in outcome.stderr and "Broken" not in outcome.stderr
    if written:
        assert json.loads((tmp_path / "o.json").read_text())["schema_version"]


def test_signal_removes_pending_files(tmp_path: Path) -> None:
    """The handler's cleanup: what is being written goes (the process then ends)."""
    from ratioscope.io.atomic import PENDING, atomic_path, remove_pending

    with atomic_path(tmp_path / "o.json") as tmp:
        tmp.write_text("half")
        folder = tmp_path / "parts"
        folder.mkdir()
        (folder / "part-0.parquet").write_text("x")
        PENDING.add(folder)
        remove_pending()
        assert os.listdir(tmp_path) == []
        tmp.write_text("whole")  # the block ends normally: the rename still works
    assert os.listdir(tmp_path) == ["o.json"]


def test_leftovers_of_a_killed_run_removed(tmp_path: Path, report: Path) -> None:
    (tmp_path / "run.json").write_bytes(report.read_bytes())
    dead = tmp_path / ".o.json.2147483000-x1.tmp.json"  # no such process
    old = tmp_path / ".o.json.abcd1234.tmp.json"  # an older version's name
    alive = tmp_path / f".o.json.{os.getpid()}-x2.tmp.json"  # a run still writing
    for path in (dead, old, alive):
        path.write_text("half")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    promise(["merge", "run.json", "--out", "o.json"], tmp_path, codes=[0], written=["o.json"])
    assert not dead.exists() and not old.exists() and alive.exists()


def test_sigterm_exit_line(tmp_path: Path) -> None:
    """A command sent SIGTERM says so in one line and exits 143, leaving no file."""
    import subprocess
    import sys

    dump = ROOT / "sample_data" / "verl" / "step_0008.pt"  # long enough to be interrupted
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, signal, time; from ratioscope.cli import app; "
            "signal.setitimer(signal.ITIMER_REAL, 0.8); "
            "signal.signal(signal.SIGALRM, lambda *a: os.kill(os.getpid(), signal.SIGTERM)); "
            f"app(['analyze', {str(dump)!r}, '-q', '--json', 'o.json'])",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, stderr = process.communicate(timeout=60)
    if process.returncode == 0:  # finished before the signal: nothing to check
        return
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.strip().splitlines()[-1].startswith("ratioscope: error: terminated")
    assert os.listdir(tmp_path) == []
