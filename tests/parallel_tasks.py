"""Task functions for tests/test_parallel.py, importable by worker processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from ratioscope.errors import InputError


def square_later(item: int) -> int:
    """item ** 2, the early items finishing last (so results arrive out of order)."""
    time.sleep(0.05 * (4 - item % 5))
    return item * item


def fail_on_three(item: int) -> int:
    if item == 3:
        raise InputError(f"shard_{item}.pt", "holds no mask")
    return item


def die_once(marker: str, item: int) -> tuple[int, int]:
    """(item, pid) — but the first process to run item 2 kills itself with SIGKILL,
    as an out-of-memory kill or a lost node would, in the middle of its task."""
    if item == 2:
        flag = Path(marker)
        if not flag.exists():
            flag.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached
    return item, os.getpid()


def always_die(item: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return item
