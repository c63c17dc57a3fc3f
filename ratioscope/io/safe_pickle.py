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
