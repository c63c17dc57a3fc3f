"""Keep freed memory for reuse: large temporaries otherwise cost a page fault per 4 kB.

An analysis allocates many short-lived tensors of a chunk's size (several MB each).
glibc serves allocations above its mmap threshold with fresh ``mmap`` calls and returns
them on free, so every such temporary is faulted in page by page again; on the 2-core
development machine that was about half of ``analyze``'s time. Raising the mmap
threshold makes freed blocks reusable. The trim threshold bounds how much freed memory
at the top of the heap is kept: 256 MiB holds a chunk's temporaries, while at 1 GiB a
4 GiB streamed file peaked at 2.27 GiB instead of 1.32 GiB (blocks of varying sizes, e.g.
the spectra's FFT buckets, leave freed memory that is never the right size again), at the
same speed. The CLI calls this once at start-up; library users may call it themselves.
"""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30
#: freed memory above this at the top of the heap goes back to the system
_TRIM = 1 << 28


def keep_freed_memory() -> bool:
    """Tune glibc's malloc to reuse freed blocks; True when it took effect (Linux/glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: nothing to tune
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM))
