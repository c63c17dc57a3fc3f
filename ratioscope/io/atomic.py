"""Atomic file output: write beside the target, then rename, so nothing is half-written.

The temporary file is named ``.NAME.PID-RANDOM.tmpSUFFIX`` in the target's directory.
It is removed on any error, and on Ctrl-C and SIGTERM (the command line's handler
removes every file of :data:`PENDING` before the process ends); a run killed outright
(SIGKILL, a power cut) leaves it behind, and the next run that writes the same target removes the
leftovers of processes that no longer exist. An output that cannot be written (a full
disk, a file size limit, a read-only directory) is an :class:`OutputError`: exit 2 and
one sentence naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from ratioscope.errors import OutputError, UsageError

#: errors of the machine, not of ratioscope: the output cannot be written there
_OUTPUT_ERRNOS = {
    errno.EFBIG: "the file size limit (ulimit -f) was reached",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EIO: "an input/output error of the device",
}
#: how a writer in Rust (polars) spells an OS error in its message
_OS_ERROR_TEXT = re.compile(r"os error (\d+)")
#: a leftover without a process id (written before they had one) is removed after this
_ORPHAN_SECONDS = 3600


#: temporary files and folders being written now; a signal handler removes them
#: (:func:`remove_pending`) before the process ends
PENDING: set[Path] = set()
#: within :func:`outputs_together`: the written outputs' (temporary, target) pairs,
#: renamed when it ends, and the outputs it holds back (:func:`hold_together`)
_DEFERRED: list[tuple[Path, Path]] | None = None
_HELD: set[Path] = set()


@contextlib.contextmanager
def outputs_together(keep_on: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Every output named to :func:`hold_together` inside it that :func:`atomic_path`
    writes appears when it ends, or none does: an error after the first of several
    outputs was written (the second cannot be written, the input turns out bad) removes
    them all, and no earlier output is left behind. Other files (the step cache's
    entries, a staged folder's files) are written at once, as outside it. ``keep_on``:
    exceptions that end it with the outputs kept (a regression gate that fails after
    writing its JUnit file). Each command runs inside one (``watch``'s documents are not
    held: they are read while it runs)."""
    global _DEFERRED
    outer, _DEFERRED = _DEFERRED, []
    held = set(_HELD)
    deferred = _DEFERRED

    def commit() -> None:
        while deferred:
            tmp, target = deferred.pop(0)
            os.replace(tmp, target)
            PENDING.discard(tmp)

    try:
        yield
        commit()
    except keep_on:
        commit()
        raise
    finally:
        for tmp, _ in deferred:
            PENDING.discard(tmp)
            with contextlib.suppress(OSError):
                tmp.unlink()
        _DEFERRED = outer
        _HELD.clear()
        _HELD.update(held)


def hold_together(outputs: Iterable[str | Path | None]) -> None:
    """Name the outputs of the command (within :func:`outputs_together`; a no-op
    outside one) whose renames wait for its end."""
    if _DEFERRED is not None:
        _HELD.update(Path(o).resolve() for o in outputs if o is not None)


def remove_pending() -> None:
    """Remove every temporary file and folder still being written (for a handler of
    SIGTERM or SIGINT, which ends the process right after)."""
    import shutil

    for path in list(PENDING):
        with contextlib.suppress(OSError):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
        PENDING.discard(path)


@contextlib.contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """Yield a temporary path in the target's directory; rename it onto ``target`` on success.

    On any exception the temporary file is removed and ``target`` is left untouched.
    The suffix is kept so that writers that look at it (matplotlib, polars) behave.

    Raises:
        UsageError: ``target`` is a directory, or its directory does not exist.
        OutputError: the machine refuses the bytes (disk full, size limit, read-only).
    """
    target = Path(target)
    if target.is_dir():
        raise UsageError(f"cannot write {target}: it is a directory; give a file name")
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise UsageError(f"cannot write {target}: the directory {directory} does not exist")
    remove_leftovers(target)
    tmp: Path | None = None
    try:
        fd, tmp_name = _temporary_file(target, directory)
        os.close(fd)
        tmp = Path(tmp_name)
        PENDING.add(tmp)
        yield tmp
        # mkstemp creates 0600 files; give the result the permissions a plain open() would
        os.chmod(tmp, 0o666 & ~_umask())
        if _DEFERRED is not None and target.resolve() in _HELD:
            _DEFERRED.append((tmp, target))  # renamed with the command's other outputs
            return
        os.replace(tmp, target)
        PENDING.discard(tmp)
    except BaseException as error:
        problem = output_problem(error, tmp)
        if tmp is not None:
            PENDING.discard(tmp)
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        if problem is not None:
            raise OutputError(target, f"cannot write the file: {problem}") from None
        raise


def _temporary_file(target: Path, directory: Path) -> tuple[int, str]:
    """mkstemp beside ``target``; a folder where the system creates no file (``/proc``, a
    folder removed meanwhile) is an OutputError in the system's words."""
    try:
        return tempfile.mkstemp(
            prefix=f".{target.name}.{os.getpid()}-", suffix=f".tmp{target.suffix}", dir=directory
        )
    except OSError as error:
        if error.errno in _OUTPUT_ERRNOS or not error.strerror:
            raise
        said = error.strerror[0].lower() + error.strerror[1:]
        raise OutputError(target, f"cannot write the file: {said}") from None


def output_problem(error: BaseException, written: Path | None = None) -> str | None:
    """What the machine said when an output could not be written, or None when
    ``error`` is not such a refusal: an OSError, a writer's error quoting one, or any
    error of a writer whose file ``written`` stopped at the file size limit or on a
    full device (some writers report those as a corrupt file of their own)."""
    if isinstance(error, OSError) and error.errno in _OUTPUT_ERRNOS:
        return _OUTPUT_ERRNOS[error.errno]
    if not isinstance(error, Exception) or isinstance(error, OSError):
        return None
    match = _OS_ERROR_TEXT.search(str(error))
    if match and int(match.group(1)) in _OUTPUT_ERRNOS:
        return _OUTPUT_ERRNOS[int(match.group(1))]
    if written is not None and written.exists():
        import resource
        import shutil

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY and written.stat().st_size >= limit:
            return _OUTPUT_ERRNOS[errno.EFBIG]
        if shutil.disk_usage(written.parent).free < 1 << 20:
            return _OUTPUT_ERRNOS[errno.ENOSPC]
    return None


def remove_leftovers(target: Path) -> list[Path]:
    """Remove the temporary files of earlier runs that wrote ``target`` and were
    killed: those whose process no longer exists on this machine (and those of older
    versions, without a process id, after an hour). Returns what was removed."""
    directory = target.parent if str(target.parent) else Path(".")
    pattern = f".{glob.escape(target.name)}.*.tmp{glob.escape(target.suffix)}"
    removed = []
    for path in directory.glob(pattern):
        middle = path.name[len(target.name) + 2 : -len(f".tmp{target.suffix}")]
        pid = middle.split("-", 1)[0]
        stale = False
        if "-" in middle and pid.isdigit():
            stale = not _alive(int(pid))
        else:
            with contextlib.suppress(OSError):
                stale = time.time() - path.stat().st_mtime > _ORPHAN_SECONDS
        if stale:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(target: str | Path, text: str) -> None:
    """Write ``text`` to ``target`` atomically (UTF-8)."""
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")
