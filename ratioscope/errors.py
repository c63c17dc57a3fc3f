"""Errors that carry their own exit code.

The library raises these; the CLI turns each into one line on stderr and the
``exit_code`` of its class (docs/cli.md): 1 a regression found by ``check``, 2 bad
input or usage, 3 an internal error (the base class's, which the CLI also gives any
unexpected exception). Messages are one sentence that names the file and the problem,
so a user can fix the input without reading a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path


def _fmt_keys(keys: Iterable[str], limit: int = 20) -> str:
    keys = sorted(str(k) for k in keys)
    if not keys:
        return "none"
    shown = ", ".join(keys[:limit])
    return shown if len(keys) <= limit else f"{shown}, ... ({len(keys)} in all)"


#: how a library message mentions a parameter that a command-line option sets:
#: in backquotes, as Python spells it (`fields.correct`)
_MENTION = re.compile(r"`([A-Za-z_][\w.]*)`")


def naming_options(message: str, options: Mapping[str, str]) -> str:
    """``message`` with every parameter it mentions in backquotes called by its option.

    A library message says what to set as Python spells it; the command line, at its one
    error boundary, says which option sets it. Mentions of unknown names stay as written.

    >>> naming_options("name it with `fields.method`", {"fields.method": "--method-field"})
    'name it with --method-field'
    """
    return _MENTION.sub(lambda match: options.get(match.group(1), match.group(0)), message)


class RatioscopeError(Exception):
    """Base class; ``exit_code`` is what the CLI exits with."""

    exit_code: int = 3


class InputError(RatioscopeError):
    """Bad input: a file, a key, a value or an option the user can fix (exit 2)."""

    exit_code = 2

    def __init__(self, path: str | Path | None, problem: str) -> None:
        self.path = path
        self.problem = problem.rstrip(".")
        # no file to name (an option, an in-memory batch): the problem alone
        super().__init__(f"{self.problem}." if path is None else f"{path}: {self.problem}.")


class UsageError(RatioscopeError):
    """A value or a combination of values that makes no sense (exit 2): an option on
    the command line, an argument in Python."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(message.rstrip(".") + ".")


class ParameterError(UsageError, ValueError):
    """A library function cannot use the value of one of its parameters (exit 2).

    The message names the parameter as Python spells it (``kalman_q``), or as
    ``subject`` describes it; the command line names the option that sets it instead
    (``--kalman-q``), with :meth:`naming`, at its one error boundary, so that no
    library message depends on the command line. A ``ValueError`` too, as Python code
    expects of a bad argument.

    >>> error = ParameterError("window", "must be at least 2, got 1")
    >>> str(error), error.naming("--window")
    ('window must be at least 2, got 1.', '--window must be at least 2, got 1.')
    """

    def __init__(
        self,
        parameter: str,
        problem: str,
        *,
        subject: str | None = None,
        path: str | Path | None = None,
    ) -> None:
        self.parameter = parameter
        self.problem = problem.rstrip(".")
        self.path = path  # the file the value does not fit, when it is about one
        super().__init__(f"{self._prefix()}{subject or parameter} {self.problem}")

    def _prefix(self) -> str:
        return "" if self.path is None else f"{self.path}: "

    def naming(self, name: str) -> str:
        """The message with the parameter called ``name`` (the option that sets it)."""
        return f"{self._prefix()}{name} {self.problem}."


class UnreadablePathError(InputError):
    """The path does not exist, is not readable, or a glob matched nothing."""


class UnknownFormatError(InputError):
    """The file suffix or the requested format/profile is not one ratioscope reads."""


class CorruptFileError(InputError):
    """The file exists but cannot be parsed: truncated, corrupt or of another type."""


class UnsafePickleError(InputError):
    """The file needs arbitrary unpickling, which can run code; refused by default."""

    def __init__(self, path: str | Path | None, detail: str = "") -> None:
        why = (
            "refusing to unpickle it because a pickle can run arbitrary code; "
            "convert it to .pt/.safetensors/.npz, or allow it with `unsafe_pickle` if you trust it"
        )
        super().__init__(path, f"{detail}; {why}" if detail else why)


class NotADumpError(InputError):
    """A readable file of another kind (a text log of samples, a report): names the
    command that takes it."""


class SkippedFileError(NotADumpError):
    """A file of a run that holds no token data of its own (a framework's side table, a
    duplicate written by another rank): a run over many files skips it with a note."""


class DumpKeyError(InputError):
    """A required tensor is missing from the dump."""

    def __init__(
        self, path: str | Path | None, missing: str, found: Iterable[str], hint: str = ""
    ) -> None:
        self.missing = missing
        self.found = sorted(found)
        extra = f" ({hint})" if hint else ""
        super().__init__(
            path, f"missing required key '{missing}'{extra}; keys found: {_fmt_keys(self.found)}"
        )


class ShapeMismatchError(InputError):
    """Two tensors that must align do not."""

    def __init__(
        self,
        path: str | Path | None,
        key: str,
        shape: Sequence[int],
        other_key: str,
        other_shape: Sequence[int],
        expected: str = "",
    ) -> None:
        self.key, self.shape = key, tuple(shape)
        self.other_key, self.other_shape = other_key, tuple(other_shape)
        tail = f" (expected {expected})" if expected else ""
        super().__init__(
            path,
            f"shape mismatch: '{key}' has shape {list(self.shape)} but '{other_key}' has "
            f"shape {list(self.other_shape)}{tail}",
        )


class MaskError(InputError):
    """The mask is not boolean-like (values other than 0/1/True/False)."""


class EmptyDumpError(InputError):
    """The dump has no valid token (or no sequence) to analyse."""


class NonFiniteError(InputError):
    """NaN or infinite values on valid tokens."""

    def __init__(
        self, path: str | Path | None, key: str, count: int, first: tuple[int, ...]
    ) -> None:
        self.key, self.count, self.first = key, count, first
        where = ", ".join(str(i) for i in first)
        super().__init__(
            path,
            f"'{key}' has {count} non-finite value(s) on valid tokens, the first at "
            f"(row, column) = ({where}); fix the dump or set `nonfinite` to 'mask' to mask them",
        )


class JsonLineError(InputError):
    """A line of a JSON-lines file is not valid JSON or lacks what it needs."""

    def __init__(self, path: str | Path | None, line: int, problem: str) -> None:
        self.line = line
        super().__init__(path, f"line {line}: {problem.rstrip('.')}")


class SampleError(InputError):
    """A samples file is malformed (missing field, bad correctness value, ...)."""


class ReportError(InputError):
    """A report JSON is unreadable, of another schema version, or lacks a path."""


class RulesError(InputError):
    """A rules TOML file is malformed."""


class OutputError(InputError):
    """An output the machine will not take: a full disk, a file size limit, a read-only
    or forbidden directory (exit 2; nothing is left half-written)."""


class MergeError(InputError):
    """Reports that cannot be merged (different parameters or schema versions)."""


class RegressionFound(RatioscopeError):
    """``check`` found a rule that does not hold (exit 1)."""

    exit_code = 1
