"""The health verdict: levels at hand-set numbers, thresholds from TOML, the CLI block.

Reports are the stored single-step report of the sample run (tests/data), with the one
number a test is about set by hand in its JSON document; every expected level follows
from the thresholds' defaults in ratioscope/judgement/verdict.py (docs/health.md).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.errors import RulesError
from ratioscope.judgement.rules import load_rules, parse_rules
from ratioscope.judgement.verdict import (
    LEVELS,
    Thresholds,
    load_thresholds,
    thresholds_from_table,
    verdict,
)
from ratioscope.report.model import Report

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "tests" / "data" / "report_schema1.json"
runner = CliRunner()


@pytest.fixture(scope="module")
def document() -> dict:
    return json.loads(STORED.read_text())


def document_with(document: dict, **changes) -> dict:
    """A copy of the stored report's JSON with ``changes`` (slash path -> value)."""
    doc = copy.deepcopy(document)
    for path, value in changes.items():
        *parents, last = path.split("/")
        node = doc
        for part in parents:
            node = node[part]
        node[last] = value
    return doc


def judged(document: dict, thresholds: Thresholds | None = None, **changes) -> dict:
    """Findings by key of the stored report with ``changes`` (slash path -> value)."""
    return {
        f.key: f for f in verdict(Report.from_dict(document_with(document, **changes)), thresholds)
    }


def test_stored_report_findings(document):
    findings = judged(document)
    assert list(findings) == [
        "mismatch.rollout.k3",
        "mismatch.rollout.ess",
        "mismatch.rollout.frac_outside",
        "mismatch.policy.k3",
        "mismatch.policy.abs_diff_max",
        "ratios.token.clip_fraction",
        "ratios.token.switch_frequency",
        "covariance.cumulative_share.0.01",
        "trust_region.degenerate_share",
    ]
    # every finding carries its number, its threshold and a source
    for finding in findings.values():
        assert finding.value is not None and finding.threshold is not None
        assert finding.source and finding.level in LEVELS
    # the covariance of this step: 56.9 % of sum |c| in the top 1 % (< 80 %)
    cov = findings["covariance.cumulative_share.0.01"]
    assert cov.level == "green" and cov.threshold == 0.8
    assert cov.value == document["covariance"]["cumulative_share"]["0.01"]
    # 8 of 16 groups degenerate: exactly on the 50 % threshold, which is still green
    degenerate = findings["trust_region.degenerate_share"]
    assert degenerate.value == 0.5 and degenerate.level == "green"
    assert "8 of 16" in degenerate.text


@pytest.mark.parametrize(
    ("k3", "level", "shown", "bound"),
    [
        (5e-4, "green", "5e-4", "1e-3"),
        (2.1e-3, "yellow", "2.1e-3", "1e-3"),
        (0.2, "red", "0.2", "0.1"),
    ],
)
def test_train_inference_k3_levels(document, k3, level, shown, bound):
    finding = judged(document, **{"mismatch/rollout/k3": k3})["mismatch.rollout.k3"]
    assert finding.level == level
    assert finding.value == k3
    assert f"k3 = {shown} per token" in finding.text and bound in finding.text
    if level == "yellow":
        assert finding.text == (
            "train/inference mismatch: k3 = 2.1e-3 per token, above 1e-3, where truncated "
            "IS is usually recommended"
        )
    if level == "red":
        assert "verl" in finding.source


@pytest.mark.parametrize(
    ("ess", "level"), [(0.9, "green"), (0.5, "green"), (0.4, "yellow"), (0.2, "red")]
)
def test_ess_is_bad_when_small(document, ess, level):
    assert judged(document, **{"mismatch/rollout/ess": ess})["mismatch.rollout.ess"].level == level


@pytest.mark.parametrize(("share", "level"), [(0.005, "green"), (0.05, "yellow"), (0.5, "red")])
def test_share_outside_the_truncation_band(document, share, level):
    finding = judged(document, **{"mismatch/rollout/frac_outside": share})
    assert finding["mismatch.rollout.frac_outside"].level == level
    assert "[1/2, 2]" in finding["mismatch.rollout.frac_outside"].text


@pytest.mark.parametrize(("k3", "level"), [(0.005, "green"), (0.012, "yellow"), (0.02, "red")])
def test_policy_drift_against_spinning_up_target_kl(document, k3, level):
    finding = judged(document, **{"mismatch/policy/k3": k3})["mismatch.policy.k3"]
    assert finding.level == level
    assert "Spinning Up" in finding.source


def test_clip_fraction_and_informational_switch_frequency(document):
    findings = judged(
        document,
        **{"ratios/token/clip_fraction": 0.35, "ratios/token/switch_frequency": 0.49},
    )
    assert findings["ratios.token.clip_fraction"].level == "red"
    assert "35 %" in findings["ratios.token.clip_fraction"].text
    switch = findings["ratios.token.switch_frequency"]
    # informational: compared with the paper's 0.43, never an alarm
    assert switch.level == "green" and switch.threshold == 0.43
    assert "0.49, above the 0.43 of KPO Table 2" in switch.text


