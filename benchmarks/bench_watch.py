"""``ratioscope watch`` and the step cache (docs/watch.md): eight measurements.

1. **cached vs fresh**: ``ratioscope.timeline`` of a bundled run (sample_data/runs/
   healthy-s1, 30 steps) without a cache (the peer), into an empty cache, and from the
   full cache; milliseconds per step and the ratio. Goal: a cached step <= 10 ms.
2. **lag behind a writer**: a process copies the bundled run's steps into a directory,
   one step every ``--every`` seconds (default 1, the goal's pace), while a watch
   (``RunWatch``, the command's loop: one look every second, files read after 2 s
   unwritten) folds them; for each step, the seconds from its file's last write to its
   verdict. Keeping up: the lag does not grow with the steps.
3. **memory over many steps**: ``--steps`` steps (default 10,000) made of links to the
   bundled run's files (one folder a step; no copy on disk), added 1,000 at a time and
   folded by one watch with a cache; its resident memory after each thousand. Flat: the
   growth per thousand steps stays that of the timeline's rows.
4. **restart**: a second watch of the same steps, all read from the cache: ms per step.
5. **a step's CPU in a watch**: the bundled run's steps linked into a folder one at a
   time, a look after each (no cache, one thread), against ``ratioscope.timeline`` of
   the same steps (the peer, no cache): process CPU per step and the ratio; for the
   command with ``--json``/``--html`` (the verdict's pooled report after each look, then
   its outline: params, warnings and vitals, all they write; the writing itself left
   out), the same with the whole pooled report without state (what it made before the
   outline), without them, and for ``RunWatch(whole=True)`` (the whole report with state
   after each look).
6. **a look's listing as the run grows**: the files of 100, 1,000 and 3,000 steps
   listed by the watch's ``RepeatedListing`` (each name's work done once, each folder
   listed again only when it changed, once it is older than the margin) against
   ``expand_paths`` and a stat per file (what each look did before): ms per look and
   the ratio.
7. **a look's CPU as the run grows**: a watch that has folded 10, 100 and 1,000 steps
   (the bundled run's files again, one folder a step, regular files as a trainer writes
   them; no cache, one thread; the steps older than the margin) sees one more step; the
   look's process CPU (the command's look: the poll and the verdict; and with
   ``--json``/``--html``: the outline of the pooled report too) against that step's
   analysis alone (``ratioscope.timeline`` of the one step, the peer): what the look
   adds beyond its step, in ms and as a share of the step.
8. **the documents as the run grows**: the command's session with ``--json`` and
   ``--html`` (``cli.watch._Session``: the look, then the writing) once it has folded
   10, 100 and 1,000 steps, a new step at each look, the looks back to back (a watch
   that never waits: the most writing can cost); one write's process CPU, and over a
   window of looks the share of the wall time spent writing and the looks per second,
   writing after every look (the peer: what the command did before) against the
   command's :class:`~ratioscope.views.watch.WriteSchedule` (goal: <= 5 %).

    python benchmarks/bench_watch.py                 # all eight (about 9 minutes on 2 cores)
    python benchmarks/bench_watch.py --steps 2000    # a shorter memory run
    python benchmarks/bench_watch.py --skip-memory
    python benchmarks/bench_watch.py --only-overhead    # measurement 5 (about 30 s)
    python benchmarks/bench_watch.py --only-overhead --repeat 8   # steadier (best of 8)
    python benchmarks/bench_watch.py --only-listing     # measurement 6 (about 10 s)
    python benchmarks/bench_watch.py --only-growth      # measurement 7 (about 1 minute)
    python benchmarks/bench_watch.py --only-documents   # measurement 8 (about 2 minutes)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RUN = ROOT / "sample_data" / "runs" / "healthy-s1" / "capture"
#: seconds after which a folder's listing is kept (FolderListings' margin, and a little)
SETTLED = 2.5

WRITER = r"""
import shutil, sys, time
from pathlib import Path
source, target, every = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
for folder in sorted(source.iterdir()):
    for file in folder.iterdir():
        out = target / folder.name / file.name
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("wb") as handle:  # written in place, as a trainer's dump is
            handle.write(file.read_bytes())
    time.sleep(every)
