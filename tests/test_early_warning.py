"""The verdict at every step (docs/health.md, "Early warning"): what each rule says on
hand-made timelines, computed by hand; that the verdict after step N is the verdict of
the steps up to N; the entropy-performance law against statsmodels."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from statistics import median

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

import ratioscope
from ratioscope.functional.changepoint import MAD_TO_SIGMA, ChangeRule, change_flags
from ratioscope.functional.vitals import fit_entropy_performance
from ratioscope.judgement.trends import TrendHistory, trend_findings
from ratioscope.judgement.verdict import FirstSteps, Thresholds, first_steps_findings

SAMPLE = Path(__file__).resolve().parents[1] / "sample_data" / "verl_steps"


# --------------------------------------------------------------------- the change rule
def reference_flags(values, rule):
    """The change rule as its module docstring writes it, a plain loop over the whole
    history (no incremental state)."""
    flags, history = [], []
    for raw in values:
        if raw is None or not math.isfinite(raw):
            flags.append(False)
            continue
        recent = history[-rule.window :]
        flagged = False
        if len(recent) >= rule.min_history:
            center = median(recent)
            scale = max(MAD_TO_SIGMA * median(abs(h - center) for h in recent),
                        rule.floor_rel * abs(center))  # fmt: skip
            flagged = raw != center if scale == 0 else abs(raw - center) > rule.k * scale
        flags.append(flagged)
        history = [raw] if flagged else [*history, raw]
    return flags


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(
        st.one_of(st.none(), st.floats(-5, 5, allow_nan=False), st.sampled_from([0.0, 1.0])),
        max_size=40,
    )
)
def test_the_change_tracker_flags_as_the_rule_reads(values):
    rule = ChangeRule(window=6, min_history=3, k=3.0)
    assert change_flags(values, rule) == reference_flags(values, rule)


# ---------------------------------------------------------------- hand-made timelines
def history_of(rows):
    """A trend history fed flat reports (``{path: value}``), one per step."""
    history = TrendHistory()
    for step, row in enumerate(rows, start=1):
        history.add(step, row)
    return history


def found(rows, key_prefix, t=None):
    findings = trend_findings(history_of(rows), t or Thresholds())
    return [f for f in findings if f.key.startswith(key_prefix)]


def test_entropy_against_the_first_steps_both_ways():
    base = [{"vitals.entropy.mean": 0.04}] * 3
    # 0.07 / 0.04 = 1.75: above 1.5, one step: yellow
    (one,) = found([*base, {"vitals.entropy.mean": 0.07}], "trend.entropy")
    assert one.level == "yellow" and "1.75x" in one.text
    # above 1.5x on each of the last three steps: red
    high = [{"vitals.entropy.mean": v} for v in (0.061, 0.07, 0.065)]
    (held,) = found([*base, *high], "trend.entropy")
    assert held.level == "red" and "on each of the last 3 steps" in held.text
    # 0.061 / 0.04 = 1.525 once, then 0.059 (1.475): back to green
    dip = [{"vitals.entropy.mean": v} for v in (0.07, 0.07, 0.059)]
    (calm,) = found([*base, *dip], "trend.entropy")
    assert calm.level == "green"
    # 0.015 / 0.04 = 0.375 (below 0.5: yellow), 0.007 / 0.04 = 0.175 (below 0.2: red)
    assert found([*base, {"vitals.entropy.mean": 0.015}], "trend.entropy")[0].level == "yellow"
    assert found([*base, {"vitals.entropy.mean": 0.007}], "trend.entropy")[0].level == "red"


def test_entropy_falling_fast_needs_a_positive_covariance():
    entropy = (0.05, 0.05, 0.05, 0.045, 0.034)  # 0.034 <= 0.7 x 0.05 within 3 steps
    rows = [
        {"vitals.entropy.mean": h, "vitals.entropy_mechanics.covariance": 0.01} for h in entropy
    ]
    (fall,) = found(rows, "trend.entropy_falling")
    assert fall.level == "yellow" and "fell from 0.05 to 0.034" in fall.text
    rows[-1] = {**rows[-1], "vitals.entropy_mechanics.covariance": -0.01}
    assert found(rows, "trend.entropy_falling") == []
    slower = [dict(r, **{"vitals.entropy_mechanics.covariance": 0.01}) for r in rows[:-1]]
    slower.append({"vitals.entropy.mean": 0.036, "vitals.entropy_mechanics.covariance": 0.01})
    assert found(slower, "trend.entropy_falling") == []  # 0.036 > 0.7 x 0.05


def test_responses_climbing_to_the_limit():
    shares = (0.02, 0.05, 0.08, 0.12, 0.16)
    (climb,) = found([{"vitals.length.at_limit_share": s} for s in shares], "trend.length")
    assert climb.level == "yellow" and "5 % -> 8 % -> 12 % -> 16 %" in climb.text
    low = (0.02, 0.05, 0.08, 0.12, 0.14)  # rising, but below 15 %
    assert found([{"vitals.length.at_limit_share": s} for s in low], "trend.length") == []
    broken = (0.02, 0.05, 0.12, 0.08, 0.2)  # not a rise on each step
    assert found([{"vitals.length.at_limit_share": s} for s in broken], "trend.length") == []


def test_responses_held_at_the_limit_are_red():
    at = "vitals.length.at_limit_share"
    # 22 %, 20 %, 25 %: at or above 20 % on each of the last three steps
    (held,) = found([{at: s} for s in (0.01, 0.22, 0.2, 0.25)], "trend.length_held")
    assert held.level == "red" and held.value == 0.2
    assert "(22 %, 20 %, 25 %)" in held.text
    # one of the three below 20 %, or fewer than three steps: nothing
    assert found([{at: s} for s in (0.3, 0.19, 0.4, 0.5)], "trend.length_held") == []
    assert found([{at: s} for s in (0.5, 0.5)], "trend.length_held") == []
    # a step without the share breaks the run of steps
    assert found([{at: 0.3}, {}, {at: 0.3}, {at: 0.3}], "trend.length_held") == []
    t = Thresholds(length_held_red=0.35)
    assert found([{at: s} for s in (0.3, 0.4, 0.5)], "trend.length_held", t) == []


def test_k3_rising_and_ess_falling_step_after_step():
    k3 = (1e-4, 2e-4, 5e-4, 1e-3)  # three rises, 10x in all
    (rise,) = found([{"mismatch.rollout.k3": v} for v in k3], "trend.mismatch.rollout.k3")
    assert rise.level == "yellow" and "(10x)" in rise.text
    twice = (1e-4, 2e-4, 1.5e-4, 1e-3)
    assert found([{"mismatch.rollout.k3": v} for v in twice], "trend.mismatch") == []
    slow = (1e-4, 1.2e-4, 1.5e-4, 2e-4)  # rises on each step, 2x in all: below 3x
    assert found([{"mismatch.policy.k3": v} for v in slow], "trend.mismatch") == []
    ess = (0.99, 0.97, 0.95, 0.93)  # falls on each step, by 0.06 in all
    (fall,) = found([{"mismatch.policy.ess": v} for v in ess], "trend.mismatch.policy.ess")
    assert fall.level == "yellow"


def reward_rows(correct, shaping):
    return [
        {
            "vitals.correct_share": c,
            "vitals": {"reward": {"per_function": {"correct": {}, "length": {}}}},
            "vitals.reward.per_function.correct.mean": c,
            "vitals.reward.per_function.length.mean": s,
            "vitals.reward.per_function.length.maximum": 1.0,
        }
        for c, s in zip(correct, shaping, strict=True)
    ]


def test_reward_hacking_a_function_rises_while_correctness_falls():
    shaping = (0.5, 0.5, 0.5, 0.6, 0.65, 0.7)  # last three 0.65 >= 1.1 x 0.5
    # correctness: first steps 0.5; last three (0.45 + 0.35 + 0.3) / 3 = 0.3667, a fall
    # of 26.7 %: above 20 % (yellow), below 40 % (red)
    (hack,) = found(reward_rows((0.5, 0.5, 0.5, 0.45, 0.35, 0.3), shaping), "trend.reward")
    assert hack.level == "yellow" and hack.key == "trend.reward_hacking.length"
    assert "'length' rose to 0.65" in hack.text and "fell to 0.367" in hack.text
    (worse,) = found(reward_rows((0.5, 0.5, 0.5, 0.3, 0.25, 0.2), shaping), "trend.reward")
    assert worse.level == "red"  # a fall of 50 %
    # correctness holding: no finding, however the shaping reward climbs
    assert found(reward_rows((0.5,) * 6, shaping), "trend.reward") == []


def test_first_steps_one_step_at_a_time_matches_the_whole_run():
    k3 = [1e-4, 2e-4, 1.5e-4, 2e-3, 3e-2, 1e-4]
    rows = [(i + 1, {"mismatch.policy.k3": v}) for i, v in enumerate(k3)]
    judge = FirstSteps()
    for n, row in enumerate(rows, start=1):
        judge.add(*row)
        assert judge.findings() == first_steps_findings(rows[:n])
    # the baseline is the median of steps 1-3, 1.5e-4; step 4 is 13x (yellow), step 5
    # 200x (red)
    (finding,) = judge.findings()
    assert finding.level == "red" and "at step 5" in finding.text and "steps 4, 5" in finding.text


# --------------------------------------------------------- the verdict after each step
def test_the_verdict_after_step_n_is_the_verdict_of_the_steps_up_to_n():
    files = sorted(SAMPLE.glob("step_*.pt"))
    whole = ratioscope.timeline(files)
    assert len(whole.steps) == 16
    for n in (1, 3, 8, 13):
        prefix = ratioscope.timeline(files[:n])
        assert whole.steps[n - 1].verdict == prefix.steps[-1].verdict
        assert prefix.verdict is not None
        assert whole.steps[n - 1].verdict.level == prefix.verdict.level
        assert [s.flags for s in prefix.steps] == [s.flags for s in whole.steps[:n]]
    assert whole.verdict is not None and whole.pooled is not None
    # the pooled run is green; the yellow steps name what holds of them
    assert whole.pooled.verdict().level == "green"
    levels = dict(zip([s.step for s in whole.steps], whole.levels(), strict=True))
    assert levels[32] == "yellow"
    texts = [f.text for f in whole.steps[-1].verdict.findings]
    assert any("step 32 alone: groups with all rewards equal = 50 % (8 of 16" in t for t in texts)
    assert whole.verdict.first_yellow == next(s for s, lv in levels.items() if lv != "green")
    assert f"first yellow at step {whole.verdict.first_yellow}" in whole.verdict.bottom_line()


def test_the_brief_pooled_report_judges_as_the_whole_one():
    """The pooled report after each step is built brief (the tables no finding reads left
    empty); its verdict is the verdict of the whole report of the same steps."""
    from ratioscope.analysis.pipeline import ReportMerge
    from ratioscope.judgement.verdict import FINDING_SECTIONS, verdict

    merge = ReportMerge()
    for index, path in enumerate(sorted(SAMPLE.glob("step_*.pt"))):
        merge.add(ratioscope.analyze(path), f"step {index}")
        whole = merge.result(state=False)
        brief = merge.result(state=False, sections=FINDING_SECTIONS, brief=True)
        assert verdict(brief) == verdict(whole)
        assert brief.covariance is not None and whole.covariance is not None
        assert brief.covariance.cumulative_share == whole.covariance.cumulative_share
        assert brief.covariance.percentiles.positive == []
        assert brief.ratios is not None and whole.ratios is not None
        assert list(brief.ratios) == ["token"] and brief.ratios["token"] == whole.ratios["token"]
        assert brief.trust_region is not None and whole.trust_region is not None
        assert brief.trust_region.degenerate == whole.trust_region.degenerate
        assert brief.trust_region.sweep == []
    with pytest.raises(ValueError, match="no state"):
        merge.result(brief=True)


def drifting_run(folder: Path, steps: int, bad: int) -> list[Path]:
    """Steps of 32 responses of 8 to 31 tokens (none at the 40-token width); step ``bad``
    has a policy 0.3 nats per token away from the one that sampled (k3 about 0.045:
    above Spinning Up's 0.015), the others 0.003."""
    gen = torch.Generator().manual_seed(0)
    paths = []
    for step in range(1, steps + 1):
        old = -torch.rand(32, 40, generator=gen) * 2
        shift = 0.3 if step == bad else 0.003
        noise = torch.randn(32, 40, generator=gen) * shift
        lengths = torch.randint(8, 32, (32,), generator=gen)
        mask = torch.arange(40)[None] < lengths[:, None]
        path = folder / f"step_{step:04d}.safetensors"
        save_file({"mask": mask, "old_log_probs": old, "log_probs": old + noise}, str(path))
        paths.append(path)
    return paths


def test_a_run_that_turns_bad_at_step_7_of_10_is_red_at_step_7(tmp_path):
    run = ratioscope.timeline(drifting_run(tmp_path, 10, bad=7))
    levels = run.levels()
    assert levels[:6] == ["green"] * 6 and levels[6] == "red"
    (own,) = [f for f in run.steps[6].verdict.findings if f.text.startswith("step 7 alone: ")]
    assert own.key == "mismatch.policy.k3" and own.level == "red"
    assert run.verdict.first_red == 7 and "first red at step 7" in run.verdict.bottom_line()


def test_the_per_step_verdict_reads_back_from_the_json(tmp_path):
    run = ratioscope.timeline(drifting_run(tmp_path, 5, bad=4))
    out = tmp_path / "timeline.json"
    run.write_json(out)
    again = ratioscope.Timeline.read_json(out)
    assert again.steps == run.steps and again.levels() == run.levels()
    document = run.to_dict()
    assert document["steps"][3]["verdict"]["level"] == "red"
    assert document["verdict"]["first_red"] == 4


# ------------------------------------------------------ the entropy-performance law
def test_the_entropy_performance_law_against_statsmodels():
    sm = pytest.importorskip("statsmodels.api")
    gen = torch.Generator().manual_seed(7)
    entropy = torch.linspace(0.2, 1.2, 20)
    reward = 1.3 - 0.4 * torch.exp(entropy) + 0.02 * torch.randn(20, generator=gen)
    fit = fit_entropy_performance(entropy.tolist(), reward.tolist())
    x = np.exp(np.array(entropy.tolist()))
    y = np.array(reward.tolist())
    model = sm.OLS(y, sm.add_constant(x)).fit()
    intercept, slope = model.params
    assert fit.a == pytest.approx(-slope, rel=1e-9) and fit.b == pytest.approx(intercept, rel=1e-9)
    at_zero = model.get_prediction([[1.0, 1.0]]).conf_int(alpha=0.05)[0]
    assert fit.ceiling == pytest.approx(intercept + slope, rel=1e-9)
    assert fit.ceiling_interval == pytest.approx(tuple(at_zero), rel=1e-9)
    # the first 15 % (3 steps) fitted alone, then their error on the other 17
    head = sm.OLS(y[:3], sm.add_constant(x[:3])).fit()
    predicted = head.params[0] + head.params[1] * x[3:]
    rmse = float(((predicted - y[3:]) ** 2).mean() ** 0.5)
    assert fit.head_steps == 3 and fit.holdout_rmse == pytest.approx(rmse, rel=1e-9)


def test_the_law_needs_three_steps_and_a_moving_entropy():
    assert fit_entropy_performance([0.1, 0.2], [0.5, 0.4]).a is None
    assert fit_entropy_performance([0.3, 0.3, 0.3], [0.5, 0.4, 0.6]).a is None
    assert fit_entropy_performance([0.1, None, 0.3, 0.5], [0.5, 0.4, None, 0.2]).steps == 2


# ------------------------------------------------------------- the bundled corpus runs
RUNS = Path(__file__).resolve().parents[1] / "sample_data" / "runs"


def bundled_label(run: Path):
    """The label of a bundled run, recomputed from its trainer log by the corpus's rule."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location(
        "corpus_labels", Path(__file__).resolve().parents[1] / "benchmarks" / "runs" / "labels.py"
    )
    labels = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules.setdefault("corpus_labels", labels)  # dataclasses look their module up
    spec.loader.exec_module(labels)
    summary = json.loads((run / "run.json").read_text())
    log = labels.read_log(run / "trainer_log.jsonl")
    return labels.label_run(log, summary["maxima"]), summary


@pytest.mark.parametrize("name", ["healthy-s1", "shaping_hack-s1"])
def test_the_bundled_runs_carry_the_label_of_their_trainer_log(name):
    label, summary = bundled_label(RUNS / name)
    assert summary["label"] == label.to_dict()
    assert (label.step is None) == (name == "healthy-s1")


def test_the_bundled_failing_run_is_red_three_steps_before_its_label_the_healthy_never():
    healthy = ratioscope.timeline(RUNS / "healthy-s1" / "capture")
    assert len(healthy.steps) == 30 and "red" not in healthy.levels()
    hacked = ratioscope.timeline(RUNS / "shaping_hack-s1" / "capture")
    label, _ = bundled_label(RUNS / "shaping_hack-s1")
    assert hacked.verdict is not None and hacked.verdict.first_red is not None
    assert hacked.verdict.first_red <= label.step - 3
    # the shaping reward for length and the verifier are both in the dumps: correctness is
    # the verifier's 0/1, not every rollout the shaping reward pays
    last = hacked.steps[-1].values
    assert last["vitals.correct_share"] == last["vitals.reward.per_function.correct.mean"]


def test_a_change_flagged_at_many_steps_names_the_first_and_the_last():
    from ratioscope.judgement.run_verdict import ChangeFindings

    changes = ChangeFindings({"mismatch.policy.k3": "policy drift k3"})
    flagged = [3, 8, 13, 20, 31, 40, 52, 60]
    for step in range(64):
        value = 1e-3 * (1 + step)
        changes.add(
            step, {"mismatch.policy.k3": value}, ["mismatch.policy.k3"] if step in flagged else []
        )
    (finding,) = changes.findings()
    assert "changed at steps 3, 8, 13, ..., 52, 60 (8 changes)" in finding.text
    assert finding.text.endswith("at step 60)")  # the values around the latest change


def test_a_bad_change_is_yellow_for_the_memory_then_informational():
    """A change is news: yellow for CHANGE_MEMORY steps from the one it was flagged at
    (steps as read, not step numbers: this run is dumped every tenth step), then green
    and said to be older; a new flag makes it yellow again. One flag kept every later
    step of a healthy run yellow."""
    from ratioscope.judgement.run_verdict import CHANGE_MEMORY, ChangeFindings

    key = "mismatch.policy.k3"
    changes = ChangeFindings({key: "policy drift k3"})
    levels = []
    for index in range(30):
        value = 1e-3 if index < 5 else 1e-2 if index < 25 else 0.1  # rises twice
        changes.add(10 * index, {key: value}, [key] if index in (5, 25) else [])
        levels.append([f.level for f in changes.findings()])
        if index == 5 + CHANGE_MEMORY:
            (finding,) = changes.findings()
            assert finding.text.endswith(
                f"(0.001 -> 0.01 at step 50; more than {CHANGE_MEMORY} steps ago: informational)"
            ), finding.text
    tail = 30 - 5 - CHANGE_MEMORY - (30 - 25)
    assert levels == (
        [[]] * 5 + [["yellow"]] * CHANGE_MEMORY + [["green"]] * tail + [["yellow"]] * 5
    )
