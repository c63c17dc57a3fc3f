"""The health verdict block that opens ``analyze`` (and ``timeline``): one line a finding.

Each line starts with its level as a word (``green``, ``yellow``, ``RED``), so the block
reads the same without colour (CI logs, files); colour only repeats it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from ratioscope.verdict import Level, Verdict

STYLES: dict[str, str] = {"green": "green", "yellow": "bold yellow", "red": "bold red"}
TAGS: dict[str, str] = {"green": "green", "yellow": "yellow", "red": "RED"}


def verdict_headline(verdict: Verdict) -> str:
    """``health: 2 yellow, 7 green`` (worst level first; the thresholds' page named)."""
    counts = [
        f"{verdict.count(level)} {TAGS[level]}"
        for level in ("red", "yellow", "green")
        if verdict.count(level)
    ]
    overridden = (
        f"; thresholds overridden: {', '.join(verdict.overridden)}" if verdict.overridden else ""
    )
    summary = ", ".join(counts) if counts else "nothing to judge"
    return f"health: {summary} (thresholds and sources: docs/health.md{overridden})"


def finding_line(level: Level, text: str) -> Text:
    """One finding: its level as a fixed-width word, then the sentence."""
    return Text.assemble((f"  {TAGS[level]:<8}", STYLES[level]), text)


def show_verdict(console: Console, verdict: Verdict) -> None:
    """Print the verdict block: a headline, then one line per finding."""
    console.print(Text(verdict_headline(verdict), style=STYLES[verdict.level]))
    for finding in verdict.findings:
        console.print(finding_line(finding.level, finding.text))