"""


def resident_mib() -> float:
    """The process's resident memory now (Linux), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cached_vs_fresh(scratch: Path) -> None:
    import ratioscope
    from ratioscope.analysis.cache import StepCache

    steps = len(list(RUN.iterdir()))
    ratioscope.timeline(sorted(RUN.iterdir())[:2])  # imports and first calls, not measured
    timings = {}
    for name, cache in (
        ("fresh (no cache)", None),
        ("into an empty cache", "new"),
        ("from the cache", "full"),
    ):
        best = float("inf")
        for repeat in range(3):  # the best of three: the machine's other work left out
            directory = scratch / f"cache-{repeat}"
            chosen = None if cache is None else StepCache(directory)
            if cache == "new":
                shutil.rmtree(directory, ignore_errors=True)
            started = time.perf_counter()
            ratioscope.timeline(RUN, cache=chosen)
            best = min(best, time.perf_counter() - started)
        timings[name] = best / steps * 1000
    fresh = timings["fresh (no cache)"]
    print(f"1. timeline of {RUN.relative_to(ROOT)} ({steps} steps), ms per step")
    for name, ms in timings.items():
        print(f"   {name:<22} {ms:8.1f} ms   x{ms / fresh:.3f} of fresh")
    verdict = "met" if timings["from the cache"] <= 10 else "NOT met"
    print(f"   goal <= 10 ms a cached step: {verdict}")


def lag_behind_a_writer(scratch: Path, every: float) -> None:
    from ratioscope.analysis.cache import StepCache
    from ratioscope.views.watch import DEFAULT_INTERVAL, DEFAULT_SETTLE, RunWatch

    target = scratch / "growing"
    target.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(RUN), str(target), str(every)])
    watch = RunWatch(target, cache=StepCache(scratch / "cache-2"))
    lags: list[float] = []
    total = len(list(RUN.iterdir()))
    busy = 0.0
    while len(lags) < total:
        started = time.perf_counter()
        poll = watch.poll()
        busy += time.perf_counter() - started
        for step in poll.added:
            written = max(p.stat().st_mtime for p in (target / f"step_{step:06d}").iterdir())
            lags.append(time.time() - written)
        if poll.skipped:
            raise SystemExit(f"a step was skipped: {poll.skipped}")
        time.sleep(DEFAULT_INTERVAL)
    writer.wait()
    half = len(lags) // 2
    print(f"2. watch of a run writing a bundled step every {every:g} s ({total} steps; "
          f"--settle {DEFAULT_SETTLE:g}, --interval {DEFAULT_INTERVAL:g})")  # fmt: skip
    median, first, second = (
        statistics.median(lags),
        statistics.mean(lags[:half]),
        statistics.mean(lags[half:]),
    )
    print(f"   lag from a step's last write to its verdict: median {median:.2f} s, "
          f"max {max(lags):.2f} s; first half {first:.2f} s, "
          f"second half {second:.2f} s")  # fmt: skip
    print(f"   time spent looking and analysing: {busy:.1f} s of {total * every:.0f} s of run "
          f"({busy / (total * every):.0%})")  # fmt: skip
    kept_up = second <= first + every
    print(f"   keeps up (the lag does not grow): {'yes' if kept_up else 'NO'}")


