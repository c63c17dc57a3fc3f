"""Tests for the ``check`` regression gate: rule parsing, bound semantics, outputs, CLI.

Reports are small hand-built dicts (schema_version 1); every expected threshold and
verdict below is computed by hand from the rule semantics in ``ratioscope/judgement/rules.py``.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.errors import ReportError, RulesError
from ratioscope.io.documents import lookup
from ratioscope.judgement.rules import (
    BOUND_KEYS,
    RELATIVE_BOUNDS,
    CheckResult,
    evaluate,
    load_rules,
    parse_rules,
)
from ratioscope.render.ci.check import junit_xml, markdown_summary
from ratioscope.render.terminal.check import check_table
from ratioscope.report.files import run_check

runner = CliRunner()


def analyze_report(
    switch: float | None = 0.01, chi2: float | None = 0.10, means=(0.1, 0.2, 0.3)
) -> dict:
    return {
        "schema_version": 1,
        "tool": {"name": "ratioscope", "version": "0.1.0", "created": "2025-01-01T00:00:00+00:00"},
        "ratios": {
            "token": {"switch_frequency": 0.43, "variance": {"global": 0.19}},
            "kalman": {
                "switch_frequency": switch,
                "window_frequency": {"mean": list(means), "count": [3, 3, 2]},
            },
        },
        "mismatch": {"policy": {"chi2_token": chi2}},
        "covariance": None,
        "warnings": ["covariance: no 'advantages' in the dump"],
    }


def eval_report(pass8: float = 0.80, ucc8: float = 3.0) -> dict:
    return {
        "schema_version": 1,
        "inputs": [{"path": "samples.jsonl"}],
        "params": {"k": [1, 8]},
        "by_method": {
            "grpo": {"pass_at_k": {"1": 0.5, "8": pass8}, "ucc_at_k": {"1": 0.5, "8": ucc8}}
        },
    }


def write(path: Path, content: dict | str) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def one(text: str, report: dict, baseline: dict | None = None):
    """Evaluate a rules text against dicts and return the single outcome."""
    result = evaluate(report, parse_rules(text, "rules.toml"), baseline)
    assert len(result.outcomes) == 1
    return result.outcomes[0]


# --------------------------------------------------------------------- bound semantics


@pytest.mark.parametrize(
    ("value", "verdict"), [(0.04, "pass"), (0.05, "pass"), (0.0501, "fail"), (-1.0, "pass")]
)
def test_max_is_inclusive(value, verdict):
    outcome = one(
        '[[rule]]\npath = "ratios.kalman.switch_frequency"\nmax = 0.05\n',
        analyze_report(switch=value),
    )
    assert outcome.verdict == verdict
    assert outcome.value == value
    assert outcome.bounds[0].threshold == 0.05


@pytest.mark.parametrize(("value", "verdict"), [(0.5, "pass"), (0.3, "pass"), (0.2999, "fail")])
def test_min_is_inclusive(value, verdict):
    outcome = one('[[rule]]\npath = "x"\nmin = 0.3\n', {"x": value})
    assert outcome.verdict == verdict


def test_min_and_max_in_one_rule_name_the_broken_bound():
    text = '[[rule]]\npath = "x"\nmin = 0.2\nmax = 0.4\n'
    assert one(text, {"x": 0.3}).verdict == "pass"
    low, high = one(text, {"x": 0.1}), one(text, {"x": 0.5})
    assert low.verdict == high.verdict == "fail"
    assert "below 0.2" in low.reason and "min" in low.reason
    assert "above 0.4" in high.reason and "max" in high.reason


@pytest.mark.parametrize(
    ("value", "verdict"), [(0.55, "pass"), (0.6, "pass"), (0.61, "fail"), (0.1, "pass")]
)
def test_max_increase_absolute(value, verdict):
    # baseline 0.5 + 0.1 allowed -> threshold 0.6
    outcome = one('[[rule]]\npath = "x"\nmax_increase = 0.1\n', {"x": value}, {"x": 0.5})
    assert outcome.verdict == verdict
    assert outcome.baseline == 0.5
    assert outcome.bounds[0].threshold == pytest.approx(0.6, abs=1e-15)


@pytest.mark.parametrize(
    ("value", "verdict"), [(0.45, "pass"), (0.4, "pass"), (0.39, "fail"), (0.9, "pass")]
)
def test_max_decrease_absolute(value, verdict):
    outcome = one('[[rule]]\npath = "x"\nmax_decrease = 0.1\n', {"x": value}, {"x": 0.5})
    assert outcome.verdict == verdict
    assert outcome.bounds[0].threshold == pytest.approx(0.4, abs=1e-15)


@pytest.mark.parametrize(
    ("value", "verdict"),
    # 0.3 + 10% = 0.33 exactly on paper; binary rounding must not fail the boundary
    [(0.32, "pass"), (0.33, "pass"), (0.3301, "fail"), (0.0, "pass")],
)
def test_max_increase_pct(value, verdict):
    outcome = one('[[rule]]\npath = "x"\nmax_increase_pct = 10\n', {"x": value}, {"x": 0.3})
    assert outcome.verdict == verdict
    assert outcome.bounds[0].threshold == pytest.approx(0.33, rel=1e-12)


@pytest.mark.parametrize(
    ("value", "verdict"), [(0.78, "pass"), (0.76, "pass"), (0.7599, "fail"), (1.0, "pass")]
)
def test_max_decrease_pct(value, verdict):
    # 0.8 - 5% of 0.8 = 0.76
    outcome = one('[[rule]]\npath = "x"\nmax_decrease_pct = 5\n', {"x": value}, {"x": 0.8})
    assert outcome.verdict == verdict
    assert outcome.bounds[0].threshold == pytest.approx(0.76, rel=1e-12)


def test_percent_of_a_negative_baseline_uses_its_magnitude():
    # baseline -2: +10% allows up to -1.8, -10% allows down to -2.2
    up = '[[rule]]\npath = "x"\nmax_increase_pct = 10\n'
    down = '[[rule]]\npath = "x"\nmax_decrease_pct = 10\n'
    base = {"x": -2.0}
    assert one(up, {"x": -1.85}, base).verdict == "pass"
    assert one(up, {"x": -1.7}, base).verdict == "fail"
    assert one(down, {"x": -2.15}, base).verdict == "pass"
    assert one(down, {"x": -2.3}, base).verdict == "fail"
    assert one(up, {"x": -1.7}, base).change_pct == pytest.approx(15.0)


def test_percent_against_a_zero_baseline_allows_no_change_in_its_direction():
    up = '[[rule]]\npath = "x"\nmax_increase_pct = 50\n'
    down = '[[rule]]\npath = "x"\nmax_decrease_pct = 50\n'
    base = {"x": 0}
    assert one(up, {"x": 0.0}, base).verdict == "pass"
    assert one(up, {"x": 1e-12}, base).verdict == "fail"
    assert one(up, {"x": -1e-12}, base).verdict == "pass"
    assert one(down, {"x": -1e-12}, base).verdict == "fail"
    assert one(down, {"x": 1e-12}, base).verdict == "pass"
    assert one(up, {"x": 1.0}, base).change_pct is None


@settings(max_examples=200, deadline=None)
@given(
    base=st.floats(-1e6, 1e6).filter(lambda b: abs(b) > 1e-6),
    value=st.floats(-1e6, 1e6),
    pct=st.floats(0, 500),
)
def test_percent_bounds_match_the_percent_change(base, value, pct):
    change_pct = 100.0 * (value - base) / abs(base)
    assume(
        abs(change_pct - pct) > 1e-6 * max(1.0, pct)
        and abs(change_pct + pct) > 1e-6 * max(1.0, pct)
    )
    up = one(f'[[rule]]\npath = "x"\nmax_increase_pct = {pct!r}\n', {"x": value}, {"x": base})
    down = one(f'[[rule]]\npath = "x"\nmax_decrease_pct = {pct!r}\n', {"x": value}, {"x": base})
    assert (up.verdict == "pass") == (change_pct <= pct)
    assert (down.verdict == "pass") == (change_pct >= -pct)


def test_list_index_paths_and_negative_index():
    report, base = analyze_report(means=(0.1, 0.2, 0.3)), analyze_report(means=(0.1, 0.2, 0.25))
    first = one('[[rule]]\npath = "ratios.kalman.window_frequency.mean.0"\nmax = 0.15\n', report)
    last = one(
        '[[rule]]\npath = "ratios.kalman.window_frequency.mean.-1"\nmax_increase = 0.04\n',
        report,
        base,
    )
    assert (first.value, first.verdict) == (0.1, "pass")
    assert (last.value, last.baseline, last.verdict) == (0.3, 0.25, "fail")


def test_eval_report_numeric_keys():
    text = '[[rule]]\npath = "by_method.grpo.pass_at_k.8"\nmax_decrease = 0.02\n'
    assert one(text, eval_report(pass8=0.79), eval_report(pass8=0.80)).verdict == "pass"
    outcome = one(text, eval_report(pass8=0.77), eval_report(pass8=0.80))
    assert outcome.verdict == "fail"
    assert outcome.change == pytest.approx(-0.03)


def test_keys_containing_dots_are_addressable():
    report = {
        "quantiles": {"0.5": 0.1, "0.99": 0.7},
        "a": {"0": {"5": 1.0}, "0.5": 2.0},  # both splits exist: the plain one wins
        "rows": [{"1.5": 3.0}],
        "by_method": {"qwen2.5-grpo": {"pass_at_k": {"8": 0.9}}},
    }
    assert lookup(report, "quantiles.0.99") == 0.7
    assert lookup(report, "a.0.5") == 1.0
    assert lookup(report, "rows.-1.1.5") == 3.0
    assert lookup(report, "by_method.qwen2.5-grpo.pass_at_k.8") == 0.9
    outcome = one('[[rule]]\npath = "quantiles.0.99"\nmax_increase = 0.05\n', report, report)
    assert (outcome.value, outcome.baseline, outcome.verdict) == (0.7, 0.7, "pass")
    with pytest.raises(ReportError, match=r"no 'quantiles\.0'"):
        one('[[rule]]\npath = "quantiles.0.9"\nmax = 1\n', report)


def test_null_value_is_an_error_outcome_not_an_exception():
    outcome = one(
        '[[rule]]\npath = "mismatch.policy.chi2_token"\nmax = 1\n', analyze_report(chi2=None)
    )
    assert outcome.verdict == "error"
    assert outcome.value is None
    assert "null" in outcome.reason
    assert outcome.bounds[0].holds is None


def test_path_through_a_null_section_is_an_error_outcome():
    outcome = one('[[rule]]\npath = "covariance.weights.mean"\nmin = 0.5\n', analyze_report())
    assert outcome.verdict == "error"
    assert "'covariance' is null" in outcome.reason


@pytest.mark.parametrize("literal", ["NaN", "Infinity"])
def test_non_finite_json_values_are_error_outcomes(tmp_path, literal):
    report = write(tmp_path / "r.json", f'{{"schema_version": 1, "x": {literal}}}')
    rules = write(tmp_path / "rules.toml", '[[rule]]\npath = "x"\nmin = 0\n')
    result = run_check(report, rules)
    assert result.outcomes[0].verdict == "error"
    assert not result.passed


def test_absolute_rule_shows_baseline_but_does_not_need_it():
    text = '[[rule]]\npath = "x"\nmax = 1\n'
    assert one(text, {"x": 0.5}, {"x": 0.25}).baseline == 0.25
    outcome = one(text, {"x": 0.5}, {"other": 1})
    assert (outcome.verdict, outcome.baseline) == ("pass", None)


def test_result_counts_and_summary_line():
    rules = parse_rules(
        "".join(f'[[rule]]\npath = "{key}"\nmax = 1\n' for key in "abc"),
        "r.toml",
    )
    result = evaluate({"a": 0.5, "b": 2.0, "c": None}, rules)
    assert (result.count("pass"), result.count("fail"), result.count("error")) == (1, 1, 1)
    assert not result.passed
    assert result.summary_line().startswith("FAIL: 2 of 3 rules")
    assert evaluate({"a": 0, "b": 0, "c": 0}, rules).summary_line() == "PASS: all 3 rules hold"


# ---------------------------------------------------------------- rule/report errors


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[[rule]]\npath = "x"\nmax = 1\nmax_increse = 2\n', "did you mean 'max_increase'"),
        ('[[rule]]\npath = "x"\n', "no bound"),
        ("[[rule]]\nmax = 1\n", "'path' is required"),
        ('[[rule]]\npath = "a..b"\nmax = 1\n', "empty part"),
        ('[[rule]]\npath = "x"\nmax = "0.5"\n', "'max' must be a number"),
        ('[[rule]]\npath = "x"\nmax = true\n', "'max' must be a number"),
        ('[[rule]]\npath = "x"\nmax = nan\n', "finite"),
        ('[[rule]]\npath = "x"\nmin = 2\nmax = 1\n', "larger than 'max'"),
        ('[[rule]]\npath = "x"\nmax_decrease = -0.1\n', "must be >= 0"),
        ('[[rule]]\npath = "x"\nmax = 1\nname = 3\n', "'name' must be a string"),
        ('[[rules]]\npath = "x"\nmax = 1\n', "did you mean 'rule'"),
        ('[rule]\npath = "x"\nmax = 1\n', "[[rule]], not [rule]"),
        ("", "no rules"),
        ('[[rule]]\npath = "x"\nmax = \n', "not valid TOML"),
    ],
)
def test_malformed_rules_name_the_file_and_problem(text, fragment):
    with pytest.raises(RulesError) as caught:
        parse_rules(text, "ci/rules.toml")
    message = str(caught.value)
    assert message.startswith("ci/rules.toml: ")
    assert fragment in message
    assert caught.value.exit_code == 2


def test_rule_errors_name_index_and_path():
    text = '[[rule]]\npath = "a"\nmax = 1\n[[rule]]\npath = "b.c"\nmax = 1\nbogus = 1\n'
    with pytest.raises(RulesError, match=r"rule 2 \(path 'b.c'\): unknown key 'bogus'"):
        parse_rules(text, "r.toml")


def test_relative_rule_without_baseline_is_a_rules_error():
    rules = parse_rules(
        '[[rule]]\npath = "x"\nmax = 1\n[[rule]]\npath = "y"\nmax_increase_pct = 5\n', "r.toml"
    )
    with pytest.raises(RulesError, match=r"r.toml: rule 2 \(path 'y'\) has max_increase_pct"):
        evaluate({"x": 0, "y": 0}, rules, None)


def test_missing_path_is_a_report_error_listing_what_exists():
    rules = parse_rules('[[rule]]\npath = "ratios.kalman.lfr"\nmax = 1\n', "r.toml")
    with pytest.raises(ReportError) as caught:
        evaluate(analyze_report(), rules, report_name="run.json")
    message = str(caught.value)
    assert message.startswith("run.json: rule 1 (path 'ratios.kalman.lfr') of r.toml")
    assert "switch_frequency" in message  # the keys that do exist are listed


def test_missing_path_in_baseline_for_relative_rule_is_an_error():
    rules = parse_rules('[[rule]]\npath = "x"\nmax_increase = 1\n', "r.toml")
    with pytest.raises(ReportError, match=r"base\.json"):
        evaluate({"x": 1}, rules, {"y": 1}, baseline_name="base.json")


def test_null_baseline_for_relative_rule_is_an_error():
    rules = parse_rules('[[rule]]\npath = "x"\nmax_increase = 1\n', "r.toml")
    with pytest.raises(ReportError, match="baseline value is null"):
        evaluate({"x": 1}, rules, {"x": None})


def test_index_out_of_range_is_a_missing_path():
    rules = parse_rules(
        '[[rule]]\npath = "ratios.kalman.window_frequency.mean.3"\nmax = 1\n', "r.toml"
    )
    with pytest.raises(ReportError, match="a list of 3 item"):
        evaluate(analyze_report(), rules)


def test_path_at_an_object_is_a_rules_error():
    rules = parse_rules('[[rule]]\npath = "ratios.kalman"\nmax = 1\n', "r.toml")
    with pytest.raises(RulesError, match="not a number"):
        evaluate(analyze_report(), rules)


def test_missing_toml_parser_on_old_python(monkeypatch):
    monkeypatch.setitem(sys.modules, "tomllib", None)
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(RulesError, match="needs the 'tomli' package"):
        parse_rules('[[rule]]\npath = "x"\nmax = 1\n', "r.toml")


def test_load_rules_reads_names_and_descriptions(tmp_path):
    path = write(
        tmp_path / "r.toml",
        '# comment\n[[rule]]\nname = "kalman switching"\ndescription = "KPO Table 2"\n'
        'path = "ratios.kalman.switch_frequency"\nmax = 0.05\n',
    )
    (rule,) = load_rules(path).rules
    assert (rule.label, rule.description, rule.max, rule.index) == (
        "kalman switching",
        "KPO Table 2",
        0.05,
        1,
    )


def test_unreadable_rules_file(tmp_path):
    with pytest.raises(RulesError, match="cannot read the rules file"):
        load_rules(tmp_path / "absent.toml")


# --------------------------------------------------------------------------- outputs


def mixed_result() -> CheckResult:
    rules = parse_rules(
        '[[rule]]\npath = "ratios.kalman.switch_frequency"\nmax = 0.05\n'
        '[[rule]]\nname = "chi2 | growth"\npath = "mismatch.policy.chi2_token"\n'
        "max_increase_pct = 10\n"
        '[[rule]]\npath = "ratios.kalman.window_frequency.mean.-1"\nmax_increase = 0.1\n'
        '[[rule]]\npath = "covariance.weights.mean"\nmin = 0.5\n',
        "rules.toml",
    )
    return evaluate(
        analyze_report(switch=0.06, chi2=0.12),
        rules,
        analyze_report(switch=0.04, chi2=0.10),
        report_name="run.json",
        baseline_name="base.json",
    )


def test_junit_xml_parses_with_counts_and_elements():
    root = ET.fromstring(junit_xml(mixed_result()))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "2", "1")
    (suite,) = root.findall("testsuite")
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == (
        "4",
        "2",
        "1",
        "0",
    )
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties == {"report": "run.json", "baseline": "base.json", "rules": "rules.toml"}
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "ratios.kalman.switch_frequency",
        "chi2 | growth",
        "ratios.kalman.window_frequency.mean.-1",
        "covariance.weights.mean",
    ]
    assert all(c.get("classname") == "ratioscope.check" for c in cases)
    assert [len(c.findall("failure")) for c in cases] == [1, 1, 0, 0]
    assert [len(c.findall("error")) for c in cases] == [0, 0, 0, 1]
    failure = cases[0].find("failure")
    assert failure.get("message") == "0.06 is above 0.05 (max = 0.05)"
    assert "path: ratios.kalman.switch_frequency" in failure.text
    assert "<= baseline + 10% = 0.11" in cases[1].find("failure").text


def test_junit_all_pass_has_no_failure_elements():
    rules = parse_rules('[[rule]]\npath = "x"\nmax = 1\n', "r.toml")
    root = ET.fromstring(junit_xml(evaluate({"x": 0.5}, rules)))
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("1", "0", "0")
    assert not list(root.iter("failure")) and not list(root.iter("error"))


def test_markdown_summary_has_verdict_line_and_one_row_per_rule():
    text = markdown_summary(mixed_result())
    lines = text.splitlines()
    assert lines[0].startswith("**ratioscope check: FAIL**: 3 of 4 rules did not hold")
    assert "report `run.json`" in lines[0] and "baseline `base.json`" in lines[0]
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 2 + 4
    assert table[1].startswith("|---:|")
    assert table[2].split(" | ")[6] == "**FAIL**"
    assert "chi2 \\| growth (`mismatch.policy.chi2_token`)" in table[3]
    assert "+0.02 (+20.0%)" in table[3]
    assert table[4].split(" | ")[6] == "pass"
    assert "**ERROR**" in table[5] and "| null |" in table[5]


def test_rich_table_lists_every_rule():
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(check_table(mixed_result()))
    text = console.export_text()
    for fragment in ("switch_frequency", "0.06", "0.04", "FAIL", "PASS", "ERROR", "null"):
        assert fragment in text
    assert text.count("FAIL") == 2


# ------------------------------------------------------------------------------ CLI


@pytest.fixture
def files(tmp_path):
    run = write(tmp_path / "run.json", analyze_report(switch=0.02, chi2=0.105))
    base = write(tmp_path / "base.json", analyze_report(switch=0.01, chi2=0.10))
    rules = write(
        tmp_path / "rules.toml",
        '[[rule]]\npath = "ratios.kalman.switch_frequency"\nmax = 0.05\n'
        '[[rule]]\npath = "mismatch.policy.chi2_token"\nmax_increase_pct = 10\n',
    )
    return tmp_path, run, base, rules


def invoke(*args: Path | str):
    return runner.invoke(app, ["check", *map(str, args)])


def test_cli_exit_0_when_all_rules_hold(files):
    tmp, run, base, rules = files
    junit, summary = tmp / "check.xml", tmp / "check.md"
    result = invoke(
        run, "--rules", rules, "--baseline", base, "--junit", junit, "--summary", summary
    )
    assert result.exit_code == 0, result.output
    assert "PASS: all 2 rules hold" in result.stdout
    assert ET.parse(junit).getroot().get("failures") == "0"
    assert summary.read_text().startswith("**ratioscope check: PASS**")


def test_cli_exit_1_writes_outputs_before_failing(files):
    tmp, _, base, rules = files
    worse = write(tmp / "worse.json", analyze_report(switch=0.2, chi2=0.2))
    junit, summary = tmp / "check.xml", tmp / "check.md"
    result = invoke(
        worse, "--rules", rules, "--baseline", base, "--junit", junit, "--summary", summary
    )
    assert result.exit_code == 1
    assert "FAIL: 2 of 2 rules did not hold" in result.stdout
    assert result.stderr.count("\n") == 1 and "worse.json" in result.stderr
    assert result.stderr.startswith("ratioscope: regression: ")
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures")) == ("2", "2")
    assert "**ratioscope check: FAIL**" in summary.read_text()


def test_cli_null_value_fails_the_gate(files):
    tmp, _, base, rules = files
    run = write(tmp / "null.json", analyze_report(chi2=None))
    result = invoke(run, "--rules", rules, "--baseline", base)
    assert result.exit_code == 1
    assert "ERROR" in result.stdout


def test_cli_absolute_rules_need_no_baseline(files):
    tmp, run, _, _ = files
    rules = write(
        tmp / "abs.toml", '[[rule]]\npath = "ratios.kalman.switch_frequency"\nmax = 0.01\n'
    )
    assert invoke(run, "--rules", rules).exit_code == 1


def bad_inputs(tmp: Path, run: Path, base: Path, rules: Path) -> dict[str, tuple[list, str]]:
    missing = write(tmp / "missing.toml", '[[rule]]\npath = "ratios.kalman.nope"\nmax = 1\n')
    bad_toml = write(tmp / "bad.toml", "[[rule]\npath = 1")
    unknown = write(tmp / "unknown.toml", '[[rule]]\npath = "x"\nmaximum = 1\n')
    foreign = write(tmp / "foreign.json", {"accuracy": 0.5})
    not_json = write(tmp / "broken.json", '{"schema_version": 1,')
    future = write(tmp / "future.json", {"schema_version": 99})
    return {
        "missing path": ([run, "--rules", missing], "no 'ratios.kalman.nope'"),
        "missing path in baseline": (
            [run, "--rules", rules, "--baseline", write(tmp / "old.json", {"schema_version": 1})],
            "old.json",
        ),
        "bad toml": ([run, "--rules", bad_toml], "not valid TOML"),
        "unknown key": ([run, "--rules", unknown], "unknown key 'maximum'"),
        "relative without baseline": ([run, "--rules", rules], "no baseline was given"),
        "absent report": (
            [tmp / "absent.json", "--rules", rules, "--baseline", base],
            "cannot read",
        ),
        "not a ratioscope report": (
            [foreign, "--rules", rules, "--baseline", base],
            "not a ratioscope",
        ),
        "not json": ([not_json, "--rules", rules, "--baseline", base], "not valid JSON"),
        "schema version": ([future, "--rules", rules, "--baseline", base], "schema version 99"),
        "absent rules": ([run, "--rules", tmp / "absent.toml"], "cannot read the rules file"),
        "output dir missing": (
            [run, "--rules", rules, "--baseline", base, "--summary", tmp / "no" / "s.md"],
            "does not exist",
        ),
    }


CASES = [
    "missing path",
    "missing path in baseline",
    "bad toml",
    "unknown key",
    "relative without baseline",
    "absent report",
    "not a ratioscope report",
    "not json",
    "schema version",
    "absent rules",
    "output dir missing",
]


@pytest.mark.parametrize("case", CASES)
def test_cli_exit_2_writes_nothing(files, case):
    tmp, run, base, rules = files
    args, fragment = bad_inputs(tmp, run, base, rules)[case]
    junit, summary = tmp / "check.xml", tmp / "check.md"
    outputs = ["--junit", junit] + ([] if "--summary" in map(str, args) else ["--summary", summary])
    result = invoke(*args, *outputs)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("ratioscope: error: ")
    assert result.stderr.count("\n") == 1
    assert fragment in result.stderr
    assert "Traceback" not in result.output
    assert not junit.exists() and not summary.exists()
    assert not [p.name for p in tmp.iterdir() if p.name.startswith(".check.")]  # no temp files


def test_cli_refuses_to_overwrite_an_input(files):
    _, run, base, rules = files
    before = run.read_bytes()
    result = invoke(run, "--rules", rules, "--baseline", base, "--junit", run)
    assert result.exit_code == 2
    assert run.read_bytes() == before


def test_cli_help_has_an_example():
    result = runner.invoke(app, ["check", "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.stdout and "--baseline" in result.stdout


def design_layout_report() -> dict:
    """An analyze report with the report layout of docs/formats.md for the three variants."""
    variant = {
        "proportion": {"up": 0.25, "down": 0.22, "on": 0.53},
        "run_length_mean": {"up": 1.5, "down": 1.4, "on": 2.0},
        "switch_frequency": 0.01,
        "lfr": 0.8,
        "variance": {"global": 0.19, "window_local": 0.15},
        "window_frequency": {"mean": [0.4, 0.5], "var": [0.01, 0.02], "count": [8, 6]},
        "clip_fraction": 0.02,
        "surrogate": -0.01,
    }
    return {
        "schema_version": 1,
        "ratios": {name: variant for name in ("token", "sequence", "kalman")},
        "mismatch": {"policy": {"chi2_token": 0.1}},
    }


ROOT = Path(__file__).resolve().parents[1]


def test_example_rules_fit_the_design_report_layout():
    """Every ratios.* path of the example exists in the report layout of docs/formats.md."""
    rules = load_rules(ROOT / "examples" / "rules.toml")
    report = design_layout_report()
    # the hand-made layout has only mismatch.policy.chi2_token: check the ratios rules
    shared = [rule for rule in rules.rules if not rule.path.startswith("mismatch.")]
    assert len(shared) >= 5
    result = evaluate(report, shared, report)  # raises when a path is not in the layout
    assert all(isinstance(outcome.value, float) for outcome in result.outcomes)


@pytest.fixture(scope="module")
def sample_reports(tmp_path_factory) -> dict[str, dict]:
    """Real analyze and eval-ucc reports of the bundled sample run, made by the CLI."""
    out = tmp_path_factory.mktemp("sample_reports")
    commands = {
        "analyze": ["analyze", str(ROOT / "sample_data" / "verl"), "--json", str(out / "a.json")],
        "eval": [
            "eval-ucc",
            str(ROOT / "sample_data" / "samples.jsonl"),
            "--json",
            str(out / "e.json"),
        ],
    }
    reports = {}
    for kind, args in commands.items():
        result = runner.invoke(app, [*args, "--quiet"])
        assert result.exit_code == 0, result.output
        reports[kind] = json.loads(Path(args[-1]).read_text())
    return reports


@pytest.mark.parametrize(("kind", "file"), [("analyze", "rules.toml"), ("eval", "eval_rules.toml")])
def test_example_rules_hold_on_the_sample_run(sample_reports, kind, file):
    """The examples pass on the bundled run: against itself as baseline, and absolutely."""
    rules = load_rules(ROOT / "examples" / file)
    report = sample_reports[kind]
    assert len(rules.rules) >= 6
    kinds = {key for rule in rules.rules for key in BOUND_KEYS if getattr(rule, key) is not None}
    assert kinds & {"min", "max"} and kinds & set(RELATIVE_BOUNDS)  # both kinds of bound
    result = evaluate(report, rules, report)
    assert result.passed, [(o.rule.path, o.reason) for o in result.outcomes if o.reason]
    for outcome in result.outcomes:
        for bound in outcome.bounds:
            if bound.kind in ("min", "max"):
                # room to spare: a healthy run is not on the edge of an absolute bound
                assert outcome.value != pytest.approx(bound.threshold, rel=0.05), outcome.rule


@pytest.mark.parametrize(
    ("path", "worse"),
    [
        ("mismatch.policy.chi2_token", 2.0),  # relative bound +50 %
        ("ratios.token.proportion.on", 0.5),  # absolute floor 0.25 / 10 points
        ("by_method.grpo.pass_at_k.1", 0.9),  # 2 points
    ],
)
def test_example_rules_catch_a_worse_value(sample_reports, path, worse):
    kind, file = (
        ("eval", "eval_rules.toml") if path.startswith("by_") else ("analyze", "rules.toml")
    )
    baseline = sample_reports[kind]
    report = json.loads(json.dumps(baseline))
    *parents, last = path.split(".")
    node = report
    for part in parents:
        node = node[part]
    node[last] *= worse
    result = evaluate(report, load_rules(ROOT / "examples" / file), baseline)
    assert [o.rule.path for o in result.outcomes if o.verdict == "fail"] == [path]


def test_rules_in_the_ci_guide_parse():
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    blocks = text.split("```toml\n")[1:]
    assert len(blocks) >= 1
    for block in blocks:
        parse_rules(block.split("```")[0], "docs/ci.md")


def test_rich_table_breaks_key_paths_only_after_dots():
    """At 100 columns the rule column is narrow; a key path wraps after a dot, so every
    name in it stays whole on one line (searchable, copyable)."""
    from rich.console import Console

    result = mixed_result()
    console = Console(record=True, width=100)
    console.print(check_table(result))
    lines = console.export_text().splitlines()
    for outcome in result.outcomes:
        for name in outcome.rule.path.split("."):
            assert any(name in line for line in lines), name


def test_dotted_lines_never_cut_inside_a_name():
    from ratioscope.render.terminal.check import dotted_lines

    path = "ratios.token.window_frequency.mean.-1"
    for width in range(1, len(path) + 2):
        lines = dotted_lines(path, width)
        assert "".join(lines) == path
        # a line is cut only after a dot; an overlong name keeps a line of its own
        assert all(line.endswith(".") for line in lines[:-1])
        assert all(len(line) <= width or line.count(".") <= 1 for line in lines)


def test_every_key_the_verdict_names_is_a_path_a_rule_can_check(tmp_path):
    """A finding's key (``trust_region.degenerate_share``, ...) is what a user puts in a
    rule to gate on it: each must be in the report JSON."""
    from typer.testing import CliRunner

    import ratioscope
    from ratioscope.cli import app

    sample = Path(__file__).resolve().parents[1] / "sample_data" / "verl"
    report = ratioscope.analyze(sample)
    keys = [finding.key for finding in report.verdict()]
    assert "trust_region.degenerate_share" in keys and len(keys) >= 10
    document = tmp_path / "run.json"
    report.write_json(document)
    rules = tmp_path / "rules.toml"
    rules.write_text(
        "".join(f'[[rule]]\nname = "{key}"\npath = "{key}"\nmax = 1e300\n\n' for key in keys)
    )
    result = CliRunner().invoke(app, ["check", str(document), "--rules", str(rules)])
    assert result.exit_code == 0, result.output
