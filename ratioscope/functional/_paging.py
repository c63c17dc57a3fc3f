"""Paging of memory-mapped data: hand the pages already read back to the kernel.

A file mapped into memory (a safetensors dump, ``np.load(..., mmap_mode="r")``) is read
through page faults, and every page read stays resident in this process until it is
unmapped: one pass over logits larger than memory would grow the resident set to the size
of the file, although nothing is read twice. :class:`MappedPages` drops the pages behind a
reader that goes front to back, so resident memory stays bounded by one read step:

* ``MADV_DONTNEED`` when no page of the mapping was ever written: the data stays in the
  page cache, and a later read faults it back from there (or from the file);
* ``MADV_PAGEOUT`` (Linux >= 5.4) when one was: in a private mapping a written page is the
  only copy of its data, which ``MADV_DONTNEED`` would discard; page-out never loses data.

What lies in a mapping of a file is known in two ways: a numpy array that views a
read-only ``np.memmap`` (its pages cannot have been written, so the kernel need not be
asked, and this works wherever ``madvise`` does), and, on Linux, a contiguous CPU tensor
whose bytes ``/proc/self/smaps`` shows inside a mapping of a file (:func:`file_mapping`).
Anything else (anonymous memory, CUDA tensors, other systems) is left alone: releasing it
does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from typing import TypeAlias

    from torch import Tensor

    Array: TypeAlias = Tensor | np.ndarray

PAGE = mmap.PAGESIZE
#: absent where there is no madvise (Windows): nothing is ever released there
MADV_DONTNEED: int | None = getattr(mmap, "MADV_DONTNEED", None)
#: Linux >= 5.4; Python names it from 3.8 on, where the C library headers have it
MADV_PAGEOUT: int = getattr(mmap, "MADV_PAGEOUT", 21)


@dataclass(frozen=True)
class Mapping:
    """One region of this process's address space, as ``/proc/self/smaps`` lists it.

    Attributes:
        low, high: its first address and one past its last (page-aligned).
        path: the mapped file; None for anonymous memory (heap, stack, ...).
        rss_kb: kB of it resident in this process.
        anonymous_kb: kB of privately written (copy-on-write) pages; None if not listed.
    """

    low: int
    high: int
    path: str | None
    rss_kb: int
    anonymous_kb: int | None


def find_mapping(start: int, stop: int) -> Mapping | None:
    """The mapping of this process that holds the addresses ``[start, stop)`` whole.

    None when no single mapping holds them, or where there is no ``/proc/self/smaps``
    (systems other than Linux).
    """
    if not sys.platform.startswith("linux"):
        return None
    region: tuple[int, int, str | None] | None = None
    sizes: dict[str, int] = {}
    try:
        with open("/proc/self/smaps", encoding="utf-8") as smaps:
            for line in smaps:
                fields = line.split(None, 5)
                if not fields:
                    continue
                if "-" in fields[0] and not fields[0].endswith(":"):
                    # a region's first line: "low-high perms offset device inode [path]"
                    if region is not None:
                        break
                    low, high = (int(v, 16) for v in fields[0].split("-"))
                    if low <= start and stop <= high:
                        path = fields[5].rstrip("\n") if len(fields) == 6 else ""
                        region = (low, high, path if path.startswith("/") else None)
                elif region is not None and fields[0] in ("Rss:", "Anonymous:"):
                    sizes[fields[0]] = int(fields[1])
                    if fields[0] == "Anonymous:":
                        break  # listed after Rss: all that is wanted
    except (OSError, ValueError, IndexError):
        return None
    if region is None:
        return None
    return Mapping(*region, sizes.get("Rss:", 0), sizes.get("Anonymous:"))


def byte_range(array: Array) -> tuple[int, int]:
    """``(first address, one past the last)`` of a contiguous tensor's or array's data."""
    if isinstance(array, np.ndarray):
        start = int(array.ctypes.data)
        return start, start + int(array.nbytes)
    start = int(array.data_ptr())
    return start, start + array.numel() * array.element_size()


def file_mapping(array: Array) -> Mapping | None:
    """The mapping of a file that holds a contiguous CPU tensor or array, from
    ``/proc/self/smaps`` (Linux); None for anything else (anonymous memory, CUDA, ...)."""
    if isinstance(array, np.ndarray):
        if not array.flags.c_contiguous:
            return None
    elif array.device.type != "cpu" or not array.is_contiguous():
        return None
    found = find_mapping(*byte_range(array))
    return found if found is not None and found.path is not None else None


class MappedPages:
    """The pages of arrays that lie in a mapping of a file, handed back as they are read.

    Every array is read front to back: ``release(*views)`` takes one view per array (in
    the order the arrays were given), each the part just read, and drops every whole
    page of that array from where the previous release ended to the end of the view,
    the pages straddling two reads included. The arrays are released together or not at
    all (``active``): only when every one lies in a mapping of a file, and with
    ``MADV_PAGEOUT`` (``advice``) as soon as one of those mappings holds a written page.

    Recognised: a C-contiguous numpy array that views a read-only ``np.memmap``, and, on
    Linux, a contiguous CPU tensor inside a mapping of a file (:func:`file_mapping`; a
    read of ``/proc/self/smaps``, so build one of these per pass, not per read).

    >>> MappedPages(np.zeros(4)).active  # anonymous memory: left alone
    False
    """

    def __init__(self, *arrays: Array) -> None:
        self._madvise = _libc_madvise()
        regions = [_file_region(a) for a in arrays] if self._madvise is not None else [None]
        self.active = bool(regions) and all(region is not None for region in regions)
        written = any(region is None or region.written for region in regions)
        self.advice = MADV_PAGEOUT if written or MADV_DONTNEED is None else MADV_DONTNEED
        # madvise takes whole pages: the first may also hold bytes before the array, of the
        # same mapping, which are safe to drop too (the advice never loses data there)
        self._marks = [r.start - r.start % PAGE for r in regions if r is not None]
        self._ends = [r.stop - r.stop % PAGE for r in regions if r is not None]

    def release(self, *views: Array) -> None:
        """Drop the pages of each array up to the end of its view (one view per array)."""
        madvise = self._madvise
        if not self.active or madvise is None:
            return
        for index, view in enumerate(views):
            _, stop = byte_range(view)
            end = min(stop - stop % PAGE, self._ends[index])
            mark = self._marks[index]
            if end <= mark:
                continue
            if madvise(mark, end - mark, self.advice) != 0:
                self.active = False  # not supported here: keep the pages
                return
            self._marks[index] = end


class _Region(NamedTuple):
    start: int
    stop: int
    written: bool  # some page of its mapping was written (a private copy)


def _file_region(array: Array) -> _Region | None:
    """Where an array lies in a mapping of a file, or None when it does not."""
    if isinstance(array, np.ndarray):
        # a read-only memmap is a shared mapping nobody can write to: no need to ask
        holder: np.ndarray | None = array
        while holder is not None and not isinstance(holder, np.memmap):
            holder = getattr(holder, "base", None)
        mapped = getattr(holder, "_mmap", None) is not None
        if not mapped or getattr(holder, "mode", None) != "r":
            return None
        if not array.flags.c_contiguous or array.nbytes == 0:
            return None
        return _Region(*byte_range(array), written=False)
    found = file_mapping(array)
    if found is None or found.anonymous_kb is None:
        return None
    return _Region(*byte_range(array), written=found.anonymous_kb > 0)


@functools.lru_cache(maxsize=1)
def _libc_madvise() -> Callable[[int, int, int], int] | None:
    if MADV_DONTNEED is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.madvise
    except (OSError, AttributeError, TypeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function
