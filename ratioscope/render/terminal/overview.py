"""What ``analyze`` prints: the answer first, the paper tables on request.

Three layouts of the same report (the JSON keeps everything in each):

* ``brief`` (``-q``): the verdict block alone: its headline with the bottom line, every
  finding that is not green in full, the green ones named on one line, the notes;
* ``default``: that block, the inputs, the vitals and one table of key numbers with a
  row per headline quantity of each section (the quantities ``timeline`` follows);
* ``detail`` (``--detail``): the full verdict (every finding in full) and every table,
  the paper reproductions included (CW-GRPO Table 1 and Fig. 3, FPA lambda sweeps,
  TEPO quadrants, QUATRO delta sweep, ...).

At 100 columns the default stays within :data:`DEFAULT_LINES` lines and the brief one
within :data:`BRIEF_LINES` on the bundled run (tests/test_analyze_layout.py).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ratioscope.render.terminal.tables import DASH, print_table
from ratioscope.render.terminal.verdict import (
    STYLES,
    finding_line,
    green_names,
    note_line,
    verdict_headline,
)

if TYPE_CHECKING:
    from ratioscope.judgement.verdict import Verdict
    from ratioscope.report.model import Report

Layout = Literal["brief", "default", "detail"]
#: the most lines each layout prints on the bundled run at 100 columns
DEFAULT_LINES = 60
BRIEF_LINES = 15
#: where each section's key numbers come from, in the order they print
SECTION_ORDER = ("mismatch", "ratios", "covariance", "future_policy", "tepo", "trust_region")
#: what the default layout leaves to --detail, named in its last line
DETAIL_HINT = (
    "paper tables (KPO Table 2, CW-GRPO Table 1 and Fig. 3, FPA lambda sweeps, TEPO "
    "quadrants, QUATRO delta sweep, staleness by mini-batch): --detail; every number: --json"
)


def show_verdict_brief(console: Console, verdict: Verdict, short_notes: bool = False) -> None:
    """The verdict in a few lines: headline, non-green findings in full, the green ones
    by name on one line, then the notes (``short_notes``: by name on one line, with
    where to read them in full)."""
    console.print(Text(verdict_headline(verdict), style=STYLES[verdict.level]))
    for level in ("red", "yellow"):
        for finding in verdict.findings:
            if finding.level == level:
                console.print(finding_line(finding.level, finding.text))
    greens = green_names(verdict)
    if greens:
        console.print(finding_line("green", ", ".join(greens)))
    if short_notes and verdict.notes:
        names = ", ".join(dict.fromkeys(note_name(note.text) for note in verdict.notes))
        console.print(note_line(f"{names} (about the analysis, not the run; in full: --detail)"))
        return
    for note in verdict.notes:
        console.print(note_line(note.text))


def note_name(text: str) -> str:
    """What a note is about: its text up to the first ``:`` or ``(``.

    >>> note_name("FPA approximation: median future/current = 1.0046 vs 0.99745 exact")
    'FPA approximation'
    """
    return re.split(r"[:(]", text, maxsplit=1)[0].strip()


def key_rows(report: Report) -> list[tuple[str, str, str]]:
    """(section, quantity, value) for each headline quantity the report has, the vital
    signs left out (their own table shows them), then the staleness of the last update."""
    from ratioscope.views.timeline import HEADLINES

    document = report.to_dict()
    rows: list[tuple[str, str, str]] = []
    for section in SECTION_ORDER:
        for item in HEADLINES:
            if item.key.split(".", 1)[0] != section:
                continue
            value = item.value(document)
            if value is not None:
                rows.append((section, item.label, f"{value:.4g}"))
        if section == "tepo" and report.tepo is not None:
            band = report.tepo.clip_band
            rows.append(
                (
                    "tepo",
                    f"sequences with w_i outside [1 - {band[0]:g}, 1 + {band[1]:g}]",
                    _share(report.tepo.outside_band),
                )
            )
    if report.staleness is not None and report.staleness.minibatches:
        index, last = list(report.staleness.minibatches.items())[-1]
        first = next(iter(report.staleness.minibatches.values()))
        rows.append(
            (
                "staleness",
                f"z = 0 share, first / last update (mini-batch {index})",
                f"{_share(first.exact_on)} / {_share(last.exact_on)}",
            )
        )
    return rows


def _share(value: float) -> str:
    return DASH if value != value else f"{value:.1%}"  # NaN: no valid token


def key_table(report: Report) -> Table | None:
    """The key numbers of every section, one row per quantity (None when there are none)."""
    rows = key_rows(report)
    if not rows:
        return None
    table = Table(
        title="key numbers by section (trends: ratioscope timeline)", title_justify="left"
    )
    table.add_column("section")
    table.add_column("quantity", overflow="fold")
    table.add_column("value", justify="right")
    previous = None
    for section, label, value in rows:
        table.add_row(section if section != previous else "", label, value)
        previous = section
    return table


def show_analyze(report: Report, verdict: Verdict, console: Console, layout: Layout) -> None:
    """Print ``report`` in ``layout`` (see the module docstring)."""
    from ratioscope.render.terminal.report import short_sequences_note, show_inputs, show_report
    from ratioscope.render.terminal.verdict import show_verdict
    from ratioscope.render.terminal.vitals import show_vitals

    if layout == "detail":
        show_verdict(console, verdict)
        show_report(report, console)
        return
    show_verdict_brief(console, verdict)
    if layout == "brief":
        return
    show_inputs(report, console)
    show_vitals(report, console)
    table = key_table(report)
    if table is not None:
        print_table(console, table)
    # the key numbers include the LFR: say which sequences it leaves out, as --detail does
    short = short_sequences_note(list(report.ratios.items())) if report.ratios else None
    if short:
        console.print(Text(short, style="dim"))
    console.print(Text(DETAIL_HINT, style="dim"))
