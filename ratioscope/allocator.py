"""Keep freed memory for reuse: large temporaries otherwise cost a page fault per 4 kB.

An analysis allocates many short-lived tensors of a chunk's size (several MB each).
glibc serves allocations above its mmap threshold with fresh ``mmap`` calls and returns
them on free, so every such temporary is faulted in page by page again; on the 2-core
development machine that was about half of ``analyze``'s time. Raising the mmap and
trim thresholds makes freed blocks reusable. Peak memory does not change (the same
blocks are reused); the process just keeps what it freed until it exits. The CLI calls
this once at start-up; library users may call it themselves.
"""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Tune glibc's malloc to reuse freed blocks; True when it took effect (Linux/glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: nothing to tune
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, _THRESHOLD)
    )
