"""Two runs side by side: the headline quantities of A and B, and where they diverge.

:func:`compare` takes two analyze reports (or dumps, analysed with the default options)
or two timelines, and reads the headline quantities that a timeline follows
(:data:`ratioscope.views.timeline.HEADLINES`, each read with :meth:`~ratioscope.timeline.
Headline.value`), so a comparison and a timeline always speak of the same numbers.

Two values *diverge* when

    |B − A| > rel · max(|A|, |B|, floor)

with ``rel`` = :data:`DEFAULT_REL` (20 %) and ``floor`` = :data:`DEFAULT_FLOOR` (1e-6) by
default: a relative rule, symmetric in A and B, that does not flag float noise of a
quantity close to zero (a train/inference k3 of 1e-13 against 3e-13).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ratioscope.report.model import Report
    from ratioscope.views.timeline import Headline, Timeline

#: the default relative divergence threshold: B and A diverge when they differ by more
#: than 20 % of the larger of the two
DEFAULT_REL = 0.2
#: the default absolute floor of the divergence rule's scale (values below it count as 0)
DEFAULT_FLOOR = 1e-6

#: what :func:`compare` accepts for each side
Side = str | Path | Mapping[str, Any]


@dataclass(frozen=True)
class Difference:
    """One headline of A against B.

    Attributes:
        a, b: the values (None: missing on that side).
        diff: B − A (None when either is missing).
        rel_diff: (B − A) / |A| (None when either is missing or A is 0).
        diverges: |B − A| > rel · max(|A|, |B|, floor).
    """

    a: float | None
    b: float | None
    diff: float | None
    rel_diff: float | None
    diverges: bool


def difference(
    a: float | None, b: float | None, rel: float = DEFAULT_REL, floor: float = DEFAULT_FLOOR
) -> Difference:
    """A against B, with the divergence rule of this module.

    >>> d = difference(0.5, 0.75)
    >>> d.diff, d.rel_diff, d.diverges
    (0.25, 0.5, True)
    >>> difference(1e-13, 3e-13).diverges, difference(None, 1.0).diff
    (False, None)
    """
    if a is None or b is None:
        return Difference(a, b, None, None, False)
    diff = b - a
    return Difference(
        a=a,
        b=b,
        diff=diff,
        rel_diff=diff / abs(a) if a != 0 else None,
        diverges=abs(diff) > rel * max(abs(a), abs(b), floor),
    )


@dataclass(frozen=True)
class HeadlineComparison:
    """One row of the comparison.

    Attributes:
        key, label, short: the headline (:class:`ratioscope.views.timeline.Headline`).
        total: A against B; for timelines, the means over the shared steps where both
            have a value.
        diverging_steps: for timelines, the shared steps where the headline diverges.
    """

    key: str
    label: str
    short: str
    total: Difference
    diverging_steps: tuple[int, ...] = ()


@dataclass(frozen=True)
class StepComparison:
    """One shared step of two timelines: headline key -> A against B."""

    step: int
    values: dict[str, Difference]

    @property
    def diverging(self) -> tuple[str, ...]:
        """The keys of the headlines that diverge at this step."""
        return tuple(key for key, value in self.values.items() if value.diverges)


@dataclass(frozen=True)
class Comparison:
    """Result of :func:`compare`.

    Attributes:
        kind: ``"reports"`` (two analyze reports) or ``"timelines"``.
        a, b: where A and B came from (a path, or ``"A"``/``"B"`` for documents).
        rel, floor: the divergence rule's parameters.
        headlines: one row per headline, in :data:`~ratioscope.views.timeline.HEADLINES` order,
            with one per reward function of either side after the reward's own.
        steps: for timelines, one row per step both have, in step order.
        only_a, only_b: for timelines, the steps that only A (only B) has.
        notes: sentences on what is not compared (FPA by the exact method in one run and
            by the approximation in the other: its rows get no difference).
    """

    kind: Literal["reports", "timelines"]
    a: str
    b: str
    rel: float
    floor: float
    headlines: tuple[HeadlineComparison, ...]
    steps: tuple[StepComparison, ...] = ()
    only_a: tuple[int, ...] = ()
    only_b: tuple[int, ...] = ()
    #: what is not compared and why (FPA of different methods in A and B)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The comparison JSON document (``"kind": "comparison"``)."""
        from dataclasses import asdict

        from ratioscope.io.documents import to_jsonable

        document = asdict(self)
        document["compared"] = document.pop("kind")
        for row, step in zip(document["steps"], self.steps, strict=True):
            row["diverging"] = list(step.diverging)
        return to_jsonable({"kind": "comparison", **document})

    def write_json(self, path: str | Path) -> None:
        """Write :meth:`to_dict` atomically."""
        from ratioscope.io.documents import write_json

        write_json(self.to_dict(), path)


