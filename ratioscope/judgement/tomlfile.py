"""TOML files shared by ``check`` rules and verdict thresholds: reading, numbers, hints.

A rules file holds ``[[rule]]`` tables (:mod:`ratioscope.judgement.rules`) and, optionally, a
``[thresholds]`` table (:mod:`ratioscope.verdict`); both read it through here, so a
malformed file gets the same one-sentence error whichever command reads it.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ratioscope.errors import RulesError


def toml_module(source: str) -> Any:
    """``tomllib`` (Python >= 3.11) or ``tomli``; a RulesError naming ``source`` if neither."""
    try:
        import tomllib
    except ImportError:
        pass
    else:
        return tomllib
    try:
        import tomli
    except ImportError:
        raise RulesError(
            source,
            "reading TOML rules on Python 3.10 needs the 'tomli' package "
            "(pip install tomli); Python 3.11 and later have it built in",
        ) from None
    return tomli


def parse_toml(text: str, source: str | Path) -> dict[str, Any]:
    """The document of a TOML text; invalid TOML is a RulesError naming ``source``."""
    source = str(source)
    toml = toml_module(source)
    from ratioscope.io.jsontext import MAX_DEPTH, too_deep

    try:
        document = dict(toml.loads(text))
    except toml.TOMLDecodeError as error:
        raise RulesError(source, f"not valid TOML ({error})") from None
    except RecursionError:
        raise RulesError(
            source, f"not valid TOML (nested deeper than {MAX_DEPTH} levels)"
        ) from None
    except ValueError as error:  # the interpreter's limit on the digits of an int
        raise RulesError(source, f"not valid TOML ({str(error).split(':')[0]})") from None
    if too_deep(document):
        raise RulesError(source, f"not valid TOML (nested deeper than {MAX_DEPTH} levels)")
    return document


def read_text(path: str | Path, what: str = "the rules file") -> str:
    """A TOML file's text; unreadable or non-UTF-8 files are RulesErrors."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise RulesError(path, f"cannot read {what} ({error.strerror or error})") from None
    except UnicodeDecodeError:
        raise RulesError(path, f"{what} is not UTF-8 text") from None


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read and parse a TOML file."""
    return parse_toml(read_text(path), path)


def suggest(key: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known key, or nothing."""
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def number(value: Any, where: str, key: str, source: str) -> float:
    """A finite number from a TOML value, or a RulesError saying what ``key`` got."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RulesError(
            source, f"{where}: '{key}' must be a number, got {type(value).__name__} {value!r}"
        )
    try:
        converted = float(value)
    except OverflowError:  # an integer of hundreds of digits
        raise RulesError(
            source,
            f"{where}: '{key}' is an integer too large for a float ({len(str(value))} digits)",
        ) from None
    if not math.isfinite(converted):
        raise RulesError(source, f"{where}: '{key}' must be a finite number, got {value}")
    return converted