def memory_over_steps(scratch: Path, steps: int) -> None:
    from ratioscope.analysis.cache import StepCache
    from ratioscope.views.watch import RunWatch

    files = sorted(p for folder in sorted(RUN.iterdir()) for p in folder.iterdir())
    target = scratch / "long"
    target.mkdir()
    cache_dir = scratch / "cache-3"
    watch = RunWatch(target, settle=0.0, cache=StepCache(cache_dir))
    print(f"3. one watch folding {steps:,} steps (links to the {len(files)} bundled files, "
          "1,000 added at a time)")  # fmt: skip
    print("   steps      resident MiB   ms per step")
    baseline = resident_mib()
    rows = []
    for start in range(0, steps, 1000):
        for step in range(start, min(steps, start + 1000)):
            folder = target / f"step_{step:06d}"
            folder.mkdir()
            source = files[step % len(files)]
            (folder / source.name).symlink_to(source)
        started = time.perf_counter()
        poll = watch.poll()
        seconds = time.perf_counter() - started
        rows.append((len(watch.steps), resident_mib(), seconds / max(1, len(poll.added)) * 1000))
        print(f"   {rows[-1][0]:>6,}   {rows[-1][1]:12.0f}   {rows[-1][2]:11.1f}", flush=True)
    if len(rows) >= 3:
        growth = (rows[-1][1] - rows[1][1]) / max(1, (rows[-1][0] - rows[1][0]) / 1000)
        print(f"   growth after the first thousand: {growth:.1f} MiB per 1,000 steps "
              f"(from {baseline:.0f} MiB before the first look)")  # fmt: skip
    started = time.perf_counter()
    again = RunWatch(target, settle=0.0, cache=StepCache(cache_dir))
    again.poll()
    seconds = time.perf_counter() - started
    print(
        f"4. a watch started again over the {len(again.steps):,} steps: "
        f"{seconds / max(1, len(again.steps)) * 1000:.1f} ms per step, all from the cache"
    )


def watch_overhead(scratch: Path, repeat: int = 3) -> None:
    import torch

    import ratioscope
    from ratioscope.views.watch import RunWatch

    torch.set_num_threads(1)
    steps = sorted(RUN.iterdir())
    ratioscope.timeline(steps[:2])  # imports and first calls, not measured
    #: (name, RunWatch's whole, what is asked of the pooled report after each look)
    variants = (
        ("watch --json/--html", False, "outline"),
        ("... with the whole report", False, "whole"),
        ("watch", False, None),
        ("RunWatch(whole=True)", True, None),
    )
    best = dict.fromkeys(["timeline", *(name for name, _, _ in variants)], float("inf"))
    for attempt in range(repeat):  # the best of each: the machine's other work left out
        started = time.process_time()
        ratioscope.timeline(RUN)
        best["timeline"] = min(best["timeline"], time.process_time() - started)
        for index, (name, whole, asks) in enumerate(variants):
            target = scratch / f"one-at-a-time-{attempt}-{index}"
            target.mkdir()
            watch = RunWatch(target, settle=0.0, whole=whole)
            started = time.process_time()
            for step in steps:
                (target / step.name).symlink_to(step, target_is_directory=True)
                poll = watch.poll()
                if len(poll.added) != 1:
                    raise SystemExit(f"{step.name}: the look added {poll.added}")
                if asks == "outline":  # what the command writes: params, warnings, vitals
                    watch.timeline(whole=False, state=False, outline=True)
                elif asks == "whole":  # what it made before the outline
                    watch.timeline(whole=True, state=False)
            best[name] = min(best[name], time.process_time() - started)
    per_step = {name: 1000 * cpu / len(steps) for name, cpu in best.items()}
    peer = per_step["timeline"]
    print(f"5. a watch adding {RUN.relative_to(ROOT)}'s {len(steps)} steps one at a time, "
          "one thread, no cache: process CPU per step")  # fmt: skip
    print(f"   {'timeline (the peer)':<24} {peer:6.1f} ms")
    for name, _, _ in variants:
        print(
            f"   {name:<24} {per_step[name]:6.1f} ms   +{100 * (per_step[name] / peer - 1):.1f} %"
        )


