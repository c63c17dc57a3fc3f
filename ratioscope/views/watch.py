"""Following a run while it trains (``ratioscope watch``; docs/watch.md).

:class:`RunWatch` looks at a run's paths again and again (:meth:`RunWatch.poll`) and
folds each step into the run's timeline once its files are complete, and only then:

- a file is *settled* when it has not been written for ``settle`` seconds (its
  modification time) and its size and time are those of the previous look; a step is
  ready when every file of it is settled. The capture writes atomically (a hidden
  temporary file, then a rename), other writers append to the file itself: both settle;
  a hidden file is never read.
- steps are folded in step order, each once (:class:`~ratioscope.views.timeline.RunFold`,
  the same fold as :func:`~ratioscope.views.timeline.timeline`, so the timeline after
  any step is the timeline of the steps so far); a step waits for every step before it;
- a step whose files do not read (a writer killed mid-step leaves a truncated file) is
  skipped with one sentence naming the file, and read again when its files change;
- a step that changes after it was folded (a late rank, a rewritten file), or that
  arrives before a folded one, makes the run be folded again from its first step: the
  step cache (:class:`~ratioscope.analysis.cache.StepCache`) makes that cheap, and makes
  a watch started again resume where the last one stopped. A folded step whose files
  are removed later (runs that keep only their latest dumps) stays.

:func:`red_hook_environment` and :func:`start_hook` are what ``--on-red`` runs;
:func:`level_metric` is the verdict's level as a tracker number.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ratioscope import defaults
from ratioscope.analysis.steps import StepFiles
from ratioscope.functional.changepoint import ChangeRule
from ratioscope.progress import ProgressCallback, ProgressUpdate, report

if TYPE_CHECKING:
    from ratioscope.analysis.cache import StepCache
    from ratioscope.data.params import AnalysisParams
    from ratioscope.io.loaders import LoadOptions
    from ratioscope.judgement.verdict import Thresholds, Verdict
    from ratioscope.views.step_analysis import StepAnalysis
    from ratioscope.views.timeline import RunFold, Timeline

#: seconds between two looks at the run
DEFAULT_INTERVAL = defaults.WATCH_INTERVAL
#: seconds a file must go unwritten before it is read
DEFAULT_SETTLE = defaults.WATCH_SETTLE
#: the verdict's levels as tracker numbers (``ratioscope/verdict.level``)
LEVEL_NUMBERS = {"green": 0.0, "yellow": 1.0, "red": 2.0}
#: the tracker name of the verdict's level after each step
LEVEL_METRIC = "ratioscope/verdict.level"
#: with ``whole=False`` and a cache, the whole pooled report is made (and kept in the
#: cache) once in this many steps: a watch started again merges at most this many steps
#: beyond the kept one, where making it after every step cost a fifth of a step's CPU
KEEP_WHOLE_EVERY = 16
#: the share of a watch's time that rewriting its documents may take (:class:`WriteSchedule`)
WRITE_SHARE = 0.05


class FileSeen(NamedTuple):
    """A file as one look saw it (a tuple: a look compares thousands of them)."""

    size: int
    mtime_ns: int


#: a step's files as seen: (path, size, modification time) of each
Signature = tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class SkippedStep:
    """A ready step that could not be read, and why (one sentence naming the file)."""

    step: int
    problem: str


@dataclass(frozen=True)
class Poll:
    """What one look at the run did.

    Attributes:
        added: the steps folded in by this look, in order.
        refolded: the run was folded again from its first step (a step changed after it
            was folded, or arrived before one).
        skipped: the steps this look could not read.
        waiting: steps whose files are being written (or that wait for such a step).
        lag: seconds from the last write of the last step added to its verdict (None: no
            step added).
        notes: what the look noticed besides (a file without a step, told once).
    """

    added: tuple[int, ...] = ()
    refolded: bool = False
    skipped: tuple[SkippedStep, ...] = ()
    waiting: int = 0
    lag: float | None = None
    notes: tuple[str, ...] = ()


@dataclass
class _Folded:
    """The steps folded so far and the fold itself."""

    fold: RunFold
    analysis: StepAnalysis
    steps: list[tuple[int, Signature]] = field(default_factory=list)
    #: steps folded since the pooled report was last made whole
    since_whole: int = 0


class RunWatch:
    """A run followed step by step (see the module).

    Args:
        paths: the run: directories (walked, through symbolic links), files or globs, in
            any layout :func:`~ratioscope.views.timeline.timeline` reads; dumps or the
            capture's shard reports, not both. A directory may still be empty.
        params, load_options, device, chunk_elements, sections, step_from, change,
            thresholds, objectives, fixed_params, cache: as for
            :func:`~ratioscope.views.timeline.timeline`.
        settle: seconds a file must go unwritten before it is read.
        clock: the time now, in seconds (tests pass their own).
        whole: False (the default, as the command): after each look only the brief
            pooled report the verdict reads, the whole one when :meth:`timeline` asks
            for it (``--json``/``--html`` ask for its outline,
            ``timeline(whole=False, outline=True)``), and, with a cache, every
            :data:`KEEP_WHOLE_EVERY` steps (kept there for a watch started again);
            True: the whole pooled report of the run, with its state, after each look
            (kept in the cache after each look; about a quarter of a small step's CPU).

    Raises:
        UnreadablePathError: a path that does not exist; ParameterError: a bad
            ``step_from``.
    """

    def __init__(
        self,
        paths: str | Path | Sequence[str | Path],
        *,
        params: AnalysisParams | None = None,
        load_options: LoadOptions | None = None,
        device: str = defaults.DEVICE,
        chunk_elements: int | None = None,
        sections: Sequence[str] | None = None,
        step_from: str | None = None,
        change: ChangeRule | None = None,
        thresholds: Thresholds | None = None,
        objectives: bool = False,
        fixed_params: Collection[str] = (),
        cache: StepCache | None = None,
        settle: float = DEFAULT_SETTLE,
        clock: Callable[[], float] = time.time,
        whole: bool = False,
    ) -> None:
        from ratioscope.analysis.pipeline import _split_options
        from ratioscope.analysis.steps import compile_step_from
        from ratioscope.errors import ParameterError
        from ratioscope.io.loaders import RepeatedListing, expand_paths

        if settle < 0:
            raise ParameterError("settle", f"must be >= 0 seconds, got {settle}")
        self.paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        expand_paths(self.paths, allow_empty=True)  # a path that does not exist fails now
        self.listing = RepeatedListing(self.paths, shard_reports=True, found=False)
        #: whether each file seen is a report (JSON), not a dump
        self.report_files: dict[Path, bool] = {}
        self.step_from = step_from
        self.pattern = compile_step_from(step_from)
        self.params, self.load_options = _split_options(params, load_options, {})
        self.device = device
        self.chunk_elements = chunk_elements
        self.sections = sections
        self.change = change or ChangeRule()
        self.thresholds = thresholds
        self.objectives = objectives
        self.fixed_params = tuple(fixed_params)
        self.cache = cache
        self.settle = settle
        self.clock = clock
        self.whole = whole
        self.seen: dict[Path, FileSeen] = {}
        #: each file's step, once known (None: it has none; told once)
        self.file_steps: dict[Path, int | None] = {}
        self.skipped: dict[int, tuple[Signature, str]] = {}
        self.notes: list[str] = []
        self.folded: _Folded | None = None
        self.reports: bool | None = None
        #: whether the fold keeps and reads the pooled verdicts in the cache
        self.chained = True

    @property
    def steps(self) -> list[int]:
        """The steps folded so far."""
        return [] if self.folded is None else [step for step, _ in self.folded.steps]

    def timeline(
        self, whole: bool = True, state: bool = True, outline: bool = False
    ) -> Timeline | None:
        """The timeline of the steps folded so far (None before the first); ``whole``:
        with the pooled report of every step, ``state``: with the sections' state,
        ``outline``: with its params, warnings and vitals only (:meth:`RunFold.timeline`)."""
        if self.folded is None or not self.folded.steps:
            return None
        skipped = tuple(
            f"step {step} was skipped: {problem}"
            for step, (_, problem) in sorted(self.skipped.items())
        )
        warnings = (*self.notes, *skipped)
        return self.folded.fold.timeline(
            step_from=self.step_from, warnings=warnings, whole=whole, state=state, outline=outline
        )

    def verdict(self) -> Verdict | None:
        """The run's verdict after the steps folded so far (None before the first): the
        timeline's, without building it."""
        if self.folded is None or not self.folded.steps:
            return None
        return self.folded.fold.judging.verdict()

    def poll(
        self,
        progress: ProgressCallback | None = None,
        on_step: Callable[[RunFold], None] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Poll:
        """Look at the run once and fold every step that became ready, in order.

        Args:
            progress: receives a "steps" update before each step is read, and what
                :func:`ratioscope.analyze` reports while it is analysed.
            on_step: called with the fold after each step is folded in (its
                :meth:`~ratioscope.views.timeline.RunFold.recent` steps, its verdict).
            stop: asked before each step; True leaves the rest for the next look.

        Raises:
            UsageError: the run holds dumps and shard reports both.
        """
        now = self.clock()
        current = self._look()
        ready = {
            path
            for path, seen in current.items()
            if now - seen.mtime_ns / 1e9 >= self.settle and self.seen.get(path, seen) == seen
        }
        self.seen = current
        notes: list[str] = []
        by_step: dict[int, list[Path]] = {}
        steps_of = self.file_steps
        for path in current:
            step = steps_of[path] if path in steps_of else self._step_of(path, path in ready, notes)
            if step is not None:
                by_step.setdefault(step, []).append(path)
        desired: list[StepFiles] = []
        signatures: dict[int, Signature] = {}
        waiting = 0
        for step in sorted(by_step):
            files = by_step[step]
            if waiting or not all(path in ready for path in files):
                waiting += 1  # this step, or one before it, is being written
                continue
            signature = tuple((str(p), *current[p]) for p in files)
            known = self.skipped.get(step)
            if known is not None and known[0] == signature:
                continue
            signatures[step] = signature
            desired.append(StepFiles(step=step, paths=tuple(files), source="name"))
        added, skipped, refolded, lag = self._fold(
            desired, signatures, current, progress, on_step, stop
        )
        return Poll(tuple(added), refolded, tuple(skipped), waiting, lag, tuple(notes))

    def _look(self) -> dict[Path, FileSeen]:
        """The run's files now (hidden files, a writer's temporaries, left out)."""
        from ratioscope.errors import UsageError
        from ratioscope.io.paths import is_report_path

        current = {
            path: FileSeen(status.st_size, status.st_mtime_ns)
            for path, status in self.listing.look()
        }
        known = self.report_files
        reports = {p: known[p] if p in known else is_report_path(p) for p in current}
        self.report_files = reports  # files gone since are forgotten
        kinds = set(reports.values())
        if len(kinds) > 1:
            raise UsageError("the run holds dumps and analyze report JSON files: watch one kind")
        if kinds:
            self.reports = kinds.pop()
        return current

    def _step_of(self, path: Path, ready: bool, notes: list[str]) -> int | None:
        """A file's step: from ``step_from`` or its name at once, from its contents once
        it is settled; None while unknown, or for a file without one (told once)."""
        from ratioscope.analysis.steps import step_from_name, step_of
        from ratioscope.errors import InputError, ParameterError
        from ratioscope.views.step_analysis import read_meta

        if path in self.file_steps:
            return self.file_steps[path]
        if self.pattern is None:
            named = step_from_name(path)
            if named is not None:
                self.file_steps[path] = named
                return named
        if not ready and self.pattern is None:
            return None  # read for its step once it is written
        unsafe = self.load_options.unsafe_pickle
        try:
            step, _ = step_of(path, self.pattern, self.step_from, lambda p: read_meta(p, unsafe))
        except (ParameterError, InputError) as error:
            notes.append(f"left out: {error}")
            self.file_steps[path] = None
            return None
        self.file_steps[path] = step
        return step

    def _fold(
        self,
        desired: list[StepFiles],
        signatures: dict[int, Signature],
        current: dict[Path, FileSeen],
        progress: ProgressCallback | None,
        on_step: Callable[[RunFold], None] | None,
        stop: Callable[[], bool] | None,
    ) -> tuple[list[int], list[SkippedStep], bool, float | None]:
        """Fold the new steps of ``desired``; fold the run again when a folded step
        changed or a new one comes before a folded one."""
        from ratioscope.views.pooled_run import ChainBroken

        try:
            return self._fold_ready(desired, signatures, current, progress, on_step, stop)
        except ChainBroken:  # a kept pooled report did not read back: fold without them
            self.chained = False
            self.folded = None
            return self._fold_ready(desired, signatures, current, progress, on_step, stop)

    def _fold_ready(
        self,
        desired: list[StepFiles],
        signatures: dict[int, Signature],
        current: dict[Path, FileSeen],
        progress: ProgressCallback | None,
        on_step: Callable[[RunFold], None] | None,
        stop: Callable[[], bool] | None,
    ) -> tuple[list[int], list[SkippedStep], bool, float | None]:
        folded = self.folded
        refolded = False
        if folded is not None:
            verdict = _compare(folded.steps, desired, signatures, current)
            if verdict == "wait":  # a folded step is being written again
                return [], [], False, None
            if verdict == "refold":
                folded, refolded = None, True
            else:
                done = {step for step, _ in folded.steps}
                desired = [g for g in desired if g.step not in done]
        if not desired:
            if refolded:
                self.folded = None
            return [], [], refolded, None
        if folded is None:
            folded = self._start(desired)
            self.folded = folded
            analysis = folded.analysis
            if not self.reports:
                keys = analysis.keys(desired)
                folded.fold.plan([(keys[g.step], g.paths) for g in desired])
        else:
            self._note_settings(desired, folded)
        added, skipped = [], []
        lag = None
        for index, group in enumerate(desired):
            # steps the cache stands for take milliseconds: stopped after them
            if stop is not None and stop() and not folded.fold.pooling.skipping:
                break
            label = f"step {group.step}"
            report(progress, ProgressUpdate("steps", index, len(desired), label))
            last = index + 1 == len(desired) and self._makes_whole(folded)
            outcome = self._fold_one(folded, group, last, progress)
            if outcome is not None:
                self.skipped[group.step] = (signatures[group.step], outcome)
                skipped.append(SkippedStep(group.step, outcome))
                continue
            self.skipped.pop(group.step, None)
            folded.since_whole = 0 if last else folded.since_whole + 1
            folded.steps.append((group.step, signatures[group.step]))
            added.append(group.step)
            written = max(mtime for _, _, mtime in signatures[group.step]) / 1e9
            lag = max(0.0, self.clock() - written)
            if on_step is not None:
                on_step(folded.fold)
        report(progress, ProgressUpdate("steps", len(desired), len(desired), "done"))
        return added, skipped, refolded, lag

    def _start(self, desired: list[StepFiles]) -> _Folded:
        """A new fold, with the run's trainer settings (those of its first file)."""
        from ratioscope.views.step_analysis import StepAnalysis
        from ratioscope.views.timeline import RunFold, run_settings

        load_options, notes = run_settings(desired, self.load_options, bool(self.reports))
        self.notes = list(notes)
        analysis = StepAnalysis(
            params=self.params, load_options=load_options, device=self.device,
            chunk_elements=self.chunk_elements, sections=self.sections,
            objectives=self.objectives, fixed_params=self.fixed_params, cache=self.cache,
            thresholds=self.thresholds,
        )  # fmt: skip
        fold = RunFold(
            thresholds=self.thresholds, rule=self.change, objectives=self.objectives,
            cache=self.cache if self.chained else None,
        )  # fmt: skip
        return _Folded(fold, analysis)

    def _note_settings(self, desired: list[StepFiles], folded: _Folded) -> None:
        """A warning when a new step's files record other trainer settings."""
        from ratioscope.judgement.settings import differing_settings

        given = self.load_options  # as timeline: settings given, or none asked for
        if self.reports or given.trainer == "none" or given.trainer_settings is not None:
            return
        used = folded.analysis.load_options.trainer_settings
        note = differing_settings([p for g in desired for p in g.paths], used)
        if note and note not in self.notes:
            self.notes.append(note)

    def _makes_whole(self, folded: _Folded) -> bool:
        """Whether the look's last step makes the pooled report whole (see ``whole``)."""
        keeps = self.cache is not None and self.chained
        return self.whole or (keeps and folded.since_whole + 1 >= KEEP_WHOLE_EVERY)

    def _fold_one(
        self, folded: _Folded, group: StepFiles, last: bool, progress: ProgressCallback | None
    ) -> str | None:
        """Fold one step in; the sentence that says why it could not be read, if so."""
        from ratioscope.errors import InputError
        from ratioscope.views.timeline import fold_step

        try:
            result = folded.analysis.step(group, bool(self.reports), progress)
            fold_step(folded.fold, folded.analysis, group, result, last, progress)
        except InputError as error:
            return str(error)
        return None


class WriteSchedule:
    """When a watch rewrites its documents (``--json``, ``--html``): at most so often
    that writing takes ``share`` of the watch's time.

    A document holds every step of the run, so writing it costs more as the run grows
    (about 0.35 ms a step for the two together here: 0.35 s a look at 1,000 steps), while
    a step's analysis does not: rewritten after each look, the documents of a long run
    would cost more than its steps. After a write that took ``w`` seconds the next one
    waits ``w * (1 - share) / share`` seconds (19 w at 5 %), so the documents of a short
    run (a few milliseconds to write) are still rewritten at every look. A write is never
    held back when the verdict's level changed since the last one (an alarm, ``--on-red``
    and a reader of the documents see the step that turned the run yellow or red), and
    what was held back is written at a later look once due, new steps or not, and when
    the watch stops (:meth:`pending`).

    Args:
        share: the share of the watch's time writing may take, in (0, 1].
        clock: the time now, in seconds (a monotonic clock; tests pass their own).
    """

    def __init__(self, share: float = WRITE_SHARE, clock: Callable[[], float] = time.monotonic):
        if not 0.0 < share <= 1.0:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self.share = share
        self.clock = clock
        self.pending = False  # steps folded since the last write
        self.level: str | None = None  # the verdict's level at the last write
        self.due_at = float("-inf")  # the time before which a write waits

    def added(self) -> None:
        """A look folded steps in: the documents are out of date."""
        self.pending = True

    def due(self, level: str | None) -> bool:
        """Whether to write now, the verdict's level being ``level``."""
        if not self.pending:
            return False
        return level != self.level or self.clock() >= self.due_at

    def wrote(self, level: str | None, seconds: float) -> None:
        """The documents were written, at ``level``, in ``seconds``."""
        self.pending = False
        self.level = level
        self.due_at = self.clock() + seconds * (1.0 - self.share) / self.share


class RunMonitor:
    """The run's verdict after each step, from the step reports a training loop makes as
    it trains (the capture's report mode: ``CaptureWriter(stop_on=...)``): the fold of
    :func:`~ratioscope.views.timeline.timeline`, one step at a time, in memory.

    Args:
        thresholds: the verdict's (default :class:`~ratioscope.judgement.verdict.
            Thresholds`).
        stop_on: the level at which the run should stop (``"red"``, ``"yellow"``; None:
            never): :attr:`stop_step` is the first step whose verdict reached it.
    """

    def __init__(self, thresholds: Thresholds | None = None, stop_on: str | None = "red") -> None:
        from ratioscope.judgement.verdict import LEVELS
        from ratioscope.views.timeline import RunFold

        if stop_on is not None and stop_on not in LEVELS[1:]:
            raise ValueError(f"stop_on must be 'red', 'yellow' or None, got {stop_on!r}")
        self.fold = RunFold(thresholds=thresholds)
        self.stop_on = stop_on
        #: the first step whose verdict reached ``stop_on`` (None: none yet)
        self.stop_step: int | None = None

    def add(self, step: int, document: Mapping[str, Any]) -> Verdict:
        """Fold in the report of ``step`` (a mergeable analyze report document, as
        ``CaptureWriter.end_step`` writes); the verdict after it.

        Raises:
            ReportError: not an analyze report; MergeError: not of the run so far.
        """
        from ratioscope.judgement.verdict import LEVELS
        from ratioscope.report.model import Report
        from ratioscope.views.step_analysis import StepResult

        report = Report.from_dict(document)
        self.fold.add(step, (), StepResult(report))
        judged = self.fold.judging.verdict()
        assert judged is not None
        reached = LEVELS.index(judged.level) >= LEVELS.index(self.stop_on or "red")
        if self.stop_on is not None and self.stop_step is None and reached:
            self.stop_step = step
        return judged

    @property
    def verdict(self) -> Verdict | None:
        """The verdict after the latest step."""
        return self.fold.judging.verdict()


def _compare(
    folded: list[tuple[int, Signature]],
    desired: list[StepFiles],
    signatures: dict[int, Signature],
    current: dict[Path, FileSeen],
) -> str:
    """How the ready steps stand to the folded ones: ``"extend"`` (the folded steps are
    unchanged, or gone from disk, and every new step comes after them), ``"wait"`` (a
    folded step is being written again) or ``"refold"`` (a folded step changed, or a
    new one comes before a folded one)."""
    for step, signature in folded:
        if step in signatures:
            if signatures[step] != signature:
                return "refold"
        elif any(Path(path) in current for path, _, _ in signature):
            return "wait"
    if folded:
        done = {step for step, _ in folded}
        last = folded[-1][0]
        if any(g.step < last for g in desired if g.step not in done):
            return "refold"
    return "extend"


def level_metric(result: Timeline) -> dict[int, float]:
    """The verdict's level after each step as a number (green 0, yellow 1, red 2)."""
    return {
        step.step: LEVEL_NUMBERS[step.verdict.level]
        for step in result.steps
        if step.verdict is not None
    }


def red_hook_environment(
    result: Timeline, run: Sequence[str | Path], json_out: str | Path | None = None
) -> dict[str, str]:
    """The variables ``--on-red``'s command gets (besides the process's own):

    ``RATIOSCOPE_STEP`` the step after which the verdict turned red,
    ``RATIOSCOPE_LATEST_STEP`` the latest step folded, ``RATIOSCOPE_LEVEL`` the level
    after the latest step, ``RATIOSCOPE_FINDINGS`` the red findings of the step that
    turned red, one sentence a line, ``RATIOSCOPE_KEYS`` their keys, comma-separated,
    ``RATIOSCOPE_RUN`` the watched paths (separated as ``PATH`` is), ``RATIOSCOPE_JSON``
    the timeline JSON (``--json``; empty without).
    """
    verdict = result.verdict
    first = verdict.first_red if verdict is not None else None
    turned = next((s.verdict for s in result.steps if s.step == first and s.verdict), None)
    red = [f for f in (turned.findings if turned is not None else ()) if f.level == "red"]
    latest = result.steps[-1].step if result.steps else None
    return {
        "RATIOSCOPE_STEP": "" if first is None else str(first),
        "RATIOSCOPE_LATEST_STEP": "" if latest is None else str(latest),
        "RATIOSCOPE_LEVEL": verdict.level if verdict is not None else "",
        "RATIOSCOPE_FINDINGS": "\n".join(f.text for f in red),
        "RATIOSCOPE_KEYS": ",".join(f.key for f in red),
        "RATIOSCOPE_RUN": os.pathsep.join(str(p) for p in run),
        "RATIOSCOPE_JSON": "" if json_out is None else str(json_out),
    }


def reached(result: Timeline | Verdict | None, level: str) -> int | None:
    """The first step after which the verdict (a timeline's, or the verdict itself) was
    ``level`` or worse (None: none)."""
    from ratioscope.views.timeline import Timeline

    verdict = result.verdict if isinstance(result, Timeline) else result
    if verdict is None:
        return None
    return verdict.first_red if level == "red" else verdict.first_yellow


def start_hook(command: str, environment: dict[str, str]) -> subprocess.Popen[bytes]:
    """Run ``command`` through the shell (``sh -c``, as git hooks and cron do), with
    ``environment`` added to the process's own; it runs beside the watch, which does not
    wait for it (:func:`finish_hook` does, at the end)."""
    return subprocess.Popen(["/bin/sh", "-c", command], env={**os.environ, **environment})


def finish_hook(process: subprocess.Popen[bytes] | None, timeout: float = 60.0) -> int | None:
    """Wait for a hook started by :func:`start_hook`; its exit code (None: still running
    after ``timeout`` seconds, left to run)."""
    if process is None:
        return None
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
