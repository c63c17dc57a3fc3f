"""``check`` on timelines: series rules (last-N aggregates, slopes, change flags).

Timelines are built by hand (:func:`timeline`) in the layout ``ratioscope timeline
--json`` writes; every expected aggregate and slope is computed independently here
(numpy's polyfit for slopes) or by hand.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.errors import ReportError, RulesError
from ratioscope.judgement.rules import evaluate, load_rules, parse_rules, series_slope
from ratioscope.render.ci.check import junit_xml, markdown_summary

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
K3 = "mismatch.rollout.k3"
LFR = "ratios.kalman.lfr"


def timeline(series: dict[str, list[float | None]], steps=None, flags=None) -> dict:
    """A timeline document: one step per value, ``flags`` maps step -> flagged keys."""
    n = len(next(iter(series.values())))
    steps = list(steps) if steps is not None else [8 * (i + 1) for i in range(n)]
    flags = flags or {}
    return {
        "schema_version": 1,
        "kind": "timeline",
        "tool": {"name": "ratioscope", "version": "test"},
        "params": {},
        "headlines": [{"key": key, "label": key, "unit": ""} for key in series],
        "steps": [
            {
                "step": step,
                "inputs": [f"step_{step:04d}.pt"],
                "values": {key: values[i] for key, values in series.items()},
                "flags": flags.get(step, []),
            }
            for i, step in enumerate(steps)
        ],
        "verdict": None,
        "warnings": [],
    }


RUN_K3 = [1e-4, 2e-4, 3e-4, 5e-4, 8e-4, 1.3e-3]
RUN = timeline(
    {K3: RUN_K3, LFR: [0.7, 0.68, None, 0.66, 0.65, 0.6]},
    flags={40: [K3], 48: [K3, LFR]},
)


def only(text: str, document: dict = RUN, baseline: dict | None = None):
    result = evaluate(document, parse_rules(text, "trend.toml"), baseline)
    assert len(result.outcomes) == 1
    return result.outcomes[0]


@pytest.mark.parametrize(
    ("aggregate", "last", "expected"),
    [
        ("mean", 3, (5e-4 + 8e-4 + 1.3e-3) / 3),
        ("max", 4, 1.3e-3),
        ("min", 2, 8e-4),
        ("last", 3, 1.3e-3),
        ("mean", None, (1e-4 + 2e-4 + 3e-4 + 5e-4 + 8e-4 + 1.3e-3) / 6),
    ],
)
def test_aggregates_over_the_last_steps(aggregate, last, expected):
    window = "" if last is None else f"last = {last}\n"
    outcome = only(f'[[rule]]\nseries = "{K3}"\n{window}aggregate = "{aggregate}"\nmax = 1e-3\n')
    assert outcome.value == pytest.approx(expected, rel=1e-12)
    assert outcome.verdict == ("pass" if expected <= 1e-3 else "fail")


def test_null_steps_are_skipped_and_an_all_null_window_is_an_error():
    # LFR is null at step 24: the mean of the last 4 is over 3 values
    outcome = only(f'[[rule]]\nseries = "{LFR}"\nlast = 4\naggregate = "mean"\nmin = 0.5\n')
    assert outcome.value == pytest.approx((0.66 + 0.65 + 0.6) / 3)
    doc = timeline({LFR: [0.7, None, None]})
    outcome = only(f'[[rule]]\nseries = "{LFR}"\nlast = 2\naggregate = "mean"\nmin = 0.5\n', doc)
    assert outcome.verdict == "error" and outcome.value is None
    last = only(f'[[rule]]\nseries = "{LFR}"\nmin = 0.5\n', doc)  # aggregate "last": null
    assert last.verdict == "error"


def test_slope_against_numpy():
    rng = np.random.default_rng(0)
    steps = [3, 5, 9, 10, 14, 20, 21]
    values = list(rng.normal(size=len(steps)))
    expected = np.polyfit(steps, values, 1)[0]
    assert series_slope(steps, values) == pytest.approx(expected, rel=1e-10)
    doc = timeline({K3: values}, steps=steps)
    outcome = only(f'[[rule]]\nseries = "{K3}"\nlast = 5\nslope_max = 10\n', doc)
    assert outcome.value == pytest.approx(np.polyfit(steps[-5:], values[-5:], 1)[0], rel=1e-10)
    assert outcome.verdict == "pass"


def test_rising_mismatch_fails_a_slope_bound():
    # the last 3 steps (32, 40, 48): k3 5e-4, 8e-4, 1.3e-3 -> slope (1.3e-3 - 5e-4) / 16 = 5e-5
    outcome = only(f'[[rule]]\nseries = "{K3}"\nlast = 3\nslope_max = 1e-5\n')
    assert outcome.value == pytest.approx(5e-5)
    assert outcome.verdict == "fail"
    assert outcome.bound_description == "<= 1e-05 per step (slope)"
    # LFR at steps 32, 40, 48: 0.66, 0.65, 0.6
    falling = only(f'[[rule]]\nseries = "{LFR}"\nlast = 3\nslope_min = -1e-3\n')
    assert falling.value == pytest.approx(np.polyfit([32, 40, 48], [0.66, 0.65, 0.6], 1)[0])
    assert falling.verdict == "fail"


def test_slope_needs_two_steps_with_values():
    doc = timeline({LFR: [0.7, None, 0.6]})
    outcome = only(f'[[rule]]\nseries = "{LFR}"\nlast = 2\nslope_max = 1\n', doc)
    assert outcome.verdict == "error" and "fewer than 2 steps" in outcome.reason


def test_no_flag_after():
    outcome = only(f'[[rule]]\nseries = "{K3}"\nno_flag_after = 32\n')
    assert outcome.verdict == "fail" and outcome.value == 2
    assert outcome.reason == "flagged at step(s) 40, 48, after step 32"
    assert outcome.bound_description == "<= 0 flags after step 32"
    assert only(f'[[rule]]\nseries = "{K3}"\nno_flag_after = 48\n').verdict == "pass"
    assert only(f'[[rule]]\nseries = "{LFR}"\nno_flag_after = 40\n').value == 1


def test_relative_bounds_against_a_baseline_timeline():
    base = timeline({K3: [1e-4, 1e-4, 2e-4, 2e-4, 2e-4, 4e-4], LFR: [0.7] * 6})
    outcome = only(
        f'[[rule]]\nseries = "{K3}"\nlast = 2\naggregate = "mean"\nmax_increase_pct = 100\n',
        baseline=base,
    )
    # run: mean(8e-4, 1.3e-3) = 1.05e-3; baseline: mean(2e-4, 4e-4) = 3e-4; bound 6e-4
    assert outcome.value == pytest.approx(1.05e-3)
    assert outcome.baseline == pytest.approx(3e-4)
    assert outcome.bounds[0].threshold == pytest.approx(6e-4)
    assert outcome.verdict == "fail"
    assert outcome.change_pct == pytest.approx(250.0)


def test_relative_bound_without_baseline_is_a_setup_error():
    with pytest.raises(RulesError, match="no baseline was given"):
        only(f'[[rule]]\nseries = "{K3}"\nmax_increase = 1\n')


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'[[rule]]\npath = "{K3}"\nseries = "{K3}"\nmax = 1\n', "has both 'path'"),
        (f'[[rule]]\npath = "{K3}"\nlast = 3\nmax = 1\n', "'last' applies to a timeline series"),
        (
            f'[[rule]]\nseries = "{K3}"\naggregate = "median"\nmax = 1\n',
            "'aggregate' must be one of",
        ),
        (f'[[rule]]\nseries = "{K3}"\nlast = 0\nmax = 1\n', "'last' must be a whole number"),
        (f'[[rule]]\nseries = "{K3}"\nslope_max = 1\nmax = 2\n', "write one rule for each"),
        (f'[[rule]]\nseries = "{K3}"\nlast = 1\nslope_max = 1\n', "a slope needs 'last' >= 2"),
        (f'[[rule]]\nseries = "{K3}"\nno_flag_after = 3.5\n', "'no_flag_after' must be a step"),
        (f'[[rule]]\nseries = "{K3}"\nlast = 3\n', "no bound"),
    ],
)
def test_malformed_series_rules(text, message):
    with pytest.raises(RulesError) as error:
        parse_rules(text, "trend.toml")
    assert message in str(error.value)
    assert str(error.value).startswith("trend.toml: rule 1")


def test_a_missing_series_is_one_sentence():
    with pytest.raises(ReportError) as error:
        evaluate(RUN, parse_rules('[[rule]]\nseries = "mismatch.rollout.k2"\nmax = 1\n', "t.toml"),
                 report_name="timeline.json")  # fmt: skip
    message = str(error.value)
    assert message.startswith("timeline.json: rule 1 (series 'mismatch.rollout.k2') of t.toml: ")
    assert "no series 'mismatch.rollout.k2' in the timeline" in message
    assert f"(did you mean '{K3}'?)" in message and LFR in message


def test_report_rules_and_timelines_do_not_mix():
    with pytest.raises(RulesError, match="is a timeline; check a series of it with series ="):
        evaluate(RUN, parse_rules(f'[[rule]]\npath = "{K3}"\nmax = 1\n', "r.toml"),
                 report_name="timeline.json")  # fmt: skip
    report = {"schema_version": 1, "mismatch": {"rollout": {"k3": 1e-4}}}
    with pytest.raises(RulesError, match="is not a timeline"):
        evaluate(report, parse_rules(f'[[rule]]\nseries = "{K3}"\nmax = 1\n', "t.toml"))
    with pytest.raises(ReportError, match="compare like with like"):
        evaluate(RUN, parse_rules(f'[[rule]]\nseries = "{K3}"\nmax_increase = 1\n', "t.toml"),
                 report)  # fmt: skip


def test_outputs_name_the_series_and_measure():
    rules = parse_rules(
        f'[[rule]]\nseries = "{K3}"\nlast = 3\naggregate = "max"\nmax = 1e-3\n'
        f'[[rule]]\nseries = "{K3}"\nno_flag_after = 32\n',
        "trend.toml",
    )
    result = evaluate(RUN, rules, report_name="timeline.json")
    assert [o.verdict for o in result.outcomes] == ["fail", "fail"]
    assert result.outcomes[0].rule.label == f"{K3}: max of the last 3 steps"
    xml = ET.fromstring(junit_xml(result))
    cases = xml.findall(".//testcase")
    assert [c.get("name") for c in cases] == [
        f"{K3}: max of the last 3 steps",
        f"{K3}: change flags after step 32",
    ]
    assert cases[1].find("failure").get("message") == "flagged at step(s) 40, 48, after step 32"
    summary = markdown_summary(result)
    assert "**ratioscope check: FAIL**" in summary and "0 flags after step 32" in summary


def test_cli_on_a_timeline_file(tmp_path):
    run, base = tmp_path / "timeline.json", tmp_path / "base.json"
    drift = "mismatch.policy.k3"
    run.write_text(json.dumps(timeline({K3: RUN_K3, drift: [1e-4] * 6}, flags={40: [K3]})))
    base.write_text(json.dumps(timeline({K3: [1e-4] * 6, drift: [1e-4] * 6})))
    rules = ROOT / "examples" / "timeline_rules.toml"
    junit = tmp_path / "check.xml"
    arguments = ["--rules", str(rules), "--baseline", str(base), "--junit", str(junit)]
    result = runner.invoke(app, ["check", str(run), *arguments], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "regression" in result.stderr and "3 of 4 rules did not hold" in result.stderr
    assert junit.exists()
    assert "flagged at step(s) 40, after step 8" in result.stdout
    # the same file checked against itself: only the absolute and flag rules can fail
    result = runner.invoke(
        app, ["check", str(base), "--rules", str(rules), "--baseline", str(base)]
    )
    assert result.exit_code == 0, result.output
    # a report rules file on a timeline: exit 2, one line
    result = runner.invoke(
        app, ["check", str(run), "--rules", str(ROOT / "examples" / "rules.toml")]
    )
    assert result.exit_code == 2
    assert "is a timeline" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_example_timeline_rules_parse():
    rules = load_rules(ROOT / "examples" / "timeline_rules.toml")
    assert all(rule.target == "timeline" for rule in rules.rules)


@pytest.mark.parametrize("run", ["verl", "runs/healthy-s1/capture"])
def test_rules_on_a_real_timeline(tmp_path, run):
    """``ratioscope timeline --json`` of a healthy run checked against itself with the
    example rules: passes (the bundled 30-step run's train/inference k3 moves between
    1e-15 and 7e-13, float32 rounding, which the change rule once flagged)."""
    import typer

    names = {command.name for command in typer.main.get_command(app).commands.values()}
    if "timeline" not in names:
        pytest.skip("ratioscope timeline is not registered in this tree")
    out = tmp_path / "timeline.json"
    made = runner.invoke(
        app, ["timeline", str(ROOT / "sample_data" / run), "--json", str(out), "-q", "--no-cache"]
    )
    assert made.exit_code == 0, made.output
    rules = str(ROOT / "examples" / "timeline_rules.toml")
    result = runner.invoke(app, ["check", str(out), "--rules", rules, "--baseline", str(out)])
    assert result.exit_code == 0, result.output
    assert "PASS: all 4 rules hold" in result.stdout
