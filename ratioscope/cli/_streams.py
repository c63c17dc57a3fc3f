"""The process around a command: a reader of stdout that goes away, and SIGTERM.

``ratioscope info f.pt | head -1`` closes the pipe after one line; the next write to
stdout raises BrokenPipeError, which would abort the command (and a report it was asked
to write with ``--json``). :class:`_PipeGuard` stands in for stdout, and for stderr
(``2>&1 | head``: the warnings and progress go to the same pipe): after the first EPIPE
it sends the rest of the output to ``/dev/null``, so the command finishes quietly and
writes its files. On SIGTERM and Ctrl-C the outputs being written are removed
(:mod:`ratioscope.io.atomic`) and the process ends with one line and 128 + the signal.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any


class _PipeGuard(io.TextIOBase):
    """A text stream that writes through to ``stream`` until the reader goes away, then
    to nowhere (the file descriptor is pointed at /dev/null, so the interpreter's last
    flush succeeds too)."""

    def __init__(self, stream: Any, name: str = "standard output") -> None:
        self._stream = stream
        self.name = name
        self.broken = False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(self._stream.encoding)

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._stream.errors

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return bool(self._stream.isatty())

    def fileno(self) -> int:
        return int(self._stream.fileno())

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return int(self._stream.write(text))
            except BrokenPipeError:
                self._close_pipe()
            except OSError as error:
                self._refused(error)
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._close_pipe()
            except OSError as error:
                self._refused(error)

    def _refused(self, error: OSError) -> None:
        """stdout is a file the machine refuses more bytes (a full disk, ``ulimit -f``):
        exit 2 saying so, the rest of the output going nowhere."""
        from ratioscope.errors import OutputError
        from ratioscope.io.atomic import output_problem

        problem = output_problem(error)
        if problem is None:
            raise error
        self._close_pipe()
        raise OutputError(None, f"cannot write the {self.name}: {problem}") from None

    def _close_pipe(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM or SIGINT: remove the outputs being written, say so, and end now.

    Raising an exception from here instead would land wherever the main thread is, in
    the middle of an import or a library's own cleanup, and could turn into another
    error; the files being written are known (:data:`ratioscope.io.atomic.PENDING`)."""
    from ratioscope.io.atomic import remove_pending

    remove_pending()
    what = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
    with contextlib.suppress(OSError):
        os.write(2, f"ratioscope: error: {what}; outputs being written were removed\n".encode())
    os._exit(128 + signum)


@contextlib.contextmanager
def guarded_process() -> Iterator[None]:
    """Run a command with stdout guarded against a closed pipe and SIGTERM and SIGINT
    handled (all restored afterwards, for callers that run commands in-process)."""
    original, original_err = sys.stdout, sys.stderr
    guard = _PipeGuard(original) if _has_descriptor(original) else None
    if guard is not None:
        sys.stdout = guard
    guard_err = (
        _PipeGuard(original_err, "standard error") if _has_descriptor(original_err) else None
    )
    if guard_err is not None:
        sys.stderr = guard_err
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGTERM, signal.SIGINT):
            previous[number] = signal.signal(number, _terminate)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if guard is not None and sys.stdout is guard:
            with contextlib.suppress(Exception):
                guard.flush()
            sys.stdout = original
        if guard_err is not None and sys.stderr is guard_err:
            with contextlib.suppress(Exception):
                guard_err.flush()
            sys.stderr = original_err


def _has_descriptor(stream: Any) -> bool:
    """A real stream of the process (not a test runner's buffer)."""
    try:
        return stream is not None and isinstance(stream.fileno(), int)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False
