"""watch's library: a step is read once its files settle, never while written; the
timeline after each step is the timeline of the steps so far; a truncated step is
skipped and read again when rewritten; a late step folds the run again; a restart
resumes from the cache; the capture's stop rule; symbolic links to step folders."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from timeline_run import comparable, write_step
from typer.testing import CliRunner

import ratioscope
from ratioscope.analysis.cache import StepCache
from ratioscope.cli import app
from ratioscope.render.terminal.watch import sparkline
from ratioscope.views.watch import RunMonitor, RunWatch, red_hook_environment


class Clock:
    """The time a test says it is (seconds)."""

    def __init__(self, now: float = 2_000_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def written(path: Path, seed: int, at: float, noise: float = 0.05) -> Path:
    """A step's dump, last written at ``at``."""
    write_step(path, seed=seed, noise=noise)
    os.utime(path, (at, at))
    return path


def test_a_step_is_read_once_its_files_have_settled(tmp_path):
    clock = Clock()
    watch = RunWatch(tmp_path, settle=5.0, clock=clock)
    assert watch.poll().added == ()  # an empty directory: nothing yet, no error
    written(tmp_path / "step_0" / "rank_0.pt", 0, at=clock.now - 1)
    first = watch.poll()
    assert first.added == () and first.waiting == 1
    clock.now += 5
    assert watch.poll().added == (0,)
    assert watch.steps == [0]


