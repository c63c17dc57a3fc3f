"""``ratioscope watch``: follow a run while it trains (docs/watch.md)."""

from __future__ import annotations

import signal
import threading
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ratioscope import defaults
from ratioscope.cli._cache import (
    CACHE_MAX_BYTES_DEFAULT,
    CacheDir,
    CacheMaxBytes,
    NoCache,
    cache_of,
)
from ratioscope.cli._options import (
    CHUNK_ELEMENTS_DEFAULT,
    CLIP_DEFAULT,
    DEFAULTS,
    DELTA_SWEEP_DEFAULT,
    DEVICE_DEFAULT,
    FORMAT_DEFAULT,
    FPA_LAMBDA_SWEEP_DEFAULT,
    NONFINITE_DEFAULT,
    ON_BAND_DEFAULT,
    SEQ_CLIP_DEFAULT,
    SEQ_ON_BAND_DEFAULT,
    TOKEN_ON_BAND_DEFAULT,
    TRAINER_DEFAULT,
    ChunkElements,
    Clip,
    CovScope,
    Delta,
    DeltaSweep,
    Device,
    DumpCorrectField,
    DumpCorrectThreshold,
    Format,
    FpaLambda,
    FpaLambdaSweep,
    FpaThreshold,
    GroupSize,
    IsThreshold,
    KalmanImpl,
    KalmanQ,
    KalmanV,
    LfrCutoff,
    Mapping,
    MaskPolicy,
    MaxLag,
    MaxLength,
    NonFinite,
    OnBand,
    Quiet,
    SeqClip,
    SeqOnBand,
    Space,
    Temperature,
    ThresholdsFile,
    TokenOnBand,
    TopK,
    TopP,
    Trainer,
    UnsafePickle,
    Window,
)
from ratioscope.cli._path_params import path_option
from ratioscope.cli.timeline import (
    MlflowUri,
    StepFrom,
    TensorBoardDir,
    WandbRun,
    WithObjectives,
)

if TYPE_CHECKING:
    import subprocess

    from ratioscope.judgement.verdict import Verdict
    from ratioscope.render.terminal.watch import WatchState
    from ratioscope.views.timeline import RunFold, Timeline
    from ratioscope.views.trackers import Tracker
    from ratioscope.views.watch import Poll, RunWatch

#: the exit code when the verdict reached the --exit-on level (docs/cli.md)
EXIT_ON_LEVEL = 4


class ExitOn(str, Enum):
    red = "red"
    yellow = "yellow"


WatchPaths = Annotated[
    list[str],
    typer.Argument(
        help="The run: directories (walked again at every look, through symbolic links), "
        "files or globs of dumps, or of the capture's shard reports. A directory may "
        "still be empty.",
        show_default=False,
    ),
]
WatchJson = Annotated[
    Path | None,
    path_option(
        "--json",
        help="The timeline JSON, rewritten atomically after a look that read a step: at "
        "once when the verdict's level changed, else at most so often that writing takes "
        "5 % of the watch's time (a long run's documents are large), and when it stops.",
        rich_help_panel="Output",
    ),
]
WatchHtml = Annotated[
    Path | None,
    path_option(
        "--html",
        help="The run page of the run report (verdict, vitals, charts, step table; the "
        "drill-down is ratioscope report's), rewritten as --json is.",
        rich_help_panel="Output",
    ),
]
OnRed = Annotated[
    str | None,
    typer.Option(
        "--on-red",
        metavar="CMD",
        help="Run CMD once through the shell (sh -c) when the verdict first turns red, with "
        "RATIOSCOPE_STEP, RATIOSCOPE_FINDINGS, RATIOSCOPE_KEYS, RATIOSCOPE_RUN and "
        "RATIOSCOPE_JSON set (docs/watch.md).",
        rich_help_panel="Run",
    ),
]
ExitOnLevel = Annotated[
    ExitOn | None,
    typer.Option(
        "--exit-on",
        help=f"Stop with exit code {EXIT_ON_LEVEL} once the verdict reaches this level "
        "(after writing the outputs).",
        rich_help_panel="Run",
    ),
]
Once = Annotated[
    bool,
    typer.Option(
        "--once",
        help="Look once: fold what is new (the rest comes from the cache), write the "
        "outputs and exit (for cron).",
        rich_help_panel="Run",
    ),
]
Interval = Annotated[
    float,
    typer.Option(
        "--interval",
        min=0.05,
        metavar="SECONDS",
        help="Seconds between two looks at the run.",
        rich_help_panel="Run",
    ),
]
Settle = Annotated[
    float,
    typer.Option(
        "--settle",
        min=0.0,
        metavar="SECONDS",
        help="Seconds a file must go unwritten (and keep its size) before it is read.",
        rich_help_panel="Run",
    ),
]


