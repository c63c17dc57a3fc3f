"""The CUDA paths in one run: tests, speed against the GPU's memory bandwidth, and the
CUDA reports against the CPU's, key by key (``benchmarks/gpu_check.sh`` runs it).

Steps, each a row of the summary table at the end:

1. the GPU's memory bandwidth: a device-to-device copy of 1 GiB, timed (bytes read and
   written over the time): the floor the rows below are measured against;
2. the tests marked ``cuda`` (``pytest -m cuda``);
3. the Kalman filter on CUDA (1,024 x 4,096 and 64 x 32,768 tokens, float32), its
   Triton kernel (what ``analyze`` takes there) and its chunked scan: bytes of z and
   mask read and the states written, over the time, as a share of the copy's bandwidth
   (goal >= 50 %), and the kernel's states against the scan's (within 1e-6);
4. ``benchmarks/bench_analyze.py --device cuda``: valid tokens/s and the per-token
   tensors' bytes over the time, as a share of the bandwidth (goal >= 50 %);
5. ``analyze`` of the bundled run, of the bundled file with logits (sampling settings
   stated: its logits stay on the CPU) and of a synthetic dump of about 1 GiB on the CPU and
   on CUDA: every number of the two reports compared key by key, equal within
   ``--rtol`` (default 1e-4) or ``--atol`` (default 1e-6): the float32 reductions of the
   two devices add in different orders; a quantile read from the fixed histograms may
   land in the neighbouring bin, so keys under ``quantiles`` are held to the histogram's
   relative error (``quantile_bound``) instead;
6. ``analyze`` of the synthetic dump on CUDA with chunks of 2^22, 2^24 and 2^26
   elements, timed, beside the size ``analyze`` takes there by default (whether the
   rule that sizes a GPU's chunk by its free memory picks well).

Each row is printed as soon as its step is done and the table again at the end; a step
that raises is one failed row (its traceback on stderr) and the next step runs.
Without a CUDA device it prints one line and exits 0 (``--device cpu`` runs step 5 with
the CPU on both sides, which is how CI checks the comparison itself).

    python benchmarks/gpu_check.py
    python benchmarks/gpu_check.py --skip-bench        # tests and comparisons only
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
#: the bundled run compared between the devices
BUNDLED = ROOT / "sample_data" / "verl_steps"
#: the bundled file with logits and token ids, compared with sampling settings stated (the
#: logits stay on the CPU while the rest is on the device: the sampling section's path)
LOGITS_STEP = ROOT / "sample_data" / "verl" / "step_0032.pt"
SAMPLING = {"top_p": 0.9, "top_k": 50}
#: keys that differ between any two runs (times, paths of temporary files)
IGNORED = ("tool", "inputs", "state", "params")
#: the bandwidth share the issue asks of the Kalman filter and of the whole analysis
GOAL_SHARE = 0.5


def flat_numbers(document: Any, prefix: str = "") -> Iterator[tuple[str, float | None]]:
    """Every number of a JSON document (bools and strings left out), keyed by its path;
    None stands for JSON null (NaN in a report)."""
    if isinstance(document, Mapping):
        for key, value in document.items():
            if not prefix and key in IGNORED:
                continue
            yield from flat_numbers(value, f"{prefix}{key}.")
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield from flat_numbers(value, f"{prefix}{index}.")
    elif document is None:
        yield prefix.rstrip("."), None
    elif isinstance(document, (int, float)) and not isinstance(document, bool):
        yield prefix.rstrip("."), float(document)


def compare_documents(
    a: Mapping[str, Any], b: Mapping[str, Any], rtol: float, atol: float, quantile_rtol: float
) -> tuple[int, list[str]]:
    """(numbers compared, the keys that differ, each with both values): the two
    documents' numbers key by key (see the module for the tolerances)."""
    left, right = dict(flat_numbers(a)), dict(flat_numbers(b))
    differing = [f"{key}: only in one report" for key in sorted(set(left) ^ set(right))]
    for key in sorted(set(left) & set(right)):
        x, y = left[key], right[key]
        if x is None or y is None:
            if x is not y:
                differing.append(f"{key}: {x} vs {y}")
            continue
        tolerance = quantile_rtol if ".quantiles." in f".{key}." else rtol
        if not math.isclose(x, y, rel_tol=tolerance, abs_tol=atol):
            differing.append(f"{key}: {x!r} vs {y!r}")
    return len(left), differing


