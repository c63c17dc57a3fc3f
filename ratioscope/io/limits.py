"""What a file declares, checked before anything is allocated (docs/formats.md, "Limits").

A file states the shapes and dtypes of its tensors in a few bytes: a header, an array
header, a zip directory, a pickle. Every reader checks here, before it allocates, that
the bytes declared are bytes the file holds (or, for a compressed member, that its
declared uncompressed size agrees) and that what is read whole fits the memory budget;
the whole-file and the streaming readers share these checks, so a file is refused
alike on either path. A tensor that is a view bigger than its storage (stride 0, or
rows that overlap) is accepted only while small, as copying it can take without limit.
"""

from __future__ import annotations

import functools
import math
import os
import re
import struct
import zipfile
from itertools import pairwise
from pathlib import Path
from typing import IO, Any

from ratioscope.defaults import SERIAL_ELEMENTS
from ratioscope.errors import CorruptFileError, InputError, ParameterError

#: the variable that sets the memory budget, in bytes (suffixes K, M, G, T)
MAX_BYTES_VARIABLE = "RATIOSCOPE_MAX_BYTES"
#: tensor data one file may declare when it is read whole (and one streamed chunk):
#: a quarter of a 24 GiB machine, which leaves room for the analysis' working copies
DEFAULT_MAX_BYTES = 6 << 30
#: a view bigger than its storage (stride 0, overlapping rows) is copied up to this size
MAX_VIEW_BYTES = 256 << 20
#: the largest safetensors header, as the safetensors library itself allows
MAX_SAFETENSORS_HEADER = 100_000_000

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def max_bytes() -> int:
    """The memory budget: ``RATIOSCOPE_MAX_BYTES`` (``16G``, ``500M`` or a number of
    bytes), else :data:`DEFAULT_MAX_BYTES`.

    >>> os.environ[MAX_BYTES_VARIABLE] = "1.5K"; max_bytes()
    1536
    >>> del os.environ[MAX_BYTES_VARIABLE]; max_bytes() == DEFAULT_MAX_BYTES
    True
    """
    value = os.environ.get(MAX_BYTES_VARIABLE, "").strip()
    if not value:
        return DEFAULT_MAX_BYTES
    match = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([KMGT]?)(?:I?B)?", value.upper())
    if match is None:
        raise ParameterError(
            "max_bytes", f"is '{value}' in {MAX_BYTES_VARIABLE}, not a size such as 16G"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def check_budget(path: Path | str, what: str, declared: int) -> None:
    """Refuse ``declared`` bytes of tensor data when they exceed the memory budget.

    Raises:
        InputError: naming the file, what declared them, and how to raise the budget.
    """
    budget = max_bytes()
    if declared > budget:
        raise InputError(
            path,
            f"{what} declares {_size(declared)} of tensor data, more than the memory budget "
            f"of {_size(budget)}; set {MAX_BYTES_VARIABLE} (e.g. {MAX_BYTES_VARIABLE}=32G) "
            "if the machine has the memory",
        )


def checked_shape(path: Path | str, what: str, shape: Any) -> tuple[int, ...]:
    """A declared shape as non-negative ints (not bools, floats, strings or huge)."""
    if not isinstance(shape, (list, tuple)) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in shape
    ):
        raise CorruptFileError(path, f"{what} has the shape {_short(shape)}, not a list of ints")
    if any(n < 0 for n in shape):
        raise CorruptFileError(path, f"{what} has a negative dimension in its shape {list(shape)}")
    if any(n >= 1 << 62 for n in shape) or math.prod(shape) >= 1 << 62:
        raise CorruptFileError(path, f"{what} has the impossible shape {list(shape)}")
    return tuple(shape)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# ----------------------------------------------------------------------- safetensors
#: bytes per element of every dtype the safetensors format names
SAFETENSORS_ITEMSIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1,
    "BOOL": 1, "C64": 8,
}  # fmt: skip


