"""Decoding a framework's pickle without running it: an allow-list unpickler.

A pickle is a program: every GLOBAL it names is imported and called. This unpickler
resolves only the (module, name) pairs a caller maps to ratioscope's own functions, and
refuses every other name before anything is imported, so a file can name whatever it
likes and still runs nothing but those functions. Persistent ids (how ``torch.save``
points at tensor storages) are refused too.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from ratioscope.errors import CorruptFileError, UnsafePickleError

#: (module, qualified name) -> the callable that stands in for it
AllowList = Mapping[tuple[str, str], Callable[..., Any]]


class _AllowListUnpickler(pickle.Unpickler):
    def __init__(self, handle: BinaryIO, allowed: AllowList, path: Path) -> None:
        super().__init__(handle)
        self._allowed = allowed
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                self._path, f"the pickle names '{module}.{name}', which ratioscope does not decode"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(self._path, "the pickle refers to external storage")


def load_allowed(path: Path, allowed: AllowList) -> Any:
    """Unpickle ``path`` resolving only the names in ``allowed``.

    Raises:
        UnsafePickleError: the pickle names anything else.
        CorruptFileError: the file is not a readable pickle (truncated, another format).
    """
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CorruptFileError(path, f"cannot read the file ({error.strerror})") from None
    try:
        return _AllowListUnpickler(io.BytesIO(data), allowed, path).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
            AttributeError, MemoryError) as error:  # fmt: skip
        raise CorruptFileError(path, f"not a readable pickle ({type(error).__name__})") from None


# ------------------------------------------------------------ torch's legacy format
#: the first pickle of a ``.pt`` file in torch's legacy (non-zip) format
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class _Inert:
    """What every name of a scanned pickle stands for: accepts being called, built,
    filled and set, and does nothing (nothing of the file is imported or run)."""

    name = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


class _StorageScanner(_AllowListUnpickler):
    """The allow-list unpickler with every name an inert stand-in (so that the scan
    reaches every storage the pickle declares, as far as torch's own loader would) and
    persistent ids recorded: torch's legacy format names each storage as
    ``('storage', storage type, key, location, numel, view)``."""

    def __init__(self, handle: BinaryIO, path: Path) -> None:
        super().__init__(handle, {}, path)
        self.storages: dict[str, tuple[str, int]] = {}
        self._names: dict[tuple[str, str], type[_Inert]] = {}

    def find_class(self, module: str, name: str) -> Any:
        key = (str(module), str(name))
        if key not in self._names:
            self._names[key] = type("Inert", (_Inert,), {"name": f"{key[0]}.{key[1]}"})
        return self._names[key]

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) == 6 and pid[0] in ("storage", b"storage"):
            _, kind, key, _, numel, _ = pid
            name = getattr(kind, "name", "")
            if isinstance(numel, bool) or not isinstance(numel, int) or not 0 <= numel < 1 << 62:
                raise CorruptFileError(
                    self._path, f"not a readable torch file (a storage of {numel!r} elements)"
                )
            self.storages[str(key)] = (name, numel)
        return _Inert()


def legacy_torch_storages(path: Path, handle: BinaryIO) -> tuple[dict[str, tuple[str, int]], int]:
    """The storages a ``.pt`` file in torch's legacy format declares, read without
    running it: key -> (storage type such as ``torch.FloatStorage``, elements), and the
    offset where their data starts (each storage's data is an 8-byte element count and
    its bytes, in the order of the keys).

    ``handle`` is at the file's start; a file that does not begin with the format's
    magic number gives no storages (another format: the loader says which).

    Raises:
        CorruptFileError: a storage declares a count that is not a non-negative integer.
        pickle.UnpicklingError, EOFError, ...: the pickles are not readable (the caller
            leaves it to the loader to say why).
    """
    first = _StorageScanner(handle, path).load()
    if first != TORCH_LEGACY_MAGIC:
        return {}, 0
    _StorageScanner(handle, path).load()  # protocol version
    _StorageScanner(handle, path).load()  # system info
    scanner = _StorageScanner(handle, path)
    scanner.load()
    _StorageScanner(handle, path).load()  # the keys, in the order of the data
    return scanner.storages, handle.tell()