def compare_devices(
    path: Path, device: str, rtol: float, atol: float, quantile_rtol: float, **options: Any
) -> tuple[int, list[str], float, float]:
    """``analyze`` of ``path`` (with ``options``) on the CPU and on ``device``, compared;
    with each time."""
    import ratioscope

    started = time.perf_counter()
    cpu = ratioscope.analyze(path, device="cpu", **options).to_dict()
    cpu_seconds = time.perf_counter() - started
    started = time.perf_counter()
    other = ratioscope.analyze(path, device=device, **options).to_dict()
    other_seconds = time.perf_counter() - started
    count, differing = compare_documents(cpu, other, rtol, atol, quantile_rtol)
    return count, differing, cpu_seconds, other_seconds


def kalman_share(device: str, bandwidth: float) -> list[tuple[str, str, bool]]:
    """The Kalman filter's bytes over its time, as a share of ``bandwidth``: the Triton
    kernel (what ``analyze`` takes on a GPU) and the chunked scan, each size; the kernel's
    states against the scan's (float32: within 1e-6)."""
    import torch

    from ratioscope.functional import _triton_kernels
    from ratioscope.functional.kalman import kalman_filter

    rows_out = []
    for rows, length in ((1024, 4096), (64, 32768)):
        generator = torch.Generator().manual_seed(0)  # on the host: the same z anywhere
        z = (torch.randn(rows, length, generator=generator) * 1e-3).to(device)
        mask = torch.ones(rows, length, dtype=torch.bool, device=device)
        states = {}
        for backend in ("triton", "torch"):
            label = f"Kalman {'kernel' if backend == 'triton' else 'scan'} {rows}x{length}"
            if backend == "triton" and not _triton_kernels.can_take(z):
                rows_out.append((label, "skipped: Triton cannot run here", True))
                continue
            states[backend] = kalman_filter(z, mask, 1e-6, 1.0, backend=backend)  # warm
            best = math.inf
            for _ in range(5):
                torch.cuda.synchronize()
                start = time.perf_counter()
                kalman_filter(z, mask, 1e-6, 1.0, backend=backend)
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - start)
            moved = z.nbytes + mask.nbytes + states[backend].nbytes
            share = moved / best / bandwidth
            rows_out.append(
                (
                    label,
                    f"{best * 1e3:.3f} ms, {moved / best / 1e9:.0f} GB/s = {100 * share:.0f} % "
                    "of the copy",
                    share >= GOAL_SHARE,
                )
            )
        if len(states) == 2:
            gap = float((states["triton"] - states["torch"]).abs().max())
            rows_out.append(
                (f"Kalman kernel vs scan {rows}x{length}", f"max |diff| {gap:.1e}", gap <= 1e-6)
            )
    return rows_out


#: the modules the check's paths import (``import`` names), each a package to install
#: where one is missing; polars and rapidfuzz (tables and files of sequences, the
#: samples' evaluation) are not among them: a GPU image that lacks them runs the check
NEEDED = (
    "typer", "rich", "numpy", "scipy", "matplotlib", "torch", "sklearn", "safetensors",
    "numba", "pytest", "hypothesis",
)  # fmt: skip


def missing_modules(names: tuple[str, ...] = NEEDED) -> list[str]:
    """The modules of ``names`` that this Python cannot import (a GPU machine's image may
    hold torch and most of the rest, but not all)."""
    import importlib.util

    return [name for name in names if importlib.util.find_spec(name) is None]


