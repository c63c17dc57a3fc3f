"""CaptureWriter: per-token data of a training step, written where ``ratioscope`` reads it.

A training framework that keeps no per-token data calls :meth:`CaptureWriter.write` once
per optimisation step or micro-batch with its canonical tensors (docs/formats.md). In mode
``"tensors"`` every call becomes one ``.pt`` file that ``ratioscope analyze DIR`` reads
with the canonical layout::

    DIR/step_{step:06d}/rank_{rank:05d}_part_{part:04d}.pt

In mode ``"report"`` nothing but reports is written: each call is analysed in process
and the reports of one step are merged, then written by :meth:`CaptureWriter.end_step`
as ``DIR/step_{step:06d}/rank_{rank:05d}.json`` for ``ratioscope merge``.

Files are written atomically (a temporary file in the same directory, then a rename),
so a reader never sees half a file, and a crash leaves no partial one.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ratioscope.capture.sampling import choose_units, rows_of_units, sampling_order
from ratioscope.capture.tensors import Inputs, Part, gather, validate_inputs
from ratioscope.data.trainer_settings import SETTINGS_KEY, TrainerSettings, settings_from_env
from ratioscope.io.atomic import atomic_path

if TYPE_CHECKING:
    from ratioscope.judgement.verdict import Thresholds, Verdict
    from ratioscope.views.watch import RunMonitor

MODES = ("tensors", "report")
#: prefix of the metadata keys stored in every part file, as 0-d tensors: the loader
#: lists them as ignored keys and analyses nothing from them
METADATA_PREFIX = "ratioscope_capture."
#: version of the part file layout, stored as ``ratioscope_capture.version``
FORMAT_VERSION = 1
#: keyword arguments of :func:`ratioscope.analyze` that ``analysis_options`` may hold
#: besides the :class:`~ratioscope.data.params.AnalysisParams` fields
ANALYZE_KEYWORDS = ("params", "device", "chunk_elements", "sections", "nonfinite")


# ------------------------------------------------------------------------------ layout
def part_path(directory: str | Path, step: int, rank: int, part: int) -> Path:
    """Where mode "tensors" writes call ``part`` of ``step`` on ``rank``.

    >>> part_path("run", 7, 1, 0).as_posix()
    'run/step_000007/rank_00001_part_0000.pt'
    """
    return Path(directory) / f"step_{step:06d}" / f"rank_{rank:05d}_part_{part:04d}.pt"


def report_path(directory: str | Path, step: int, rank: int) -> Path:
    """Where mode "report" writes the merged report of ``step`` on ``rank``.

    >>> report_path("run", 7, 1).as_posix()
    'run/step_000007/rank_00001.json'
    """
    return Path(directory) / f"step_{step:06d}" / f"rank_{rank:05d}.json"


def read_capture_metadata(path: str | Path) -> dict[str, int | float]:
    """The ``ratioscope_capture`` metadata of a part file, as plain Python numbers.

    Keys: version, step, rank, part, seed, sample_fraction, rows_total (rows passed to
    ``write``), rows_sampled (after ``sample_fraction``), rows_kept (stored, after the
    byte bound) and, when groups were given, groups_total, groups_sampled, groups_kept.
    """
    content = torch.load(Path(path), map_location="cpu", weights_only=True)
    return {
        key[len(METADATA_PREFIX) :]: value.item()
        for key, value in content.items()
        if key.startswith(METADATA_PREFIX)
    }


def resolve_rank(rank: int | None = None) -> int:
    """``rank`` if given; else the torch.distributed rank when a process group is
    initialised; else the ``RANK`` environment variable; else 0."""
    if rank is not None:
        return _non_negative_int("rank", rank)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    text = os.environ.get("RANK", "").strip()
    if not text:
        return 0
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"the RANK environment variable must be an integer >= 0, got {text!r}")
    return value


# ----------------------------------------------------------------------------- summary
@dataclass(frozen=True)
class CaptureSummary:
    """What a writer has done so far (:meth:`CaptureWriter.summary`).

    Attributes:
        parts_written: calls whose rows were stored (mode "tensors") or analysed
            (mode "report").
        parts_skipped: calls dropped whole because not even one group (row) fitted in
            what was left of ``max_bytes_per_step``.
        parts_empty: calls whose mask held no valid token (nothing to analyse).
        rows_total: rows passed to ``write``.
        rows_kept: rows stored or analysed.
        rows_dropped_by_bytes: rows removed to respect ``max_bytes_per_step``, the rows
            of skipped calls included (the rest of rows_total - rows_kept was removed by
            ``sample_fraction`` or belonged to empty calls).
        bytes_written: bytes of every file written (part files and reports).
        reports_written: step reports written (mode "report").
    """

    parts_written: int = 0
    parts_skipped: int = 0
    parts_empty: int = 0
    rows_total: int = 0
    rows_kept: int = 0
    rows_dropped_by_bytes: int = 0
    bytes_written: int = 0
    reports_written: int = 0


@dataclass
class _Step:
    """Running state of one step on this rank."""

    parts: int = 0  # calls so far: the part number of the next call
    bytes: int = 0  # bytes of this step's part files
    document: dict[str, Any] | None = None  # mode "report": merged report of the calls
    ended: bool = False
    #: mode "report": the ended step's headline quantities by tracker name
    metrics: dict[str, float] | None = None


class _OverBudget(Exception):
    """A part file came out larger than the bytes left for its step."""


class _ByteCounter:
    """A write-only sink that counts what torch.save would write (exactly: torch.save
    streams the same bytes to any writable object)."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        self.size += size
        return size

    def flush(self) -> None:
        pass


