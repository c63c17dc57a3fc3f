"""Figure data of the ratio side: one sequence's three ratio signals (``plot ratios``).

A report holds no per-token values, so this reads the dump itself, one file at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ratioscope.io.loaders import LoadOptions
from ratioscope.params import AnalysisParams


@dataclass(frozen=True)
class RatioTrace:
    """One sequence's three ratio signals over its valid tokens."""

    source: str
    row: int
    token: list[float]
    sequence: list[float]
    kalman: list[float]
    #: the on-policy band of the Kalman-filtered ratio (the band drawn)
    on_band: tuple[float, float]
    qv: float
    ratio_pair: str = "current/old"
    #: the raw token and sequence rows' bands (r = 1 up to float32 rounding by default)
    token_on_band: tuple[float, float] | None = None
    seq_on_band: tuple[float, float] | None = None


def ratio_trace(
    paths: Iterable[str | Path],
    index: int,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
) -> RatioTrace:
    """The log-ratio, its sequence mean and its Kalman filter for sequence ``index``
    (counted over all files in order).

    Raises:
        ParameterError: ``index`` is past the last sequence.
    """
    from ratioscope.errors import ParameterError
    from ratioscope.io.loaders import expand_paths, load_file
    from ratioscope.sections.context import VARIANTS, Context

    params = params or AnalysisParams()
    seen = 0
    for path in expand_paths(list(paths)):
        batch = load_file(path, load_options or LoadOptions())
        if index < seen + batch.num_sequences:
            row = index - seen
            ctx = Context(batch.select_rows(row, row + 1), params)
            valid = ctx.mask[0]  # holes inside the sequence (masked turns) are left out
            signals = {v: ctx.signal(v)[0][valid].double().tolist() for v in VARIANTS}
            return RatioTrace(
                source=str(path),
                row=row,
                on_band=params.on_band,
                token_on_band=params.token_on_band,
                seq_on_band=params.seq_on_band,
                qv=params.kalman_q / params.kalman_v,
                ratio_pair=batch.ratio_pair,
                **signals,
            )
        seen += batch.num_sequences
    raise ParameterError("sequence", f"{index} is out of range: the input has {seen} sequences")
