"""``ratioscope.analyze`` throughput (valid tokens/s) and peak memory on a SYNTHETIC dump.

DESIGN 7: all token sections at >= 2M valid tokens/s on the 2-core CPU, peak RSS bounded
by chunking. The dump (``benchmarks/make_synthetic.py``, all extras: advantages, group,
rewards, entropies, reference log-probs) is written once as safetensors and reused.

Each measurement runs in a fresh child process that reports its own peak resident
memory (VmHWM):

* ratioscope   ``ratioscope.analyze(path)``: every section; then each section alone;
* load         the imports and ``ratioscope.load(path)`` alone (the floor);
* peer         a straightforward per-sequence numpy implementation of the KPO token
               statistics (states, runs, switching, windows, LFR by FFT, variances) for
               the token ratio only, timed on a subset of sequences and extrapolated.

    python benchmarks/bench_analyze.py                 # B=1024, T=4096, 2 threads
    python benchmarks/bench_analyze.py --threads 1 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024**2
    return float("nan")


def _child(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    import ratioscope
    from ratioscope.analysis import analyze
    from ratioscope.sections import registry

    result: dict[str, object] = {"threads": torch.get_num_threads()}
    batch = ratioscope.load(args.path)
    result["tokens"] = batch.num_tokens
    if args.mode == "load":
        times = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            ratioscope.load(args.path)
            times.append(time.perf_counter() - start)
        result["seconds"] = min(times)
    elif args.mode == "peer":
        result.update(_peer(batch, args.peer_rows))
    else:
        classes = registry.section_classes()
        runs = {"all": classes, **{cls.name: [cls] for cls in classes}}
        for name, chosen in runs.items():
            registry_override = chosen
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                analyze(args.path, sections=[c.name for c in registry_override])
                times.append(time.perf_counter() - start)
            result[name] = min(times)
    result["peak_rss_gib"] = _peak_rss_gib()
    print(json.dumps(result))


def _peer(batch, rows: int) -> dict[str, float]:
    """Per-sequence numpy loop over the token ratio, written the obvious way."""
    import numpy as np

    z = batch.log_ratio.double().numpy()
    lengths = batch.lengths.numpy()
    chosen = range(min(rows, len(lengths)))
    start = time.perf_counter()
    for i in chosen:
        x = z[i, : lengths[i]]
        r = np.exp(x)
        states = np.where(r > 1 + 4e-4, 1, np.where(r < 1 - 3e-4, -1, 0))
        change = np.flatnonzero(np.diff(states)) + 1
        np.diff(np.concatenate([[0], change, [len(states)]]))  # run lengths
        for w in range(0, len(states), 50):
            window = states[w : w + 50]
            if len(window) > 1:
                np.count_nonzero(np.diff(window)) / (len(window) - 1)
            np.var(x[w : w + 50])
        centred = x - x.mean()
        power = np.abs(np.fft.fft(centred)) ** 2
        k = int(0.1 * len(x) / 2)
        power[: k + 1].sum() + power[len(x) - k :].sum()
        np.var(x)
    elapsed = time.perf_counter() - start
    tokens = int(lengths[: len(chosen)].sum())
    return {"seconds_subset": elapsed, "tokens_subset": tokens}


def _run_child(args: argparse.Namespace, mode: str) -> dict:
    command = [
        sys.executable, __file__, "--child", mode, "--path", str(args.path),
        "--repeat", str(args.repeat), "--threads", str(args.threads),
        "--peer-rows", str(args.peer_rows),
    ]  # fmt: skip
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", "-B", type=int, default=1024)
    parser.add_argument("--tokens", "-T", type=int, default=4096)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ratioscope-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer-rows", type=int, default=128)
    parser.add_argument("--child", choices=("analyze", "load", "peer"), help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.mode = args.child
        _child(args)
        return

    sys.path.insert(0, str(HERE))
    from make_synthetic import make_synthetic, write_synthetic

    args.dir.mkdir(parents=True, exist_ok=True)
    args.path = args.dir / f"synthetic_{args.batch}x{args.tokens}.safetensors"
    if not args.path.exists():
        write_synthetic(make_synthetic(args.batch, args.tokens, extras=("all",)), args.path)
    import torch

    print(f"SYNTHETIC dump {args.path.name}: B={args.batch}, T={args.tokens}, "
          f"{args.path.stat().st_size / 1024**2:.0f} MiB; torch {torch.__version__}, "
          f"{args.threads} thread(s), {os.cpu_count()} CPUs")  # fmt: skip
    load = _run_child(args, "load")
    run = _run_child(args, "analyze")
    peer = _run_child(args, "peer")
    tokens = run["tokens"]
    print(f"valid tokens: {tokens:,}")
    print(f"{'run':<16} {'seconds':>9} {'M tokens/s':>11}")
    print(f"{'load only':<16} {load['seconds']:>9.3f} {tokens / load['seconds'] / 1e6:>11.2f}")
    for name in [k for k in run if k not in ("threads", "tokens", "peak_rss_gib")]:
        seconds = run[name]
        print(f"{'analyze ' + name:<16} {seconds:>9.3f} {tokens / seconds / 1e6:>11.2f}")
    peer_rate = peer["tokens_subset"] / peer["seconds_subset"]
    print(f"{'peer (token KPO stats, numpy loop)':<36} {peer_rate / 1e6:>8.3f} M tokens/s "
          f"(on {args.peer_rows} sequences, extrapolated)")  # fmt: skip
    rate = tokens / run["all"]
    print(f"analyze all sections: {rate / 1e6:.2f} M tokens/s; target >= 2.00: "
          f"{'met' if rate >= 2e6 else 'NOT met'}; {rate / peer_rate:.1f}x the peer, which "
          "computes one section's statistics for one ratio variant")  # fmt: skip
    print(f"peak RSS: analyze {run['peak_rss_gib']:.2f} GiB, load only "
          f"{load['peak_rss_gib']:.2f} GiB (file {args.path.stat().st_size / 1024**3:.2f} GiB)")


if __name__ == "__main__":
    main()
