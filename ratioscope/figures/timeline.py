"""What ``plot timeline`` draws: one panel per headline that has data, step on the x axis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ratioscope.timeline import Timeline


@dataclass(frozen=True)
class TimelinePanel:
    """One small multiple: a headline's series.

    Attributes:
        key: the headline key.
        title: what it is, in plain words.
        unit: the y axis unit.
        steps, values: the steps where the headline has a value, and the values.
        flagged: the steps flagged as a change (a subset of ``steps``).
    """

    key: str
    title: str
    unit: str
    steps: tuple[int, ...]
    values: tuple[float, ...]
    flagged: tuple[int, ...]


@dataclass(frozen=True)
class TimelineFigure:
    """The panels and a subtitle naming the run and the change rule."""

    panels: tuple[TimelinePanel, ...]
    subtitle: str


def timeline_figure(timeline: Timeline, source: str = "") -> TimelineFigure:
    """The panels of ``timeline``: headlines without any value are left out."""
    panels = []
    for item in timeline.headlines:
        points = [
            (step.step, value, item.key in step.flags)
            for step in timeline.steps
            if (value := step.values.get(item.key)) is not None
        ]
        if not points:
            continue
        title = item.label
        if item.unit == "fraction" and all(abs(1.0 - p[1]) < 0.01 for p in points):
            # an ESS of 0.99999...: its distance from 1 is what can be read
            points = [(s, 1.0 - v, f) for s, v, f in points]
            title = f"1 − {item.label}"
        panels.append(
            TimelinePanel(
                key=item.key,
                title=title,
                unit=item.unit,
                steps=tuple(p[0] for p in points),
                values=tuple(p[1] for p in points),
                flagged=tuple(p[0] for p in points if p[2]),
            )
        )
    rule = timeline.params.get("change", {})
    subtitle = (
        f"{source + ': ' if source else ''}{len(timeline.steps)} steps; red marks a change "
        f"(more than {rule.get('k')} robust sd from the median of the last "
        f"{rule.get('window')} steps)"
    )
    return TimelineFigure(panels=tuple(panels), subtitle=subtitle)


def timeline_or_analysis(paths: Sequence[str | Path], **options: Any) -> tuple[Timeline, str]:
    """A timeline from one timeline JSON file (as stored), or from dumps or analyze
    reports (:func:`ratioscope.timeline.timeline` with ``options``); and a short name of
    the source."""
    from ratioscope.io.paths import is_report_path
    from ratioscope.report_io import read_json_report
    from ratioscope.timeline import Timeline, timeline

    first = Path(paths[0])
    if len(paths) == 1 and is_report_path(first):
        document = read_json_report(first)
        if document.get("kind") == "timeline":
            return Timeline.from_dict(document, source=first), first.name
    result = timeline(paths, **options)
    return result, first.name if len(paths) == 1 else f"{len(paths)} inputs"