def test_a_file_that_keeps_growing_is_not_read(tmp_path, counted):
    """A writer that appends keeps the file's time old here (as a copy that keeps
    times would): the size that changed between two looks holds the step back."""
    clock = Clock()
    path = written(tmp_path / "step_0" / "rank_0.pt", 0, at=clock.now - 100)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 3])
    os.utime(path, (clock.now - 100, clock.now - 100))
    watch = RunWatch(tmp_path, settle=1.0, clock=clock)
    # the first look cannot tell an old file still appended to from a finished one: it
    # reads it, and skips the step as truncated
    assert watch.poll().skipped[0].step == 0
    path.write_bytes(whole[: 2 * len(whole) // 3])
    os.utime(path, (clock.now - 100, clock.now - 100))
    assert watch.poll().waiting == 1  # grew since the last look: not read
    path.write_bytes(whole)
    os.utime(path, (clock.now - 100, clock.now - 100))
    assert watch.poll().waiting == 1
    assert watch.poll().added == (0,)  # the same size twice: read, and whole
    assert counted == [0, 0]  # the first look's read, and the one of the whole file


def test_the_timeline_after_each_step_is_the_timeline_of_the_steps_so_far(tmp_path):
    clock = Clock()
    (tmp_path / "run").mkdir()
    watch = RunWatch(tmp_path / "run", settle=0.0, clock=clock)
    for step in range(5):
        noise = 0.3 if step >= 3 else 0.05
        written(tmp_path / "run" / f"step_{step}" / "rank_0.pt", step, clock.now - 1, noise)
        assert watch.poll().added == (step,)
        expected = ratioscope.timeline(tmp_path / "run")
        assert comparable(watch.timeline()) == comparable(expected)


def _pooled(result) -> dict:
    document = result.pooled.to_dict()
    document.pop("tool")
    return document


def test_a_watch_that_keeps_the_verdicts_only_makes_the_pooled_report_when_asked(tmp_path):
    """whole=False: after each look only the brief pooled report the verdict reads; the
    whole one (equal to the timeline's) when timeline() asks for it, and none with
    whole=False there."""
    clock = Clock()
    (tmp_path / "run").mkdir()
    watch = RunWatch(tmp_path / "run", settle=0.0, clock=clock, whole=False)
    for step in range(4):
        written(tmp_path / "run" / f"step_{step}" / "rank_0.pt", step, clock.now - 1)
        assert watch.poll().added == (step,)
        assert watch.folded is not None and not watch.folded.fold.pooling.whole
        bare = watch.timeline(whole=False)
        assert bare is not None and bare.pooled is None
        expected = ratioscope.timeline(tmp_path / "run")
        assert comparable(bare)["steps"] == comparable(expected)["steps"]
        # what --json writes: the whole report without the sections' state
        light = watch.timeline(state=False)
        assert light is not None and comparable(light) == comparable(expected)
        without_state = {k: v for k, v in _pooled(expected).items() if k != "state"}
        assert {k: v for k, v in _pooled(light).items() if k != "state"} == without_state
        assert set(light.pooled.state) == {"loader_warnings"}
        # what --json and --html write since: the outline (params, warnings, vitals)
        outline = watch.timeline(whole=False, state=False, outline=True)
        assert outline is not None and comparable(outline) == comparable(expected)
        assert outline.warnings == expected.warnings and expected.warnings
        assert _pooled(outline)["vitals"] == _pooled(expected)["vitals"] is not None
        assert outline.pooled.ratios is None  # the sections it does not write: not made
        found = watch.timeline()
        assert found is not None and _pooled(found) == _pooled(expected)
        assert comparable(found) == comparable(expected)


def test_with_a_cache_the_whole_report_is_kept_every_few_steps(tmp_path, monkeypatch):
    import ratioscope.views.watch as watch_module

    monkeypatch.setattr(watch_module, "KEEP_WHOLE_EVERY", 3)
    clock = Clock()
    (tmp_path / "run").mkdir()
    cache = StepCache(tmp_path / "c")
    watch = RunWatch(tmp_path / "run", settle=0.0, clock=clock, cache=cache, whole=False)
    made = []
    for step in range(7):
        written(tmp_path / "run" / f"step_{step}" / "rank_0.pt", step, clock.now - 1)
        watch.poll()
        assert watch.folded is not None
        made.append(watch.folded.fold.pooling.whole)
    assert made == [False, False, True, False, False, True, False]
    again = RunWatch(tmp_path / "run", settle=0.0, clock=clock, cache=StepCache(tmp_path / "c"))
    assert again.poll().added == tuple(range(7))
    first, second = watch.timeline(), again.timeline()
    assert comparable(second) == comparable(first) and _pooled(second) == _pooled(first)


def test_a_truncated_step_is_skipped_and_read_again_when_rewritten(tmp_path):
    clock = Clock()
    watch = RunWatch(tmp_path, settle=0.0, clock=clock)
    written(tmp_path / "step_0" / "rank_0.pt", 0, clock.now - 1)
    broken = written(tmp_path / "step_1" / "rank_0.pt", 1, clock.now - 1)
    broken.write_bytes(broken.read_bytes()[:500])  # a writer killed mid-file
    written(tmp_path / "step_2" / "rank_0.pt", 2, clock.now - 1)
    poll = watch.poll()
    assert poll.added == (0, 2)
    (skipped,) = poll.skipped
    assert skipped.step == 1 and str(broken) in skipped.problem
    assert "truncated" in skipped.problem or "not a readable" in skipped.problem
    assert any("step 1 was skipped" in w for w in watch.timeline().warnings)
    assert watch.poll().added == ()  # not read again while unchanged
    written(broken, 1, clock.now - 1)
    assert watch.poll().waiting >= 1  # changed since the last look
    again = watch.poll()
    assert again.refolded and again.added == (0, 1, 2)
    assert comparable(watch.timeline()) == comparable(ratioscope.timeline(tmp_path))


def test_a_step_that_arrives_late_folds_the_run_again(tmp_path):
    clock = Clock()
    watch = RunWatch(tmp_path, settle=0.0, clock=clock)
    written(tmp_path / "step_0" / "rank_0.pt", 0, clock.now - 1)
    written(tmp_path / "step_2" / "rank_0.pt", 2, clock.now - 1)
    assert watch.poll().added == (0, 2)
    written(tmp_path / "step_1" / "rank_0.pt", 1, clock.now - 1)
    late = watch.poll()  # first seen, and settled already (its time is old)
    assert late.refolded and watch.steps == [0, 1, 2]
    assert comparable(watch.timeline()) == comparable(ratioscope.timeline(tmp_path))


def test_a_late_rank_of_a_folded_step_folds_it_again(tmp_path):
    clock = Clock()
    watch = RunWatch(tmp_path, settle=0.0, clock=clock)
    written(tmp_path / "step_0" / "rank_0.pt", 0, clock.now - 1)
    written(tmp_path / "step_1" / "rank_0.pt", 1, clock.now - 1)
    watch.poll()
    written(tmp_path / "step_0" / "rank_1.pt", 10, clock.now - 1)
    assert watch.poll().refolded
    result = watch.timeline()
    assert len(result.steps[0].inputs) == 2
    assert comparable(result) == comparable(ratioscope.timeline(tmp_path))


def test_a_folded_step_whose_files_are_removed_stays(tmp_path):
    clock = Clock()
    watch = RunWatch(tmp_path, settle=0.0, clock=clock)
    for step in range(3):
        written(tmp_path / f"step_{step}" / "rank_0.pt", step, clock.now - 1)
    watch.poll()
    before = comparable(watch.timeline())
    (tmp_path / "step_0" / "rank_0.pt").unlink()  # a run that keeps its latest dumps
    written(tmp_path / "step_3" / "rank_0.pt", 3, clock.now - 1)
    poll = watch.poll()
    assert poll.added == (3,) and not poll.refolded
    assert watch.steps == [0, 1, 2, 3]
    assert comparable(watch.timeline())["steps"][:3] == before["steps"]


def test_a_restart_resumes_from_the_cache(tmp_path, counted):
    clock = Clock()
    for step in range(4):
        written(tmp_path / "run" / f"step_{step}" / "rank_0.pt", step, clock.now - 1)
    first = RunWatch(tmp_path / "run", settle=0.0, clock=clock, cache=StepCache(tmp_path / "c"))
    first.poll()
    assert counted == [0, 1, 2, 3]
    again = RunWatch(tmp_path / "run", settle=0.0, clock=clock, cache=StepCache(tmp_path / "c"))
    assert again.poll().added == (0, 1, 2, 3)
    assert counted == [0, 1, 2, 3]  # nothing analysed again
    assert comparable(again.timeline()) == comparable(first.timeline())


def test_hidden_files_are_never_read(tmp_path):
    """The capture (and ratioscope's own outputs) write a hidden temporary file, then
    rename it: a watch that looks in between must not read it."""
    clock = Clock()
    written(tmp_path / "step_0" / "rank_0.pt", 0, clock.now - 1)
    hidden = tmp_path / "step_1" / ".rank_0.pt.123-abc.tmp.pt"
    hidden.parent.mkdir()
    hidden.write_bytes(b"half a file")
    watch = RunWatch(tmp_path, settle=0.0, clock=clock)
    poll = watch.poll()
    assert poll.added == (0,) and poll.skipped == () and poll.notes == ()


def test_shard_reports_of_the_capture_are_watched(tmp_path):
    """The capture's report mode writes step_N/rank_R.json: watched as timeline reads it."""
    clock = Clock()
    dumps = tmp_path / "dumps"
    for step in range(3):
        dump = written(dumps / f"step_{step}.pt", step, clock.now - 1)
        report = tmp_path / "reports" / f"step_{step:06d}" / "rank_00000.json"
        report.parent.mkdir(parents=True)
        ratioscope.analyze(dump).write_json(report)
        os.utime(report, (clock.now - 1, clock.now - 1))
    watch = RunWatch(tmp_path / "reports", settle=0.0, clock=clock)
    assert watch.poll().added == (0, 1, 2)
    expected = ratioscope.timeline(tmp_path / "reports")
    assert comparable(watch.timeline()) == comparable(expected)
    assert [s.values for s in expected.steps] == [
        s.values for s in ratioscope.timeline(dumps).steps
    ]


def test_step_folders_reached_through_symbolic_links_are_followed(tmp_path):
    store = tmp_path / "store"
    for step in range(3):
        written(store / f"step_{step}" / "rank_0.pt", step, 1e9)
    run = tmp_path / "run"
    run.mkdir()
    for step in range(3):
        (run / f"step_{step}").symlink_to(store / f"step_{step}", target_is_directory=True)
    (run / "loop").symlink_to(run, target_is_directory=True)  # a link back: a loop
    (store / "step_0" / "up").symlink_to(tmp_path, target_is_directory=True)
    linked = ratioscope.timeline(run)
    assert [s.step for s in linked.steps] == [0, 1, 2]
    assert [len(s.inputs) for s in linked.steps] == [1, 1, 1]
    assert [s.values for s in linked.steps] == [s.values for s in ratioscope.timeline(store).steps]
    result = CliRunner().invoke(app, ["timeline", str(run), "--no-cache", "--quiet"])
    assert result.exit_code == 0, result.output


def test_the_capture_stops_at_the_step_the_verdict_turns_red(tmp_path):
    """A loop of one's own: CaptureWriter(stop_on="red") calls on_stop once, at the
    first step whose verdict (from the step reports so far) is red, as the timeline of
    the written reports says."""
    from ratioscope.capture import CaptureWriter

    calls = []
    writer = CaptureWriter(
        tmp_path / "reports", mode="report", stop_on="red",
        on_stop=lambda step, verdict: calls.append((step, verdict.level)),
    )  # fmt: skip
    for step in range(8):
        path = write_step(tmp_path / "dumps" / f"step_{step}.pt", step, 0.05 if step < 4 else 0.6)
        columns = torch.load(path, weights_only=True)
        writer.write(step, **columns)
        writer.end_step(step)
        assert writer.should_stop == (writer.stop_step is not None)
        assert "ratioscope/verdict.level" in writer.step_metrics(step)
    writer.close()
    expected = ratioscope.timeline(tmp_path / "reports")
    first_red = expected.verdict.first_red
    assert first_red is not None and first_red >= 1
    assert calls == [(first_red, "red")]
    assert writer.stop_step == first_red
    levels = [writer.step_metrics(s)["ratioscope/verdict.level"] for s in range(8)]
    assert levels == [{"green": 0.0, "yellow": 1.0, "red": 2.0}[v] for v in expected.levels()]


def test_the_stop_rule_needs_step_reports():
    from ratioscope.capture import CaptureWriter

    with pytest.raises(ValueError, match="mode 'report'"):
        CaptureWriter("x", stop_on="red")
    with pytest.raises(ValueError, match="give stop_on"):
        CaptureWriter("x", mode="report", on_stop=print)
    with pytest.raises(ValueError, match="stop_on must be"):
        RunMonitor(stop_on="green")


def test_the_on_red_variables_name_the_step_and_its_red_findings(tmp_path):
    clock = Clock()
    for step in range(6):
        noise = 0.05 if step < 3 else 0.8
        written(tmp_path / f"step_{step}" / "rank_0.pt", step, clock.now - 1, noise)
    result = ratioscope.timeline(tmp_path)
    env = red_hook_environment(result, [tmp_path], tmp_path / "t.json")
    first = result.verdict.first_red
    assert env["RATIOSCOPE_STEP"] == str(first)
    assert env["RATIOSCOPE_LATEST_STEP"] == "5"
    turned = next(s for s in result.steps if s.step == first)
    reds = [f for f in turned.verdict.findings if f.level == "red"]
    assert env["RATIOSCOPE_FINDINGS"].splitlines() == [f.text for f in reds]
    assert env["RATIOSCOPE_KEYS"].split(",") == [f.key for f in reds]
    assert env["RATIOSCOPE_RUN"] == str(tmp_path)


def test_sparkline_heights_follow_the_values():
    assert sparkline([0.0, 1.0, None, 0.5]) == "▁█ ▅"
    assert sparkline([2.0, 2.0]) == "▄▄"
    assert sparkline([None, None]) == "  "


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["watch", "no/such/run"], "no/such/run: no such file or directory"),
        (["watch", ".", "--html", "out.txt"], "name it *.html"),
        (["watch", ".", "--json", "out.txt"], ".json"),
        (["watch", ".", "--cache", "c", "--no-cache"], "contradict"),
        (["watch", ".", "--interval", "0"], "--interval"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, args, expected):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert "Traceback" not in result.output


def test_once_writes_the_timeline_of_what_is_there(tmp_path):
    for step in range(3):
        written(tmp_path / "run" / f"step_{step}" / "rank_0.pt", step, 1e9)
    out = tmp_path / "t.json"
    result = CliRunner().invoke(
        app, ["watch", str(tmp_path / "run"), "--once", "--json", str(out), "--quiet"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    expected = comparable(ratioscope.timeline(tmp_path / "run"))
    document.pop("tool")
    assert document == expected


def test_the_live_view_shows_the_verdict_the_levels_and_the_vitals(tmp_path):
    """The live view of the bundled run after its 30 steps: its bottom line, a square per
    step coloured by its level, a sparkline per vital. Written as docs/images/watch-live.svg
    with RATIOSCOPE_SCREENSHOTS set."""
    from rich.console import Console

    from ratioscope.render.terminal.watch import SQUARE, WINDOW, WatchState, live_view

    run = Path(__file__).resolve().parents[1] / "sample_data" / "runs" / "shaping_hack-s1"
    watch = RunWatch(run / "capture", settle=0.0)
    watch.poll()
    fold = watch.folded.fold
    state = WatchState(
        run="runs/shaping_hack-s1/capture",
        steps=fold.recent(WINDOW),
        labels={h.key: h.short for h in fold.followed},
        verdict=fold.judging.verdict(),
        analysed=len(fold.rows),
        lag=2.4,
        status="watching: next look in 1 s; Ctrl-C stops",
    )
    state.events.append("--on-red ran: the verdict turned red at step 5")
    console = Console(record=True, width=110, force_terminal=True, color_system="truecolor")
    console.print(live_view(state))
    text = console.export_text(clear=False)
    expected = ratioscope.timeline(run / "capture")
    bottom = expected.verdict.bottom_line().removeprefix("healthy: ")
    assert bottom.split(":")[0] in text  # "12 problems"
    # the bottom line wraps at the console's width: its words, in order
    words = " ".join(text.split())
    assert f"first red at step {expected.verdict.first_red}" in words
    (strip,) = [line for line in text.splitlines() if line.startswith("levels")]
    assert strip.count(SQUARE) == len(expected.steps) == 30
    assert "reward" in text and "entropy" in text and "30 steps" in text
    shots = os.environ.get("RATIOSCOPE_SCREENSHOTS")
    if shots:
        Path(shots, "watch-live.svg").write_text(console.export_svg(title="ratioscope watch"))


@pytest.mark.parametrize(
    ("options", "builds"),
    [
        ([], False),  # the verdict is all a look needs
        (["--exit-on", "red"], False),
        (["--json", "t.json"], True),
        (["--on-red", "true"], True),  # the hook's variables read the red step
    ],
)
def test_a_look_builds_the_timeline_only_for_what_needs_it(tmp_path, monkeypatch, options, builds):
    """watch --once on a run that turns red: the timeline (which grows with the run) is
    made after a look only for --json/--html, trackers or --on-red; --exit-on reads the
    verdict the fold keeps, the same as the timeline's."""
    for step in range(6):
        noise = 0.05 if step < 3 else 0.8
        written(tmp_path / "run" / f"step_{step}" / "rank_0.pt", step, 1e9, noise)
    made: list[int] = []
    timeline = RunWatch.timeline

    def counted(self, *args, **kwargs):
        made.append(1)
        return timeline(self, *args, **kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(RunWatch, "timeline", counted)
    result = CliRunner().invoke(app, ["watch", "run", "--once", "--quiet", *options])
    first_red = ratioscope.timeline(tmp_path / "run").verdict.first_red
    assert first_red is not None
    assert result.exit_code == (4 if "--exit-on" in options else 0), result.output
    assert bool(made) is builds


def test_a_watch_gives_the_verdict_its_timeline_gives(tmp_path):
    from ratioscope.views.trackers import timeline_metrics
    from ratioscope.views.watch import reached

    clock = Clock()
    (tmp_path / "run").mkdir()
    watch = RunWatch(tmp_path / "run", settle=0.0, clock=clock)
    assert watch.verdict() is None
    for step in range(6):
        noise = 0.05 if step < 3 else 0.8
        written(tmp_path / "run" / f"step_{step}" / "rank_0.pt", step, clock.now - 1, noise)
        watch.poll()
        result = watch.timeline(whole=False, state=False)
        assert watch.verdict() == result.verdict
        for level in ("red", "yellow"):
            assert reached(watch.verdict(), level) == reached(result, level)
    assert reached(watch.verdict(), "red") is not None
    every = timeline_metrics(result)
    assert timeline_metrics(result, after=2) == [(s, m) for s, m in every if s > 2]
    assert [s for s, _ in every] == list(range(6)) and all(m for _, m in every)


def test_the_write_schedule_keeps_writing_to_its_share_of_the_time():
    """After a write of w seconds the next waits w (1 - share) / share; a change of the
    verdict's level, or nothing new to write, overrides the wait either way."""
    from ratioscope.views.watch import WriteSchedule

    clock = Clock(100.0)
    schedule = WriteSchedule(share=0.05, clock=clock)
    assert not schedule.due("green")  # nothing folded yet: nothing to write
    schedule.added()
    assert schedule.due("green")  # the first write is never held back
    schedule.wrote("green", 0.5)  # 0.5 s: the next one 9.5 s later (0.5 s is 5 % of 10 s)
    schedule.added()
    clock.now = 109.4
    assert not schedule.due("green")
    assert schedule.due("yellow")  # the level changed: written at once
    clock.now = 109.5
    assert schedule.due("green")
    schedule.wrote("green", 0.0)  # a write that takes no time waits for nothing ...
    assert not schedule.due("green")  # ... but there must be something new to write
    schedule.added()
    assert schedule.due("green")
    with pytest.raises(ValueError, match="share"):
        WriteSchedule(share=0.0)


def test_a_watch_holds_back_documents_that_cost_more_than_their_share(tmp_path, monkeypatch):
    """The command's session with --json, each write taking one second: written at the
    first step, held back while the level stays, written at once when it changes, at a
    later look with no new step once due, and when the watch stops."""
    from ratioscope.cli.watch import _Session
    from ratioscope.views.timeline import Timeline
    from ratioscope.views.watch import WriteSchedule

    clock = Clock()
    (tmp_path / "run").mkdir()
    run = RunWatch(tmp_path / "run", settle=0.0, clock=clock)
    out = tmp_path / "t.json"
    session = _Session(run, "run", out, None, [], None, None, quiet=True)
    session.schedule = WriteSchedule(share=0.05, clock=clock)
    write_json = Timeline.write_json

    def slow(self: Timeline, path: Path) -> None:
        write_json(self, path)
        clock.now += 1.0

    monkeypatch.setattr(Timeline, "write_json", slow)

    def written_steps() -> list[int]:
        return [row["step"] for row in json.loads(out.read_text())["steps"]]

    levels: list[str] = []
    for step in range(6):
        noise = 0.05 if step < 3 else 0.8
        written(tmp_path / "run" / f"step_{step}" / "rank_0.pt", step, clock.now - 1, noise)
        session._after(run.poll())
        levels.append(session.verdict.level)
        changed = [i for i in range(1, len(levels)) if levels[i] != levels[i - 1]]
        # each write waits 19 s, and the clock moves only when a write takes its second
        expected = max([0, *changed])
        assert written_steps() == list(range(expected + 1)), (step, levels)
    assert levels[:3] == ["green"] * 3 and levels[-1] == "red"
    assert written_steps() != list(range(6))  # the last steps were held back
    session._after(run.poll())  # nothing new, not due yet: still held back
    assert written_steps() != list(range(6))
    clock.now += 19.0
    session._after(run.poll())  # nothing new, but due: written
    assert written_steps() == list(range(6))
    written(tmp_path / "run" / "step_6" / "rank_0.pt", 6, clock.now - 1, 0.8)
    assert session.follow(0.05, once=True) == 0  # the look holds it back; the stop writes
    assert written_steps() == list(range(7))


def test_the_command_names_options_not_library_parameters(tmp_path):
    """A file without a step is left out with the library's sentence, which names its
    parameter (`step_from`); the command says --step-from."""
    write_step(tmp_path / "run" / "dump.pt", seed=0, noise=0.05)
    result = CliRunner().invoke(app, ["watch", str(tmp_path / "run"), "--once", "--settle", "0"])
    assert result.exit_code == 0, result.output
    assert "left out" in result.stderr and "--step-from" in result.stderr, result.stderr
    assert "`step_from`" not in result.stderr


def test_once_says_why_it_read_no_step(tmp_path):
    """--once from cron on a run that has not written a step: exit 0 (not an error), and
    a line that says why nothing was read (it said nothing at all)."""
    folder = tmp_path / "run"
    folder.mkdir()

    def once(*options: str) -> str:
        result = CliRunner().invoke(app, ["watch", str(folder), "--once", *options])
        assert result.exit_code == 0, result.output
        return result.stderr

    assert f"no step read yet: {folder} holds no dump file" in once()
    write_step(folder / "step_1.pt", seed=0, noise=0.05)  # written just now
    assert "no step read yet: 1 step still being written" in once("--settle", "60")
    assert "no step read" not in once("--settle", "0")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "step_1.pt").write_text("not a dump")
    folder = tmp_path / "other"
    stderr = once("--settle", "0", "--no-cache")
    assert "step 1 skipped" in stderr and "no step read: every step found was skipped" in stderr