def listing_cost(scratch: Path, counts: tuple[int, ...] = (100, 1000, 3000)) -> None:
    """How a look's listing of the run grows with its steps: the watch's
    ``RepeatedListing`` against expand_paths and a stat per file (what a look did
    before; the peer), the best of five looks each, at each number of steps."""
    from ratioscope.io.loaders import RepeatedListing, expand_paths

    files = sorted(p for folder in sorted(RUN.iterdir()) for p in folder.iterdir())
    target = scratch / "looks"
    target.mkdir()
    listing = RepeatedListing([target], shard_reports=True, found=False)

    def best(look: Any) -> float:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            look()
            times.append(time.perf_counter() - started)
        return 1000 * min(times)

    def peer() -> list[Any]:
        found = expand_paths([target], allow_empty=True, shard_reports=True)
        return [(path, os.stat(path)) for path in found]

    print("6. listing the run's files at a look (one folder a step, a link to a bundled "
          "file in each): ms per look")  # fmt: skip
    print("   steps   RepeatedListing   expand_paths + stat (peer)   ratio")
    made = 0
    for count in counts:
        for step in range(made, count):
            folder = target / f"step_{step:06d}"
            folder.mkdir()
            source = files[step % len(files)]
            (folder / source.name).symlink_to(source)
        made = count
        listing.look()  # the new names, seen once (a look after each step does this)
        time.sleep(SETTLED)  # the folders as a later look sees them: their listings kept
        ours, theirs = best(listing.look), best(peer)
        print(f"   {count:>5,}   {ours:15.2f}   {theirs:26.2f}   {ours / theirs:5.2f}")


