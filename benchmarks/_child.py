"""Run ``python -m ratioscope ARGS`` in a fresh child process and measure it.

The child is ``python -c`` with a few lines that run the ``ratioscope`` module exactly as
``python -m ratioscope`` does and write at exit its peak resident memory (VmHWM) and
glibc's heap (``mallinfo2``). Both are read in the child: ``ru_maxrss`` from wait4 keeps
the forking parent's high-water mark across exec, which hides any child smaller than the
(torch-importing) benchmark. The CLI never gives its heap back below the allocator's trim
threshold (``ratioscope/analysis/allocator.py``), so the heap at exit is about the largest it has
been, and a heap much larger than its bytes in use is memory freed into holes that later
allocations could not reuse, not live data. ``--imports-only`` as the sole argument runs
only the imports (the fixed cost every command pays).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

_CHILD = """
import atexit, ctypes, json, os, runpy, sys

def _at_exit():
    with open("/proc/self/status") as status:
        kib = next(line.split()[1] for line in status if line.startswith("VmHWM"))
    heap = in_use = -1
    try:
        names = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                 "uordblks", "fordblks", "keepcost")
        class Info(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in names]
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
        mallinfo2.restype = Info
        info = mallinfo2()
        heap, in_use = info.arena, info.uordblks
    except (OSError, AttributeError):
        pass
    with open(os.environ["RATIOSCOPE_BENCH_PEAK"], "w") as out:
        json.dump({"peak": int(kib) * 1024, "heap": heap, "in_use": in_use}, out)

atexit.register(_at_exit)
if sys.argv[1:] == ["--imports-only"]:
    import ratioscope.analysis.pipeline
else:
    runpy.run_module("ratioscope", run_name="__main__", alter_sys=True)
"""


@dataclass
class Measured:
    """One child process: wall seconds, peak resident memory (VmHWM) and glibc's heap at
    exit (bytes held, bytes in use; -1 where mallinfo2 is missing), all in bytes."""

    seconds: float
    peak: int
    heap: int = -1
    in_use: int = -1


def measure(arguments: list[str], log: Path, env: dict[str, str] | None = None) -> Measured:
    """Run ``python -m ratioscope *arguments`` in a fresh process with ``env`` added to
    the environment (stdout discarded, stderr in ``log``); fail loudly on error. Its
    wall time includes interpreter start-up and imports."""
    peak_file = log.with_suffix(".peak")
    environment = {**os.environ, **(env or {}), "RATIOSCOPE_BENCH_PEAK": str(peak_file)}
    with log.open("wb") as stderr:
        started = time.perf_counter()
        returncode = subprocess.call(
            [sys.executable, "-c", _CHILD, *arguments],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=environment,
        )
        seconds = time.perf_counter() - started
    if returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise SystemExit(f"ratioscope {' '.join(arguments)} failed ({returncode}):\n{tail}")
    numbers = json.loads(peak_file.read_text())
    return Measured(seconds, numbers["peak"], numbers["heap"], numbers["in_use"])
