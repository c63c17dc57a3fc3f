"""Run the command line on hostile input, contained, and check the README's promise.

Each case runs ``ratioscope ARGS`` in a child process forked from a server that has
imported ratioscope, torch and numpy once (``multiprocessing``'s forkserver), so a case
costs a fork rather than an interpreter start, yet a crash, a hang or a runaway
allocation stays in the child: it runs in its own temporary directory, under an address
space limit (``RLIMIT_AS``) a few GiB above what the imports mapped, and is killed at
its time limit. :func:`check_promise` then asserts what the README promises for bad
input: exit 0 or 2, a one-line message on stderr for exit 2, no traceback, and no file
left in the directory other than those the command was asked to write.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import resource
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the address space a case may add to what the fork server had mapped
CASE_MEMORY = 3 << 30
#: seconds a case may run (the slowest legitimate case here takes about 2 s)
CASE_SECONDS = 60.0

_CONTEXT: multiprocessing.context.BaseContext | None = None
#: imported once by the fork server (none of them starts a thread on import)
_PRELOAD = [
    "fuzz.harness",
    "torch",
    "numpy",
    "polars",
    "safetensors.torch",
    "ratioscope.cli",
    "ratioscope.analysis.pipeline",
    "ratioscope.io.streaming",
    "ratioscope.analysis.dump_info",
    "ratioscope.io.documents",
    "ratioscope.judgement.rules",
    "ratioscope.render.terminal.report",
    "ratioscope.render.terminal.sections",
    "ratioscope.io.frameworks.skyrl",
    "ratioscope.evaluation.evaluate",
    "fuzz.warm",
]


def _context() -> multiprocessing.context.BaseContext:
    global _CONTEXT
    if _CONTEXT is None:
        context = multiprocessing.get_context("forkserver")
        # imported once in the server; never used there, so no thread pool is forked
        context.set_forkserver_preload(_PRELOAD)
        _CONTEXT = context
    return _CONTEXT


@dataclass(frozen=True)
class Outcome:
    """What a case did: its exit status (negative: killed by that signal; None: it ran
    past its time limit and was killed), its output, and its directory."""

    code: int | None
    stdout: str
    stderr: str
    directory: Path


def _command() -> Any:
    """The command line's click command, built once (in the fork server, by import)."""
    global _COMMAND
    if _COMMAND is None:
        import typer

        from ratioscope.cli import app

        _COMMAND = typer.main.get_command(app)
    return _COMMAND


_COMMAND: Any = None


def _mapped_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(
    args: list[str],
    directory: str,
    memory: int,
    env: dict[str, str],
    stdin_path: str | None,
    stdout_closed: bool,
    file_limit: int | None,
) -> None:
    """The case itself: the command line's entry, as ``python -m ratioscope`` runs it."""
    os.chdir(directory)
    out = os.open(os.path.join(directory, ".case.stdout"), os.O_WRONLY | os.O_CREAT, 0o600)
    err = os.open(os.path.join(directory, ".case.stderr"), os.O_WRONLY | os.O_CREAT, 0o600)
    if stdout_closed:
        read_end, write_end = os.pipe()
        os.close(read_end)  # a reader that went away: writes get EPIPE
        out = write_end
    os.dup2(out, 1)
    os.dup2(err, 2)
    source = os.open(stdin_path or os.devnull, os.O_RDONLY)
    os.dup2(source, 0)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    os.environ.update(env)
    limit = _mapped_bytes() + memory
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if file_limit is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))
    code: int = 0
    try:
        _command().main(args, prog_name="ratioscope")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # the interpreter would print it and exit 1
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):
            stream.flush()
    os._exit(code)


def run(
    args: Sequence[str | os.PathLike[str]],
    directory: Path,
    *,
    seconds: float = CASE_SECONDS,
    memory: int = CASE_MEMORY,
    env: Mapping[str, str] | None = None,
    stdin: Path | None = None,
    stdout_closed: bool = False,
    file_limit: int | None = None,
) -> Outcome:
    """Run ``ratioscope ARGS`` contained, in ``directory`` (relative paths are in it):
    ``stdout_closed`` gives it a pipe whose reader has gone, ``file_limit`` a file size
    limit in bytes (``ulimit -f``)."""
    process = _context().Process(
        target=_child,
        args=(
            [str(a) for a in args],
            str(directory),
            memory,
            {"RATIOSCOPE_DEBUG": "0", "COLUMNS": "200", **(env or {})},
            None if stdin is None else str(stdin),
            stdout_closed,
            file_limit,
        ),
    )
    process.start()
    process.join(seconds)
    code: int | None = process.exitcode
    if process.is_alive():
        process.kill()
        process.join()
        code = None
    texts = []
    for name in (".case.stdout", ".case.stderr"):
        path = directory / name
        texts.append(path.read_text(encoding="utf-8", errors="replace") if path.exists() else "")
        path.unlink(missing_ok=True)
    return Outcome(code, texts[0], texts[1], directory)


def files_in(directory: Path) -> set[str]:
    """Every file under ``directory``, relative, hidden ones included."""
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if not p.is_dir()}


def check_promise(
    outcome: Outcome,
    before: Iterable[str],
    *,
    written: Iterable[str] = (),
    codes: Iterable[int] = (0, 2),
) -> None:
    """Assert the promise for bad input: an allowed exit code, one line for an error,
    no traceback, and no file beyond ``before`` and the ``written`` outputs (which an
    error must not leave either)."""
    codes = tuple(codes)
    detail = f"exit {outcome.code}; stderr:\n{outcome.stderr[-2000:]}"
    assert outcome.code is not None, f"ran past its time limit; {detail}"
    assert outcome.code >= 0, f"killed by signal {-outcome.code}; {detail}"
    assert outcome.code in codes, detail
    assert "Traceback" not in outcome.stderr, detail
    assert "internal error" not in outcome.stderr, detail
    if outcome.code == 2:
        lines = [line for line in outcome.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ratioscope: error: ")]
        assert len(errors) == 1, detail
        assert lines[-1] == errors[0], detail
    allowed = set(before) | (set(written) if outcome.code == 0 else set())
    stray = files_in(outcome.directory) - allowed
    assert not stray, f"files left behind: {sorted(stray)}; {detail}"


def promise(
    args: Sequence[str | os.PathLike[str]],
    directory: Path,
    *,
    written: Iterable[str] = (),
    codes: Iterable[int] = (0, 2),
    **options: object,
) -> Outcome:
    """:func:`run` the case and :func:`check_promise` it; the outcome for more checks."""
    before = files_in(directory)
    outcome = run(args, directory, **options)  # type: ignore[arg-type]
    check_promise(outcome, before, written=written, codes=codes)
    return outcome


def error_line(outcome: Outcome) -> str:
    """The one error line of a case that exited 2."""
    assert outcome.code == 2, f"exit {outcome.code}; stderr:\n{outcome.stderr[-2000:]}"
    return outcome.stderr.strip().splitlines()[-1]
