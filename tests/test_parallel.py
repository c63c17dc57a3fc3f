"""--workers and --ray: tasks in worker processes or on a real local Ray, their results
merged in order; the numbers equal the sequential run's, errors name their file, and a
killed worker's task runs again."""

from __future__ import annotations

import functools
import json
import os
import shutil
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import parallel_tasks
import pytest
from typer.testing import CliRunner

from ratioscope.analysis import parallel
from ratioscope.analysis.parallel import (
    Runner,
    TaskFailed,
    WorkerLost,
    file_shards,
    ordered_results,
)
from ratioscope.cli import app
from ratioscope.errors import InputError

runner = CliRunner()
STEPS = Path(__file__).resolve().parents[1] / "sample_data" / "verl_steps"


def _steps(tmp_path: Path, count: int) -> Path:
    """The first ``count`` step files of the sample run."""
    folder = tmp_path / "run"
    folder.mkdir()
    for path in sorted(STEPS.glob("step_*.pt"))[:count]:
        shutil.copy(path, folder / path.name)
    return folder


def _document(path: Path) -> dict:
    document = json.loads(path.read_text())
    document.pop("tool")
    return document


def _cli(*arguments: str) -> None:
    result = runner.invoke(app, [*arguments, "-q"])
    assert result.exit_code == 0, result.output


def test_results_come_in_task_order_in_this_process():
    assert list(ordered_results(parallel_tasks.square_later, range(7))) == [i * i for i in range(7)]


def test_file_shards_keep_a_steps_rank_files_together_in_file_order():
    names = ["step_2/rank_0.pt", "step_2/rank_1.pt", "step_3/rank_0.pt", "a.pt", "b.pt"]
    shards = file_shards([Path(n) for n in names])
    assert [[p.as_posix() for p in shard] for shard in shards] == [
        names[:2], [names[2]], [names[3]], [names[4]]
    ]  # fmt: skip


def test_a_task_error_in_this_process_is_the_error_itself():
    with pytest.raises(InputError, match=r"^shard_3\.pt: holds no mask\.$"):
        list(ordered_results(parallel_tasks.fail_on_three, range(5)))


class _PoolThatBreaksUnseen:
    """A stand-in for the process pool: the tasks whose items are in ``finish`` end at
    once, the others wait; the ``breaks_at``-th submit finds that a worker died since
    the last wait (the waiting tasks fail with BrokenProcessPool, the submit raises it),
    the race a real pool loses when a worker is killed between a wait and a submit."""

    def __init__(self, finish: set[int] | None = None, breaks_at: int | None = None) -> None:
        self.finish, self.breaks_at = finish, breaks_at
        self.submitted: list[int] = []
        self.waiting: list[Future] = []

    def submit(self, task, item: int) -> Future:
        if len(self.submitted) + 1 == self.breaks_at:
            for future in self.waiting:
                future.set_exception(BrokenProcessPool("a child process terminated abruptly"))
            raise BrokenProcessPool("a child process terminated abruptly")
        self.submitted.append(item)
        future: Future = Future()
        if self.finish is None or item in self.finish:
            future.set_result(task(item))
        else:
            self.waiting.append(future)
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def test_a_pool_broken_between_a_wait_and_a_submit_runs_the_lost_tasks_again(monkeypatch):
    first = _PoolThatBreaksUnseen(finish={0}, breaks_at=4)
    second = _PoolThatBreaksUnseen()
    pools = iter([first, second])
    monkeypatch.setattr(parallel, "_pool", lambda workers: next(pools))
    squares = ordered_results(functools.partial(pow, exp=2), range(6), Runner(workers=2, window=3))
    assert list(squares) == [0, 1, 4, 9, 16, 25]
    assert first.submitted == [0, 1, 2]  # the 4th submit found the pool broken
    assert second.submitted == [1, 2, 3, 4, 5]  # the lost tasks first, then the rest


