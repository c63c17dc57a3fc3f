"""The y axis of a small multiple over steps, shared by ``plot timeline`` and ``plot
compare``: the power of ten in the axis label, and a quantity at float noise drawn against
its noise floor instead of autoscaled into spikes."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import Any

NOISE_COLOUR = "0.45"


def power_of_ten(values: Sequence[float], floor: float | None = None) -> int:
    """The exponent that goes into the axis label ("×1e-4") for values this small or
    large; 0 for values between 1e-2 and 1e4. At float noise the floor sets it."""
    biggest = max((abs(v) for v in values), default=0.0)
    if floor is not None and biggest <= floor:
        biggest = floor
    if biggest and (biggest < 1e-2 or biggest >= 1e4):
        return math.floor(math.log10(biggest))
    return 0


def at_noise(values: Sequence[float], floor: float | None) -> bool:
    """Whether every value is at or below the float-noise floor (none: never)."""
    return floor is not None and bool(values) and all(abs(v) <= floor for v in values)


def _visibly_inside(limits: tuple[float, float], y: float) -> bool:
    """Whether ``y`` lies inside the y range and clear of its bottom (a floor drawn on the
    zero line of a series far above it says nothing and covers the points there)."""
    low, high = limits
    return low <= y <= high and y - max(low, 0.0) > 0.03 * (high - low)


def finish_axes(
    ax: Any, title: str, unit: str, exponent: int, floor: float | None, noise: bool
) -> None:
    """Title, y label (with the power of ten), grid, plain tick labels; a float-noise
    floor as a dashed line, and at noise a y range from 0 to twice the floor with a note,
    so that rounding differences read as what they are."""
    factor = 10.0**-exponent
    if floor is not None and noise:
        ax.axhline(floor * factor, color=NOISE_COLOUR, lw=1.0, ls="--")
        ax.set_ylim(0, 2 * floor * factor)
        ax.text(0.02, 0.95, f"at float noise: every step below the dashed floor ({floor:.0e},\n"
                "float32 rounding of equal log-probs); nothing to read here",
                transform=ax.transAxes, fontsize=7.5, va="top", color=NOISE_COLOUR)  # fmt: skip
        title = f"{title} — at float noise"
    elif floor is not None and _visibly_inside(ax.get_ylim(), floor * factor):
        ax.axhline(floor * factor, color=NOISE_COLOUR, lw=0.8, ls="--")
        # some steps above it: the line says what it is beside it, at the right edge
        ax.annotate(f"float noise ({floor:.0e})", (1.0, floor * factor),
                    xycoords=("axes fraction", "data"), xytext=(-2, 2),
                    textcoords="offset points", ha="right", va="bottom", fontsize=7,
                    color=NOISE_COLOUR)  # fmt: skip
    ax.set_title("\n".join(textwrap.wrap(title, 44)), fontsize=9.5, loc="left")
    label = unit if not exponent else f"{unit} (×1e{exponent})"
    ax.set_ylabel("\n".join(textwrap.wrap(label, 22)), fontsize=8.5)
    ax.tick_params(labelsize=8)
    ax.grid(alpha=0.3)
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