def regular_file(source: Path, target: Path) -> None:
    """``target`` a regular file with ``source``'s bytes: a hard link where the two
    share a file system, else a copy (a link to a file costs the walk a stat)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def look_as_the_run_grows(
    scratch: Path, counts: tuple[int, ...] = (10, 100, 1000), looks: int = 5
) -> None:
    """A look's process CPU once the watch has folded ``counts`` steps, against the new
    step's analysis alone; the median of ``looks`` looks (one new step each) at each
    count, for the command without outputs and with ``--json``/``--html``."""
    import torch

    import ratioscope
    from ratioscope.views.watch import RunWatch

    torch.set_num_threads(1)
    files = sorted(p for folder in sorted(RUN.iterdir()) for p in folder.iterdir())
    ratioscope.timeline(files[:2])  # imports and first calls, not measured
    variants = {"watch": False, "watch --json/--html": True}
    print("7. one look once the watch has folded N steps (the bundled files again, "
          "no cache, one thread): process CPU, median of "
          f"{looks} looks")  # fmt: skip
    print("   steps   the step alone (peer)   variant                look    beyond the step")
    for variant, outline in variants.items():
        target = scratch / f"growing-{int(outline)}"
        target.mkdir()
        watch = RunWatch(target, settle=0.0)
        made = 0

        def link(count: int, target: Path = target) -> list[Path]:
            nonlocal made
            added = []
            for step in range(made, made + count):  # a folder a step, as a trainer writes
                added.append(target / f"step_{step:06d}")
                added[-1].mkdir()
                source = files[step % len(files)]
                regular_file(source, added[-1] / source.name)
            made += count
            return added

        for count in counts:
            link(count - made)
            watch.poll()  # the steps up to ``count``, folded together, not measured
            time.sleep(SETTLED)  # older than the margin, as a run's earlier steps are
            own, look = [], []
            for _ in range(looks):
                (added,) = link(1)
                started = time.process_time()
                ratioscope.timeline([added])
                own.append(time.process_time() - started)
                started = time.process_time()
                poll = watch.poll()
                watch.verdict()
                if outline:  # what the documents write: params, warnings, vitals
                    watch.timeline(whole=False, state=False, outline=True)
                look.append(time.process_time() - started)
                if len(poll.added) != 1:
                    raise SystemExit(f"{added.name}: the look added {poll.added}")
            peer, ours = 1000 * statistics.median(own), 1000 * statistics.median(look)
            print(f"   {count:>5,}   {peer:18.1f} ms   {variant:<20} {ours:6.1f} ms   "
                  f"{ours - peer:+6.1f} ms ({100 * (ours / peer - 1):+.0f} %)")  # fmt: skip


def documents_as_the_run_grows(
    scratch: Path, counts: tuple[int, ...] = (10, 100, 1000), window: float = 12.0
) -> None:
    """The command's looks with ``--json``/``--html`` at ``counts`` steps, a step a look
    for ``window`` seconds: the share of the wall time spent writing, writing after
    every look (``share=1``: each write waits for nothing) and as scheduled."""
    import torch

    from ratioscope.cli.watch import _Session
    from ratioscope.views.watch import WRITE_SHARE, RunWatch, WriteSchedule

    torch.set_num_threads(1)
    files = sorted(p for folder in sorted(RUN.iterdir()) for p in folder.iterdir())
    print("8. the documents (--json and --html) once the watch has folded N steps, a step "
          f"a look, looks back to back for {window:g} s (no cache, one thread)")  # fmt: skip
    print("   steps   one write (CPU)   variant               looks/s   writes   "
          "writing, share of the time")  # fmt: skip
    for share, variant in ((1.0, "after every look"), (WRITE_SHARE, "as scheduled")):
        for count in counts:
            target = scratch / f"documents-{share}-{count}"
            target.mkdir()
            run = RunWatch(target, settle=0.0)
            outputs = scratch / f"t-{share}-{count}"
            session = _Session(
                run, "run", outputs.with_suffix(".json"), outputs.with_suffix(".html"), [],
                None, None, quiet=True,
            )  # fmt: skip
            session.schedule = WriteSchedule(share=share)
            spent: list[tuple[float, float]] = []  # each write's wall and process seconds
            write = session._write

            def timed(result: Any, write: Any = write, spent: list = spent) -> None:
                wall, cpu = time.perf_counter(), time.process_time()
                write(result)
                spent.append((time.perf_counter() - wall, time.process_time() - cpu))

            session._write = timed  # type: ignore[method-assign]

            def add_step(step: int, target: Path = target) -> None:
                folder = target / f"step_{step:06d}"
                folder.mkdir()
                regular_file(files[step % len(files)], folder / files[step % len(files)].name)

            for step in range(count):
                add_step(step)
            session._after(run.poll())  # the first steps, folded and written
            one = spent[-1][1]
            spent.clear()
            looks, started = 0, time.perf_counter()
            while time.perf_counter() - started < window:
                add_step(count + looks)
                session._after(run.poll())
                looks += 1
            elapsed = time.perf_counter() - started
            writing = sum(wall for wall, _ in spent)
            print(f"   {count:>5,}   {1000 * one:12.1f} ms   {variant:<20} {looks / elapsed:7.1f}"
                  f"   {len(spent):6}   {100 * writing / elapsed:5.1f} %")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--every", type=float, default=1.0)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--skip-lag", action="store_true")
    parser.add_argument("--only-overhead", action="store_true", help="measurement 5 alone")
    parser.add_argument("--only-listing", action="store_true", help="measurement 6 alone")
    parser.add_argument("--only-growth", action="store_true", help="measurement 7 alone")
    parser.add_argument("--only-documents", action="store_true", help="measurement 8 alone")
    parser.add_argument(
        "--repeat", type=int, default=3, help="measurement 5: runs of each variant (best kept)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        if args.only_overhead:
            watch_overhead(Path(scratch), args.repeat)
            return
        if args.only_listing:
            listing_cost(Path(scratch))
            return
        if args.only_growth:
            look_as_the_run_grows(Path(scratch))
            return
        if args.only_documents:
            documents_as_the_run_grows(Path(scratch))
            return
        cached_vs_fresh(Path(scratch))
        if not args.skip_lag:
            lag_behind_a_writer(Path(scratch), args.every)
        if not args.skip_memory:
            memory_over_steps(Path(scratch), args.steps)
        watch_overhead(Path(scratch), args.repeat)
        listing_cost(Path(scratch))
        look_as_the_run_grows(Path(scratch))
        documents_as_the_run_grows(Path(scratch))


if __name__ == "__main__":
    main()
