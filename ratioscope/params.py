"""Analysis parameters: every option that changes a number in the report.

Device, chunk size and progress display do not change the numbers, so they are not
here; reports made with equal parameters can be merged (``ratioscope merge``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from ratioscope.errors import UsageError

SPACES = ("log", "ratio")
MASK_POLICIES = ("zero", "skip")
KALMAN_IMPLS = ("scan", "reference")
COV_SCOPES = ("auto", "group", "batch")


@dataclass(frozen=True)
class AnalysisParams:
    """Defaults follow DESIGN section 3 (and the papers where it defers to them)."""

    clip: tuple[float, float] = (0.2, 0.28)
    seq_clip: tuple[float, float] = (3e-4, 4e-4)
    is_threshold: float = 2.0
    on_band: tuple[float, float] = (3e-4, 4e-4)
    window: int = 50
    lfr_cutoff: float = 0.1
    space: str = "log"
    kalman_q: float = 1e-6
    kalman_v: float = 1.0
    kalman_p0: float = 0.0
    kalman_rho0: float = 0.0
    mask_policy: str = "zero"
    kalman_impl: str = "scan"
    cov_scope: str = "auto"
    fpa_lambda: float = 1.0
    fpa_lambdas: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0)
    fpa_threshold: float = 0.2
    delta: float = 0.01
    deltas: tuple[float, ...] = (0.1, 0.01, 0.001)
    quantiles: tuple[float, ...] = (0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            values = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, float) and not math.isfinite(v) for v in values):
                raise UsageError(f"--{f.name.replace('_', '-')} must be finite, got {value}")
        _check_pair("clip", self.clip, upper=1.0)
        _check_pair("seq-clip", self.seq_clip, upper=1.0)
        _check_pair("on-band", self.on_band, upper=1.0, allow_zero=True)
        if self.is_threshold <= 1:
            raise UsageError(f"--is-threshold must be > 1, got {self.is_threshold}")
        if self.window < 2:
            raise UsageError(f"--window must be at least 2, got {self.window}")
        if not 0 < self.lfr_cutoff < 1:
            raise UsageError(f"--lfr-cutoff must be in (0, 1), got {self.lfr_cutoff}")
        _check_choice("space", self.space, SPACES)
        _check_choice("mask-policy", self.mask_policy, MASK_POLICIES)
        _check_choice("kalman-impl", self.kalman_impl, KALMAN_IMPLS)
        _check_choice("cov-scope", self.cov_scope, COV_SCOPES)
        if self.kalman_q <= 0:
            raise UsageError(f"--kalman-q (process noise Q) must be > 0, got {self.kalman_q}")
        if self.kalman_v <= 0:
            raise UsageError(f"--kalman-v (observation noise V) must be > 0, got {self.kalman_v}")
        if self.kalman_p0 < 0:
            raise UsageError(f"the Kalman prior variance p0 must be >= 0, got {self.kalman_p0}")
        if self.delta <= 0 or any(d <= 0 for d in self.deltas):
            raise UsageError("--delta values must be positive")
        if self.fpa_lambda < 0 or any(x < 0 for x in self.fpa_lambdas):
            raise UsageError("--fpa-lambda values must be >= 0")
        if not 0 < self.fpa_threshold < 1:
            raise UsageError(f"--fpa-threshold must be in (0, 1), got {self.fpa_threshold}")

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AnalysisParams:
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in known
        }
        return cls(**values)


def _check_pair(name: str, pair: tuple[float, float], upper: float, allow_zero: bool = False):
    low, high = pair
    smallest = 0.0 if allow_zero else 1e-12
    if not (smallest <= low < upper and smallest <= high):
        raise UsageError(f"--{name} values must be positive (and the lower one < 1), got {pair}")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"--{name} must be one of {', '.join(choices)}, got '{value}'")