def test_missing_rollout_row_is_a_not_computed_note(document):
    result = verdict(Report.from_dict(document_with(document, **{"mismatch/rollout": None})))
    (note,) = result.notes
    assert note.key == "mismatch.rollout" and note.value is None
    assert "not computed" in note.text and "rollout_log_probs" in note.text
    # a check the dump gives no input for says nothing about the run
    assert not any(f.key.startswith("mismatch.rollout") for f in result)
    assert result.level == "green" and result.to_dict()["counts"]["yellow"] == 0


def test_null_sections_give_no_finding(document):
    findings = judged(document, covariance=None, trust_region=None, ratios=None)
    assert set(findings) == {
        "mismatch.rollout.k3",
        "mismatch.rollout.ess",
        "mismatch.rollout.frac_outside",
        "mismatch.policy.k3",
        "mismatch.policy.abs_diff_max",
    }


def test_fpa_opposite_sides(document):
    doc = copy.deepcopy(document)
    fp = Report.read_json(ROOT / "tests" / "data" / "report_schema1.json").future_policy
    assert fp is not None and fp.comparison is None  # one step: exact only
    comparison = {
        "exact_median": 0.99745,
        "approximation_median": 1.0046,
        "exact_mean": 0.9925,
        "approximation_mean": 1.011,
        "opposite_sides": True,
    }
    doc["future_policy"]["comparison"] = comparison
    judged_doc = verdict(Report.from_dict(doc))
    # about ratioscope's own estimate, not the run: a note, never a finding or a count
    assert "future_policy.comparison.opposite_sides" not in {f.key for f in judged_doc}
    assert judged_doc.level == "green" and judged_doc.bottom_line() == "healthy: nothing to do"
    (fpa,) = judged_doc.notes
    assert fpa.key == "future_policy.comparison.opposite_sides" and fpa.value == 1.0046
    assert "1.0046 vs 0.99745 exact, on opposite sides of 1" in fpa.text
    doc["future_policy"]["comparison"] = {
        **comparison,
        "approximation_median": 0.999,
        "opposite_sides": False,
    }
    (same,) = verdict(Report.from_dict(doc)).notes
    assert "on the same side of 1" in same.text


def test_verdict_level_and_json(document):
    result = verdict(Report.from_dict(document))
    assert result.level == "green"
    doc = result.to_dict()
    assert doc["kind"] == "verdict" and doc["level"] == "green"
    assert doc["counts"] == {"green": 9, "yellow": 0, "red": 0}
    assert doc["bottom_line"] == "healthy: nothing to do"
    assert doc["findings"][0]["key"] == "mismatch.rollout.k3"
    assert doc["notes"] == []
    assert json.loads(json.dumps(doc)) == doc


def test_bottom_line_names_the_problems_worst_first(document):
    result = verdict(
        Report.from_dict(document_with(
            document,
            **{"ratios/token/clip_fraction": 0.15, "mismatch/policy/k3": 0.02,
               "mismatch/rollout/k3": 0.5, "mismatch/rollout/ess": 0.1},
        ))
    )  # fmt: skip
    # red: train/inference mismatch (k3 and ESS, named once) and policy drift; yellow: clip
    assert result.bottom_line() == (
        "3 problems: train/inference mismatch, policy drift, PPO clip fraction"
    )
    assert result.count("red") == 3 and result.count("yellow") == 1
    # every finding keeps its source, also in the JSON
    written = result.to_dict()
    assert written["bottom_line"] == result.bottom_line()
    assert all(f["source"] for f in written["findings"])
    assert written["findings"][0]["name"] == "train/inference mismatch"


def test_every_threshold_is_documented():
    health = (ROOT / "docs" / "health.md").read_text()
    for name in Thresholds.names():
        assert Thresholds.source(name), name
        assert Thresholds.doc(name), name
        assert f"`{name}`" in health, f"docs/health.md does not list {name}"
        assert f"{getattr(Thresholds(), name):g}" in health


# ----------------------------------------------------------------------------- TOML


def test_thresholds_override_from_toml(document, tmp_path):
    path = tmp_path / "limits.toml"
    path.write_text("[thresholds]\ncovariance_top1_yellow = 0.5\nrollout_k3_yellow = 1e-14\n")
    limits = load_thresholds(path)
    assert limits.covariance_top1_yellow == 0.5 and limits.overridden() == (
        "rollout_k3_yellow",
        "covariance_top1_yellow",
    )
    findings = judged(document, limits)
    assert findings["covariance.cumulative_share.0.01"].level == "yellow"  # 56.9 % > 50 %
    assert findings["mismatch.rollout.k3"].level == "yellow"
    assert "above 1e-14" in findings["mismatch.rollout.k3"].text


