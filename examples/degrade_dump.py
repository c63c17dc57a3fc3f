"""Make a degraded copy of a run: Gaussian noise on the current policy's log-probs.

    python examples/degrade_dump.py sample_data/verl/ degraded/ --sigma 0.05

Reads every ``*.pt`` dump in SOURCE (a dict of tensors, as verl writes it), adds noise
eps ~ N(0, sigma^2) (seeded) to ``log_probs`` on the valid tokens (``response_mask``;
everywhere when the dump has no mask) and writes the dump under the same name into OUT.
Every other key is copied unchanged.

Why the gate notices: the log-ratio z = log_probs - old_log_probs gains independent noise,
so its per-sequence variance grows by about sigma^2, the chi-square divergence
E[r^2] - 1 by about 2 sigma^2 (E[exp(2 eps)] = exp(2 sigma^2)), and with sigma = 0.05 almost
no token stays inside KPO's on-policy band r in [1 - 3e-4, 1 + 4e-4]. The Kalman-filtered
ratios barely move: averaging out token noise is what the filter is for.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def degrade(
    source: Path,
    out: Path,
    sigma: float,
    seed: int = 0,
    key: str = "log_probs",
    mask_key: str = "response_mask",
) -> list[Path]:
    """Write noisy copies of the ``*.pt`` dumps of ``source`` into ``out``; return them."""
    import torch

    paths = sorted(source.glob("*.pt"))
    if not paths:
        raise SystemExit(f"{source}: no *.pt dumps in this directory")
    if out.resolve() == source.resolve():
        raise SystemExit(f"{out}: the output directory must differ from the source")
    out.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    written = []
    for path in paths:
        dump = torch.load(path, weights_only=True)
        if key not in dump:
            raise SystemExit(f"{path}: no '{key}' in the dump (keys: {', '.join(dump)})")
        values = dump[key]
        noise = sigma * torch.randn(values.shape, generator=generator, dtype=values.dtype)
        if mask_key in dump:
            noise = noise * dump[mask_key].to(values.dtype)  # keep padded positions at 0
        dump[key] = values + noise
        torch.save(dump, out / path.name)
        written.append(out / path.name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="directory of .pt dumps")
    parser.add_argument("out", type=Path, help="directory for the degraded dumps")
    parser.add_argument("--sigma", type=float, default=0.05, help="noise std (nats)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--key", default="log_probs", help="tensor to add the noise to")
    args = parser.parse_args(argv)
    written = degrade(args.source, args.out, args.sigma, args.seed, args.key)
    print(f"wrote {len(written)} dump(s) to {args.out} ({args.key} + N(0, {args.sigma:g}^2))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
