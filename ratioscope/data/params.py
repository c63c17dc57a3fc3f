"""Analysis parameters: every option that changes a number in the report.

Device, chunk size and progress display do not change the numbers, so they are not
here; reports made with equal parameters can be merged (``ratioscope merge``). Also
the one rule for whether a parameter chosen now is the one a stored report was made
with (:func:`same_value`, :func:`refuse_unlike_report`), for analyze and eval reports
alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ratioscope.errors import ParameterError
from ratioscope.functional.token_stats import DEFAULT_ON_BAND, EXACT_ON_BAND

SPACES = ("log", "ratio")
#: the most tokens a length parameter may name (a sequence's position is an int32 on a
#: GPU; a larger value overflowed the tensor it sized)
MAX_TOKENS = 2**31 - 1
MASK_POLICIES = ("zero", "skip")
KALMAN_IMPLS = ("scan", "reference")
COV_SCOPES = ("auto", "group", "batch")
#: where a stated length limit came from (the vitals' ``limit_source``)
MAX_LENGTH_SOURCES = ("option", "trainer settings")


@dataclass(frozen=True)
class AnalysisParams:
    """Defaults as docs/metrics-ratios.md and docs/metrics-objectives.md give them, with
    their sources; docs/decisions.md lists those the papers leave open."""

    clip: tuple[float, float] = (0.2, 0.28)
    seq_clip: tuple[float, float] = (3e-4, 4e-4)
    is_threshold: float = 2.0
    #: on-policy band (eps_lo, eps_hi) of the Kalman-filtered ratio (KPO App. C.1)
    on_band: tuple[float, float] = DEFAULT_ON_BAND
    #: ... of the raw token ratio: r = 1 up to float32 rounding (KPO App. C.1, B.1)
    token_on_band: tuple[float, float] = EXACT_ON_BAND
    #: ... of the sequence-level ratio: the raw rule too (one value per sequence)
    seq_on_band: tuple[float, float] = EXACT_ON_BAND
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
    #: the responses' length limit in tokens (vitals: share at the limit); None: the
    #: padded width of each file. Left out of ``to_dict`` while None, so reports made
    #: before it existed keep their parameters block (and merge with newer ones).
    max_length: int | None = None
    #: where ``max_length`` came from when not an option: "trainer settings" when the
    #: trainer's recorded (or ``--trainer``) length limit set it; None: an option
    max_length_source: str | None = None
    #: the largest policy lag the trainer allows (prime-rl ``max_off_policy_steps``,
    #: AReaL ``max_head_offpolicyness``); tokens beyond it are counted (policy_lag).
    #: None: not stated. Left out of ``to_dict`` while None, as ``max_length``.
    max_lag: int | None = None
    #: the engine's sampling settings (the sampling section's truncation check, with
    #: logits); None: not applied (T = 1, no top-p, no top-k). Left out of ``to_dict``
    #: while None.
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            values = value if isinstance(value, tuple) else (value,)
            if any(isinstance(v, float) and not math.isfinite(v) for v in values):
                raise ParameterError(f.name, f"must be finite, got {value}")
        _check_clip("clip", self.clip)
        _check_clip("seq_clip", self.seq_clip)
        for name in ("on_band", "token_on_band", "seq_on_band"):
            _check_pair(name, getattr(self, name), upper=1.0, allow_zero=True)
        if self.is_threshold <= 1:
            raise ParameterError("is_threshold", f"must be > 1, got {self.is_threshold}")
        if self.window < 2:
            raise ParameterError("window", f"must be at least 2, got {self.window}")
        if self.window > MAX_TOKENS:
            raise ParameterError(
                "window", f"must be at most {MAX_TOKENS:,} tokens, got {self.window}"
            )
        if not 0 < self.lfr_cutoff < 1:
            raise ParameterError("lfr_cutoff", f"must be in (0, 1), got {self.lfr_cutoff}")
        _check_choice("space", self.space, SPACES)
        _check_choice("mask_policy", self.mask_policy, MASK_POLICIES)
        _check_choice("kalman_impl", self.kalman_impl, KALMAN_IMPLS)
        _check_choice("cov_scope", self.cov_scope, COV_SCOPES)
        if self.kalman_q <= 0:
            raise ParameterError("kalman_q", f"(process noise Q) must be > 0, got {self.kalman_q}")
        if self.kalman_v <= 0:
            raise ParameterError(
                "kalman_v", f"(observation noise V) must be > 0, got {self.kalman_v}"
            )
        if self.kalman_p0 < 0:
            raise ParameterError(
                "kalman_p0",
                f"must be >= 0, got {self.kalman_p0}",
                subject="the Kalman prior variance p0",
            )
        # one message for the value and its sweep, as one option family sets both
        if self.delta <= 0 or any(d <= 0 for d in self.deltas):
            raise ParameterError("delta", "values must be positive")
        if self.fpa_lambda < 0 or any(x < 0 for x in self.fpa_lambdas):
            raise ParameterError("fpa_lambda", "values must be >= 0")
        if self.max_length is not None and (
            isinstance(self.max_length, bool)
            or int(self.max_length) != self.max_length
            or not 1 <= self.max_length <= MAX_TOKENS
        ):
            raise ParameterError(
                "max_length",
                f"must be a whole number of tokens from 1 to {MAX_TOKENS:,}, got {self.max_length}",
            )
        if self.max_lag is not None and (
            isinstance(self.max_lag, bool) or int(self.max_lag) != self.max_lag or self.max_lag < 0
        ):
            raise ParameterError("max_lag", f"must be a whole number >= 0, got {self.max_lag}")
        _check_sampling(self.temperature, self.top_p, self.top_k)
        if self.max_length_source is not None:
            _check_choice("max_length_source", self.max_length_source, MAX_LENGTH_SOURCES)
        if not 0 < self.fpa_threshold < 1:
            raise ParameterError("fpa_threshold", f"must be in (0, 1), got {self.fpa_threshold}")

    def state_band(self, variant: str) -> tuple[float, float]:
        """The on-policy band that sets the token states of ``variant``'s row."""
        return {"token": self.token_on_band, "sequence": self.seq_on_band}.get(
            variant, self.on_band
        )

    def to_dict(self) -> dict[str, Any]:
        # every field is a number, a string or a flat tuple of numbers: read directly
        # (asdict's deep copy cost a pooled report of every timeline step a tenth of a ms)
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return {
            k: list(v) if isinstance(v, tuple) else v
            for k, v in values
            if not (k in _OMITTED_WHEN_NONE and v is None)
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AnalysisParams:
        """The parameters a report's ``params.analysis`` block holds; an older block is
        read by :func:`stored_analysis` (one band for every row)."""
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in stored_analysis(data).items()
            if k in known
        }
        return cls(**values)


