"""QUATRO lambda* for many groups at once vs a per-group scipy.optimize.minimize_scalar loop.

Solves 10,000 groups of 8 rewards (binary and Gaussian) with ``quatro_duals`` (all groups
in one vectorised root finding, float64), then the same problem with a Python loop of
``scipy.optimize.minimize_scalar`` (bounded Brent on log lambda) over a subset of the
non-degenerate groups, extrapolated to all of them. Prints both times, their ratio and the
largest relative difference of lambda* on the subset. Timed with torch's default thread
count and with one thread (on a loaded machine extra threads can slow small kernels down).

    python benchmarks/bench_quatro.py
    python benchmarks/bench_quatro.py --groups 100000 --size 16 --subset 1000
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np


def _rewards(kind: str, groups: int, size: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "binary":
        return rng.integers(0, 2, (groups, size)).astype(np.float64)
    return rng.standard_normal((groups, size))


def _time_ratioscope(rewards: np.ndarray, delta: float, repeat: int):
    import torch

    from ratioscope.functional.quatro import quatro_duals

    flat = torch.tensor(rewards.reshape(-1))
    group = torch.arange(rewards.shape[0]).repeat_interleave(rewards.shape[1])
    quatro_duals(flat, group, delta)  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = quatro_duals(flat, group, delta)
        times.append(time.perf_counter() - start)
    return min(times), float(np.median(times)), result


def _scipy_lambda(rewards: np.ndarray, delta: float) -> float:
    from scipy.optimize import minimize_scalar
    from scipy.special import logsumexp

    shifted = rewards - rewards.max()
    log_n = math.log(len(rewards))

    def f(u: float) -> float:  # f(lambda) - max R, over u = log(lambda)
        lam = math.exp(u)
        return lam * (delta + logsumexp(shifted / lam) - log_n)

    centre = math.log(rewards.max() - rewards.min())
    result = minimize_scalar(
        f, bounds=(centre - 12, centre + 12), method="bounded", options={"xatol": 1e-10}
    )
    return math.exp(result.x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--delta", type=float, default=0.01)
    parser.add_argument("--subset", type=int, default=500, help="groups solved by scipy")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import torch

    default_threads = torch.get_num_threads()
    print(
        f"# bench_quatro: {args.groups} groups x {args.size} rewards, delta={args.delta}; "
        f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    for kind in ("binary", "gaussian"):
        rewards = _rewards(kind, args.groups, args.size)
        timings = {}
        for threads in sorted({default_threads, 1}, reverse=True):
            torch.set_num_threads(threads)
            timings[threads] = _time_ratioscope(rewards, args.delta, args.repeat)
        torch.set_num_threads(default_threads)
        best, _, (lam, _, _, degenerate) = min(timings.values(), key=lambda t: t[0])
        live = np.flatnonzero(~degenerate.numpy())
        subset = live[: args.subset]
        start = time.perf_counter()
        reference = np.array([_scipy_lambda(rewards[g], args.delta) for g in subset])
        per_group = (time.perf_counter() - start) / len(subset)
        scipy_total = per_group * len(live)
        difference = np.max(np.abs(lam.numpy()[subset] - reference) / reference)
        for threads, (fastest, median, _) in sorted(timings.items(), reverse=True):
            print(
                f"{kind:<8} ratioscope ({threads} thread{'s' if threads > 1 else ''}): "
                f"best {fastest * 1e3:8.1f} ms, median {median * 1e3:8.1f} ms "
                f"for {args.groups} groups ({len(live)} non-degenerate)"
            )
        print(
            f"{kind:<8} scipy minimize_scalar loop: {per_group * 1e3:.3f} ms/group on "
            f"{len(subset)} groups -> {scipy_total:.2f} s extrapolated to {len(live)}; "
            f"ratio scipy/ratioscope {scipy_total / best:.0f}x; max rel. diff of lambda* "
            f"{difference:.1e}"
        )


if __name__ == "__main__":
    main()