def watch(
    ctx: typer.Context,
    paths: WatchPaths,
    json_out: WatchJson = None,
    html_out: WatchHtml = None,
    on_red: OnRed = None,
    exit_on: ExitOnLevel = None,
    once: Once = False,
    interval: Interval = defaults.WATCH_INTERVAL,
    settle: Settle = defaults.WATCH_SETTLE,
    step_from: StepFrom = None,
    objectives: WithObjectives = False,
    thresholds: ThresholdsFile = None,
    tensorboard: TensorBoardDir = None,
    mlflow: MlflowUri = None,
    wandb: WandbRun = False,
    cache_dir: CacheDir = None,
    no_cache: NoCache = False,
    cache_max_bytes: CacheMaxBytes = CACHE_MAX_BYTES_DEFAULT,
    device: Device = DEVICE_DEFAULT,
    format: Format = FORMAT_DEFAULT,
    mapping: Mapping = None,
    nonfinite: NonFinite = NONFINITE_DEFAULT,
    unsafe_pickle: UnsafePickle = False,
    group_size: GroupSize = None,
    correct_field: DumpCorrectField = None,
    correct_threshold: DumpCorrectThreshold = None,
    trainer: Trainer = TRAINER_DEFAULT,
    clip: Clip = CLIP_DEFAULT,
    seq_clip: SeqClip = SEQ_CLIP_DEFAULT,
    is_threshold: IsThreshold = DEFAULTS.is_threshold,
    on_band: OnBand = ON_BAND_DEFAULT,
    token_on_band: TokenOnBand = TOKEN_ON_BAND_DEFAULT,
    seq_on_band: SeqOnBand = SEQ_ON_BAND_DEFAULT,
    window: Window = DEFAULTS.window,
    lfr_cutoff: LfrCutoff = DEFAULTS.lfr_cutoff,
    space: Space = DEFAULTS.space,
    kalman_q: KalmanQ = DEFAULTS.kalman_q,
    kalman_v: KalmanV = DEFAULTS.kalman_v,
    mask_policy: MaskPolicy = DEFAULTS.mask_policy,
    kalman_impl: KalmanImpl = DEFAULTS.kalman_impl,
    cov_scope: CovScope = DEFAULTS.cov_scope,
    fpa_lambda: FpaLambda = DEFAULTS.fpa_lambda,
    fpa_lambda_sweep: FpaLambdaSweep = FPA_LAMBDA_SWEEP_DEFAULT,
    fpa_threshold: FpaThreshold = DEFAULTS.fpa_threshold,
    delta: Delta = DEFAULTS.delta,
    delta_sweep: DeltaSweep = DELTA_SWEEP_DEFAULT,
    max_length: MaxLength = None,
    max_lag: MaxLag = None,
    temperature: Temperature = None,
    top_p: TopP = None,
    top_k: TopK = None,
    chunk_elements: ChunkElements = CHUNK_ELEMENTS_DEFAULT,
    quiet: Quiet = False,
) -> None:
    """Follow a run while it trains: judge each step once its files are written.

    Each step is analysed when its files have stopped changing (--settle), folded into
    the run's timeline with its verdict (the one of ratioscope timeline, from the steps
    so far), and shown: a live view on a terminal, one line a step otherwise. --json
    and --html are rewritten atomically after a look that added a step (on a long run
    at most so often that writing them takes 5 % of the watch's time); the
    trackers get each step's numbers and its level (ratioscope/verdict.level: 0 green,
    1 yellow, 2 red). Steps come from the step cache where they were analysed before,
    so a watch started again resumes at once. Ctrl-C stops it (exit 130; SIGTERM 143).

    Example: ratioscope watch runs/exp1/capture --json exp1.json --html exp1.html

    Example: ratioscope watch dumps/ --on-red 'notify-send "run red at $RATIOSCOPE_STEP"'

    Example: ratioscope watch dumps/ --exit-on red --settle 5 || scancel "$SLURM_JOB_ID"

    Example: ratioscope watch dumps/ --once --json status.json   # from cron
    """
    from ratioscope.cli._common import (
        check_html_path,
        check_output_paths,
        check_suffix,
    )
    from ratioscope.cli._options import (
        command_analysis_params,
        command_load_options,
        given_analysis_params,
    )
    from ratioscope.io.loaders import expand_paths
    from ratioscope.judgement.verdict import load_thresholds
    from ratioscope.views.trackers import open_trackers, require_trackers
    from ratioscope.views.watch import RunWatch

    require_trackers(tensorboard=tensorboard is not None, mlflow=mlflow is not None, wandb=wandb)
    cache = cache_of(cache_dir, no_cache, cache_max_bytes)
    check_suffix(json_out, ".json", "--json")
    if html_out is not None:
        check_html_path(html_out, "--html")
    inputs = [
        *expand_paths(paths, allow_empty=True, shard_reports=True),
        *([thresholds] if thresholds else []),
    ]
    check_output_paths(inputs, [json_out, html_out])
    from ratioscope.io.paths import refuse_file_as_folder

    refuse_file_as_folder(tensorboard, "--tensorboard")  # before any work
    limits = None if thresholds is None else load_thresholds(thresholds)
    run = RunWatch(
        paths,
        params=command_analysis_params(ctx),
        load_options=command_load_options(ctx),
        fixed_params=given_analysis_params(ctx),
        device=device,
        chunk_elements=chunk_elements,
        step_from=step_from,
        thresholds=limits,
        objectives=objectives,
        cache=cache,
        settle=settle,
        # each look makes only the pooled report the verdict reads; --json and --html
        # ask for its outline (params, warnings, vitals: what they write) when they write
        whole=False,
    )
    trackers = open_trackers(tensorboard=tensorboard, mlflow=mlflow, wandb=wandb)
    session = _Session(run, " ".join(paths), json_out, html_out, trackers, on_red, exit_on, quiet)
    code = session.follow(interval, once)
    if code:
        raise typer.Exit(code)


