"""Policy lag: how many versions behind the trained policy each sampled token is.

Async trainers (AReaL, verl's fully-async trainer, prime-rl, slime) train on tokens that
older policies sampled; with partial rollouts one sequence spans several versions. With
``v`` the version of the policy that sampled a token and ``V`` the version being trained,
the token's lag is ``V - v``; a sequence's lag is taken from its *oldest* token
(``V - min v``), as prime-rl's ``off_policy`` and verl's ``trajectory_staleness_worst``
count it.

Per lag L, over the valid tokens whose own lag is L (N of them), with z the log-ratio of
the file's ratio pair and r = exp(z):

* ``k1`` = sum(-z) / N, ``k3`` = sum(r - 1 - z) / N, ``ess`` = (sum r)^2 / (N sum r^2);
* ``outside``: the share of tokens with r outside [1/c, c];
* ``clip_fraction``: PPO's clip fraction at the token band, over tokens with advantages.

Where the current, old and engine log-probs are all present, the drift of the whole
path current/engine splits token by token into current/old plus old/engine
(z_total = z_stale + z_engine), so their k1 add up exactly (the sums are taken in float64).

Sums are keyed by the versions as written, ``(V, v)``, not by the lag: a file that does
not say which version it trains counts its lags from the newest version its tokens carry,
which only the whole file (every chunk) knows; the key makes chunks, files and shard
reports merge exactly, and the lag is taken when the result is made.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ratioscope.functional.mismatch import MismatchPartials, mismatch_partials, mismatch_statistics
from ratioscope.functional.surrogate import ppo_clip_mask

#: a trainer version that the file did not give (lags from the newest version seen)
UNKNOWN = -1

#: the pairs of the drift split, in the order of z_total = z_stale + z_engine
SPLIT_PAIRS = ("current/old", "old/engine", "current/engine")


@dataclass
class VersionSums:
    """Sufficient statistics of the tokens of one (trainer version, sampled version)
    pair; ``merge`` adds exactly.

    Attributes:
        sequences: sequences whose oldest valid token has this version.
        clipped: valid tokens whose PPO term is clipped.
        advantage_tokens: valid tokens counted for ``clipped``.
        partials: the mismatch sums of the file's ratio pair over these tokens.
        split: pair of :data:`SPLIT_PAIRS` -> its mismatch sums over these tokens (empty
            without all three log-probs).
    """

    sequences: int = 0
    clipped: int = 0
    advantage_tokens: int = 0
    partials: MismatchPartials = field(default_factory=MismatchPartials)
    split: dict[str, MismatchPartials] = field(default_factory=dict)

    def merge(self, other: VersionSums) -> None:
        self.sequences += other.sequences
        self.clipped += other.clipped
        self.advantage_tokens += other.advantage_tokens
        self.partials.merge(other.partials)
        if not self.split:
            self.split = {k: _copy(v) for k, v in other.split.items()}
        elif other.split:
            for pair, sums in other.split.items():
                self.split[pair].merge(sums)


def _copy(partials: MismatchPartials) -> MismatchPartials:
    copy = MismatchPartials()
    copy.merge(partials)
    return copy


@dataclass(frozen=True)
class DriftSplit:
    """k1 and k3 of each pair of :data:`SPLIT_PAIRS` over one lag's tokens:
    ``k1["current/engine"] == k1["current/old"] + k1["old/engine"]`` (to rounding)."""

    k1: dict[str, float]
    k3: dict[str, float]


@dataclass(frozen=True)
class LagStats:
    """The off-policy statistics of the tokens of one lag (module docstring).

    ``tokens`` counts tokens whose own lag is this one, ``sequences`` the sequences whose
    oldest token's lag is. Floats are NaN (null) without a token; ``clip_fraction`` is
    None without advantages, ``split`` None without all three log-probs.
    """

    tokens: int
    sequences: int
    k1: float
    k3: float
    ess: float
    outside: float
    clip_fraction: float | None
    split: DriftSplit | None


def as_versions(version: Tensor, mask: Tensor) -> Tensor:
    """[B, T] int64 versions of the valid tokens (a [B] per-sequence version broadcast).

    Args:
        version: [B] or [B, T] integer.
        mask: [B, T] bool.
    """
    if version.dim() == 1:
        return version[:, None].expand(mask.shape)
    return version


def version_sums(
    z: Tensor,
    mask: Tensor,
    version: Tensor,
    trainer_version: int | None,
    *,
    advantages: Tensor | None = None,
    clip: tuple[float, float] = (0.2, 0.28),
    is_threshold: float = 2.0,
    split: Mapping[str, Tensor] | None = None,
) -> dict[tuple[int, int], VersionSums]:
    """The sums of each (trainer version, sampled version) pair present in a chunk.

    Args:
        z: [B, T] float, the log-ratio of the file's ratio pair.
        mask: [B, T] bool, valid tokens.
        version: [B, T] int64, the sampling policy's version of each token (any value at
            masked positions).
        trainer_version: V, the version being trained, or None (:data:`UNKNOWN` in
            the keys: the lag is taken from the newest version when the result is made).
        advantages: [B, T] float or None (no clip counts).
        clip: (eps_low, eps_high), the token clip band.
        is_threshold: c of the ``outside`` share.
        split: "current", "old" and "engine" -> [B, T] log-probs, or None.

    Returns:
        (V or UNKNOWN, v) -> :class:`VersionSums`, in increasing key order.
    """
    trainer = UNKNOWN if trainer_version is None else int(trainer_version)
    big = torch.iinfo(torch.int64).max
    oldest = torch.where(mask, version, big).min(dim=1).values
    has_tokens = mask.any(dim=1)
    clipped_tokens = None
    if advantages is not None:
        # in float64, as ratios.token.clip_fraction counts (ppo_row_sums)
        clipped_tokens = ppo_clip_mask(z.double(), advantages.double(), mask, clip)
    drifts = _drifts(split) if split is not None else None
    sums: dict[tuple[int, int], VersionSums] = {}
    for value in torch.unique(version[mask]).tolist():
        tokens = mask & (version == value)
        part = VersionSums(
            sequences=int((has_tokens & (oldest == value)).sum()),
            partials=mismatch_partials(z, tokens, is_threshold),
        )
        if clipped_tokens is not None:
            part.clipped = int((clipped_tokens & tokens).sum())
            part.advantage_tokens = int(tokens.sum())
        if drifts is not None:
            part.split = {
                pair: mismatch_partials(drift, tokens, is_threshold, backend="torch")
                for pair, drift in drifts.items()
            }
        sums[(trainer, int(value))] = part
    return dict(sorted(sums.items()))


def _drifts(split: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The three log-ratios of :data:`SPLIT_PAIRS`, in float64 so that the first two add
    up to the third to rounding."""
    current, old, engine = (split[k].double() for k in ("current", "old", "engine"))
    return {
        "current/old": current - old,
        "old/engine": old - engine,
        "current/engine": current - engine,
    }