def test_file_without_thresholds_gives_defaults(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\npath = "a.b"\nmax = 1\n')
    assert load_thresholds(path) == Thresholds()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"rollout_k3_yelow": 1e-3},
            "unknown threshold 'rollout_k3_yelow' (did you mean 'rollout_k3_yellow'?)",
        ),
        ({"rollout_k3_yellow": "high"}, "'rollout_k3_yellow' must be a number"),
        (
            {"rollout_k3_red": 1e-4},
            "'rollout_k3_red' (0.0001) must be at least 'rollout_k3_yellow' (0.001)",
        ),
        (
            {"rollout_ess_red": 0.9},
            "'rollout_ess_red' (0.9) must be at most 'rollout_ess_yellow' (0.5)",
        ),
        (
            {"entropy_red": 0.01},
            "'entropy_red' (0.01) must be at most 'entropy_yellow' (0.001)",
        ),
        (
            {"relative_red": 5},
            "'relative_red' (5) must be at least 'relative_yellow' (10)",
        ),
        ({"rollout_k3_yellow": -1e-3}, "'rollout_k3_yellow' must be a finite number >= 0"),
        ({"entropy_yellow": -0.5}, "'entropy_yellow' must be a finite number >= 0"),
    ],
)
def test_bad_thresholds_are_one_sentence(table, message):
    with pytest.raises(RulesError) as error:
        thresholds_from_table(table, "limits.toml")
    assert str(error.value).startswith("limits.toml: [thresholds]: ")
    assert message in str(error.value)


def test_check_rules_file_may_hold_thresholds(tmp_path):
    text = '[thresholds]\ndrift_k3_yellow = 0.012\n\n[[rule]]\npath = "a.b"\nmax = 1\n'
    assert len(parse_rules(text).rules) == 1
    with pytest.raises(RulesError, match="unknown threshold 'drift'"):
        parse_rules('[thresholds]\ndrift = 0.02\n\n[[rule]]\npath = "a.b"\nmax = 1\n')
    with pytest.raises(RulesError, match="unknown top-level key 'threshold'"):
        parse_rules('[threshold]\ndrift_k3_yellow = 0.02\n\n[[rule]]\npath = "a.b"\nmax = 1\n')
    assert load_rules(ROOT / "examples" / "rules.toml").rules


# ------------------------------------------------------------------------------ CLI