#: parameters written only when set: a report made without them has the block of one
#: made before they existed
_OMITTED_WHEN_NONE = (
    "max_length", "max_length_source", "max_lag", "temperature", "top_p", "top_k",
)  # fmt: skip

#: parameters added after reports were written, with the parameter whose value an older
#: report used in their place
_SPLIT_FROM = {"token_on_band": "on_band", "seq_on_band": "on_band"}


def stored_analysis(analysis: Mapping[str, Any]) -> dict[str, Any]:
    """A stored ``params.analysis`` block as the current parameters read it.

    The one rule for reports written before the on-policy band was set per row: such a
    report has no ``token_on_band``/``seq_on_band``, because its one ``on_band`` set the
    states of every row, so both read as its ``on_band``. Plotting it, and an option
    checked against it (:func:`refuse_unlike_report`), see the band it was made with;
    ``merge`` compares the stored blocks as written, so it refuses to merge such a
    report with a newer one (their sums differ too: the older lack per-sequence
    proportions).

    >>> stored_analysis({"on_band": [0.0003, 0.0004]})["token_on_band"]
    [0.0003, 0.0004]
    """
    block = dict(analysis)
    for name, source in _SPLIT_FROM.items():
        if name not in block and source in block:
            block[name] = block[source]
    return block


def _check_pair(name: str, pair: tuple[float, float], upper: float, allow_zero: bool = False):
    low, high = pair
    smallest = 0.0 if allow_zero else 1e-12
    if not (smallest <= low < upper and smallest <= high):
        raise ParameterError(name, f"values must be positive (and the lower one < 1), got {pair}")