def _nothing_read(poll: Poll, run: str) -> str:
    """Why a look read no step, for ``--once`` (a cron job's log line; exit 0: a run that
    has not written its first step is not an error)."""
    if poll.waiting:
        return (
            f"no step read yet: {poll.waiting} step{'s' if poll.waiting > 1 else ''} still "
            "being written (a file is read once it is unchanged for --settle seconds)"
        )
    if poll.skipped:
        return "no step read: every step found was skipped"
    return f"no step read yet: {run} holds no dump file"


class _Session:
    """One watch: the looks, what is shown and written after each, and how it ends."""

    def __init__(
        self,
        run: RunWatch,
        name: str,
        json_out: Path | None,
        html_out: Path | None,
        trackers: list[Tracker],
        on_red: str | None,
        exit_on: ExitOn | None,
        quiet: bool,
    ) -> None:
        import sys

        from ratioscope.render.terminal.watch import WatchState
        from ratioscope.views.watch import WriteSchedule

        self.run = run
        self.json_out, self.html_out = json_out, html_out
        self.trackers = trackers
        self.on_red, self.exit_on = on_red, exit_on
        self.quiet = quiet
        self.live = sys.stdout.isatty() and not quiet
        self.state: WatchState = WatchState(run=name)
        self.logged: int | None = None  # the last step given to the trackers
        self.hook: subprocess.Popen[bytes] | None = None
        self.stop = threading.Event()
        self.signal: int | None = None
        self.verdict: Verdict | None = None  # the run's verdict after the latest look
        self.writes = json_out is not None or html_out is not None
        #: when the documents are rewritten: at most a twentieth of the watch's time
        self.schedule = WriteSchedule()

    def follow(self, interval: float, once: bool) -> int:
        """Look until stopped; the exit code."""
        from ratioscope.cli._common import stdout_console

        console = stdout_console()
        previous = self._catch_signals()
        try:
            if self.live:
                from rich.live import Live

                from ratioscope.render.terminal.watch import live_view

                with Live(live_view(self.state), console=console, auto_refresh=False) as live:
                    return self._loop(
                        interval, once, lambda: live.update(live_view(self.state), refresh=True)
                    )
            return self._loop(interval, once, lambda: None)
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            for tracker in self.trackers:
                tracker.close()

    def _loop(self, interval: float, once: bool, refresh: Any) -> int:
        from ratioscope.views.watch import finish_hook

        while True:
            self.state.status = "looking at the run"
            refresh()
            poll = self.run.poll(
                self._progress(refresh), self._on_step(refresh), stop=self.stop.is_set
            )
            self._after(poll)
            code = self._level_reached()
            if code or once or self.stop.is_set():
                if once and not self.state.analysed:
                    self._event(_nothing_read(poll, self.state.run))
                break
            self.state.status = f"watching: next look in {interval:g} s; Ctrl-C stops"
            refresh()
            if self.stop.wait(interval):
                break
        self._write_held_back()
        if self.signal is not None:
            self._event(f"stopped ({'Ctrl-C' if self.signal == signal.SIGINT else 'SIGTERM'})")
            code = 128 + self.signal
        self.state.status = f"stopped after {self.state.analysed} steps"
        refresh()
        finish_hook(self.hook)
        return code

    def _progress(self, refresh: Any) -> Any:
        def callback(update: Any) -> None:
            if update.task == "steps" and update.completed < update.total:
                self.state.status = (
                    f"reading {update.description} ({update.completed + 1} of {update.total})"
                )
                refresh()

        return callback

    def _on_step(self, refresh: Any) -> Any:
        from ratioscope.render.terminal.watch import WINDOW, step_line

        def callback(fold: RunFold) -> None:
            self.state.steps = fold.recent(WINDOW)
            self.state.verdict = fold.judging.verdict()
            self.state.analysed = len(fold.rows)
            self.state.labels = {h.key: h.short for h in fold.followed}
            if self.live:
                refresh()
            elif not self.quiet:
                from ratioscope.cli._common import stdout_console

                line = step_line(self.state.steps[-1], self.state.labels)
                stdout_console().print(line, soft_wrap=True)  # one line a step, for grep

        return callback

    def _after(self, poll: Poll) -> None:
        """Show what the look did; write the outputs, feed the trackers, run --on-red."""
        from ratioscope.cli._options import PARAMETER_OPTIONS
        from ratioscope.errors import naming_options

        # the library's sentences name its parameters (`step_from`): here, the options
        for note in poll.notes:
            self._event(naming_options(note, PARAMETER_OPTIONS))
        for skipped in poll.skipped:
            problem = naming_options(skipped.problem, PARAMETER_OPTIONS)
            self._event(f"step {skipped.step} skipped: {problem}")
        if poll.refolded:
            self._event("a step changed after it was read: the run was folded again")
        self.state.waiting, self.state.lag = poll.waiting, poll.lag or self.state.lag
        from ratioscope.views.watch import reached

        added = bool(poll.added or poll.refolded)
        if added:
            self.verdict = self.run.verdict()
            self.schedule.added()
        # a look with no new step still writes what an earlier one held back, once due
        writes = self.writes and self.schedule.due(self._level())
        red = reached(self.verdict, "red") is not None
        alarm = added and self.on_red is not None and self.hook is None and red
        if not (writes or (added and self.trackers) or alarm):
            return  # the verdict is all a look needs: the timeline grows with the run
        # the documents write the pooled report's params, warnings and vitals only
        result = self.run.timeline(whole=False, state=False, outline=writes)
        if result is None:
            return
        if writes:
            self._write(result)
        if added:
            self._track(result)
            self._alarm(result)

    def _level(self) -> str | None:
        return None if self.verdict is None else self.verdict.level

    def _write(self, result: Timeline) -> None:
        """Write the documents, and tell the schedule how long that took."""
        started = self.schedule.clock()
        if self.json_out is not None:
            result.write_json(self.json_out)
        if self.html_out is not None:
            from ratioscope.render.html.run_report import watch_report

            watch_report(result).write_html(self.html_out)
        self.schedule.wrote(self._level(), self.schedule.clock() - started)

    def _write_held_back(self) -> None:
        """The watch stops: write what the schedule held back."""
        if not (self.writes and self.schedule.pending):
            return
        result = self.run.timeline(whole=False, state=False, outline=True)
        if result is not None:
            self._write(result)

    def _track(self, result: Timeline) -> None:
        from ratioscope.views.trackers import timeline_metrics
        from ratioscope.views.watch import LEVEL_METRIC, level_metric

        if not self.trackers:
            return
        levels = level_metric(result)
        # the steps given before are left out (a run folded again keeps its steps)
        for step, metrics in timeline_metrics(result, after=self.logged):
            if step in levels:
                metrics[LEVEL_METRIC] = levels[step]
            for tracker in self.trackers:
                tracker.log(step, metrics)
            self.logged = step
        for tracker in self.trackers:
            flush = getattr(tracker, "flush", None)
            if flush is not None:
                flush()

    def _alarm(self, result: Timeline) -> None:
        from ratioscope.views.watch import reached, red_hook_environment, start_hook

        if self.on_red is None or self.hook is not None or reached(result, "red") is None:
            return
        environment = red_hook_environment(result, self.run.paths, self.json_out)
        self.hook = start_hook(self.on_red, environment)
        self._event(
            f"--on-red ran: the verdict turned red at step {environment['RATIOSCOPE_STEP']}"
        )

    def _level_reached(self) -> int:
        from ratioscope.views.watch import reached

        if self.exit_on is None:
            return 0
        step = reached(self.verdict, self.exit_on.value)
        if step is None:
            return 0
        self._event(
            f"the verdict was {self.exit_on.value} or worse at step {step}: stopping (--exit-on)"
        )
        return EXIT_ON_LEVEL

    def _event(self, text: str) -> None:
        self.state.events.append(text)
        if not self.live and not self.quiet:
            import typer as _typer

            _typer.echo(f"watch: {text}", err=True)

    def _catch_signals(self) -> dict[int, Any]:
        """Ctrl-C and SIGTERM end the watch after the step being read (a second one
        ends it at once, removing the outputs being written)."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}

        def stop(number: int, frame: Any) -> None:
            if self.stop.is_set():
                handler = previous.get(number)
                if callable(handler):
                    handler(number, frame)
                raise KeyboardInterrupt
            self.signal = number
            self.stop.set()

        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, stop)
        return previous
