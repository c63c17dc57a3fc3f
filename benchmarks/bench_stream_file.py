"""Peak memory of `analyze` on ONE large SYNTHETIC dump file, streamed chunk by chunk.

Writes single-file dumps of the given sizes (safetensors, and one JSON-lines file) from
`make_synthetic.py` blocks without holding a file in memory, then runs
`python -m ratioscope analyze FILE --json OUT` in a fresh child process that reports its
own peak resident memory (VmHWM). The peer, printed beside it with the ratio:

* up to `--whole-max` GiB, the same file read whole (`RATIOSCOPE_STREAM_BYTES` set above
  its size), whose report must equal the streamed one (timestamps aside);
* above it, the same rows split into files of about `--split-mib` MiB, analysed together
  (the many-file path that was already bounded; its covariance and trust-region numbers
  differ, since each file is one training batch); `--split-mib 0`: no peer there.

The streamed run sets `RATIOSCOPE_STREAM_BYTES=0`, so a file below the default 128 MiB
threshold is streamed too (without it a 0.1 GiB file would be read whole twice). Beside
the peak, the child reports glibc's heap at exit (`mallinfo2`: bytes the heap holds, and
how many of them are in use): the CLI keeps freed memory for reuse
(`ratioscope/analysis/allocator.py`), so a heap much larger than what is in use is memory freed
into holes that later chunks could not reuse (fragmentation), not live data.

Every section is computed (the default); with `--without-covariance` each size is also
run with every section but `covariance`, the one section that reads the file more than
once (five passes, docs/scale.md). The big files are deleted at the end unless `--keep`;
with `--files DIR` they are written there once, reused by later runs and never deleted.

    python benchmarks/bench_stream_file.py                       # 0.1,0.5,1,2,4 GiB + 1 GiB JSONL
    python benchmarks/bench_stream_file.py --sizes 0.1 --jsonl 0.05 --whole-max 0.1
    python benchmarks/bench_stream_file.py --whole-max 0.1 --split-mib 0 --jsonl 0.5
    python benchmarks/bench_stream_file.py --sizes 8 --jsonl 4 --whole-max 0 --split-mib 0 \
        --files DUMPS   # a folder that keeps the written dumps for later runs
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _child import Measured, measure
from make_synthetic import LABEL, make_synthetic

GIB = 1 << 30
BLOCK = 256  # rows per make_synthetic call
_DTYPES = {torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL"}
NO_COVARIANCE = "ratios,mismatch,future_policy,tepo,trust_region"
STREAM_ALWAYS = {"RATIOSCOPE_STREAM_BYTES": "0"}
READ_WHOLE = {"RATIOSCOPE_STREAM_BYTES": str(1 << 60)}


def blocks(rows: int, width: int, seed: int) -> Iterator[dict[str, torch.Tensor]]:
    """SYNTHETIC rows in blocks of BLOCK, group ids distinct over the whole file."""
    for index in range(math.ceil(rows / BLOCK)):
        count = min(BLOCK, rows - index * BLOCK)
        batch = make_synthetic(count, width, seed=seed + index, extras=["all"])
        batch["group"] = batch["group"] + index * BLOCK  # ids stay unique across blocks
        yield batch


def row_bytes(width: int) -> int:
    batch = make_synthetic(1, width, extras=["all"])
    return sum(v.element_size() * v.numel() for v in batch.values())


def write_safetensors(
    path: Path, rows: int, width: int, seed: int, split: Path | None, split_rows: int
) -> None:
    """A safetensors file written tensor part by tensor part (never whole in memory);
    with ``split``, the same rows also as files of ``split_rows`` rows there."""
    from safetensors.torch import save_file

    parts: dict[str, Path] = {}
    shapes: dict[str, list[int]] = {}
    dtypes: dict[str, torch.dtype] = {}
    handles = {}
    pending: list[dict[str, torch.Tensor]] = []
    written = 0
    for batch in blocks(rows, width, seed):
        for key, value in batch.items():
            if key not in handles:
                parts[key] = path.with_name(f"{path.name}.{key}.part")
                handles[key] = parts[key].open("wb")
                shapes[key], dtypes[key] = [0, *value.shape[1:]], value.dtype
            handles[key].write(value.contiguous().view(torch.uint8).numpy().tobytes())
            shapes[key][0] += value.shape[0]
        if split is not None:
            pending.append(batch)
            if sum(b["mask"].shape[0] for b in pending) >= split_rows:
                _save_split(split, written, pending, save_file)
                written, pending = written + 1, []
    if split is not None and pending:
        _save_split(split, written, pending, save_file)
    for handle in handles.values():
        handle.close()
    header: dict[str, object] = {"__metadata__": {"synthetic": LABEL}}
    offset = 0
    for key in sorted(parts):
        size = parts[key].stat().st_size
        header[key] = {
            "dtype": _DTYPES[dtypes[key]],
            "shape": shapes[key],
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with path.open("wb") as out:
        out.write(len(text).to_bytes(8, "little"))
        out.write(text)
        for key in sorted(parts):
            with parts[key].open("rb") as part:
                shutil.copyfileobj(part, out, 1 << 24)
            parts[key].unlink()


def _save_split(directory: Path, index: int, pending, save_file) -> None:
    merged = {k: torch.cat([b[k] for b in pending]).contiguous() for k in pending[0]}
    directory.mkdir(parents=True, exist_ok=True)
    save_file(merged, str(directory / f"part_{index:05d}.safetensors"), {"synthetic": LABEL})


def write_jsonl(path: Path, rows: int, width: int, seed: int) -> None:
    """A JSON-lines file, one sequence a line, its group a string label (verl's uid);
    values rounded to 6 decimals (by numpy, a block at a time: rounding each Python
    float took most of the time of writing a large file)."""
    with path.open("w", encoding="utf-8") as out:
        for batch in blocks(rows, width, seed):
            lengths = batch["mask"].sum(1).tolist()
            keys = [k for k in batch if batch[k].dim() == 2 and k != "mask"]
            rounded = {k: np.round(batch[k].double().numpy(), 6) for k in keys}
            for row, length in enumerate(lengths):
                record = {k: rounded[k][row, :length].tolist() for k in keys}
                record["mask"] = [1] * length
                record["rewards"] = float(batch["rewards"][row])
                record["group"] = f"uid-{int(batch['group'][row])}"
                out.write(json.dumps(record, separators=(",", ":")) + "\n")


def ready(path: Path, write: Callable[[Path], None], reuse: bool) -> bool:
    """``write(temporary)`` then renamed to ``path`` (an interrupted run leaves no file a
    later one would reuse); with ``reuse``, an existing ``path`` is kept. True when
    written now."""
    if reuse and path.exists():
        return False
    temporary = path.with_name(f"{path.name}.writing")
    write(temporary)
    temporary.replace(path)
    return True


def analyze(
    paths: list[Path], out: Path, logs: Path, env: dict[str, str], sections: str | None
) -> Measured:
    arguments = ["analyze", *map(str, paths), "--json", str(out), "-q"]
    if sections:
        arguments += ["--sections", sections]
    return measure(arguments, logs / f"{out.stem}.log", env)


def same_report(left: Path, right: Path) -> bool:
    """Equal reports, ``tool`` (version and timestamp) aside."""
    a, b = json.loads(left.read_text()), json.loads(right.read_text())
    a.pop("tool", None)
    b.pop("tool", None)
    return a == b


def _heap(run: Measured) -> str:
    """glibc's heap at exit: held / in use, GiB."""
    if run.heap < 0:
        return ""
    return f" (heap {run.heap / GIB:4.2f}, in use {run.in_use / GIB:4.2f})"


def run_one(
    label: str,
    paths: list[Path],
    peer: list[Path] | None,
    whole: bool,
    work: Path,
    sections: str | None,
) -> None:
    size = sum(p.stat().st_size for p in paths) / GIB
    tag = f"{label}{'_nocov' if sections else ''}".replace(" ", "_")
    streamed = analyze(paths, work / f"{tag}_stream.json", work, STREAM_ALWAYS, sections)
    tokens = json.loads((work / f"{tag}_stream.json").read_text())["inputs"][0]["tokens"]
    what = "all sections" if not sections else "all but covariance"
    print(
        f"{label:<22} {size:6.2f} GiB {tokens / 1e6:7.1f}M tokens  {what:<18} "
        f"streamed {streamed.seconds:7.1f} s {streamed.peak / GIB:5.2f} GiB{_heap(streamed)}",
        end="",
        flush=True,
    )
    if whole:
        other = analyze(paths, work / f"{tag}_whole.json", work, READ_WHOLE, sections)
        equal = same_report(work / f"{tag}_stream.json", work / f"{tag}_whole.json")
        name = "whole file"
    elif peer is not None:
        other = analyze(peer, work / f"{tag}_split.json", work, {}, sections)
        equal = None
        name = f"{len(peer)} files"
    else:
        print(flush=True)
        return
    print(
        f" | {name} {other.seconds:7.1f} s {other.peak / GIB:5.2f} GiB"
        f" | peer/streamed RSS {other.peak / streamed.peak:5.2f}x"
        + ("" if equal is None else f" | same report: {equal}"),
        flush=True,
    )


def _sizes(text: str) -> list[float]:
    return [float(s) for s in text.split(",") if s.strip() and float(s) > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="0.1,0.5,1,2,4", help="safetensors sizes in GiB")
    parser.add_argument("--jsonl", default="1", help="JSON-lines sizes in GiB (0: none)")
    parser.add_argument("--tokens", type=int, default=2048, help="padded length T")
    parser.add_argument("--whole-max", type=float, default=1.0, help="largest size read whole")
    parser.add_argument("--split-mib", type=int, default=128, help="file size of the split peer")
    parser.add_argument("--without-covariance", action="store_true")
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (/tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the files")
    parser.add_argument(
        "--files", type=Path, default=None, help="write the dumps here once and reuse them"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_stream_", dir=args.dir))
    files = args.files or work
    files.mkdir(parents=True, exist_ok=True)
    reuse = args.files is not None
    per_row = row_bytes(args.tokens)
    print(
        f"# bench_stream_file: SYNTHETIC dumps of B x T={args.tokens} (all extras, "
        f"{per_row} bytes a row) in {files}"
    )
    print(
        f"# python {sys.version.split()[0]}, torch {torch.__version__}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    imports = measure(["--imports-only"], work / "imports.log")
    print(f"imports only: {imports.peak / GIB:.2f} GiB{_heap(imports)}")
    try:
        for size in _sizes(args.sizes):
            rows = max(BLOCK, round(size * GIB / per_row / BLOCK) * BLOCK)
            path = files / f"synthetic_{size:g}gib_t{args.tokens}.safetensors"
            whole = size <= args.whole_max
            split = None if whole or args.split_mib <= 0 else work / f"split_{size:g}"
            split_rows = max(BLOCK, max(args.split_mib, 1) * (1 << 20) // per_row)
            started = time.perf_counter()
            write = partial(
                write_safetensors, rows=rows, width=args.tokens, seed=0, split=split,
                split_rows=split_rows,
            )  # fmt: skip
            wrote = ready(path, write, reuse and split is None)  # a split peer: written now
            if wrote:
                print(f"# wrote {path.name} ({rows} rows) in {time.perf_counter() - started:.0f} s")
            peer = sorted(split.iterdir()) if split is not None else None
            for sections in [None, NO_COVARIANCE] if args.without_covariance else [None]:
                run_one(f"safetensors {size:g} GiB", [path], peer, whole, work, sections)
            if not (args.keep or reuse):
                path.unlink()
            if split is not None:
                shutil.rmtree(split)
        if _sizes(args.jsonl):
            probe = work / "probe.jsonl"
            write_jsonl(probe, BLOCK, args.tokens, 0)
            per_line = probe.stat().st_size / BLOCK
            probe.unlink()
        for size in _sizes(args.jsonl):
            path = files / f"synthetic_{size:g}gib_t{args.tokens}.jsonl"
            rows = max(BLOCK, round(size * GIB / per_line / BLOCK) * BLOCK)
            started = time.perf_counter()
            write = partial(write_jsonl, rows=rows, width=args.tokens, seed=0)
            if ready(path, write, reuse):
                seconds = time.perf_counter() - started
                print(f"# wrote {path.name} ({rows} lines) in {seconds:.0f} s")
            run_one(f"jsonl {size:g} GiB", [path], None, size <= args.whole_max, work, None)
            if not (args.keep or reuse):
                path.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"# load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
