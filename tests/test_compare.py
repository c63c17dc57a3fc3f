"""``compare``: two reports or two timelines side by side, and the CLI around it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

import ratioscope
from ratioscope.cli import app
from ratioscope.errors import ParameterError, UsageError
from ratioscope.views.compare import DEFAULT_FLOOR, DEFAULT_REL, compare, difference
from ratioscope.views.timeline import HEADLINES

DATA = Path(__file__).parent / "data"
REPORT_A = DATA / "report_schema1.json"
REPORT_B = DATA / "report_schema1_step24.json"
SAMPLES = Path(__file__).parents[1] / "sample_data" / "samples.jsonl"
runner = CliRunner()


def _by_hand(document: dict) -> dict[str, float]:
    """A few headlines read from the JSON without ratioscope's lookup."""
    tr = document["trust_region"]
    return {
        "mismatch.policy.k3": document["mismatch"]["policy"]["k3"],
        "ratios.token.clip_fraction": document["ratios"]["token"]["clip_fraction"],
        "covariance.cumulative_share.0.01": document["covariance"]["cumulative_share"]["0.01"],
        "trust_region.degenerate_share": tr["degenerate"] / tr["groups"],
    }


def test_report_differences_match_the_documents():
    a_doc, b_doc = (json.loads(p.read_text()) for p in (REPORT_A, REPORT_B))
    result = compare(REPORT_A, REPORT_B)
    assert result.kind == "reports" and not result.steps
    assert [row.key for row in result.headlines] == [h.key for h in HEADLINES]
    rows = {row.key: row.total for row in result.headlines}
    a_vals, b_vals = _by_hand(a_doc), _by_hand(b_doc)
    for key, a in a_vals.items():
        b = b_vals[key]
        total = rows[key]
        assert total.a == pytest.approx(a, rel=1e-12) and total.b == pytest.approx(b, rel=1e-12)
        assert total.diff == pytest.approx(b - a, rel=1e-12, abs=1e-15)
        assert total.rel_diff == pytest.approx((b - a) / abs(a), rel=1e-12)
        assert total.diverges == (abs(b - a) > 0.2 * max(abs(a), abs(b), 1e-6))
    # 8 of 16 degenerate groups against 2 of 16: -75 %, diverges
    assert rows["trust_region.degenerate_share"].rel_diff == pytest.approx(-0.75)
    assert rows["trust_region.degenerate_share"].diverges
    # the documents and a Report compare like the files
    assert compare(a_doc, ratioscope.Report.from_dict(b_doc)).headlines == result.headlines


def test_difference_rule_and_parameters():
    assert (DEFAULT_REL, DEFAULT_FLOOR) == (0.2, 1e-6)
    assert not difference(1.0, 1.2).diverges  # 0.2 is not > 0.2 * 1.2
    assert difference(1.0, 1.3).diverges
    assert difference(-1.0, 1.0).rel_diff == 2.0
    assert difference(0.0, 1.0).rel_diff is None and difference(0.0, 1.0).diverges
    assert not difference(1e-13, 3e-13).diverges  # below the floor
    assert difference(None, 1.0) == difference(None, 1.0, rel=0.01)
    assert not difference(1.0, None).diverges
    with pytest.raises(ParameterError, match="rel"):
        compare(REPORT_A, REPORT_B, rel=0)
    with pytest.raises(ParameterError, match="floor"):
        compare(REPORT_A, REPORT_B, floor=-1.0)


def _timeline(values: dict[int, float], key: str = "mismatch.policy.k3") -> dict:
    """A timeline document: ``key`` set per step, the other headlines 0.5 (equal in A, B)."""
    return {
        "schema_version": 1,
        "kind": "timeline",
        "tool": {"name": "ratioscope"},
        "params": {},
        "headlines": [
            {"key": h.key, "label": h.label, "unit": h.unit, "rise": h.rise} for h in HEADLINES
        ],
        "steps": [
            {
                "step": step,
                "inputs": [f"step_{step}.pt"],
                "values": {h.key: value if h.key == key else 0.5 for h in HEADLINES},
                "flags": [],
            }
            for step, value in values.items()
        ],
    }


