"""``ratioscope.analyze`` throughput (valid tokens/s), per section against its floor.

docs/performance.md: all sections at >= 10M valid tokens/s on the 2-core CPU, peak RSS
bounded by chunking. The dump (``benchmarks/make_synthetic.py``, all extras: advantages,
group, rewards, entropies, reference log-probs) is written once as safetensors and reused.

Each measurement runs in a fresh child process that reports its own peak resident
memory (VmHWM):

* ratioscope   ``ratioscope.analyze(path)``: every section; then each section alone;
* floors       measured in the same process, between the runs they are compared with:
               for each section one elementwise pass over the per-token tensors it reads
               (recorded by watching which [B, T] fields of the batch it touches), plus,
               for ``ratios``, the rfft/irfft pair of each spectral variant, each row
               at the size its own LFR needs; for the whole command one pass over
               every per-token tensor;
* load         the imports and ``ratioscope.load(path)`` alone;
* peer         a straightforward per-sequence numpy implementation of the KPO token
               statistics (states, runs, switching, windows, LFR by FFT, variances) for
               the token ratio only, timed on a subset of sequences and extrapolated.

Times are the best of ``--repeat`` runs, wall clock and CPU time of the process; on a
shared machine the ratio to the floor measured in the same run is the number to read.

    python benchmarks/bench_analyze.py                 # B=1024, T=4096, 2 threads
    python benchmarks/bench_analyze.py --threads 1 --repeat 5
    python benchmarks/bench_analyze.py --device cuda   # chunks and floors on the GPU
    python benchmarks/bench_analyze.py --baseline /tmp/before --rounds 3   # before/after

With ``--device cuda`` every chunk is analysed on the GPU and the floors are passes over
the batch moved there (each timing synchronised); the analysis of the batch already on
the GPU (no file read, hash or copy to the device) is then given as a share of the
GPU's memory bandwidth (its per-token tensors' bytes over the time, against a
device-to-device copy timed in the same process), the whole command's share beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the target of docs/performance.md for ``analyze`` with every section
TARGET_TOKENS_PER_S = 10e6
#: variants of the ratios section whose LFR and periodogram need an FFT (the sequence
#: variant is constant within a row and needs none)
SPECTRAL_VARIANTS = 2


def _peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024**2
    return float("nan")


#: waits for the device's queued work (set by the child for CUDA)
_SYNC: Callable[[], object] = lambda: None  # noqa: E731


def _best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of this process) over ``repeat`` calls."""
    walls, cpus = [], []
    for _ in range(repeat):
        _SYNC()
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        _SYNC()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def per_token_fields(batch) -> list[str]:
    """Names of the batch's [B, T] tensors."""
    import torch

    shape = batch.mask.shape
    return [
        name
        for name, value in vars(batch).items()
        if isinstance(value, torch.Tensor) and tuple(value.shape[:2]) == tuple(shape)
    ]


def _fields_read(path: Path, section: str, fields: list[str]) -> list[str]:
    """The per-token fields of the batch (and its chunks) that one section's accumulator
    reads: attribute reads recorded while its ``update`` runs (loading and chunking,
    which touch every field, are not the section's)."""
    from ratioscope.analysis.pipeline import analyze
    from ratioscope.data.batch import TokenBatch
    from ratioscope.sections import registry

    cls = next(c for c in registry.section_classes() if c.name == section)
    seen: set[str] = set()
    inside = [False]
    wanted = set(fields)
    original_get = TokenBatch.__getattribute__
    originals = {
        name: getattr(cls, name) for name in ("update", "update_pass") if hasattr(cls, name)
    }

    def recording_get(self, name):
        if inside[0] and name in wanted:
            seen.add(name)
        return original_get(self, name)

    def recorded(method):
        def run(self, *args):
            inside[0] = True
            try:
                return method(self, *args)
            finally:
                inside[0] = False

        return run

    TokenBatch.__getattribute__ = recording_get  # type: ignore[method-assign]
    for name, method in originals.items():
        setattr(cls, name, recorded(method))
    try:
        analyze(path, sections=[section])
    finally:
        TokenBatch.__getattribute__ = original_get  # type: ignore[method-assign]
        for name, method in originals.items():
            setattr(cls, name, method)
    return sorted(seen)


def _one_pass(tensors: list) -> Callable[[], object]:
    """One elementwise pass that reads every byte of ``tensors`` once (a reduction each;
    bool tensors are summed as bytes, the fast path)."""
    import torch

    def run() -> object:
        total = 0.0
        for t in tensors:
            t = t.view(torch.uint8) if t.dtype == torch.bool else t
            total += float(t.sum())
        return total

    return run