def lag_sums(sums: Mapping[tuple[int, int], VersionSums]) -> dict[int, VersionSums]:
    """The version sums gathered by lag ``V - v``; a key whose trainer version is
    :data:`UNKNOWN` counts from the newest version among those keys.

    Raises:
        ValueError: a version newer than the version being trained (negative lag).
    """
    newest = max((v for (t, v) in sums if t == UNKNOWN), default=0)
    by_lag: dict[int, VersionSums] = {}
    for (trainer, version), part in sums.items():
        lag = (newest if trainer == UNKNOWN else trainer) - version
        if lag < 0:
            raise ValueError(
                f"tokens of policy version {version} are newer than the version being "
                f"trained ({trainer})"
            )
        if lag in by_lag:
            by_lag[lag].merge(part)
        else:
            merged = VersionSums()
            merged.merge(part)
            by_lag[lag] = merged
    return dict(sorted(by_lag.items()))


def lag_statistics(sums: VersionSums, is_threshold: float = 2.0) -> LagStats:
    """The statistics of one lag from its (merged) sums."""
    n = sums.partials.tokens
    if n == 0:
        return LagStats(0, sums.sequences, math.nan, math.nan, math.nan, math.nan, None, None)
    stats = mismatch_statistics(sums.partials, is_threshold)
    split = None
    if sums.split:
        pairs = {pair: mismatch_statistics(p, is_threshold) for pair, p in sums.split.items()}
        split = DriftSplit(
            k1={pair: s.k1 for pair, s in pairs.items()},
            k3={pair: s.k3 for pair, s in pairs.items()},
        )
    return LagStats(
        tokens=n,
        sequences=sums.sequences,
        k1=stats.k1,
        k3=stats.k3,
        ess=stats.ess,
        outside=stats.frac_outside,
        clip_fraction=sums.clipped / sums.advantage_tokens if sums.advantage_tokens else None,
        split=split,
    )
