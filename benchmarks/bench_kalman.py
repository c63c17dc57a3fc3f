"""Speed and accuracy of the KPO Kalman filter (docs/performance.md).

On the same tensors it times the compiled per-row recurrence (``kalman_filter`` with
``backend="compiled"``, numba; skipped without it), the chunked scan (``backend="torch"``),
the per-token loop vectorised over rows (``kalman_filter_loop``, float64), the authors'
closed form (``kalman_filter_closed_form``) and one elementwise pass ``z * mask``, and
prints the ratios and the max abs error of each against the float64 loop.
On CUDA (when present) it also times the Triton kernel (``backend="triton"``, what
``analyze`` takes there) and reports the achieved memory bandwidth of each.

Usage:
    python benchmarks/bench_kalman.py
    python benchmarks/bench_kalman.py --sizes 1024x4096 --ratios 1e-4 --repeats 15
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import torch

from ratioscope.functional import _kernels, _triton_kernels
from ratioscope.functional.kalman import (
    DEFAULT_CHUNK,
    kalman_filter,
    kalman_filter_closed_form,
    kalman_filter_loop,
)


def parse_sizes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(n) for n in item.split("x")) for item in text.split(",")]  # type: ignore[misc]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def make_batch(rows: int, length: int, device: torch.device, seed: int = 0):
    """Log-ratios ~ N(0.02, 0.3^2), right-padded lengths uniform in [T/2, T]."""
    gen = torch.Generator().manual_seed(seed)
    z = 0.02 + 0.3 * torch.randn(rows, length, generator=gen)
    lengths = torch.randint(length // 2, length + 1, (rows,), generator=gen)
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    return z.to(device), mask.to(device)


def bench_size(rows, length, ratios, args, device) -> list[str]:
    z, mask = make_batch(rows, length, device)
    compiled_ok = device.type == "cpu" and _kernels.available()
    # the Triton kernel on a GPU (on the CPU only its interpreter runs it: not a timing)
    kernel_ok = device.type == "cuda" and _triton_kernels.can_take(z)
    lines = []
    for ratio in ratios:
        q, v = ratio, 1.0

        def scan(q=q, v=v):
            return kalman_filter(z, mask, q, v, chunk=args.chunk, backend="torch")

        def compiled(q=q, v=v):
            return kalman_filter(z, mask, q, v, backend="compiled")

        def closed(q=q, v=v):
            return kalman_filter_closed_form(z, mask, q, v)

        def elementwise():
            return z * mask

        def kernel(q=q, v=v):
            return kalman_filter(z, mask, q, v, backend="triton")

        candidates = {"scan": scan, "closed": closed, "z*mask": elementwise}
        if compiled_ok:
            candidates["compiled"] = compiled
        if kernel_ok:
            candidates["kernel"] = kernel
        for fn in candidates.values():  # warm-up (and the kernel's compilation)
            fn()
        times: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(args.repeats):  # interleaved, so load changes hit all alike
            for name, fn in candidates.items():
                times[name].append(timed(fn, device))
        loop_t, reference = [], None
        if not args.skip_loop:
            for _ in range(args.loop_repeats):
                start = time.perf_counter()
                reference = kalman_filter_loop(z, mask, q, v)
                sync(device)
                loop_t.append(time.perf_counter() - start)
        median = {name: statistics.median(t) for name, t in times.items()}
        scan_s, elem_s = median["scan"], median["z*mask"]
        loop_s = statistics.median(loop_t) if loop_t else float("nan")
        if reference is None:
            reference = kalman_filter_loop(z.cpu(), mask.cpu(), q, v).to(device)

        def error(fn, reference=reference) -> float:
            return (fn().double() - reference).abs().max().item()

        line = (
            f"{device.type:4s} B={rows:<5d} T={length:<6d} Q/V={ratio:<6.0e} "
            f"scan {scan_s * 1e3:8.2f} ms | loop {loop_s * 1e3:9.1f} ms | "
            f"closed {median['closed'] * 1e3:7.2f} ms | z*mask {elem_s * 1e3:6.2f} ms || "
            f"loop/scan {loop_s / scan_s:6.1f}x | scan/z*mask {scan_s / elem_s:5.2f}x || "
            f"max|err| scan {error(scan):.1e} closed {error(closed):.1e}"
        )
        if compiled_ok:
            compiled_s = median["compiled"]
            line += (
                f" || compiled {compiled_s * 1e3:7.2f} ms, /z*mask {compiled_s / elem_s:5.2f}x, "
                f"scan/compiled {scan_s / compiled_s:5.2f}x, max|err| {error(compiled):.1e}"
            )
        if kernel_ok:
            kernel_s = median["kernel"]
            line += (
                f" || kernel {kernel_s * 1e3:7.3f} ms, scan/kernel {scan_s / kernel_s:5.1f}x, "
                f"max|err| {error(kernel):.1e}"
            )
        if device.type == "cuda":
            # z read (4 B) + mask read (1 B) + rho written (4 B) per element.
            moved = rows * length * 9
            scan_bw, elem_bw = moved / scan_s / 1e9, moved / elem_s / 1e9
            line += f" || scan {scan_bw:6.1f} GB/s, z*mask {elem_bw:6.1f} GB/s"
            if kernel_ok:
                line += f", kernel {moved / median['kernel'] / 1e9:6.1f} GB/s"
        lines.append(line)
        print(line, flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024x4096,64x32768", help="BxT,BxT,...")
    parser.add_argument("--cuda-sizes", default="1024x4096,64x32768,4096x32768")
    parser.add_argument("--ratios", default="1e-6,1e-4,1e-2", help="Q/V values (V = 1)")
    parser.add_argument("--repeats", type=int, default=11, help="timed runs (median)")
    parser.add_argument("--loop-repeats", type=int, default=3, help="timed loop runs (median)")
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--skip-loop", action="store_true", help="no loop timing (CUDA)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    ratios = [float(r) for r in args.ratios.split(",")]
    print(
        f"torch {torch.__version__} | threads {torch.get_num_threads()} | "
        f"{platform.processor() or platform.machine()} | chunk {args.chunk} | "
        f"median of {args.repeats} (loop: {args.loop_repeats}) | compiled kernel: "
        f"{'yes' if _kernels.available() else 'no (numba missing or disabled)'}"
    )
    if args.device in ("cpu", "all"):
        for rows, length in parse_sizes(args.sizes):
            bench_size(rows, length, ratios, args, torch.device("cpu"))
    if args.device in ("cuda", "all"):
        if not torch.cuda.is_available():
            print("cuda: no CUDA device, skipped")
            return
        device = torch.device("cuda")
        print(f"cuda: {torch.cuda.get_device_name(device)}")
        for rows, length in parse_sizes(args.cuda_sizes):
            bench_size(rows, length, ratios, args, device)


if __name__ == "__main__":
    main()
