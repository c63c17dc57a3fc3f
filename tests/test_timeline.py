"""timeline: per-step headline quantities equal analyze of each step's files, merge of the
step reports equals analyze of all files, and a change is flagged where it happens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from documents import assert_documents_close
from timeline_run import write_run

import ratioscope
import ratioscope.errors
from ratioscope.analysis.pipeline import merge_reports
from ratioscope.views.timeline import HEADLINES, Timeline, lookup

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "verl"


def strip(document):
    return {k: v for k, v in document.items() if k not in ("tool", "inputs", "state")}


@pytest.fixture(scope="module")
def sample_timeline():
    return ratioscope.timeline(SAMPLE)


def test_per_step_values_equal_analyze_of_the_step_alone(sample_timeline):
    assert [s.step for s in sample_timeline.steps] == [8, 16, 24, 32]
    for step in sample_timeline.steps:
        (path,) = step.inputs
        document = ratioscope.analyze(path).to_dict()
        for item in HEADLINES:
            expected = item.value(document)
            assert step.values[item.key] == expected, (step.step, item.key)
        assert step.values["mismatch.policy.k3"] == document["mismatch"]["policy"]["k3"]
        degenerate = document["trust_region"]["degenerate"] / document["trust_region"]["groups"]
        assert step.values["trust_region.degenerate_share"] == degenerate


def test_every_headline_has_a_value_on_the_sample_run(sample_timeline):
    for item in HEADLINES:
        if item.key.startswith("policy_lag."):  # the sample run is synchronous
            assert all(v is None for v in sample_timeline.series(item.key))
            continue
        assert all(v is not None for v in sample_timeline.series(item.key)), item.key


def test_several_files_of_a_step_are_analysed_together(tmp_path):
    files = write_run(tmp_path, steps=2, ranks=3)
    result = ratioscope.timeline(tmp_path)
    assert [len(s.inputs) for s in result.steps] == [3, 3]
    together = ratioscope.analyze(files[3:6]).to_dict()
    for item in HEADLINES:
        assert result.steps[1].values[item.key] == item.value(together)


@pytest.mark.parametrize("ranks", [1, 2])
def test_merge_of_the_step_reports_equals_analyze_of_all_files(tmp_path, ranks):
    files = write_run(tmp_path / "run", steps=3, ranks=ranks)
    reports = tmp_path / "reports"
    result = ratioscope.timeline(tmp_path / "run", reports_dir=reports)
    written = sorted(reports.iterdir())
    assert [p.name for p in written] == [f"step_{s:06d}.json" for s in range(3)]
    merged = strip(merge_reports([json.loads(p.read_text()) for p in written]).to_dict())
    pooled = strip(ratioscope.analyze(files).to_dict())
    assert result.pooled is not None
    assert json.dumps(strip(result.pooled.to_dict())) == json.dumps(merged)
    if ranks == 1:  # the same accumulators merged in the same order: exactly equal
        assert json.dumps(merged) == json.dumps(pooled)
    else:  # sums grouped by step first: equal up to the order of floating-point sums
        assert_documents_close(merged, pooled, rel=1e-9, abs_tol=1e-12)


def test_pooled_report_without_step_reports_equals_the_merge_of_their_state(tmp_path):
    """Without reports_dir the steps' accumulators are folded as they are (no state written
    and read back): the pooled report, state included, is the merge of the step reports
    read from JSON, and the step values are those of the run that writes them."""
    write_run(tmp_path / "run", steps=3, ranks=2)
    folded = ratioscope.timeline(tmp_path / "run")
    written = ratioscope.timeline(tmp_path / "run", reports_dir=tmp_path / "reports")
    steps = sorted((tmp_path / "reports").iterdir())
    merged = merge_reports([json.loads(p.read_text()) for p in steps]).to_dict()
    assert folded.pooled is not None and "state" in merged
    pooled = folded.pooled.to_dict()
    del pooled["tool"], merged["tool"]
    assert json.dumps(pooled, sort_keys=True) == json.dumps(merged, sort_keys=True)
    assert folded.steps == written.steps


def test_no_partial_step_reports_when_a_step_fails(tmp_path):
    write_run(tmp_path / "run", steps=2)
    (tmp_path / "run" / "step_1" / "rank_0.pt").write_bytes(b"not a torch file")
    reports = tmp_path / "reports"
    with pytest.raises(ratioscope.errors.InputError):
        ratioscope.timeline(tmp_path / "run", reports_dir=reports)
    assert not reports.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_a_jump_in_log_ratio_noise_is_flagged_at_its_step_and_nowhere_else(tmp_path):
    jump = 8
    write_run(tmp_path, steps=12, jump_at=jump)
    result = ratioscope.timeline(tmp_path)
    for key in ("mismatch.policy.k3", "ratios.token.clip_fraction"):
        flagged = [s.step for s in result.steps if key in s.flags]
        assert flagged == [jump], key
    # the train/inference pair did not change
    assert not any("mismatch.rollout.k3" in s.flags for s in result.steps)


def test_json_layout(sample_timeline, tmp_path):
    path = tmp_path / "timeline.json"
    sample_timeline.write_json(path)
    document = json.loads(path.read_text())
    assert list(document) == [
        "schema_version", "kind", "tool", "params", "headlines", "steps", "verdict",
        "entropy_mechanics", "entropy_performance", "warnings",
    ]  # fmt: skip
    assert document["schema_version"] == 1 and document["kind"] == "timeline"
    assert {"analysis", "step_from", "change"} <= set(document["params"])
    assert document["params"]["step_from"] is None
    assert document["params"]["change"]["k"] > 0
    keys = [h["key"] for h in document["headlines"]]
    assert keys == [h.key for h in HEADLINES]
    assert all({"key", "label", "unit"} <= set(h) for h in document["headlines"])
    step = document["steps"][0]
    assert step["step"] == 8 and step["inputs"] == [str(SAMPLE / "step_0008.pt")]
    assert list(step["values"]) == keys and isinstance(step["flags"], list)
    again = Timeline.read_json(path)
    assert again.steps == sample_timeline.steps


def test_parquet_has_a_row_per_step_and_flag_columns(sample_timeline, tmp_path):
    import polars as pl

    path = tmp_path / "timeline.parquet"
    sample_timeline.write_parquet(path)
    frame = pl.read_parquet(path)
    assert frame["step"].to_list() == [8, 16, 24, 32]
    for item in HEADLINES:
        assert frame[item.key].to_list() == sample_timeline.series(item.key)
        assert frame[f"flag_{item.key}"].dtype == pl.Boolean


def test_lookup_matches_keys_with_dots():
    document = {"covariance": {"cumulative_share": {"0.01": 0.5, "0.1": 0.6}}}
    assert lookup(document, "covariance.cumulative_share.0.01") == 0.5
    assert lookup(document, "covariance.cumulative_share.0.5") is None


@pytest.mark.parametrize(
    ("what", "ceiling", "said"),
    [
        ("vitals.correct_share", 1.06, True),
        ("vitals.correct_share", 0.96, False),
        ("vitals.reward.mean", 1.06, False),  # a reward has no bound at 1
    ],
)
def test_a_share_s_ceiling_above_one_is_said_to_be_beyond_it(what, ceiling, said):
    from types import SimpleNamespace

    from ratioscope.functional.vitals import PerformanceFit
    from ratioscope.render.terminal.timeline import performance_line
    from ratioscope.views.timeline import ENTROPY_KEY, EntropyPerformance

    fit = PerformanceFit(
        steps=30, a=20.5, b=20.5 + ceiling, ceiling=ceiling, ceiling_interval=None,
        head_steps=5, head_a=None, head_b=None, holdout_rmse=None,
    )  # fmt: skip
    found = EntropyPerformance(performance=what, entropy=ENTROPY_KEY, fit=fit)
    line = performance_line(SimpleNamespace(entropy_performance=found))
    assert f"predicted ceiling b - a = {ceiling:.3g}" in line
    assert ("above the 1 a share can reach" in line) is said


def test_the_steps_that_turned_the_run_say_why():
    """The bundled length-hack run turns red at step 5 for one step's policy drift, which
    the pooled verdict after step 30 names nowhere: a line gives each turning step's
    findings of that level, as that step's own verdict holds them."""
    from ratioscope.render.terminal.timeline import TURNING_FINDINGS, turning_lines

    run = Path(__file__).parents[1] / "sample_data" / "runs" / "shaping_hack-s1" / "capture"
    result = ratioscope.timeline(run)
    verdict = result.verdict
    assert verdict.first_yellow is not None and verdict.first_red is not None
    lines = [line.plain for line in turning_lines(result)]
    assert len(lines) == 2
    for line, level, step in zip(
        lines, ("yellow", "red"), (verdict.first_yellow, verdict.first_red), strict=True
    ):
        (judged,) = [s.verdict for s in result.steps if s.step == step]
        texts = [f.text for f in judged.findings if f.level == level]
        assert texts and f"first {level} at step {step}: " in line
        assert all(text in line for text in texts[:TURNING_FINDINGS])
    assert "policy drift" in lines[1] and "step 5 alone" in lines[1]