def compare(
    a: Side | Report | Timeline,
    b: Side | Report | Timeline,
    *,
    rel: float = DEFAULT_REL,
    floor: float = DEFAULT_FLOOR,
) -> Comparison:
    """The headline quantities of two runs side by side.

    Args:
        a, b: each an analyze report JSON file, a timeline JSON file (``"kind":
            "timeline"``), a dump or run directory (analysed with the default options by
            :func:`ratioscope.analyze`), a :class:`~ratioscope.report.model.Report`, a
            :class:`~ratioscope.views.timeline.Timeline`, or a JSON document of either. Both
            must be timelines, or neither.
        rel: the relative divergence threshold (> 0).
        floor: the absolute floor of the divergence scale (>= 0).

    Returns:
        :class:`Comparison`: for two reports, each headline's A, B, B − A, (B − A)/|A|;
        for two timelines, that per shared step, the means over shared steps, the
        diverging steps, and the steps only one side has.

    Raises:
        ParameterError: a bad ``rel`` or ``floor``;
        UsageError: a timeline against a report;
        InputError: a file that is neither a report, a timeline nor a dump.
    """
    from ratioscope.errors import ParameterError, UsageError
    from ratioscope.views.timeline import HEADLINES, Timeline, reward_function_names

    if not (isinstance(rel, (int, float)) and math.isfinite(rel) and rel > 0):
        raise ParameterError("rel", f"must be a positive number, got {rel!r}")
    if not (isinstance(floor, (int, float)) and math.isfinite(floor) and floor >= 0):
        raise ParameterError("floor", f"must be a number >= 0, got {floor!r}")
    side_a, name_a = _side(a, "A")
    side_b, name_b = _side(b, "B")
    a_is_timeline, b_is_timeline = isinstance(side_a, Timeline), isinstance(side_b, Timeline)
    if a_is_timeline != b_is_timeline:
        which = name_a if a_is_timeline else name_b
        raise UsageError(
            f"cannot compare a timeline ({which}) with a report; give two reports (or dumps) "
            "or two timelines"
        )
    if isinstance(side_a, Timeline) and isinstance(side_b, Timeline):
        return _timelines(side_a, side_b, name_a, name_b, rel, floor)
    assert not isinstance(side_a, Timeline) and not isinstance(side_b, Timeline)
    headlines = _with_functions(
        HEADLINES, [*reward_function_names(side_a), *reward_function_names(side_b)]
    )
    methods = (fpa_method(side_a), fpa_method(side_b))
    unlike = _unlike_methods(*methods)
    rows = tuple(
        _row(
            h,
            _apart(h.value(side_a), h.value(side_b))
            if unlike and h.key.startswith(FPA_PREFIX)
            else difference(h.value(side_a), h.value(side_b), rel, floor),
        )
        for h in headlines
    )
    notes = (_fpa_note(*methods),) if unlike else ()
    return Comparison("reports", name_a, name_b, rel, floor, rows, notes=notes)


#: the headlines read from the FPA section
FPA_PREFIX = "future_policy."


def fpa_method(document: Mapping[str, Any]) -> str | None:
    """The FPA method of a report document: "exact", "approximation", "mixed" or None."""
    section = document.get("future_policy")
    return section.get("method") if isinstance(section, Mapping) else None


