"""What ``plot timeline`` draws: one panel per headline that has data, step on the x axis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ratioscope.views.timeline import Timeline

#: the log-ratio |z| that float32 rounding alone leaves between two computations of the
#: same log-prob (a few float32 ulps, 2^-23 relative, of log-probs of order 1 to 10): a
#: mismatch at or below the floors it implies is float noise, not two different policies
FLOAT32_LOG_RATIO_NOISE = 1e-6
_K3_FLOOR = FLOAT32_LOG_RATIO_NOISE**2 / 2  # k3 = E[r - 1 - log r] ~ E[z^2] / 2
_ESS_FLOOR = FLOAT32_LOG_RATIO_NOISE**2  # 1 - ESS ~ Var(r) ~ E[z^2]
#: per headline key: the floor of its drawn value (1 − ESS for an ESS) below which it is
#: at float noise
NOISE_FLOORS = {
    "mismatch.policy.k3": _K3_FLOOR,
    "mismatch.rollout.k3": _K3_FLOOR,
    "mismatch.policy.ess": _ESS_FLOOR,
    "mismatch.rollout.ess": _ESS_FLOOR,
}


def near_one(unit: str, values: Sequence[float]) -> bool:
    """Whether a fraction's values all lie within 0.01 of 1 (an ESS of 0.99999...): its
    distance from 1 is then what can be read, and is drawn instead."""
    return unit == "fraction" and bool(values) and all(abs(1.0 - v) < 0.01 for v in values)


def noise_floor(key: str, from_one: bool) -> float | None:
    """The float-noise floor of a drawn headline (an ESS's only when drawn as 1 − ESS)."""
    if key.endswith(".ess") and not from_one:
        return None
    return NOISE_FLOORS.get(key)


@dataclass(frozen=True)
class TimelinePanel:
    """One small multiple: a headline's series.

    Attributes:
        key: the headline key.
        title: what it is, in plain words.
        unit: the y axis unit.
        steps, values: the steps where the headline has a value, and the values.
        flagged: the steps flagged as a change (a subset of ``steps``).
        noise_floor: the value at or below which the quantity is float noise
            (:data:`NOISE_FLOORS`), None where no such floor applies.
    """

    key: str
    title: str
    unit: str
    steps: tuple[int, ...]
    values: tuple[float, ...]
    flagged: tuple[int, ...]
    noise_floor: float | None = None


@dataclass(frozen=True)
class TimelineFigure:
    """The panels, a subtitle naming the run and the change rule, and the verdict after
    each step.

    Attributes:
        levels: (step, level) of each step with a per-step verdict; the panels shade the
            yellow and red ones.
    """

    panels: tuple[TimelinePanel, ...]
    subtitle: str
    levels: tuple[tuple[int, str], ...] = ()


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
        from_one = near_one(item.unit, [p[1] for p in points])
        if from_one:
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
                noise_floor=noise_floor(item.key, from_one),
            )
        )
    rule = timeline.params.get("change", {})
    subtitle = (
        f"{source + ': ' if source else ''}{len(timeline.steps)} steps; red marks a change "
        f"(more than {rule.get('k')} robust sd from the median of the last "
        f"{rule.get('window')} steps)"
    )
    levels = tuple(
        (step.step, level)
        for step, level in zip(timeline.steps, timeline.levels(), strict=True)
        if level is not None
    )
    if levels:
        firsts = [
            f"first {name} at step {found}"
            for name, ranks in (("yellow", ("yellow", "red")), ("red", ("red",)))
            if (found := next((s for s, level in levels if level in ranks), None)) is not None
        ]
        subtitle += "; shading: the verdict after each step, yellow or red" + (
            f" ({', '.join(firsts)})" if firsts else " (green throughout)"
        )
    return TimelineFigure(panels=tuple(panels), subtitle=subtitle, levels=levels)


def timeline_or_analysis(paths: Sequence[str | Path], **options: Any) -> tuple[Timeline, str]:
    """A timeline from one timeline JSON file (as stored), or from dumps or analyze
    reports (:func:`ratioscope.views.timeline.timeline` with ``options``); and a short name of
    the source."""
    from ratioscope.io.documents import read_json_report
    from ratioscope.io.paths import is_report_path
    from ratioscope.views.timeline import Timeline, timeline

    first = Path(paths[0])
    if len(paths) == 1 and is_report_path(first):
        document = read_json_report(first)
        if document.get("kind") == "timeline":
            return Timeline.from_dict(document, source=first), first.name
    result = timeline(paths, **options)
    return result, first.name if len(paths) == 1 else f"{len(paths)} inputs"
