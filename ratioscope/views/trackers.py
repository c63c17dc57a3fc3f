"""The per-step headline quantities, written to the experiment trackers users watch.

A tracker metric is named ``ratioscope/`` followed by the headline's key
(:data:`ratioscope.views.timeline.HEADLINES`), e.g. ``ratioscope/mismatch.rollout.k3``; the
table of names is in docs/framework-metrics.md ("ratioscope in your tracker"). A step
where a headline is missing (its section was not computed, or the value is not finite)
logs nothing under that name.

Three writers, each an optional extra (``pip install 'ratioscope[trackers]'``) imported
only when used:

* :class:`TensorBoardTracker`: an event file in a log directory (``tensorboard``);
* :class:`MlflowTracker`: a run of an MLflow tracking store (``mlflow-skinny``); a local
  directory or ``file:`` URI is MLflow's file store;
* :class:`WandbTracker`: a W&B run, offline unless ``WANDB_MODE`` says otherwise
  (``wandb``; ``wandb sync`` uploads an offline run later).

:func:`log_timeline` writes a computed timeline to any of them; the capture's report mode
hands the same names to the trainer's own logger (:func:`headline_metrics`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ratioscope.errors import UsageError

if TYPE_CHECKING:
    from ratioscope.views.timeline import Headline, Timeline

#: the prefix of every metric ratioscope writes to a tracker
PREFIX = "ratioscope/"
#: the experiment (MLflow) and project (W&B) used unless the tracker's own setting names one
DEFAULT_PROJECT = "ratioscope"


def metric_name(key: str) -> str:
    """The tracker name of headline ``key``.

    >>> metric_name("mismatch.rollout.k3")
    'ratioscope/mismatch.rollout.k3'
    """
    return PREFIX + key


def headline_metrics(
    document: Mapping[str, Any], headlines: Sequence[Headline] | None = None
) -> dict[str, float]:
    """The headline quantities of one step's analyze report document, by tracker name.

    Args:
        document: ``Report.to_dict()`` of one step (or the JSON a capture wrote).
        headlines: the quantities (default :data:`ratioscope.views.timeline.HEADLINES`).

    Returns:
        ``{"ratioscope/<key>": value}`` for every headline present and finite.
    """
    from ratioscope.views.timeline import HEADLINES

    chosen = HEADLINES if headlines is None else headlines
    values = {metric_name(item.key): item.value(document) for item in chosen}
    return {name: value for name, value in values.items() if value is not None}


def timeline_metrics(
    result: Timeline, after: int | None = None
) -> list[tuple[int, dict[str, float]]]:
    """``(step, {tracker name: value})`` for every step of a timeline (those after step
    ``after`` only, when given), in step order."""
    keys = {h.key for h in result.headlines}
    return [
        (
            step.step,
            {
                metric_name(key): value
                for key, value in step.values.items()
                if value is not None and key in keys
            },
        )
        for step in result.steps
        if after is None or step.step > after
    ]


class Tracker(Protocol):
    """What :func:`log_timeline` writes to."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