def test_analyze_opens_with_the_verdict(tmp_path):
    limits = tmp_path / "limits.toml"
    limits.write_text("[thresholds]\ncovariance_top1_yellow = 0.9\n")
    out = tmp_path / "verdict.json"
    result = runner.invoke(
        app,
        ["analyze", "sample_data/verl/step_0032.pt", "--quiet", "--detail", "--thresholds",
         str(limits), "--verdict-json", str(out)],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("health: ") and "covariance_top1_yellow" in lines[0]
    assert lines[1].startswith("  green   train/inference mismatch: k3 = ")
    written = json.loads(out.read_text())
    assert written["kind"] == "verdict"
    assert written["overridden_thresholds"] == ["covariance_top1_yellow"]
    keys = [f["key"] for f in written["findings"]]
    assert "covariance.cumulative_share.0.01" in keys


def test_analyze_bad_thresholds_file_exits_2(tmp_path):
    limits = tmp_path / "limits.toml"
    limits.write_text("[thresholds]\nk3 = 1\n")
    result = runner.invoke(
        app, ["analyze", "sample_data/verl/step_0032.pt", "--quiet", "--thresholds", str(limits)]
    )
    assert result.exit_code == 2
    assert "unknown threshold 'k3'" in result.stderr
    assert result.stdout == ""


def test_notes_are_printed_apart_and_never_counted(document):
    from rich.console import Console

    from ratioscope.render.terminal.verdict import show_verdict

    doc = document_with(document, **{"mismatch/rollout": None, "ratios/token/clip_fraction": 0.2})
    result = verdict(Report.from_dict(doc))
    console = Console(width=300, record=True, color_system=None)
    show_verdict(console, result)
    lines = console.export_text().splitlines()
    assert lines[0] == (
        "health: 1 problem: PPO clip fraction (1 yellow, 5 green; 1 note; see docs/health.md)"
    )
    # findings first, then the note, tagged as such
    assert lines[-1].startswith("  note    train/inference mismatch: not computed")
    levels = [line.split()[0] for line in lines[1:-1]]
    assert levels == ["green", "green", "yellow", "green", "green", "green"]


# ------------------------------------------------------------------- phase-2 rules


def staleness(exact_on: float, mean_abs_z: float = 0.0, tokens: int = 1000) -> dict:
    """A staleness section (docs/staleness.md) whose mini-batch 0 has these numbers."""
    first = {
        "rows": 32, "tokens": tokens, "exact_on": exact_on, "mean_abs_z": mean_abs_z,
        "mean_z": 0.0, "k3": 0.0, "clip_fraction": 0.0, "ess": 1.0,
    }  # fmt: skip
    later = {**first, "exact_on": 0.02, "mean_abs_z": 1e-3, "k3": 2e-5}
    return {"clip_band": [0.2, 0.28], "minibatches": {"0": first, "1": later}}


@pytest.mark.parametrize(
    ("exact_on", "level", "shown"),
    [(1.0, "green", "= 0 % of 1,000, at or below 0 %"), (0.999, "yellow", "= 0.1 % of 1,000")],
)
def test_first_minibatch_must_be_exactly_on_policy(document, exact_on, level, shown):
    findings = judged(document, staleness=staleness(exact_on, 0.0 if exact_on == 1 else 0.04))
    finding = findings["staleness.minibatches.0.exact_on"]
    assert finding.level == level and shown in finding.text
    # the value is the share of tokens with z != 0: 1 - exact_on
    assert finding.value == pytest.approx(1.0 - exact_on, abs=1e-15)
    if level == "yellow":
        assert "mean |z| 0.04" in finding.text and finding.short_name == "trainer noise"
        assert "exactly 0" in finding.source


def test_exactly_on_policy_rule_needs_the_ppo_ratio_and_minibatch_zero(document):
    # prime-rl's current/engine ratio is never exactly 0: no such finding
    engine = judged(
        document,
        staleness=staleness(0.5, 0.01),
        **{"mismatch/pairs/policy": "current/engine", "mismatch/rollout": None},
    )
    assert "staleness.minibatches.0.exact_on" not in engine
    # a dump that starts at mini-batch 1 says nothing about the first update
    later_only = staleness(0.5, 0.01)
    del later_only["minibatches"]["0"]
    assert "staleness.minibatches.0.exact_on" not in judged(document, staleness=later_only)


@pytest.mark.parametrize(
    ("largest", "level", "name"),
    [(0.68, "green", "extreme log-ratio"), (25.0, "yellow", "extreme log-ratio"),
     (89.0, "red", "ratio overflow")],
)  # fmt: skip
def test_largest_log_ratio_overflow(document, largest, level, name):
    findings = judged(document, **{"mismatch/rollout/abs_diff_max": largest})
    # the larger of the two pairs' largest |z| is judged (the policy row's is 0.68)
    key = "mismatch.rollout.abs_diff_max" if largest > 0.69 else "mismatch.policy.abs_diff_max"
    finding = findings[key]
    assert finding.level == level and finding.short_name == name
    if level == "red":
        assert finding.threshold == 88.72 and "#2972" in finding.source
        assert "overflows float32" in finding.text
    if level == "yellow":
        assert "#1329" in finding.source


def relative(document: dict, baseline: dict, thresholds: Thresholds | None = None) -> dict:
    result = verdict(Report.from_dict(document), thresholds, Report.from_dict(baseline))
    return {f.key: f for f in result if f.key.startswith("relative.")}


def test_relative_findings_against_a_baseline(document):
    k3 = document["mismatch"]["policy"]["k3"]  # 8.94e-5
    on = Report.from_dict(document).ratios["token"].proportion_pooled["on"]
    base = document_with(document, **{"ratios/token/clip_fraction": 0.0})
    same = relative(document, document)
    # the train/inference k3 (1e-13) is below the 1e-6 floor: a ratio of roundings
    assert set(same) == {
        "relative.mismatch.policy.k3",
        "relative.ratios.token.proportion_pooled.on",
    }  # the clip fraction 3.7e-4 is below its floor 1e-3 too
    assert all(f.level == "green" for f in same.values())
    drifted = document_with(
        document,
        **{"mismatch/policy/k3": 20 * k3, "ratios/token/clip_fraction": 0.05,
           "mismatch/rollout/k3": 1e-11},
    )  # fmt: skip
    found = relative(drifted, base)
    policy = found["relative.mismatch.policy.k3"]
    assert policy.level == "yellow" and policy.value == 20 * k3
    assert policy.text == "policy drift k3 = 1.8e-3, 20x the baseline's 8.9e-5: above 10x"
    assert policy.short_name == "policy drift k3 vs baseline"
    # a baseline clip fraction of 0: the ratio is taken to the floor, 0.05 / 1e-3 = 50x
    clip = found["relative.ratios.token.clip_fraction"]
    assert clip.level == "yellow" and "the baseline's 0 %" in clip.text
    assert "relative.mismatch.rollout.k3" not in found
    red = relative(document_with(document, **{"mismatch/policy/k3": 150 * k3}), document)
    assert red["relative.mismatch.policy.k3"].level == "red"
    assert "above 100x" in red["relative.mismatch.policy.k3"].text
    # bad when small: the share of exactly on-policy tokens falling to 0 is red
    noisy = document_with(document, **{"ratios/token/proportion/on": 0.0})
    noisy["ratios"]["token"]["proportion_pooled"] = {"up": 0.5, "down": 0.5, "on": 0.0}
    base_on = copy.deepcopy(document)
    base_on["ratios"]["token"]["proportion_pooled"] = {"up": 0.4, "down": 0.3, "on": on}
    finding = relative(noisy, base_on)["relative.ratios.token.proportion_pooled.on"]
    assert finding.level == "red" and "below 1/100" in finding.text
    # the thresholds come from the TOML table like every other
    lenient = Thresholds(relative_yellow=30, relative_red=300)
    assert relative(drifted, base, lenient)["relative.mismatch.policy.k3"].level == "green"


def test_first_steps_findings_of_a_timeline():
    from ratioscope.judgement.verdict import first_steps_findings

    def step(k3: float) -> dict:
        return {"mismatch.policy.k3": k3}

    healthy = [(2 * i, step(k3)) for i, k3 in enumerate([1e-4, 3e-4, 2e-4, 4e-4, 1e-4])]
    (line,) = first_steps_findings(healthy)
    assert line.level == "green" and line.key == "relative"
    assert line.text.startswith("against its first steps (0, 2, 4): every later step within 10x")
    # the baseline is the median of steps 0, 2, 4 (2e-4); step 8 at 3e-3 is 15x, step 10
    # at 3e-2 is 150x
    drifting = [*healthy[:4], (8, step(3e-3)), (10, step(3e-2))]
    (finding,) = first_steps_findings(drifting)
    assert finding.level == "red" and finding.key == "relative.mismatch.policy.k3"
    assert finding.text == (
        "policy drift k3 = 0.03, 150x the median of steps 0, 2, 4, 2e-4: above 100x at "
        "step 10 (beyond the bound at steps 8, 10)"
    )
    # two steps: the first alone is the baseline; one step: nothing to judge
    (pair,) = first_steps_findings([(1, step(1e-4)), (2, step(2e-3))])
    assert pair.level == "yellow" and "20x step 1's 1e-4" in pair.text
    assert first_steps_findings([(1, step(1e-4))]) == []


def test_a_long_run_beyond_its_first_steps_keeps_a_short_sentence():
    """50 later steps beyond the bound: the worst is the plain loop's (the largest
    multiple, the earliest of equals), and the sentence names the first three and the
    last two steps and the count, not all fifty."""
    import random

    from ratioscope.judgement.verdict import first_steps_findings

    rng = random.Random(3)
    base = [(i, {"mismatch.policy.k3": 1e-4}) for i in range(3)]
    later = [(3 + i, {"mismatch.policy.k3": rng.choice([2e-3, 5e-3, 2e-2])}) for i in range(50)]
    (finding,) = first_steps_findings([*base, *later])
    top = max(v["mismatch.policy.k3"] for _, v in later)
    worst_step = next(step for step, v in later if v["mismatch.policy.k3"] == top)
    assert finding.value == top and f"at step {worst_step} (" in finding.text
    assert finding.level == "red"  # 200x
    assert finding.text.endswith("(beyond the bound at steps 3, 4, 5, ..., 51, 52 (50 steps))")


def test_analyze_baseline_adds_relative_lines(tmp_path):
    base = tmp_path / "base.json"
    Report.from_dict(
        document_with(json.loads(STORED.read_text()), **{"mismatch/policy/k3": 1e-6})
    ).write_json(base)
    result = runner.invoke(
        app,
        ["analyze", "sample_data/verl/step_0032.pt", "--quiet", "--baseline", str(base)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    # the step's policy k3 is 8.9e-5, 89x the baseline's 1e-6
    assert "  yellow  policy drift k3 = 8.9e-5, 89.4x the baseline's 1e-6: above 10x" in (
        result.stdout
    )
    assert "policy drift k3 vs baseline" in result.stdout.splitlines()[0]


@pytest.mark.parametrize(
    ("document", "what"),
    [
        ({"schema_version": 1, "kind": "timeline", "steps": []}, "is a timeline"),
        ({"schema_version": 2, "tool": {}, "by_method": {}}, "is an evaluation report"),
        ({"schema_version": 1, "kind": "comparison"}, "is a comparison document"),
    ],
)
def test_baseline_that_is_no_analyze_report_is_one_sentence(tmp_path, document, what):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(document))
    result = runner.invoke(
        app, ["analyze", "sample_data/verl/step_0032.pt", "--quiet", "--baseline", str(path)]
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert f"{path}: {what}" in line and "not an analyze report" in line


def test_compact_verdict_folds_the_green_findings_into_one_line(document):
    from rich.console import Console

    from ratioscope.render.terminal.verdict import show_verdict

    doc = document_with(document, **{"ratios/token/clip_fraction": 0.2})
    console = Console(width=300, record=True, color_system=None)
    show_verdict(console, verdict(Report.from_dict(doc)), compact=True)
    lines = console.export_text().splitlines()
    assert len(lines) == 3
    assert lines[1].startswith("  yellow  PPO clip fraction")
    # 8 green findings; the train/inference mismatch's three are one name
    assert lines[2] == (
        "  green   8 checks within their thresholds: train/inference mismatch, policy drift, "
        "extreme log-ratio, raw ratio noise, covariance concentration, degenerate groups"
    )


def test_the_green_line_leaves_out_a_name_that_is_also_yellow(document):
    """The mismatch's k3 yellow, its ESS and outside-band share green: one name at two
    levels; the green line leaves it out, the count keeps every green check."""
    from rich.console import Console

    from ratioscope.render.terminal.verdict import green_names, show_verdict

    doc = document_with(document, **{"mismatch/rollout/k3": 5e-3})
    judged = verdict(Report.from_dict(doc))
    levels = {f.level for f in judged.findings if f.short_name == "train/inference mismatch"}
    assert levels == {"yellow", "green"}
    assert "train/inference mismatch" not in green_names(judged)
    console = Console(width=300, record=True, color_system=None)
    show_verdict(console, judged, compact=True)
    green = console.export_text().splitlines()[-1]
    greens = sum(f.level == "green" for f in judged.findings)
    assert green.startswith(f"  green   {greens} checks within their thresholds: policy drift")


# ---------------------------------------------------------------- vitals-based rules


@pytest.fixture(scope="module")
def with_vitals(document) -> dict:
    """The stored report with the vitals section of the same step (verl step 32)."""
    import ratioscope

    vitals = ratioscope.analyze("sample_data/verl/step_0032.pt", sections=["vitals"]).to_dict()
    return {**copy.deepcopy(document), "vitals": vitals["vitals"]}


@pytest.mark.parametrize(
    ("mean", "level"), [(0.0161, "green"), (1e-3, "green"), (5e-4, "yellow"), (5e-5, "red")]
)
def test_entropy_level(with_vitals, mean, level):
    finding = judged(with_vitals, **{"vitals/entropy/mean": mean})["vitals.entropy.mean"]
    assert finding.level == level and finding.value == mean
    if level != "green":
        assert finding.short_name == "entropy collapse" and "QUATRO Table 2" in (
            Thresholds.source("entropy_yellow")
        )


def test_no_entropy_no_entropy_line(with_vitals):
    assert "vitals.entropy.mean" not in judged(with_vitals, **{"vitals/entropy": None})


def test_length_limit_share(with_vitals):
    length = with_vitals["vitals"]["length"]
    assert (length["at_limit"], length["limit"]) == (11, 152)  # 11 of 128 at 152 tokens
    green = judged(with_vitals)["vitals.length.at_limit_share"]
    assert green.level == "green" and green.value == 11 / 128
    assert "(11 of 128 at 152 tokens, padded width)" in green.text
    for share, level in [(0.2, "yellow"), (0.5, "red"), (1.0, "red")]:
        found = judged(with_vitals, **{"vitals/length/at_limit_share": share})
        assert found["vitals.length.at_limit_share"].level == level


def test_half_the_groups_equal_is_not_green(with_vitals):
    # verl step 32 (and its prime-rl export): 8 of 16 groups with equal rewards, and
    # 50.5 % of the tokens with A = 0
    findings = judged(with_vitals)
    groups = findings["vitals.equal_reward_groups.share"]
    assert groups.level == "yellow" and groups.value == 0.5
    assert "(8 of 16: 7 all correct, 1 all wrong)" in groups.text
    zero = findings["vitals.advantages.zero_share"]
    assert zero.level == "yellow" and zero.value == pytest.approx(0.505, abs=5e-4)
    all_equal = judged(with_vitals, **{"vitals/equal_reward_groups/share": 1.0})
    assert all_equal["vitals.equal_reward_groups.share"].level == "red"


def test_prime_rl_sample_with_half_its_groups_equal_is_yellow():
    result = runner.invoke(app, ["analyze", "sample_data/prime_rl", "-q"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("health: 2 problems: equal-reward groups, zero-advantage")
    assert "  yellow  groups with all rewards equal = 50 % (8 of 16" in result.stdout


def test_entropy_collapse_against_a_baseline(with_vitals):
    mean = with_vitals["vitals"]["entropy"]["mean"]
    collapsed = document_with(with_vitals, **{"vitals/entropy/mean": mean * 0.02})
    finding = relative(collapsed, with_vitals)["relative.vitals.entropy.mean"]
    # 50x smaller: beyond 1/10, within 1/100
    assert finding.level == "yellow" and "0.02x the baseline's 0.0161: below 1/10" in (finding.text)


def test_timeline_change_is_yellow_only_the_bad_way(document):
    from ratioscope.views.timeline import HEADLINES, TimelineStep, timeline_verdict

    def step(n: int, k3: float, switch: float, flags: tuple[str, ...] = ()) -> TimelineStep:
        values = {"mismatch.policy.k3": k3, "ratios.token.switch_frequency": switch}
        return TimelineStep(step=n, inputs=(), values=values, flags=flags)

    steps = [
        step(1, 1e-4, 0.41),
        step(2, 1e-3, 0.46, ("mismatch.policy.k3", "ratios.token.switch_frequency")),
        step(3, 1e-4, 0.41),
    ]
    result = timeline_verdict(Report.from_dict(document), steps, None, HEADLINES)
    changes = {f.key: f for f in result.findings if "changed at step" in f.text}
    # k3 rose: its bad way; the raw switch frequency changed: informational
    assert changes["mismatch.policy.k3"].level == "yellow"
    switch = changes["ratios.token.switch_frequency"]
    assert switch.level == "green" and switch.text.endswith("(informational)")
    falling = [step(1, 1e-3, 0.41), step(2, 1e-4, 0.41, ("mismatch.policy.k3",))]
    (fall,) = [
        f
        for f in timeline_verdict(Report.from_dict(document), falling, None, HEADLINES)
        if "changed at step" in f.text
    ]
    assert fall.level == "green"  # less drift is no problem


def test_first_steps_worst_step_of_a_quantity_bad_when_small():
    from ratioscope.judgement.verdict import first_steps_findings

    entropy = [0.02, 0.021, 0.019, 0.018, 1e-3, 4e-4, 1.5e-3]
    steps = [(i, {"vitals.entropy.mean": e}) for i, e in enumerate(entropy)]
    (finding,) = first_steps_findings(steps)
    # the median of steps 0-2 is 0.02; step 5 (4e-4, 1/50) is the worst, not step 6
    assert finding.value == 4e-4 and "at step 5 (beyond the bound at steps 4, 5, 6)" in (
        finding.text
    )
    assert finding.level == "yellow" and finding.short_name == "token entropy vs first steps"


def test_baseline_with_other_parameters_gets_a_note(document):
    other = copy.deepcopy(document)
    other["params"]["analysis"]["clip"] = [0.1, 0.1]
    result = verdict(Report.from_dict(document), None, Report.from_dict(other))
    (note,) = [n for n in result.notes if n.key == "relative.params"]
    assert "clip [0.1, 0.1] there, [0.2, 0.28] here" in note.text
    assert verdict(Report.from_dict(document), None, Report.from_dict(document)).notes == ()


# ------------------------------------------------ policy drift per update, whole-step rule


def test_policy_drift_is_judged_at_the_update_where_it_is_largest(document):
    # pooled over the step 4e-3 (green), but mini-batch 1 reached 0.012 (yellow)
    stale = staleness(1.0)
    stale["minibatches"]["1"]["k3"] = 0.012
    findings = judged(document, staleness=stale, **{"mismatch/policy/k3": 0.004})
    drift = findings["staleness.minibatches.1.k3"]
    assert "mismatch.policy.k3" not in findings
    assert (drift.level, drift.value, drift.threshold) == ("yellow", 0.012, 0.01)
    assert "k3 = 0.012 per token in mini-batch 1 (after 1 update; pooled 4e-3)" in drift.text
    assert drift.short_name == "policy drift" and "Spinning Up" in drift.source
    # every mini-batch below the pooled value: the pooled one is judged, as without the key
    stale["minibatches"]["1"]["k3"] = 0.001
    findings = judged(document, staleness=stale, **{"mismatch/policy/k3": 0.004})
    assert findings["mismatch.policy.k3"].value == 0.004
    # a train/inference ratio in the staleness section is no policy drift
    engine = judged(
        document, staleness=staleness(1.0),
        **{"mismatch/pairs/policy": "current/engine", "mismatch/rollout": None},
    )  # fmt: skip
    assert not [key for key in engine if key.endswith(".k3") and "minibatches" in key]


def trl_settings(**changes) -> dict:
    """A params.trainer block as analyze writes it from a TRL capture's part file."""
    settings = {"num_iterations": 1, "steps_per_generation": 1, "gradient_accumulation_steps": 1}
    return {
        "framework": "trl", "settings": {**settings, **changes}, "reward_functions": [],
        "source": "recorded by the capture in part.pt", "applied": {},
    }  # fmt: skip


def on_policy_document(document: dict, on: float, trainer: dict | None = None) -> dict:
    doc = document_with(document, **{"params/trainer": trainer or trl_settings()})
    doc["ratios"]["token"]["proportion_pooled"] = {"on": on, "above": 1 - on, "below": 0.0}
    return doc


@pytest.mark.parametrize(("on", "level"), [(1.0, "green"), (0.97, "yellow")])
def test_whole_step_on_policy_from_recorded_trl_settings(document, on, level):
    findings = judged(on_policy_document(document, on))
    finding = findings["ratios.token.proportion_pooled.on"]
    assert finding.level == level and finding.value == pytest.approx(1 - on, abs=1e-15)
    assert "gradient_accumulation_steps=1 is a multiple of" in finding.source
    assert "old_per_token_logps to None" in finding.source  # TRL's own rule, cited
    # with a minibatch key too, the whole step replaces the first-mini-batch rule
    both = judged(on_policy_document(document, on), staleness=staleness(1.0))
    assert "ratios.token.proportion_pooled.on" in both
    assert "staleness.minibatches.0.exact_on" not in both


@pytest.mark.parametrize(
    "trainer",
    [
        trl_settings(steps_per_generation=4),  # 4 optimizer steps per generation
        trl_settings(num_iterations=2),  # the second pass follows an update
        {**trl_settings(), "source": "TRL's documented defaults (--trainer trl)"},
        {**trl_settings(), "framework": "verl"},
    ],
)
def test_whole_step_rule_needs_recorded_on_policy_trl_settings(document, trainer):
    findings = judged(on_policy_document(document, 0.5, trainer))
    assert "ratios.token.proportion_pooled.on" not in findings


def verl_settings_block(**changes) -> dict:
    """A params.trainer block as analyze writes it from a verl capture's part file."""
    settings = {
        "data.train_batch_size": 32, "actor.ppo_mini_batch_size": 32, "actor.ppo_epochs": 1,
        "actor.use_rollout_log_probs": None, "algorithm.rollout_correction.bypass_mode": False,
    }  # fmt: skip
    return {**trl_settings(), "framework": "verl", "settings": {**settings, **changes}}


@pytest.mark.parametrize(("on", "level"), [(1.0, "green"), (0.97, "yellow")])
def test_whole_step_on_policy_from_recorded_verl_settings(document, on, level):
    findings = judged(on_policy_document(document, on, verl_settings_block()))
    finding = findings["ratios.token.proportion_pooled.on"]
    assert finding.level == level and finding.value == pytest.approx(1 - on, abs=1e-15)
    assert "train_batch_size=32 <= actor.ppo_mini_batch_size=32" in finding.source
    assert "dp_actor.py 591-592" in finding.source  # verl's own rule, cited
    assert "old_per_token_logps" not in finding.source  # not TRL's
    both = judged(on_policy_document(document, on, verl_settings_block()), staleness=staleness(1.0))
    assert "ratios.token.proportion_pooled.on" in both
    assert "staleness.minibatches.0.exact_on" not in both


@pytest.mark.parametrize(
    "trainer",
    [
        verl_settings_block(**{"data.train_batch_size": 128}),  # 4 mini-batches
        verl_settings_block(**{"actor.ppo_epochs": 2}),  # the second epoch follows an update
        verl_settings_block(**{"algorithm.rollout_correction.bypass_mode": True}),
        verl_settings_block(**{"data.train_batch_size": None}),  # the actor's config alone
        {**verl_settings_block(), "source": "verl's documented defaults (--trainer verl)"},
    ],
)
def test_whole_step_rule_needs_recorded_on_policy_verl_settings(document, trainer):
    findings = judged(on_policy_document(document, 0.5, trainer))
    assert "ratios.token.proportion_pooled.on" not in findings
    # with several mini-batches, the first-mini-batch rule still judges mini-batch 0
    keyed = judged(on_policy_document(document, 0.5, trainer), staleness=staleness(0.9))
    assert keyed["staleness.minibatches.0.exact_on"].level == "yellow"


def test_whole_step_rule_on_a_real_trl_capture_file(tmp_path):
    """The TRL export's first 32 rows (mini-batch 0: exactly on-policy) written as a TRL
    capture's part file with on-policy settings; analyze reads them from the file."""
    import torch

    from ratioscope.analysis.pipeline import analyze
    from ratioscope.data.trainer_settings import SETTINGS_KEY, TrainerSettings

    full = torch.load(ROOT / "sample_data/trl/step_0032.pt", weights_only=True)
    part = {k: v[:32] if torch.is_tensor(v) else v for k, v in full.items()}
    settings = TrainerSettings("trl", trl_settings()["settings"])
    part[SETTINGS_KEY] = settings.to_json()
    mask = part["completion_mask"].bool()
    assert torch.equal(part["per_token_logps"][mask], part["old_per_token_logps"][mask])
    torch.save(part, tmp_path / "exact.pt")
    noisy = dict(part)
    noise = 0.01 * torch.randn(mask.shape, generator=torch.Generator().manual_seed(0))
    noisy["per_token_logps"] = part["per_token_logps"] + noise * mask
    torch.save(noisy, tmp_path / "noisy.pt")
    levels = {}
    for name in ("exact", "noisy"):
        findings = {f.key: f for f in verdict(analyze(tmp_path / f"{name}.pt", device="cpu"))}
        levels[name] = findings["ratios.token.proportion_pooled.on"]
    assert (levels["exact"].level, levels["exact"].value) == ("green", 0.0)
    assert (levels["noisy"].level, levels["noisy"].value) == ("yellow", 1.0)
    assert "recorded by the capture in" in levels["noisy"].source
