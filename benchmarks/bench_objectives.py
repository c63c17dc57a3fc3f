"""``ratioscope objectives`` speed per method on a SYNTHETIC batch, against one pass.

Every method's coefficient is a handful of elementwise passes over the [B, T] tensors
(the KPO row adds a scan over the tokens; FPA needs log-probs only here), so the peer is
the floor of that work measured in the same run: one elementwise pass ``r * A`` over the
same tensors (``torch.exp`` of the log-ratio times the advantage, masked). The script
prints, per method, its time, the peer's and the ratio, then the whole view (all methods,
the statistics and the correlation sums) and analyze's time on the same batch.

    python benchmarks/bench_objectives.py                  # B=512, T=2048, 2 threads
    python benchmarks/bench_objectives.py -B 1024 -T 4096 --repeat 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _best(function, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-B", "--batch", type=int, default=512)
    parser.add_argument("-T", "--tokens", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import torch
    from make_synthetic import make_synthetic

    torch.set_num_threads(args.threads)
    import ratioscope.objective_family.side_by_side as library
    from ratioscope.analysis.pipeline import analyze
    from ratioscope.data.batch import TokenBatch
    from ratioscope.objective_family.methods import METHODS, MethodInputs

    tensors = make_synthetic(
        args.batch, args.tokens, seed=0, extras=("advantages", "group", "rewards",
        "entropy", "old_entropy", "ref_log_probs"),
    )  # fmt: skip
    # a rollout policy a little off the behaviour one, so that the corrections bind
    noise = torch.randn(tensors["old_log_probs"].shape, generator=torch.Generator().manual_seed(1))
    tensors["rollout_log_probs"] = tensors["old_log_probs"] + 0.05 * noise * tensors["mask"]
    batch = TokenBatch.from_tensors(tensors, source="synthetic")
    tokens = int(batch.mask.sum())
    print(
        f"SYNTHETIC batch B={args.batch} T={args.tokens}: {tokens:,} valid tokens, "
        f"{args.threads} threads, best of {args.repeat}"
    )

    z, adv, mask = batch.log_ratio, batch.advantages, batch.mask
    assert adv is not None

    def one_pass() -> None:
        torch.where(mask, torch.exp(z.double()) * adv.double(), 0.0)

    peer = _best(one_pass, args.repeat)
    print(f"peer: one elementwise pass r * A (float64): {1e3 * peer:.1f} ms")
    print(f"{'method':<10} {'ms':>9} {'x peer':>8}")
    for name, method in METHODS.items():
        settings = method.settings()

        def compute(method=method, settings=settings) -> None:
            method.compute(MethodInputs(batch, base_settings=METHODS["grpo"].settings()), settings)

        seconds = _best(compute, args.repeat)
        print(f"{name:<10} {1e3 * seconds:9.1f} {seconds / peer:8.1f}")
    whole = _best(lambda: library.objectives(batch), args.repeat)
    print(
        f"{'all (view)':<10} {1e3 * whole:9.1f} {whole / peer:8.1f}   "
        f"{tokens / whole / 1e6:.2f}M valid tokens/s"
    )
    analysed = _best(lambda: analyze(batch), 1)
    print(f"analyze of the same batch (all sections, once): {1e3 * analysed:.0f} ms")


if __name__ == "__main__":
    main()
