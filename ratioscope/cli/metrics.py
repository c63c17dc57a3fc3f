"""``ratioscope metrics``: the rule-addressable keys of an analyze report, explained."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ratioscope.cli._path_params import path_argument

# the catalog imports nothing heavy: --section's choices come from it, so a section added
# to the catalog is listed here too
from ratioscope.report.catalog import catalog_sections

if TYPE_CHECKING:
    from ratioscope.report.catalog import Metric

Report = Annotated[
    Path | None,
    path_argument(
        help="An analyze report JSON (analyze --json, merge --out): list its keys with "
        "their values. Without it, the keys of the report layout.",
        show_default=False,
    ),
]
Search = Annotated[
    str | None,
    typer.Option(
        "--search",
        "-s",
        help="Keep keys whose path, meaning or unit contain every word (case-insensitive).",
        show_default=False,
    ),
]
Section = Annotated[
    str | None,
    typer.Option(
        "--section",
        help="Keep the keys of one section: " + ", ".join(catalog_sections()) + ".",
        show_default=False,
    ),
]
AsJson = Annotated[
    bool, typer.Option("--json", help="Print the keys as JSON (one object per key) instead.")
]


def metrics(
    report: Report = None, search: Search = None, section: Section = None, json: AsJson = False
) -> None:
    """List every key a check rule can address, with its meaning, unit and section.

    A key is a dotted path into the report: * stands for any key of a mapping (a ratio
    variant, a state, a quantile), N for a list position (0, 1, ..., -1 for the last).

    Example: ratioscope metrics run.json --search switch
    """
    from ratioscope.cli._common import stdout_console
    from ratioscope.errors import ParameterError, UsageError
    from ratioscope.report.catalog import metrics as list_metrics

    try:
        rows = list_metrics(report, search=search, section=section)
    except ParameterError as error:
        raise UsageError(error.naming("--section")) from None
    if json:
        import json as json_module

        typer.echo(json_module.dumps([row.to_dict() for row in rows], indent=2))
        return
    _show(rows, with_values=report is not None, console=stdout_console())


def _show(rows: list[Metric], with_values: bool, console: Any) -> None:
    """One table per section: key, value (from a report), unit, meaning."""
    from rich.table import Table
    from rich.text import Text

    if not rows:
        console.print("no key matches")
        return
    for section in dict.fromkeys(row.section for row in rows):
        table = Table(title=section, title_justify="left", show_edge=False)
        table.add_column("key", no_wrap=True)
        if with_values:
            table.add_column("value", justify="right", max_width=40)
        table.add_column("unit")
        table.add_column("meaning")
        for row in rows:
            if row.section == section:
                value = [_value_text(row.value)] if with_values else []
                # plain text: meanings hold brackets (E[r^2]) that are not markup
                cells = [row.key, *value, row.unit, row.meaning]
                table.add_row(*(Text(cell) for cell in cells))
        console.print(table)
    console.print(f"{len(rows)} key(s); * any key of a mapping, N a list position (-1 the last)")


def _value_text(value: Any) -> str:
    if isinstance(value, list):
        shown = ", ".join(_value_text(v) for v in value[:4])
        more = f", ... ({len(value)} values)" if len(value) > 4 else ""
        return f"[{shown}{more}]"
    return "null" if value is None else f"{value:.6g}"
