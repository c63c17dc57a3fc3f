"""A distribution in a report: exact moments, histogram quantiles and their stated bound.

Every :class:`Distribution` says in which coordinate its quantiles were read and how far
they may be from the exact order statistics (:class:`~ratioscope.sections.summaries.QuantileBound`):
``"value"`` for quantities around 0 or of any scale (log-ratios, the covariance ``c``,
QUATRO's duals and advantages), ``"log"`` for weights and ratios that live near 1
(CW-GRPO's ``w`` and ``w~``, FPA's sequence weights and future/current ratios, TEPO's
``w_i``), where the distance from 1 is what a reader looks at. A report written before
bounds were stated has no ``quantile_bound`` and reads the default, the value bound its
quantiles were read with.

:func:`coordinate_codec` writes a histogram field under a key that names its coordinate,
so that a state written before (value histograms under the old key) still loads as
such, and merging it with a newer one fails with one sentence instead of mixing bins.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ratioscope.sections.state import Codec
from ratioscope.sections.summaries import VALUE_BOUND, Histogram, LogHistogram, QuantileBound


@dataclass(frozen=True)
class Distribution:
    """Distribution of a signal: exact moments, quantiles within ``quantile_bound``."""

    count: int
    mean: float
    std: float
    min: float
    max: float
    quantiles: dict[str, float]
    quantile_bound: QuantileBound = VALUE_BOUND


def distribution_of(
    histogram: Histogram | LogHistogram, quantiles: Sequence[float]
) -> Distribution:
    """A :class:`Distribution` (exact moments, histogram quantiles and their bound)."""
    moments = histogram.moments
    return Distribution(
        count=moments.count,
        mean=moments.mean if moments.count else math.nan,
        std=moments.std,
        min=moments.minimum,
        max=moments.maximum,
        quantiles=histogram.quantiles(tuple(quantiles)),
        quantile_bound=histogram.quantile_bound,
    )


def coordinate_codec(value_key: str, log_key: str) -> Codec:
    """The state codec of a histogram field (or a dict of histograms) by coordinate.

    A :class:`~ratioscope.sections.summaries.LogHistogram` (or a dict of them) is written under
    ``log_key``, a :class:`~ratioscope.sections.summaries.Histogram` under ``value_key``; reading
    takes whichever key the block has, so reports written before keep their value
    histograms.
    """

    def dump(value: Any) -> dict[str, Any]:
        if isinstance(value, dict):
            sample = next(iter(value.values()), None)
            state: Any = {name: h.state() for name, h in value.items()}
        else:
            sample, state = value, value.state()
        return {log_key if isinstance(sample, LogHistogram) else value_key: state}

    def load(block: dict[str, Any]) -> Any:
        key, kind = (log_key, LogHistogram) if log_key in block else (value_key, Histogram)
        if key not in block:
            raise KeyError(log_key)
        state = block[key]
        if "index" in state:
            return kind.from_state(state)
        return {name: kind.from_state(item) for name, item in state.items()}

    return Codec(dump=dump, load=load, flat=True)