def test_a_pool_that_keeps_breaking_stops_with_worker_lost(monkeypatch):
    pools = iter([_PoolThatBreaksUnseen(finish=set(), breaks_at=2) for _ in range(3)])
    monkeypatch.setattr(parallel, "_pool", lambda workers: next(pools))
    with pytest.raises(WorkerLost, match="died 2 times while running 0"):
        list(ordered_results(functools.partial(pow, exp=2), [0, 1], Runner(workers=2, retries=1)))


@pytest.mark.slow
def test_worker_processes_keep_order_and_survive_a_killed_worker(tmp_path):
    pool = Runner(workers=2, window=3)
    assert list(ordered_results(parallel_tasks.square_later, range(9), pool)) == [
        i * i for i in range(9)
    ]
    marker = tmp_path / "killed"
    results = list(
        ordered_results(functools.partial(parallel_tasks.die_once, str(marker)), range(5), pool)
    )
    assert [item for item, _ in results] == list(range(5))
    assert marker.exists() and int(marker.read_text()) != results[2][1]  # another process
    with pytest.raises(WorkerLost, match="died 2 times while running 0"):
        list(ordered_results(parallel_tasks.always_die, [0], Runner(workers=2, retries=1)))
    with pytest.raises(TaskFailed, match=r"^shard_3\.pt: holds no mask\.$") as caught:
        list(ordered_results(parallel_tasks.fail_on_three, range(5), pool))
    assert caught.value.exit_code == 2


@pytest.mark.slow
def test_timeline_analyze_and_objectives_with_workers_equal_the_sequential_run(tmp_path):
    run = _steps(tmp_path, 4)
    for command in ("timeline", "analyze", "objectives"):
        one, two = tmp_path / f"{command}_1.json", tmp_path / f"{command}_2.json"
        _cli(command, str(run), "--json", str(one))
        _cli(command, str(run), "--json", str(two), "--workers", "2")
        assert _document(one) == _document(two)


@pytest.mark.slow
def test_a_bad_file_in_a_worker_is_exit_2_naming_it_and_no_output(tmp_path):
    run = _steps(tmp_path, 3)
    bad = run / "step_0004.pt"
    bad.write_bytes(b"not a torch file")
    out = tmp_path / "t.json"
    result = runner.invoke(app, ["timeline", str(run), "--json", str(out), "--workers", "2"])
    assert result.exit_code == 2, result.output
    assert str(bad) in result.stderr and "Traceback" not in result.output
    assert not out.exists()


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    # Ray's workers import the test's task module from tests/ (and ratioscope as here)
    here = Path(__file__).resolve()
    path = os.pathsep.join(
        [str(here.parent), str(here.parents[1]), os.environ.get("PYTHONPATH", "")]
    )
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_timeline_on_ray_equals_the_sequential_run(tmp_path, local_ray):
    run = _steps(tmp_path, 4)
    one, ray_json = tmp_path / "one.json", tmp_path / "ray.json"
    _cli("timeline", str(run), "--json", str(one))
    _cli("timeline", str(run), "--json", str(ray_json), "--ray", "local")
    assert _document(one) == _document(ray_json)
    assert local_ray.is_initialized()  # joined, not started: left running for its owner


@pytest.mark.slow
def test_ray_retries_the_task_of_a_killed_worker(tmp_path, local_ray):
    marker = tmp_path / "killed"
    task = functools.partial(parallel_tasks.die_once, str(marker))
    results = list(ordered_results(task, range(5), Runner(ray="local", window=2)))
    assert [item for item, _ in results] == list(range(5))
    assert marker.exists() and int(marker.read_text()) != results[2][1]  # another process
    with pytest.raises(TaskFailed, match=r"shard_3\.pt: holds no mask"):
        list(ordered_results(parallel_tasks.fail_on_three, range(5), Runner(ray="local")))


@pytest.mark.slow
def test_report_with_workers_equals_the_sequential_report(tmp_path):
    import re

    run = _steps(tmp_path, 3)
    pages = []
    for options in ((), ("--workers", "2")):
        out = tmp_path / f"report{len(options)}.html"
        _cli("report", str(run), "--out", str(out), *options)
        # the creation time is the only difference a run may make
        pages.append(re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+\d:Z]*", "T", out.read_text()))
    assert pages[0] == pages[1]
