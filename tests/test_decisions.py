"""docs/decisions.md: every option it names exists, with the default it states.

The defaults are read from the library (``AnalysisParams``, the keyword defaults of
``evaluate_ucc``), the options from the command line's own parameter list, so the page
fails this test as soon as either drifts from what it says.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import typer

from ratioscope.cli import app
from ratioscope.cli._options import PARAMETER_OPTIONS
from ratioscope.data.params import AnalysisParams
from ratioscope.evaluation import evaluate_ucc
from ratioscope.functional.token_stats import EXACT_ON_BAND

PAGE = Path(__file__).resolve().parents[1] / "docs" / "decisions.md"
#: `--flag value` and `parameter=value` in the "ratioscope" column
FLAG = re.compile(r"`(--[a-z][a-z-]*) ([^`]+)`")
SETTING = re.compile(r"`([a-z_][a-z0-9_]*)=([^`]+)`")


def _rows() -> list[list[str]]:
    rows = []
    for line in PAGE.read_text().splitlines():
        # cells split on the pipes that are not escaped (\| is a |z| in a cell)
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if line.startswith("|") and cells[0] not in ("choice", "---"):
            rows.append(cells)
    return rows


def _library_defaults() -> dict[str, object]:
    defaults: dict[str, object] = {f.name: f.default for f in fields(AnalysisParams)}
    for name, parameter in inspect.signature(evaluate_ucc).parameters.items():
        if parameter.default is not inspect.Parameter.empty:
            defaults.setdefault(name, parameter.default)
    return defaults


def _cli_flags() -> set[str]:
    """Every option of every command and subcommand."""
    found: set[str] = set()

    def walk(command: Any, parent: Any) -> None:
        context = command.context_class(command, parent=parent, info_name=command.name)
        for parameter in command.params:
            found.update(parameter.opts)
        if hasattr(command, "list_commands"):  # a group (typer may bring its own click)
            for name in command.list_commands(context):  # commands load lazily
                sub = command.get_command(context, name)
                if sub is not None:
                    walk(sub, context)

    walk(typer.main.get_command(app), None)
    return found


def _parse(text: str) -> object:
    if text == "exact":
        return EXACT_ON_BAND
    parts = text.split(",")
    try:
        numbers = tuple(float(p) for p in parts)
    except ValueError:
        return text
    return numbers if len(numbers) > 1 else numbers[0]


def _same(stated: object, default: object) -> bool:
    if isinstance(default, (tuple, list)):
        stated = stated if isinstance(stated, tuple) else (stated,)
        return len(stated) == len(default) and all(map(_same, stated, default))
    if isinstance(default, (int, float)) and isinstance(stated, float):
        return math.isclose(stated, default, rel_tol=1e-12, abs_tol=0.0)
    return stated == default


def test_every_option_the_decisions_page_names_exists_with_its_stated_default():
    rows = _rows()
    assert len(rows) >= 20  # the three tables
    by_option = {flag: name for name, flag in PARAMETER_OPTIONS.items()}
    defaults, flags = _library_defaults(), _cli_flags()
    checked = 0
    for cells in rows:
        assert len(cells) == 5, cells[0]
        ours = cells[3]
        for flag, value in FLAG.findall(ours):
            assert flag in flags, f"{cells[0]}: no command has {flag}"
            name = by_option[flag]
            assert _same(_parse(value), defaults[name]), f"{cells[0]}: {flag} {value}"
            checked += 1
        for name, value in SETTING.findall(ours):
            assert _same(_parse(value), defaults[name]), f"{cells[0]}: {name}={value}"
            checked += 1
    assert checked >= 14


def test_the_parser_tells_a_wrong_default():
    defaults = _library_defaults()
    assert _same(_parse("3e-4,4e-4"), defaults["on_band"])
    assert not _same(_parse("3e-4,5e-4"), defaults["on_band"])
    assert _same(_parse("exact"), defaults["token_on_band"])
    assert not _same(_parse("0.7"), defaults["threshold"])
    assert not _same(_parse("skip"), defaults["mask_policy"])
