"""Exact FPA future log-probs over large memory-mapped logits: peak memory and speed.

Writes two float16 logit files ([tokens, V], the current and the reference policy) chunk
by chunk, then, each in a fresh child process so its peak resident memory is its own:

* ratioscope  ``future_log_probs_exact`` on the memory-mapped files (chunked), for a
  size that fits in RAM and for one several times larger;
* peer        the unchunked ``log_softmax((1 + lam) h - lam h_ref)`` on the same input
  loaded whole (float32), for the size that fits.

It prints time, tokens/s and peak RSS (VmHWM of the child) of each, the ratio of the
times at the common size, and the agreement of the two results.

    python benchmarks/bench_fpa.py                        # 4096 and 32768 tokens, V=32768
    python benchmarks/bench_fpa.py --tokens 4096,65536 --vocab 32768 --dir /big/disk
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAMBDA = 1.0
GIB = 1024**3


def _write_logits(directory: Path, tokens: int, vocab: int, seed: int = 0) -> tuple[Path, Path]:
    import numpy as np

    paths = (directory / f"logits_{tokens}.npy", directory / f"ref_logits_{tokens}.npy")
    rng = np.random.default_rng(seed)
    for index, path in enumerate(paths):
        if path.exists():
            continue
        array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(tokens, vocab))
        block = max(1, (64 << 20) // (vocab * 2))
        for start in range(0, tokens, block):
            stop = min(start + block, tokens)
            values = rng.standard_normal((stop - start, vocab), dtype=np.float32) * 3
            array[start:stop] = values + index * rng.standard_normal(1, dtype=np.float32)
        array.flush()
        del array
    return paths


def _token_ids(tokens: int, vocab: int):
    import torch

    return torch.randint(0, vocab, (1, tokens), generator=torch.Generator().manual_seed(1))


def _child(mode: str, logits: str, ref_logits: str, out: str) -> None:
    import numpy as np
    import torch

    from ratioscope.functional.fpa import future_log_probs_exact

    mapped = np.load(logits, mmap_mode="r")
    ref_mapped = np.load(ref_logits, mmap_mode="r")
    tokens, vocab = mapped.shape
    ids = _token_ids(tokens, vocab)
    start = time.perf_counter()
    if mode == "ratioscope":
        result = future_log_probs_exact(mapped[None], ref_mapped[None], ids, LAMBDA)[0]
    else:  # the peer: everything in memory at once, float32
        h = torch.from_numpy(np.asarray(mapped, dtype=np.float32))
        h_ref = torch.from_numpy(np.asarray(ref_mapped, dtype=np.float32))
        combined = (1 + LAMBDA) * h - LAMBDA * h_ref
        log_probs = torch.log_softmax(combined, dim=-1)
        result = log_probs.gather(1, ids[0].unsqueeze(1)).squeeze(1)
    seconds = time.perf_counter() - start
    np.save(out, result.numpy())
    print(json.dumps({"seconds": seconds, "peak_rss_gib": _peak_rss_gib()}))


def _peak_rss_gib() -> float:
    """VmHWM of this process. Read here rather than from wait4's ru_maxrss, which on
    Linux also counts the parent's resident memory at the time of the fork."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / GIB
    raise RuntimeError("no VmHWM in /proc/self/status")


def _run_child(mode: str, paths: tuple[Path, Path], out: Path) -> dict:
    command = [sys.executable, __file__, "--child", mode, str(paths[0]), str(paths[1]), str(out)]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise SystemExit(f"{mode} child failed: {completed.stderr.strip()[-2000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _baseline_rss() -> float:
    """Peak RSS of a child that only imports numpy, torch and ratioscope (the fixed cost)."""
    code = (
        "import numpy, torch, ratioscope.functional.fpa; "
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return int(completed.stdout.strip()) * 1024 / GIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="4096,32768", help="small,large token counts")
    parser.add_argument("--vocab", type=int, default=32768)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the logit files")
    parser.add_argument("--keep", action="store_true", help="keep the logit files")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child)
        return

    import numpy as np
    import torch

    small, large = (int(t) for t in args.tokens.split(","))
    directory = Path(args.dir or tempfile.mkdtemp(prefix="bench_fpa_"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"# bench_fpa: V={args.vocab}, lambda={LAMBDA}, float16 logit files in {directory}")
    print(
        f"# torch {torch.__version__}, {os.cpu_count()} CPUs, torch threads "
        f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}"
    )
    print(f"# child baseline (imports only): peak RSS {_baseline_rss():.2f} GiB")
    rows = []
    try:
        for tokens in (small, large):
            paths = _write_logits(directory, tokens, args.vocab)
            input_gib = 2 * tokens * args.vocab * 2 / GIB
            modes = ("ratioscope", "peer") if tokens == small else ("ratioscope",)
            results = {}
            for mode in modes:
                results[mode] = _run_child(mode, paths, directory / f"{mode}_{tokens}.npy")
                r = results[mode]
                rows.append((mode, tokens, input_gib, r["seconds"], r["peak_rss_gib"]))
                print(
                    f"{mode:<10} tokens={tokens:>7} input={input_gib:6.2f} GiB "
                    f"time={r['seconds']:8.2f} s  {tokens / r['seconds']:>9.0f} tokens/s  "
                    f"peak RSS={r['peak_rss_gib']:.2f} GiB"
                )
            if "peer" in results:
                ours = np.load(directory / f"ratioscope_{tokens}.npy")
                peer = np.load(directory / f"peer_{tokens}.npy")
                ratio = results["peer"]["seconds"] / results["ratioscope"]["seconds"]
                print(
                    f"ratio peer/ratioscope time at {tokens} tokens: {ratio:.2f}x; "
                    f"max |difference| = {np.abs(ours - peer).max():.2e}"
                )
    finally:
        if not args.keep:
            for path in directory.glob("*.npy"):
                path.unlink()
            if args.dir is None:
                directory.rmdir()
    worst = max(row[4] for row in rows if row[0] == "ratioscope")
    print(f"ratioscope peak RSS over all sizes: {worst:.2f} GiB (target < 2 GB)")


if __name__ == "__main__":
    main()
