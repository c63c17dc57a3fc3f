"""One thread for small files: torch's thread pool costs more than it saves on them.

A file of a few thousand tokens runs hundreds of small torch operations and compiled
loops, each of which may wake the intra-op threads (and, on a busy machine, wait for
them to be scheduled: a 16 x 128 FFT took 13 ms with two threads on a loaded two-core
machine, 7 µs with one). Below :data:`ratioscope.defaults.SERIAL_ELEMENTS` per tensor
the numbers cannot
change: torch runs a loop over fewer elements than its grain size (32,768, PyTorch's
``at::internal::GRAIN_SIZE``) on the calling thread anyway, and the compiled loops cut
rows into the same parts on any number of threads (:func:`ratioscope.functional.
_kernels.map_row_parts`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ratioscope.defaults import SERIAL_ELEMENTS


@contextmanager
def serial_if_small(elements: int) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(1)`` when ``elements`` (the largest
    tensor's) is at most :data:`SERIAL_ELEMENTS`; the thread count is restored after."""
    import torch

    threads = torch.get_num_threads()
    if elements > SERIAL_ELEMENTS or threads <= 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def one_thread() -> Any:
    """:func:`serial_if_small` always: for work on small tensors only (a report's state,
    the sections built from it)."""
    return serial_if_small(0)


def passive_waits() -> bool:
    """Let idle OpenMP threads sleep at once instead of spinning; True when set.

    After each parallel region GNU OpenMP keeps its threads spinning for a while, ready
    for the next one. On two cores that spinning takes the CPU from the analysis's own
    worker threads (the compiled row loops, the file's hash): ``OMP_WAIT_POLICY=PASSIVE``
    cut ``analyze``'s CPU by a fifth and its wall time by 7-10 % on the 1,024 x 4,096
    benchmark (docs/performance.md). OpenMP reads the variable once, when torch loads
    it, so this sets it only while torch is not yet imported, and never over a value
    the user chose. The CLI calls it at start-up; a library user sets the variable
    themselves (a training process may want its threads spinning).
    """
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ:
        return False
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True
