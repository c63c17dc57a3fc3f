"""``ratioscope metrics``: the catalog of rule-addressable report keys cannot fall behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ratioscope.cli import app
from ratioscope.errors import ParameterError, ReportError
from ratioscope.io.documents import lookup
from ratioscope.report.catalog import (
    CATALOG,
    _matches,
    _report_items,
    entries_for,
    layout_keys,
    metrics,
)

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()

#: entries a default analysis of the sample run leaves null (--kalman-impl reference only)
ONLY_WITH_REFERENCE_FILTER = "ratios.*.closed_form_deviation."
#: keys the sample report cannot have: the reference filter's, a parameter written only
#: when set (--max-length), per reward function (no reader keeps them yet)
NOT_IN_THE_SAMPLE = (
    ONLY_WITH_REFERENCE_FILTER,
    "params.analysis.max_length",
    "params.analysis.max_lag",
    "policy_lag.",  # the sample run is synchronous: no policy versions
    "params.analysis.temperature",
    "params.analysis.top_p",
    "params.analysis.top_k",
    "sampling.truncation.",  # needs --top-p, --top-k or --temperature
    "vitals.reward.per_function.",
)


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory) -> Path:
    """The analyze report of the bundled sample run (both FPA methods, every section)."""
    import ratioscope

    path = tmp_path_factory.mktemp("metrics") / "run.json"
    ratioscope.analyze(ROOT / "sample_data" / "verl").write_json(path)
    return path


def test_every_key_of_the_report_layout_has_a_catalog_entry() -> None:
    missing = [key for key in layout_keys() if not entries_for(key)]
    assert not missing, f"add these report keys to ratioscope/report/catalog.py: {missing}"


def test_every_catalog_entry_matches_a_key_of_the_report_layout() -> None:
    layout = [key.split(".") for key in layout_keys()]
    stale = [
        e.pattern for e in CATALOG if not any(_matches(e.pattern.split("."), k) for k in layout)
    ]
    assert not stale, f"catalog entries that match no report key: {stale}"
    patterns = [e.pattern for e in CATALOG]
    assert len(patterns) == len(set(patterns))


def test_the_catalog_covers_the_sample_report_exactly(sample_report: Path) -> None:
    items = _report_items(json.loads(sample_report.read_text()))
    ambiguous = {k: [e.pattern for e in entries_for(p)] for k, (p, _) in items.items()}
    assert all(len(found) == 1 for found in ambiguous.values()), {
        k: v for k, v in ambiguous.items() if len(v) != 1
    }
    unused = [
        e.pattern
        for e in CATALOG
        if not any(_matches(e.pattern.split("."), parts) for parts, _ in items.values())
    ]
    assert unused and all(p.startswith(NOT_IN_THE_SAMPLE) for p in unused), unused


def test_state_and_text_are_not_listed(sample_report: Path) -> None:
    keys = [m.key for m in metrics(sample_report)]
    assert not any(k.startswith(("state.", "tool.", "warnings", "schema_version")) for k in keys)
    assert "inputs.N.path" not in keys and "ratios.token.distribution.count" in keys


def test_every_listed_key_is_what_a_rule_reads(sample_report: Path) -> None:
    document = json.loads(sample_report.read_text())
    rows = metrics(sample_report)
    assert len(rows) > 900
    for row in rows:
        if isinstance(row.value, list):
            # N is any position: check reads .0 as the first and .-1 as the last
            first, last = (row.key.replace(".N", f".{i}", 1) for i in (0, -1))
            if row.key.count(".N") == 1:
                assert lookup(document, first) == row.value[0], row.key
                assert lookup(document, last) == row.value[-1], row.key
        else:
            assert lookup(document, row.key) == row.value, row.key


def test_search_finds_the_switch_frequency(sample_report: Path) -> None:
    assert [m.key for m in metrics(search="switch")] == ["ratios.*.switch_frequency"]
    found = {m.key: m.value for m in metrics(sample_report, search="SWITCH frequency")}
    assert set(found) == {f"ratios.{v}.switch_frequency" for v in ("token", "sequence", "kalman")}
    assert found["ratios.kalman.switch_frequency"] == 0.0
    assert 0.3 < found["ratios.token.switch_frequency"] < 0.5


def test_section_filter() -> None:
    rows = metrics(section="mismatch")
    assert rows and {m.section for m in rows} == {"mismatch"}
    assert "mismatch.rollout.k3" in [m.key for m in rows]
    with pytest.raises(ParameterError, match="section must be one of"):
        metrics(section="state")


def test_an_old_report_lists_too() -> None:
    rows = metrics(ROOT / "tests" / "data" / "report_schema1.json")
    assert any(m.key == "ratios.token.switch_frequency" for m in rows)


def test_an_eval_report_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "eval.json"
    path.write_text(json.dumps({"schema_version": 1, "by_method": {}}))
    with pytest.raises(ReportError, match="not an analyze report"):
        metrics(path)


def test_cli_lists_the_layout_without_a_report() -> None:
    result = runner.invoke(app, ["metrics", "--search", "switch"])
    assert result.exit_code == 0, result.output
    assert "ratios.*.switch_frequency" in result.output
    assert "switches/token" in result.output


def test_cli_prints_the_values_of_a_report(sample_report: Path) -> None:
    result = runner.invoke(app, ["metrics", str(sample_report), "--section", "ratios"])
    assert result.exit_code == 0, result.output
    assert "ratios.token.switch_frequency" in result.output
    assert "0.400557" in result.output
    assert "mismatch." not in result.output
    as_json = runner.invoke(app, ["metrics", str(sample_report), "-s", "chi2_token", "--json"])
    rows = json.loads(as_json.output)
    assert [r["key"] for r in rows] == ["mismatch.policy.chi2_token", "mismatch.rollout.chi2_token"]
    assert set(rows[0]) == {"key", "section", "unit", "meaning", "value"}


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("samples.jsonl", "not valid JSON"),
        ("missing.json", "cannot read the report"),
        ("eval.json", "not an analyze report"),
    ],
)
def test_cli_errors_are_one_sentence_and_exit_2(tmp_path: Path, target: str, message: str) -> None:
    (tmp_path / "samples.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    (tmp_path / "eval.json").write_text(json.dumps({"schema_version": 2, "by_method": {}}))
    result = runner.invoke(app, ["metrics", str(tmp_path / target)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ratioscope: error: ")
    assert message in lines[0]


def test_cli_unknown_section_names_the_option() -> None:
    result = runner.invoke(app, ["metrics", "--section", "nope"])
    assert result.exit_code == 2
    assert "--section must be one of inputs, params, ratios" in result.output
