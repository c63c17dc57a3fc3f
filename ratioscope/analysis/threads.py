"""One thread for small files: torch's thread pool costs more than it saves on them.

A file of a few thousand tokens runs hundreds of small torch operations and compiled
loops, each of which may wake the intra-op threads (and, on a busy machine, wait for
them to be scheduled: a 16 x 128 FFT took 13 ms with two threads on a loaded two-core
machine, 7 µs with one). Below :data:`SERIAL_ELEMENTS` per tensor the numbers cannot
change: torch runs a loop over fewer elements than its grain size (32,768, PyTorch's
``at::internal::GRAIN_SIZE``) on the calling thread anyway, and the compiled loops cut
rows into the same parts on any number of threads (:func:`ratioscope.functional.
_kernels.map_row_parts`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: tensors of at most this many elements are analysed on one thread (torch's grain size)
SERIAL_ELEMENTS = 32768


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


@functools.cache
def start_thread_pool() -> None:
    """Start torch's intra-op threads now, before a file's data takes the memory.

    torch's OpenMP runtime (libgomp) creates its threads at the first parallel
    operation; when it cannot (the memory or the address space is spent by then: a
    3 MB npz inflated to 3 GiB), it prints "libgomp: Thread creation failed" and ends
    the process with exit 1, before any Python code can name the file. Started while
    memory is plentiful, the threads are reused by every later operation (a team of one
    thread, :func:`serial_if_small`, runs on the calling thread and keeps them), so an
    allocation that fails later is a ``MemoryError`` or torch's "can't allocate
    memory", which the command line reports as out of memory (exit 2). Once per
    process; nothing to do with one thread.
    """
    import torch

    if torch.get_num_threads() > 1:
        # a reduction over more than torch's grain size runs on the whole team
        torch.ones(4 * SERIAL_ELEMENTS).sum()
