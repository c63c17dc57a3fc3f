"""Whether the files of a run record the trainer settings in force.

The settings in force are those recorded in the run's first file
(:func:`ratioscope.data.trainer_settings.resolve`; an option the user gives wins over them).
A run whose later files record other settings (a resumed run with a changed config, two
runs in one directory) is still analysed with the first file's, and
:func:`differing_settings` says so in one warning naming the files and the keys that
differ.

Each file's settings are read from the pickle of its ``.pt`` archive without unpickling
it (:mod:`pickletools` walks the opcodes; nothing is run or imported): the capture stores
them as one JSON string under :data:`~ratioscope.data.trainer_settings.SETTINGS_KEY`, and a
file whose pickle does not name that key is passed over after one substring test.
"""

from __future__ import annotations

import pickletools
import zipfile
from collections.abc import Iterable
from pathlib import Path

from ratioscope.data.trainer_settings import SETTINGS_KEY, TrainerSettings, read_recorded

#: files named in the warning; the others are counted
SHOWN = 3


def recorded_text(path: Path) -> str | None:
    """The settings JSON a capture stored in ``path`` (a ``.pt`` file), or None.

    A zip archive's pickle is scanned, never unpickled; a file in torch's legacy
    format is read as :func:`~ratioscope.data.trainer_settings.read_recorded` reads it.
    """
    if path.suffix.lower() not in (".pt", ".pth"):
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if len(names) != 1:
                return None
            data = archive.read(names[0])
    except zipfile.BadZipFile:
        legacy = read_recorded(path)
        return legacy.to_json() if legacy is not None else None
    except (OSError, KeyError, ValueError, RuntimeError):
        return None  # an unreadable file: the analysis says what is wrong with it
    if SETTINGS_KEY.encode() not in data:
        return None
    return _value_after_key(data)


def _value_after_key(data: bytes) -> str | None:
    """The string pushed right after the string :data:`SETTINGS_KEY` in a pickle (a
    dict's key and its value; memo operations in between are skipped).

    The opcodes are walked from the one that pushes the key, found from the key's bytes
    (a run's many files are read in milliseconds); where the bytes before it are not
    such an opcode, from the start of the pickle."""
    key = SETTINGS_KEY.encode()
    at = data.find(key)
    size = len(key)
    for start, head in (
        (at - 2, b"\x8c" + bytes([size])),
        (at - 5, b"X" + size.to_bytes(4, "little")),
    ):
        if at >= 0 and size < 256 and start >= 0 and data[start:at] == head:
            found = _scan_from(data[start:])
            if found is not None:
                return found
    return _scan_from(data)


def _scan_from(data: bytes) -> str | None:
    """The string pushed right after :data:`SETTINGS_KEY` in the opcodes of ``data``."""
    after_key = False
    try:
        for opcode, argument, _ in pickletools.genops(data):
            if "PUT" in opcode.name or opcode.name == "MEMOIZE":
                continue
            if after_key:
                return argument if isinstance(argument, str) else None
            after_key = isinstance(argument, str) and argument == SETTINGS_KEY
    except (ValueError, EOFError):  # a damaged pickle: the loader names the problem
        return None
    return None


def differing_keys(used: TrainerSettings, other: TrainerSettings) -> list[str]:
    """The names in which ``other`` differs from ``used``: the framework, each setting,
    the reward functions."""
    keys = ["framework"] if used.framework != other.framework else []
    names = sorted(set(used.settings) | set(other.settings))
    keys += [n for n in names if used.settings.get(n) != other.settings.get(n)]
    if used.reward_functions != other.reward_functions:
        keys.append("reward functions")
    return keys


def differing_settings(paths: Iterable[Path], used: TrainerSettings | None) -> str | None:
    """One warning when some of ``paths`` record settings other than ``used`` (the
    settings in force, read from the first file; None: none are), or None.

    Files that record no settings are not compared (a file of another kind, or a
    capture made without them).
    """
    baseline = used.to_json() if used is not None else None
    differing: list[tuple[Path, list[str]]] = []
    for path in paths:
        text = recorded_text(path)
        if text is None or text == baseline:
            continue
        other = TrainerSettings.from_json(text)
        if other is None:
            continue
        keys = differing_keys(used, other) if used is not None else ["recorded"]
        if keys:
            differing.append((path, keys))
    if not differing:
        return None
    named = "; ".join(
        str(path) if used is None else f"{path} ({', '.join(ks)})" for path, ks in differing[:SHOWN]
    )
    more = f" and {len(differing) - SHOWN} more" if len(differing) > SHOWN else ""
    if used is None:
        return (
            f"trainer settings: the run's first file records none, so none are in force, "
            f"but {len(differing)} file(s) record some: {named}{more}; give --trainer or "
            "the options (--clip, --max-length) to choose"
        )
    keys = list(dict.fromkeys(k for _, ks in differing for k in ks))
    return (
        f"trainer settings: {len(differing)} file(s) record settings other than those in "
        f"force ({used.source or used.name}), in {', '.join(keys)}: {named}{more}; every "
        "file is analysed with the settings in force (an option given wins over them)"
    )
