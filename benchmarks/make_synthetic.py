"""SYNTHETIC token dumps for benchmarks only: never sample data, never evidence.

Builds a dump in ratioscope's canonical keys with as many rows and tokens as a benchmark
needs. Nothing in it comes from a model: the log-ratio z = log_probs - old_log_probs is
an AR(1) process (z_t = phi z_{t-1} + sigma e_t) with occasional spikes, set to exactly
0 on the rows of the first (on-policy) mini-batch and on a share of tokens the policy is
certain of; sequence lengths are ragged. Real data lives in ``sample_data/``.

Keys: ``mask`` [B, T] bool, ``old_log_probs`` and ``log_probs`` [B, T] float32, and on
request ``advantages``, ``entropy``, ``old_entropy``, ``ref_log_probs`` [B, T] float32,
``group`` [B] int64, ``rewards`` [B] float32. Padded positions hold 0.

Import it from a benchmark (``benchmarks/`` is on ``sys.path`` when a script there runs):

    from make_synthetic import make_synthetic, write_synthetic
    batch = make_synthetic(1024, 4096, padding="right", seed=0, extras=("advantages",))

or run it:

    python benchmarks/make_synthetic.py --batch 1024 --tokens 4096 --out /tmp/synth.pt
    python benchmarks/make_synthetic.py -B 256 -T 32768 --padding left --extras all \\
        --out /tmp/synth.safetensors
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from scipy.signal import lfilter
from torch import Tensor

LABEL = "SYNTHETIC benchmark dump made by benchmarks/make_synthetic.py; not real data"
EXTRAS = ("advantages", "group", "rewards", "entropy", "old_entropy", "ref_log_probs")
_ROWS_PER_CHUNK = 256  # the random stream of a row depends on (seed, row // 256) only


def make_synthetic(
    B: int,
    T: int,
    *,
    padding: str = "right",
    seed: int = 0,
    extras: Iterable[str] = (),
    group_size: int = 8,
    phi: float = 0.9,
    sigma: float = 2e-3,
    spike_probability: float = 1e-3,
    spike_scale: float = 0.5,
    zero_probability: float = 0.2,
    on_policy_fraction: float = 0.25,
    min_length: int | None = None,
) -> dict[str, Tensor]:
    """A synthetic dump of ``B`` sequences padded to ``T`` tokens.

    Args:
        B, T: rows and padded length; one row always has length ``T``.
        padding: "right" (valid tokens first) or "left" (valid tokens last).
        seed: same seed, same tensors.
        extras: any of :data:`EXTRAS`, or "all".
        group_size: rows per GRPO group for ``group``, ``rewards`` and ``advantages``.
        phi, sigma: AR(1) coefficient and innovation standard deviation of the log-ratio.
        spike_probability, spike_scale: chance per token of a spike of size
            +-Exponential(spike_scale) added to the log-ratio.
        zero_probability: share of tokens with identical log-probs (log-ratio exactly 0).
        on_policy_fraction: leading share of rows whose log-ratio is exactly 0 everywhere.
        min_length: shortest sequence; default ``max(1, T // 4)``.

    Returns:
        dict of canonical keys -> tensors (see the module docstring).
    """
    if padding not in ("right", "left"):
        raise ValueError(f"padding must be 'right' or 'left', not {padding!r}")
    wanted = set(EXTRAS) if set(extras) == {"all"} else set(extras)
    unknown = wanted - set(EXTRAS)
    if unknown:
        raise ValueError(f"unknown extras {sorted(unknown)}; choose from {', '.join(EXTRAS)}")
    if B < 1 or T < 1:
        raise ValueError("B and T must be positive")
    shortest = max(1, T // 4) if min_length is None else min(max(1, min_length), T)

    out = {"mask": torch.zeros(B, T, dtype=torch.bool)}
    per_token = ["old_log_probs", "log_probs"] + [
        k for k in ("advantages", "entropy", "old_entropy", "ref_log_probs") if k in wanted
    ]
    for key in per_token:
        out[key] = torch.zeros(B, T, dtype=torch.float32)
    rewards = torch.zeros(B, dtype=torch.float32)
    on_policy_rows = math.ceil(on_policy_fraction * B)
    streams = np.random.SeedSequence(seed).spawn(math.ceil(B / _ROWS_PER_CHUNK))
    for chunk, stream in enumerate(streams):
        start = chunk * _ROWS_PER_CHUNK
        rows = slice(start, min(B, start + _ROWS_PER_CHUNK))
        rng = np.random.default_rng(stream)
        n = rows.stop - rows.start
        lengths = rng.integers(shortest, T + 1, size=n)
        if start == 0:
            lengths[0] = T
        valid = np.arange(T)[None, :] < lengths[:, None]
        old = -rng.exponential(0.4, size=(n, T))
        log_ratio = _ar1(rng, n, T, phi, sigma)
        spikes = rng.random((n, T)) < spike_probability
        log_ratio += (
            spikes
            * rng.choice([-1.0, 1.0], size=(n, T))
            * rng.exponential(spike_scale, size=(n, T))
        )
        certain = rng.random((n, T)) < zero_probability
        old[certain] = 0.0
        log_ratio[certain] = 0.0
        row_ids = np.arange(rows.start, rows.stop)
        log_ratio[row_ids < on_policy_rows] = 0.0
        values = {
            "old_log_probs": old.astype(np.float32),
            # log-probs stay <= 0; where z is exactly 0 the two tensors agree bit for bit
            "log_probs": np.minimum(old.astype(np.float32) + log_ratio.astype(np.float32), 0),
        }
        rewards[rows] = torch.from_numpy((rng.random(n) < 0.5).astype(np.float32))
        if "entropy" in wanted or "old_entropy" in wanted:
            old_entropy = np.abs(rng.normal(0.0, 0.6, size=(n, T)))
            values["old_entropy"] = old_entropy.astype(np.float32)
            drift = rng.normal(0.0, 0.01, size=(n, T))
            values["entropy"] = np.maximum(old_entropy + drift, 0).astype(np.float32)
        if "ref_log_probs" in wanted:
            reference = old + _ar1(rng, n, T, phi, 10 * sigma)
            values["ref_log_probs"] = np.minimum(reference, 0).astype(np.float32)
        for key in per_token:
            if key in values:
                out[key][rows] = torch.from_numpy(np.where(valid, values[key], 0))
        out["mask"][rows] = torch.from_numpy(valid)

    groups = torch.arange(B) // group_size
    if "advantages" in wanted:
        advantage = _group_normalised(rewards, groups)
        out["advantages"] = advantage[:, None] * out["mask"]
    if "group" in wanted:
        out["group"] = groups
    if "rewards" in wanted:
        out["rewards"] = rewards
    if padding == "left":
        lengths = out["mask"].sum(1)
        for key in [*per_token, "mask"]:
            out[key] = _right_to_left(out[key], lengths)
    return out


def _ar1(rng: np.random.Generator, rows: int, length: int, phi: float, sigma: float):
    """AR(1) paths z_t = phi z_{t-1} + sigma e_t from z_{-1} = 0: [rows, length] float64."""
    innovations = sigma * rng.standard_normal((rows, length))
    return lfilter([1.0], [1.0, -phi], innovations, axis=1)


def _group_normalised(rewards: Tensor, groups: Tensor) -> Tensor:
    """(r - group mean) / (group population std + 1e-6): [B] -> [B]."""
    count = torch.bincount(groups).float()
    mean = torch.bincount(groups, weights=rewards) / count
    centred = rewards - mean[groups]
    std = (torch.bincount(groups, weights=centred**2) / count).sqrt()
    return (centred / (std[groups] + 1e-6)).float()


def _right_to_left(values: Tensor, lengths: Tensor) -> Tensor:
    """Move each row's first ``length`` positions to its end: [B, T] -> [B, T]."""
    width = values.shape[1]
    source = (torch.arange(width)[None, :] - (width - lengths)[:, None]) % width
    return values.gather(1, source)


def write_synthetic(batch: dict[str, Tensor], path: str | Path) -> Path:
    """Write ``batch`` as ``.pt`` or ``.safetensors`` (by suffix), labelled synthetic."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in batch.items()}, str(path), {"synthetic": LABEL})
    elif path.suffix in (".pt", ".pth"):
        torch.save({**batch, "synthetic": LABEL}, path)
    else:
        raise ValueError(f"{path}: the suffix must be .pt, .pth or .safetensors")
    return path


def benchmark_dump(directory: str | Path, batch: int, tokens: int) -> Path:
    """The dump the benchmarks share (``bench_analyze.py``, ``bench_covariance_passes.py``,
    ``device_ops.py``): ``batch`` x ``tokens`` with every extra, as
    ``directory/synthetic_{batch}x{tokens}.safetensors``, written once and reused."""
    path = Path(directory) / f"synthetic_{batch}x{tokens}.safetensors"
    if not path.exists():
        write_synthetic(make_synthetic(batch, tokens, extras=("all",)), path)
    return path


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write a SYNTHETIC dump for benchmarks.")
    parser.add_argument("-B", "--batch", type=int, default=1024, help="rows (default 1024)")
    parser.add_argument("-T", "--tokens", type=int, default=4096, help="padded length")
    parser.add_argument("--padding", choices=("right", "left"), default="right")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--extras",
        default="",
        help=f"comma-separated optional keys ({', '.join(EXTRAS)}) or 'all'",
    )
    parser.add_argument("--out", type=Path, required=True, help="output .pt or .safetensors")
    args = parser.parse_args(argv)
    extras = [item for item in args.extras.split(",") if item]
    batch = make_synthetic(
        args.batch, args.tokens, padding=args.padding, seed=args.seed, extras=extras
    )
    path = write_synthetic(batch, args.out)
    tokens = int(batch["mask"].sum())
    print(
        f"wrote {path}: {LABEL}. {args.batch} x {args.tokens} ({args.padding}-padded), "
        f"{tokens:,} valid tokens, keys {', '.join(batch)}"
    )


if __name__ == "__main__":
    main()