def safetensors_header(
    path: Path, handle: IO[bytes]
) -> tuple[dict[str, tuple[str, tuple[int, ...], int]], int]:
    """key -> (dtype name, shape, data offset), and where the data starts.

    Each tensor is checked to lie inside the file, to hold exactly the bytes of its shape
    and dtype, and to share no byte with another (two keys at the same offsets would be
    the same numbers under two names); the header must be a JSON object of at most
    :data:`MAX_SAFETENSORS_HEADER` bytes.

    Raises:
        CorruptFileError: naming the first problem.
    """
    from ratioscope.io.jsontext import loads

    size = path.stat().st_size

    def corrupt(problem: str) -> CorruptFileError:
        return CorruptFileError(path, f"not a readable safetensors file ({problem})")

    head = handle.read(8)
    if len(head) != 8:
        raise corrupt("shorter than its 8-byte header size")
    (length,) = struct.unpack("<Q", head)
    if length > size - 8:
        raise corrupt(f"a header of {length} bytes in a file of {size} bytes")
    if length > MAX_SAFETENSORS_HEADER:
        raise corrupt(f"a header of {length} bytes, over the format's limit of 100 MB")
    try:
        header = loads(handle.read(length))
    except (ValueError, UnicodeDecodeError) as error:
        raise corrupt(f"the header is not valid JSON: {getattr(error, 'msg', error)}") from None
    if not isinstance(header, dict):
        raise corrupt("the header is not a JSON object")
    base = 8 + length
    entries: dict[str, tuple[str, tuple[int, ...], int]] = {}
    spans: list[tuple[int, int, str]] = []
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise corrupt(f"tensor '{key}' lacks its dtype, shape or data_offsets")
        dtype = entry["dtype"]
        # a list or an object is JSON too: it names no dtype (and is not hashable)
        if not isinstance(dtype, str) or dtype not in SAFETENSORS_ITEMSIZE:
            raise corrupt(f"tensor '{key}' has the unknown dtype {_short(dtype)}")
        shape = checked_shape(path, f"tensor '{key}'", entry["shape"])
        offsets = entry["data_offsets"]
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            raise corrupt(f"tensor '{key}' has the data_offsets {_short(offsets)}")
        begin, end = offsets
        if end - begin != math.prod(shape) * SAFETENSORS_ITEMSIZE[dtype]:
            raise corrupt(f"tensor '{key}' has {end - begin} bytes for shape {list(shape)}")
        if base + end > size:
            raise corrupt(
                f"truncated: tensor '{key}' ends at byte {base + end} of a file of {size} bytes"
            )
        entries[str(key)] = (dtype, shape, begin)
        spans.append((begin, end, str(key)))
    spans.sort()
    for (_, end, first), (begin, stop, second) in pairwise(spans):
        if begin < end and stop > begin:
            raise corrupt(f"tensors '{first}' and '{second}' share bytes of the file")
    return entries, base


def check_safetensors(path: Path) -> None:
    """:func:`safetensors_header` of the file, and its tensors within the memory budget,
    for the reader that reads it whole."""
    with path.open("rb") as handle:
        entries, _ = safetensors_header(path, handle)
    declared = sum(math.prod(shape) * SAFETENSORS_ITEMSIZE[d] for d, shape, _ in entries.values())
    check_budget(path, "its tensors", declared)


# ------------------------------------------------------------------------------- npz
def npz_layouts(
    path: Path, archive: zipfile.ZipFile
) -> dict[str, tuple[tuple[int, ...], bool, Any]]:
    """Member key -> (shape, Fortran order, dtype) of every ``.npy`` member, each
    checked to hold the bytes its header declares (by the zip directory's uncompressed
    size, so a deflated member cannot inflate past what it says).

    Raises:
        CorruptFileError: a member that is not a ``.npy`` array, or whose header
            declares more (or fewer) bytes than the member holds.
    """
    import numpy as np

    layouts = {}
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            continue
        key = info.filename[: -len(".npy")]
        with archive.open(info) as member:
            try:
                version = np.lib.format.read_magic(member)
                reader = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, fortran, dtype = reader(member, max_header_size=1 << 16)
            except Exception as error:  # numpy parses the header as Python: any failure
                raise CorruptFileError(
                    path, f"member '{info.filename}' is not a .npy array ({_first(error)})"
                ) from None
            header_bytes = member.tell()
        dtype = np.dtype(dtype)
        shape = checked_shape(path, f"array '{key}'", list(shape))
        if not dtype.hasobject:
            declared = math.prod(shape) * dtype.itemsize
            held = info.file_size - header_bytes
            if declared != held:
                raise CorruptFileError(
                    path,
                    f"array '{key}' declares {declared} bytes (shape {list(shape)}, dtype "
                    f"{dtype.str}) but its member holds {held}",
                )
        layouts[key] = (shape, bool(fortran), dtype)
    return layouts


