"""Tasks on local worker processes or a Ray cluster, their results handed back in order.

``analyze``, ``timeline`` and ``objectives`` split a run into tasks of whole training
steps (or files) and fold the results into their running totals with the merge that
``ratioscope merge`` applies. :func:`ordered_results` runs the tasks where a
:class:`Runner` says and yields the results **in task order**, so the folds add the same
numbers in the same order as one process would: the result equals the sequential run's.

Memory on the driver stays bounded: at most ``window`` tasks are submitted ahead of the
first unfinished one, so at most ``window`` finished results wait for an earlier one.
A task's result is a plain JSON-like document (a report, a few hundred kB), never tensors.

Failures:

* a task that raises a :class:`~ratioscope.errors.RatioscopeError` (a bad file, a bad
  key) stops the run with that error, its message naming the file; nothing is merged
  or written;
* a worker that dies (killed, out of memory) is replaced and its task run again, up to
  ``retries`` times (Ray: ``max_retries``; local processes: the pool is rebuilt and the
  unfinished tasks are submitted again); then the run stops with exit code 3.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ratioscope import defaults
from ratioscope.errors import RatioscopeError, UsageError

if TYPE_CHECKING:
    from ratioscope.data.params import AnalysisParams
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.progress import ProgressCallback
    from ratioscope.report.model import Report

Item = TypeVar("Item")
Result = TypeVar("Result")

#: ``--ray`` values that are not addresses: start a cluster in this process, or join the
#: running one (``RAY_ADDRESS`` or the one ``ray start --head`` left on this machine)
RAY_LOCAL = "local"
RAY_AUTO = "auto"


#: the most worker processes a runner starts (more than any machine's cores; a larger
#: number overflowed the process pool's C int)
MAX_WORKERS = 4096


@dataclass(frozen=True)
class Runner:
    """Where tasks run.

    Attributes:
        workers: local worker processes (1: in this process, no pool); with
            ``ray="local"`` the CPUs of the local Ray cluster.
        ray: None (no Ray), ``"local"`` (start a Ray cluster here, stopped at the end),
            ``"auto"`` or an address such as ``ray://head:10001`` (join a running one).
        window: tasks in flight or finished and waiting for an earlier one (default:
            twice the workers, or twice the cluster's CPUs, at most 256).
        retries: times a task is run again after its worker died.
        gpus_per_task: Ray only: GPUs each task asks for (tasks then see one device).
    """

    workers: int = 1
    ray: str | None = None
    window: int | None = None
    retries: int = 3
    gpus_per_task: float = 0.0

    def __post_init__(self) -> None:
        from ratioscope.errors import ParameterError

        if not 1 <= self.workers <= MAX_WORKERS:
            raise ParameterError(
                "workers", f"must be from 1 to {MAX_WORKERS:,} processes, got {self.workers}"
            )
        if self.window is not None and self.window < 1:
            raise ParameterError("window", f"must be >= 1, got {self.window}")
        if self.retries < 0:
            raise ParameterError("retries", f"must be >= 0, got {self.retries}")

    @property
    def parallel(self) -> bool:
        """Whether tasks leave this process."""
        return self.ray is not None or self.workers > 1

    def describe(self) -> str:
        """A few words for progress lines ("2 worker processes", "Ray at auto")."""
        if self.ray is not None:
            return "a local Ray cluster" if self.ray == RAY_LOCAL else f"Ray at {self.ray}"
        return f"{self.workers} worker processes" if self.workers > 1 else "this process"


SEQUENTIAL = Runner()


class TaskFailed(RatioscopeError):
    """A task raised a ratioscope error; the message is the task's, naming its file."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class WorkerLost(RatioscopeError):
    """A task's worker died more often than the runner retries (exit code 3)."""


@dataclass(frozen=True)
class _Outcome(Generic[Result]):
    """What a task hands back: its value, or the error it raised (as text: exception
    classes with their own constructors do not always survive pickling)."""

    value: Result | None = None
    error: str | None = None
    exit_code: int = 0


def _call(function: Callable[[Item], Result], item: Item) -> _Outcome[Result]:
    try:
        return _Outcome(value=function(item))
    except RatioscopeError as error:
        return _Outcome(error=str(error), exit_code=error.exit_code)


def _unwrap(outcome: _Outcome[Result]) -> Result:
    if outcome.error is not None:
        raise TaskFailed(outcome.error, outcome.exit_code)
    return outcome.value  # type: ignore[return-value]


def ordered_results(
    function: Callable[[Item], Result],
    items: Iterable[Item],
    runner: Runner = SEQUENTIAL,
    describe: Callable[[Item], str] = str,
) -> Iterator[Result]:
    """``function(item)`` for every item, yielded in the order of ``items``.

    Args:
        function: a picklable callable (a module-level function or a
            :func:`functools.partial` of one) for parallel runners.
        items: the tasks' arguments (picklable).
        runner: where the tasks run.
        describe: an item in words, for the message when its worker keeps dying.

    Raises:
        TaskFailed: a task raised a ratioscope error (its message; the same exit code).
        WorkerLost: a worker died more than ``runner.retries`` times on a task.
    """
    listed = list(items)
    if not runner.parallel:
        for item in listed:
            yield function(item)
        return
    if runner.ray is not None:
        yield from _ray_results(function, listed, runner, describe)
    else:
        yield from _pool_results(function, listed, runner, describe)


class _InOrder(Generic[Result]):
    """Results that arrived before an earlier one, released in task order."""

    def __init__(self) -> None:
        self.waiting: dict[int, Result] = {}
        self.next = 0

    def add(self, index: int, value: Result) -> None:
        self.waiting[index] = value

    def release(self) -> Iterator[Result]:
        while self.next in self.waiting:
            yield self.waiting.pop(self.next)
            self.next += 1


# ----------------------------------------------------------------- local processes
def _pool(workers: int) -> ProcessPoolExecutor:
    import multiprocessing

    # spawn: a fork of a process that has started torch's threads can deadlock
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def _pool_results(
    function: Callable[[Item], Result],
    items: Sequence[Item],
    runner: Runner,
    describe: Callable[[Item], str],
) -> Iterator[Result]:
    window = runner.window or 2 * runner.workers
    task = functools.partial(_call, function)
    order: _InOrder[Result] = _InOrder()
    attempts = [0] * len(items)
    submitted = 0
    running: dict[Future[_Outcome[Result]], int] = {}
    pool = _pool(runner.workers)
    try:
        while order.next < len(items):
            broken = False
            while submitted < len(items) and submitted < order.next + window:
                try:
                    running[pool.submit(task, items[submitted])] = submitted
                except BrokenProcessPool:
                    # a worker died after the last wait: the tasks it took down are among
                    # ``running``; this one never started, so it is submitted again later
                    broken = True
                    break
                submitted += 1
            done, _ = wait(running, return_when=FIRST_COMPLETED) if running else (set(), set())
            lost: list[int] = []
            for future in done:
                index = running.pop(future)
                try:
                    order.add(index, _unwrap(future.result()))
                except BrokenProcessPool:
                    lost.append(index)
            if lost or broken:
                # a dead worker breaks the whole pool: every unfinished task runs again
                lost += list(running.values())
                running.clear()
                pool.shutdown(wait=True, cancel_futures=True)
                for index in sorted(lost):
                    attempts[index] += 1
                    if attempts[index] > runner.retries:
                        raise WorkerLost(
                            f"a worker process died {attempts[index]} times while running "
                            f"{describe(items[index])}; the run stops (retries: {runner.retries})"
                        )
                pool = _pool(runner.workers)
                for index in sorted(lost):
                    running[pool.submit(task, items[index])] = index
            yield from order.release()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


# ------------------------------------------------------------------------------ Ray
def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--ray needs the ray package, which is not installed: pip install 'ratioscope[ray]'"
        ) from None
    return ray


