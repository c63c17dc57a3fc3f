"""Atomic file output: write beside the target, then rename, so nothing is half-written."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ratioscope.errors import UsageError


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path in the target's directory; rename it onto ``target`` on success.

    On any exception the temporary file is removed and ``target`` is left untouched.
    The suffix is kept so that writers that look at it (matplotlib, polars) behave.
    """
    target = Path(target)
    if target.is_dir():
        raise UsageError(f"cannot write {target}: it is a directory; give a file name")
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise UsageError(f"cannot write {target}: the directory {directory} does not exist")
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=f".tmp{target.suffix}", dir=directory
    )
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        # mkstemp creates 0600 files; give the result the permissions a plain open() would
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(target: str | Path, text: str) -> None:
    """Write ``text`` to ``target`` atomically (UTF-8)."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
