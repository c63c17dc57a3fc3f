"""Analyse a large run with Ray: one ``ratioscope.analyze`` task per shard of files, then
one merge of the shard reports into the report of the whole run.

Ray is not a dependency of ratioscope; install it where you run this script
(``pip install ray``). Only ``main`` imports it: the rest is plain Python, so the same
functions run without Ray (the tests call them with a stand-in for ``ray.remote``).

    python examples/ray_analyze.py 'dump/step_*.pt' --files-per-task 16 --out run.json
    python examples/ray_analyze.py dump/ --address auto --gpus-per-task 1 \\
        --options '{"kalman_q": 1e-4, "clip": [0.2, 0.28]}' --out run.json

The file list is built on the driver, so every worker must see the files under the same
paths (a shared file system). A task reads its files one after another, as
``ratioscope analyze`` does, and sends back only its report as a JSON-able dict (a few
hundred kB), never tensors. Every task gets the same options: ``merge_reports`` refuses
reports made with different ones. The driver merges the reports in batches of
``--merge-batch`` as they arrive, so its memory does not grow with the number of tasks.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any


def split_files(files: Sequence[str | Path], files_per_task: int) -> list[list[str]]:
    """Consecutive runs of ``files_per_task`` files (the last may be shorter), in order."""
    if files_per_task < 1:
        raise ValueError("files_per_task must be at least 1")
    names = [str(f) for f in files]
    return [names[i : i + files_per_task] for i in range(0, len(names), files_per_task)]


def analyze_shard(paths: list[str], options: dict[str, Any], device: str = "cpu") -> dict:
    """One task: the analyze report of ``paths`` as a JSON-able dict (with its ``state``)."""
    import ratioscope

    return ratioscope.analyze(paths, device=device, **options).to_dict()


def merge_documents(documents: Sequence[dict], names: Sequence[str]) -> dict:
    """Merge shard (or already merged) reports into one report dict."""
    import ratioscope

    return ratioscope.merge_reports(documents, names=names).to_dict()


def analyze_sharded(
    shards: Sequence[list[str]],
    options: dict[str, Any],
    *,
    remote: Callable[[Callable], Any],
    get: Callable[[list], list],
    device: str = "cpu",
    merge_batch: int = 256,
) -> dict:
    """Run :func:`analyze_shard` once per shard through ``remote`` (``ray.remote`` or a
    stand-in) and merge the results, ``merge_batch`` reports at a time.

    Args:
        shards: file lists, one per task (see :func:`split_files`).
        options: :func:`ratioscope.analyze` keyword options, the same for every task.
        remote: wraps a function into an object whose ``.remote(*args)`` submits a task.
        get: turns a list of submitted tasks into their results (``ray.get``).
        device: passed to every task ("cuda" when tasks hold a GPU).
        merge_batch: reports held by the driver at once before they are merged.

    Returns:
        the merged report as a dict (``ratioscope.report_io.write_json`` writes it).
    """
    if not shards:
        raise ValueError("no shard to analyse")
    task = remote(analyze_shard)
    pending = [task.remote(shard, options, device) for shard in shards]
    partial: dict | None = None
    for start in range(0, len(pending), merge_batch):
        documents = get(pending[start : start + merge_batch])
        names = _names(shards[start : start + merge_batch], start)
        if partial is not None:
            documents, names = [partial, *documents], ["reports merged so far", *names]
        partial = merge_documents(documents, names)
    return partial


def _names(shards: Iterable[list[str]], first: int) -> list[str]:
    return [f"task {first + i} ({shard[0]}, ...)" for i, shard in enumerate(shards)]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="ratioscope analyze with one Ray task per shard")
    parser.add_argument("paths", nargs="+", help="dump files, directories or quoted globs")
    parser.add_argument("--out", type=Path, required=True, help="merged report JSON")
    parser.add_argument("--files-per-task", type=int, default=16)
    parser.add_argument("--options", default="{}", help="analyze options as a JSON object")
    parser.add_argument("--address", default=None, help="Ray cluster address (ray.init)")
    parser.add_argument("--cpus-per-task", type=float, default=2)
    parser.add_argument("--gpus-per-task", type=float, default=0, help=">0: tasks run on CUDA")
    parser.add_argument("--merge-batch", type=int, default=256)
    args = parser.parse_args(argv)

    import ray

    from ratioscope.io.loaders import expand_paths
    from ratioscope.report_io import write_json

    shards = split_files(expand_paths(args.paths), args.files_per_task)
    resources = {"num_cpus": args.cpus_per_task, "num_gpus": args.gpus_per_task}
    ray.init(address=args.address)
    merged = analyze_sharded(
        shards,
        json.loads(args.options),
        remote=lambda function: ray.remote(**resources)(function),
        get=ray.get,
        device="cuda" if args.gpus_per_task > 0 else "cpu",
        merge_batch=args.merge_batch,
    )
    write_json(merged, args.out)
    tokens = sum(item["tokens"] for item in merged["inputs"])
    print(f"{len(shards)} tasks, {len(merged['inputs'])} files, {tokens:,} tokens -> {args.out}")


if __name__ == "__main__":
    main()
