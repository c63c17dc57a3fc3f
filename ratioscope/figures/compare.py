"""What ``plot compare`` draws, read from a :class:`~ratioscope.views.compare.Comparison`.

Two timelines: one panel per headline with data, A and B over the shared steps, the
diverging steps marked. Two reports (or dumps): one bar per headline, the relative
difference (B − A)/|A|, the diverging ones highlighted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ratioscope.views.compare import Comparison


@dataclass(frozen=True)
class ComparePanel:
    """One small multiple of two timelines: a headline's A and B series.

    Attributes:
        key, title, unit: the headline.
        steps_a, values_a: the shared steps where A has a value, and A's values.
        steps_b, values_b: the same for B.
        diverging: the shared steps where the headline diverges.
        noise_floor: the value at or below which the quantity is float noise, None where
            no such floor applies (:data:`ratioscope.figures.timeline.NOISE_FLOORS`).

    An ESS within 0.01 of 1 on both sides is drawn as 1 − ESS (its title says so), as
    ``plot timeline`` does: 0.9999999999998 is not a readable tick label.
    """

    key: str
    title: str
    unit: str
    steps_a: tuple[int, ...]
    values_a: tuple[float, ...]
    steps_b: tuple[int, ...]
    values_b: tuple[float, ...]
    diverging: tuple[int, ...]
    noise_floor: float | None = None


@dataclass(frozen=True)
class CompareBar:
    """One bar of two reports: a headline's (B − A)/|A| (None: not defined), the two
    values it compares (None where missing), and whether both are at float noise."""

    key: str
    label: str
    rel_diff: float | None
    diverges: bool
    a: float | None = None
    b: float | None = None
    at_noise: bool = False


@dataclass(frozen=True)
class CompareFigure:
    """The figure of a comparison: panels (timelines) or bars (reports).

    Attributes:
        kind: ``"timelines"`` or ``"reports"``, as :attr:`Comparison.kind`.
        label_a, label_b: the legend entries, ``"A: <name>"`` and ``"B: <name>"``.
        panels: for timelines, one per headline with data on either side.
        bars: for reports, one per headline, in headline order.
        subtitle: the divergence rule and what was left out.
    """

    kind: str
    label_a: str
    label_b: str
    panels: tuple[ComparePanel, ...]
    bars: tuple[CompareBar, ...]
    subtitle: str


def compare_figure(comparison: Comparison) -> CompareFigure:
    """The figure data of ``comparison``; headlines without data are left out of panels."""
    from ratioscope.figures.timeline import near_one, noise_floor
    from ratioscope.views.timeline import HEADLINES, function_name

    units = {h.key: h.unit for h in HEADLINES}
    # a run's reward functions are headlines too (their unit: reward)
    units.update({row.key: "reward" for row in comparison.headlines if function_name(row.key)})
    label_a, label_b = f"A: {comparison.a}", f"B: {comparison.b}"
    rule = f"diverging: |B − A| > {comparison.rel:g} · max(|A|, |B|, {comparison.floor:g})"
    if comparison.kind == "timelines":
        panels = []
        for row in comparison.headlines:
            pairs = [(s.step, s.values[row.key]) for s in comparison.steps]
            a_points = [(step, d.a) for step, d in pairs if d.a is not None]
            b_points = [(step, d.b) for step, d in pairs if d.b is not None]
            if not a_points and not b_points:
                continue
            unit, title = units.get(row.key, ""), row.label
            from_one = near_one(unit, [v for _, v in a_points + b_points])
            if from_one:
                a_points = [(step, 1.0 - v) for step, v in a_points]
                b_points = [(step, 1.0 - v) for step, v in b_points]
                title = f"1 − {row.label}"
            panels.append(
                ComparePanel(
                    key=row.key,
                    title=title,
                    unit=unit,
                    steps_a=tuple(p[0] for p in a_points),
                    values_a=tuple(p[1] for p in a_points),
                    steps_b=tuple(p[0] for p in b_points),
                    values_b=tuple(p[1] for p in b_points),
                    diverging=row.diverging_steps,
                    noise_floor=noise_floor(row.key, from_one),
                )
            )
        extra = []
        if comparison.only_a:
            extra.append(f"{_steps(len(comparison.only_a))} only in A")
        if comparison.only_b:
            extra.append(f"{_steps(len(comparison.only_b))} only in B")
        subtitle = "; ".join([f"{_steps(len(comparison.steps))} shared; red: {rule}", *extra])
        return CompareFigure("timelines", label_a, label_b, tuple(panels), (), subtitle)
    bars = tuple(
        CompareBar(
            row.key,
            row.label,
            row.total.rel_diff,
            row.total.diverges,
            row.total.a,
            row.total.b,
            _at_noise(row.key, units.get(row.key, ""), row.total.a, row.total.b),
        )
        for row in comparison.headlines
    )
    missing = sum(1 for bar in bars if bar.rel_diff is None)
    subtitle = f"{label_a} vs {label_b}; red: {rule}"
    if missing:
        subtitle += f"; {missing} headlines without a relative difference (missing, or A = 0)"
    return CompareFigure("reports", label_a, label_b, (), bars, subtitle)


def _at_noise(key: str, unit: str, a: float | None, b: float | None) -> bool:
    """Whether both values of a headline are at or below its float-noise floor."""
    from ratioscope.figures.timeline import near_one, noise_floor

    if a is None or b is None:
        return False
    from_one = near_one(unit, [a, b])
    floor = noise_floor(key, from_one)
    drawn = [1.0 - a, 1.0 - b] if from_one else [a, b]
    return floor is not None and all(abs(v) <= floor for v in drawn)


def _steps(count: int) -> str:
    """``1 step``, ``3 steps``."""
    return f"{count} step{'' if count == 1 else 's'}"
