"""A CUDA device for every Python process started with this folder on ``PYTHONPATH``
and ``RATIOSCOPE_EMULATED_CUDA=1``: the device emulated on the CPU by
``tests/device_emulation.py``, entered at start-up, with the ``torch.cuda`` calls the
package, the benchmarks and the ``cuda`` tests make answered on the host. Child
processes inherit both variables, so ``benchmarks/gpu_check.sh`` runs every GPU step
here (its tests, benchmarks and comparisons): a rehearsal of a GPU session, which finds
a script's mistakes before a lent GPU's minutes are spent on them. Times and bandwidths
it prints are the CPU's and mean nothing.

    RATIOSCOPE_EMULATED_CUDA=1 PYTHONPATH=tests/emulated_cuda bash benchmarks/gpu_check.sh

Python imports a ``sitecustomize`` module found on its path once, at start-up; without
the variable this one does nothing.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def _install() -> None:
    import torch

    # as a module of tests/ itself: a package named ``tests`` that another project
    # installs (verl does) would shadow the checkout's tests/, which is no package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from device_emulation import SecondDevice, host_memory

    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_name = lambda device=None: "emulated CUDA device (the CPU)"
    cuda.synchronize = lambda device=None: None
    cuda.empty_cache = lambda: None
    cuda.reset_peak_memory_stats = lambda device=None: None
    cuda.max_memory_allocated = lambda device=None: 0
    cuda.memory_allocated = lambda device=None: 0
    cuda.manual_seed = lambda seed: torch.manual_seed(seed)
    cuda.manual_seed_all = lambda seed: torch.manual_seed(seed)
    cuda.mem_get_info = host_memory
    cuda.Event = _Event
    SecondDevice().__enter__()  # for the life of the process, on its main thread


class _Event:
    """``torch.cuda.Event(enable_timing=True)`` timed by the host's clock."""

    def __init__(self, enable_timing: bool = False, **_: object) -> None:
        self.time = 0.0

    def record(self, stream: object = None) -> None:
        self.time = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        return (end.time - self.time) * 1e3


if os.environ.get("RATIOSCOPE_EMULATED_CUDA") == "1":
    _install()
