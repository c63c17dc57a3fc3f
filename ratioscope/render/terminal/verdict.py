"""The health verdict block that opens ``analyze`` (and ``timeline``): one line a finding.

Each line starts with its level as a word (``green``, ``yellow``, ``RED``), so the block
reads the same without colour (CI logs, files); colour only repeats it. Notes about the
analysis itself follow the findings, tagged ``note``, and never count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from ratioscope.judgement.verdict import Level, Verdict

STYLES: dict[str, str] = {"green": "green", "yellow": "bold yellow", "red": "bold red"}
TAGS: dict[str, str] = {"green": "green", "yellow": "yellow", "red": "RED"}
NOTE_TAG = "note"
NOTE_STYLE = "dim"


def verdict_counts(verdict: Verdict) -> str:
    """``2 yellow, 7 green`` (worst level first), ``1 note`` after a semicolon."""
    counts = [
        f"{verdict.count(level)} {TAGS[level]}"
        for level in ("red", "yellow", "green")
        if verdict.count(level)
    ]
    summary = ", ".join(counts) if counts else "nothing to judge"
    if verdict.notes:
        summary += f"; {len(verdict.notes)} note{'s' if len(verdict.notes) > 1 else ''}"
    return summary


def verdict_headline(verdict: Verdict) -> str:
    """``health: 1 problem: policy drift (1 yellow, 7 green; see docs/health.md)`` or
    ``health: nothing to do (8 green; 1 note; ...)``: the bottom line, then the counts
    and where the thresholds and their sources are."""
    overridden = (
        f"; thresholds overridden: {', '.join(verdict.overridden)}" if verdict.overridden else ""
    )
    # "health: healthy: ..." would say it twice
    bottom = verdict.bottom_line().removeprefix("healthy: ")
    return f"health: {bottom} ({verdict_counts(verdict)}; see docs/health.md{overridden})"


def finding_line(level: Level, text: str) -> Text:
    """One finding: its level as a fixed-width word, then the sentence."""
    return Text.assemble((f"  {TAGS[level]:<8}", STYLES[level]), text)


def note_line(text: str) -> Text:
    """One note about the analysis: ``note`` in place of a level."""
    return Text.assemble((f"  {NOTE_TAG:<8}", NOTE_STYLE), text)


def green_names(verdict: Verdict) -> list[str]:
    """The short names of the green findings, each once, leaving out a name that is also
    yellow or red (the mismatch's ESS green beside its k3 yellow would read "the mismatch
    is yellow and green")."""
    worse = {f.short_name for f in verdict.findings if f.level != "green"}
    greens = (f.short_name for f in verdict.findings if f.level == "green")
    return [name for name in dict.fromkeys(greens) if name not in worse]


def green_summary(verdict: Verdict) -> str | None:
    """``12 checks within their thresholds: train/inference mismatch, policy drift, ...``
    (each short name once, none that is also yellow or red), or None when no finding is
    green."""
    greens = [f for f in verdict.findings if f.level == "green"]
    if not greens:
        return None
    names = green_names(verdict)
    checks = f"{len(greens)} check{'s' if len(greens) > 1 else ''}"
    return f"{checks} within their thresholds: {', '.join(names)}"


def show_verdict(console: Console, verdict: Verdict, compact: bool = False) -> None:
    """Print the verdict block: a headline with the bottom line, one line per finding,
    then one per note. ``compact`` prints the yellow and red findings one a line and
    the green ones as one line of their short names."""
    console.print(Text(verdict_headline(verdict), style=STYLES[verdict.level]))
    for finding in verdict.findings:
        if not compact or finding.level != "green":
            console.print(finding_line(finding.level, finding.text))
    summary = green_summary(verdict) if compact else None
    if summary is not None:
        console.print(finding_line("green", summary))
    for note in verdict.notes:
        console.print(note_line(note.text))
