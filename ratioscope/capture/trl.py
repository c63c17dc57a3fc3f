"""Capture from TRL's ``GRPOTrainer``: every loss micro-batch, written by a CaptureWriter.

A ``TrainerCallback`` never sees a batch or a log-prob, so the capture is a subclass of
the trainer that overrides four methods of TRL (checked when the class is built):

* ``_calculate_rewards``: keeps the rewards of every reward function (gathered over
  processes).
* ``_generate_and_score_completions``: adds a 1-D ``ratioscope_row_id`` tensor to its
  output and notes, per row and *before* TRL shuffles and splits the generation batch,
  the prompt group and the scalar reward. TRL's ``shuffle_sequence_dict`` and
  ``split_tensor_dict`` carry every 1-D tensor along, so each loss micro-batch still
  knows which rows it holds.
* ``_get_per_token_logps_and_entropies``: keeps its outputs when called with
  ``compute_entropy=True``, which only the loss call does.
* ``_compute_loss``: records the micro-batch (the inputs dict plus what was kept).

TRL is imported only by :func:`with_capture` when it is given no trainer class, so
``ratioscope.capture`` works without TRL installed. See ``docs/capture.md`` ("TRL").

Example::

    from ratioscope.capture.trl import CaptureConfig, with_capture
    from trl import GRPOTrainer

    Trainer = with_capture(GRPOTrainer)
    trainer = Trainer(model=..., reward_funcs=..., args=..., train_dataset=...,
                      ratioscope_capture=CaptureConfig("captures", sample_fraction=0.25))
    trainer.train()   # then: ratioscope analyze captures
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ratioscope.capture.writer import CaptureWriter
from ratioscope.data.trainer_settings import trl_settings
from ratioscope.errors import RatioscopeError

if TYPE_CHECKING:
    from ratioscope.judgement.verdict import Thresholds

#: where the stop rule says why it stopped the training
_LOGGER = logging.getLogger("ratioscope")

#: the TRL methods the capture overrides; each must exist on the trainer class
TRL_METHODS = (
    "_calculate_rewards",
    "_generate_and_score_completions",
    "_get_per_token_logps_and_entropies",
    "_compute_loss",
)
#: the key added to the output of ``_generate_and_score_completions``
ROW_ID_KEY = "ratioscope_row_id"
GRANULARITIES = ("step", "micro_batch")


class IncompatibleTrainerError(RatioscopeError, TypeError):
    """The trainer class (or the installed TRL) lacks what the capture hooks into."""

    def __init__(self, trainer: type | str, missing: str) -> None:
        self.trainer = trainer if isinstance(trainer, str) else trainer.__qualname__
        self.missing = missing
        super().__init__(
            f"ratioscope cannot capture from {self.trainer} (trl {_trl_version()}): {missing}; "
            "the capture was written against trl 1.16 (see docs/capture.md, 'TRL')"
        )


@dataclass(frozen=True)
class CaptureConfig:
    """Where and how a capturing trainer writes (the :class:`CaptureWriter` options).

    Attributes:
        directory: output directory of the part files or step reports.
        sample_fraction, seed, max_bytes_per_step, mode, analysis_options: as for
            :class:`~ratioscope.capture.CaptureWriter`; ``rank`` is always the
            accelerator's ``process_index``.
        granularity: ``"step"`` (default) keeps the rows of every loss micro-batch of an
            optimizer step in host memory and writes them as one call at the end of the
            step, rows in generation order, so every file holds whole GRPO groups (TRL
            shuffles rows across micro-batches). ``"micro_batch"`` writes each loss
            micro-batch at once: less memory, but a group's rows are spread over the
            step's files and ``analyze`` sees partial groups.
        stop_on: mode "report": stop the training at the first step whose verdict (the
            one of ``ratioscope timeline``, from the steps so far) is this level
            (``"red"`` or ``"yellow"``): ``control.should_training_stop`` is set at the
            end of that step and the findings are logged (logger ``ratioscope``, and
            ``ratioscope/verdict.level`` to the trainer's loggers). With several
            processes, each judges its own rows and all stop when one does.
        thresholds: the verdict's thresholds (default: the defaults).
    """

    directory: str | os.PathLike[str]
    sample_fraction: float = 1.0
    seed: int = 0
    max_bytes_per_step: int | None = None
    mode: str = "tensors"
    analysis_options: dict[str, Any] | None = field(default=None, hash=False)
    granularity: str = "step"
    stop_on: str | None = None
    thresholds: Thresholds | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise ValueError(
                f"granularity must be one of {', '.join(GRANULARITIES)}, got {self.granularity!r}"
            )

    def writer(self, rank: int) -> CaptureWriter:
        return CaptureWriter(
            self.directory,
            rank=rank,
            sample_fraction=self.sample_fraction,
            seed=self.seed,
            max_bytes_per_step=self.max_bytes_per_step,
            mode=self.mode,
            analysis_options=self.analysis_options,
            stop_on=self.stop_on,
            thresholds=self.thresholds,
        )


@dataclass
class _GenerationRows:
    """What is known per local row of the current generation batch, before the shuffle."""

    first_row_id: int
    group: Tensor  # [n] int64, global row // num_generations
    rewards: Tensor  # [n] float32, weighted sum of the reward functions
    #: "reward:NAME" -> [n] float32, each reward function's values (NaN where it gave None)
    per_function: dict[str, Tensor] = field(default_factory=dict)

    def index(self, row_ids: Tensor) -> Tensor:
        index = row_ids.detach().to("cpu", torch.int64) - self.first_row_id
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.group.numel()):
            raise IncompatibleTrainerError(
                "GRPOTrainer",
                "a loss micro-batch holds rows of another generation batch than the last one "
                "generated, which this TRL version was not expected to do",
            )
        return index


class RatioscopeCaptureMixin:
    """Mixin for a TRL ``GRPOTrainer`` (or a subclass) that records every loss micro-batch.

    Put it first among the bases, or use :func:`with_capture`::

        class MyTrainer(RatioscopeCaptureMixin, GRPOTrainer): ...
        trainer = MyTrainer(..., ratioscope_capture=CaptureConfig("captures"))

    Keyword argument ``ratioscope_capture``: a :class:`CaptureConfig`, a directory (the
    defaults otherwise), or None to train without capturing.

    Per loss micro-batch (``[B, C]`` tensors aligned with ``completion_ids``):

    * ``log_probs``: the loss call's per-token log-probs; ``entropy`` its entropies.
    * ``old_log_probs``: ``old_per_token_logps``, or the detached current log-probs when
      TRL has none (its default: the ratio is then exactly 1, as in TRL's own loss).
    * ``rollout_log_probs``: ``sampling_per_token_logps`` (vLLM), when present.
    * ``ref_log_probs``: ``ref_per_token_logps`` (``beta != 0``), when present.
    * ``advantages`` ``[B]``; ``mask``: ``completion_mask * tool_mask`` (the loss mask).
    * ``token_ids``: ``completion_ids``.
    * ``group``: global row // num_generations, counted over every generation batch of
      the run, so it is unique per (generation batch, prompt) and equal across ranks.
    * ``rewards``: sum over reward functions of weight x reward, as TRL's logged
      ``reward`` (a function's None counts as 0; no per-function values).

    The step is ``self.state.global_step`` during the loss call: the number of optimizer
    steps completed before it (TRL's logs number that same update one higher). Only
    training is captured; evaluation passes through untouched.
    """

    def __init__(self, *args: Any, ratioscope_capture: Any = None, **kwargs: Any) -> None:
        check_trainer_class(type(self))
        config = _config(ratioscope_capture)
        # set before TRL's __init__, so that the overrides pass through if it calls them
        self._ratioscope_config = config
        self._ratioscope_writer: CaptureWriter | None = None
        self._ratioscope_rows: _GenerationRows | None = None
        self._ratioscope_rows_generated = 0  # global rows of every generation batch so far
        self._ratioscope_rewards_per_func: Tensor | None = None
        self._ratioscope_loss_outputs: tuple[Tensor, Tensor | None] | None = None
        self._ratioscope_pending: dict[int, list[dict[str, Any]]] = {}
        self._ratioscope_written_steps: set[int] = set()
        self._ratioscope_closed = False
        self._ratioscope_stopping = False
        super().__init__(*args, **kwargs)
        if config is None:
            return
        for name in ("accelerator", "state", "num_generations", "reward_weights"):
            if not hasattr(self, name):
                raise IncompatibleTrainerError(type(self), f"the trainer has no attribute {name!r}")
        # both come from the trainer class this mixin is combined with
        self._ratioscope_writer = config.writer(rank=self.accelerator.process_index)  # type: ignore[attr-defined]
        self._ratioscope_writer.trainer_settings = trl_settings(self)
        self.add_callback(_step_callback(self))  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ public
    @property
    def ratioscope_writer(self) -> CaptureWriter | None:
        """The writer in use (its ``summary()`` counts what was written), or None."""
        return self._ratioscope_writer

    # -------------------------------------------------------------- TRL hooks
    def _calculate_rewards(
        self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any
    ) -> Any:
        rewards_per_func = super()._calculate_rewards(  # type: ignore[misc]
            inputs, prompts, completions, completion_ids_list
        )
        self._ratioscope_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> Any:
        self._ratioscope_rewards_per_func = None
        output = super()._generate_and_score_completions(inputs)  # type: ignore[misc]
        if self._ratioscope_writer is not None and self.model.training:  # type: ignore[attr-defined]
            output[ROW_ID_KEY] = self._ratioscope_tag(output)
        return output

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
        outputs = super()._get_per_token_logps_and_entropies(*args, **kwargs)  # type: ignore[misc]
        if self._ratioscope_writer is not None and _asks_entropy(self, args, kwargs):
            self._ratioscope_loss_outputs = (outputs[0], outputs[1])
        return outputs

    def _compute_loss(self, model: Any, inputs: Any) -> Any:
        self._ratioscope_loss_outputs = None
        loss = super()._compute_loss(model, inputs)  # type: ignore[misc]
        if (
            self._ratioscope_writer is not None
            and self.model.training  # type: ignore[attr-defined]
            and ROW_ID_KEY in inputs
        ):
            self._ratioscope_record(inputs)
        self._ratioscope_loss_outputs = None
        return loss

    # -------------------------------------------------------------- internals
    def _ratioscope_tag(self, output: dict[str, Any]) -> Tensor:
        """Row ids for the generation batch in ``output``; notes group and reward per row."""
        completion_ids = output["completion_ids"]
        rows = int(completion_ids.size(0))
        processes = int(self.accelerator.num_processes)  # type: ignore[attr-defined]
        process = int(self.accelerator.process_index)  # type: ignore[attr-defined]
        rewards_per_func = self._ratioscope_rewards_per_func
        if rewards_per_func is None or rewards_per_func.size(0) != rows * processes:
            raise IncompatibleTrainerError(
                type(self),
                "_generate_and_score_completions did not call _calculate_rewards with one "
                "row per completion of every process",
            )
        # TRL's own process slice: local row i is global row process * rows + i
        first = self._ratioscope_rows_generated + process * rows
        self._ratioscope_rows_generated += rows * processes
        row_ids = torch.arange(first, first + rows, dtype=torch.int64)
        local = rewards_per_func[process * rows : (process + 1) * rows].detach().float()
        weights = self.reward_weights.to(local.device, torch.float32)  # type: ignore[attr-defined]
        names = _reward_keys(getattr(self, "reward_func_names", None), int(local.shape[1]))
        self._ratioscope_rows = _GenerationRows(
            first_row_id=first,
            group=row_ids // int(self.num_generations),  # type: ignore[attr-defined]
            rewards=(local * weights.unsqueeze(0)).nansum(dim=1).cpu(),
            per_function={name: local[:, i].cpu() for i, name in enumerate(names)},
        )
        return row_ids.to(completion_ids.device)

    def _ratioscope_record(self, inputs: dict[str, Any]) -> None:
        if self._ratioscope_loss_outputs is None:
            raise IncompatibleTrainerError(
                type(self),
                "_compute_loss did not call _get_per_token_logps_and_entropies with "
                "compute_entropy=True (a fused loss such as Liger bypasses it)",
            )
        rows = self._ratioscope_rows
        assert rows is not None  # a row id is only added together with the rows
        index = rows.index(inputs[ROW_ID_KEY])
        log_probs, entropy = self._ratioscope_loss_outputs
        mask = inputs["completion_mask"]
        if inputs.get("tool_mask") is not None:
            mask = mask * inputs["tool_mask"]
        old = inputs.get("old_per_token_logps")
        record: dict[str, Any] = {
            "mask": mask,
            "log_probs": log_probs,
            "old_log_probs": log_probs.detach() if old is None else old,
            "rollout_log_probs": inputs.get("sampling_per_token_logps"),
            "ref_log_probs": inputs.get("ref_per_token_logps"),
            "advantages": inputs["advantages"],
            "entropy": entropy,
            "rewards": rows.rewards[index],
            "group": rows.group[index],
            "token_ids": inputs["completion_ids"],
        }
        for name, values in rows.per_function.items():
            record[name] = values[index]
        step = int(self.state.global_step)  # type: ignore[attr-defined]
        config = self._ratioscope_config
        assert config is not None and self._ratioscope_writer is not None
        if config.granularity == "micro_batch":
            self._ratioscope_active_writer().write(step, **_write_arguments(record))
            self._ratioscope_written_steps.add(step)
            return
        record = {k: _to_host(k, v) for k, v in record.items() if v is not None}
        record["row_id"] = index + rows.first_row_id
        self._ratioscope_pending.setdefault(step, []).append(record)

    def _ratioscope_active_writer(self) -> CaptureWriter:
        """The writer, opened again after ``train()`` closed it (a second ``train()``)."""
        writer = self._ratioscope_writer
        assert writer is not None and self._ratioscope_config is not None
        if self._ratioscope_closed:
            settings = writer.trainer_settings
            writer = self._ratioscope_config.writer(rank=writer.rank)
            writer.trainer_settings = settings
            self._ratioscope_writer = writer
            self._ratioscope_closed = False
        return writer

    def _ratioscope_end_steps(self) -> None:
        """Write the buffered steps (granularity "step") and end every step written."""
        pending, self._ratioscope_pending = self._ratioscope_pending, {}
        for step, records in sorted(pending.items()):
            self._ratioscope_active_writer().write(step, **_write_arguments(_concat(records)))
            self._ratioscope_written_steps.add(step)
        written, self._ratioscope_written_steps = self._ratioscope_written_steps, set()
        for step in sorted(written):
            writer = self._ratioscope_active_writer()
            writer.end_step(step)
            self._ratioscope_log(writer.step_metrics(step))
        self._ratioscope_stop_check()

    def _ratioscope_stop_check(self) -> None:
        """``stop_on``: stop the training once the run's verdict reached the level (on
        every process at once: each calls this at each step's end)."""
        config = self._ratioscope_config
        writer = self._ratioscope_writer
        if config is None or config.stop_on is None or writer is None:
            return
        if self._ratioscope_stopping:
            return
        reached = writer.stop_step is not None
        accelerator = self.accelerator  # type: ignore[attr-defined]
        if accelerator.num_processes > 1:
            flag = torch.tensor([1.0 if reached else 0.0], device=accelerator.device)
            reached = bool(accelerator.reduce(flag, reduction="sum").item() > 0)
        if not reached:
            return
        self._ratioscope_stopping = True
        verdict = writer.verdict
        findings = [] if verdict is None else [f for f in verdict.findings if f.level != "green"]
        step = writer.stop_step
        where = f"at step {step}" if step is not None else "on another process"
        _LOGGER.warning(
            "ratioscope: the run's verdict reached %s %s; stopping the training (stop_on=%r): %s",
            config.stop_on,
            where,
            config.stop_on,
            "; ".join(f"{f.level}: {f.text}" for f in findings) or "see the step reports",
        )
        self.control.should_training_stop = True  # type: ignore[attr-defined]

    def _ratioscope_log(self, metrics: dict[str, float]) -> None:
        """Mode "report": the step's headline quantities to the trainer's own logger.

        ``transformers.Trainer.log`` rather than ``self.log``: TRL's ``log`` would add
        (and reset) the metrics it averages over its own logging interval, every step.
        The entry goes to ``state.log_history`` and every ``report_to`` integration
        (W&B, TensorBoard, MLflow, ...) at the trainer's current ``global_step``.
        Logging clears ``control.should_log``, which the trainer's own log of this step
        still needs: it is restored.
        """
        if not metrics:
            return
        from transformers import Trainer

        control = self.control  # type: ignore[attr-defined]
        should_log = control.should_log
        Trainer.log(self, dict(metrics))  # type: ignore[arg-type]
        self.control.should_log = should_log  # type: ignore[attr-defined]

    def _ratioscope_close(self) -> None:
        self._ratioscope_end_steps()
        if self._ratioscope_writer is not None:
            self._ratioscope_writer.close()
            self._ratioscope_closed = True


def with_capture(trainer_class: type | None = None) -> type:
    """A subclass of ``trainer_class`` (default: ``trl.GRPOTrainer``) that captures.

    The subclass takes one more keyword argument, ``ratioscope_capture`` (see
    :class:`RatioscopeCaptureMixin`). Calling it twice with one class gives one class.

    Raises:
        IncompatibleTrainerError: the class lacks a method the capture overrides, or
            its ``_get_per_token_logps_and_entropies`` takes no ``compute_entropy``.
    """
    if trainer_class is None:
        from trl import GRPOTrainer

        trainer_class = GRPOTrainer
    return _subclass(trainer_class)


@functools.cache
def _subclass(trainer_class: type) -> type:
    if issubclass(trainer_class, RatioscopeCaptureMixin):
        return trainer_class
    check_trainer_class(trainer_class)
    return type(
        f"Ratioscope{trainer_class.__name__}",
        (RatioscopeCaptureMixin, trainer_class),
        {"__module__": __name__, "__doc__": RatioscopeCaptureMixin.__doc__},
    )


def check_trainer_class(trainer_class: type[Any]) -> None:
    """Raise :class:`IncompatibleTrainerError` unless ``trainer_class`` has the methods
    the capture overrides, outside :class:`RatioscopeCaptureMixin` itself."""
    bases: list[type[Any]] = [c for c in trainer_class.__mro__ if c is not RatioscopeCaptureMixin]
    for name in TRL_METHODS:
        if not any(name in vars(c) for c in bases):
            raise IncompatibleTrainerError(trainer_class, f"it has no method {name}")
    hashable: type = trainer_class  # python/mypy#11470, as in _asks_entropy
    for signature in _logps_signatures(hashable):
        if "compute_entropy" in signature.parameters:
            return
        if not _takes_any_keyword(signature):
            break
    raise IncompatibleTrainerError(
        trainer_class, "_get_per_token_logps_and_entropies takes no compute_entropy argument"
    )


def __getattr__(name: str) -> Any:
    # ``from ratioscope.capture.trl import RatioscopeGRPOTrainer`` imports TRL only then
    if name == "RatioscopeGRPOTrainer":
        return with_capture()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- helpers
def _config(value: Any) -> CaptureConfig | None:
    if value is None or isinstance(value, CaptureConfig):
        return value
    if isinstance(value, (str, os.PathLike)):
        return CaptureConfig(Path(value))
    raise TypeError(
        "ratioscope_capture must be a CaptureConfig, a directory or None, "
        f"got {type(value).__name__}"
    )


@functools.cache
def _logps_signatures(trainer_class: type[Any]) -> tuple[inspect.Signature, ...]:
    """The signatures of ``_get_per_token_logps_and_entropies`` along the MRO, outermost
    first, without the mixin's own ``(*args, **kwargs)`` override."""
    return tuple(
        inspect.signature(vars(c)["_get_per_token_logps_and_entropies"])
        for c in trainer_class.__mro__
        if c is not RatioscopeCaptureMixin and "_get_per_token_logps_and_entropies" in vars(c)
    )


def _takes_any_keyword(signature: inspect.Signature) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())


def _asks_entropy(trainer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call of ``_get_per_token_logps_and_entropies`` with ``args`` and
    ``kwargs`` asks for entropies: the arguments bound by name to the signature of the
    outermost override that names ``compute_entropy`` or does not pass it on through
    ``*args``/``**kwargs`` (a subclass's ``(self, *a, compute_entropy=False, **kw)``
    and TRL's positional one alike). Only a plain ``True`` (or non-zero int) asks."""
    # plain ``type``: mypy does not see a type[Any] as Hashable (python/mypy#11470)
    trainer_class: type = type(trainer)
    for signature in _logps_signatures(trainer_class):
        try:
            bound = signature.bind(trainer, *args, **kwargs)
        except TypeError:
            continue  # not this signature's call; an inner one may take it
        parameters = signature.parameters
        if "compute_entropy" in bound.arguments:
            return _plain_true(bound.arguments["compute_entropy"])
        spill = [p.name for p in parameters.values() if p.kind is p.VAR_KEYWORD]
        if spill and "compute_entropy" in bound.arguments.get(spill[0], {}):
            return _plain_true(bound.arguments[spill[0]]["compute_entropy"])
        if "compute_entropy" in parameters:
            return _plain_true(parameters["compute_entropy"].default)
        # a catch-all override passes its arguments on: read them as the next one does
    return _plain_true(kwargs.get("compute_entropy", False))


def _plain_true(value: Any) -> bool:
    """True for True or a non-zero int; a tensor or any other object is not a flag."""
    return isinstance(value, (bool, int)) and bool(value)


def _reward_keys(names: Any, count: int) -> list[str]:
    """``reward:NAME`` for each reward function (TRL's ``reward_func_names``; its index
    when a name is missing or repeated)."""
    names = list(names or [])
    keys: list[str] = []
    for i in range(count):
        name = str(names[i]) if i < len(names) and names[i] else str(i)
        key = f"reward:{name}"
        keys.append(key if key not in keys else f"reward:{name}_{i}")
    return keys


def _write_arguments(record: dict[str, Any]) -> dict[str, Any]:
    """``CaptureWriter.write`` keyword arguments: the per-function rewards go to
    ``per_sequence``."""
    out = {k: v for k, v in record.items() if not k.startswith("reward:")}
    out["per_sequence"] = {k: v for k, v in record.items() if k.startswith("reward:")}
    return out


def _to_host(name: str, value: Any) -> Any:
    """What a buffered record keeps: host copies, floats as float32 (what is stored)."""
    value = value.detach()
    if name == "mask":
        return value.to("cpu") != 0
    if name in ("token_ids", "group"):
        return value.to("cpu", torch.int64)
    return value.to("cpu", torch.float32)


def _concat(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One write's arguments from the buffered micro-batches of a step: rows sorted by
    row id (generation order, groups contiguous), right-padded to the widest one.
    A key missing from some micro-batch is left out."""
    names = set.intersection(*(set(r) for r in records)) - {"row_id"}
    order = torch.argsort(torch.cat([r["row_id"] for r in records]), stable=True)
    width = max(int(r["mask"].shape[1]) for r in records)
    out: dict[str, Any] = {}
    for name in names:
        parts = [r[name] for r in records]
        if parts[0].dim() == 2:
            parts = [torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in parts]
        out[name] = torch.cat(parts).index_select(0, order)
    return out


def _step_callback(trainer: RatioscopeCaptureMixin) -> Any:
    """A ``TrainerCallback`` that ends the capture's steps; it holds a weak reference,
    so the trainer and its callback handler do not keep each other alive."""
    from transformers import TrainerCallback

    reference = weakref.ref(trainer)

    class RatioscopeStepCallback(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            owner = reference()
            if owner is not None:
                owner._ratioscope_end_steps()

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            owner = reference()
            if owner is not None:
                owner._ratioscope_close()

    return RatioscopeStepCallback()


def _trl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trl")
    except PackageNotFoundError:
        return "not installed"