def _ray_session(runner: Runner) -> tuple[Any, bool]:
    """Ray, initialised as the runner says; True when this call started it (and so
    shuts it down at the end)."""
    ray = _import_ray()
    if ray.is_initialized():
        return ray, False
    options: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
    if runner.ray == RAY_LOCAL:
        options["num_cpus"] = runner.workers if runner.workers > 1 else os.cpu_count()
        options["include_dashboard"] = False
    else:
        options["address"] = runner.ray
    try:
        ray.init(**options)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise UsageError(f"--ray {runner.ray}: cannot start or join Ray ({error})") from None
    return ray, True


def _ray_results(
    function: Callable[[Item], Result],
    items: Sequence[Item],
    runner: Runner,
    describe: Callable[[Item], str],
) -> Iterator[Result]:
    ray, started = _ray_session(runner)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        window = runner.window or min(256, max(2, 2 * cpus))
        remote = ray.remote(max_retries=runner.retries, num_cpus=1, num_gpus=runner.gpus_per_task)(
            _call
        )
        order: _InOrder[Result] = _InOrder()
        submitted = 0
        running: dict[Any, int] = {}
        try:
            while order.next < len(items):
                while submitted < len(items) and submitted < order.next + window:
                    running[remote.remote(function, items[submitted])] = submitted
                    submitted += 1
                # every finished task at once, else wait for the next one
                ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0)
                if not ready:
                    ready, _ = ray.wait(list(running), num_returns=1)
                for ref in ready:
                    index = running.pop(ref)
                    order.add(index, _unwrap(_ray_get(ray, ref, items[index], runner, describe)))
                yield from order.release()
        finally:
            for ref in running:
                ray.cancel(ref, force=True)
    finally:
        if started:
            ray.shutdown()