def cuda_test_files() -> list[Path]:
    """The test files that hold tests marked ``cuda``: collecting only those keeps the
    run free of the other files' optional imports (a browser driver, a metrics
    package), which a GPU machine without a package registry may lack."""
    return sorted(
        path for path in (ROOT / "tests").glob("test_*.py") if "mark.cuda" in path.read_text()
    )


def run_tests() -> tuple[str, bool]:
    """``pytest -m cuda`` over :func:`cuda_test_files`: its last line, and whether it
    passed."""
    files = [str(path.relative_to(ROOT)) for path in cuda_test_files()]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", *files],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return (lines[-1] if lines else "no output"), done.returncode == 0


def run_bench_analyze(folder: Path) -> tuple[str, bool]:
    """``bench_analyze.py --device cuda``: its tokens/s and bandwidth share."""
    summary = folder / "bench_analyze.json"
    done = subprocess.run(
        [sys.executable, str(HERE / "bench_analyze.py"), "--device", "cuda",
         "--dir", str(folder), "--json", str(summary), "--repeat", "3"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0 or not summary.exists():
        return f"failed: {done.stderr.strip().splitlines()[-1:]}", False
    found = json.loads(summary.read_text())
    share = found.get("bandwidth_share", float("nan"))
    return (
        f"{found['tokens_per_s'] / 1e6:.1f} M tokens/s, {100 * share:.0f} % of the copy",
        share >= GOAL_SHARE,
    )


#: chunk sizes (elements, powers of two) timed on the device: the analysis there is a
#: fixed count of operations a chunk (docs/performance.md, "The GPU check"), so a larger
#: chunk may pay; the CPU's is 2^22, a GPU's follows its free memory
#: (ratioscope.analysis.device.chunk_elements_for)
CHUNK_POWERS = (22, 24, 26)


def chunk_rows(path: Path, device: str) -> list[tuple[str, str, bool]]:
    """``analyze`` of ``path`` on ``device`` with each of :data:`CHUNK_POWERS`' chunk
    sizes, best of two, and the size ``analyze`` takes there by default
    (:func:`ratioscope.analysis.device.chunk_elements_for`): whether that rule picks
    well (the row passes unless a size fails)."""
    import ratioscope

    timings = []
    for power in CHUNK_POWERS:
        best = math.inf
        for _ in range(2):
            started = time.perf_counter()
            ratioscope.analyze(path, device=device, chunk_elements=2**power)
            best = min(best, time.perf_counter() - started)
        timings.append(f"2^{power} {best:.2f} s")
    from ratioscope.analysis.device import chunk_elements_for, resolve_device

    chosen = chunk_elements_for(resolve_device(device))  # what analyze takes by default
    detail = f"{', '.join(timings)}; the default here: 2^{chosen.bit_length() - 1}"
    return [(f"{device} analyze by chunk size", detail, True)]


def synthetic_dump(folder: Path, gib: float) -> Path:
    """A synthetic dump of about ``gib`` GiB, all extras (benchmarks/make_synthetic.py)."""
    sys.path.insert(0, str(HERE))
    from make_synthetic import make_synthetic, write_synthetic

    # all extras: 6 float32 per-token tensors and the mask, about 25 bytes a token
    tokens = 4096
    rows = max(8, int(gib * 2**30 / (25 * tokens)) // 8 * 8)
    path = folder / f"synthetic_{rows}x{tokens}.safetensors"
    write_synthetic(make_synthetic(rows, tokens, extras=("all",)), path)
    return path


Row = tuple[str, str, bool]


def print_row(row: Row, width: int = 34) -> None:
    """One row of the summary: ok or FAIL, the label, the detail."""
    label, detail, passed = row
    print(f"{'ok  ' if passed else 'FAIL'}  {label:<{width}}  {detail}", flush=True)


def guarded(label: str, step: Callable[[], list[Row]]) -> list[Row]:
    """The rows of one step, each printed as soon as it is known (a check cut off by its
    machine's time limit keeps what it measured); a step that raises gives one failed row
    naming the error, its traceback on stderr, and the next step still runs: one GPU
    session sees every step's result."""
    try:
        found = step()
    except Exception as error:  # any step's failure is one row of the table
        traceback.print_exc(file=sys.stderr)
        message = str(error).strip().splitlines()
        found = [(label, f"raised {type(error).__name__}: {message[0] if message else ''}", False)]
    for row in found:
        print_row(row)
    return found


def comparison_rows(
    label: str,
    path: Callable[[], Path],
    args: argparse.Namespace,
    quantile_rtol: float,
    options: dict[str, Any],
) -> list[Row]:
    """The row of one CPU-against-device comparison, its first differing keys printed."""
    count, differing, cpu_s, other_s = compare_devices(
        path(), args.device, args.rtol, args.atol, quantile_rtol, **options
    )
    for line in differing[:10]:
        print(f"  {label}: {line}")
    detail = (
        f"{count} numbers, {len(differing)} differ (rtol {args.rtol:g}, quantiles "
        f"{quantile_rtol:.4f}); cpu {cpu_s:.1f} s, {args.device} {other_s:.1f} s"
    )
    return [(f"cpu vs {args.device}: {label}", detail, not differing)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="the device checked (cpu: CI's)")
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--atol", type=float, default=1e-6)
    parser.add_argument("--gib", type=float, default=1.0, help="size of the synthetic dump")
    parser.add_argument("--skip-bench", action="store_true", help="no speed rows")
    parser.add_argument("--skip-tests", action="store_true", help="no pytest -m cuda")
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA device (torch.cuda.is_available() is False): skipped")
        return 0
    missing = missing_modules()
    if missing:
        print(
            f"gpu_check: cannot import {', '.join(missing)}: install them first (offline: "
            "pip download them where a package index is reachable, then pip install "
            "--no-index --find-links <that folder>; docs/performance.md, 'The GPU check')"
        )
        return 2
    from ratioscope.functional.histogram import RELATIVE_ERROR

    rows: list[Row] = []
    on_gpu = args.device == "cuda"
    name = torch.cuda.get_device_name() if on_gpu else "cpu (the comparison alone)"
    print(f"gpu_check on {name}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ratioscope-gpu-check-") as scratch:
        folder = Path(scratch)
        if on_gpu:
            sys.path.insert(0, str(HERE))
            from bench_analyze import copy_bandwidth

            measured: dict[str, float] = {"bandwidth": math.nan}

            def bandwidth_row() -> list[Row]:
                measured["bandwidth"] = copy_bandwidth("cuda")
                return [("copy bandwidth (floor)", f"{measured['bandwidth'] / 1e9:.0f} GB/s", True)]

            rows += guarded("copy bandwidth (floor)", bandwidth_row)
            if not args.skip_tests:
                rows += guarded("pytest -m cuda", lambda: [("pytest -m cuda", *run_tests())])
            if not args.skip_bench:
                rows += guarded("Kalman", lambda: kalman_share("cuda", measured["bandwidth"]))
                rows += guarded(
                    "bench_analyze --device cuda",
                    lambda: [("bench_analyze --device cuda", *run_bench_analyze(folder))],
                )
        synthetic = functools.cache(lambda: synthetic_dump(folder, args.gib))
        comparisons: tuple[tuple[str, Callable[[], Path], dict[str, Any]], ...] = (
            ("bundled run", lambda: BUNDLED, {}),
            ("logits, top-p 0.9, top-k 50", lambda: LOGITS_STEP, SAMPLING),
            (f"synthetic {args.gib:g} GiB", synthetic, {}),
        )
        for label, path, options in comparisons:
            rows += guarded(
                f"cpu vs {args.device}: {label}",
                lambda label=label, path=path, options=options: comparison_rows(
                    label, path, args, RELATIVE_ERROR, options
                ),
            )
        if on_gpu and not args.skip_bench:
            rows += guarded("cuda analyze by chunk size", lambda: chunk_rows(synthetic(), "cuda"))
    width = max(len(label) for label, _, _ in rows)
    print(f"gpu_check on {name}: summary")
    for row in rows:
        print_row(row, width)
    return 0 if all(passed for _, _, passed in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