def test_timelines_are_aligned_on_shared_steps_and_divergence_is_local():
    a = {step: 1.0 + 0.01 * step for step in range(0, 20, 2)}
    b = {step: value * 1.05 for step, value in a.items() if step != 6}  # step 6 only in A
    b[22] = 1.3  # only in B
    b[12] = a[12] * 1.5  # injected divergence
    result = compare(_timeline(a), _timeline(b))
    assert result.kind == "timelines"
    assert [s.step for s in result.steps] == [0, 2, 4, 8, 10, 12, 14, 16, 18]
    assert (result.only_a, result.only_b) == ((6,), (22,))
    rows = {row.key: row for row in result.headlines}
    assert rows["mismatch.policy.k3"].diverging_steps == (12,)
    assert all(not row.diverging_steps for key, row in rows.items() if key != "mismatch.policy.k3")
    for step in result.steps:
        d = step.values["mismatch.policy.k3"]
        assert (d.a, d.b) == (a[step.step], b[step.step])
        assert d.diff == pytest.approx(b[step.step] - a[step.step])
        assert step.diverging == (("mismatch.policy.k3",) if step.step == 12 else ())
    shared = [s.step for s in result.steps]
    total = rows["mismatch.policy.k3"].total
    assert total.a == pytest.approx(sum(a[s] for s in shared) / len(shared))
    assert total.b == pytest.approx(sum(b[s] for s in shared) / len(shared))
    # a stricter threshold flags the 5 % offset everywhere
    strict = compare(_timeline(a), _timeline(b), rel=0.01)
    assert {r.key: r for r in strict.headlines}["mismatch.policy.k3"].diverging_steps == tuple(
        shared
    )


def test_timeline_against_report_is_a_usage_error():
    with pytest.raises(UsageError, match="cannot compare a timeline"):
        compare(_timeline({1: 1.0}), REPORT_A)


def test_cli_table_and_json(tmp_path):
    out = tmp_path / "cmp.json"
    result = runner.invoke(app, ["compare", str(REPORT_A), str(REPORT_B), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "QUATRO deg" in result.output and "-75.0%*" in result.output
    document = json.loads(out.read_text())
    assert document["kind"] == "comparison" and document["compared"] == "reports"
    row = next(r for r in document["headlines"] if r["key"] == "mismatch.policy.k3")
    assert math.isclose(row["total"]["a"], 8.940674340815114e-05)


def test_cli_timelines_list_diverging_and_unshared_steps(tmp_path):
    paths = []
    for name, values in (("a", {2: 1.0, 4: 1.0, 6: 1.0}), ("b", {2: 1.0, 4: 2.0, 8: 1.0})):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(_timeline(values)))
    result = runner.invoke(app, ["compare", *map(str, paths)], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "steps only in A: 6; only in B: 8" in result.output
    assert "diverging steps" in result.output


def test_cli_refuses_a_samples_file_in_one_sentence():
    result = runner.invoke(app, ["compare", str(SAMPLES), str(REPORT_A)])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "neither an analyze report, a timeline JSON nor a dump" in lines[0]
    assert lines[0].startswith("ratioscope: error:")


def test_a_reward_function_only_one_run_has_shows_that_run_s_mean():
    """The bundled length-hack run has a 'length' reward function the healthy run has not:
    its row gives B's mean over the shared steps and A's as missing (it was blank)."""
    runs = Path(__file__).parents[1] / "sample_data" / "runs"
    healthy = ratioscope.timeline(runs / "healthy-s1" / "capture")
    hacked = ratioscope.timeline(runs / "shaping_hack-s1" / "capture")
    key = "vitals.reward.per_function.length.mean"
    result = compare(healthy, hacked)
    row = {r.key: r for r in result.headlines}[key]
    shared = {s.step for s in healthy.steps} & {s.step for s in hacked.steps}
    values = [s.values[key] for s in hacked.steps if s.step in shared]
    assert len(values) == len(shared) >= 20 and all(v is not None for v in values)
    assert row.total.a is None and row.total.diff is None
    assert row.total.b == pytest.approx(sum(values) / len(values))


def _damaged(tmp_path: Path, document: dict, name: str) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d.update(ratios="oops"), "malformed analyze report: ratios: expected an object"),
        (lambda d: d["ratios"].update(token=None), "malformed analyze report: ratios.token:"),
    ],
)
def test_a_damaged_report_is_refused_naming_where(tmp_path, damage, message):
    """A hand-edited report whose section is not an object: refused as metrics and merge
    refuse it (compare used to leave the section out of the table without a word)."""
    document = json.loads(REPORT_B.read_text())
    damage(document)
    result = runner.invoke(
        app, ["compare", str(REPORT_A), str(_damaged(tmp_path, document, "b.json"))]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d.update(steps="oops"), "malformed timeline: steps: expected a list, found str"),
        (
            lambda d: d["steps"][1].update(values="x"),
            "malformed timeline: steps.1.values: expected an object, found str",
        ),
        (lambda d: d["steps"][0].pop("flags"), "malformed timeline: steps.0: no 'flags' key"),
        (lambda d: d.pop("headlines"), "malformed timeline: no 'headlines' key"),
    ],
)
def test_a_damaged_timeline_is_refused_naming_where(tmp_path, damage, message):
    """A step's values that are not an object ended in an internal error (exit 3)."""
    good = _damaged(tmp_path, _timeline({1: 0.1, 2: 0.2}), "a.json")
    document = _timeline({1: 0.1, 2: 0.2})
    damage(document)
    result = runner.invoke(app, ["compare", str(good), str(_damaged(tmp_path, document, "b.json"))])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