def _fft_pairs(batch, chunk_elements: int, pairs: int) -> Callable[[], object]:
    """The LFR's FFT work: per chunk of rows, rfft and irfft of each float64 row
    zero-padded to the size the analysis gives a row of its length L (the smallest
    4 n_freqs x 2^a 3^b 5^c >= 2 L - 1; rows of one size in one call), ``pairs``
    times."""
    import torch

    rows, length = batch.mask.shape
    per_chunk = max(1, chunk_elements // max(1, length))
    signal = batch.log_ratio.double()
    lengths = batch.mask.sum(dim=1).clamp(min=1)
    try:
        from ratioscope.functional.token_stats import DEFAULT_N_FREQS, _fft_size

        sizes = _fft_size(lengths, 4 * DEFAULT_N_FREQS)
    except ImportError:  # a checkout from before it, for a before/after run
        sizes = torch.exp2(torch.ceil(torch.log2((2 * lengths - 1).clamp(min=2).double())))
        sizes = sizes.long()

    def run() -> object:
        for _ in range(pairs):
            for start in range(0, rows, per_chunk):
                chunk = slice(start, start + per_chunk)
                for n_fft in torch.unique(sizes[chunk]).tolist():
                    same = (sizes[chunk] == n_fft).nonzero().squeeze(1) + start
                    values = signal.index_select(0, same)[:, : min(length, n_fft)]
                    spectrum = torch.fft.rfft(values, n=n_fft, dim=1)
                    torch.fft.irfft(spectrum, n=n_fft, dim=1)
        return None

    return run


def copy_bandwidth(device: str, gib: float = 1.0, repeat: int = 5) -> float:
    """The device's memory bandwidth, bytes/s: a device-to-device copy of ``gib`` GiB
    (read once, written once), best of ``repeat``."""
    import torch

    source = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        target.copy_(source)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * source.numel() / best


def _child(args: argparse.Namespace) -> None:
    try:  # as the CLI does at start-up, before torch is imported
        from ratioscope.analysis.threads import short_thread_waits

        short_waits = short_thread_waits()
    except ImportError:  # a checkout from before it, for a before/after run
        short_waits = False
    import torch

    global _SYNC
    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        _SYNC = torch.cuda.synchronize
    import ratioscope
    from ratioscope.analysis.allocator import keep_freed_memory

    result_allocator = keep_freed_memory()  # as the CLI does at start-up
    from ratioscope.analysis.pipeline import DEFAULT_CHUNK_ELEMENTS, analyze
    from ratioscope.sections import registry

    result: dict[str, object] = {"threads": torch.get_num_threads()}
    result["allocator_tuned"] = result_allocator
    result["gomp_spincount"] = os.environ.get("GOMP_SPINCOUNT", "unset")
    result["gomp_spincount_set"] = short_waits
    result["load_before"] = os.getloadavg()[0]
    batch = ratioscope.load(args.path)
    result["tokens"] = batch.num_tokens
    result["device"] = args.device
    if args.mode == "load":
        result["seconds"], result["cpu"] = _best(lambda: ratioscope.load(args.path), args.repeat)
    elif args.mode == "peer":
        result.update(_peer(batch, args.peer_rows))
    else:
        names = [cls.name for cls in registry.section_classes()]
        fields = per_token_fields(batch)
        device = args.device
        # warm-up: lazy imports, compiled kernels, allocator, FFT plans
        analyze(args.path, device=device)
        reads = {name: _fields_read(args.path, name, fields) for name in names}
        reads["all"] = fields
        reads["none"] = []
        result["reads"] = reads
        if device != "cpu":
            batch = batch.to(device)
            result["bandwidth"] = copy_bandwidth(device)
            result["bytes_all"] = sum(getattr(batch, f).nbytes for f in fields)
        result["token_stats_seconds"] = _token_statistics_seconds(batch, args.repeat)
        runs: dict[str, dict[str, float]] = {}
        # "none": loading, validation, hashing and the report without any section, the
        # fixed cost inside every other run (subtracted to give a section's own time)
        for name in ["none", "all", *names]:
            chosen = {"none": [], "all": names}.get(name, [name])
            floor = _one_pass([getattr(batch, f) for f in reads[name]])
            floor_wall, floor_cpu = _best(floor, args.repeat + 2)
            entry = {"floor": floor_wall, "floor_cpu": floor_cpu}
            if name == "ratios":
                fft = _fft_pairs(batch, DEFAULT_CHUNK_ELEMENTS, SPECTRAL_VARIANTS)
                entry["fft"], entry["fft_cpu"] = _best(fft, args.repeat)
            run = lambda chosen=chosen: analyze(args.path, sections=chosen, device=device)  # noqa: E731
            run()  # untimed: the first run of a set of sections grows the allocator's pools
            wall, cpu = _best(run, args.repeat)
            entry["seconds"], entry["cpu"] = wall, cpu
            runs[name] = entry
        result["runs"] = runs
        if device != "cpu":
            # the analysis of a batch already on the device: no file read, hash or copy
            # to the device, so what the bandwidth share measures is the device's work
            resident = lambda: analyze(batch, device=device)  # noqa: E731
            resident()
            result["resident_seconds"], _ = _best(resident, args.repeat)
    result["load_after"] = os.getloadavg()[0]
    result["peak_rss_gib"] = _peak_rss_gib()
    print(json.dumps(result))


def _token_statistics_seconds(batch, repeat: int) -> float:
    """ratioscope's vectorised KPO statistics of the token ratio: the peer's work."""
    from ratioscope.functional.token_stats import signal_statistics

    times = []
    for _ in range(repeat):
        _SYNC()
        start = time.perf_counter()
        signal_statistics(batch.log_ratio, batch.mask)
        _SYNC()
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


def _run_child(args: argparse.Namespace, mode: str, tree: Path | None = None) -> dict:
    """One child process of ``mode``; ``tree``: a ratioscope source tree to import
    instead of this one (first on its ``PYTHONPATH``)."""
    command = [
        sys.executable, __file__, "--child", mode, "--path", str(args.path),
        "--repeat", str(args.repeat), "--threads", str(args.threads),
        "--peer-rows", str(args.peer_rows), "--device", args.device,
    ]  # fmt: skip
    env = None
    if tree is not None:
        paths = [str(tree.resolve()), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    output = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    return json.loads(output.stdout.strip().splitlines()[-1])


def _compare(args: argparse.Namespace) -> None:
    """This tree against ``args.baseline``, alternated ``args.rounds`` times (the same
    load for both): each section's best wall and CPU time over the rounds, and their
    ratios."""
    runs: dict[str, list[dict]] = {"this tree": [], "baseline": []}
    for _ in range(args.rounds):
        runs["this tree"].append(_run_child(args, "analyze"))
        runs["baseline"].append(_run_child(args, "analyze", args.baseline))
    tokens = runs["this tree"][0]["tokens"]
    loads = [
        run[key] for tree in runs.values() for run in tree for key in ("load_before", "load_after")
    ]
    print(
        f"this tree against {args.baseline}, {args.rounds} round(s) alternated, each the best "
        f"of {args.repeat}; valid tokens {tokens:,}; load average {min(loads):.2f}-{max(loads):.2f}"
    )
    print(
        f"{'run':<22} {'wall s':>8} {'base s':>8} {'ratio':>6} {'CPU s':>8} {'base CPU':>8} "
        f"{'ratio':>6} {'M tok/s':>8} {'base':>7}"
    )

    def best(tree: str, name: str, key: str) -> float:
        return min(run["runs"][name][key] for run in runs[tree])

    for name in runs["this tree"][0]["runs"]:
        if name not in runs["baseline"][0]["runs"]:
            continue
        ours, theirs = best("this tree", name, "seconds"), best("baseline", name, "seconds")
        cpu, base_cpu = best("this tree", name, "cpu"), best("baseline", name, "cpu")
        print(
            f"{'analyze ' + name:<22} {ours:>8.4f} {theirs:>8.4f} {ours / theirs:>6.2f} "
            f"{cpu:>8.4f} {base_cpu:>8.4f} {cpu / base_cpu:>6.2f} "
            f"{tokens / ours / 1e6:>8.2f} {tokens / theirs / 1e6:>7.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", "-B", type=int, default=1024)
    parser.add_argument("--tokens", "-T", type=int, default=4096)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/ratioscope-bench"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peer-rows", type=int, default=128)
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="where analyze runs"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    parser.add_argument(
        "--baseline", type=Path, default=None,
        help="another ratioscope source tree: each section timed in both, alternated",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="alternations with --baseline")
    parser.add_argument("--child", choices=("analyze", "load", "peer"), help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.mode = args.child
        _child(args)
        return

    sys.path.insert(0, str(HERE))
    from make_synthetic import benchmark_dump

    args.path = benchmark_dump(args.dir, args.batch, args.tokens)
    import torch

    try:
        from ratioscope.functional import _kernels

        compiled = "yes" if _kernels.available() else "no (numba missing or disabled)"
    except ImportError:  # a checkout from before the kernels, for a before/after run
        compiled = "no (none in this version)"
    size_gib = args.path.stat().st_size / 1024**3
    print(
        f"SYNTHETIC dump {args.path.name}: B={args.batch}, T={args.tokens}, {size_gib:.2f} GiB; "
        f"torch {torch.__version__}, {args.threads} thread(s), {os.cpu_count()} CPUs, "
        f"best of {args.repeat}; compiled kernels: {compiled}"
    )
    if args.baseline is not None:
        _compare(args)
        return
    load = _run_child(args, "load")
    run = _run_child(args, "analyze")
    peer = _run_child(args, "peer")
    tokens = run["tokens"]
    print(
        f"valid tokens: {tokens:,}; load average {run['load_before']:.2f} at the start of "
        f"the analyze runs, {run['load_after']:.2f} at their end; GOMP_SPINCOUNT "
        f"{run.get('gomp_spincount', 'unset')} (the CLI's start-up sets 20000)"
    )
    print(
        f"{'run':<22} {'wall s':>7} {'CPU s':>7} {'M tok/s':>7} {'own s':>7} {'floor s':>7} "
        f"{'x floor':>7}  own: wall minus 'analyze none'; floor: what it must at least do"
    )
    print(f"{'load only':<22} {load['seconds']:>7.3f} {load['cpu']:>7.3f} "
          f"{tokens / load['seconds'] / 1e6:>7.2f}")  # fmt: skip
    fixed = run["runs"]["none"]["seconds"]
    for name, entry in run["runs"].items():
        floor = entry["floor"] + entry.get("fft", 0.0)
        own = entry["seconds"] - fixed if name != "none" else entry["seconds"]
        reads = run["reads"][name]
        what = f"one pass over {', '.join(reads)}" if reads else "reads no per-token tensor"
        if "fft" in entry:
            what += (
                f" ({entry['floor'] * 1e3:.1f} ms) + {SPECTRAL_VARIANTS} rfft/irfft pairs "
                f"({entry['fft'] * 1e3:.1f} ms)"
            )
        ratio = f"{own / floor:>7.1f}" if reads else f"{'-':>7}"
        print(
            f"{'analyze ' + name:<22} {entry['seconds']:>7.3f} {entry['cpu']:>7.3f} "
            f"{tokens / entry['seconds'] / 1e6:>7.2f} {own:>7.3f} {floor:>7.4f} {ratio}  {what}"
        )
    peer_rate = peer["tokens_subset"] / peer["seconds_subset"]
    ours = tokens / run["token_stats_seconds"]
    print(
        f"KPO statistics of the token ratio: ratioscope {ours / 1e6:.2f} M tokens/s; peer "
        f"(per-sequence numpy loop, {args.peer_rows} sequences, extrapolated) "
        f"{peer_rate / 1e6:.2f} M tokens/s; ratio {ours / peer_rate:.1f}x"
    )
    whole = run["runs"]["all"]
    rate = tokens / whole["seconds"]
    verdict = "met" if rate >= TARGET_TOKENS_PER_S else "NOT met"
    print(
        f"analyze, all sections: {rate / 1e6:.2f} M tokens/s, "
        f"{whole['seconds'] / whole['floor']:.0f}x one pass over all per-token tensors "
        f"({(whole['seconds'] - fixed) / whole['floor']:.0f}x without the fixed cost); "
        f"target >= {TARGET_TOKENS_PER_S / 1e6:.2f}: {verdict}"
    )
    summary = {
        "device": args.device,
        "tokens_per_s": rate,
        "x_floor": whole["seconds"] / whole["floor"],
        "sections": {name: entry["seconds"] for name, entry in run["runs"].items()},
    }
    if "bandwidth" in run:
        # the share of the analysis of a batch already on the device (the command's own
        # share, with the file read, hashed and copied over, beside it)
        resident = run["resident_seconds"]
        reached = run["bytes_all"] / resident
        summary["bandwidth"], summary["bandwidth_share"] = (
            run["bandwidth"],
            reached / run["bandwidth"],
        )
        summary["resident_seconds"] = resident
        summary["bandwidth_share_command"] = run["bytes_all"] / whole["seconds"] / run["bandwidth"]
        print(
            f"on {args.device}: {run['bytes_all'] / 1e9:.2f} GB of per-token tensors, a batch "
            f"already there analysed in {resident:.4f} s = {reached / 1e9:.1f} GB/s, "
            f"{100 * summary['bandwidth_share']:.2f} % of the device-to-device copy's "
            f"{run['bandwidth'] / 1e9:.0f} GB/s (goal >= 50 %); the command from the file "
            f"{whole['seconds']:.3f} s, {100 * summary['bandwidth_share_command']:.3f} %"
        )
    print(
        f"peak RSS: analyze {run['peak_rss_gib']:.2f} GiB, load only "
        f"{load['peak_rss_gib']:.2f} GiB, file {size_gib:.2f} GiB"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
