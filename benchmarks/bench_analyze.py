"""``ratioscope.analyze`` throughput (valid tokens/s) and peak memory on a SYNTHETIC dump.

docs/performance.md: all token sections at >= 2M valid tokens/s on the 2-core CPU, peak RSS bounded
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
    from ratioscope.allocator import keep_freed_memory

    result_allocator = keep_freed_memory()  # as the CLI does at start-up
    from ratioscope.analysis import analyze
    from ratioscope.sections import registry

    result: dict[str, object] = {"threads": torch.get_num_threads()}
    result["allocator_tuned"] = result_allocator
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
        analyze(args.path)  # warm-up: lazy imports, allocator, FFT plans
        result["token_stats_seconds"] = _token_statistics_seconds(batch, args.repeat)
        for name, chosen in runs.items():
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                analyze(args.path, sections=[c.name for c in chosen])
                times.append(time.perf_counter() - start)
            result[name] = min(times)
    result["peak_rss_gib"] = _peak_rss_gib()
    print(json.dumps(result))


def _token_statistics_seconds(batch, repeat: int) -> float:
    """ratioscope's vectorised KPO statistics of the token ratio: the peer's work."""
    from ratioscope.functional.token_stats import signal_statistics

    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        signal_statistics(batch.log_ratio, batch.mask)
        times.append(time.perf_counter() - start)
    return min(times)


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

    size_gib = args.path.stat().st_size / 1024**3
    print(
        f"SYNTHETIC dump {args.path.name}: B={args.batch}, T={args.tokens}, {size_gib:.2f} GiB; "
        f"torch {torch.__version__}, {args.threads} thread(s), {os.cpu_count()} CPUs, "
        f"best of {args.repeat}"
    )
    load = _run_child(args, "load")
    run = _run_child(args, "analyze")
    peer = _run_child(args, "peer")
    tokens = run["tokens"]
    print(f"valid tokens: {tokens:,}")
    print(f"{'run':<24} {'seconds':>9} {'M tokens/s':>11}")
    rows = [("load only", load["seconds"])]
    rows += [(f"analyze {name}", run[name]) for name in run if name not in _NOT_RUNS]
    for name, seconds in rows:
        print(f"{name:<24} {seconds:>9.3f} {tokens / seconds / 1e6:>11.2f}")
    peer_rate = peer["tokens_subset"] / peer["seconds_subset"]
    ours = tokens / run["token_stats_seconds"]
    print(
        f"KPO statistics of the token ratio: ratioscope {ours / 1e6:.2f} M tokens/s; peer "
        f"(per-sequence numpy loop, {args.peer_rows} sequences, extrapolated) "
        f"{peer_rate / 1e6:.2f} M tokens/s; ratio {ours / peer_rate:.1f}x"
    )
    rate = tokens / run["all"]
    verdict = "met" if rate >= 2e6 else "NOT met"
    print(f"analyze, all sections: {rate / 1e6:.2f} M tokens/s; target >= 2.00: {verdict}")
    print(
        f"peak RSS: analyze {run['peak_rss_gib']:.2f} GiB, load only "
        f"{load['peak_rss_gib']:.2f} GiB, file {size_gib:.2f} GiB"
    )


_NOT_RUNS = ("threads", "tokens", "peak_rss_gib", "token_stats_seconds", "allocator_tuned")


if __name__ == "__main__":
    main()
