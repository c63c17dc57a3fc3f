"""The CLI reference in ``docs/cli.md``, generated from ``--help``.

Regenerate with ``python -m ratioscope.cli.reference > docs/cli.md``; a test fails when
the file is stale, so the docs cannot fall behind the commands.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typer.models import CommandInfo

WIDTH = "100"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _commands() -> list[list[str]]:
    """Every command line to document: the app, each command, ``plot`` and its kinds."""
    from ratioscope.cli import app
    from ratioscope.cli.plot import plot_app

    commands: list[list[str]] = [[]]
    commands += [[_name(info)] for info in app.registered_commands]
    commands.append(["plot"])
    commands += [["plot", _name(info)] for info in plot_app.registered_commands]
    return commands


def _name(info: CommandInfo) -> str:
    # every command is registered under an explicit name (app.command("info") ...)
    assert info.name is not None, info
    return info.name


def _help(args: list[str]) -> str:
    from typer.testing import CliRunner

    from ratioscope.cli import app

    env = {"COLUMNS": WIDTH, "TERM": "dumb", "NO_COLOR": "1", "FORCE_COLOR": None}
    result = CliRunner().invoke(app, [*args, "--help"], env=env, color=False)
    text = _ANSI.sub("", result.stdout)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def render_reference() -> str:
    """The whole reference as Markdown."""
    parts = [
        "# CLI reference",
        "",
        "Generated from `--help` by `python -m ratioscope.cli.reference > docs/cli.md`;",
        "the test suite fails when this file is out of date.",
        "",
        "Exit codes: 0 ok; 1 `check` found a regression; 2 bad input or usage (one line on",
        "stderr naming the file, key, shape or line); 3 internal error; 4 `watch --exit-on`",
        "saw the verdict reach its level; 130 and 143 interrupted (Ctrl-C, SIGTERM). Set",
        "`RATIOSCOPE_DEBUG=1` to see tracebacks.",
    ]
    for args in _commands():
        title = " ".join(["ratioscope", *args])
        parts += ["", f"## {title}", "", "```text", _help(args), "```"]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(render_reference(), end="")
