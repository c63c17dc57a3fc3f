"""The step cache: a timeline read from it equals the timeline analysed afresh; an entry
is untrusted (corrupt, of other files, damaged state: analysed again); a changed file or
parameter is a miss; a new step analyses one step; two processes share a directory; the
size bound evicts the entries used least recently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from timeline_run import comparable, write_run, write_step

import ratioscope
from ratioscope.analysis.cache import StepCache
from ratioscope.judgement.verdict import Thresholds


def entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*/*.json"))


def step_entries(directory: Path) -> list[Path]:
    return [p for p in entries(directory) if json.loads(p.read_text())["kind"] == "step"]


def forget_the_pooled(directory: Path) -> None:
    """Remove the pooled verdicts and reports the folds kept: every step is then merged
    from its own entry."""
    for path in entries(directory):
        try:
            kind = json.loads(path.read_text())["kind"]
        except (ValueError, RecursionError):
            continue  # a step's entry a test damaged
        if kind in ("pooled verdict", "pooled report"):
            path.unlink()


def test_a_cached_timeline_equals_the_fresh_one(tmp_path, counted):
    write_run(tmp_path / "run", steps=4, jump_at=2)
    fresh = ratioscope.timeline(tmp_path / "run")
    cache = StepCache(tmp_path / "cache")
    first = ratioscope.timeline(tmp_path / "run", cache=cache)
    assert counted == [0, 1, 2, 3, 0, 1, 2, 3]
    again = ratioscope.timeline(tmp_path / "run", cache=StepCache(tmp_path / "cache"))
    assert counted == [0, 1, 2, 3, 0, 1, 2, 3]  # nothing analysed the third time
    assert comparable(fresh) == comparable(first) == comparable(again)
    assert [s.verdict.level for s in again.steps] == [s.verdict.level for s in fresh.steps]
    # the pooled report, state and all, is the fresh one's
    pooled = [{**r.pooled.to_dict(), "tool": None} for r in (fresh, again)]
    assert pooled[0] == pooled[1]


@pytest.fixture
def merged(monkeypatch):
    """Counts the reports merged into a pooled report."""
    from ratioscope.analysis.pipeline import ReportMerge

    names: list[str] = []
    original = ReportMerge.add

    def counting(self, item, name, accumulators=None):
        names.append(name)
        return original(self, item, name, accumulators)

    monkeypatch.setattr(ReportMerge, "add", counting)
    return names


def test_a_run_folded_again_merges_only_what_is_new(tmp_path, merged):
    """The pooled report after a fold's last step is kept: folded again, the run merges
    nothing; with a new step, that report and the new step."""
    write_run(tmp_path / "run", steps=4, jump_at=2)
    cache_dir = tmp_path / "cache"
    ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    merged.clear()
    again = ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    assert merged == []
    assert comparable(again) == comparable(ratioscope.timeline(tmp_path / "run"))
    write_step(tmp_path / "run" / "step_4" / "rank_0.pt", seed=4000, noise=0.3)
    merged.clear()
    grown = ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    assert merged == ["the steps so far", "step 4"]
    fresh = ratioscope.timeline(tmp_path / "run")
    assert comparable(grown) == comparable(fresh)
    assert {**grown.pooled.to_dict(), "tool": None} == {**fresh.pooled.to_dict(), "tool": None}


@pytest.mark.parametrize("kind", ["pooled verdict", "pooled report"])
def test_a_kept_pooled_entry_that_does_not_read_back_is_not_trusted(tmp_path, kind):
    write_run(tmp_path / "run", steps=4, jump_at=2)
    cache_dir = tmp_path / "cache"
    ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    for path in entries(cache_dir):
        if json.loads(path.read_text())["kind"] == kind:
            path.write_text(path.read_text()[:200])
    result = ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    fresh = ratioscope.timeline(tmp_path / "run")
    assert comparable(result) == comparable(fresh)
    assert {**result.pooled.to_dict(), "tool": None} == {**fresh.pooled.to_dict(), "tool": None}


def test_one_new_step_analyses_one_step(tmp_path, counted):
    write_run(tmp_path / "run", steps=5)
    cache_dir = tmp_path / "cache"
    ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    counted.clear()
    write_step(tmp_path / "run" / "step_5" / "rank_0.pt", seed=5000, noise=0.05)
    grown = ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    assert counted == [5]
    assert comparable(grown) == comparable(ratioscope.timeline(tmp_path / "run"))


def test_a_run_moved_elsewhere_reads_its_entries(tmp_path, counted):
    """The key names a step's files by name and content: the copy of a run hits the
    cache, and its timeline names the copy's files."""
    import shutil

    write_run(tmp_path / "run", steps=3)
    ratioscope.timeline(tmp_path / "run", cache=StepCache(tmp_path / "cache"))
    shutil.copytree(tmp_path / "run", tmp_path / "moved")
    counted.clear()
    moved = ratioscope.timeline(tmp_path / "moved", cache=StepCache(tmp_path / "cache"))
    assert counted == []
    assert comparable(moved) == comparable(ratioscope.timeline(tmp_path / "moved"))
    assert all("moved" in info.path for info in moved.pooled.inputs)