def _unlike_methods(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and (a != b or a == "mixed")


def _apart(a: float | None, b: float | None) -> Difference:
    """A and B side by side, without a difference: they measure different things."""
    return Difference(a, b, None, None, False)


def _fpa_note(a: str | None, b: str | None) -> str:
    return (
        f"FPA not compared: A's is the {a} method, B's the {b} one (exact from logits, "
        "approximation from the reference log-probs; docs/metrics-objectives.md); analyse "
        "both with the same inputs to compare them"
    )


def _with_functions(headlines: tuple[Headline, ...], names: list[str]) -> tuple[Headline, ...]:
    """``headlines`` and one per reward function that either side has (A's first)."""
    from ratioscope.views.timeline import reward_function_headlines, with_reward_functions

    return with_reward_functions(headlines, reward_function_headlines(list(dict.fromkeys(names))))


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _row(item: Headline, total: Difference, steps: tuple[int, ...] = ()) -> HeadlineComparison:
    return HeadlineComparison(item.key, item.label, item.short, total, steps)


def _timelines(
    a: Timeline, b: Timeline, name_a: str, name_b: str, rel: float, floor: float
) -> Comparison:
    from ratioscope.views.timeline import HEADLINES, function_name

    names = [n for h in (*a.headlines, *b.headlines) if (n := function_name(h.key)) is not None]
    headlines = _with_functions(HEADLINES, names)
    by_step_a = {s.step: s for s in a.steps}
    by_step_b = {s.step: s for s in b.steps}
    shared = sorted(by_step_a.keys() & by_step_b.keys())
    methods = (fpa_method(a.pooled.to_dict()) if a.pooled else None,
               fpa_method(b.pooled.to_dict()) if b.pooled else None)  # fmt: skip
    unlike = _unlike_methods(*methods)

    def step_difference(key: str, x: float | None, y: float | None) -> Difference:
        if unlike and key.startswith(FPA_PREFIX):
            return _apart(x, y)
        return difference(x, y, rel, floor)

    steps = tuple(
        StepComparison(
            step,
            {
                h.key: step_difference(
                    h.key, by_step_a[step].values.get(h.key), by_step_b[step].values.get(h.key)
                )
                for h in headlines
            },
        )
        for step in shared
    )
    rows = []
    for item in headlines:
        pairs = [s.values[item.key] for s in steps if s.values[item.key].diff is not None]
        # means over the steps where both sides have a value, so a step missing on one
        # side does not shift the other's mean; a quantity only one side has (a reward
        # function of one run) shows that side's mean, the other's "—"
        if not pairs:
            pairs = [s.values[item.key] for s in steps]
        mean_a = _mean([p.a for p in pairs])
        mean_b = _mean([p.b for p in pairs])
        diverging = tuple(s.step for s in steps if s.values[item.key].diverges)
        total = step_difference(item.key, mean_a, mean_b)
        rows.append(_row(item, total, diverging))
    return Comparison(
        "timelines",
        name_a,
        name_b,
        rel,
        floor,
        tuple(rows),
        steps,
        only_a=tuple(sorted(by_step_a.keys() - by_step_b.keys())),
        only_b=tuple(sorted(by_step_b.keys() - by_step_a.keys())),
        notes=(_fpa_note(*methods),) if unlike else (),
    )


def _side(value: Any, name: str) -> tuple[Mapping[str, Any] | Timeline, str]:
    """A report document or a Timeline, and a name for it."""
    from ratioscope.views.timeline import Timeline

    if isinstance(value, Timeline):
        return value, name
    if hasattr(value, "to_dict") and not isinstance(value, Mapping):  # a Report
        return value.to_dict(), name
    if isinstance(value, Mapping):
        if value.get("kind") == "timeline":
            return Timeline.from_dict(value, source=name), name
        return value, name
    path = Path(value)
    return _read(path), str(path)


def _read(path: Path) -> Mapping[str, Any] | Timeline:
    from ratioscope.errors import InputError, NotADumpError
    from ratioscope.io.paths import is_report_path
    from ratioscope.views.timeline import Timeline

    if path.is_file() and is_report_path(path):
        from ratioscope.io.documents import document_kind, read_json_report
        from ratioscope.io.jsontext import loads

        try:
            document = loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            document = None  # read_json_report says what is wrong with it
        if isinstance(document, dict) and document.get("kind") == "timeline":
            return Timeline.from_dict(document, source=path)
        report = read_json_report(path)
        kind = document_kind(report)
        if kind != "an analyze report":
            raise InputError(path, f"{kind}; compare takes analyze reports, timelines or dumps")
        from ratioscope.report.model import Report

        # the typed reader names a damaged section (a hand-edited file), as metrics and
        # merge do, where the comparison would leave the section out without a word
        Report.from_dict(report, source=path)
        return report
    from ratioscope.analysis.pipeline import analyze

    try:
        return analyze([path]).to_dict()
    except NotADumpError as error:
        raise InputError(
            path, f"neither an analyze report, a timeline JSON nor a dump ({error.problem})"
        ) from None
