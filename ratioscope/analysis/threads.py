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


@contextmanager
def analysis_threads(elements: int, vocab: bool, device: Any) -> Iterator[None]:
    """The threads of one file's analysis: one for a small file (:func:`serial_if_small`);
    for a larger one on the CPU without vocabulary-sized tensors, torch on one thread
    and the compiled loops on torch's count
    (:func:`ratioscope.functional._kernels.own_threads`: torch's operations left there
    are small, and its thread team cost more than it saved). Logits keep torch's
    threads: their [B, T, V] operations are torch's own.

    Args:
        elements: the largest tensor's elements; vocab: whether the batch holds logits;
        device: where the analysis runs (a ``torch.device``).
    """
    from ratioscope.functional import _kernels

    if elements <= SERIAL_ELEMENTS or vocab or device.type != "cpu":
        with serial_if_small(elements):
            yield
        return
    with _kernels.own_threads():
        yield


def one_thread() -> Any:
    """:func:`serial_if_small` always: for work on small tensors only (a report's state,
    the sections built from it)."""
    return serial_if_small(0)


#: how long an idle OpenMP thread of GNU OpenMP (torch's Linux wheels) spins before it
#: sleeps, in iterations; its default without OMP_WAIT_POLICY is 300,000
SPIN_COUNT = 20_000


def short_thread_waits() -> bool:
    """Let idle OpenMP threads sleep soon instead of spinning; True when set.

    After each parallel region GNU OpenMP keeps torch's threads spinning a while, ready
    for the next one. On two cores that spinning takes the CPU from the analysis's own
    threads (the compiled row loops, the file's hash). ``GOMP_SPINCOUNT`` = 20,000 (a
    fifteenth of the default) cut ``analyze``'s wall time by about 10 % and its CPU by
    15 % on the 1,024 x 4,096 benchmark, and left a 256 x 1,024 file's wall time as it
    was; ``OMP_WAIT_POLICY=PASSIVE`` (no spinning) saved a little more CPU but cost a
    256 x 1,024 file about 10 % of its wall time (docs/performance.md). OpenMP reads the
    variable once, when torch loads it, so this sets it only while torch is not yet
    imported, and never where the user chose a waiting policy or count. Other OpenMP
    runtimes (LLVM's, Intel's) do not read it. The CLI calls it at start-up; a library
    user sets the variable themselves (a training process may want its threads
    spinning).
    """
    chosen = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
    if "torch" in sys.modules or any(name in os.environ for name in chosen):
        return False
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    return True