def test_a_changed_file_is_analysed_again(tmp_path, counted):
    write_run(tmp_path / "run", steps=3)
    cache = StepCache(tmp_path / "cache")
    ratioscope.timeline(tmp_path / "run", cache=cache)
    counted.clear()
    # same name, same size, other numbers
    write_step(tmp_path / "run" / "step_1" / "rank_0.pt", seed=77, noise=0.05)
    changed = ratioscope.timeline(tmp_path / "run", cache=StepCache(tmp_path / "cache"))
    assert counted == [1]
    assert comparable(changed) == comparable(ratioscope.timeline(tmp_path / "run"))


def test_a_changed_parameter_is_a_miss(tmp_path, counted):
    write_run(tmp_path / "run", steps=2)
    ratioscope.timeline(tmp_path / "run", cache=StepCache(tmp_path / "cache"))
    counted.clear()
    other = ratioscope.AnalysisParams(clip=(0.1, 0.1))
    result = ratioscope.timeline(
        tmp_path / "run", params=other, cache=StepCache(tmp_path / "cache")
    )
    assert counted == [0, 1]
    assert comparable(result) == comparable(ratioscope.timeline(tmp_path / "run", params=other))


def test_entries_of_other_code_are_a_miss(tmp_path, counted, monkeypatch):
    # a checkout whose code changed without a new version number never reads the
    # reports the older code wrote (they may lack sections the new code adds)
    import ratioscope.analysis.cache as cache_module

    write_run(tmp_path / "run", steps=2)
    ratioscope.timeline(tmp_path / "run", cache=StepCache(tmp_path / "cache"))
    counted.clear()
    monkeypatch.setattr(cache_module, "code_digest", lambda: "other code")
    ratioscope.timeline(tmp_path / "run", cache=StepCache(tmp_path / "cache"))
    assert counted == [0, 1]
    counted.clear()
    ratioscope.timeline(tmp_path / "run", cache=StepCache(tmp_path / "cache"))
    assert counted == []  # the new code's entries are read


@pytest.mark.parametrize(
    "damage",
    [
        lambda text: text[: len(text) // 2],  # truncated
        lambda text: "not json",
        lambda text: "[" * 100_000,  # nested past the parser's depth
        lambda text: text.replace('"kind":"step"', '"kind":"other"'),
        # a report of other files
        lambda text: text.replace("rank_0.pt", "rank_9.pt"),
        # a damaged state: a histogram's counts that are not numbers
        lambda text: _damage_state(text),
    ],
    ids=["truncated", "not-json", "deep", "kind", "other-files", "state"],
)
def test_an_entry_that_does_not_read_back_is_analysed_again(tmp_path, counted, damage):
    write_run(tmp_path / "run", steps=2)
    cache_dir = tmp_path / "cache"
    expected = comparable(ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir)))
    counted.clear()
    (victim, *_) = [p for p in step_entries(cache_dir) if "step_1" in p.read_text()]
    victim.write_text(damage(victim.read_text()))
    forget_the_pooled(cache_dir)
    cache = StepCache(cache_dir)
    result = ratioscope.timeline(tmp_path / "run", cache=cache)
    assert counted == [1]
    assert cache.stats.refused == 1
    assert comparable(result) == expected
    # the entry was rewritten: the next run reads it
    counted.clear()
    ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    assert counted == []


def _damage_state(text: str) -> str:
    entry = json.loads(text)
    state = entry["report"]["state"]["ratios"]
    _replace_first_list(state)
    return json.dumps(entry)


def _replace_first_list(node) -> bool:
    """Put strings into the first list of numbers found."""
    if isinstance(node, dict):
        return any(_replace_first_list(v) for v in node.values())
    if isinstance(node, list) and node and all(isinstance(v, (int, float)) for v in node):
        node[:] = ["x"] * len(node)
        return True
    return False


