"""How ``--help`` reads: metavars a shell user knows, and help text that flows.

Typer names a value by its Python type (``<bool>``, ``<list[str]>``, ``{paths}...``),
shows one even for flags, which take none, and prints a docstring's line breaks as they
are in the source, so a paragraph wrapped at 88 columns breaks mid-sentence in an
80-column terminal. :func:`tidy` fixes a built command tree in place, once, where the
group is built (``cli/__init__.py``), so every command and ``docs/cli.md`` agree.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

#: options whose value has a shape of its own: the metavar says it
OPTION_METAVARS = {
    "--map": "KEY=VALUE",
    "--clip": "EPS_LOW,EPS_HIGH",
    "--seq-clip": "EPS_LOW,EPS_HIGH",
    "--on-band": "EPS_LOW,EPS_HIGH",
    "--token-on-band": "BAND",
    "--seq-on-band": "BAND",
    "--fpa-lambda-sweep": "NUMBERS",
    "--delta-sweep": "NUMBERS",
    "--qv": "NUMBERS",
    "--k": "K,...",
    "--sections": "NAME,...",
    "--columns": "NAME,...",
}
#: an argument's metavar: PATH for dumps and directories, FILE for one file each
ARGUMENT_METAVARS = {"paths": "PATH", "samples": "PATH", "reports": "REPORT", "report": "REPORT"}
#: a value's metavar by the Python type typer reads it as
TYPE_METAVARS = {str: "TEXT", int: "INTEGER", float: "NUMBER", Path: "FILE"}


def tidy(command: Any) -> None:
    """Fix the help of ``command`` and of every command under it (a click command tree)."""
    command.help = flowing(command.help)
    for param in command.params:
        _tidy_param(param)
    _no_flag_metavar_on_help(command)
    for sub in getattr(command, "commands", {}).values():
        tidy(sub)


def flowing(text: str | None) -> str | None:
    """``text`` with the line breaks inside each paragraph joined, so that the terminal
    wraps it at its own width; blank lines still separate paragraphs.

    >>> flowing("One sentence\\n   goes on.\\n\\nExample: x")
    'One sentence goes on.\\n\\nExample: x'
    """
    if text is None:
        return None
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        paragraph if paragraph.startswith("\b") else " ".join(paragraph.split())
        for paragraph in paragraphs
    )


def _tidy_param(param: Any) -> None:
    if param.param_type_name == "argument":
        _tidy_argument(param)
    elif param.metavar is None:
        param.metavar = _option_metavar(param)


def _option_metavar(option: Any) -> str | None:
    if option.is_flag:
        return ""  # a flag takes no value
    for name in option.opts:
        if name in OPTION_METAVARS:
            return OPTION_METAVARS[name]
    descriptor = option.type_descriptor
    if descriptor.is_choice:
        return None  # typer lists the choices
    annotation = descriptor.annotation
    element = getattr(annotation, "__args__", (annotation,))[0] if descriptor.is_list else None
    return TYPE_METAVARS.get(element if element is not None else annotation, "TEXT")


def _tidy_argument(argument: Any) -> None:
    name = ARGUMENT_METAVARS.get(argument.name, argument.name.upper())
    many = argument.nargs != 1
    argument.metavar = f"{name}..." if many else name
    # the name says what the value is; typer's type column would repeat it in Python
    argument.display_type_rich = lambda ctx: None
    usage = argument.metavar if argument.required else f"[{argument.metavar}]"
    argument._usage_display_name = lambda: usage


def _no_flag_metavar_on_help(command: Any) -> None:
    """``-h/--help`` is made on demand, after :func:`tidy` ran: tidy it when it is."""
    made = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = made(ctx)
        if option is not None:
            option.metavar = ""
        return option

    command.get_help_option = get_help_option