def _trainer_column(mask: Any, policy_version: Any, version: int) -> Tensor | None:
    """The trainer's version as a [B] column (stored per row, so that sampling rows and
    every reader keep it), when ``policy_version`` is given."""
    if policy_version is None:
        return None
    version = _non_negative_int("trainer_version", version)
    return torch.full((len(mask),), version, dtype=torch.int64)


# ------------------------------------------------------------------------------ writer
class CaptureWriter:
    """Record canonical per-token tensors of training steps for ratioscope.

    Args:
        directory: output directory (created if missing).
        rank: this process's rank; None = the torch.distributed rank when a process
            group is initialised, else the ``RANK`` environment variable, else 0.
        sample_fraction: share of groups (or rows, without groups) kept per call, in
            (0, 1]; the choice depends only on (seed, step, rank, part).
        seed: non-negative integer seed of that choice.
        max_bytes_per_step: bound on the bytes of the part files of one step on this
            rank (mode "tensors" only); a call that would exceed it is sampled down by
            whole groups, or skipped when not even one group fits.
        mode: "tensors" (write ``.pt`` part files) or "report" (analyse in process and
            write one merged report per step).
        analysis_options: mode "report" only: keyword options of
            :func:`ratioscope.analyze` (``window=20``, ``clip=(0.2, 0.28)``,
            ``sections=[...]``, ``nonfinite="mask"``, ``device="cuda"``, ...).
        trainer_settings: the trainer's configuration
            (:func:`ratioscope.data.trainer_settings.verl_settings`, ``openrlhf_settings``;
            the TRL capture sets it itself), stored in every part file as JSON under
            ``ratioscope_trainer``; ``analyze`` takes the clip band, length limit and
            group size from it, and so does mode "report" (``analysis_options`` win).
            None: those the ``RATIOSCOPE_TRAINER_SETTINGS`` environment variable holds
            (JSON, as the trainer's driver wrote it:
            :func:`ratioscope.data.trainer_settings.forward_verl_settings`,
            :func:`~ratioscope.data.trainer_settings.settings_env`), else none.
        stop_on: mode "report" only: judge the run after each step (the verdict of
            ``ratioscope timeline``, from the steps so far: :class:`~ratioscope.views.
            watch.RunMonitor`) and stop it at the first step whose verdict is this level
            (``"red"`` or ``"yellow"``): :attr:`should_stop` turns True and ``on_stop``
            is called, once. The TRL capture stops the trainer
            (``CaptureConfig(stop_on="red")``); another loop reads :attr:`should_stop`
            or passes ``on_stop``.
        on_stop: called once as ``on_stop(step, verdict)`` when the run should stop (a
            :class:`~ratioscope.judgement.verdict.Verdict`: its ``findings`` say why).
        thresholds: the verdict's thresholds (a
            :class:`~ratioscope.judgement.verdict.Thresholds`; default: the defaults).

    Raises:
        ValueError: an option out of range or not meaningful in ``mode``, or
            ``RATIOSCOPE_TRAINER_SETTINGS`` set to something other than settings JSON.

    Example (mode "report", a loop of one's own that stops on red)::

        capture = CaptureWriter("reports", mode="report", stop_on="red")
        for step, batch in enumerate(loader):
            ...
            capture.write(step, mask=mask, log_probs=logp, old_log_probs=old_logp,
                          advantages=adv, group=uids)
            capture.end_step(step)
            if capture.should_stop:
                print(capture.verdict.bottom_line())
                break

    Example (mode "tensors")::

        with CaptureWriter("captures", sample_fraction=0.25) as capture:
            for step, batch in enumerate(loader):
                ...
                capture.write(step, mask=mask, log_probs=logp, old_log_probs=old_logp,
                              advantages=adv, group=uids)
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        rank: int | None = None,
        sample_fraction: float = 1.0,
        seed: int = 0,
        max_bytes_per_step: int | None = None,
        mode: str = "tensors",
        analysis_options: dict[str, Any] | None = None,
        trainer_settings: TrainerSettings | None = None,
        stop_on: str | None = None,
        on_stop: Callable[[int, Verdict], None] | None = None,
        thresholds: Thresholds | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if (stop_on is not None or on_stop is not None) and mode != "report":
            raise ValueError(
                "stop_on judges the step reports, which only mode 'report' makes: "
                "CaptureWriter(..., mode='report', stop_on='red')"
            )
        if on_stop is not None and stop_on is None:
            raise ValueError("on_stop is called when the verdict reaches stop_on: give stop_on")
        self._monitor: RunMonitor | None = None
        if stop_on is not None:
            from ratioscope.views.watch import RunMonitor

            self._monitor = RunMonitor(thresholds, stop_on)
        self.on_stop = on_stop
        self.mode = mode
        self.sample_fraction = _fraction(sample_fraction)
        self.seed = _non_negative_int("seed", seed)
        self.max_bytes_per_step = _byte_bound(max_bytes_per_step, mode)
        self.analysis_options = _analysis_options(analysis_options, mode)
        #: the trainer's configuration, stored in every part file (see
        #: ratioscope.data.trainer_settings); may be set after the writer is made. Without
        #: the argument, the driver's, handed down in the environment: a writer made in
        #: a worker has only the worker's part of the config
        self.trainer_settings = (
            trainer_settings if trainer_settings is not None else settings_from_env()
        )
        self.rank = resolve_rank(rank)
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"directory {self.directory} exists and is not a directory")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._steps: dict[int, _Step] = {}
        self._counts = {f.name: 0 for f in fields(CaptureSummary)}
        self._closed = False

    # ---------------------------------------------------------------- public API
    def write(
        self,
        step: int,
        *,
        mask: Tensor,
        log_probs: Tensor | None = None,
        old_log_probs: Tensor | None = None,
        rollout_log_probs: Tensor | None = None,
        ref_log_probs: Tensor | None = None,
        advantages: Tensor | None = None,
        entropy: Tensor | None = None,
        old_entropy: Tensor | None = None,
        rewards: Tensor | None = None,
        correct: Tensor | None = None,
        group: Tensor | Sequence[str] | Sequence[int] | None = None,
        token_ids: Tensor | None = None,
        per_sequence: Mapping[str, Tensor] | None = None,
        policy_version: Tensor | None = None,
        trainer_version: int | None = None,
    ) -> Path | None:
        """Record one micro-batch of ``step``.

        Tensors may live on any device, have any float dtype and require grad: they are
        detached and copied to the host (only the kept rows), floats as float32.

        Args:
            step: non-negative step number (steps are names: any order is allowed).
            mask: [B, T] bool (or 0/1), True on valid (trained) tokens.
            log_probs, old_log_probs: [B, T] current and behaviour policy log-probs
                (required).
            rollout_log_probs, ref_log_probs: [B, T] inference-engine and reference
                policy log-probs.
            advantages: [B, T] or [B].
            entropy, old_entropy: [B, T] per-token entropies of pi_theta and pi_old.
            rewards: [B] float; correct: [B] bool.
            group: [B] integer tensor, or B str/int labels (e.g. verl's ``uid``):
                responses to the same prompt.
            token_ids: [B, T] integer sampled tokens.
            policy_version: [B, T] or [B] integer: the version of the policy that
                sampled each token (or sequence), for async training (docs/staleness.md).
            trainer_version: the version of the policy being trained; default ``step``
                when ``policy_version`` is given.
            per_sequence: more [B] values by name, each starting with ``reward:`` (one
                reward function's values, ``{"reward:accuracy": ...}``), stored as float32
                under that name: ``analyze --correct-field reward:accuracy`` reads them.

        Returns:
            The part file written (mode "tensors"); None in mode "report", or when the
            call was skipped (no valid token, or over the byte bound).

        Raises:
            ValueError: a shape or dtype does not fit (the message names the argument),
                the writer is closed, or (mode "report") ``step`` was already ended.
            TypeError: an argument is not a tensor.
        """
        if self._closed:
            raise ValueError("the CaptureWriter is closed")
        step = _non_negative_int("step", step)
        inputs = validate_inputs(
            mask,
            {
                "log_probs": log_probs,
                "old_log_probs": old_log_probs,
                "rollout_log_probs": rollout_log_probs,
                "ref_log_probs": ref_log_probs,
                "advantages": advantages,
                "entropy": entropy,
                "old_entropy": old_entropy,
                "rewards": rewards,
                "correct": correct,
                "token_ids": token_ids,
                "policy_version": policy_version,
                "trainer_version": _trainer_column(
                    mask, policy_version, step if trainer_version is None else trainer_version
                ),
            },
            group,
            per_sequence,
        )
        state = self._steps.setdefault(step, _Step())
        if state.ended and self.mode == "report":
            raise ValueError(
                f"step {step} was ended and its report written; write every part of a step "
                "before end_step"
            )
        part = state.parts
        state.parts += 1
        self._count("rows_total", inputs.rows)
        has_valid = inputs.units_with_valid_tokens()
        if not has_valid.any():
            self._count("parts_empty")
            return None
        order = sampling_order(self.seed, step, self.rank, part, len(has_valid))
        units = choose_units(order, has_valid, self.sample_fraction)
        stored = gather(inputs, rows_of_units(inputs.units, units))
        context = _PartContext(self, step, part, inputs, stored)
        if self.mode == "report":
            self._analyse(state, context)
            return None
        return self._save_part(state, context, units)

    def end_step(self, step: int) -> Path | None:
        """Finish ``step``: in mode "report" write its merged report and return its path.

        Returns None when nothing is written (mode "tensors", or no call of ``step``
        stored any row). Calling it twice, or for a step never written, is harmless.
        """
        step = _non_negative_int("step", step)
        state = self._steps.get(step)
        if state is None:
            return None
        state.ended = True
        if state.document is None:
            return None
        from ratioscope.io.documents import write_json
        from ratioscope.views.trackers import headline_metrics

        path = report_path(self.directory, step, self.rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(state.document, path)
        state.metrics = headline_metrics(state.document)
        if self._monitor is not None:
            self._judge(step, state)
        state.document = None  # the step's memory is given back once it is on disk
        self._count("bytes_written", path.stat().st_size)
        self._count("reports_written")
        return path

    @property
    def should_stop(self) -> bool:
        """Whether the run's verdict reached ``stop_on`` (at :attr:`stop_step`)."""
        return self._monitor is not None and self._monitor.stop_step is not None

    @property
    def stop_step(self) -> int | None:
        """The first step whose verdict reached ``stop_on`` (None: none, or no stop_on)."""
        return None if self._monitor is None else self._monitor.stop_step

    @property
    def verdict(self) -> Verdict | None:
        """With ``stop_on``: the run's verdict after the latest ended step."""
        return None if self._monitor is None else self._monitor.verdict

    def _judge(self, step: int, state: _Step) -> None:
        """Fold the ended step into the run's verdict; call ``on_stop`` when it turns."""
        from ratioscope.views.watch import LEVEL_METRIC, LEVEL_NUMBERS

        monitor = self._monitor
        assert monitor is not None and state.document is not None
        was = monitor.stop_step
        judged = monitor.add(step, state.document)
        state.metrics = {**(state.metrics or {}), LEVEL_METRIC: LEVEL_NUMBERS[judged.level]}
        if was is None and monitor.stop_step is not None and self.on_stop is not None:
            self.on_stop(step, judged)

    def step_metrics(self, step: int) -> dict[str, float]:
        """Mode "report": the headline quantities of ended ``step`` (this rank's rows), by
        tracker name (``ratioscope/<key>``, docs/framework-metrics.md), for the trainer's
        own logger; empty in mode "tensors" or before the step is ended."""
        state = self._steps.get(_non_negative_int("step", step))
        return dict(state.metrics) if state is not None and state.metrics else {}

    def close(self) -> None:
        """End every step not yet ended (mode "report": write their reports)."""
        if self._closed:
            return
        for step in sorted(self._steps):
            if not self._steps[step].ended:
                self.end_step(step)
        self._closed = True

    def summary(self) -> CaptureSummary:
        """Counts of parts, rows and bytes so far."""
        return CaptureSummary(**self._counts)

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- internals
    def _analyse(self, state: _Step, context: _PartContext) -> None:
        """Mode "report": analyse the part and fold it into the step's running report."""
        from ratioscope.analysis.pipeline import analyze, merge_reports
        from ratioscope.data.batch import TokenBatch

        options = dict(self.analysis_options)
        if self.trainer_settings is not None:
            # the trainer's clip band, length limit and group size, as analyze takes
            # them from the part files' recorded settings (analysis_options win)
            options["trainer_settings"] = self.trainer_settings
        nonfinite = options.get("nonfinite", "error")
        # the reward:NAME columns too: the vitals report each reward function
        columns = dict(context.stored.columns)
        batch = TokenBatch.from_tensors(columns, source=context.source, nonfinite=nonfinite)
        document = analyze(batch, **options).to_dict()
        if state.document is not None:
            # one running document per step: memory stays that of one report
            document = merge_reports([state.document, document]).to_dict()
        state.document = document
        self._count("parts_written")
        self._count("rows_kept", context.stored.rows)

    def _save_part(self, state: _Step, context: _PartContext, units: np.ndarray) -> Path | None:
        """Mode "tensors": write the part, sampled down to the step's byte bound."""
        path = part_path(self.directory, context.step, self.rank, context.part)
        path.parent.mkdir(parents=True, exist_ok=True)
        budget = None
        if self.max_bytes_per_step is not None:
            budget = self.max_bytes_per_step - state.bytes
        written = _write_within(context, units, path, budget)
        if written is None:
            self._skip(context)
            return None
        stored, size = written
        state.bytes += size
        self._count("parts_written")
        self._count("rows_kept", stored.rows)
        self._count("rows_dropped_by_bytes", context.stored.rows - stored.rows)
        self._count("bytes_written", size)
        return path

    def _count(self, name: str, amount: int = 1) -> None:
        self._counts[name] += amount

    def _skip(self, context: _PartContext) -> None:
        """Drop a whole call that does not fit the step's byte bound; count it."""
        self._count("parts_skipped")
        self._count("rows_dropped_by_bytes", context.stored.rows)


@dataclass
class _PartContext:
    """One call of ``write``: what identifies it and the rows kept by sampling."""

    writer: CaptureWriter
    step: int
    part: int
    inputs: Inputs
    stored: Part

    @property
    def source(self) -> str:
        """The part's name in reports and messages (the file it would be, less suffix)."""
        path = part_path(self.writer.directory, self.step, self.writer.rank, self.part)
        return str(path.with_suffix(""))

    def payload(self, part: Part) -> dict[str, Any]:
        """What torch.save writes: the columns, then the metadata as 0-d tensors (a
        plain dict of tensors and str lists, so torch.load(weights_only=True) reads it)."""
        metadata: dict[str, int | float] = {
            "version": FORMAT_VERSION,
            "step": self.step,
            "rank": self.writer.rank,
            "part": self.part,
            "seed": self.writer.seed,
            "sample_fraction": self.writer.sample_fraction,
            "rows_total": self.inputs.rows,
            "rows_sampled": self.stored.rows,
            "rows_kept": part.rows,
        }
        if self.inputs.group is not None:
            metadata["groups_total"] = int(np.unique(self.inputs.units).size)
            metadata["groups_sampled"] = int(np.unique(self.stored.units).size)
            metadata["groups_kept"] = int(np.unique(part.units).size)
        payload: dict[str, Any] = dict(part.columns)
        for key, value in metadata.items():
            dtype = torch.float64 if isinstance(value, float) else torch.int64
            payload[METADATA_PREFIX + key] = torch.tensor(value, dtype=dtype)
        if self.writer.trainer_settings is not None:
            payload[SETTINGS_KEY] = self.writer.trainer_settings.to_json()
        return payload


def _save(payload: dict[str, Any], path: Path, budget: int | None) -> int:
    """torch.save ``payload`` to ``path`` atomically and return the file's size.

    Raises:
        _OverBudget: the file would be larger than ``budget`` (nothing is left behind).
    """
    with atomic_path(path) as tmp:
        # a file object, not a path: torch names the archive's records after a path's
        # stem, which for a temporary file is random, so equal inputs would not give
        # byte-identical files
        with tmp.open("wb") as handle:
            torch.save(payload, handle)
        size = tmp.stat().st_size
        if budget is not None and size > budget:
            raise _OverBudget
    return size


def _write_within(
    context: _PartContext, units: np.ndarray, path: Path, budget: int | None
) -> tuple[Part, int] | None:
    """Write the part, or the largest prefix of its units that fits ``budget`` bytes.

    Returns:
        (the rows written, the file's size), or None when not even one unit fits.
    """
    stored = context.stored
    if budget is None:
        return stored, _save(context.payload(stored), path, None)
    if budget <= 0:
        return None
    # the tensors' bytes are a lower bound on the file's: past it, no need to try
    if _data_bytes(stored) <= budget:
        try:
            return stored, _save(context.payload(stored), path, budget)
        except _OverBudget:
            pass
    fitted = _fit(context, units, budget)
    if fitted is None:
        return None
    try:
        return fitted, _save(context.payload(fitted), path, budget)
    except _OverBudget:  # only if torch.save wrote other bytes than it counted
        return None


def _data_bytes(part: Part) -> int:
    """Bytes of the part's tensors: a lower bound on the size of its file."""
    return sum(value.nbytes for value in part.columns.values() if isinstance(value, Tensor))


def _encoded_size(payload: dict[str, Any]) -> int:
    counter = _ByteCounter()
    # torch.save needs only write and flush, but its annotation asks for a full IO[bytes]
    torch.save(payload, counter)  # type: ignore[arg-type]
    return counter.size


def _fit(context: _PartContext, units: np.ndarray, budget: int) -> Part | None:
    """The largest prefix of ``units`` (in priority order) whose file fits ``budget``.

    All kept units are known not to fit. File size grows with the number of rows, so a
    bisection over the prefix length finds the largest one that fits in a logarithmic
    number of (in-memory, counted) serialisations.
    """

    def fits(count: int) -> Part | None:
        part = context.stored.select(units[:count])
        return part if _encoded_size(context.payload(part)) <= budget else None

    best = fits(1)
    if best is None:
        return None
    low, high = 1, len(units)  # low fits, high does not
    while high - low > 1:
        middle = (low + high) // 2
        candidate = fits(middle)
        if candidate is None:
            high = middle
        else:
            low, best = middle, candidate
    return best


# ------------------------------------------------------------------------- validation
def _non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {number}")
    return number


def _is_finite_real(value: Any) -> bool:
    # a bool, not an isinstance narrowing: typeshed's numbers.Real supports neither int()
    # nor comparison with an int, and the bounds below compare the exact value
    return not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)


def _fraction(value: Any) -> float:
    if not _is_finite_real(value) or not 0 < value <= 1:
        raise ValueError(f"sample_fraction must be in (0, 1], got {value!r}")
    return float(value)


def _byte_bound(value: Any, mode: str) -> int | None:
    if value is None:
        return None
    if mode != "tensors":
        raise ValueError("max_bytes_per_step bounds part files, which only mode 'tensors' writes")
    if not _is_finite_real(value) or value < 1:
        raise ValueError(f"max_bytes_per_step must be a positive number of bytes, got {value!r}")
    return int(value)


def _analysis_options(options: dict[str, Any] | None, mode: str) -> dict[str, Any]:
    """Check ``analysis_options`` now, not at the first ``write`` inside a training loop."""
    if options is None:
        return {}
    if mode != "report":
        raise ValueError("analysis_options are used by mode 'report' only")
    from ratioscope.data.params import AnalysisParams
    from ratioscope.errors import UsageError
    from ratioscope.sections.registry import section_classes

    parameter_names = {f.name for f in fields(AnalysisParams)}
    unknown = sorted(set(options) - parameter_names - set(ANALYZE_KEYWORDS))
    if unknown:
        raise ValueError(
            f"unknown analysis option(s) {', '.join(unknown)}; use AnalysisParams fields "
            f"or {', '.join(ANALYZE_KEYWORDS)}"
        )
    values = {k: v for k, v in options.items() if k in parameter_names}
    base = options.get("params") or AnalysisParams()
    try:
        AnalysisParams.from_dict({**base.to_dict(), **values})
    except UsageError as error:
        raise ValueError(str(error)) from None
    if options.get("nonfinite", "error") not in ("error", "mask"):
        raise ValueError(f"nonfinite must be 'error' or 'mask', got {options['nonfinite']!r}")
    known_sections = [cls.name for cls in section_classes()]
    wrong = [s for s in options.get("sections") or () if s not in known_sections]
    if wrong:
        raise ValueError(
            f"unknown section(s) {', '.join(wrong)}; choose from {', '.join(known_sections)}"
        )
    return dict(options)