def _ray_get(ray: Any, ref: Any, item: Any, runner: Runner, describe: Callable[[Any], str]) -> Any:
    try:
        return ray.get(ref)
    except ray.exceptions.WorkerCrashedError:
        raise WorkerLost(
            f"a Ray worker died {runner.retries + 1} times while running {describe(item)}; "
            f"the run stops (retries: {runner.retries})"
        ) from None


# -------------------------------------------------------------------------- analyze
def file_shards(files: Sequence[Path]) -> list[tuple[Path, ...]]:
    """The tasks of a sharded analysis: runs of consecutive files whose names give the
    same training step (a step's rank files are analysed together, as one process
    would see them); a file whose name gives no step is a task of its own.

    >>> files = [Path("step_1/rank_0.pt"), Path("step_1/rank_1.pt"), Path("x.pt")]
    >>> [len(s) for s in file_shards(files)]
    [2, 1]
    """
    from ratioscope.analysis.steps import step_from_name

    shards: list[list[Path]] = []
    previous: int | None = None
    for path in files:
        step = step_from_name(path)
        if shards and step is not None and step == previous:
            shards[-1].append(path)
        else:
            shards.append([path])
        previous = step
    return [tuple(shard) for shard in shards]


def analyze_in_tasks(
    paths: str | Path | Sequence[str | Path],
    runner: Runner,
    *,
    params: AnalysisParams | None = None,
    load_options: LoadOptions | None = None,
    device: str = defaults.DEVICE,
    chunk_elements: int | None = None,
    sections: Sequence[str] | None = None,
    progress: ProgressCallback | None = None,
    fixed_params: Collection[str] = (),
) -> Report:
    """:func:`ratioscope.analyze` of ``paths`` as tasks of :func:`file_shards`, their
    reports merged in file order as ``ratioscope merge`` merges (equal to one
    ``analyze`` up to the order of floating-point additions; docs/scale.md).

    The per-sequence table is not gathered (it would bring every row to the driver).
    """
    from ratioscope.analysis.pipeline import _split_options, merge_reports
    from ratioscope.io.loaders import expand_paths
    from ratioscope.progress import ProgressUpdate, report

    params, load_options = _split_options(params, load_options, {})
    listed = [paths] if isinstance(paths, (str, Path)) else list(paths)
    shards = file_shards(expand_paths(listed))
    work = functools.partial(
        _analyze_shard,
        params=params,
        load_options=load_options,
        device=device,
        chunk_elements=chunk_elements,
        sections=sections,
        fixed_params=tuple(fixed_params),
    )

    def documents() -> Iterator[dict[str, Any]]:
        report(progress, ProgressUpdate("files", 0, len(shards), runner.describe()))
        for index, document in enumerate(
            ordered_results(work, shards, runner, describe=describe_shard)
        ):
            report(progress, ProgressUpdate("files", index + 1, len(shards), "merging"))
            yield document

    return merge_reports(documents(), names=[describe_shard(shard) for shard in shards])


def _analyze_shard(
    shard: tuple[Path, ...],
    *,
    params: AnalysisParams,
    load_options: LoadOptions,
    device: str,
    chunk_elements: int | None,
    sections: Sequence[str] | None,
    fixed_params: Collection[str] = (),
) -> dict[str, Any]:
    from ratioscope.analysis.pipeline import analyze

    return analyze(
        list(shard),
        params=params,
        load_options=load_options,
        device=device,
        chunk_elements=chunk_elements,
        sections=sections,
        fixed_params=fixed_params,
    ).to_dict()


def describe_shard(shard: tuple[Path, ...]) -> str:
    return str(shard[0]) + (f" and {len(shard) - 1} more" if len(shard) > 1 else "")
