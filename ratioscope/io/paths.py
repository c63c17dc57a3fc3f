"""What a path given as input is, told from its name before the file is opened.

Commands that take reports beside dumps or samples route each path by its name alone,
so that a mix they cannot use is refused before any work is done.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import pairwise
from pathlib import Path

#: the suffix of every ratioscope report (analyze and eval), in any case
REPORT_SUFFIX = ".json"


def is_report_path(path: str | Path) -> bool:
    """Whether ``path`` names a report (``*.json``) rather than a dump or a samples file.

    >>> is_report_path("runs/report.JSON"), is_report_path("samples.jsonl")
    (True, False)
    """
    return Path(path).suffix.lower() == REPORT_SUFFIX


#: words that read as the value of an on/off option; such an option takes none, so a
#: command line such as ``--quiet true DIR`` makes the word a path that does not exist
FLAG_VALUE_WORDS = frozenset({"true", "false", "yes", "no", "1", "0"})


def flag_given_a_value(
    missing: str | Path, args: Sequence[str], flags: Collection[str]
) -> str | None:
    """The on/off option that a missing input path was probably meant as the value of.

    Args:
        missing: the input path that does not exist, as given.
        args: the command's arguments as typed (options and paths, in order).
        flags: the names of the command's options that take no value (``--quiet``,
            ``-q``).

    Returns:
        The option right before ``missing`` in ``args`` when ``missing`` is one of
        :data:`FLAG_VALUE_WORDS` (any case) and that option is in ``flags``; else None.

    >>> flag_given_a_value("true", ["--quiet", "true", "run/"], {"--quiet", "-q"})
    '--quiet'
    >>> flag_given_a_value("true", ["--json", "true", "run/"], {"--quiet"}) is None
    True
    """
    word = str(missing)
    if word.lower() not in FLAG_VALUE_WORDS:
        return None
    for before, token in pairwise(args):
        if token == word and before in flags:
            return before
    return None


def special_file_kind(path: str | Path) -> str | None:
    """What ``path`` is when it exists but is neither a regular file nor a directory (a
    FIFO, a socket, a device), else None. Reading a FIFO blocks until someone writes to
    it, and a device can be endless, so no command reads one.

    >>> special_file_kind("/dev/null"), special_file_kind("no/such/file")
    ('a character device', None)
    """
    import stat

    try:
        mode = Path(path).stat().st_mode
    except (OSError, ValueError):
        return None
    kinds = {
        stat.S_ISFIFO: "a FIFO (named pipe)",
        stat.S_ISSOCK: "a socket",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
    }
    return next((what for test, what in kinds.items() if test(mode)), None)


def refuse_special_files(words: Sequence[str]) -> None:
    """Refuse the first word of a command line that names a FIFO, a socket or a device
    (as an argument or an option's value, ``--opt=value`` too): ratioscope reads and
    writes regular files, whole, and a special file would block or never end.

    Raises:
        UnreadablePathError: naming the path and what it is.
    """
    from ratioscope.errors import UnreadablePathError

    for word in words:
        value = word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
        if not value or value.startswith("-"):
            continue
        kind = special_file_kind(value)
        if kind is not None:
            raise UnreadablePathError(
                value, f"is {kind}, not a regular file; ratioscope reads and writes regular files"
            )


#: what an empty path (``''``) is refused with, by the command line's parser and the library
EMPTY_PATH = "an empty path ('') was given"


def refuse_file_as_folder(folder: str | Path | None, option: str) -> None:
    """Refuse an output folder (``--tensorboard``) that names an existing file.

    Raises:
        UsageError: naming the option and the file.
    """
    from ratioscope.errors import UsageError

    if folder is not None and Path(folder).exists() and not Path(folder).is_dir():
        raise UsageError(f"{option} {folder}: a file, not a folder; give the folder to write to")


def refuse_empty_path(path: str | Path) -> None:
    """Refuse an empty path (``''``): ``Path("")`` is the current folder, never what was
    meant, and walking it reads the whole tree.

    Raises:
        UnreadablePathError: saying so.
    """
    from ratioscope.errors import UnreadablePathError

    if not str(path).strip():
        raise UnreadablePathError(None, EMPTY_PATH)