def _require(module: str, package: str, option: str) -> Any:
    """Import ``module`` or stop with the install line (exit 2)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"{option} needs the {package} package, which is not installed: "
            f"pip install 'ratioscope[trackers]' (or pip install {package})"
        ) from None


class TensorBoardTracker:
    """Scalars in a TensorBoard event file under ``log_dir`` (created if missing)."""

    def __init__(self, log_dir: str | Path) -> None:
        _require("tensorboard", "tensorboard", "--tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        from ratioscope.errors import OutputError
        from ratioscope.io.paths import refuse_file_as_folder

        refuse_file_as_folder(log_dir, "--tensorboard")
        try:
            self.writer = SummaryWriter(log_dir=str(log_dir))
        except OSError as error:  # a folder that cannot be made (read-only, /proc)
            said = (error.strerror or str(error)).lower()
            raise OutputError(log_dir, f"cannot write TensorBoard's event files: {said}") from None

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, global_step=step)

    def close(self) -> None:
        self.writer.close()


def is_file_store(uri: str) -> bool:
    """Whether an MLflow tracking URI is a local directory (MLflow's file store).

    >>> is_file_store("mlruns"), is_file_store("file:///tmp/mlruns"), is_file_store("http://h")
    (True, True, False)
    """
    if uri.startswith("file:"):
        return True
    return "://" not in uri and uri not in ("databricks", "databricks-uc")


class MlflowTracker:
    """Metrics of one new run in experiment ``experiment`` of the store at ``uri``.

    ``uri`` is any MLflow tracking URI; a plain directory or a ``file:`` URI is the file
    store (allowed here although MLflow 3 asks for an opt-in, ``MLFLOW_ALLOW_FILE_STORE``).
    The experiment is ``MLFLOW_EXPERIMENT_NAME`` when set, else "ratioscope".
    """

    def __init__(self, uri: str, *, run_name: str | None = None) -> None:
        _require("mlflow", "mlflow-skinny", "--mlflow")
        if is_file_store(uri):
            # MLflow 3 refuses its file store without this opt-in; a local store is
            # what --mlflow DIR asks for
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            if "://" not in uri and not uri.startswith("file:"):
                uri = Path(uri).resolve().as_uri()
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_PROJECT
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(name)
        )
        self.run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        import time

        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        batch = [Metric(name, float(value), stamp, step) for name, value in metrics.items()]
        if batch:
            self.client.log_batch(self.run_id, metrics=batch)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbTracker:
    """A W&B run: offline (files under ``dir``/wandb) unless ``WANDB_MODE`` is set.

    The project is ``WANDB_PROJECT`` when set, else "ratioscope"; the directory is
    ``dir``, else ``WANDB_DIR``, else the current one.
    """

    def __init__(self, directory: str | Path | None = None, *, run_name: str | None = None):
        wandb = _require("wandb", "wandb", "--wandb")
        mode = os.environ.get("WANDB_MODE") or "offline"
        where = directory if directory is not None else os.environ.get("WANDB_DIR") or "."
        Path(where).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            mode=mode,
            dir=str(where),
            project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            name=run_name,
            settings=wandb.Settings(silent=True, console="off"),
        )

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


def log_timeline(result: Timeline, trackers: Iterable[Tracker]) -> None:
    """Write every step's headline quantities to each tracker, then close it."""
    rows = timeline_metrics(result)
    for tracker in trackers:
        try:
            for step, metrics in rows:
                tracker.log(step, metrics)
        finally:
            tracker.close()


def require_trackers(*, tensorboard: bool, mlflow: bool, wandb: bool) -> None:
    """Stop with the install line (exit 2) when a chosen tracker's package is missing, so
    that a long timeline does not run only to fail at the end."""
    if tensorboard:
        _require("tensorboard", "tensorboard", "--tensorboard")
    if mlflow:
        _require("mlflow", "mlflow-skinny", "--mlflow")
    if wandb:
        _require("wandb", "wandb", "--wandb")


def open_trackers(
    *,
    tensorboard: str | Path | None = None,
    mlflow: str | None = None,
    wandb: bool = False,
    wandb_dir: str | Path | None = None,
    run_name: str | None = None,
) -> list[Tracker]:
    """The trackers asked for, opened (a missing package stops before any is opened)."""
    require_trackers(tensorboard=tensorboard is not None, mlflow=mlflow is not None, wandb=wandb)
    trackers: list[Tracker] = []
    if tensorboard is not None:
        trackers.append(TensorBoardTracker(tensorboard))
    if mlflow is not None:
        trackers.append(MlflowTracker(mlflow, run_name=run_name))
    if wandb:
        trackers.append(WandbTracker(wandb_dir, run_name=run_name))
    return trackers
