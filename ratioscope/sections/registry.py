"""The report sections in report order; ``info`` and ``analyze`` both read this list."""

from __future__ import annotations

from ratioscope.sections.base import Accumulator


def section_classes() -> list[type[Accumulator]]:
    from ratioscope.sections.mismatch import MismatchAccumulator
    from ratioscope.sections.ratios import RatiosAccumulator

    return [RatiosAccumulator, MismatchAccumulator]
