"""Figure data of the ratio side: one sequence's three ratio signals (``plot ratios``).

A report holds no per-token values, so this reads the dump itself, one file at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from torch import Tensor

from ratioscope.data.params import AnalysisParams
from ratioscope.io.loaders import LoadOptions

#: why :func:`ratio_trace` drew the sequence it chose itself (the figure's title says it)
CHOSEN_BECAUSE = (
    "the most frequent switches of its raw token state among the first file's sequences "
    "of at least median length"
)


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
    #: the sequence's index counted over all files (``--sequence``)
    index: int = 0
    #: why this sequence, when :func:`ratio_trace` chose it ("" when it was asked for)
    chosen_because: str = ""


def ratio_trace(
    paths: Iterable[str | Path],
    index: int | None = None,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
) -> RatioTrace:
    """The log-ratio, its sequence mean and its Kalman filter for sequence ``index``
    (counted over all files in order).

    Without ``index``, the sequence of the first file that shows most (see
    :func:`informative_row`): a dump's first rows are often exactly on-policy (the first
    mini-batch of a step), whose three signals are flat lines at 0.

    Raises:
        ParameterError: ``index`` is past the last sequence.
    """
    from ratioscope.errors import ParameterError
    from ratioscope.io.loaders import RunFiles, expand_paths
    from ratioscope.sections.context import VARIANTS, Context

    params = params or AnalysisParams()
    files = expand_paths(list(paths))
    run = RunFiles(len(files), load_options or LoadOptions())
    seen = 0
    for path in files:
        batch = run.load(path)
        if batch is None:  # a file of another kind that a directory walk found
            continue
        if index is None and batch.num_sequences > 0:
            row = informative_row(batch.log_ratio, batch.mask, params)
        elif index is not None and index < seen + batch.num_sequences:
            row = index - seen
        else:
            seen += batch.num_sequences
            continue
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
            index=seen + row,
            chosen_because=CHOSEN_BECAUSE if index is None else "",
            **signals,
        )
    run.check_any(seen > 0)
    raise ParameterError("sequence", f"{index} is out of range: the input has {seen} sequences")


def informative_row(z: Tensor, mask: Tensor, params: AnalysisParams) -> int:
    """The row whose ratio trace shows most: among the rows of at least the median valid
    length (a long trace shows the filter settle), the largest switch frequency of the
    raw token states (KPO App. B.1, under ``params.token_on_band`` and ``params.window``),
    ties broken by the larger standard deviation of z, then by the first row.

    An exactly on-policy row scores (0, 0), so it is chosen only when every row is.

    Args:
        z: [B, T] log-ratios; mask: [B, T] bool valid tokens.

    Returns:
        the row index (0 for a batch without rows).

    >>> import torch
    >>> z = torch.tensor([[0.0, 0.0, 0.0], [0.1, -0.1, 0.1], [0.2, 0.2, 0.2]])
    >>> informative_row(z, torch.ones_like(z, dtype=torch.bool), AnalysisParams())
    1
    """
    import torch

    from ratioscope.functional.token_stats import switch_frequency, token_states

    if z.shape[0] == 0:
        return 0
    lengths = mask.sum(dim=1)
    long_enough = lengths >= lengths.double().median()
    switches = switch_frequency(token_states(z, mask, params.token_on_band), mask, params.window)
    values = torch.where(mask, z.double(), 0.0)
    count = lengths.clamp(min=1).double()
    mean = values.sum(dim=1) / count
    spread = (torch.where(mask, (values - mean[:, None]) ** 2, 0.0).sum(dim=1) / count).sqrt()
    scores = [
        (float(switches[row]), float(spread[row]), -row)
        for row in range(z.shape[0])
        if bool(long_enough[row])
    ]
    return -max(scores)[2]