def test_an_entry_of_other_parameters_under_a_steps_key_is_analysed_again(tmp_path, counted):
    """An entry whose report was made with other analysis settings (planted under the
    key) is caught when it joins the run, and analysed again."""
    write_run(tmp_path / "run", steps=2)
    cache_dir = tmp_path / "cache"
    expected = comparable(ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir)))
    other_dir = tmp_path / "other"
    ratioscope.timeline(
        tmp_path / "run",
        params=ratioscope.AnalysisParams(clip=(0.1, 0.1)),
        cache=StepCache(other_dir),
    )
    (planted,) = [p for p in step_entries(other_dir) if "step_1" in p.read_text()]
    (victim,) = [p for p in step_entries(cache_dir) if "step_1" in p.read_text()]
    entry = json.loads(planted.read_text())
    entry["key"] = json.loads(victim.read_text())["key"]
    victim.write_text(json.dumps(entry))
    forget_the_pooled(cache_dir)
    counted.clear()
    result = ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    assert counted == [1]
    assert comparable(result) == expected


def test_other_thresholds_judge_the_cached_steps_afresh(tmp_path, counted):
    write_run(tmp_path / "run", steps=3, jump_at=1)
    strict = Thresholds(clip_fraction_yellow=1e-4, clip_fraction_red=2e-4)
    ratioscope.timeline(tmp_path / "run", cache=StepCache(tmp_path / "cache"))
    counted.clear()
    cached = ratioscope.timeline(
        tmp_path / "run", thresholds=strict, cache=StepCache(tmp_path / "cache")
    )
    assert counted == []  # the reports are reused; only the verdicts are not
    fresh = ratioscope.timeline(tmp_path / "run", thresholds=strict)
    assert comparable(cached) == comparable(fresh)
    assert [s.verdict.level for s in cached.steps] == [s.verdict.level for s in fresh.steps]


def test_the_size_bound_evicts_the_entries_used_least_recently(tmp_path):
    write_run(tmp_path / "run", steps=4)
    cache_dir = tmp_path / "cache"
    ratioscope.timeline(tmp_path / "run", cache=StepCache(cache_dir))
    sizes = {p: p.stat().st_size for p in entries(cache_dir)}
    steps = step_entries(cache_dir)
    # the oldest by use: step 0's entry; the newest: step 3's
    for age, path in enumerate(sorted(steps, key=lambda p: json.loads(p.read_text())["key"])):
        os.utime(path, ns=(10**18 + age * 10**9, 10**18 + age * 10**9))
    ordered = sorted(steps, key=lambda p: p.stat().st_mtime_ns)
    bound = sum(sizes.values()) - sizes[ordered[0]] // 2
    cache = StepCache(cache_dir, max_bytes=bound)
    cache.put("f" * 64, {"report": {}})  # a new entry past the bound
    left = entries(cache_dir)
    assert ordered[0] not in left  # the least recently used went
    assert all(p in left for p in ordered[1:])
    assert sum(p.stat().st_size for p in left) <= bound
    assert cache.stats.evicted >= 1


def test_a_bound_of_zero_keeps_only_the_last_entry(tmp_path, counted):
    write_run(tmp_path / "run", steps=3)
    result = ratioscope.timeline(tmp_path / "run", cache=StepCache(tmp_path / "c", max_bytes=0))
    assert len(entries(tmp_path / "c")) == 1
    assert comparable(result) == comparable(ratioscope.timeline(tmp_path / "run"))


CONCURRENT = """
import json, sys
import ratioscope
from ratioscope.analysis.cache import StepCache
result = ratioscope.timeline(sys.argv[1], cache=StepCache(sys.argv[2]))
document = result.to_dict()
document.pop("tool")
print(json.dumps(document, sort_keys=True))
"""


def test_two_processes_sharing_a_directory_neither_corrupt_nor_lose_entries(tmp_path):
    write_run(tmp_path / "run", steps=6)
    cache_dir = tmp_path / "cache"
    command = [sys.executable, "-c", CONCURRENT, str(tmp_path / "run"), str(cache_dir)]
    procs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
    assert outputs[0][0] == outputs[1][0]
    assert not list(cache_dir.rglob("*.tmp*"))  # no temporary file left
    assert len(step_entries(cache_dir)) == 6  # every entry whole, none lost
    cache = StepCache(cache_dir)
    third = ratioscope.timeline(tmp_path / "run", cache=cache)
    assert cache.stats.refused == 0
    document = comparable(third)
    assert json.dumps(document, sort_keys=True) == outputs[0][0].strip()


def test_an_unwritable_cache_only_costs_time(tmp_path):
    write_run(tmp_path / "run", steps=2)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the directory would be")
    result = ratioscope.timeline(tmp_path / "run", cache=StepCache(blocked / "steps"))
    assert comparable(result) == comparable(ratioscope.timeline(tmp_path / "run"))
