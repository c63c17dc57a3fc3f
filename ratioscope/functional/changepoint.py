"""Change detection on a per-step series: where a quantity departs from its own history.

The rule (ratioscope's own; no paper of the five defines one): step t is flagged when

    |x_t - m| > k * max(1.4826 * MAD, floor_rel * |m|)

where m and MAD are the median and the median absolute deviation of the trailing
history: the last ``window`` finite values before t that come after the latest flagged
step (a flag restarts the history at that step, so a lasting shift is flagged once, at
its onset, and the new level becomes the reference). At least ``min_history`` values are
needed before anything can be flagged. The median and MAD ignore a single outlier in the
history, and ``floor_rel`` keeps a flat series (MAD = 0) from flagging float noise. A
quantity may have a ``floor``, the least value it is judged at (a k3 of 1e-13 is float32
rounding): the scale is at least the floor, so a move of less than ``k`` floors is never
a change (a series that moves only below its floor, 1e-13 then 6e-13, flags nothing),
while a series well above its floor, whose MAD is larger, is judged as without one.
The false-alarm rate of the defaults on stationary series is measured by
``benchmarks/timeline_false_alarms.py`` and stated in docs/timeline.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

#: the MAD of a normal distribution times this is its standard deviation
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class ChangeRule:
    """Parameters of :func:`change_flags`.

    Attributes:
        window: at most this many trailing values form the history.
        min_history: fewer finite values in the history flag nothing.
        k: threshold in robust standard deviations (1.4826 x MAD).
        floor_rel: the robust standard deviation is at least this share of |median|.
    """

    window: int = 10
    min_history: int = 5
    k: float = 6.0
    floor_rel: float = 0.02

    def __post_init__(self) -> None:
        from ratioscope.errors import ParameterError

        if self.window < 2:
            raise ParameterError("window", f"must be at least 2, got {self.window}")
        if not 2 <= self.min_history <= self.window:
            raise ParameterError(
                "min_history", f"must be between 2 and window ({self.window}), got "
                f"{self.min_history}"
            )  # fmt: skip
        if not self.k > 0 or self.floor_rel < 0:
            raise ParameterError("k", f"and floor_rel must be positive, got {self.k}, "
                                 f"{self.floor_rel}")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"rule": "trailing median/MAD, restart after a flag", **asdict(self)}


def change_flags(
    values: Sequence[float | None], rule: ChangeRule | None = None, floor: float | None = None
) -> list[bool]:
    """Steps where a series departs from its trailing robust history (see the module).

    Args:
        values: [N] the series in step order; None or NaN is a missing value (never
            flagged, never history).
        rule: the thresholds (default :class:`ChangeRule`).
        floor: the least scale (None: none): moves smaller than ``k`` floors are none.

    Returns:
        [N] bool: True where a change starts.

    >>> change_flags([1.0, 1.1, 0.9, 1.0, 1.05, 3.0, 3.1, 2.9, 3.0])
    [False, False, False, False, False, True, False, False, False]
    >>> change_flags([0.5] * 6 + [0.5000001])  # a flat series: float noise is no change
    [False, False, False, False, False, False, False]
    >>> noise = [1e-13, 2e-13, 1e-13, 1e-13, 2e-13, 1e-13, 6e-13]
    >>> change_flags(noise)[-1], change_flags(noise, floor=1e-6)[-1]
    (True, False)
    """
    tracker = ChangeTracker(rule, floor)
    return [tracker.add(value) for value in values]


class ChangeTracker:
    """:func:`change_flags` one value at a time, for a series that grows (``watch``):
    ``add`` returns whether that value is flagged, as :func:`change_flags` of the whole
    series would say (the rule looks back only). Keeps at most ``window`` values.

    >>> tracker = ChangeTracker()
    >>> [tracker.add(v) for v in (1.0, 1.1, 0.9, 1.0, 1.05, 3.0)]
    [False, False, False, False, False, True]
    """

    def __init__(self, rule: ChangeRule | None = None, floor: float | None = None) -> None:
        self.rule = rule or ChangeRule()
        self.floor = 0.0 if floor is None else floor
        self.history: list[float] = []

    def add(self, value: float | None) -> bool:
        """Whether ``value`` (the next step's; None or NaN: missing) starts a change."""
        if value is None or not math.isfinite(value):
            return False
        x = float(value)
        rule = self.rule
        flagged = len(self.history) >= rule.min_history and _departs(
            x, self.history, rule, self.floor
        )
        if flagged:
            self.history = []  # the new level is the reference from here on
        self.history.append(x)
        del self.history[: -rule.window]
        return flagged


def _departs(x: float, history: list[float], rule: ChangeRule, floor: float = 0.0) -> bool:
    center = median(history)
    mad = median(abs(h - center) for h in history)
    scale = max(MAD_TO_SIGMA * mad, rule.floor_rel * abs(center), floor)
    if scale == 0.0:  # a series of exact zeros (or one constant 0): any move is a change
        return x != center
    return abs(x - center) > rule.k * scale