def _first(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return (lines[0] if lines else type(error).__name__)[:160]


def npz_layouts_of(path: Path) -> dict[str, tuple[tuple[int, ...], bool, Any]]:
    """:func:`npz_layouts` of the archive at ``path``; a file that is no zip archive
    (a ``.npy`` named ``.npz``) is refused saying so."""
    try:
        with zipfile.ZipFile(path) as archive:
            return npz_layouts(path, archive)
    except zipfile.BadZipFile:
        raise not_a_zip(path) from None


def not_a_zip(path: Path) -> CorruptFileError:
    """The error for an ``.npz`` that is no zip archive, saying what it is instead."""
    with path.open("rb") as handle:
        magic = handle.read(6)
    what = "a single .npy array" if magic == b"\x93NUMPY" else "not a zip archive"
    return CorruptFileError(
        path, f"not a readable .npz archive ({what}; save dumps with numpy.savez)"
    )


# ----------------------------------------------------------------------------- torch
def check_torch_zip(path: Path) -> None:
    """The storages of a ``.pt`` file in torch's zip format, by the zip directory: their
    uncompressed sizes within the budget (a deflated storage inflates to its declared
    size; torch itself writes them stored)."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # the legacy format, or not a torch file: torch.load says which
    declared = sum(info.file_size for info in infos if "/data/" in info.filename)
    check_budget(path, "its storages", declared)
    for info in infos:
        if info.compress_type != zipfile.ZIP_STORED and info.compress_size:
            ratio = info.file_size / info.compress_size
            if info.file_size > MAX_VIEW_BYTES and ratio > 100:
                raise CorruptFileError(
                    path,
                    f"member '{info.filename}' inflates {ratio:.0f}-fold to "
                    f"{_size(info.file_size)}; torch writes its storages uncompressed",
                )


#: bytes per element of the storage types torch's legacy format names
_LEGACY_ITEMSIZE = {
    "Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
    "Char": 1, "Byte": 1, "Bool": 1, "ComplexFloat": 8, "ComplexDouble": 16, "QInt8": 1,
    "QUInt8": 1, "QInt32": 4, "QUInt4x2": 1, "QUInt2x4": 1,
}  # fmt: skip


def check_torch_legacy(path: Path) -> None:
    """The storages of a ``.pt`` file in torch's legacy (non-zip) format, declared in its
    pickle, checked before torch allocates them (it allocates each storage at the size
    its pickle states before reading a byte of it): their bytes within the file and
    within the memory budget. The pickle is read by the allow-list unpickler of
    :mod:`ratioscope.io.safe_pickle` with every name an inert stand-in, so nothing of
    the file runs; a file it cannot read is left to torch to name.

    Raises:
        CorruptFileError: the storages declare more bytes than the file holds.
        InputError: they are over the memory budget.
    """
    import pickle

    from ratioscope.io.safe_pickle import legacy_torch_storages

    try:
        with path.open("rb") as handle:
            if handle.read(4) in (b"PK\x03\x04", b"PK\x05\x06"):
                return  # the zip format: check_torch_zip
            handle.seek(0)
            storages, data_start = legacy_torch_storages(path, handle)
    except CorruptFileError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, OverflowError, RecursionError, MemoryError, OSError):  # fmt: skip
        return  # not the legacy format, or damaged: torch.load says what it is
    declared = 0
    for name, numel in storages.values():
        kind = name.rpartition(".")[2].removesuffix("Storage")
        declared += 8 + numel * _LEGACY_ITEMSIZE.get(kind, 1)
    held = path.stat().st_size - data_start
    if declared > held:
        raise CorruptFileError(
            path,
            f"not a readable torch file: truncated (its storages declare {_size(declared)} "
            f"but the file holds {_size(max(held, 0))} after its pickle)",
        )
    check_budget(path, "its storages", declared)


def check_view(path: Path | str, key: str, tensor: Any) -> None:
    """Refuse a tensor that is not a plain dense one, or a view much bigger than its
    storage (stride 0, overlapping rows), which copying would inflate without bound."""
    import torch

    if tensor.layout != torch.strided:
        raise InputError(
            path, f"'{key}' is a {tensor.layout} tensor; save it dense (tensor.to_dense())"
        )
    if tensor.is_quantized:
        raise InputError(
            path, f"'{key}' is a quantized tensor ({tensor.dtype}); save it dequantized"
        )
    if any(n < 0 for n in tensor.stride()):
        raise InputError(path, f"'{key}' has a negative stride")
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes <= MAX_VIEW_BYTES:
        return
    if tensor.untyped_storage().nbytes() < nbytes:
        raise InputError(
            path,
            f"'{key}' is a view of shape {list(tensor.shape)} over a storage of "
            f"{_size(tensor.untyped_storage().nbytes())} (stride 0 or overlapping rows), "
            f"{_size(nbytes)} once copied; save it with tensor.contiguous()",
        )


@functools.cache
def start_thread_pool() -> None:
    """Start torch's intra-op threads now, before a file's data takes the memory.

    torch's OpenMP runtime (libgomp) creates its threads at the first parallel
    operation; when it cannot (the memory or the address space is spent by then: a
    3 MB npz inflated to 3 GiB), it prints "libgomp: Thread creation failed" and ends
    the process with exit 1, before any Python code can name the file. Started while
    memory is plentiful, the threads are reused by every later operation (a team of one
    thread, :func:`ratioscope.analysis.threads.serial_if_small`, runs on the calling
    thread and keeps them), so an allocation that fails later is a ``MemoryError`` or
    torch's "can't allocate memory", which the command line reports as out of memory
    (exit 2). Once per process; nothing to do with one thread.
    """
    import torch

    if torch.get_num_threads() > 1:
        # a reduction over more than torch's grain size runs on the whole team
        torch.ones(4 * SERIAL_ELEMENTS).sum()