def _check_sampling(temperature: float | None, top_p: float | None, top_k: int | None) -> None:
    """T > 0, p in (0, 1], k a whole number >= 1."""
    if temperature is not None and not (math.isfinite(temperature) and temperature > 0):
        raise ParameterError("temperature", f"must be > 0, got {temperature}")
    if top_p is not None and not (0 < top_p <= 1):
        raise ParameterError("top_p", f"must be in (0, 1], got {top_p}")
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1):
        raise ParameterError("top_k", f"must be a whole number >= 1, got {top_k}")


def _check_clip(name: str, eps: tuple[float, float]) -> None:
    """A clip pair is (eps_low, eps_high) of the band [1 - eps_low, 1 + eps_high].

    An eps >= 1 is refused on either side: eps_low >= 1 leaves no lower bound, and a user
    who wrote ratio bounds (0.8,1.2) would silently get the band [0.2, 2.2]; the message
    says how to write the band they probably meant.
    """
    low, high = eps
    if low < 1 and high < 1:
        _check_pair(name, eps, upper=1.0)
        return
    wanted = ""
    if 0 < low < 1 < high:  # read as ratio bounds [low, high]
        meant = f"{_plain(1 - low)},{_plain(high - 1)}"
        wanted = f" — for the band [{_plain(low)}, {_plain(high)}] set `{name}` to {meant}"
    raise ParameterError(
        name,
        f"takes eps_low,eps_high of the band [1 - eps_low, 1 + eps_high], each below 1; "
        f"{_plain(low)},{_plain(high)} would be the band "
        f"[{_plain(1 - low)}, {_plain(1 + high)}]{wanted}",
    )


def _plain(value: float) -> str:
    """A number as a user types it: 12 significant digits, so 1 - 0.8 is 0.2."""
    return f"{value:.12g}"


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ParameterError(name, f"must be one of {', '.join(choices)}, got '{value}'")


#: relative tolerance of :func:`same_value` for floats: a value read back from JSON, or
#: spelled otherwise (1e-6, 0.000001), is the same choice; real choices differ far more
REL_TOL = 1e-12


def same_value(chosen: object, stored: object) -> bool:
    """Whether a parameter value chosen now equals the one a report stored.

    The one equality rule for parameters: when either side is a float, numbers compare
    with ``math.isclose(rel_tol=REL_TOL, abs_tol=0)``; everything else (integers,
    strings, booleans) compares exactly; lists and tuples compare element by element
    and must be as long; a single value chosen against a stored list is a list of one.

    >>> same_value((3e-4, 4e-4), [0.0003, 0.0004]), same_value(0.9, 0.95), same_value("a", "a")
    (True, False, True)
    """
    if isinstance(stored, (list, tuple)):
        values = list(chosen) if isinstance(chosen, (list, tuple)) else [chosen]
        return len(values) == len(stored) and all(map(same_value, values, stored))
    if (
        isinstance(chosen, (int, float))
        and isinstance(stored, (int, float))
        and (isinstance(chosen, float) or isinstance(stored, float))
    ):
        return math.isclose(chosen, stored, rel_tol=REL_TOL, abs_tol=0.0)
    return chosen == stored


def refuse_unlike_report(
    chosen: Mapping[str, Any], stored: Mapping[str, Any], report: str | Path, applies_to: str
) -> None:
    """A report is used as stored: refuse a parameter chosen unlike the report's own.

    Otherwise the choice would be silently ignored while the result looked as if it had
    been honoured.

    Args:
        chosen: parameter -> value, for the parameters the caller chose; None means
            not chosen.
        stored: the parameters the report was made with; one it lacks (or holds as
            null) is not checked.
        report: the report's path, named in the message.
        applies_to: the input the parameters do apply to ("dump", "samples").

    Raises:
        ParameterError: the first chosen parameter unlike the report's (by
            :func:`same_value`), naming the report and its value.
    """
    for name, value in chosen.items():
        made_with = stored.get(name)
        if value is None or made_with is None or same_value(value, made_with):
            continue
        shown = ",".join(map(str, made_with)) if isinstance(made_with, list) else made_with
        raise ParameterError(
            name,
            f"applies only to {applies_to} input; the report {Path(report).name} was made "
            f"with {name.replace('_', ' ')} {shown}",
        )
