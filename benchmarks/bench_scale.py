"""``ratioscope analyze`` over many files and over shards: wall time, tokens/s, peak RSS.

The dumps are SYNTHETIC (``benchmarks/make_synthetic.py``: an AR(1) log-ratio with spikes,
not model output), one safetensors file per shard with every optional key: at the
defaults 64 files of B=256 x T=2048 (about 13 MB and 0.33M valid tokens each). They are
written once into ``--dir`` and reused by later runs.

Every measurement runs the real command line in a fresh child process (``python -c`` with
a few lines that run the ``ratioscope`` module exactly as ``python -m ratioscope`` does and
record the process's peak resident memory, VmHWM, at exit); its wall time includes
interpreter start-up and imports.

(a) one ``analyze`` over the first 1, 4, 16, 64 files: time, valid tokens/s, peak RSS.
    The files are streamed one after another, so peak RSS should not grow with the count.
(b) the sharded workflow of a Slurm array or of Ray tasks: one ``analyze --json`` per
    file, then one ``merge`` of the reports: each task's time and peak RSS, the merge's
    time, peak RSS and output size for 1, 4, 16, 64 reports; and a staged merge (merges
    of ``--stage`` reports, then one merge of their results).
(c) the merged reports against the single multi-file report of the same files: every
    number compared (``tool``, which holds a timestamp, left out).

The peer of the sharded workflow is the single multi-file run; the ratios are printed.

    python benchmarks/bench_scale.py --dir /tmp/ratioscope_scale
    python benchmarks/bench_scale.py --dir /tmp/ratioscope_scale --quick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _child import Measured, measure

MB = 1000**2


def ensure_shards(directory: Path, count: int, rows: int, tokens: int, seed: int) -> list[Path]:
    """SYNTHETIC shard files ``synthetic_{rows}x{tokens}_{i}.safetensors``; reused if present."""
    from make_synthetic import make_synthetic, write_synthetic

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        path = directory / f"synthetic_{rows}x{tokens}_{index:05d}.safetensors"
        if not path.exists():
            batch = make_synthetic(rows, tokens, seed=seed + index, extras=["all"])
            write_synthetic(batch, path)
        paths.append(path)
    return paths


def valid_tokens(report: Path) -> int:
    return sum(item["tokens"] for item in json.loads(report.read_text())["inputs"])


def run_analyze(paths: list[Path], out: Path, repeat: int, logs: Path) -> Measured:
    """Best time and highest peak of ``repeat`` runs of one analyze over ``paths``."""
    command = ["analyze", *map(str, paths), "--json", str(out), "--quiet", "--device", "cpu"]
    runs = [measure(command, logs / f"{out.stem}.log") for _ in range(repeat)]
    return Measured(min(r.seconds for r in runs), max(r.peak for r in runs))


def run_merge(reports: list[Path], out: Path, logs: Path) -> Measured:
    command = ["merge", *map(str, reports), "--out", str(out), "--quiet"]
    return measure(command, logs / f"{out.stem}.log")


def compare_reports(left: Any, right: Any, path: str = "") -> dict[str, Any]:
    """Leaf-by-leaf comparison: counts of identical leaves, the largest relative difference
    between float leaves, and the paths that differ in structure or non-float value."""
    result: dict[str, Any] = {"leaves": 0, "identical": 0, "max_rel": 0.0, "quantiles": 0,
                              "quantiles_identical": 0, "mismatched": []}  # fmt: skip
    _compare(left, right, path, result)
    return result


def compare_files(left: Path, right: Path) -> tuple[dict[str, Any], bool]:
    """Compare two report files without ``tool`` (it holds a timestamp); the bool says
    whether they agree: same structure and non-float values, floats to 1e-9 relative,
    quantiles identical."""
    documents = [json.loads(path.read_text()) for path in (left, right)]
    for document in documents:
        document.pop("tool")
    found = compare_reports(*documents)
    agree = not found["mismatched"] and found["max_rel"] <= 1e-9
    return found, agree and found["quantiles_identical"] == found["quantiles"]


def _compare(left: Any, right: Any, path: str, result: dict[str, Any]) -> None:
    if isinstance(left, dict) and isinstance(right, dict):
        if left.keys() != right.keys():
            result["mismatched"].append(f"{path} (keys)")
        for key in left.keys() & right.keys():
            _compare(left[key], right[key], f"{path}.{key}" if path else key, result)
        return
    if isinstance(left, list) and isinstance(right, list):
        if len(left) != len(right):
            result["mismatched"].append(f"{path} (length {len(left)} vs {len(right)})")
        for index, (a, b) in enumerate(zip(left, right, strict=False)):
            _compare(a, b, f"{path}.{index}", result)
        return
    result["leaves"] += 1
    is_quantile = ".quantiles." in f"{path}."
    result["quantiles"] += is_quantile
    if left == right or (_is_nan(left) and _is_nan(right)):
        result["identical"] += 1
        result["quantiles_identical"] += is_quantile
    elif isinstance(left, float) and isinstance(right, float):
        scale = max(abs(left), abs(right))
        result["max_rel"] = max(result["max_rel"], abs(left - right) / scale)
    else:
        result["mismatched"].append(f"{path} ({left!r} vs {right!r})")


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _mb(value: float) -> str:
    return f"{value / MB:7.0f} MB"


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="shard files and reports")
    parser.add_argument("--shards", type=int, default=64, help="number of shard files")
    parser.add_argument("--rows", type=int, default=256, help="sequences per file (B)")
    parser.add_argument("--tokens", type=int, default=2048, help="padded length (T)")
    parser.add_argument("--counts", default="1,4,16,64", help="file counts for part (a)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per count in (a), best time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--stage", type=int, default=0, help="reports per first-stage merge (default: sqrt)"
    )
    parser.add_argument("--quick", action="store_true", help="8 files of 64 x 512, counts 1,2,4,8")
    args = parser.parse_args()
    if args.quick:
        args.shards, args.rows, args.tokens, args.counts = 8, 64, 512, "1,2,4,8"
    counts = sorted({int(item) for item in args.counts.split(",") if item} | {args.shards})
    if counts[0] < 1 or counts[-1] > args.shards:
        parser.error(f"--counts must lie between 1 and --shards ({args.shards})")
    args.counts = counts
    args.dir = args.dir or Path(tempfile.mkdtemp(prefix="bench_scale_"))
    return args


def main() -> None:
    args = _options()
    import torch

    started = time.perf_counter()
    shards = ensure_shards(args.dir, args.shards, args.rows, args.tokens, args.seed)
    size = sum(p.stat().st_size for p in shards)
    work = args.dir / f"reports_{args.rows}x{args.tokens}"
    logs = work / "logs"
    (work / "shards").mkdir(parents=True, exist_ok=True)
    logs.mkdir(parents=True, exist_ok=True)
    print(
        f"# bench_scale: {args.shards} SYNTHETIC safetensors files of B={args.rows} "
        f"x T={args.tokens} (all extras), {size / MB:.0f} MB in {args.dir} "
        f"(ready after {time.perf_counter() - started:.0f} s)"
    )
    print(
        f"# python {platform.python_version()}, torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
        "wall times include start-up and imports and vary with machine load, memory does not"
    )

    baseline = measure(["--imports-only"], logs / "imports.log")
    print(
        f"\nimports only (import ratioscope.analysis.pipeline, which imports torch): "
        f"{baseline.seconds:.2f} s, peak RSS {_mb(baseline.peak)}"
    )

    print("\n(a) one analyze over the first N files (files streamed one after another)")
    print(f"{'files':>6} {'valid tokens':>13} {'time':>9} {'tokens/s':>11} {'peak RSS':>10}")
    single: dict[int, Measured] = {}
    for count in args.counts:
        out = work / f"multi_{count:05d}.json"
        single[count] = run_analyze(shards[:count], out, args.repeat, logs)
        tokens = valid_tokens(out)
        print(
            f"{count:>6} {tokens:>13,} {single[count].seconds:>7.2f} s "
            f"{tokens / single[count].seconds:>11,.0f} {_mb(single[count].peak)}"
        )
    first, last = single[args.counts[0]], single[args.counts[-1]]
    print(
        f"peak RSS with {args.counts[-1]} files / with {args.counts[0]}: "
        f"{last.peak / first.peak:.3f}x ({(last.peak - first.peak) / MB:+.0f} MB); "
        f"above the imports: {(first.peak - baseline.peak) / MB:.0f} MB -> "
        f"{(last.peak - baseline.peak) / MB:.0f} MB"
    )

    print("\n(b) sharded: one analyze --json per file (an array task each), then one merge")
    reports, tasks = [], []
    for index, path in enumerate(shards):
        report = work / "shards" / f"shard_{index:05d}.json"
        tasks.append(run_analyze([path], report, 1, logs))
        reports.append(report)
    times = [t.seconds for t in tasks]
    peaks = [t.peak for t in tasks]
    print(
        f"{len(tasks)} tasks: time per task median {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s, sum {sum(times):.1f} s; peak RSS per task median "
        f"{statistics.median(peaks) / MB:.0f} MB, max {max(peaks) / MB:.0f} MB; "
        f"report size median {statistics.median(r.stat().st_size for r in reports) / 1000:.0f} kB"
    )
    print(f"{'merged':>6} {'time':>9} {'peak RSS':>10} {'report in':>10} {'report out':>11}")
    merges: dict[int, Measured] = {}
    for count in args.counts:
        out = work / f"merged_{count:05d}.json"
        merges[count] = run_merge(reports[:count], out, logs)
        size_in = sum(r.stat().st_size for r in reports[:count])
        print(
            f"{count:>6} {merges[count].seconds:>7.2f} s {_mb(merges[count].peak)} "
            f"{size_in / MB:>7.1f} MB {out.stat().st_size / MB:>8.2f} MB"
        )

    stage = args.stage or math.ceil(math.sqrt(len(reports)))
    stages = [reports[i : i + stage] for i in range(0, len(reports), stage)]
    partials = [work / f"stage_{index:05d}.json" for index in range(len(stages))]
    staged = [run_merge(group, out, logs) for group, out in zip(stages, partials, strict=True)]
    staged_path = work / f"staged_{len(reports):05d}.json"
    staged.append(run_merge(partials, staged_path, logs))
    print(
        f"staged merge (merges of at most {stage} reports, then one of the {len(partials)} "
        f"results): {sum(m.seconds for m in staged):.2f} s in all, highest peak RSS "
        f"{_mb(max(m.peak for m in staged))}"
    )

    total = args.shards
    single_path = work / f"multi_{total:05d}.json"
    print(f"\n(c) merged reports of {total} shards vs one analyze of the same {total} files")
    for label, path in (("merge", work / f"merged_{total:05d}.json"), ("staged", staged_path)):
        found, agree = compare_files(single_path, path)
        print(
            f"{label}: {found['leaves']:,} values compared (inputs, params, sections, "
            f"warnings, state), {found['identical']:,} identical, largest relative "
            f"difference of the others {found['max_rel']:.1e}; quantiles identical: "
            f"{found['quantiles_identical']} of {found['quantiles']}; structural or "
            f"non-float differences: {len(found['mismatched'])}"
        )
        for item in found["mismatched"][:10]:
            print(f"  differs: {item}")
        print(f"{label}: equals the multi-file report (floats to 1e-9): {agree}")

    merge = merges[total]
    low, high = args.counts[0], args.counts[-1]
    if high > low:
        slope = (merges[high].peak - merges[low].peak) / (high - low)
        print(f"\nmerge peak RSS grows by {slope / MB:.1f} MB per shard report ({low} -> {high})")
    print(f"\npeer comparison: sharded workflow vs one multi-file analyze of {total} files")
    print(
        f"  one analyze:   {last.seconds:7.2f} s, peak RSS {_mb(last.peak)}\n"
        f"  sharded:       {sum(times):7.2f} s in {total} tasks run one after another "
        f"+ merge {merge.seconds:.2f} s; slowest task {max(times):.2f} s; "
        f"peak RSS per task {_mb(max(peaks))}, merge {_mb(merge.peak)}"
    )
    print(
        f"  ratios sharded/single: time, tasks serial + merge "
        f"{(sum(times) + merge.seconds) / last.seconds:.2f}x; "
        f"time, all tasks in parallel (median task + merge) "
        f"{(statistics.median(times) + merge.seconds) / last.seconds:.2f}x, "
        f"(slowest task + merge) {(max(times) + merge.seconds) / last.seconds:.2f}x; "
        f"peak RSS per task {max(peaks) / last.peak:.2f}x; merge {merge.peak / last.peak:.2f}x"
    )
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
