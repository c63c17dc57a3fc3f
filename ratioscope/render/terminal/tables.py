"""Cell formatting and table printing shared by the terminal renderers.

Kept apart from ``terminal`` and ``sections`` so that both import it and neither
imports the other's module at load time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from ratioscope.report.model import Report

DASH = "—"

Renderer = Callable[["Report", Console], None]
"""A report section printer: takes the :class:`Report` and a Console, prints its tables."""


def fmt(value: Any, digits: int = 4) -> str:
    """Numbers with ``digits`` significant digits; None as a dash.

    >>> fmt(1234567), fmt(0.000123456), fmt(None), fmt(True), fmt(float("-inf"))
    ('1,234,567', '0.0001235', '—', 'yes', '-inf')
    """
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value == 0:
            return "0"
        return f"{value:.{digits}g}"
    return str(value)


def pct(value: Any) -> str:
    """A fraction in percent with two decimals; None as a dash.

    >>> pct(0.12345), pct(None)
    ('12.35%', '—')
    """
    return DASH if value is None else f"{100 * value:.2f}%"


def known(value: Any) -> Any:
    """``value``, or None for a non-finite float: the report's JSON stores those as null,
    so a fresh report and a stored one print alike.

    >>> known(float("nan")), known(float("inf")), known(2.0), known(None)
    (None, None, 2.0, None)
    """
    return None if isinstance(value, float) and not math.isfinite(value) else value


def num(value: Any, digits: int = 4) -> str:
    """:func:`fmt` of a report value: non-finite floats (null in the JSON) as a dash.

    >>> num(float("nan")), num(0.5)
    ('—', '0.5')
    """
    return fmt(known(value), digits)


def clip_band(eps: Any) -> str:
    """The clip band [1 - eps_low, 1 + eps_high] that a pair of eps sets, as ratio bounds:
    the option takes eps, but a reader compares ratios with the band itself.

    >>> clip_band((0.2, 0.28)), clip_band(None)
    ('[0.8, 1.28]', '—')
    """
    if not eps:
        return DASH
    low, high = eps
    # rounded to 12 digits, so 1 - 0.2 prints 0.8 and not 0.8000000000000000444
    return f"[{num(round(1 - low, 12), 6)}, {num(round(1 + high, 12), 6)}]"


def share(value: Any) -> str:
    """:func:`pct` of a report value: non-finite floats (null in the JSON) as a dash."""
    return pct(known(value))


def print_table(console: Console, table: Table) -> None:
    """Print ``table``; when it is wider than the console, print it transposed (its rows
    become columns), so that narrow terminals never cut a number short.

    Most tables here have a few rows (variants, policy pairs) and many columns, so the
    transposed form fits 80 columns; a table too wide either way is printed as is, its
    cells folded rather than cut.
    """
    from rich.measure import Measurement

    unbounded = console.options.update_width(1 << 16)  # measure without wrapping
    needed = Measurement.get(console, unbounded, table).maximum
    if needed <= console.width or len(table.columns) <= 2:
        console.print(table)
        return
    flipped = transposed(table)
    if Measurement.get(console, unbounded, flipped).maximum <= console.width:
        console.print(flipped)
    else:
        console.print(table)


def transposed(table: Table) -> Table:
    """``table`` with rows and columns swapped (title and caption kept)."""
    columns = list(table.columns)
    flipped = Table(
        title=table.title,
        title_justify="left",
        caption=table.caption,
        caption_justify="left",
    )
    flipped.add_column(columns[0].header, justify="left", overflow="fold")
    for label in columns[0].cells:
        flipped.add_column(label, justify="right", overflow="fold")
    for column in columns[1:]:
        flipped.add_row(column.header, *column.cells)
    return flipped
